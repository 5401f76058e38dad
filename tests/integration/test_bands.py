"""Bands (issue 31): `run.band` / `--band` replications, the step-time draws in a whole run, refusals.

Known answers first: a bias-only draw scales every step of a run exactly (both engines), a band with no spread
collapses to the point figure; then determinism across processes and the one-line refusals.
"""

import json
import math

import numpy as np
import pytest

from sim.config.files import validate_scenario
from sim.cost.draws import DRAW_BIAS, draw_pack
from sim.errors import ConfigError
from sim.run import make_cost_model, simulate
from sim import bands
from sim.bands import simulate_with_band
from helpers import one_error_line, servesim, small_scenario


def _banded(changes: dict | None = None, **run) -> dict:
    spec = small_scenario(changes)
    spec["run"].update(run)
    return spec


@pytest.mark.parametrize("compiled", [False, True])
def test_a_bias_only_draw_scales_every_step_of_a_run_exactly(compiled):
    # One request at a time (arrivals far apart): the same steps in the same order, each exp(bias) longer.
    spec = small_scenario({"workload": {"arrival": {"kind": "constant", "rate_per_s": 0.5}}},
                          run={"seed": 0, "num_requests": 4, "compiled_core": compiled})
    scenario = validate_scenario(spec)
    base = simulate(scenario)
    pack = draw_pack(7, 0.3, 0.0, 0.0)
    perturbed = simulate(scenario, step_draws=pack)
    want = "compiled" if compiled else "python (run.compiled_core is false)"
    assert base.extras["engine_core"] == perturbed.extras["engine_core"] == want
    factor = math.exp(pack[DRAW_BIAS])
    assert factor != 1.0
    np.testing.assert_array_equal(perturbed.steps["num_steps"], base.steps["num_steps"])
    np.testing.assert_array_equal(perturbed.decode_runs.step_duration_s, base.decode_runs.step_duration_s * factor)
    first = perturbed.steps["duration_s"].to_numpy()[0]
    assert first == base.steps["duration_s"].to_numpy()[0] * factor  # the prefill step: the same factor
    # latencies from arrival grow by the same factor, up to the float sums of the clock
    assert perturbed.summary["tpot_s_p50"] == pytest.approx(base.summary["tpot_s_p50"] * factor, rel=1e-9)


def test_a_band_without_spread_collapses_to_the_point_figure(tmp_path, monkeypatch):
    # Step-time draws only, from residuals of zero: every replication is the run itself (exp(0) = 1 exactly).
    zero = {"models": {"roofline": {"bias_sigma": 0.0, "sigma_prefill": 0.0, "sigma_decode": 0.0}}}
    (tmp_path / "residuals.json").write_text(json.dumps(zero))
    monkeypatch.setattr(bands, "RESIDUALS_PATH", tmp_path / "residuals.json")
    spec = _banded({"cost_model": {"kind": "roofline"}}, band=90, band_sources=["step_time"])
    result = simulate_with_band(validate_scenario(spec))
    band = result.summary["band"]
    assert band["level"] == 0.9 and band["replications"] == 19 and band["sources"] == ["step_time"]
    for name in bands.BAND_METRICS:
        assert band[name] == [result.summary[name]] * 2, name


def test_a_band_spreads_around_the_run_and_widens_with_the_residuals(tmp_path, monkeypatch):
    spec = _banded({"cost_model": {"kind": "roofline"}}, band=90, band_sources=["step_time"])
    wide = simulate_with_band(validate_scenario(spec)).summary
    lo, hi = wide["band"]["tpot_s_p50"]
    assert lo < hi
    # the shipped roofline residuals: a bias sigma over 5%, so a 90% band is at least a few percent wide
    assert hi / lo > 1.05
    key, b, p, d = bands.step_time_sigmas(make_cost_model(validate_scenario(spec)))
    assert key == "roofline"
    half = {"models": {"roofline": {"bias_sigma": b / 2, "sigma_prefill": p / 2, "sigma_decode": d / 2}}}
    (tmp_path / "residuals.json").write_text(json.dumps(half))
    monkeypatch.setattr(bands, "RESIDUALS_PATH", tmp_path / "residuals.json")
    narrow = simulate_with_band(validate_scenario(spec)).summary
    nlo, nhi = narrow["band"]["tpot_s_p50"]
    assert lo < nlo < nhi < hi  # the same draws (the same seeds), half the spread


def test_the_workload_source_varies_only_the_workload():
    # Workload replications alone: the cost model prices every step as it is, other seeds give other requests.
    spec = _banded({"cost_model": {"kind": "roofline"}}, band=90, band_sources=["workload"])
    summary = simulate_with_band(validate_scenario(spec)).summary
    assert "step_time_residuals" not in summary["band"]
    lo, hi = summary["band"]["e2e_s_p50"]
    assert lo < hi


def test_common_random_numbers_across_variants():
    # Two variants of a comparison (another batch limit) draw the same replications: the same offered load in
    # every replication, so the same band of it, while what the variants change moves.
    a = simulate_with_band(validate_scenario(_banded(band=90))).summary["band"]
    b = simulate_with_band(validate_scenario(_banded({"scheduler": {"max_num_seqs": 2}}, band=90))).summary["band"]
    assert a["offered_rps"] == b["offered_rps"] and a["offered_rps"][0] < a["offered_rps"][1]
    assert a["e2e_s_p99"] != b["e2e_s_p99"]
    # and another run seed draws other replications
    c = simulate_with_band(validate_scenario(_banded(band=90, seed=1))).summary["band"]
    assert c["offered_rps"] != a["offered_rps"]


def test_a_band_is_the_same_bytes_in_two_processes(tmp_path):
    for name in ("a", "b"):
        done = servesim("run", "scenarios/quickstart.yaml", "--variant", "continuous+paged", "-q", "--band", "90",
                        "--set", "run.num_requests=300", "--out", tmp_path / name)
        assert done.returncode == 0, done.stderr
    one, two = ((tmp_path / n / "summary.json").read_bytes() for n in ("a", "b"))
    assert one == two
    band = json.loads(one)["band"]
    assert band["level"] == 0.9 and len(band["ttft_s_p99"]) == 2
    assert "[" in done.stdout and "band: continuous+paged: 90% over 19 replications" in done.stdout


@pytest.mark.parametrize(("band", "words"), [("150", "run.band: 150.0 is not allowed; allowed: < 100"),
                                            ("0", "run.band: 0.0 is not allowed; allowed: > 0"),
                                            ("99.9", "needs 1999 replications")])
def test_a_level_outside_the_interval_is_one_line_and_exit_2(band, words):
    line = one_error_line(servesim("run", "scenarios/quickstart.yaml", "-q", "--band", band))
    assert words in line


def test_a_cost_model_without_residuals_is_refused_naming_it(tmp_path):
    line = one_error_line(servesim("run", "scenarios/quickstart.yaml", "-q", "--band", "90", "--set",
                                   "cost_model={kind: fixed, prefill_s: 0.01, decode_s: 0.01}"))
    assert "'fixed' has none" in line and "python -m calibrate.residuals" in line
    assert "run.band_sources: [workload]" in line


def test_residual_keys_of_the_cost_models():
    assert bands.residual_key(make_cost_model(validate_scenario(small_scenario(
        {"cost_model": {"kind": "roofline"}})))) == "roofline"
    assert bands.residual_key(make_cost_model(validate_scenario(small_scenario(
        {"cost_model": {"kind": "calibrated", "engine": "fused"}})))) == "steps"
    assert bands.residual_key(make_cost_model(validate_scenario(small_scenario(
        {"cost_model": {"kind": "roofline", "overhead": {"engine": "vllm-cudagraph"}}})))) == "roofline"
    models = json.loads(bands.RESIDUALS_PATH.read_text())["models"]
    for key in ("roofline", "measured", "steps"):
        m = models[key]
        assert 0 < m["bias_sigma"] < 0.5 and 0 < m["sigma_prefill"] < 0.5 and 0 < m["sigma_decode"] < 0.5
        assert m["held_out_steps"]["prefill"] > 20 and m["held_out_steps"]["decode"] > 20 and m["source"]


def test_a_pipelines_micro_batches_take_the_draws_and_disaggregation_refuses_them():
    spec = validate_scenario(small_scenario({"hardware": {"gpu": "h100-sxm", "tensor_parallel": 1,
                                                          "pipeline_parallel": 2}, "run": {"num_requests": 1}}))
    doubling = draw_pack(1, 0.0, 0.0, 0.0)
    doubling[DRAW_BIAS] = math.log(2)  # every micro-batch's priced time (driver and stages) twice as long
    plain, doubled = simulate(spec), simulate(spec, step_draws=doubling)
    assert len(doubled.steps) == len(plain.steps) > 2  # one request: the same micro-batches
    for stage in (0, 1):
        busy = [r.summary[f"pipeline_stage{stage}_busy_fraction"] * r.summary["elapsed_s"] for r in (plain, doubled)]
        assert busy[1] == pytest.approx(2 * busy[0], rel=1e-9)
    noisy = draw_pack(3, 0.1, 0.2, 0.2)  # per-micro-batch noise: the same pack, the same records
    assert simulate(spec, step_draws=noisy).steps.equals(simulate(spec, step_draws=noisy).steps)
    assert not simulate(spec, step_draws=noisy).steps.equals(plain.steps)
    split = small_scenario(hardware={"disaggregation": {}}, run={"num_requests": 4})
    with pytest.raises(ConfigError, match="hardware.disaggregation: step-time draws"):
        simulate(validate_scenario(split), step_draws=draw_pack(1, 0.1, 0.1, 0.1))


def test_a_pipelines_residuals_are_its_stages_model():
    staged = {"hardware": {"gpu": "h100-sxm", "tensor_parallel": 1, "pipeline_parallel": 2}}
    assert bands.residual_key(make_cost_model(validate_scenario(small_scenario(
        staged | {"cost_model": {"kind": "roofline", "overhead": {"engine": "vllm-cudagraph"}}})))) == "roofline"
    assert bands.residual_key(make_cost_model(validate_scenario(small_scenario(
        staged | {"cost_model": {"kind": "calibrated", "engine": "fused"}})))) == "steps"
