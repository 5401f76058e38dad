"""How far an engine preset's CPU terms and front-end can be trusted (issue 31, source c): the fit's spread
(calibrate/engine_fit.py fit_spread) on synthetic fits with known answers, the table the published suite writes,
and the two functions sim/bands.py calls (sim/config/engines/spread.py engine_term_spread, with_engine_terms_drawn)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from calibrate.engine_fit import fit_spread, fit_terms
from sim.config import engines
from sim.config.engines import fitted
from sim.config.engines import (
    ESTIMATE_RANGES,
    OTHER_VERSION_FACTORS,
    Z90,
    engine_term_spread,
    usable_terms,
    with_engine_terms_drawn,
)
from sim.config.files import validate_scenario

ROOT = Path(__file__).resolve().parents[2]
BASE = {"workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                     "lengths": {"kind": "fixed", "input_tokens": 500, "output_tokens": 100}},
        "run": {"num_requests": 20}}
TABLE = json.loads(engines.TERMS_PATH.read_text())
STEP, LATENCY, PER_SEQ = "cost_model.overhead.per_step_s", "frontend.latency_s", "cost_model.overhead.per_seq_s"
# vLLM 0.11.0's measured API-server work (API_SERVER_WORK), drawn as estimates
INTAKE = ["frontend.per_request_s", "frontend.per_prompt_token_s", "frontend.per_output_chunk_s"]


def scenario(engine: dict | None, **sections):
    raw = {**BASE, **sections}
    if engine is not None:
        raw["engine"] = engine
    return validate_scenario(raw)


# --- the fit's spread -------------------------------------------------------------------------------------

def test_the_spread_of_a_linear_fit_is_the_sandwich_in_closed_form():
    # residuals linear in u = ln(theta): r = A u - y. At the least-squares optimum, with each residual's noise
    # max(noise, |r_i|), the spread is (A^T A)^-1 A^T diag(s^2) A (A^T A)^-1 exactly (central differences of a
    # linear function are exact).
    rng = np.random.default_rng(3)
    a = rng.normal(size=(7, 2))
    y = rng.normal(size=7)
    u, *_ = np.linalg.lstsq(a, y, rcond=None)
    residuals = lambda theta: a @ np.log(theta) - y  # noqa: E731
    theta = np.exp(u)
    r = residuals(theta)
    noise = float(np.median(np.abs(r)))  # some residuals above it, some below
    bread = np.linalg.inv(a.T @ a)
    want = np.sqrt(np.diag(bread @ a.T @ np.diag(np.maximum(noise, np.abs(r)) ** 2) @ a @ bread))
    got = fit_spread(residuals, theta, np.array([True, True]), noise)
    assert got["n"] == 7 and got["p"] == 2
    assert got["sigma_log"] == pytest.approx(list(want), rel=1e-9)
    assert got["rms"] == pytest.approx(math.sqrt(float(r @ r) / 7))


def test_a_term_held_at_a_bound_or_not_moved_has_no_spread_and_the_other_is_conditional_on_it():
    a = np.array([[1.0, 0.5], [0.2, 1.0], [0.7, 0.1]])
    y = np.array([0.3, -0.2, 0.1])
    residuals = lambda theta: a @ np.log(theta) - y  # noqa: E731
    theta = np.array([0.5, 2.0])
    held = fit_spread(residuals, theta, np.array([True, False]), 0.1)
    assert held["sigma_log"][1] is None and held["p"] == 1
    col = a[:, 0]
    var = np.maximum(0.1, np.abs(residuals(theta))) ** 2
    assert held["sigma_log"][0] == pytest.approx(math.sqrt(col @ (var * col)) / (col @ col))
    unmoved = fit_spread(lambda theta: np.array([0.1, 0.2, 0.3]), theta, np.array([True, True]), 0.1)
    assert unmoved["sigma_log"] == [None, None]  # the residuals do not move the terms: not identified


def _synthetic_fit(rng, noise: float):
    """A fit like the published suite's: per_step_s and latency_s on six means of two runs (kernel times known),
    each measured with log-normal noise; returns (the fitted log terms, the fit's spread)."""
    true = np.array([2e-3, 5e-2])
    kernel_tpot = np.array([6e-3, 30e-3])  # the runs' kernel time per output token (a light and a heavy load)
    prefill = np.array([15e-3, 400e-3])
    steps = np.array([1.0, 0.3])  # steps per output token the CPU term is paid on (a batch amortizes them)

    def metrics(theta):
        tpot = kernel_tpot + steps * theta[0]
        ttft = prefill + theta[1] + 2 * theta[0]
        return np.concatenate([tpot, ttft, 1 / tpot])

    measured = metrics(true) * np.exp(rng.normal(0.0, noise, size=6))
    residuals = lambda theta: np.log(metrics(theta) / measured)  # noqa: E731
    theta, free = fit_terms(residuals, np.array([5e-4, 1e-2]), np.array([2e-4, 5e-3]), np.array([0.05, 1.0]),
                            iterations=30)
    return np.log(theta), fit_spread(residuals, theta, free, noise)["sigma_log"]


def test_the_spread_matches_the_refits_on_synthetic_data_with_known_noise():
    # Known answer: refit the same runs 600 times under fresh measurement noise of a known sigma; the spread of the
    # refitted terms is what fit_spread must report from any one fit (its median over the fits). The bounds allow
    # the refits' own sampling error (~3% for 600) and max(noise, |r_i|), which can only widen the report.
    rng = np.random.default_rng(31)
    noise = 0.02
    fits = [_synthetic_fit(rng, noise) for _ in range(600)]
    refit_sd = np.std([f[0] for f in fits], axis=0, ddof=1)
    reported = np.median([f[1] for f in fits], axis=0)
    ratio = reported / refit_sd
    assert np.all(ratio > 0.9) and np.all(ratio < 1.3), (reported, refit_sd)


# --- the table the published suite writes ---------------------------------------------------------------------

def test_terms_table_puts_each_sigma_next_to_its_value_and_the_fit_bounds_beside():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import published_suite as ps
    from calibrate.engine_fit import FIT_BOUNDS_S
    fitted = {("vllm", "0.11.0"): {"per_step_s": 1e-3, "latency_s": 0.04, "per_step_s sigma_log": 0.4,
                                   "latency_s sigma_log": 0.1, "fit noise_log": 0.11, "fit noise from": "measured",
                                   "fit rms_log": 0.3, "fit residuals": 6},
              ("vllm", "0.9.2"): {"per_step_s": 0.05, "per_step_s at bound": 0.05, "fit noise_log": 0.11,
                                  "fit noise from": "measured", "fit rms_log": 0.2, "fit residuals": 3}}
    table = ps.terms_table(fitted, "2026-01-01")
    entry = table["engines"]["vllm"]["0.11.0"]
    assert entry["terms"] == {"per_step_s": 1e-3, "latency_s": 0.04}
    assert entry["sigma_log"] == {"per_step_s": 0.4, "latency_s": 0.1}
    assert entry["fit_error"] == {"noise_log": 0.11, "noise_from": "measured", "rms_log": 0.3, "residuals": 6}
    assert table["engines"]["vllm"]["0.9.2"]["sigma_log"] == {}  # at a bound: no spread (and not used)
    assert table["uncertainty"]["bounds_s"] == FIT_BOUNDS_S and "sandwich" in table["uncertainty"]["method"]


def test_the_shipped_table_has_a_spread_for_every_term_a_preset_uses():
    for name, versions in TABLE["engines"].items():
        for version, entry in versions.items():
            # a term at a bound, or whose 90% range reaches past one, is not used (usable_terms)
            for term in usable_terms(entry["terms"], [*entry["at_bound"], *entry["not_pinned"]]):
                assert 0 < entry["sigma_log"][term] < 3, (name, version, term)


# --- the functions sim/bands.py calls --------------------------------------------------------------------------

def test_a_fitted_preset_spreads_its_fitted_terms_with_the_fits_sigma_and_its_estimates_with_the_stated_range():
    sc = scenario({"name": "vllm", "version": "0.11.0"})
    entry = TABLE["engines"]["vllm"]["0.11.0"]
    spreads = {s.key: s for s in engine_term_spread(sc)}
    assert list(spreads) == [STEP, LATENCY, *INTAKE, PER_SEQ]
    step, latency, per_seq = spreads[STEP], spreads[LATENCY], spreads[PER_SEQ]
    assert (step.point, step.sigma_log, step.kind) == (entry["terms"]["per_step_s"], entry["sigma_log"]["per_step_s"],
                                                      "fitted")
    assert (latency.point, latency.sigma_log) == (entry["terms"]["latency_s"], entry["sigma_log"]["latency_s"])
    assert per_seq.kind == "estimate" and per_seq.point == 10e-6
    assert per_seq.range90() == pytest.approx((10e-6 / ESTIMATE_RANGES["per_seq_s"][0],
                                               10e-6 * ESTIMATE_RANGES["per_seq_s"][0]))
    assert step.upper_s == TABLE["uncertainty"]["bounds_s"]["per_step_s"] and "FIT_BOUNDS_S" in step.clamp_reason


def test_a_version_without_its_own_fit_widens_the_borrowed_sigma_by_the_stated_factor():
    spreads = {s.key: s for s in engine_term_spread(scenario({"name": "vllm", "version": "0.6.3"}))}
    nearest = fitted.nearest_fits("vllm", "0.6.3")  # per term, the nearest version whose fit identified it
    for key, term in ((STEP, "per_step_s"), (LATENCY, "latency_s")):
        fit = nearest[term]
        assert fit.borrowed and spreads[key].kind == "other version" and spreads[key].point == fit.value
        sigma = TABLE["engines"]["vllm"][fit.version]["sigma_log"][term]
        assert spreads[key].sigma_log == pytest.approx(math.hypot(sigma, math.log(OTHER_VERSION_FACTORS[term]) / Z90))


def test_each_term_comes_from_the_nearest_version_whose_fit_identified_it(monkeypatch):
    table = {"engines": {"vllm": {
        "0.11.0": {"terms": {"per_step_s": 1e-3, "latency_s": 0.05}, "at_bound": []},
        "0.9.2": {"terms": {"per_step_s": 6e-3, "latency_s": 1.0}, "at_bound": ["latency_s at bound"]},
        "0.5.0": {"terms": {"per_step_s": 0.05, "latency_s": 0.02}, "at_bound": ["per_step_s at bound"]}}}}
    monkeypatch.setattr(fitted, "fitted_table", lambda: table)
    # A fit that left a term at a bound serves no version: 0.9.2 takes none of its own fit's terms, and 0.6.3 takes
    # neither 0.9.2's nor 0.5.0's, though both are nearer than 0.11.0 (|6-9|, |6-5| < |6-11|)
    own = fitted.nearest_fits("vllm", "0.9.2")
    assert own == {"per_step_s": engines.NearestFit("0.11.0", 1e-3, True),
                   "latency_s": engines.NearestFit("0.11.0", 0.05, True)}
    older = fitted.nearest_fits("vllm", "0.6.3")
    assert older == {"per_step_s": engines.NearestFit("0.11.0", 1e-3, True),
                     "latency_s": engines.NearestFit("0.11.0", 0.05, True)}
    table["engines"]["vllm"]["0.9.2"]["at_bound"] = []  # without its bound, 0.9.2's fit is the nearest, and lent
    assert fitted.nearest_fits("vllm", "0.6.3")["per_step_s"] == engines.NearestFit("0.9.2", 6e-3, True)
    table["engines"]["vllm"]["0.9.2"]["at_bound"] = ["latency_s at bound"]
    terms, where = engines.fitted_terms("vllm", "0.9.2")
    assert terms == {"latency_s": 0.05, "per_step_s": 1e-3}
    assert "taken for vllm 0.9.2, whose own fit left latency_s at a bound" in where
    assert "taken for vllm 0.6.3, which has no fit of its own" in engines.fitted_terms("vllm", "0.6.3")[1]


def test_a_term_its_own_fit_has_not_is_borrowed_and_said_so(monkeypatch):
    # 0.10.0's runs were measured in the engine's own process: its fit has no front-end latency to pin
    table = {"engines": {"vllm": {
        "0.11.0": {"terms": {"per_step_s": 1e-3, "latency_s": 0.05}, "at_bound": []},
        "0.10.0": {"terms": {"per_step_s": 2e-3}, "at_bound": [], "not_pinned": []}}}}
    monkeypatch.setattr(fitted, "fitted_table", lambda: table)
    assert fitted.nearest_fits("vllm", "0.10.0") == {"per_step_s": engines.NearestFit("0.10.0", 2e-3, False),
                                                       "latency_s": engines.NearestFit("0.11.0", 0.05, True)}
    _, where = engines.fitted_terms("vllm", "0.10.0")
    assert "taken for vllm 0.10.0, whose own fit has no such term (its runs do not measure it)" in where


def test_the_nearest_fit_is_nearest_in_release_order_not_number_by_number(monkeypatch):
    order = lambda version, fits: sorted(fits, key=lambda f: engines.release_distance(f, version))  # noqa: E731
    # the same release; then more shared leading numbers; then the closer first differing number
    assert order((0, 9, 2), [(0, 11, 0), (0, 9, 0), (0, 9, 2, 0)]) == [(0, 9, 2, 0), (0, 9, 0), (0, 11, 0)]
    # a new major line is nearer the latest minor release, not the one whose number is smaller (|1-0|, then 6 < 11)
    assert order((1, 0, 0), [(0, 6, 0), (0, 11, 0)]) == [(0, 11, 0), (0, 6, 0)]
    # of releases on one side, the one closer in order: 0.5.3 came after 0.4.6 before 0.5.5 did (|6-5| < |6-3|)
    assert order((0, 4, 6), [(0, 5, 5), (0, 5, 3)]) == [(0, 5, 3), (0, 5, 5)]
    assert order((0, 6, 0), [(0, 5, 3), (0, 5, 5)]) == [(0, 5, 5), (0, 5, 3)]
    assert order((0, 4, 6), [(0, 3, 0), (0, 5, 3)]) == [(0, 5, 3), (0, 3, 0)]  # a tie across sides: the later
    table = {"engines": {"vllm": {
        "0.6.0": {"terms": {"per_step_s": 2e-3}, "at_bound": []},
        "0.11.0": {"terms": {"per_step_s": 1e-3}, "at_bound": []}}}}
    monkeypatch.setattr(fitted, "fitted_table", lambda: table)
    assert fitted.nearest_fits("vllm", "1.0.0")["per_step_s"] == engines.NearestFit("0.11.0", 1e-3, True)
    assert fitted.nearest_fits("vllm", "0.8.5")["per_step_s"] == engines.NearestFit("0.6.0", 2e-3, True)


def test_eager_adds_the_launch_estimate_and_an_engine_without_a_fit_spreads_vllms_estimate(monkeypatch):
    eager = [s.key for s in engine_term_spread(scenario({"name": "vllm", "version": "0.11.0", "enforce_eager": True}))]
    assert eager == [STEP, LATENCY, *INTAKE, PER_SEQ, "cost_model.overhead.launch_per_layer_s"]
    monkeypatch.setattr(fitted, "fitted_table", lambda: {})
    spreads = engine_term_spread(scenario({"name": "sglang", "version": "0.5.3.post3"}))
    # SGLang's steps outside its CUDA graphs (decode batches above 256, prefill before 0.5.10) launch eagerly
    assert [(s.key, s.kind, s.point) for s in spreads] == [(STEP, "estimate", 5e-4), (PER_SEQ, "estimate", 10e-6),
                                                           ("cost_model.overhead.launch_per_layer_s", "estimate", 6e-5)]
    assert spreads[0].sigma_log == pytest.approx(math.log(ESTIMATE_RANGES["per_step_s"][0]) / Z90)


def test_no_engine_preset_means_no_spread_and_a_users_value_is_theirs():
    assert engine_term_spread(scenario(None)) == []
    own = scenario({"name": "vllm", "version": "0.11.0"},
                   cost_model={"kind": "roofline", "overhead": {"engine": "vllm-cudagraph", "per_step_s": 2e-3,
                                                                "per_seq_s": 5e-6}},
                   frontend={"per_request_s": 0.0, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0,
                             "latency_s": 0.02})
    assert engine_term_spread(own) == []
    only_step = scenario({"name": "vllm", "version": "0.11.0"},
                         cost_model={"kind": "roofline", "overhead": {"engine": "vllm-cudagraph", "per_step_s": 2e-3}})
    assert [s.key for s in engine_term_spread(only_step)] == [LATENCY, *INTAKE, PER_SEQ]
    no_overhead = scenario({"name": "vllm", "version": "0.11.0"}, cost_model={"kind": "fixed", "prefill_s": 0.01,
                                                                              "decode_s": 0.01})
    assert [s.key for s in engine_term_spread(no_overhead)] == [LATENCY, *INTAKE]


def test_a_draw_changes_only_the_uncertain_fields_and_z_zero_is_the_point():
    sc = scenario({"name": "vllm", "version": "0.11.0"})
    spreads = {s.key: s for s in engine_term_spread(sc)}
    assert with_engine_terms_drawn(sc, {}) == sc
    assert with_engine_terms_drawn(sc, {STEP: 0.0, LATENCY: 0.0, PER_SEQ: 0.0}) == sc
    z = {STEP: 1.3, LATENCY: -0.7, PER_SEQ: 2.0, "cost_model.overhead.launch_per_layer_s": 1.0}  # the last: not here
    drawn = with_engine_terms_drawn(sc, z)
    o = drawn.cost_model.overhead
    assert o.per_step_s == spreads[STEP].point * math.exp(spreads[STEP].sigma_log * 1.3)
    assert drawn.frontend.latency_s == spreads[LATENCY].point * math.exp(spreads[LATENCY].sigma_log * -0.7)
    assert o.per_seq_s == pytest.approx(10e-6 * math.exp(spreads[PER_SEQ].sigma_log * 2.0))
    assert o.launch_per_layer_s is None and o.per_prefill_token_s is None
    before, after = sc.model_dump(), drawn.model_dump()
    for dump in (before, after):
        for key in (STEP, LATENCY, PER_SEQ):
            section, term = key.rsplit(".", 1)
            node = dump
            for part in section.split("."):
                node = node[part]
            node.pop(term)
    assert before == after  # nothing else moved
    # deterministic: the same z gives the same scenario, byte for byte
    assert with_engine_terms_drawn(sc, z).model_dump_json() == drawn.model_dump_json()


def test_a_draw_beyond_the_fit_bound_is_clamped_to_it():
    sc = scenario({"name": "vllm", "version": "0.11.0"})
    bound = TABLE["uncertainty"]["bounds_s"]["per_step_s"]
    assert with_engine_terms_drawn(sc, {STEP: 12.0}).cost_model.overhead.per_step_s == bound
    assert with_engine_terms_drawn(sc, {STEP: -12.0}).cost_model.overhead.per_step_s > 0


def test_a_term_whose_90_percent_range_passes_its_bound_is_not_pinned_and_not_used(monkeypatch):
    from calibrate.engine_fit import not_pinned
    sigma = math.log(10.0) / Z90  # a 90% range of x/÷ 10
    assert not not_pinned(0.05, sigma, 0.6) and not_pinned(0.07, sigma, 0.6)  # 0.5 s and 0.7 s against 0.6 s
    assert not not_pinned(0.07, 0.0, 0.6)
    table = {"engines": {"sglang": {
        "0.5.3": {"terms": {"per_step_s": 4e-4, "latency_s": 0.014}, "at_bound": [], "not_pinned": []},
        "0.5.5": {"terms": {"per_step_s": 0.016, "latency_s": 0.74}, "at_bound": [],
                  "not_pinned": ["latency_s not pinned"]}}}}
    monkeypatch.setattr(fitted, "fitted_table", lambda: table)
    nearest = fitted.nearest_fits("sglang", "0.5.5")
    assert nearest["per_step_s"] == engines.NearestFit("0.5.5", 0.016, False)
    assert nearest["latency_s"] == engines.NearestFit("0.5.3", 0.014, True)
    _, where = engines.fitted_terms("sglang", "0.5.5")
    assert "taken for sglang 0.5.5, whose own fit did not pin it (its 90% range reaches past the fit's bound)" in where


def test_vllms_chat_template_parse_is_drawn_as_an_estimate_and_a_users_own_is_not():
    chat = {**BASE["workload"], "endpoint": "chat"}
    sc = scenario({"name": "vllm", "version": "0.11.0"}, workload=chat)
    spreads = {s.key: s for s in engine_term_spread(sc)}
    parse = spreads["frontend.per_request_s"]  # 0.11.0's measured chat intake and its template parse
    assert (parse.kind, parse.point) == ("estimate", 3.30e-3 + engines.TEMPLATE_PARSES[-1].work_s)
    assert parse.range90() == pytest.approx((parse.point / ESTIMATE_RANGES["per_request_s"][0],
                                             parse.point * ESTIMATE_RANGES["per_request_s"][0]))
    drawn = with_engine_terms_drawn(sc, {"frontend.per_request_s": 1.0})
    assert drawn.frontend.per_request_s == pytest.approx(parse.point * math.exp(parse.sigma_log))
    assert drawn.frontend.latency_s == sc.frontend.latency_s
    assert {s.key: s.point for s in engine_term_spread(scenario({"name": "vllm", "version": "0.11.0"}))}[
        "frontend.per_request_s"] == 1.57e-3  # completions: the intake alone, nothing parsed
    own = scenario({"name": "vllm", "version": "0.11.0"}, workload=chat,
                   frontend={"per_request_s": 0.01, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0})
    assert "frontend.per_request_s" not in {s.key for s in engine_term_spread(own)}


def test_vllm_060s_measured_api_server_work_is_drawn_as_estimates():
    work = engines.api_server_work((0, 6, 0))
    sc = scenario({"name": "vllm", "version": "0.6.0"})
    spreads = {s.key: s for s in engine_term_spread(sc)}
    for term in ("per_request_s", "per_prompt_token_s", "per_output_chunk_s"):
        spread = spreads[f"frontend.{term}"]
        assert (spread.kind, spread.point) == ("estimate", getattr(work, term))
        factor = ESTIMATE_RANGES[term][0]
        assert spread.range90() == pytest.approx((spread.point / factor, spread.point * factor))
    drawn = with_engine_terms_drawn(sc, {"frontend.per_output_chunk_s": -1.0})
    assert drawn.frontend.per_output_chunk_s == pytest.approx(
        work.per_output_chunk_s * math.exp(-spreads["frontend.per_output_chunk_s"].sigma_log))
    assert drawn.frontend.per_request_s == work.per_request_s
    assert not {f"frontend.{t}" for t in ("per_prompt_token_s", "per_output_chunk_s")} & {
        s.key for s in engine_term_spread(scenario({"name": "sglang", "version": "0.5.6.post2"}))}  # none measured


def test_a_measured_benchmark_client_is_drawn_with_or_without_a_preset_and_a_users_own_is_not():
    from sim.config.bench_clients import BENCH_CLIENT_RANGE, bench_client
    row = bench_client("vllm bench serve", "completions")
    client = {"tool": "vllm bench serve"}
    fe = {"per_request_s": 0.0, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0}
    keys = ["frontend.client.per_request_s", "frontend.client.per_event_s"]
    alone = scenario(None, frontend=fe | {"client": client})
    spreads = engine_term_spread(alone)
    assert [s.key for s in spreads] == keys
    sigma = math.log(BENCH_CLIENT_RANGE[0]) / Z90
    assert [(s.point, s.sigma_log, s.kind) for s in spreads] == [(row.per_request_s, sigma, "estimate"),
                                                                 (row.per_event_s, sigma, "estimate")]
    own = scenario(None, frontend=fe | {"client": client | {"per_event_s": 5e-5}})
    assert engine_term_spread(own) == []  # the user's own numbers
    assert engine_term_spread(scenario(None, frontend=fe | {"client": row.section()})) == []  # numbers, no tool
    chat = scenario(None, frontend=fe | {"client": client}, workload=BASE["workload"] | {"endpoint": "chat"})
    chat_row = bench_client("vllm bench serve", "chat")  # the tool's row for the run's own endpoint, drawn
    assert [s.point for s in engine_term_spread(chat)] == [chat_row.per_request_s, chat_row.per_event_s]
    preset = scenario({"name": "vllm", "version": "0.11.0"})
    with_client = scenario({"name": "vllm", "version": "0.11.0"},
                           frontend=preset.frontend.model_dump(exclude={"client"}) | {"client": client})
    assert [s.key for s in engine_term_spread(with_client)] == [s.key for s in engine_term_spread(preset)] + keys
    drawn = with_engine_terms_drawn(alone, {keys[0]: 1.0, keys[1]: -2.0})
    assert drawn.frontend.client.per_request_s == row.per_request_s * math.exp(sigma)
    assert drawn.frontend.client.per_event_s == row.per_event_s * math.exp(-2.0 * sigma)
    assert drawn.frontend.client.discipline == "event_loop" and drawn.frontend.per_request_s == 0.0
    assert with_engine_terms_drawn(alone, {keys[0]: 0.0}) == alone
