"""The fidelity harness's fits on recorded vLLM steps: the engine-steps cost model (`fit-steps`,
sim/cost/engine_steps.py) and the overhead fit's refusal to floor (`fit-overhead`). No timing is
asserted: only what the fits compute, which rows they see, and what they report."""

import itertools
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import run_fidelity_cli

from calibrate.fidelity.overhead import KernelExcessWarning, fit_step_overhead
from sim.core.step_plan import StepPlan
from sim.cost import engine_steps as es
from sim.errors import ConfigError
from sim.model.specs import ModelSpec

FIXTURE = Path(__file__).parents[1] / "fixtures" / "fidelity"
CALIB, RUN, PROFILE = FIXTURE / "calib", FIXTURE / "medium", FIXTURE / "profile-kernels"
MODEL = ModelSpec.model_validate(yaml.safe_load(
    (Path(__file__).parents[2] / "calibrate" / "fidelity" / "model.yaml").read_text()))




# --- engine-steps model ---------------------------------------------------------------------------

def test_fit_relative_is_the_best_nonnegative_fit_of_the_relative_errors():
    """fit_relative minimises sum(((x b - y) / y)^2) over b >= 0: checked against least squares on every subset of
    its columns (brute force), and exact where the step times are a non-negative combination of the features."""
    rng = np.random.default_rng(3)
    x = rng.uniform(0.5, 2.0, size=(40, 4)) * np.array([1.0, 10.0, 100.0, 1000.0])  # columns of unlike scales
    truth = np.array([1e-3, 2e-4, 0.0, 1e-6])
    assert es.fit_relative(x, x @ truth) == pytest.approx(truth, rel=1e-9, abs=1e-15)
    y = (x @ np.array([1e-3, -2e-4, 3e-5, 1e-6]) + 0.5) * rng.uniform(0.9, 1.1, size=40)
    b = es.fit_relative(x, y)
    assert (b >= 0).all()
    a, ones = x / y[:, None], np.ones(len(y))
    best = np.inf
    for k in range(5):
        for cols in itertools.combinations(range(4), k):
            z = np.zeros(4)
            if cols:
                z[list(cols)] = np.linalg.lstsq(a[:, cols], ones, rcond=None)[0]
            if (z >= 0).all():
                best = min(best, float(np.linalg.norm(a @ z - ones)))
    assert np.linalg.norm(a @ b - ones) == pytest.approx(best, rel=1e-9)


def _decode_plans(rng, n):
    seqs = rng.integers(1, 32, n)
    return [StepPlan(num_decode_seqs=int(s), decode_context_tokens=int(s) * int(rng.integers(10, 500)),
                     num_sampled_seqs=int(s)) for s in seqs]


def test_cross_validation_holds_out_rows_the_fit_never_saw(monkeypatch):
    rng = np.random.default_rng(0)
    plans = _decode_plans(rng, 60)
    y = np.array([0.02 + 0.001 * p.num_decode_seqs for p in plans]) * (1 + rng.normal(scale=0.01, size=60))
    seen: list[set] = []
    real_fit = es.fit_relative

    def spy(x, yy):
        seen.append(set(np.round(yy, 12)))
        return real_fit(x, yy)

    monkeypatch.setattr(es, "fit_relative", spy)
    cv = es.cross_validate(plans, y, folds=5)
    folds = cv.folds
    assert sorted(np.concatenate(folds).tolist()) == list(range(60))  # a partition of the rows
    for held in folds:
        assert np.all(np.diff(held) == 1)  # contiguous blocks of recorded steps
    # Per candidate: one fit per fold (on the other rows only), then one on all rows (in-sample column).
    per_candidate = len(folds) + 1
    assert len(seen) == per_candidate * len(es.CANDIDATES)
    for c in range(len(es.CANDIDATES)):
        for k, held in enumerate(folds):
            train_values = seen[c * per_candidate + k]
            assert train_values.isdisjoint(set(np.round(y[held], 12)))
            assert len(train_values) == 60 - len(held)
    # Decode-only steps: tokens == decode_seqs, so const+tokens explains them; nothing simpler does.
    assert cv.chosen == "const+tokens"
    table = cv.table.set_index("candidate")
    assert table.loc["const", "heldout_mean_abs"] > table.loc["const+tokens", "heldout_mean_abs"]
    assert list(cv.table["candidate"]) == list(es.CANDIDATES)


def test_chosen_is_the_simplest_within_one_standard_error():
    rng = np.random.default_rng(1)
    plans = _decode_plans(rng, 80)
    y = np.array([0.02 + 0.001 * p.num_decode_seqs + 2e-7 * p.decode_context_tokens for p in plans])
    cv = es.cross_validate(plans, y * (1 + rng.normal(scale=0.002, size=80)), folds=4)
    t = cv.table
    best = t.loc[t["heldout_mean_abs"].idxmin()]
    chosen = t[t["candidate"] == cv.chosen].iloc[0]
    assert chosen["heldout_mean_abs"] <= best["heldout_mean_abs"] + best["heldout_se"]
    earlier = t.iloc[:t.index[t["candidate"] == cv.chosen][0]]
    assert (earlier["heldout_mean_abs"] > best["heldout_mean_abs"] + best["heldout_se"]).all()
    assert "decode_context" in es.CANDIDATES[cv.chosen]  # the context term is needed here


@pytest.mark.parametrize("tokens", [1, 2, 3, 5, 8, 13, 64, 100, 511, 512, 4096])
def test_token_segments_add_up_to_the_tokens_beyond_the_first(tokens):
    plan = StepPlan(num_decode_seqs=tokens, decode_context_tokens=tokens * 10, num_sampled_seqs=tokens)
    plans = [StepPlan(num_decode_seqs=n, decode_context_tokens=n, num_sampled_seqs=n) for n in range(1, 600)]
    names = es.token_segments(plans)
    # Steps of 1-599 tokens: 87 have more than 512 (segment 256-512 closed), none more than 1024 (open from 512).
    assert names[0] == "tokens_1_to_2" and names[-2:] == ("tokens_256_to_512", "tokens_over_512")
    assert sum(es.FEATURES[n][0](plan) for n in names) == tokens - 1
    # Each segment holds at most its width, and fills in order.
    widths = [es.FEATURES[n][0](plan) for n in names[:-1]]
    assert all(0 <= w <= 2 ** i for i, w in enumerate(widths))
    assert all(b == 0 or a == 2 ** i for i, (a, b) in enumerate(itertools.pairwise(widths)))


def test_a_kinked_token_price_is_found_by_the_segments_and_chosen():
    """Steps priced 20 ms + 1 ms per token up to 4 tokens, 5 ms per token from 4 to 16, 2 ms beyond (a GEMM
    library switching kernels): the straight-line candidates cannot fit it, the segments fit it exactly."""
    rng = np.random.default_rng(5)
    plans = _decode_plans(rng, 120) + [StepPlan(num_decode_seqs=int(n), decode_context_tokens=int(n) * 50,
                                                num_sampled_seqs=int(n)) for n in rng.integers(1, 8, 60)]

    def price(tokens: int) -> float:
        return 0.020 + 0.001 * min(tokens - 1, 3) + 0.005 * min(max(tokens - 4, 0), 12) + 0.002 * max(tokens - 16, 0)

    y = np.array([price(p.num_tokens) for p in plans])
    candidates = es.candidates_for(plans)
    assert candidates["+token_segments"][1:5] == ("tokens_1_to_2", "tokens_2_to_4", "tokens_4_to_8", "tokens_8_to_16")
    cv = es.cross_validate(plans, y, folds=5, candidates=candidates)
    assert cv.chosen == "+token_segments"
    table = cv.table.set_index("candidate")
    assert table.loc["+token_segments", "insample_mean_abs"] < 1e-6 < table.loc["const+tokens", "insample_mean_abs"]
    names = candidates["+token_segments"]
    beta = es.fit_relative(es.feature_matrix(plans, names), y)
    for tokens in (1, 3, 6, 16, 31):
        plan = StepPlan(num_decode_seqs=tokens, decode_context_tokens=tokens * 7, num_sampled_seqs=tokens)
        assert es.feature_matrix([plan], names)[0] @ beta == pytest.approx(price(tokens), rel=1e-6)


def test_folds_are_checked():
    with pytest.raises(ConfigError, match="--folds"):
        es.kfold_indices(3, 5)
    with pytest.raises(ConfigError, match="--folds"):
        es.kfold_indices(10, 1)


def test_fit_steps_writes_a_profile_a_scenario_can_select(tmp_path, capsys):
    from sim.cost.calibrated import load_profile
    from sim.cost.profiles import (
        check_profile_matches,
        make_calibrated_cost_model,
        profile_engine,
        profile_kind,
    )

    out = tmp_path / "engine-steps"
    code, captured = run_fidelity_cli(["fit-steps", str(CALIB), "--out", str(out), "--folds", "4"], capsys)
    assert code == 0, captured.err
    meta = json.loads((out / "meta.json").read_text())
    assert [r["candidate"] for r in meta["cross_validation"]] == [*es.CANDIDATES, "+token_segments"]
    assert meta["profile_kind"] == "engine_steps"
    chosen = next(r for r in meta["cross_validation"] if r["candidate"] == meta["chosen"])
    assert all(r["folds"] == 4 for r in meta["cross_validation"])
    assert f"chosen: {meta['chosen']}" in captured.out and "held-out" in captured.out
    coefficients = pd.read_csv(out / "coefficients.csv")
    assert tuple(coefficients["feature"]) == tuple(chosen["features"].split())
    assert (coefficients["seconds_per_unit"] >= 0).all()
    assert profile_kind(out) == "engine_steps" and profile_engine(out).startswith("vllm-cpu")
    check_profile_matches(out, MODEL, 1)
    cost = make_calibrated_cost_model(out, MODEL)
    assert isinstance(cost, es.EngineStepCostModel)
    plan = StepPlan(prefill_request_ids=[0], prefill_chunk_tokens=[100], prefill_context_tokens=[50],
                    num_decode_seqs=7, decode_context_tokens=700, num_sampled_seqs=8)
    beta = dict(zip(coefficients["feature"], coefficients["seconds_per_unit"]))
    expected = sum(b * es.FEATURES[f][0](plan) for f, b in beta.items())
    assert cost.step_time(plan) == pytest.approx(expected, rel=1e-6)
    assert cost.step_time(StepPlan()) == 0.0
    with pytest.raises(ConfigError, match="tensor_parallel 1"):
        check_profile_matches(out, MODEL, 2)
    with pytest.raises(ConfigError, match="was fitted for"):
        check_profile_matches(out, MODEL.model_copy(update={"num_layers": 4}), 1)
    with pytest.raises(ConfigError, match="not per-op kernel times"):
        load_profile(out)
    # The comparison takes it like any profile.
    code, captured = run_fidelity_cli(["compare", str(RUN), "--profile", str(out), "--out", str(tmp_path / "cmp")], capsys)
    assert code == 0, captured.err
    assert "EngineStepCostModel" in json.loads((tmp_path / "cmp" / "simulation.json").read_text())["cost_model"]
    # ... and says how much of a run its calibration covered (that fixture has no steps.csv: nothing to say;
    # the calibration run itself: every step covered).
    assert "calibration_coverage" not in json.loads((tmp_path / "cmp" / "simulation.json").read_text())
    assert meta["coverage"]["num_steps"] == len(pd.read_csv(CALIB / "repeat-1" / "steps.csv"))
    code, captured = run_fidelity_cli(["compare", str(CALIB), "--profile", str(out), "--out", str(tmp_path / "self")], capsys)
    assert code == 0, captured.err
    coverage = json.loads((tmp_path / "self" / "simulation.json").read_text())["calibration_coverage"]
    assert coverage["num_steps"] == meta["coverage"]["num_steps"] and coverage["outside_fraction"] == 0.0
    assert "every recorded step lies where the calibration run had steps" in (tmp_path / "self" / "fidelity.md").read_text()


def _decode(seqs: int, context: int, prefill: int = 0) -> StepPlan:
    return StepPlan(prefill_request_ids=[0] if prefill else [], prefill_chunk_tokens=[prefill] if prefill else [],
                    prefill_context_tokens=[0] if prefill else [], num_decode_seqs=seqs,
                    decode_context_tokens=context, num_sampled_seqs=seqs + (1 if prefill else 0))


def test_coverage_counts_steps_in_cells_the_calibration_never_visited():
    # Calibration: 6 steps of 4 sequences at 300 tokens each (cell (2, 8)), 2 steps of 16 at 40 (cell (4, 5):
    # too few to count), prefills of 64-256 tokens.
    calib = [_decode(4, 1200)] * 6 + [_decode(16, 640)] * 2 + [_decode(0, 0, 64), _decode(0, 0, 256)]
    coverage = es.calibration_coverage(calib)
    assert coverage["decode_cells"] == [[2, 8, 6], [4, 5, 2]]
    assert (coverage["prefill_tokens_min"], coverage["prefill_tokens_max"]) == (64, 256)
    run = [_decode(5, 5 * 400),     # 5 seqs (bin 2) at 400 each (bin 8): covered
           _decode(4, 4 * 100),     # short contexts (bin 6): outside
           _decode(16, 16 * 40),    # a cell with only 2 calibration steps: outside
           _decode(0, 0, 128),      # prefill inside the range
           _decode(0, 0, 512)]      # prefill above it
    got = es.coverage_of(coverage, run)
    assert got["num_steps"] == 5
    assert got["decode_outside_fraction"] == pytest.approx(2 / 5)
    assert got["prefill_outside_fraction"] == pytest.approx(1 / 5)
    assert got["outside_fraction"] == pytest.approx(3 / 5)
    assert {c["context_per_seq"] for c in got["uncovered_decode_cells"]} == {"64-127", "32-63"}
    assert es.coverage_of(coverage, calib[:6])["outside_fraction"] == 0.0
    from calibrate.fidelity.compare import _coverage_markdown
    loud = _coverage_markdown(got)
    assert loud.startswith("**WARNING: 60% of this run's 5 recorded steps lie outside") and "4-7 seqs at 64-127" in loud


def test_a_corrupt_engine_steps_profile_is_a_one_line_error(tmp_path, capsys):
    out = tmp_path / "p"
    run_fidelity_cli(["fit-steps", str(CALIB), "--out", str(out)], capsys)
    (out / "coefficients.csv").write_text("feature,seconds_per_unit\nconst,-1\n")
    with pytest.raises(ConfigError, match="coefficients >= 0"):
        es.load_engine_step_profile(out)


# --- no silent floor in the overhead fit -------------------------------------------------------------

def _priced(seqs, measured, kernels):
    return pd.DataFrame({"measured_s": measured, "priced_s": kernels, "profile_overhead_s": 0.0,
                         "num_seqs": seqs, "num_tokens": seqs})


def test_fit_overhead_reports_kernels_that_exceed_the_steps():
    # 1 sequence: kernels 12 ms, steps 10 ms (excess); 8 sequences: kernels 10 ms, steps 15 ms.
    priced = _priced([1] * 6 + [8] * 6, [0.010] * 6 + [0.015] * 6, [0.012] * 6 + [0.010] * 6)
    with pytest.warns(KernelExcessWarning, match="kernel prices exceed") as caught:
        fit = fit_step_overhead(priced)
    assert "1 seqs: -2.00 ms" in str(caught[0].message)
    assert list(fit.table["num_seqs"]) == [8] and fit.table["median_s"].iloc[0] == pytest.approx(0.005)
    assert list(fit.excess["num_seqs"]) == [1] and fit.excess["median_s"].iloc[0] == pytest.approx(-0.002)
    summary = fit.summary()
    assert summary["steps_over"] == 6 and summary["num_steps"] == 12 and summary["overhead_fitted"]
    assert summary["median_excess_fraction"] == pytest.approx(0.2)
    assert summary["points"] == [{"num_seqs": 1, "median_remainder_s": pytest.approx(-0.002), "num_steps": 6}]


def test_fit_overhead_without_excess_is_quiet():
    priced = _priced([4] * 6, [0.010] * 6, [0.004] * 6)
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelExcessWarning)
        fit = fit_step_overhead(priced)
    assert fit.excess.empty and fit.message() is None and fit.table["median_s"].iloc[0] == pytest.approx(0.006)


def test_fit_overhead_cli_and_report_flag_a_fabricated_excess(tmp_path, capsys):
    # A calibration run whose steps took a hundredth of their recorded time: the kernels exceed them all.
    fake = tmp_path / "calib" / "repeat-1"
    shutil.copytree(CALIB / "repeat-1", fake)
    steps = pd.read_csv(fake / "steps.csv", dtype=str)
    start, end = steps["start_s"].astype(float), steps["end_s"].astype(float)
    steps["end_s"] = (start + (end - start) / 100).map(lambda v: f"{v:.9f}")
    steps.to_csv(fake / "steps.csv", index=False)
    out = tmp_path / "profile-engine"
    code, captured = run_fidelity_cli(["fit-overhead", str(fake.parent), "--profile", str(PROFILE), "--out", str(out)], capsys)
    assert code == 0, captured.err
    warning_lines = [ln for ln in captured.err.splitlines() if ln.startswith("warning: kernel prices exceed")]
    assert len(warning_lines) == 1 and "no point is fitted" in warning_lines[0]
    line = next(ln for ln in captured.out.splitlines() if ln.startswith("kernel_excess: "))
    excess = json.loads(line.removeprefix("kernel_excess: "))
    assert not excess["overhead_fitted"] and excess["steps_over"] == excess["num_steps"] > 0
    assert excess["median_excess_fraction"] > 1  # kernels cost many times the (fabricated) steps
    meta = json.loads((out / "meta.json").read_text())
    assert meta["step_overhead_source"]["kernel_excess"] == excess
    # Nothing was fitted, so the profile's own loop overhead stays (no floor written in its place).
    assert (out / "step_overhead.csv").read_bytes() == (PROFILE / "step_overhead.csv").read_bytes()
    code, captured = run_fidelity_cli(["compare", str(RUN), "--profile", str(out), "--out", str(tmp_path / "cmp")], capsys)
    assert code == 0, captured.err
    assert "**WARNING: kernel prices exceed the measured vLLM steps**" in (tmp_path / "cmp" / "fidelity.md").read_text()
    assert json.loads((tmp_path / "cmp" / "simulation.json").read_text())["kernel_excess"] == excess
