"""The fidelity harness takes any case: architecture file, KV capacity in tokens, ServeSim workload
specs, the process's CPU affinity, machine and phase timings in reports, the study's one report.
Nothing starts vLLM (`record --dry-run` checks options and builds the schedules)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import run_fidelity_cli

from calibrate.fidelity.machine import cpuinfo, machine_info, pick_cores
from calibrate.fidelity.replay_vllm import DTYPE_BYTES, LlamaShape, kv_bytes_for_tokens
from calibrate.fidelity.schedule import (
    DEFAULT_TRACE,
    from_azure_trace,
    from_workload,
    read_workload,
)
from sim.errors import ConfigError

ROOT = Path(__file__).parents[2]
FID = ROOT / "calibrate" / "fidelity"
FIXTURE = ROOT / "tests" / "fixtures" / "fidelity"




def test_cores_come_from_the_affinity_not_from_zero():
    assert pick_cores(2, [5, 3, 9]) == [3, 5]
    with pytest.raises(ConfigError, match="--threads: 4 is not allowed; this process may use 3 core"):
        pick_cores(4, [5, 3, 9])
    info = machine_info(1, [3])
    assert info["threads"] == 1 and info["cores"] == [3] and info["allowed_cores"]


def test_cpu_flags_are_read_from_cpuinfo():
    text = "model name\t: Some CPU\nflags\t\t: fpu avx2 avx512f avx512_bf16\nflags\t\t: amx_bf16\n"
    info = cpuinfo(text)
    assert info["cpu_model"] == "Some CPU" and info["avx512_bf16"] and info["avx512f"] and info["avx2"]
    assert not info["amx_bf16"]  # the first core's flags only


def test_kv_capacity_in_tokens_becomes_the_bytes_vllm_reserves():
    shape = LlamaShape()
    assert kv_bytes_for_tokens(shape, 8192) == 64 << 20  # the recorded fixture's 64 MiB = 256 blocks x 32
    # fp32 (`record --dtype float32`): twice the bytes for the same 256 blocks
    assert kv_bytes_for_tokens(shape, 8192, DTYPE_BYTES["float32"]) == 128 << 20


def test_record_dtype_choice_sets_the_kv_bytes(capsys):
    gamma = ["--workload", str(FID / "workloads" / "gamma-cv4.yaml"), "--kv-tokens", "8192", "--load", "a=1"]
    code, captured = run_fidelity_cli(["record", "--dry-run", *gamma, "--dtype", "float32"], capsys)
    assert code == 0, captured.err
    assert f"float32; kv 8192 tokens = {128 << 20} bytes" in captured.out
    code, captured = run_fidelity_cli(["record", "--dry-run", *gamma], capsys)  # default: bf16, as recorded before
    assert code == 0 and f"bfloat16; kv 8192 tokens = {64 << 20} bytes" in captured.out
    code, captured = run_fidelity_cli(["record", "--dry-run", *gamma, "--dtype", "float16"], capsys)
    assert code == 2 and captured.err.startswith("error: --dtype: 'float16' is not allowed; allowed: bfloat16, float32")


def test_compare_refuses_a_profile_in_another_dtype(tmp_path, capsys):
    run = tmp_path / "fp32-run"
    for src in (FIXTURE / "medium").glob("repeat-*"):
        (run / src.name).mkdir(parents=True)
        for f in src.iterdir():
            (run / src.name / f.name).write_bytes(f.read_bytes())
        meta = json.loads((run / src.name / "meta.json").read_text())
        meta["vllm"]["dtype"] = "float32"
        (run / src.name / "meta.json").write_text(json.dumps(meta))
    for command in (["compare", str(run)], ["fit-overhead", str(run), "--out", str(tmp_path / "p")]):
        code, captured = run_fidelity_cli([*command, "--profile", str(FIXTURE / "profile-kernels"),
                                  *(["--out", str(tmp_path / "o")] if command[0] == "compare" else [])], capsys)
        assert code == 2, (command, captured)
        assert captured.err.startswith("error: --profile:") and "measured in bf16, but the run was served in float32" in captured.err


@pytest.mark.skipif(not DEFAULT_TRACE.is_file(), reason="the Azure conversation trace is not in ../shared/traces")
def test_the_trace_workload_spec_replays_the_trace_window():
    raw = read_workload(FID / "workloads" / "azure-conv.yaml")
    for first_row in (0, 1000):
        s = from_workload(raw, num_requests=100, rate_per_s=3.0, seed=0, max_context=2048, first_row=first_row)
        old = from_azure_trace(DEFAULT_TRACE, num_requests=100, rate_per_s=3.0, first_row=first_row)
        assert np.allclose(s.arrival_s, old.arrival_s) and (s.input_tokens == old.input_tokens).all()
        assert s.arrival_s[0] == 0 and s.arrival_s[-1] == pytest.approx(99 / 3.0)


def test_gamma_workload_is_bursty_and_at_the_rate():
    raw = read_workload(FID / "workloads" / "gamma-cv4.yaml")
    assert raw["arrival"]["cv"] >= 3
    s = from_workload(raw, num_requests=2000, rate_per_s=2.0, seed=1, max_context=2048)
    gaps = np.diff(s.arrival_s)
    assert 1.0 / gaps.mean() == pytest.approx(2.0, rel=0.25)
    assert gaps.std() / gaps.mean() > 2.0  # far burstier than Poisson (CV 1)
    assert s.description["workload"]["arrival"]["rate_per_s"] == 2.0
    assert s.input_tokens.max() <= 512 and s.output_tokens.max() <= 128  # the CPU length scaling


def test_record_dry_run_checks_options_without_an_engine(tmp_path, capsys):
    code, captured = run_fidelity_cli(["record", "--dry-run", "--model", str(FID / "model-wide.yaml"), "--kv-tokens", "4096",
                              "--workload", str(FID / "workloads" / "gamma-cv4.yaml"), "--load", "a=1", "--load", "b=2"],
                             capsys)
    assert code == 0, captured.err
    assert captured.out.startswith("a: 100 requests") and "\nb: 100 requests" in captured.out
    assert "num_layers=4" in captured.out and "kv 4096 tokens" in captured.out
    bad_workload = tmp_path / "w.yaml"
    bad_workload.write_text("arrival: {kind: closed_loop, num_users: 3}\nlengths: {kind: fixed, input_tokens: 8, output_tokens: 8}\n")
    for args, needle in ((["--model", str(tmp_path / "none.yaml")], "--model:"),
                         (["--workload", str(bad_workload)], "--workload: arrival kind 'closed_loop'"),
                         (["--load", "x"], "--load:"), (["--kv-tokens", "8"], "--kv-tokens: 8")):
        # The gamma workload unless the case replaces it: the default replays ../shared's Azure trace,
        # which a checkout without ../shared lacks.
        workload = [] if "--workload" in args else ["--workload", str(FID / "workloads" / "gamma-cv4.yaml")]
        code, captured = run_fidelity_cli(["record", "--dry-run", *workload, *args], capsys)
        assert code == 2, (args, captured)
        assert captured.err.startswith(f"error: {needle}") and len(captured.err.strip().splitlines()) == 1


def test_compare_checks_the_architecture_file_against_the_run(tmp_path, capsys):
    code, captured = run_fidelity_cli(["compare", str(FIXTURE / "medium"), "--profile", str(FIXTURE / "profile-kernels"),
                              "--model", str(FID / "model-wide.yaml"), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and captured.err.startswith("error: --model:") and "num_layers 8 (file 4)" in captured.err
    code, captured = run_fidelity_cli(["compare", str(FIXTURE / "medium"), "--profile", str(FIXTURE / "profile-kernels"),
                              "--model", str(FID / "model.yaml"), "--out", str(tmp_path / "o")], capsys)
    assert code == 0, captured.err
    md = (tmp_path / "o" / "fidelity.md").read_text()
    assert "- recorded on: Intel(R) Xeon(R) Processor, 2 CPUs, flags amx_bf16 avx512_bf16" in md
    assert "- compared on: " in md and "phases: simulate" in md
    info = json.loads((tmp_path / "o" / "simulation.json").read_text())
    assert set(info["phases_s"]) == {"simulate", "step_check"} and "cpu_model" in info["machine"]
    assert info["dtype"] == "bfloat16"  # the recording's, matching the profile's bf16


def test_study_report_collects_every_comparison(tmp_path, capsys):
    out = tmp_path / "study"
    for model, workload, load, cm in (("m1", "azure-conv", "light", "kernels"), ("m1", "gamma-cv4", "high", "steps")):
        code, captured = run_fidelity_cli(["compare", str(FIXTURE / "medium"), "--profile", str(FIXTURE / "profile-kernels"),
                                  "--out", str(out / model / "compare" / workload / load / cm)], capsys)
        assert code == 0, captured.err
    code, captured = run_fidelity_cli(["study-report", str(out), "--out", str(out / "study.md")], capsys)
    assert code == 0, captured.err
    frame = pd.read_csv(out / "study.csv")
    assert sorted(map(tuple, frame[["model", "workload", "load", "cost_model"]].to_numpy())) == [
        ("m1", "azure-conv", "light", "kernels"), ("m1", "gamma-cv4", "high", "steps")]
    one = pd.read_csv(out / "m1" / "compare" / "azure-conv" / "light" / "kernels" / "fidelity.csv").set_index("metric")
    row = frame[frame["cost_model"] == "kernels"].iloc[0]
    assert row["tpot_mean_s"] == pytest.approx(one.loc["tpot_mean_s", "error"])
    assert "| m1 | gamma-cv4 | high | steps |" in (out / "study.md").read_text()
    assert frame["uncovered_steps"].isna().all()  # kernel profiles: no calibration coverage to report
    # Distance beyond vLLM's own repeat range: 0 inside it, else relative to the median.
    fid = one.loc["ttft_mean_s"]
    expected = max(0.0, fid["simulated"] - fid["real_max"], fid["real_min"] - fid["simulated"]) / fid["real"]
    assert row["ttft_mean_s_beyond_range"] == pytest.approx(expected)
    assert "all means inside vLLM's repeat range" in (out / "study.md").read_text()
    assert set(frame["dtype"]) == {"bfloat16"} and "- served in: bfloat16" in (out / "study.md").read_text()
    # The reference's own noise: no recordings under this OUT (comparisons only), and the report says so.
    assert "## How much of the error is the host" in (out / "study.md").read_text()
    assert "No recordings" in (out / "study.md").read_text() and (out / "study-speed.csv").is_file()
    code, captured = run_fidelity_cli(["study-report", str(tmp_path / "empty"), "--out", str(tmp_path / "x.md")], capsys)
    assert code == 2 and captured.err.startswith("error: OUT:")


def test_the_study_script_parses_its_arguments():
    bad = subprocess.run([str(FID / "run_all.sh"), "--bogus"], capture_output=True, text=True)
    assert bad.returncode == 2 and "argument '--bogus' is not allowed" in bad.stderr


def test_the_study_script_picks_the_dtype_for_every_step(tmp_path):
    env = {**os.environ, "PY": sys.executable, "PYF": str(tmp_path / "no-vllm"), "OUT": str(tmp_path / "o"),
           "MODELS": "calibrate/fidelity/model.yaml", "WORKLOADS": "calibrate/fidelity/workloads/gamma-cv4.yaml",
           "LOADS": "a=0.5", "REPEATS": "1", "NUM_REQUESTS": "20", "CALIB_RATE": "0.7", "CALIB_REQUESTS": "30"}
    dry = subprocess.run([str(FID / "run_all.sh"), "--dry-run"], capture_output=True, text=True, check=False,
                         env=env | {"DTYPE": "float32"})
    assert dry.returncode == 0, dry.stderr
    assert "calibrate run --model calibrate/fidelity/model.yaml --dtype fp32" in dry.stderr
    records = [line for line in dry.stderr.splitlines() if "calibrate.fidelity record" in line]
    assert len(records) == 2 and all("--dtype float32" in r for r in records)
    calibration, cell = records
    assert "--load calib=0.7" in calibration and "--num-requests 30" in calibration
    assert "--workload calibrate/fidelity/workloads/calibration.yaml" in calibration
    assert "--num-requests 20" in cell and "float32; kv 8192 tokens" in dry.stdout
    by_cpu = subprocess.run([str(FID / "run_all.sh"), "--dry-run"], capture_output=True, text=True, check=False,
                            env=env)
    fast_bf16 = bool(re.search(r"\b(avx512_bf16|amx_bf16)\b", Path("/proc/cpuinfo").read_text()))
    assert by_cpu.returncode == 0 and f"DTYPE={'bfloat16' if fast_bf16 else 'float32'}" in by_cpu.stderr
    bad = subprocess.run([str(FID / "run_all.sh"), "--dry-run"], capture_output=True, text=True, check=False,
                         env=env | {"DTYPE": "fp16"})
    assert bad.returncode == 2 and "DTYPE 'fp16' is not allowed; allowed: bfloat16, float32" in bad.stderr


def test_the_study_script_records_a_calibration_repeat_before_each_round(tmp_path):
    env = {**os.environ, "PY": sys.executable, "PYF": str(tmp_path / "no-vllm"), "OUT": str(tmp_path / "o"),
           "MODELS": "calibrate/fidelity/model.yaml", "WORKLOADS": "calibrate/fidelity/workloads/gamma-cv4.yaml",
           "LOADS": "a=0.5 b=0.9", "REPEATS": "3", "NUM_REQUESTS": "20", "DTYPE": "float32"}

    def records(extra: dict) -> list[str]:
        dry = subprocess.run([str(FID / "run_all.sh"), "--dry-run"], capture_output=True, text=True, check=False,
                             env=env | extra)
        assert dry.returncode == 0, dry.stderr
        return [line for line in dry.stderr.splitlines() if line.startswith("+ ") and "calibrate.fidelity record" in line]

    def order(lines: list[str]) -> list[str]:
        return [("calib" if "--load calib=" in r else "cells") + " " + re.search(r"--first-repeat (\d+)", r).group(1)
                for r in lines]

    assert order(records({})) == ["calib 1", "cells 1", "calib 2", "cells 2", "calib 3", "cells 3"]
    assert all("--repeats 1" in r for r in records({}))
    assert order(records({"CALIB_ROUNDS": "1"})) == ["calib 1", "cells 1", "cells 2", "cells 3"]
    for bad_rounds in ("0", "4", "two"):
        bad = subprocess.run([str(FID / "run_all.sh"), "--dry-run"], capture_output=True, text=True, check=False,
                             env=env | {"CALIB_ROUNDS": bad_rounds})
        assert bad.returncode == 2 and f"CALIB_ROUNDS '{bad_rounds}' is not allowed" in bad.stderr, bad.stderr


def test_study_goals_count_cells_and_show_the_sign_at_each_load():
    from calibrate.fidelity.study import goal_summary, goals_markdown
    base = {"makespan_s": 0.01, "throughput_tok_s": -0.01, "ttft_mean_s": 0.05, "ttft_p90_s": 0.1,
            "tpot_mean_s": -0.02, "e2e_mean_s": -0.03, "e2e_p90_s": 0.05}
    frame = pd.DataFrame([
        {"cost_model": "steps", "load": "light", **base},
        {"cost_model": "steps", "load": "high", **base, "ttft_mean_s": 0.12},             # a mean over 10%
        {"cost_model": "kernels", "load": "light", **base, "e2e_p90_s": -0.2},             # a p90 over 15%
        {"cost_model": "kernels", "load": "high", **base, "tpot_mean_s": 0.04}])
    goals = goal_summary(frame).set_index("cost_model")
    assert goals.loc["steps", "cells_means_within_10pct"] == 1 and goals.loc["steps", "cells_p90s_within_15pct"] == 2
    assert goals.loc["kernels", "cells_means_within_10pct"] == 2 and goals.loc["kernels", "cells_p90s_within_15pct"] == 1
    assert goals.loc["steps", "worst_mean_error"] == pytest.approx(0.12)
    assert goals.loc["kernels", "worst_p90_error"] == pytest.approx(0.2)
    assert goals.loc["kernels", "tpot_mean_signed_high"] == pytest.approx(0.04)
    assert goals.loc["steps", "e2e_mean_signed_light"] == pytest.approx(-0.03)
    assert "cells_means_inside_repeat_range" not in goals  # no repeat ranges in this frame
    text = goals_markdown(goal_summary(frame))
    assert "| kernels | 2 | 2/2 | 1/2 |" in text and "TPOT / E2E signed, light" in text
