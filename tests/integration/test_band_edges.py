"""`run.band_method: edges` (issue 31's cost goal): two runs with the cost model's bias at the band's quantiles,
widened by the workload's batch-means spread. Known answers: the band is exactly the two edge runs' figures when
the workload is not a source; zero residuals give the point figure (± the batch spread); the runs in threads
give the same bytes as one after another; identical variants differ by exactly [0, 0]."""

import json
import math
from statistics import NormalDist

import numpy as np
import pytest

from helpers import one_error_line, servesim, small_scenario
from sim import bands
from sim.bands import batch_figures, difference_bands, sampling_halfwidth, simulate_with_band, widened
from sim.config.files import validate_scenario
from sim.cost.draws import DRAW_BIAS, draw_pack
from sim.run import make_cost_model, simulate


def _edges(changes: dict | None = None, **run) -> object:
    spec = small_scenario({"cost_model": {"kind": "roofline"}, **(changes or {})})
    spec["run"].update({"band": 90, "band_method": "edges", "num_requests": 400, **run})
    return validate_scenario(spec)


def test_without_the_workload_source_the_band_is_the_two_edge_runs():
    scenario = _edges(band_sources=["step_time"])
    result = simulate_with_band(scenario)
    band = result.summary["band"]
    assert band["method"] == "edges" and band["replications"] == 2 and "band_batches" not in result.extras
    _, bias_sigma, sigma_prefill, sigma_decode = bands.step_time_sigmas(make_cost_model(scenario))
    z = NormalDist().inv_cdf(0.95)
    plain = scenario.model_copy(update={"run": scenario.run.model_copy(update={"band": None})})
    runs = []
    for sign in (-1, 1):  # by hand: the bias at its 5% and 95% quantiles, the replications' first draw seed
        pack = draw_pack(bands.replication_seeds(scenario.run.seed, 0)[1], 0.0, sigma_prefill, sigma_decode)
        pack[DRAW_BIAS] = sign * z * bias_sigma
        runs.append(simulate(plain, step_draws=pack, lean_summary=True).summary)
    for name in ("ttft_s_p99", "tpot_s_p50", "e2e_s_mean", "throughput_rps"):
        assert band[name] == sorted([runs[0][name], runs[1][name]]), name
    # a slower cost model is slower: the upper edge run's TPOT is above the point's, the lower's below
    assert band["tpot_s_p50"][0] < result.summary["tpot_s_p50"] < band["tpot_s_p50"][1]


def test_zero_residuals_give_the_point_widened_by_the_batch_spread(tmp_path, monkeypatch):
    zero = {"models": {"roofline": {"bias_sigma": 0.0, "sigma_prefill": 0.0, "sigma_decode": 0.0}}}
    (tmp_path / "residuals.json").write_text(json.dumps(zero))
    monkeypatch.setattr(bands, "RESIDUALS_PATH", tmp_path / "residuals.json")
    only_steps = simulate_with_band(_edges(band_sources=["step_time"]))
    for name in bands.BAND_METRICS:
        assert only_steps.summary["band"][name] == [only_steps.summary[name]] * 2, name
    both = simulate_with_band(_edges())
    batches = both.extras["band_batches"]
    assert all(len(v) == bands.EDGE_BATCHES for v in batches.values())
    z = NormalDist().inv_cdf(0.95)
    for name in ("ttft_s_p50", "offered_rps", "e2e_s_p99"):
        h = sampling_halfwidth(batches[name], z)
        assert h > 0, name
        point = both.summary[name]
        assert both.summary["band"][name] == pytest.approx([point - h, point + h], rel=1e-12), name


def test_the_batch_means_halfwidth_is_z_sd_over_root_batches():
    values = [1.0, 2.0, 3.0, 4.0]
    sd = math.sqrt(sum((v - 2.5) ** 2 for v in values) / 3)
    assert sampling_halfwidth(values, 2.0) == pytest.approx(2.0 * sd / 2.0)
    assert widened([3.0, 1.0], values, 2.0) == pytest.approx([1.0 - sd, 3.0 + sd])
    assert widened([3.0, 1.0], None, 2.0) == [1.0, 3.0]
    assert widened([3.0, None], values, 2.0) is None


def test_batch_figures_are_each_nineteenth_of_the_run_summarized_alone():
    scenario = _edges()
    plain = scenario.model_copy(update={"run": scenario.run.model_copy(update={"band": None})})
    point = simulate(plain)
    batches = batch_figures(point, ["offered_rps", "ttft_s_p50"], scenario.slo)
    assert all(len(v) == bands.EDGE_BATCHES for v in batches.values())
    # by hand: the requests in arrival order, cut in 19; a batch's median TTFT is its own requests' median
    frame = point.requests.sort_values("arrival_s", kind="stable")
    parts = np.array_split(np.arange(len(frame)), bands.EDGE_BATCHES)
    ttft = frame["ttft_s"].to_numpy()
    assert batches["ttft_s_p50"] == pytest.approx([float(np.percentile(ttft[idx], 50)) for idx in parts])
    # and its offered rate its own arrivals' (n - 1) / span, as the run's summary counts it
    arrival = frame["arrival_s"].to_numpy()
    assert batches["offered_rps"] == pytest.approx([(len(idx) - 1) / (arrival[idx[-1]] - arrival[idx[0]])
                                                    for idx in parts])


def test_the_runs_in_threads_are_the_same_bytes_as_one_after_another(monkeypatch):
    for method in ("edges", "replications"):
        threaded = simulate_with_band(_edges(band_method=method)).summary["band"]
        monkeypatch.setattr(bands, "usable_cpus", lambda: 1)
        serial = simulate_with_band(_edges(band_method=method)).summary["band"]
        monkeypatch.undo()
        assert json.dumps(threaded) == json.dumps(serial), method


def test_identical_variants_differ_by_exactly_zero_on_edges():
    workloads: dict = {}
    a = simulate_with_band(_edges(), workloads=workloads)
    b = simulate_with_band(_edges(), workloads=workloads)
    b.name = "b"
    a.name = "a"
    rows = difference_bands([a, b], "a")["variants"]["b"]
    for key, row in rows.items():
        assert row["band"] == [0.0, 0.0], key
    slower = simulate_with_band(_edges({"hardware": {"gpu": "a100-80gb"}}), workloads=workloads)
    slower.name = "slow"
    table = difference_bands([a, slower], "a")
    assert table["variants"]["slow"]["tpot_s_p50"]["band"][0] > 0  # slower across the whole band


def test_auto_picks_edges_for_long_runs_only():
    scenario = _edges(band_method="auto")
    long_enough = bands.EDGE_BATCHES * bands.EDGE_MIN_BATCH_REQUESTS
    assert bands.band_method(scenario, long_enough) == "edges"
    assert bands.band_method(scenario, long_enough - 1) == "replications"
    workload_only = _edges(band_method="auto", band_sources=["workload"])
    assert bands.band_method(workload_only, long_enough) == "replications"
    asked = _edges(band_method="auto", band_replications=39)
    assert bands.band_method(asked, long_enough) == "replications"


@pytest.mark.parametrize(("sets", "words"), [
    (["run.band_method=edges", "run.band_sources=[workload]"],
     "band_method: edges needs step_time among band_sources"),
    (["run.band_method=edges", "run.band_replications=39"], "band_replications: 39 applies to band_method replications"),
    (["run.band_method=quantiles"], "run.band_method"),
])
def test_a_bad_band_method_is_one_line_and_exit_2(sets, words):
    args = [a for s in sets for a in ("--set", s)]
    line = one_error_line(servesim("run", "scenarios/quickstart.yaml", "-q", "--band", "90", *args))
    assert words in line


# --- source c: an engine preset's CPU and front-end terms -----------------------------------------------------

def _preset(method: str, sources: list[str]) -> object:
    spec = small_scenario({"engine": {"name": "vllm", "version": "0.11.0"}})
    spec.pop("cost_model", None)
    spec["run"].update({"band": 90, "band_method": method, "num_requests": 400, "band_sources": sources})
    return validate_scenario(spec)


@pytest.mark.parametrize("method", ["edges", "replications"])
def test_engine_terms_widen_the_band_and_are_named_in_it(method):
    with_terms = simulate_with_band(_preset(method, ["step_time", "engine_terms"])).summary["band"]
    without = simulate_with_band(_preset(method, ["step_time"])).summary["band"]
    keys = [t["key"] for t in with_terms["engine_terms"]]
    assert "cost_model.overhead.per_step_s" in keys and "frontend.latency_s" in keys
    assert "engine_terms" not in without
    lo, hi = with_terms["ttft_s_mean"]
    nlo, nhi = without["ttft_s_mean"]
    assert hi - lo > nhi - nlo  # the front-end latency and the CPU term add to the kernels' error


def test_an_engine_term_draw_is_the_same_for_every_variant():
    # z depends on (the replication's draw seed, the term's key) only: common random numbers across variants
    assert bands.term_z(123, "frontend.latency_s") == bands.term_z(123, "frontend.latency_s")
    assert bands.term_z(123, "frontend.latency_s") != bands.term_z(124, "frontend.latency_s")
    assert bands.term_z(123, "frontend.latency_s") != bands.term_z(123, "cost_model.overhead.per_step_s")


def test_no_preset_no_engine_terms():
    scenario = _edges(band_sources=["step_time", "engine_terms"])
    assert bands.term_spreads(scenario, scenario.run.band_sources) == []
    assert "engine_terms" not in simulate_with_band(scenario).summary["band"]


def test_the_engine_model_misfit_is_the_engines_pooled_unbiased_residual_sigma(monkeypatch):
    # fitted versions by hand: n residuals, p fitted terms, rms of their log errors
    vllm = {"1.0.0": {"terms": {"per_step_s": 1e-3, "latency_s": 0.05}, "fit_error": {"rms_log": 0.3, "residuals": 6}},
            "2.0.0": {"terms": {"per_step_s": 1e-3}, "fit_error": {"rms_log": 0.5, "residuals": 3}},
            "3.0.0": {"terms": {"per_step_s": 1e-3, "latency_s": 0.05},  # n = p: no dof
                      "fit_error": {"rms_log": 0.9, "residuals": 2}}}
    other = {"1.0": {"terms": {"per_step_s": 1e-3}, "fit_error": {"rms_log": 1.5, "residuals": 5}}}
    from sim.config import engines
    from sim.config.engines import fitted
    monkeypatch.setattr(fitted, "fitted_table", lambda: {"engines": {"vllm": vllm, "sglang": other}})
    sigma, source = engines.engine_model_misfit(_preset("replications", ["engine_model"]))
    # another engine's poor fit does not enter vLLM's
    assert sigma == pytest.approx(math.sqrt((6 * 0.3 ** 2 + 3 * 0.5 ** 2) / ((6 - 2) + (3 - 1))))
    assert "the vllm preset's misfit" in source and "2 fitted versions (6 degrees of freedom" in source
    # an engine with no version to spare takes every engine's pool, and says so
    monkeypatch.setattr(fitted, "fitted_table", lambda: {"engines": {"vllm": {"3.0.0": vllm["3.0.0"]},
                                                                       "sglang": other}})
    sigma, source = engines.engine_model_misfit(_preset("replications", ["engine_model"]))
    assert sigma == pytest.approx(math.sqrt(5 * 1.5 ** 2 / (5 - 1)))
    assert "every preset's" in source
    assert engines.engine_model_misfit(_edges()) is None  # no engine preset


def test_the_engine_model_source_widens_the_band_and_is_named_apart():
    banded = simulate_with_band(_preset("replications", ["step_time", "engine_model"])).summary["band"]
    without = simulate_with_band(_preset("replications", ["step_time"])).summary["band"]
    misfit = banded["engine_model_misfit"]["sigma_log"]
    assert misfit > 0 and banded["step_time_residuals"] == without["step_time_residuals"]  # each as measured
    lo, hi = banded["tpot_s_p50"]
    nlo, nhi = without["tpot_s_p50"]
    assert hi - lo > nhi - nlo
