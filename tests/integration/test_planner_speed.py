"""Issue 15: the planner's shortcuts (early verdicts, one cost model per candidate, reused simulations) give the
same plan as the exhaustive planner, which runs every simulation to its end from scratch."""

from __future__ import annotations

import copy

import pytest
from helpers import PLAN_LENGTHS, PLAN_SLO, small_scenario

from sim.results import same_up_to_reassociation as _same
from sim.tools.planner import plan_settings, run_plan

# One GPU, two TP degrees, two policies, the roofline: a plan of a few seconds that still has failing probes
# (the searches bracket each candidate's limit) and a replica search at the target. Chunked prefill with this
# budget sustains the rates plain batching does, so its searches start from the paged ones' brackets.
PLAN = small_scenario({'name': 'plan-speed',
                       'workload': {'arrival': {'rate_per_s': 30}, 'lengths': PLAN_LENGTHS},
                       'scheduler': {'max_model_len': 4096},
                       'slo': PLAN_SLO,
                       'run': {'num_requests': 120},
                       'search': {'gpus': ['l40s'], 'tensor_parallel': [1, 2], 'max_replicas': 6, 'num_seeds': 2,
                                  'min_window_s': 5, 'rate_tolerance': 0.05, 'top_k': 1,
                                  'prefer_calibrated': False},
                       'variants': {'paged': {},
                                    'chunked': {'scheduler': {'chunked_prefill': True,
                                                              'max_num_batched_tokens': 2048}}}})


@pytest.fixture(scope="module")
def plans():
    raw = copy.deepcopy(PLAN)
    exhaustive = run_plan(copy.deepcopy(raw), plan_settings(raw, exhaustive=True), backend="serial")
    fast = run_plan(copy.deepcopy(raw), plan_settings(raw), backend="serial")
    return exhaustive, fast


def test_fast_plan_recommends_what_the_exhaustive_plan_does(plans):
    exhaustive, fast = plans
    assert exhaustive.recommendation is not None
    assert fast.recommendation.candidate == exhaustive.recommendation.candidate
    assert fast.recommendation.num_replicas == exhaustive.recommendation.num_replicas


def test_every_candidate_gets_the_same_rates_replicas_and_metrics_at_the_target(plans):
    exhaustive, fast = plans
    assert [o.candidate for o in fast.outcomes] == [o.candidate for o in exhaustive.outcomes]
    for f, e in zip(fast.outcomes, exhaustive.outcomes):
        assert (f.status, f.reason, f.num_replicas) == (e.status, e.reason, e.num_replicas), f.candidate.name
        # The searches took the same path: the same best rate, to the last bit.
        assert f.max_rate_per_replica == e.max_rate_per_replica, f.candidate.name
        assert f.saturated_rate_per_replica == e.saturated_rate_per_replica
        assert _same(f.at_target, e.at_target) and _same(f.costs, e.costs), f.candidate.name
        probes = [(v.num_replicas, v.rate_per_s, v.seed, v.slo_met) for v in f.evaluations]
        if f.candidate.policy == "paged":  # the first policy of its GPU and TP: the same probes in the same order
            assert probes == [(v.num_replicas, v.rate_per_s, v.seed, v.slo_met) for v in e.evaluations]
        else:  # its search first tried the bracket of "paged"; the probes the exhaustive plan also ran agree
            verdicts = {(v.num_replicas, v.rate_per_s, v.seed): v.slo_met for v in e.evaluations}
            assert all(verdicts[p[:3]] == p[3] for p in probes if p[:3] in verdicts), f.candidate.name
            # Others: at most that bracket's two rates, where they did not settle the search.
            assert len([p for p in probes if p[:3] not in verdicts]) <= 2, f.candidate.name


def test_a_neighbours_bracket_settled_a_search_with_fewer_probes(plans):
    exhaustive, fast = plans
    runs = {o.candidate: len(o.evaluations) for o in exhaustive.outcomes}
    fewer = [o.candidate.name for o in fast.outcomes if len(o.evaluations) < runs[o.candidate]]
    assert fewer and all("chunked" in name for name in fewer), fewer


def test_curves_and_seeds_are_the_same(plans):
    exhaustive, fast = plans
    assert len(fast.curves) == len(exhaustive.curves) == 1
    for f, e in zip(fast.curves, exhaustive.curves):
        assert (f.candidate, f.num_replicas, f.max_rate_per_s) == (e.candidate, e.num_replicas, e.max_rate_per_s)
        assert [(p.rate_per_s, p.slo_met) for p in f.points] == [(p.rate_per_s, p.slo_met) for p in e.points]
        assert all(_same(p.metrics, q.metrics) for p, q in zip(f.points, e.points))
    assert [(s.seed, s.min_replicas) for s in fast.seeds] == [(s.seed, s.min_replicas) for s in exhaustive.seeds]
    assert all(_same(f.at_recommendation.metrics, e.at_recommendation.metrics)
               for f, e in zip(fast.seeds, exhaustive.seeds))


def test_fast_plan_stopped_failing_probes_early_and_ran_passing_ones_in_full(plans):
    exhaustive, fast = plans
    stopped = [v for o in fast.outcomes for v in o.evaluations if not v.complete]
    assert stopped, "no probe stopped early: the test no longer exercises the shortcut"
    assert all(not v.slo_met and v.metrics["stopped_early_s"] > 0 for v in stopped)
    assert all(v.complete for o in exhaustive.outcomes for v in o.evaluations)
    full = {(o.candidate, v.num_replicas, v.rate_per_s, v.seed): v for o in exhaustive.outcomes for v in o.evaluations}
    for o in fast.outcomes:
        for v in o.evaluations:
            if v.complete:  # a run that went to its end reports what the exhaustive planner's did
                assert _same(v.metrics, full[(o.candidate, v.num_replicas, v.rate_per_s, v.seed)].metrics)


def test_a_cached_plan_runs_no_simulation_and_gives_the_same_plan(tmp_path, monkeypatch, plans):
    exhaustive, _ = plans
    raw = copy.deepcopy(PLAN)
    settings = plan_settings(raw, cache_dir=str(tmp_path / "cache"))
    first = run_plan(copy.deepcopy(raw), settings, backend="serial")
    stored = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert any(name.endswith(".json") for name in stored)

    def no_simulation(*args, **kwargs):
        raise AssertionError("a cached plan simulated")
    monkeypatch.setattr("sim.run.simulate", no_simulation)
    again = run_plan(copy.deepcopy(raw), settings, backend="serial")
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == stored
    for a, b, e in zip(again.outcomes, first.outcomes, exhaustive.outcomes):
        assert (a.candidate, a.status, a.num_replicas, a.max_rate_per_replica) == \
               (e.candidate, e.status, e.num_replicas, e.max_rate_per_replica)
        assert _same(a.at_target, b.at_target) and _same(a.at_target, e.at_target)
        assert [(v.rate_per_s, v.slo_met, v.complete) for v in a.evaluations] == \
               [(v.rate_per_s, v.slo_met, v.complete) for v in b.evaluations]
    assert [c.max_rate_per_s for c in again.curves] == [c.max_rate_per_s for c in exhaustive.curves]
    assert [s.min_replicas for s in again.seeds] == [s.min_replicas for s in exhaustive.seeds]


def test_a_cache_path_that_is_a_file_is_a_one_line_error(tmp_path):
    from sim.errors import ConfigError
    from sim.tools.plan_cache import PlanCache
    path = tmp_path / "not-a-folder"
    path.write_text("")
    with pytest.raises(ConfigError, match="--cache: .*is a file"):
        PlanCache(path)


def test_the_cache_key_names_the_scenario_and_the_stop_rule(tmp_path):
    from sim.tools.plan_cache import PlanCache
    cache = PlanCache(tmp_path)
    raw = copy.deepcopy(PLAN)
    keys = {cache.key("evaluation", raw, stop_early=True), cache.key("evaluation", raw, stop_early=False),
            cache.key("evaluation", {**raw, "run": {**raw["run"], "seed": 1}}, stop_early=True),
            cache.key("saturated_rate", raw)}
    assert len(keys) == 4
    assert cache.key("evaluation", copy.deepcopy(raw), stop_early=True) in keys


@pytest.mark.parametrize("cost_model", [{"kind": "roofline"}, {"kind": "measured"}, {"kind": "calibrated"}])
def test_no_cost_model_reads_the_scheduler_section_so_policy_variants_share_one(cost_model):
    # The planner builds one cost model for the scenarios that differ only in `scheduler` (_cost_model_key):
    # right only while no cost model reads that section.
    from sim.config.files import validate_scenario
    from sim.core.step_plan import StepPlan
    from sim.run import make_cost_model
    from sim.tools.planner import _cost_model_key
    base = small_scenario({"hardware": {"gpu": "h100-sxm"}, "cost_model": cost_model})
    other = small_scenario({"hardware": {"gpu": "h100-sxm"}, "cost_model": cost_model,
                            "scheduler": {"chunked_prefill": True, "max_num_batched_tokens": 512, "max_num_seqs": 64,
                                          "max_model_len": 2048}})
    assert _cost_model_key(base) == _cost_model_key(other)
    a, b = (make_cost_model(validate_scenario(raw)) for raw in (base, other))
    assert type(a) is type(b) and repr(a) == repr(b)
    for plan in (StepPlan(prefill_request_ids=[0], prefill_chunk_tokens=[300], prefill_context_tokens=[0],
                          num_sampled_seqs=1),
                 StepPlan(num_decode_seqs=40, decode_context_tokens=40 * 900, num_sampled_seqs=40)):
        assert a.step_cost(plan) == b.step_cost(plan)
