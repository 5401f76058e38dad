"""Bad input through the real command line: exit status 2 and one `error:` line, never a traceback.

Each case runs `python -m sim.views.cli` in a subprocess on a small scenario written to tmp_path (20
fixed-length requests), and checks that the one line names the field, the value given and, where
the message says so, what is allowed.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import one_error_line, servesim, small_scenario


SMALL = small_scenario({'hardware': {'tensor_parallel': 1, 'num_replicas': 1},
                        'workload': {'lengths': {'output_tokens': 16}},
                        'variants': {'a': {}, 'b': {'kv_cache': {'block_size': 32}}}})

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"




def write_scenario(folder: Path, data: dict, name: str = "scenario.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def with_changes(**sections) -> dict:
    data = yaml.safe_load(yaml.safe_dump(SMALL))
    data.update(sections)
    return data


def trace_workload(path: str) -> dict:
    return {"arrival": {"kind": "trace", "path": path, "format": "azure"}, "lengths": {"kind": "trace"}}


def test_the_small_scenario_runs(tmp_path):
    """The cases below fail for the reason they name, not because the base scenario is broken."""
    path = write_scenario(tmp_path, SMALL)
    result = servesim("run", str(path), "--quiet", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


# (id, how to build the command from the scenario path, strings the one line must contain)
SET_CASES = [
    ("unknown-model", ["--set", "model=gpt-17"], ["model:", "'gpt-17'", "allowed:", "llama-3.1-8b"]),
    ("unknown-gpu", ["--set", "hardware.gpu=tpu-v9"], ["hardware.gpu:", "'tpu-v9'", "allowed:", "h100-sxm"]),
    ("negative-rate", ["--set", "workload.arrival.rate_per_s=-1"],
     ["workload.arrival.rate_per_s:", "-1", "allowed: > 0"]),
    ("tp-does-not-divide-heads", ["--set", "model=qwen2.5-7b", "--set", "hardware.tensor_parallel=3"],
     ["hardware.tensor_parallel:", "3", "qwen2.5-7b", "allowed: 1, 2, 4, 28"]),
    ("block-size-zero", ["--set", "kv_cache.block_size=0"], ["kv_cache.block_size:", "0", "allowed: >= 1"]),
    ("rank-by-repeated", ["--set", "slo.rank_by=[e2e,ttft,e2e]"],
     ["slo.rank_by:", "e2e named more than once",
      "allowed: each of goodput, ttft, tpot, e2e, throughput at most once"]),
    ("rank-by-unknown", ["--set", "slo.rank_by=[latency]"], ["slo.rank_by[0]:", "latency", "allowed:", "'e2e'"]),
    ("rank-by-one-variant", ["--set", "variants.b.slo.rank_by=[e2e]"],
     ["variants.b.slo.rank_by:", "[e2e]", "the file's default order", "allowed: one order for every variant"]),
    ("unknown-top-level-key-via-set", ["--set", "schedular.max_num_seqs=8"],
     ["schedular:", "unknown key", "did you mean 'scheduler'", "allowed:"]),
    ("unknown-nested-key", ["--set", "scheduler.max_num_seq=8"],
     ["scheduler.max_num_seq:", "unknown key", "did you mean 'max_num_seqs'"]),
    ("bad-enum", ["--set", "scheduler.batching=dynamic"],
     ["scheduler.batching:", '"dynamic"', "allowed: 'continuous' or 'static'"]),
    ("bad-router", ["--set", "hardware.router=fastest"],
     ["hardware.router:", '"fastest"', "'least_outstanding'"]),
    ("set-without-equals", ["--set", "model"], ["--set:", "'model'", "path.to.key=value"]),
    ("set-empty-key", ["--set", "=3"], ["--set:", "'=3'", "empty key"]),
    ("unknown-variant", ["--variant", "zz"], ["--variant:", "'zz'", "allowed: a, b"]),
    ("int-given-a-fraction", ["--set", "hardware.tensor_parallel=1.5"],
     ["hardware.tensor_parallel:", "1.5", "an integer"]),
    ("bool-given-a-word", ["--set", "scheduler.chunked_prefill=maybe"],
     ["scheduler.chunked_prefill:", '"maybe"', "true or false"]),
    ("optional-float-given-a-word", ["--set", "slo.ttft_s=soon"], ["slo.ttft_s:", '"soon"', "allowed: a number"]),
    ("unknown-arrival-kind", ["--set", "workload.arrival.kind=bursty"],
     ["workload.arrival.kind:", '"bursty"', "allowed: poisson, gamma"]),
    ("arrival-without-kind", ["--set", "workload.arrival={rate_per_s: 3}"],
     ["workload.arrival.kind: missing", "allowed: poisson"]),
    ("unknown-key-in-variant", ["--set", "variants.b.kv_cache.blok=3"],
     ["variants.b.kv_cache.blok:", "unknown key", "block_size"]),
    ("bad-value-in-variant", ["--set", "variants.b.kv_cache.block_size=-3"],
     ["variants.b.kv_cache.block_size:", "-3", ">= 1"]),
    ("model-neither-name-nor-mapping", ["--set", "model=5"],
     ["model:", "5", "a catalog name or an inline ModelSpec mapping"]),
    ("inline-model-missing-keys", ["--set", "model={name: tiny, num_layers: 2}"],
     ["model: missing required keys", "hidden_size", "max_context"]),
    ("cross-field-rule", ["--set", "scheduler.batching=static", "--set", "scheduler.chunked_prefill=true"],
     ["scheduler:", "chunked_prefill needs batching 'continuous'"]),
    ("max-model-len-too-long", ["--set", "scheduler.max_model_len=999999"],
     ["scheduler.max_model_len:", "999999", "131072"]),
    ("max-model-len-beyond-any-model", ["--set", "scheduler.max_model_len=999999999"],
     ["scheduler.max_model_len:", "999999999", "16777216"]),
]


@pytest.mark.parametrize("args, needles", [c[1:] for c in SET_CASES], ids=[c[0] for c in SET_CASES])
def test_bad_values_and_overrides(tmp_path, args, needles):
    path = write_scenario(tmp_path, SMALL)
    line = one_error_line(servesim("run", str(path), "--quiet", *args, cwd=tmp_path))
    for needle in needles:
        assert needle in line, (needle, line)


def test_unknown_top_level_key_in_file(tmp_path):
    path = write_scenario(tmp_path, with_changes(schedular={"max_num_seqs": 8}))
    line = one_error_line(servesim("validate", str(path), cwd=tmp_path))
    assert line.startswith("error: schedular: unknown key")
    assert "did you mean 'scheduler'" in line


def test_unknown_key_in_a_variant_section_of_the_file(tmp_path):
    data = with_changes(variants={"a": {}, "typo": {"scheduler": {"max_num_seq": 8}}})
    line = one_error_line(servesim("validate", str(write_scenario(tmp_path, data)), cwd=tmp_path))
    assert "variants.typo.scheduler.max_num_seq: unknown key" in line


def test_missing_trace_file(tmp_path):
    path = write_scenario(tmp_path, with_changes(workload=trace_workload("missing.csv")))
    line = one_error_line(servesim("run", str(path), "--quiet", cwd=tmp_path))
    assert "workload.arrival.path:" in line and "missing.csv" in line and "not found" in line


def test_malformed_trace_row_names_file_and_line(tmp_path):
    trace = tmp_path / "bad_azure.csv"
    trace.write_text(AZURE_HEADER + "2023-11-16 18:15:46.6805900,374,44\n"
                     "2023-11-16 18:15:47.0000000,12x,20\n")
    path = write_scenario(tmp_path, with_changes(workload=trace_workload("bad_azure.csv")))
    line = one_error_line(servesim("run", str(path), "--quiet", cwd=tmp_path))
    for needle in ("workload.arrival.path:", "bad_azure.csv", "line 3", "ContextTokens", "12x"):
        assert needle in line, (needle, line)


def test_yaml_syntax_error(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: broken\nworkload: {arrival: [1, 2\nrun: {num_requests: 3}\n")
    line = one_error_line(servesim("validate", str(path), cwd=tmp_path))
    assert "broken.yaml" in line and re.search(r"line \d+", line), line


def test_missing_scenario_file(tmp_path):
    line = one_error_line(servesim("run", "no_such_scenario.yaml", cwd=tmp_path))
    assert "no_such_scenario.yaml" in line and "not found" in line


def test_scenario_that_is_not_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- just\n- a list\n")
    line = one_error_line(servesim("validate", str(path), cwd=tmp_path))
    assert "list.yaml" in line and "mapping" in line


@pytest.mark.parametrize("command", ["run", "validate"])
def test_model_that_does_not_fit(tmp_path, command):
    path = write_scenario(tmp_path, with_changes(model="llama-3.1-70b", hardware={"gpu": "l4"}))
    line = one_error_line(servesim(command, str(path), *(["--quiet"] if command == "run" else []), cwd=tmp_path))
    assert line.startswith("error: hardware:") and "llama-3.1-70b" in line and "l4" in line
    byte_counts = re.findall(r"\d{1,3}(?:,\d{3}){3,}", line)  # "141,540,737,024 bytes" style numbers
    assert len(byte_counts) >= 2, line


def test_model_that_does_not_fit_in_one_variant_of_a_comparison(tmp_path):
    data = with_changes(variants={"fits": {}, "too_big": {"model": "llama-3.1-70b", "hardware": {"gpu": "l4"}}})
    path = write_scenario(tmp_path, data)
    line = one_error_line(servesim("compare", str(path), "--quiet", "--out", str(tmp_path / "out"),
                                   cwd=tmp_path))
    assert "llama-3.1-70b" in line and "bytes" in line
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_run_with_neither_num_requests_nor_duration(tmp_path):
    path = write_scenario(tmp_path, with_changes(run={"seed": 0}))
    line = one_error_line(servesim("run", str(path), "--quiet", cwd=tmp_path))
    assert line.startswith("error: run:") and "num_requests" in line and "duration_s" in line


def test_unknown_catalog(tmp_path):
    line = one_error_line(servesim("catalog", "foo", cwd=tmp_path))
    assert "'foo'" in line and "allowed: models, gpus" in line


def test_unknown_variant_of_the_workload_command(tmp_path):
    path = write_scenario(tmp_path, SMALL)
    line = one_error_line(servesim("workload", str(path), "--variant", "zz", cwd=tmp_path))
    assert "--variant" in line and "'zz'" in line and "allowed:" in line


@pytest.mark.parametrize("args, needle", [
    (["no-such-command"], "no-such-command"),
    (["run"], "scenario"),
    (["run", "x.yaml", "--no-such-option"], "--no-such-option"),
    (["run", "x.yaml", "--variant"], "--variant"),
], ids=["unknown-command", "missing-argument", "unknown-option", "option-without-value"])
def test_usage_errors(tmp_path, args, needle):
    line = one_error_line(servesim(*args, cwd=tmp_path))
    assert needle in line
