"""The overhead part of a cost-model label, defined once (sim/cost/labels.py `overhead_label`): the run's label
and the planner's (sim/tools/planner.py candidate_cost_model_label, the run's own) name the same terms, and a
preset's fitted term shows in both."""

import copy

from helpers import small_scenario
from sim.config.files import validate_scenario
from sim.cost.labels import overhead_label
from sim.run import simulate
from sim.tools.planner import candidate_cost_model_label


def test_the_defaults_are_named_and_only_terms_apart_from_them_are_listed():
    assert overhead_label("vllm-cudagraph", {}) == "vllm-cudagraph overhead"
    assert overhead_label("vllm-cudagraph", {"per_step_s": 500e-6, "per_seq_s": 10e-6}) == "vllm-cudagraph overhead"
    assert overhead_label("vllm-cudagraph", {"per_step_s": 1.43e-3, "per_seq_s": None}) == \
        "vllm-cudagraph overhead (per_step_s 1.43 ms)"
    assert overhead_label("none", {"per_seq_s": 2e-5, "overlap": True}) == "none overhead (per_seq_s 0.02 ms, overlapped)"
    # whose fit the terms are, where a preset says so, first: overhead.engine names only the defaults of the rest
    assert overhead_label("vllm-cudagraph", {"per_step_s": 17.1e-3}, "SGLang 0.5.5.post1") == \
        "CPU terms fitted for SGLang 0.5.5.post1 (per_step_s 17.1 ms; rest: vllm-cudagraph defaults)"
    assert overhead_label("vllm-cudagraph", {}, "vLLM 0.11.0") == \
        "CPU terms fitted for vLLM 0.11.0 (rest: vllm-cudagraph defaults)"


def test_a_preset_run_and_the_planner_label_its_fitted_term_alike():
    spec = small_scenario({"engine": {"name": "sglang", "version": "0.5.3.post3"}})
    spec.pop("cost_model")
    scenario = validate_scenario(copy.deepcopy(spec))
    run_label = simulate(scenario).extras["cost_model_label"]
    assert " + CPU terms fitted for SGLang 0.5.3.post3 (per_step_s " in run_label
    assert run_label.endswith("; rest: vllm-cudagraph defaults) (default)")
    assert scenario.cost_model.overhead.fitted_for == "SGLang 0.5.3.post3"
    assert "fit: SGLang 0.5.3.post3" in simulate(scenario).extras["cost_model"]  # the repr (meta.json) too
    assert candidate_cost_model_label(spec, scenario) == run_label  # the planner's outcome names it the same


def test_a_preset_that_borrows_its_terms_names_the_version_whose_fit_they_are():
    # vLLM 0.10.2 has no fit of its own for its CPU time: it takes 0.11.0's (sim/config/engines/fitted.py fitted_terms;
    # the nearer 0.9.2's fit left a term at a bound, so it is 0.9.2's own)
    spec = small_scenario({"engine": {"name": "vllm", "version": "0.10.2"}})
    spec.pop("cost_model")
    label = simulate(validate_scenario(spec)).extras["cost_model_label"]
    assert "CPU terms fitted for vLLM 0.11.0 (" in label and "0.10.2" not in label
    own = small_scenario({"engine": {"name": "vllm", "version": "0.10.2"},
                          "cost_model": {"kind": "roofline", "overhead": {"per_step_s": 2e-3}}})
    own_label = simulate(validate_scenario(own)).extras["cost_model_label"]
    assert "fitted" not in own_label and "vllm-cudagraph overhead (per_step_s 2 ms)" in own_label  # a user's own
