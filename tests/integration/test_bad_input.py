"""Bad input of every kind through the command line, scenario files, trace files and the dashboard's logic.

Each CLI case runs `main(argv)` in-process and checks: exit status 2, exactly one `error:` line on stderr
that names the field or option, no traceback, and nothing written at the output path. Files are built in
tmp_path; random bytes come from a seeded generator, so every run sees the same input.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from helpers import small_scenario
import sim.views.dashboard as dash
from sim.errors import ServeSimError
from sim.views.cli import main

SMALL = small_scenario({'slo': {'ttft_s': 1.0}, 'variants': {'a': {}, 'b': {'kv_cache': {'block_size': 32}}}})
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZURE_ROW = "2023-11-16 18:15:46.6805900,374,44\n"
BILLION_LAUGHS = "\n".join(
    ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]" for i in range(8)]
    + ["name: *i"]) + "\n"


def random_bytes(n: int) -> bytes:
    return np.random.default_rng(11).bytes(n)


def scenario_file(tmp: Path, data: dict | None = None) -> str:
    path = tmp / "scenario.yaml"
    path.write_text(yaml.safe_dump(data or SMALL, sort_keys=False))
    return str(path)


def raw_file(tmp: Path, content: bytes | str, name: str = "bad.yaml") -> str:
    path = tmp / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return str(path)


def trace_scenario(tmp: Path, content: bytes | str | None, name: str = "trace.csv") -> str:
    """A scenario replaying `name`; content None: the file is not made."""
    if content is not None:
        raw_file(tmp, content, name)
    data = {**SMALL, "workload": {"arrival": {"kind": "trace", "path": name}}}
    data.pop("variants")
    return scenario_file(tmp, data)


def trace_folder_scenario(tmp: Path) -> str:
    (tmp / "folder.csv").mkdir()
    return trace_scenario(tmp, None, "folder.csv")


def a_file(tmp: Path) -> Path:
    path = tmp / "afile"
    path.write_text("not a folder\n")
    return path


# (id, build(tmp) -> argv with OUT standing for the output path, words the one line must contain)
# Where argv has no OUT, the case writes nothing by design; the output check covers tmp/"out" anyway.
CASES = [
    # --- scenario files that are not scenario files
    ("binary-file", lambda t: ["run", raw_file(t, random_bytes(2048)), "--out", "OUT"], ["scenario:", "bad.yaml"]),
    ("non-utf8-file", lambda t: ["run", raw_file(t, "name: caf\xe9\n".encode("latin-1")), "--out", "OUT"],
     ["bad.yaml", "not UTF-8", "0xe9"]),
    ("utf16-file", lambda t: ["validate", raw_file(t, "name: x\n".encode("utf-16"))], ["bad.yaml", "NUL bytes"]),
    ("empty-file", lambda t: ["run", raw_file(t, b""), "--out", "OUT"], ["bad.yaml", "empty"]),
    ("whitespace-only-file", lambda t: ["run", raw_file(t, "\n   \n\t\n"), "--out", "OUT"], ["bad.yaml", "empty"]),
    ("comments-only-file", lambda t: ["validate", raw_file(t, "# nothing here\n")], ["bad.yaml", "no YAML values"]),
    ("nul-byte-in-text", lambda t: ["run", raw_file(t, b"name: a\x00b\n"), "--out", "OUT"], ["bad.yaml", "NUL"]),
    ("billion-laughs", lambda t: ["run", raw_file(t, BILLION_LAUGHS), "--out", "OUT"],
     ["bad.yaml", "aliases", "100,000"]),
    ("deep-nesting", lambda t: ["validate", raw_file(t, "a: " + "[" * 400 + "]" * 400 + "\n")], ["bad.yaml"]),
    ("directory-as-scenario", lambda t: ["run", str(t), "--out", "OUT"], ["scenario:", "is a directory"]),
    ("missing-scenario", lambda t: ["run", str(t / "nope.yaml"), "--out", "OUT"], ["nope.yaml", "not found"]),
    ("top-level-list", lambda t: ["run", raw_file(t, "- a\n- b\n"), "--out", "OUT"], ["bad.yaml", "mapping"]),
    ("top-level-scalar", lambda t: ["validate", raw_file(t, "42\n")], ["bad.yaml", "mapping"]),
    ("yaml-syntax-error", lambda t: ["run", raw_file(t, "name: [unclosed\nrun: {}\n"), "--out", "OUT"],
     ["bad.yaml", "line"]),
    ("python-object-tag", lambda t: ["validate", raw_file(t, "!!python/object/apply:os.system ['true']\n")],
     ["bad.yaml", "could not determine"]),
    ("oversized-file", lambda t: ["validate", raw_file(t, "description: " + "x" * (1 << 20) + "\n")],
     ["bad.yaml", "larger than"]),
    ("tab-indentation", lambda t: ["validate", raw_file(t, "run:\n\tseed: 1\n")], ["bad.yaml", "line 2"]),
    # --- values the schema refuses (--set, the scenario's own words)
    ("rate-inf-word", lambda t: ["run", scenario_file(t), "--set", "workload.arrival.rate_per_s=inf", "--out", "OUT"],
     ["workload.arrival.rate_per_s:", "inf", "finite"]),
    ("rate-1e308", lambda t: ["run", scenario_file(t), "--set", "workload.arrival.rate_per_s=1e308", "--out", "OUT"],
     ["workload.arrival.rate_per_s:", "1e308", "<= 1e+06"]),
    ("rate-nan", lambda t: ["run", scenario_file(t), "--set", "workload.arrival.rate_per_s=nan", "--out", "OUT"],
     ["workload.arrival.rate_per_s:", "nan", "finite"]),
    ("rate-yaml-inf", lambda t: ["run", scenario_file(t), "--set", "workload.arrival.rate_per_s=.inf"],
     ["workload.arrival.rate_per_s:", "inf", "finite"]),
    ("rate-just-above-bound", lambda t: ["run", scenario_file(t), "--set", "workload.arrival.rate_per_s=1000001"],
     ["workload.arrival.rate_per_s:", "1000001", "<= 1e+06"]),
    ("slo-minus-inf", lambda t: ["run", scenario_file(t), "--set", "slo.ttft_s=-.inf"], ["slo.ttft_s:", "-inf"]),
    ("memory-utilization-nan", lambda t: ["validate", scenario_file(t), "--set", "kv_cache.gpu_memory_utilization=.nan"],
     ["kv_cache.gpu_memory_utilization:", "nan", "finite"]),
    ("memory-utilization-above-1", lambda t: ["validate", scenario_file(t), "--set", "kv_cache.gpu_memory_utilization=1.5"],
     ["kv_cache.gpu_memory_utilization:", "1.5", "<= 1"]),
    ("num-requests-zero", lambda t: ["run", scenario_file(t), "--set", "run.num_requests=0", "--out", "OUT"],
     ["run.num_requests:", "0", ">= 1"]),
    ("num-requests-negative", lambda t: ["run", scenario_file(t), "--set", "run.num_requests=-5"],
     ["run.num_requests:", "-5", ">= 1"]),
    ("num-requests-a-word", lambda t: ["run", scenario_file(t), "--set", "run.num_requests=many"],
     ["run.num_requests:", "many", "an integer"]),
    ("num-replicas-zero", lambda t: ["run", scenario_file(t), "--set", "hardware.num_replicas=0"],
     ["hardware.num_replicas:", ">= 1"]),
    ("tensor-parallel-zero", lambda t: ["validate", scenario_file(t), "--set", "hardware.tensor_parallel=0"],
     ["hardware.tensor_parallel:", ">= 1"]),
    ("max-num-seqs-zero", lambda t: ["validate", scenario_file(t), "--set", "scheduler.max_num_seqs=0"],
     ["scheduler.max_num_seqs:", ">= 1"]),
    ("seed-negative", lambda t: ["validate", scenario_file(t), "--set", "run.seed=-1"], ["run.seed:", "-1", ">= 0"]),
    ("duration-zero", lambda t: ["validate", scenario_file(t), "--set", "run.duration_s=0"], ["run.duration_s:", "> 0"]),
    ("horizon-negative", lambda t: ["validate", scenario_file(t), "--set", "run.horizon_s=-1"],
     ["run.horizon_s:", "-1", "> 0"]),
    ("percentile-above-100", lambda t: ["validate", scenario_file(t), "--set", "slo.percentile=101"],
     ["slo.percentile:", "101", "<= 100"]),
    ("rate-given-a-list", lambda t: ["validate", scenario_file(t), "--set", "workload.arrival.rate_per_s=[1, 2]"],
     ["workload.arrival.rate_per_s:", "a number"]),
    ("unknown-nested-key", lambda t: ["validate", scenario_file(t), "--set", "hardware.gpus=2"],
     ["hardware.gpus:", "unknown key"]),
    ("set-only-equals", lambda t: ["validate", scenario_file(t), "--set", "="], ["--set:", "empty key"]),
    ("trace-arrival-without-path", lambda t: ["validate", scenario_file(t), "--set", "workload.arrival={kind: trace}"],
     ["workload.arrival.path:", "missing"]),
    ("gamma-cv-zero", lambda t: ["validate", scenario_file(t), "--set",
                                 "workload.arrival={kind: gamma, rate_per_s: 5, cv: 0}"],
     ["workload.arrival.cv:", "> 0"]),
    ("samples-per-prompt-zero", lambda t: ["validate", scenario_file(t), "--set", "workload.samples_per_prompt=0"],
     ["workload.samples_per_prompt:", ">= 1"]),
    ("schedule-step-rate-absurd", lambda t: ["validate", scenario_file(t), "--set",
                                             "workload.arrival={kind: schedule, steps: [{duration_s: 1, rate_per_s: 5e9}]}"],
     ["workload.arrival.steps", "rate_per_s", "<= 1e+06"]),
    ("inf-in-a-variant", lambda t: ["compare", scenario_file(t), "--set", "variants.b.slo.ttft_s=.inf", "--out", "OUT"],
     ["variants.b.slo.ttft_s:", "inf", "finite"]),
    ("workload-command-rate-inf", lambda t: ["workload", scenario_file(t), "--set", "workload.arrival.rate_per_s=inf"],
     ["workload.arrival.rate_per_s:", "finite"]),
    # --- outputs that cannot be written: refused before any simulation
    ("run-out-under-a-file", lambda t: ["run", scenario_file(t), "--out", str(a_file(t) / "sub")],
     ["--out:", "afile", "which is a file"]),
    ("run-out-is-a-file", lambda t: ["run", scenario_file(t), "--out", str(a_file(t))], ["--out:", "afile", "is a file"]),
    ("compare-out-under-a-file", lambda t: ["compare", scenario_file(t), "--out", str(a_file(t) / "x" / "y")],
     ["--out:", "which is a file"]),
    ("sweep-out-under-a-file", lambda t: ["sweep", scenario_file(t), "--grid", "rate=1", "--out",
                                          str(a_file(t) / "s.parquet")], ["--out:", "which is a file"]),
    ("sweep-out-is-a-folder", lambda t: ["sweep", scenario_file(t), "--grid", "rate=1", "--out", str(t)],
     ["--out:", "is a folder"]),
    ("sweep-out-wrong-suffix", lambda t: ["sweep", scenario_file(t), "--grid", "rate=1", "--out", "OUT.txt"],
     ["--out:", ".parquet or .csv"]),
    ("sweep-out-garbage-table", lambda t: ["sweep", scenario_file(t), "--grid", "rate=1", "--out",
                                           raw_file(t, random_bytes(512), "old.parquet")],
     ["--out:", "old.parquet", "not a readable sweep table"]),
    ("plan-out-under-a-file", lambda t: ["plan", scenario_file(t), "--out", str(a_file(t) / "p")],
     ["--out:", "which is a file"]),
    ("plan-report-under-a-file", lambda t: ["plan", scenario_file(t), "--out", "OUT", "--report",
                                            str(a_file(t) / "r.html")], ["--report:", "which is a file"]),
    ("plan-report-is-a-folder", lambda t: ["plan", scenario_file(t), "--out", "OUT", "--report", str(t)],
     ["--report:", "is a folder"]),
    # --- sweep grids and options
    ("grid-without-equals", lambda t: ["sweep", scenario_file(t), "--grid", "rate", "--out", "OUT.parquet"],
     ["--grid:", "'rate'", "key=v1,v2"]),
    ("grid-empty-value", lambda t: ["sweep", scenario_file(t), "--grid", "rate=1,,2", "--out", "OUT.parquet"],
     ["--grid:", "empty value"]),
    ("grid-negative-rate", lambda t: ["sweep", scenario_file(t), "--grid", "rate=-1", "--out", "OUT.parquet"],
     ["--grid:", "positive"]),
    ("grid-infinite-rate", lambda t: ["sweep", scenario_file(t), "--grid", "rate=1,.inf", "--out", "OUT.parquet"],
     ["--grid:", "finite"]),
    ("grid-key-twice", lambda t: ["sweep", scenario_file(t), "--grid", "rate=1", "--grid", "rate=2",
                                  "--out", "OUT.parquet"], ["--grid:", "twice"]),
    ("sweep-workers-zero", lambda t: ["sweep", scenario_file(t), "--grid", "rate=1", "--workers", "0",
                                      "--out", "OUT.parquet"], ["--workers:", ">= 1"]),
    ("sweep-unknown-variant", lambda t: ["sweep", scenario_file(t), "--grid", "rate=1", "--variant", "zz",
                                         "--out", "OUT.parquet"], ["--variant:", "'zz'"]),
    # --- planner options
    ("plan-rate-inf", lambda t: ["plan", scenario_file(t), "--rate", "inf", "--out", "OUT"], ["--rate:", "inf"]),
    ("plan-rate-zero", lambda t: ["plan", scenario_file(t), "--rate", "0", "--out", "OUT"], ["--rate:", "> 0"]),
    ("plan-rate-absurd", lambda t: ["plan", scenario_file(t), "--rate", "2e6", "--out", "OUT"], ["--rate:", "1e+06"]),
    ("plan-rate-a-word", lambda t: ["plan", scenario_file(t), "--rate", "fast", "--out", "OUT"], ["--rate", "a valid number"]),
    ("plan-seeds-zero", lambda t: ["plan", scenario_file(t), "--seeds", "0", "--out", "OUT"], ["--seeds:", ">= 1"]),
    ("plan-gpus-empty", lambda t: ["plan", scenario_file(t), "--gpus", ",", "--out", "OUT"], ["--gpus:", "empty"]),
    ("plan-negative-price", lambda t: ["plan", scenario_file(t), "--price", "h100-sxm=-2", "--out", "OUT"],
     ["--price:", "non-negative"]),
    # --- trace files
    ("trace-missing", lambda t: ["run", trace_scenario(t, None), "--out", "OUT"],
     ["workload.arrival.path:", "trace.csv", "not found"]),
    ("trace-is-a-directory", lambda t: ["run", trace_folder_scenario(t), "--out", "OUT"],
     ["workload.arrival.path:", "is a directory"]),
    ("trace-empty", lambda t: ["run", trace_scenario(t, b""), "--out", "OUT"], ["workload.arrival.path:", "line 1"]),
    ("trace-header-only", lambda t: ["run", trace_scenario(t, AZURE_HEADER), "--out", "OUT"],
     ["workload.arrival.path:", "no requests"]),
    ("trace-unknown-header", lambda t: ["run", trace_scenario(t, "TIMESTAMP,Ctx,Gen\n" + AZURE_ROW), "--out", "OUT"],
     ["workload.arrival.path:", "layout", "Ctx"]),
    ("trace-binary", lambda t: ["run", trace_scenario(t, random_bytes(2048)), "--out", "OUT"],
     ["workload.arrival.path:", "trace.csv"]),
    ("trace-non-utf8", lambda t: ["run", trace_scenario(t, (AZURE_HEADER + AZURE_ROW.replace("374", "caf\xe9"))
                                                       .encode("latin-1")), "--out", "OUT"],
     ["workload.arrival.path:", "trace.csv"]),
    ("trace-bad-count", lambda t: ["run", trace_scenario(t, AZURE_HEADER + AZURE_ROW.replace("374", "12x")), "--out",
                                   "OUT"], ["workload.arrival.path:", "line 2", "ContextTokens", "12x"]),
    ("trace-negative-count", lambda t: ["run", trace_scenario(t, AZURE_HEADER + AZURE_ROW.replace(",44", ",-4")),
                                        "--out", "OUT"], ["workload.arrival.path:", "line 2", "GeneratedTokens=-4"]),
    ("trace-missing-count", lambda t: ["run", trace_scenario(t, AZURE_HEADER + AZURE_ROW + "2023-11-16 18:15:47,,3\n"),
                                       "--out", "OUT"], ["workload.arrival.path:", "line 3", "ContextTokens"]),
    ("trace-bad-timestamp", lambda t: ["run", trace_scenario(t, AZURE_HEADER + "yesterday,3,4\n"), "--out", "OUT"],
     ["workload.arrival.path:", "line 2", "yesterday"]),
    ("trace-bad-jsonl-line", lambda t: ["run", trace_scenario(t, '{"timestamp": 0, "input_length": 5, '
                                                              '"output_length": 3, "hash_ids": [1]}\n{"timestamp": 1\n',
                                                              "trace.jsonl"), "--out", "OUT"],
     ["workload.arrival.path:", "line 2", "not valid JSON"]),
    ("trace-jsonl-not-objects", lambda t: ["run", trace_scenario(t, "[1, 2]\n[3, 4]\n", "trace.jsonl"), "--out", "OUT"],
     ["workload.arrival.path:", "line 1", "JSON object"]),
    # --- the command line itself
    ("unknown-command", lambda t: ["simulate", scenario_file(t)], ["simulate"]),
    ("unknown-catalog", lambda t: ["catalog", "tpus"], ["catalog:", "'tpus'", "allowed: models, gpus"]),
    ("run-unknown-variant", lambda t: ["run", scenario_file(t), "--variant", "zz", "--out", "OUT"],
     ["--variant:", "'zz'", "allowed: a, b"]),
    ("workers-not-a-number", lambda t: ["sweep", scenario_file(t), "--grid", "rate=1", "--workers", "two",
                                        "--out", "OUT.parquet"], ["--workers", "a valid integer"]),
]


def _outputs(tmp: Path) -> set[str]:
    return {p.name for p in tmp.iterdir() if p.name.startswith("OUT") or p.name.startswith(".OUT")
            or p.name.startswith(".out")} | ({"out"} if (tmp / "out").exists() else set())


@pytest.mark.parametrize("build, needles", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, monkeypatch, capsys, build, needles):
    monkeypatch.chdir(tmp_path)  # default output folders (out/...) land here, where they are checked
    monkeypatch.setenv("COLUMNS", "40")  # a narrow console must not wrap the one line
    argv = [a if a != "OUT" and not a.startswith("OUT.") else str(tmp_path / a) for a in build(tmp_path)]
    if argv[0] in ("run", "compare", "sweep", "plan"):
        argv += ["-q"] + (["--backend", "serial"] if argv[0] in ("sweep", "plan") else [])
    before = {p: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    captured = capsys.readouterr()
    assert exit_info.value.code == 2, (exit_info.value.code, captured.err)
    assert "Traceback" not in captured.err + captured.out
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert _outputs(tmp_path) == set(), _outputs(tmp_path)  # nothing written where the output would go
    assert {p: p.read_bytes() for p in before} == before  # an existing file at --out is left as it was
    assert not list(tmp_path.glob(".*tmp-*")) and not list(tmp_path.glob(".servesim-write-check-*"))


def test_the_cases_are_distinct_and_at_least_sixty():
    assert len({c[0] for c in CASES}) == len(CASES) >= 60


def test_the_small_scenario_itself_runs(tmp_path, monkeypatch, capsys):
    """The cases fail for the reason they name, not because the base scenario is broken."""
    monkeypatch.chdir(tmp_path)
    main(["run", scenario_file(tmp_path), "-q", "--out", str(tmp_path / "ok")])
    assert (tmp_path / "ok" / "summary.json").exists()


# --- the dashboard's upload logic: the same one-line errors, nothing stored

DASHBOARD_CASES = [
    ("binary", random_bytes(2048), "up.yaml"),
    ("non-utf8", "name: caf\xe9\n".encode("latin-1"), "not UTF-8"),
    ("empty", b"", "empty"),
    ("nul-bytes", b"name: a\x00\n", "NUL"),
    ("billion-laughs", BILLION_LAUGHS.encode(), "aliases"),
    ("oversized", b"description: " + b"x" * (1 << 20), "larger than the limit"),
    ("infinite-rate", yaml.safe_dump({**SMALL, "workload": {**SMALL["workload"], "arrival": {
        "kind": "poisson", "rate_per_s": float("inf")}}}).encode(), "workload.arrival.rate_per_s: inf"),
    ("absurd-rate", yaml.safe_dump({**SMALL, "workload": {**SMALL["workload"], "arrival": {
        "kind": "poisson", "rate_per_s": 1e308}}}).encode(), "<= 1e+06"),
]


@pytest.mark.parametrize("data, words", [c[1:] for c in DASHBOARD_CASES], ids=[c[0] for c in DASHBOARD_CASES])
def test_dashboard_scenario_upload_is_refused_in_one_line(data, words):
    with pytest.raises(ServeSimError) as err:
        dash.form_from_yaml(data, "up.yaml")
    message = str(err.value)
    assert "\n" not in message and words in message, message


@pytest.mark.parametrize("data, name, words", [
    (b"TIMESTAMP,ContextTokens,GeneratedTokens\n", "t.csv", "no requests"),
    (random_bytes(1024), "t.csv", "trace upload"),
    (b"a,b\n1,2\n", "t.txt", "extension 'txt'"),
    (b'{"timestamp": 0}\n', "t.jsonl", "trace upload"),
], ids=["header-only", "binary", "wrong-extension", "jsonl-missing-lengths"])
def test_dashboard_trace_upload_is_refused_and_not_kept(tmp_path, data, name, words):
    with pytest.raises(ServeSimError) as err:
        dash.save_uploaded_trace(data, name, tmp_path / "uploads")
    assert "\n" not in str(err.value) and words in str(err.value)
    assert not (tmp_path / "uploads").exists() or not list((tmp_path / "uploads").iterdir())
