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


def test_a_preset_run_and_the_planner_label_its_fitted_term_alike():
    spec = small_scenario({"engine": {"name": "sglang", "version": "0.5.3.post3"}})
    spec.pop("cost_model")
    scenario = validate_scenario(copy.deepcopy(spec))
    run_label = simulate(scenario).extras["cost_model_label"]
    assert "vllm-cudagraph overhead (per_step_s " in run_label
    assert candidate_cost_model_label(spec, scenario) == run_label  # the planner's outcome names it the same
