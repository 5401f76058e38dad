"""The fidelity harness on the second shape's real recordings (tests/fixtures/fidelity-wide): a calibration
run in three rounds, one cell, and a kernel profile timed in a slow minute. Fitting, comparing and the study
report run without vLLM; no timing or accuracy is asserted."""

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import run_fidelity_cli

from calibrate.fidelity.compare import load_run, request_metrics

ROOT = Path(__file__).parents[2]
WIDE = ROOT / "tests" / "fixtures" / "fidelity-wide"
MODEL = ROOT / "calibrate" / "fidelity" / "model-wide.yaml"


def test_fit_steps_reads_every_calibration_round_and_predicts_the_cell(tmp_path, capsys):
    profile = tmp_path / "steps"
    code, captured = run_fidelity_cli(["fit-steps", str(WIDE / "calib"), "--out", str(profile)], capsys)
    assert code == 0, captured.err
    meta = json.loads((profile / "meta.json").read_text())
    rounds = sorted((WIDE / "calib").glob("repeat-*"))
    assert len(meta["source"]["repeats"]) == len(rounds) == 3
    assert meta["source"]["num_steps"] == sum(len(pd.read_csv(d / "steps.csv")) for d in rounds)
    assert meta["cross_validation"][-1]["candidate"] == "+token_segments"
    code, captured = run_fidelity_cli(["compare", str(WIDE / "gamma-cv4" / "light"), "--profile", str(profile),
                                       "--model", str(MODEL), "--out", str(tmp_path / "cmp")], capsys)
    assert code == 0, captured.err
    table = pd.read_csv(tmp_path / "cmp" / "fidelity.csv")
    assert len(table) == 7 and np.isfinite(table["error"]).all() and (table["repeats"] == 3).all()
    info = json.loads((tmp_path / "cmp" / "simulation.json").read_text())
    assert 0 <= info["calibration_coverage"]["outside_fraction"] <= 1


def test_fit_overhead_says_loudly_that_these_kernels_exceed_the_steps(tmp_path, capsys):
    code, captured = run_fidelity_cli(["fit-overhead", str(WIDE / "calib"), "--profile", str(WIDE / "profile-kernels"),
                                       "--out", str(tmp_path / "engine")], capsys)
    assert code == 0, captured.err
    assert "kernel prices exceed the measured vLLM steps" in captured.err
    excess = json.loads(captured.out.split("kernel_excess: ", 1)[1].splitlines()[0])
    assert excess["overhead_fitted"] is False and excess["fraction_of_steps"] > 0.5


def test_the_study_report_measures_the_reference_noise_on_real_recordings(tmp_path, capsys):
    out = tmp_path / "out"
    vllm = out / "model-wide" / "vllm"
    shutil.copytree(WIDE / "calib", vllm / "calib")
    shutil.copytree(WIDE / "gamma-cv4" / "light", vllm / "gamma-cv4" / "light")
    code, captured = run_fidelity_cli(["compare", str(vllm / "gamma-cv4" / "light"), "--profile",
                                       str(WIDE / "profile-kernels"),
                                       "--out", str(out / "model-wide" / "compare" / "gamma-cv4" / "light" / "kernels")],
                                      capsys)
    assert code == 0, captured.err
    code, captured = run_fidelity_cli(["study-report", str(out), "--out", str(out / "study.md")], capsys)
    assert code == 0, captured.err
    agreement = pd.read_csv(out / "study-self-agreement.csv")
    assert list(agreement["repeat"]) == ["repeat-1", "repeat-2", "repeat-3"]
    # Repeat 1 against the median of repeats 2 and 3, computed here from the recorded requests.
    metrics = [request_metrics(f) for f in load_run(vllm / "gamma-cv4" / "light").repeats]
    others = np.median([metrics[1]["tpot_mean_s"], metrics[2]["tpot_mean_s"]])
    assert agreement.loc[0, "tpot_mean_s_error"] == pytest.approx(metrics[0]["tpot_mean_s"] / others - 1)
    speed = pd.read_csv(out / "study-speed.csv")
    assert sorted(speed["workload"]) == ["calib"] * 3 + ["gamma-cv4"] * 3
    assert speed.loc[speed["workload"] == "calib", "speed_index"].mean() == pytest.approx(1.0)
    assert (speed["speed_index"] > 0).all() and (speed["steps"] > 0).all()
    text = (out / "study.md").read_text()
    assert "## How much of the error is the host" in text and "| model-wide | gamma-cv4 | light |" in text
