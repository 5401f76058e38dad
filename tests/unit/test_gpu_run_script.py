"""calibrate/gpu_run.sh on a machine without a GPU, its Python replaced by a stub that records its arguments: the
steps stage's commands (an fp8 entry runs `--weights fp8` into steps/<engine>-fp8, KV=paged into
steps/<engine>-paged), and DEADLINE_S (each stage's
timeout cut to the time left less 30 s for the archive; a stage with under 45 s left skipped and logged)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "calibrate" / "gpu_run.sh"
pytestmark = pytest.mark.skipif(not all(shutil.which(tool) for tool in ("bash", "timeout", "tar")),
                                reason="needs bash, timeout and tar")


def run(tmp_path: Path, **env) -> tuple[list[str], str, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    stub = tmp_path / "python"
    stub.write_text(f'#!/usr/bin/env bash\necho "$@" >> {tmp_path / "calls.txt"}\n')
    stub.chmod(0o755)
    out = tmp_path / "out"
    subprocess.run(["bash", str(SCRIPT)], cwd=SCRIPT.parents[1], check=True, capture_output=True, timeout=120,
                   env={**os.environ, "OUT": str(out), "PY": str(stub), "STAGES": "steps", **env})
    calls = (tmp_path / "calls.txt").read_text().splitlines() if (tmp_path / "calls.txt").exists() else []
    return calls, (out / "summary.txt").read_text(), (out / "gpu_run.log").read_text()


def test_an_fp8_entry_measures_w8a8_steps_into_its_own_folder(tmp_path):
    calls, summary, log = run(tmp_path, STEP_RUNS="llama-3.1-8b:1:fused:fp8 qwen2.5-7b:2:unfused", DEVDIR="h200")
    assert len(calls) == 2
    assert "--weights fp8 --engine fused" in calls[0] and calls[0].endswith("h200/llama-3.1-8b/tp1/steps/fused-fp8")
    assert "--weights" not in calls[1] and calls[1].endswith("h200/qwen2.5-7b/tp2/steps/unfused")
    assert "timeout 240s" in log  # no deadline: the stage's own limit
    assert (tmp_path / "out" / "profiles.tgz").is_file()


def test_a_paged_run_measures_into_the_paged_folder_never_the_dense_ones(tmp_path):
    calls, _, _ = run(tmp_path, STEP_RUNS="llama-3.1-8b:1:fused,unfused:fp8", DEVDIR="h200", KV="paged")
    assert len(calls) == 2 and all("--kv paged" in call for call in calls)
    assert calls[0].endswith("h200/llama-3.1-8b/tp1/steps/fused-paged-fp8")
    assert calls[1].endswith("h200/llama-3.1-8b/tp1/steps/unfused-paged-fp8")


def test_an_out_folder_holding_what_the_script_writes_is_refused_untouched(tmp_path):
    out = tmp_path / "out"
    (out / "profiles").mkdir(parents=True)
    (out / "profiles" / "mine.txt").write_text("a user's file")
    done = subprocess.run(["bash", str(SCRIPT)], cwd=SCRIPT.parents[1], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "OUT": str(out), "PY": "false", "STAGES": "steps"})
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0
    assert "OUT:" in done.stderr and "profiles" in done.stderr
    assert sorted(p.name for p in out.rglob("*")) == ["mine.txt", "profiles"]


def test_a_deadline_cuts_each_stage_and_skips_what_it_cannot_fit(tmp_path):
    _, summary, log = run(tmp_path / "a", STEP_RUNS="llama-3.1-8b:1:fused", DEADLINE_S="100")
    assert re.search(r"\(timeout (69|70)s\)", log), log  # 100 s less the 30 s kept for the archive
    calls, summary, log = run(tmp_path / "b", STEP_RUNS="llama-3.1-8b:1:fused", DEADLINE_S="74")
    assert calls == [] and "skipped (deadline)" in summary and "s left before the deadline" in log


def test_each_attention_run_writes_its_own_csv_the_issue_shape_under_its_old_name(tmp_path):
    calls, summary, _ = run(tmp_path, STAGES="attention", DEVDIR="h200",
                            ATTENTION_RUNS="8:128:512,16384 32:128:1024")
    assert len(calls) == 2 and summary.count("attention") == 2
    assert "--heads 8 --head-dim 128" in calls[0] and calls[0].endswith("512 16384")
    assert "h200/attention_flash_vs_materialized.csv" in calls[0]
    assert "--heads 32 --head-dim 128" in calls[1] and calls[1].endswith(" 1024")
    assert "h200/attention_flash_vs_materialized_h32_d128.csv" in calls[1]
