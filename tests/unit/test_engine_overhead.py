"""Engine overhead outside kernels (sim/cost/overhead.py) and its fit to measured runs (calibrate fit-engine)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from calibrate.engine_fit import TERMS, fit_engine, fitted_scenario_yaml, read_measurements
from sim.config.files import load_scenario_set
from sim.config.schema import Scenario
from sim.core.step_plan import StepPlan
from sim.cost.overhead import ENGINE_DEFAULTS, EngineOverhead, EngineOverheadCostModel, engine_overhead
from sim.cost.roofline import FixedCostModel
from sim.errors import ConfigError
from sim.run import make_cost_model

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "fidelity"
SCENARIO = ROOT / "calibrate" / "fidelity" / "engine-cpu.yaml"
WORKLOAD = {"arrival": {"kind": "poisson", "rate_per_s": 1},
            "lengths": {"kind": "fixed", "input_tokens": 10, "output_tokens": 10}}


def _plan(decodes=4, chunk=0):
    return StepPlan(prefill_request_ids=[99] if chunk else [], prefill_chunk_tokens=[chunk] if chunk else [],
                    prefill_context_tokens=[0] if chunk else [], num_decode_seqs=decodes,
                    decode_context_tokens=100 * decodes, num_sampled_seqs=decodes + (1 if chunk else 0))


def test_terms_add_up_and_launches_overlap_the_kernels():
    o = EngineOverhead("x", per_step_s=1e-3, per_seq_s=1e-4, per_prefill_token_s=1e-6, launch_per_layer_s=1e-4)
    plan = _plan(decodes=4, chunk=50)  # 5 sequences, 50 prefill tokens
    serial = 1e-3 + 5e-4 + 50e-6
    assert o.step_time(0.02, plan, num_layers=10) == pytest.approx(0.02 + serial)  # kernels exceed 1 ms of launches
    assert o.step_time(0.0005, plan, num_layers=10) == pytest.approx(1e-3 + serial)  # launch-bound
    assert o.step_time(0.0, StepPlan(), num_layers=10) == 0.0  # an empty step costs nothing extra


def test_engine_defaults_differ_where_documented():
    assert ENGINE_DEFAULTS["none"].terms() == dict.fromkeys(TERMS, 0.0)
    assert ENGINE_DEFAULTS["vllm-cudagraph"].launch_per_layer_s == 0.0
    assert ENGINE_DEFAULTS["vllm-eager"].launch_per_layer_s > 0.0
    assert "estimate" in ENGINE_DEFAULTS["vllm-eager"].source
    with pytest.raises(ConfigError, match="allowed: vllm-cudagraph, vllm-eager, none"):
        engine_overhead("sglang")
    with pytest.raises(ConfigError, match="per_seq_s"):
        EngineOverhead("x", per_seq_s=-1.0)


def test_wrapper_repr_names_terms_and_kernels():
    cost = EngineOverheadCostModel(FixedCostModel(0.01, 0.002), engine_overhead("vllm-eager", per_seq_s=2e-5), 4)
    text = repr(cost)
    assert "FixedCostModel" in text and "per_seq_s=20us" in text and "launch_per_layer_s=60us" in text
    assert "given: per_seq_s" in text
    assert cost.step_time(_plan(decodes=3)) == pytest.approx(0.002 + 500e-6 + 3 * 2e-5)


def test_scenario_overhead_composes_with_measured_and_keeps_step_overhead():
    plan = _plan(decodes=8)
    bare = make_cost_model(Scenario.model_validate({"workload": WORKLOAD, "cost_model": {"kind": "measured"}}))
    old = make_cost_model(Scenario.model_validate(
        {"workload": WORKLOAD, "cost_model": {"kind": "measured", "step_overhead_s": 0.002}}))
    both = make_cost_model(Scenario.model_validate({"workload": WORKLOAD, "cost_model": {
        "kind": "measured", "step_overhead_s": 0.002, "overhead": {"engine": "vllm-cudagraph"}}}))
    assert old.step_time(plan) == pytest.approx(bare.step_time(plan) + 0.002)  # today's field still works
    assert both.step_time(plan) == pytest.approx(old.step_time(plan) + 500e-6 + 8 * 10e-6)
    assert "MeasuredCostModel" in repr(both) and "overhead vllm-cudagraph" in repr(both)


def test_roofline_overhead_replaces_the_fixed_step_overhead_unless_given():
    plan = _plan(decodes=2)
    fixed = make_cost_model(Scenario.model_validate({"workload": WORKLOAD, "cost_model": {"kind": "roofline"}}))
    none = make_cost_model(Scenario.model_validate(
        {"workload": WORKLOAD, "cost_model": {"kind": "roofline", "overhead": {"engine": "none"}}}))
    assert fixed.step_time(plan) - none.step_time(plan) == pytest.approx(fixed.step_overhead_s)


def test_fit_steps_recovers_known_terms_from_steps_priced_by_hand():
    """Recorded steps whose times are a flat 1 ms kernel plus known terms (per step, per sequence, per prompt
    token): the non-negative least squares gives those terms back; a term the times say is negative is held at 0."""
    from calibrate.engine_fit import Measurements, fit_steps
    from calibrate.fidelity.overhead import step_plan

    steps = read_measurements(FIX / "calib").frames[0]
    plans = [step_plan(r) for r in steps.itertuples()]
    seqs = np.array([p.num_seqs for p in plans], float)
    tokens = np.array([p.num_prefill_tokens for p in plans], float)
    assert len(set(seqs)) > 2 and len(set(tokens)) > 2  # the recorded counts vary: every term is identified
    kernels = FixedCostModel(prefill_s=1e-3, decode_s=1e-3)
    start = EngineOverhead("none")

    def fitted(per_step_s, per_seq_s, per_token_s):
        timed = steps.assign(end_s=steps["start_s"] + 1e-3 + per_step_s + per_seq_s * seqs + per_token_s * tokens)
        return fit_steps(Measurements("steps", [FIX / "calib" / "steps.csv"], [timed]), kernels, start, 1)

    terms, info = fitted(2e-3, 5e-5, 1e-6)
    assert (terms.per_step_s, terms.per_seq_s, terms.per_prefill_token_s) == pytest.approx((2e-3, 5e-5, 1e-6),
                                                                                           rel=1e-6)
    assert info["method"] == "nnls" and info["step_error_after"]["median_abs"] < 1e-9
    terms, _ = fitted(2e-3, -5e-6, 1e-6)
    assert terms.per_seq_s == 0.0 and terms.per_step_s > 0 and terms.per_prefill_token_s > 0


def test_measurements_refused_in_one_line(tmp_path):
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match="MEASUREMENTS: .*allowed: steps.csv"):
        read_measurements(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        read_measurements(tmp_path / "nope.csv")
    assert read_measurements(FIX / "calib").kind == "steps"
    assert read_measurements(FIX / "medium").kind == "requests"


REQUESTS = "arrival_s,first_token_s,finish_s,prompt_tokens,output_tokens\n0.0,0.05,0.6,94,22\n{row}\n"
STEPS = ("start_s,end_s,prefill_chunk_tokens,prefill_context_tokens,num_decode_seqs,decode_context_tokens,"
         "num_sampled_seqs\n0.0,0.1,228,0,0,0,1\n{row}\n")


@pytest.mark.parametrize("text, message", [
    # each was a traceback (ValueError, OverflowError, a math domain error in the profile) or priced inf seconds
    (REQUESTS.format(row="3.3,x,4.7,99,54"), "line 3: first_token_s 'x' is not allowed; allowed: a number of "
     "seconds from -1e+10 to 1e+10"),
    (REQUESTS.format(row="3.3,inf,4.7,99,54"), "line 3: first_token_s inf is not allowed"),
    (REQUESTS.format(row="3.3,3.4,4.7,99.5,54"), "line 3: prompt_tokens 99.5 is not allowed; allowed: a whole "
     "number from 1 to 16,777,216"),
    (REQUESTS.format(row="3.3,3.4,4.7,99,0"), "line 3: output_tokens 0 is not allowed"),
    (REQUESTS.format(row="3.3,3.2,4.7,99,54"), "line 3: first_token_s 3.2 is before arrival_s 3.3; allowed: "
     "first_token_s >= arrival_s (one clock)"),
    (STEPS.format(row="0.1,0.2,,,-1,229,1"), "line 3: num_decode_seqs -1 is not allowed; allowed: a whole number "
     "from 0 to 1,048,576"),
    (STEPS.format(row="0.1,0.2,,,1,1e300,1"), "line 3: decode_context_tokens 1e+300 is not allowed"),
    (STEPS.format(row="0.2,0.1,,,1,229,1"), "line 3: end_s 0.1 is before start_s 0.2"),
    (STEPS.format(row="0.1,0.2,12 x,0 12,1,229,1"), "line 3: prefill_chunk_tokens '12 x' is not allowed; allowed: "
     "space-separated whole numbers from 1 to 16,777,216"),
    (STEPS.format(row="0.1,0.2,12 40,0,1,229,1"), "line 3: prefill_chunk_tokens '12 40' and prefill_context_tokens "
     "'0' differ in length; allowed: one context for each chunk"),
])
def test_a_measured_cell_no_engine_writes_is_refused_naming_its_line(tmp_path, text, message):
    name = "requests.csv" if text.startswith("arrival_s") else "steps.csv"
    (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError) as err:
        read_measurements(tmp_path)
    assert str(err.value).startswith(f"MEASUREMENTS: '{tmp_path / name}' {message}"), str(err.value)
    assert "\n" not in str(err.value)


def test_fit_on_calibration_steps_predicts_held_out_runs():
    scenario = load_scenario_set(SCENARIO).base
    fit = fit_engine(FIX / "calib", scenario, holdout=[FIX / "medium"])
    # The fit read only the calibration run's steps.
    assert fit.info["kind"] == "steps" and fit.info["method"] == "nnls"
    assert all("calib" in p and "medium" not in p for p in fit.info["measurements"])
    assert [e["used_in_fit"] for e in fit.evaluations] == [True, False]
    assert fit.evaluations[1]["repeats"] == 3
    assert all(v >= 0 for v in fit.terms.terms().values()) and fit.terms.per_step_s > 0
    assert "NNLS" in fit.terms.source
    # Fitting to the calibration steps moves their total time toward the measured total.
    assert abs(fit.info["step_error_after"]["total"]) < abs(fit.info["step_error_before"]["total"])
    for e in fit.evaluations:
        assert set(e["error_before"]) == set(e["error_after"]) == {"ttft_mean_s", "tpot_mean_s", "e2e_mean_s"}
    # The written scenario loads and prices with the fitted terms.
    out = yaml.safe_load(fitted_scenario_yaml(scenario, fit))
    terms = out["cost_model"]["overhead"]
    assert terms["per_step_s"] == pytest.approx(fit.terms.per_step_s)
    cost = make_cost_model(Scenario.model_validate(out))
    assert "overhead none" in repr(cost) and "given:" in repr(cost)


def test_cli_fit_engine_refuses_bad_out(tmp_path, capsys):
    from calibrate.cli import main
    with pytest.raises(SystemExit) as exc:
        main(["fit-engine", str(FIX / "calib"), "--scenario", str(SCENARIO), "--out", str(tmp_path / "o.txt")])
    assert exc.value.code == 2
    assert "--out" in capsys.readouterr().err


def test_an_overlapping_engine_takes_the_longer_of_its_kernels_and_its_cpu_work():
    # 2 sequences: serial CPU work 1 ms + 2 x 0.1 ms = 1.2 ms. Without overlap it adds to the kernels; with it the
    # step is the longer of the two (SGLang's overlap scheduler, vLLM's async scheduling).
    plan = _plan(decodes=2)
    terms = {"per_step_s": 1e-3, "per_seq_s": 1e-4}
    serial = EngineOverhead("fitted", **terms)
    overlapped = EngineOverhead("fitted", **terms, overlap=True)
    assert serial.step_time(0.5e-3, plan, 32) == pytest.approx(0.5e-3 + 1.2e-3, rel=1e-12)
    assert overlapped.step_time(0.5e-3, plan, 32) == pytest.approx(1.2e-3, rel=1e-12)
    assert overlapped.step_time(3e-3, plan, 32) == 3e-3
    assert "overlapped with the GPU" in overlapped.describe()



def test_steps_replayed_as_cuda_graphs_pay_no_launch_term():
    # 10 layers x 0.1 ms of launches = 1 ms, above the kernels' 0.2 ms: a launch-bound step where it launches
    o = EngineOverhead("x", per_step_s=1e-3, launch_per_layer_s=1e-4, graph_max_seqs=4)
    assert o.step_time(2e-4, _plan(decodes=4), num_layers=10) == pytest.approx(2e-4 + 1e-3, rel=1e-12)  # a graph
    assert o.step_time(2e-4, _plan(decodes=5), num_layers=10) == pytest.approx(1e-3 + 1e-3, rel=1e-12)  # above it
    assert o.step_time(2e-4, _plan(decodes=1, chunk=8), num_layers=10) == pytest.approx(2e-3, rel=1e-12)  # prefill
    with_prefill = EngineOverhead("x", per_step_s=1e-3, launch_per_layer_s=1e-4, graph_max_seqs=4, graph_prefill=True)
    assert with_prefill.step_time(2e-4, _plan(decodes=1, chunk=8), num_layers=10) == pytest.approx(1.2e-3, rel=1e-12)
    assert with_prefill.step_time(2e-4, _plan(decodes=9), num_layers=10) == pytest.approx(2e-3, rel=1e-12)
    # the defaults (0, false): every step launches, as --enforce-eager's terms always did
    eager = engine_overhead("vllm-eager")
    assert eager.step_time(0.0, _plan(decodes=1), num_layers=10) == pytest.approx(600e-6 + 500e-6 + 10e-6)
    assert with_prefill.describe().endswith("CUDA graphs for decode batches up to 4 and prefill")
    assert o.graphs_described() == "CUDA graphs for decode batches up to 4"
    assert eager.graphs_described() == ""
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError, match=r"^cost_model.overhead.graph_max_seqs: .* allowed: a whole number >= 0$"):
            EngineOverhead("x", graph_max_seqs=bad)


def test_a_scenario_names_its_cuda_graphs_and_the_compiled_pack_carries_them():
    scenario = Scenario.model_validate({
        "name": "g", "model": "llama-3.1-8b", "workload": WORKLOAD, "cost_model": {
            "kind": "roofline", "overhead": {"engine": "vllm-cudagraph", "launch_per_layer_s": 1e-4,
                                             "graph_max_seqs": 8, "graph_prefill": True}}})
    cost = make_cost_model(scenario)
    assert cost.overhead.graph_max_seqs == 8 and cost.overhead.graph_prefill
    terms = cost.overhead.pack(32)
    from sim.cost.overhead import O_GRAPH_MAX_SEQS, O_GRAPH_PREFILL, O_LAUNCH
    assert (terms[O_LAUNCH], terms[O_GRAPH_MAX_SEQS], terms[O_GRAPH_PREFILL]) == pytest.approx((32e-4, 8.0, 1.0))
    from sim.cost.labels import cost_model_label
    assert "CUDA graphs for decode batches up to 8 and prefill" in cost_model_label(cost)
