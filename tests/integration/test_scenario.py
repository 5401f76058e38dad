"""Scenario files: base + variants, strict keys, --set overrides, inline specs, paths, the shipped files."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from helpers import SUBPROCESS_TIMEOUT_S
from sim.config.deployment import resolve
from sim.config.files import (
    apply_overrides,
    build_scenario_set,
    load_scenario_set,
    validate_scenario,
)
from sim.config.schema import Scenario
from sim.errors import ConfigError
from sim.model.catalog import get_gpu, get_model
from sim.model.specs import GPUSpec, ModelSpec
from sim.run import make_workload, simulate

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml"))
TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"

BASE = {
    "name": "base",
    "model": "llama-3.1-8b",
    "hardware": {"gpu": "h100-sxm"},
    "workload": {
        "arrival": {"kind": "poisson", "rate_per_s": 5.0},
        "lengths": {"kind": "fixed", "input_tokens": 64, "output_tokens": 8},
    },
    "scheduler": {"max_num_seqs": 64, "max_model_len": 2048, "chunked_prefill": False},
    "kv_cache": {"layout": "paged", "block_size": 16},
    "run": {"seed": 3, "num_requests": 20},
}


def raw(**extra) -> dict:
    data = copy.deepcopy(BASE)
    data.update(copy.deepcopy(extra))
    return data


def servesim(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "sim.views.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)


# --------------------------------------------------------------------------------------------------
# Base + variants


def test_variant_overriding_one_nested_key_keeps_the_others():
    data = raw(variants={"chunked": {"scheduler": {"chunked_prefill": True, "max_num_batched_tokens": 512}}})
    scenario_set = build_scenario_set(data)
    chunked = scenario_set.variants["chunked"]
    assert chunked.scheduler.chunked_prefill is True
    assert chunked.scheduler.max_num_batched_tokens == 512
    assert chunked.scheduler.max_num_seqs == 64  # from the base
    assert chunked.scheduler.max_model_len == 2048  # from the base
    assert chunked.workload == scenario_set.base.workload
    assert chunked.run == scenario_set.base.run
    assert scenario_set.base.scheduler.chunked_prefill is False  # the base is untouched


def test_variant_deep_merge_reaches_two_levels_down():
    data = raw(variants={"faster": {"workload": {"arrival": {"rate_per_s": 9.0}}}})
    faster = build_scenario_set(data).variants["faster"]
    assert faster.workload.arrival.kind == "poisson"
    assert faster.workload.arrival.rate_per_s == 9.0
    assert faster.workload.lengths.input_tokens == 64


def test_variants_are_named_by_their_key_unless_they_set_a_name():
    data = raw(variants={"a": {}, "b": {"name": "custom"}})
    scenario_set = build_scenario_set(data)
    assert list(scenario_set.variants) == ["a", "b"]
    assert scenario_set.variants["a"].name == "a"
    assert scenario_set.variants["b"].name == "custom"
    assert scenario_set.base.name == "base"


def test_a_file_without_variants_has_the_base_as_its_only_variant():
    scenario_set = build_scenario_set(raw())
    assert scenario_set.items() == [("base", scenario_set.base)]


def test_the_input_dict_is_not_modified():
    data = raw(variants={"a": {"kv_cache": {"block_size": 32}}})
    before = copy.deepcopy(data)
    build_scenario_set(data, overrides=["run.num_requests=5"])
    assert data == before


# --------------------------------------------------------------------------------------------------
# Unknown keys


@pytest.mark.parametrize("path, value, where", [
    (["schedular"], {"max_num_seqs": 8}, "schedular"),
    (["scheduler", "max_num_seq"], 8, "scheduler.max_num_seq"),
    (["workload", "arrival", "rate"], 3, "workload.arrival.rate"),
    (["hardware", "gpus"], 2, "hardware.gpus"),
])
def test_unknown_keys_are_rejected_in_the_base(path, value, where):
    data = raw()
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(ConfigError, match=rf"^{where}: unknown key"):
        build_scenario_set(data)


@pytest.mark.parametrize("override, where", [
    ({"schedular": {"max_num_seqs": 8}}, "variants.typo.schedular"),
    ({"scheduler": {"max_num_seq": 8}}, "variants.typo.scheduler.max_num_seq"),
    ({"workload": {"lengths": {"input_token": 8}}}, "variants.typo.workload.lengths.input_token"),
])
def test_unknown_keys_are_rejected_in_variants(override, where):
    data = raw(variants={"ok": {}, "typo": override})
    with pytest.raises(ConfigError, match=rf"^{where}: unknown key") as info:
        build_scenario_set(data)
    assert "\n" not in str(info.value)


def test_a_bad_value_in_a_variant_names_the_variant():
    data = raw(variants={"bad": {"kv_cache": {"block_size": 0}}})
    with pytest.raises(ConfigError, match=r"^variants\.bad\.kv_cache\.block_size: 0 is not allowed; allowed: >= 1"):
        build_scenario_set(data)


def test_unknown_key_message_suggests_the_closest_key():
    with pytest.raises(ConfigError, match="did you mean 'max_num_seqs'"):
        validate_scenario(raw(scheduler={"max_num_seq": 8}))


def test_unknown_key_message_suggests_the_files_word_and_the_section_a_key_belongs_in():
    # vLLM's bench says "prompt" where the file says "input": the closest spelling alone would be output_tokens
    lengths = {"kind": "fixed", "prompt_tokens": 100, "output_tokens": 10}
    with pytest.raises(ConfigError, match=r"^workload\.lengths\.prompt_tokens: unknown key for kind 'fixed' "
                                          r"\(did you mean 'input_tokens'\?\)"):
        validate_scenario(raw(workload={**BASE["workload"], "lengths": lengths}))
    with pytest.raises(ConfigError, match=r"^workload\.num_requests: unknown key \(did you mean 'run\.num_requests'"):
        validate_scenario(raw(workload={**BASE["workload"], "num_requests": 5}))
    top = {key: value for key, value in raw().items() if key != "hardware"}
    with pytest.raises(ConfigError, match=r"^gpu: unknown key \(did you mean 'hardware\.gpu'\?\)"):
        validate_scenario({**top, "gpu": "h100-sxm"})
    with pytest.raises(ConfigError, match=r"^workload\.zzz: unknown key; allowed: "):  # nothing near: no guess
        validate_scenario(raw(workload={**BASE["workload"], "zzz": 5}))


def test_union_tags_do_not_leak_into_field_paths():
    data = raw()
    data["workload"]["arrival"]["rate_per_s"] = -2
    with pytest.raises(ConfigError) as info:
        validate_scenario(data)
    assert str(info.value).startswith("workload.arrival.rate_per_s: -2 is not allowed")


# --------------------------------------------------------------------------------------------------
# --set overrides


def test_set_values_are_typed():
    out = apply_overrides({}, ["a.int=3", "a.float=2.5", "a.true=true", "a.false=false", "a.word=hello",
                               "a.list=[1, 2]", "a.map={x: 1}", "a.empty=", "a.null=null", "a.eq=x=y"])
    assert out == {"a": {"int": 3, "float": 2.5, "true": True, "false": False, "word": "hello",
                         "list": [1, 2], "map": {"x": 1}, "empty": "", "null": None, "eq": "x=y"}}
    assert type(out["a"]["int"]) is int and type(out["a"]["float"]) is float


def test_one_setter_creates_missing_mappings_and_refuses_a_path_through_a_value():
    from sim.config.files import set_path
    from sim.tools.sweep import apply_point
    out = apply_overrides({"speculation": None}, ["speculation.num_speculative_tokens=3", "slo.ttft_s=null"])
    assert out == {"speculation": {"num_speculative_tokens": 3}, "slo": {"ttft_s": None}}
    shared = [1, 2]
    d: dict = {}
    set_path(d, "a.list", shared)
    shared.append(3)
    assert d == {"a": {"list": [1, 2]}}  # a copy: sweep points never share a value
    message = r"^{}: 'model.num_layers' goes through model, which is 'llama-3.1-8b', not a mapping; allowed: "
    with pytest.raises(ConfigError, match=message.format("--set")):
        apply_overrides({"model": "llama-3.1-8b"}, ["model.num_layers=4"])
    with pytest.raises(ConfigError, match=message.format("--grid")):
        apply_point({"model": "llama-3.1-8b"}, {"model.num_layers": 4})
    with pytest.raises(ConfigError, match=message.format("dashboard")):
        set_path({"model": "llama-3.1-8b"}, "model.num_layers", 4, source="dashboard")
    with pytest.raises(ConfigError, match=r"^--set: 'a..b' has an empty key"):
        set_path({}, "a..b", 1)


def test_set_overrides_reach_the_validated_scenario():
    scenario_set = build_scenario_set(raw(), overrides=[
        "run.num_requests=50", "workload.arrival.rate_per_s=2.5", "scheduler.chunked_prefill=true",
        "scheduler.max_num_batched_tokens=256",
        "slo.ttft_s=1.5",  # a section the file does not have
        "quantization.weights=fp8",
    ])
    base = scenario_set.base
    assert base.run.num_requests == 50
    assert base.workload.arrival.rate_per_s == 2.5
    assert base.scheduler.chunked_prefill is True
    assert base.scheduler.max_num_batched_tokens == 256
    assert base.slo.ttft_s == 1.5
    assert base.quantization.weights == "fp8"


def test_set_wins_over_a_variants_own_value_but_leaves_its_name():
    data = raw(variants={"a": {}, "b": {"kv_cache": {"block_size": 32}, "run": {"num_requests": 7}},
                         "c": {"name": "custom", "kv_cache": {"layout": "contiguous"}}})
    assert build_scenario_set(copy.deepcopy(data)).variants["b"].kv_cache.block_size == 32  # (the file's own)
    scenario_set = build_scenario_set(data, overrides=["kv_cache.block_size=8", "name=renamed"])
    assert [v.kv_cache.block_size for v in scenario_set.variants.values()] == [8, 8, 8]
    assert scenario_set.variants["b"].run.num_requests == 7  # the variant's other keys stay
    assert scenario_set.variants["c"].kv_cache.layout == "contiguous"
    assert scenario_set.base.name == "renamed"  # the file's name, not its variants'
    assert [v.name for v in scenario_set.variants.values()] == ["a", "b", "custom"]
    assert data["variants"]["b"]["kv_cache"]["block_size"] == 32  # the caller's mapping is not edited


def test_run_sets_a_flag_of_the_variant_it_runs_that_another_variants_engine_lacks():
    """engines.yaml's base and first variant name vLLM 0.11.0; SGLang's --max-running-requests is a flag only its
    SGLang variant has, and vLLM 0.6.3's --num-scheduler-steps one the file's variant sets to 8."""
    from sim.config.files import one_scenario, read_yaml
    engines = read_yaml(REPO / "scenarios" / "engines.yaml")
    sglang = one_scenario(copy.deepcopy(engines), "engines.yaml", ["engine.max_running_requests=64"],
                          "sglang-0.5.3.post3")
    assert sglang.engine.name == "sglang" and sglang.engine.model_extra["max_running_requests"] == 64
    assert sglang.scheduler.max_num_seqs == 64
    multistep = one_scenario(copy.deepcopy(engines), "engines.yaml", ["engine.num_scheduler_steps=4"],
                             "vllm-0.6.3-multistep")
    assert multistep.engine.model_extra["num_scheduler_steps"] == 4
    refused = r"^variants.vllm-0.11.0.engine.max_running_requests: not a flag of the vllm preset"
    with pytest.raises(ConfigError, match=refused):
        one_scenario(copy.deepcopy(engines), "engines.yaml", ["engine.max_running_requests=64"], "vllm-0.11.0")
    # a variant that is not run is still checked as written: a typo there refuses the run
    engines["variants"]["sglang-0.5.3.post3"]["engine"]["max_runing_requests"] = 8
    with pytest.raises(ConfigError, match=r"^variants.sglang-0.5.3.post3.engine.max_runing_requests: "):
        one_scenario(copy.deepcopy(engines), "engines.yaml", ["engine.max_running_requests=64"], "vllm-0.6.3-multistep")


def test_set_of_a_part_of_a_section_a_variant_replaces_by_a_value_leaves_that_variant():
    inline = get_model("llama-3.1-8b").model_dump(mode="json")
    data = raw(model=inline, variants={"inline": {}, "catalog": {"model": "qwen2.5-7b"}})
    scenario_set = build_scenario_set(data, overrides=["model.num_layers=8"])
    assert scenario_set.variants["inline"].model.num_layers == 8
    assert scenario_set.variants["catalog"].model == "qwen2.5-7b"  # its own model, whole


def test_a_set_key_a_variant_refuses_says_how_to_set_it_in_one_variant():
    from sim.config.files import read_yaml
    engines = read_yaml(REPO / "scenarios" / "engines.yaml")
    with pytest.raises(ConfigError, match=r"^engine.max_running_requests: not a flag of the vllm preset .* \(--set "
                       r"engine.max_running_requests is set in the base and in every variant giving engine; --set "
                       r"variants.NAME.engine.max_running_requests=... sets one variant's\)$"):
        build_scenario_set(copy.deepcopy(engines), overrides=["engine.max_running_requests=64"])
    with pytest.raises(ConfigError) as refused:  # a value no variant takes: no hint
        build_scenario_set(copy.deepcopy(engines), overrides=["run.num_requests=-1"])
    assert str(refused.value).startswith("run.num_requests:") and "--set" not in str(refused.value)
    one = build_scenario_set(copy.deepcopy(engines),
                             overrides=["variants.sglang-0.5.3.post3.engine.max_running_requests=64"])
    assert one.variants["sglang-0.5.3.post3"].scheduler.max_num_seqs == 64
    # the variant a refusal names, matched whole where one name begins another (v0 and v0.6.3)
    named = raw(engine={"name": "sglang", "version": "0.5.3.post3"},
                variants={"v0": {}, "v0.6.3": {"engine": {"name": "vllm", "version": "0.6.3"}}})
    with pytest.raises(ConfigError, match=r"^variants.v0.6.3.engine.max_running_requests: .* \(--set "
                       r"engine.max_running_requests is set in the base"):
        build_scenario_set(named, overrides=["engine.max_running_requests=64"])


def test_set_into_a_variant_whose_name_has_dots():
    data = raw(variants={"v0.6.3": {"kv_cache": {"block_size": 32}}, "v0": {}})
    scenario_set = build_scenario_set(data, overrides=["variants.v0.6.3.kv_cache.block_size=8"])
    assert scenario_set.variants["v0.6.3"].kv_cache.block_size == 8
    assert scenario_set.variants["v0"].kv_cache.block_size == 16
    assert list(scenario_set.variants) == ["v0.6.3", "v0"]


def test_set_into_a_variant_and_to_create_one():
    data = raw(variants={"a": {}, "b": {"kv_cache": {"block_size": 32}}})
    scenario_set = build_scenario_set(data, overrides=[
        "variants.b.kv_cache.block_size=8", "variants.two_replicas.hardware.num_replicas=2"])
    assert scenario_set.variants["b"].kv_cache.block_size == 8
    assert scenario_set.variants["two_replicas"].hardware.num_replicas == 2
    assert scenario_set.variants["a"].hardware.num_replicas == 1


def test_set_a_whole_section_as_a_mapping():
    scenario_set = build_scenario_set(raw(), overrides=["workload.arrival={kind: constant, rate_per_s: 4}"])
    assert scenario_set.base.workload.arrival.kind == "constant"
    assert scenario_set.base.workload.arrival.rate_per_s == 4


# --------------------------------------------------------------------------------------------------
# Inline model and GPU definitions


def _inline(name_suffix: str = "") -> dict:
    model = get_model("llama-3.1-8b").model_dump(exclude_none=True)
    gpu = get_gpu("h100-sxm").model_dump(exclude_none=True)
    model["name"], gpu["name"] = "my-8b" + name_suffix, "my-gpu" + name_suffix
    return raw(model=model, hardware={"gpu": gpu})


def test_inline_model_and_gpu_validate():
    scenario = validate_scenario(_inline())
    assert isinstance(scenario.model, ModelSpec) and resolve(scenario).model.name == "my-8b"
    assert isinstance(scenario.hardware.gpu, GPUSpec) and resolve(scenario).gpu.name == "my-gpu"
    assert resolve(scenario).max_model_len == 2048


def test_inline_copies_of_catalog_entries_simulate_like_the_catalog():
    # one cost model for both (by default a catalog model may get a whole-step profile an inline copy has not)
    roofline = {"cost_model": {"kind": "roofline"}}
    inline = simulate(validate_scenario({**_inline(), **roofline}))
    catalog = simulate(validate_scenario(raw(**roofline)))
    pd.testing.assert_frame_equal(inline.requests, catalog.requests)
    assert inline.summary["kv_capacity_tokens"] == catalog.summary["kv_capacity_tokens"]


def test_inline_model_checks_its_own_rules():
    data = _inline()
    data["model"]["num_kv_heads"] = 5  # 32 heads are not a multiple of 5
    with pytest.raises(ConfigError, match=r"^model: num_attention_heads=32 is not a multiple of num_kv_heads=5"):
        validate_scenario(data)


def test_inline_gpu_with_a_misspelt_key():
    data = _inline()
    data["hardware"]["gpu"]["hbm_byte"] = data["hardware"]["gpu"].pop("hbm_bytes")
    with pytest.raises(ConfigError, match=r"^hardware\.gpu\.hbm_byte: unknown key \(did you mean 'hbm_bytes'\?\)"):
        validate_scenario(data)


# --------------------------------------------------------------------------------------------------
# The schema and the shipped scenarios


def test_schema_command_prints_json_with_every_section():
    result = servesim("schema")
    assert result.returncode == 0, result.stderr
    schema = json.loads(result.stdout)
    for section in ("name", "model", "hardware", "workload", "scheduler", "kv_cache", "quantization",
                    "cost_model", "slo", "run", "variants"):
        assert section in schema["properties"], section


def test_scenarios_folder_is_not_empty():
    names = {p.name for p in SCENARIOS}
    assert {"quickstart.yaml", "trace_replay.yaml", "llama70b_tp4.yaml"} <= names


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_shipped_scenario_validates(path):
    result = servesim("validate", str(path.relative_to(REPO)))
    assert result.returncode == 0, result.stderr
    assert "valid" in result.stdout
    assert path.read_text().startswith("#"), "a shipped scenario starts with a header comment"


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_shipped_scenario_round_trips_through_to_yaml(path):
    for name, scenario in load_scenario_set(path).items():
        again = Scenario.model_validate(yaml.safe_load(scenario.to_yaml()))
        assert again == scenario, name


def test_to_yaml_round_trips_inline_specs_and_every_section():
    scenario = validate_scenario(_inline() | {
        "slo": {"ttft_s": 1.0, "percentile": 95},
        "cost_model": {"kind": "fixed", "prefill_s": 0.01, "decode_s": 0.002},
        "quantization": {"weights": "fp8", "kv_cache": "fp8"},
        "workload": {"arrival": {"kind": "schedule", "steps": [{"duration_s": 5, "rate_per_s": 2},
                                                               {"duration_s": 5, "rate_per_s": 0}]},
                     "lengths": {"kind": "uniform", "input_min": 8, "input_max": 16,
                                 "output_min": 1, "output_max": 4}},
    })
    text = scenario.to_yaml()
    again = validate_scenario(yaml.safe_load(text))
    assert again == scenario
    assert again.to_yaml() == text


def test_llama70b_variants_fit_in_memory():
    scenario_set = load_scenario_set(REPO / "scenarios" / "llama70b_tp4.yaml")
    layouts = {(s.hardware.tensor_parallel, s.hardware.num_replicas) for s in scenario_set.variants.values()}
    assert layouts == {(4, 2), (8, 1)}
    for scenario in scenario_set.variants.values():
        assert resolve(scenario).kv_capacity_tokens > resolve(scenario).max_model_len  # at least one full-length request


# --------------------------------------------------------------------------------------------------
# Relative paths


AZURE_ROWS = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
              "2023-11-16 18:15:46.0000000,100,10\n"
              "2023-11-16 18:15:47.0000000,200,20\n"
              "2023-11-16 18:15:49.0000000,300,30\n")


def test_relative_trace_paths_resolve_against_the_scenario_folder(tmp_path, monkeypatch):
    folder = tmp_path / "project" / "scenarios"
    (folder / "traces").mkdir(parents=True)
    (folder / "traces" / "tiny.csv").write_text(AZURE_ROWS)
    (folder / "other.csv").write_text(AZURE_ROWS.replace(",100,", ",111,"))
    data = raw(workload={"arrival": {"kind": "trace", "path": "traces/tiny.csv", "format": "azure"}},
               variants={"same": {}, "other": {"workload": {"arrival": {"path": "other.csv"}}}})
    scenario_file = folder / "replay.yaml"
    scenario_file.write_text(yaml.safe_dump(data))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # nowhere near the trace

    scenario_set = load_scenario_set(os.path.relpath(scenario_file, elsewhere))
    assert Path(scenario_set.base.workload.arrival.path) == (folder / "traces" / "tiny.csv").resolve()
    assert Path(scenario_set.variants["other"].workload.arrival.path) == (folder / "other.csv").resolve()
    workload = make_workload(scenario_set.variants["same"])
    np.testing.assert_array_equal(workload.arrival_s, [0.0, 1.0, 3.0])
    np.testing.assert_array_equal(workload.input_tokens, [100, 200, 300])
    assert make_workload(scenario_set.variants["other"]).input_tokens[0] == 111


def test_absolute_and_missing_relative_paths_are_left_alone(tmp_path, monkeypatch):
    trace = tmp_path / "abs.csv"
    trace.write_text(AZURE_ROWS)
    data = raw(workload={"arrival": {"kind": "trace", "path": str(trace), "format": "azure"}},
               variants={"abs": {}, "missing": {"workload": {"arrival": {"path": "nowhere.csv"}}}})
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.chdir(tmp_path)
    scenario_set = load_scenario_set("s.yaml")
    assert scenario_set.variants["abs"].workload.arrival.path == str(trace)
    assert scenario_set.variants["missing"].workload.arrival.path == "nowhere.csv"  # fails later, by name


@pytest.mark.skipif(not TRACES.is_dir(), reason="shared/traces is not present")
def test_trace_replay_scenario_reads_the_shared_azure_trace(monkeypatch):
    monkeypatch.chdir(Path("/"))
    scenario_set = load_scenario_set(REPO / "scenarios" / "trace_replay.yaml")
    path = Path(scenario_set.base.workload.arrival.path)
    assert path == (TRACES / "AzureLLMInferenceTrace_conv.csv").resolve()
    recorded = make_workload(scenario_set.variants["recorded_pace"])
    compressed = make_workload(scenario_set.variants["compressed_12rps"])
    assert recorded.num_requests == compressed.num_requests == scenario_set.base.run.num_requests
    np.testing.assert_array_equal(recorded.input_tokens, compressed.input_tokens)
    # Compression rescales every gap by one factor, so burstiness is kept.
    factor = compressed.arrival_s[-1] / recorded.arrival_s[-1]
    np.testing.assert_allclose(compressed.arrival_s, recorded.arrival_s * factor, rtol=1e-9, atol=1e-9)
    assert 0 < factor < 1


def test_a_variant_that_switches_kind_replaces_the_mapping():
    raw = {"workload": {"arrival": {"kind": "gamma", "rate_per_s": 5, "cv": 2.0},
                        "lengths": {"kind": "fixed", "input_tokens": 10, "output_tokens": 10}},
           "run": {"num_requests": 10},
           "variants": {"same-kind": {"workload": {"arrival": {"rate_per_s": 9}}},
                        "other-kind": {"workload": {"arrival": {"kind": "poisson", "rate_per_s": 7}}}}}
    variants = build_scenario_set(raw).variants
    assert variants["same-kind"].workload.arrival.cv == 2.0  # same kind: merged
    assert variants["other-kind"].workload.arrival.kind == "poisson"  # new kind: replaced, no stray cv


def test_one_yaml_reader_for_files_and_uploads_with_line_numbers(tmp_path):
    from sim.config.files import parse_yaml, read_yaml
    from sim.views.dashboard import parse_scenario_yaml
    text = "name: x\nrun:\n  seed: [1, 2\n"
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"^scenario: '.*bad\.yaml' line 4: "):
        read_yaml(path)
    with pytest.raises(ConfigError, match=r"^mine\.yaml line 4: "):
        parse_scenario_yaml(text, "mine.yaml")
    path.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(ConfigError, match=r"^scenario: '.*bad\.yaml': not UTF-8 text \(byte 0xe9 at offset 9\); allowed: a UTF-8 text file$"):
        read_yaml(path)
    assert parse_yaml(b"a: {b: 1}\n", "x") == {"a": {"b": 1}}
