"""Fast decode runs (issue 15) against step-by-step simulation, over random small scenarios (hypothesis).

A run of decode-only steps is taken in one engine turn; its step times are the cost model's, summed one
step at a time from the run's start exactly as SimPy's clock would add them, so every per-request record
is bit-identical (no tolerance anywhere): same finish, first-token and last-token times, same counters.
Features without a fast path (speculation, static batching, closed loops over several replicas) fall
back to exact steps: their step records are then identical too.
"""

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.config.files import validate_scenario
from sim.core.engine import _Environment
from sim.results import expand_steps
from sim.run import simulate

policies = st.sampled_from([
    ("continuous", "paged", False), ("continuous", "paged", True), ("continuous", "contiguous", False),
    ("static", "paged", False),
])


def pair(spec: dict):
    """The scenario simulated step by step and with fast decode runs."""
    results = []
    for fast in (False, True):
        spec["run"]["fast_decode"] = fast
        results.append(simulate(validate_scenario(spec)))
    return results


def assert_same_requests(exact, fast):
    pd.testing.assert_frame_equal(exact.requests, fast.requests, check_exact=True)
    # The run rows stand for exactly the steps taken one by one, and the same tokens.
    assert fast.steps["num_steps"].sum() == len(exact.steps)
    assert fast.steps["num_output_tokens"].sum() == exact.steps["num_output_tokens"].sum()
    assert fast.summary["num_finished"] == exact.summary["num_finished"]
    np.testing.assert_allclose(fast.steps["duration_s"].sum(), exact.steps["duration_s"].sum(), rtol=1e-12)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=policies, capacity=st.integers(400, 6000), block_size=st.sampled_from([1, 4, 16]),
       rate=st.floats(0.5, 60.0), seed=st.integers(0, 10_000), replicas=st.integers(1, 3),
       router=st.sampled_from(["round_robin", "least_outstanding", "random"]),
       horizon=st.one_of(st.none(), st.floats(0.5, 20.0)), prefix=st.booleans(),
       preemption=st.sampled_from(["recompute", "swap"]), samples=st.sampled_from([1, 1, 3]),
       arrival=st.sampled_from(["poisson", "constant", "closed_loop"]), max_num_seqs=st.sampled_from([2, 8, 16]),
       speculative=st.booleans())
def test_fast_decode_runs_give_the_same_request_records(policy, capacity, block_size, rate, seed, replicas, router,
                                                         horizon, prefix, preemption, samples, arrival,
                                                         max_num_seqs, speculative):
    batching, layout, chunked = policy
    speculative = speculative and batching == "continuous"
    if arrival == "closed_loop":
        arrival_spec = {"kind": "closed_loop", "num_users": 4, "think_time_s": 0.0 if rate < 30 else 0.05}
    else:
        arrival_spec = {"kind": arrival, "rate_per_s": rate}
    spec = {
        "model": "llama-3.1-8b",
        "hardware": {"num_replicas": replicas, "router": router},
        "workload": {"arrival": arrival_spec,
                     "lengths": {"kind": "lognormal", "input_mean": 150, "input_sigma": 1.0,
                                 "output_mean": 40, "output_sigma": 1.0},
                     "samples_per_prompt": samples if layout == "paged" and batching == "continuous" and not speculative else 1},
        "scheduler": {"batching": batching, "chunked_prefill": chunked, "max_num_seqs": max_num_seqs,
                      "max_num_batched_tokens": 256 if chunked else None, "max_model_len": 2048,
                      "max_batch_size": 4, "preemption": {"mode": preemption, "swap_space_bytes": 1 << 26}},
        "kv_cache": {"layout": layout, "capacity_tokens": capacity, "block_size": block_size,
                     "enable_prefix_caching": prefix and layout == "paged"},
        "run": {"seed": seed, "num_requests": 40, "horizon_s": horizon},
    }
    if prefix and layout == "paged":
        spec["workload"]["prefix"] = {"kind": "shared_system_prompt", "tokens": 64, "fraction": 0.5}
    if speculative:
        spec["speculation"] = {"draft_cost_ratio": 0.1, "num_speculative_tokens": 3}
    exact, fast = pair(spec)
    assert_same_requests(exact, fast)
    if speculative or batching == "static" or (arrival == "closed_loop" and replicas > 1):
        # No fast path there: the fast run takes every step itself, and logs it the same.
        pd.testing.assert_frame_equal(exact.steps, fast.steps, check_exact=True)


def test_decode_runs_happen_and_shrink_the_step_log():
    spec = {
        "model": "llama-3.1-8b",
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 4.0},
                     "lengths": {"kind": "fixed", "input_tokens": 200, "output_tokens": 300}},
        "run": {"seed": 1, "num_requests": 100},
    }
    exact, fast = pair(spec)
    assert_same_requests(exact, fast)
    assert fast.steps["num_steps"].max() > 10 and len(fast.steps) < len(exact.steps) / 3
    assert (exact.steps["num_steps"] == 1).all()
    # Expanded on demand, the runs give back the steps: same count, tokens and busy time.
    steps = expand_steps(fast.steps)
    assert len(steps) == len(exact.steps)
    assert (steps["num_output_tokens"].to_numpy() == exact.steps["num_output_tokens"].to_numpy()).all()
    np.testing.assert_allclose(steps["start_s"], exact.steps["start_s"], rtol=1e-3)
    np.testing.assert_allclose(steps["duration_s"].sum(), exact.steps["duration_s"].sum(), rtol=1e-12)
    pd.testing.assert_frame_equal(expand_steps(exact.steps), exact.steps)
    # Summaries that count steps weight a run's row by its steps.
    assert fast.summary["mean_batch_size"] == exact.summary["mean_batch_size"]
    assert fast.summary["output_tokens_per_s"] == exact.summary["output_tokens_per_s"]


def test_roofline_decode_step_costs_are_step_cost_bit_for_bit():
    from sim.core.step_plan import StepPlan
    from sim.cost.roofline import RooflineCostModel
    from sim.model.catalog import get_gpu, get_model

    # Dense, tensor parallel, sliding window (contexts past it), mixture of experts, MLA.
    for name, tp in (("llama-3.1-8b", 1), ("llama-3.1-70b", 4), ("mistral-7b-v0.1", 1), ("mixtral-8x7b", 2),
                     ("deepseek-v2-lite", 1)):
        cm = RooflineCostModel(get_model(name), get_gpu("h100-sxm"), tensor_parallel=tp)
        for n, ctx in ((1, 1), (2, 20_000), (7, 3000), (256, 200_000)):
            run = cm.decode_step_costs(n, ctx, 5)
            for k, cost in enumerate(run):
                plan = StepPlan(num_decode_seqs=n, decode_context_tokens=ctx + k * n, num_sampled_seqs=n)
                assert cost == cm.step_cost(plan)


@given(start=st.floats(0, 1e7), gap=st.floats(1e-9, 1e6))
def test_a_run_lands_the_clock_exactly_on_its_last_step_end(start, gap):
    end = start + gap
    env = _Environment(initial_time=start)
    env.run(until=env.timeout_at(end))
    assert env.now == end


def test_timeout_at_reaches_a_time_no_delay_can():
    # Halfway cases: start + delay rounds to even, so no delay takes this start to this end.
    start, end = 0.9795905402983694, 1.9800306081192647
    env = _Environment(initial_time=start)
    env.run(until=env.timeout_at(end))
    assert env.now == end


COST_MODELS = {
    "steps fused": {"kind": "calibrated", "engine": "fused"},
    "steps fused + eager overhead": {"kind": "calibrated", "engine": "fused", "overhead": {"engine": "vllm-eager"}},
    "calibrated ops": {"kind": "calibrated", "engine": "ops"},
    "measured": {"kind": "measured"},
    "measured + cudagraph overhead": {"kind": "measured", "overhead": {"engine": "vllm-cudagraph"}},
    "learned roofline": {"kind": "roofline", "efficiencies": "learned"},
}


@pytest.mark.parametrize("cost", sorted(COST_MODELS))
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), rate=st.floats(1.0, 40.0),
       capacity=st.integers(600, 6000), chunked=st.booleans(), replicas=st.integers(1, 2))
def test_fast_decode_runs_are_exact_with_every_cost_model(cost, seed, rate, capacity, chunked, replicas):
    spec = {
        "model": "llama-3.1-8b",
        "hardware": {"num_replicas": replicas, "router": "least_outstanding"},
        "cost_model": COST_MODELS[cost],
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": rate},
                     "lengths": {"kind": "lognormal", "input_mean": 150, "input_sigma": 1.0,
                                 "output_mean": 60, "output_sigma": 1.0}},
        "scheduler": {"chunked_prefill": chunked, "max_num_batched_tokens": 256 if chunked else None,
                      "max_model_len": 2048},
        "kv_cache": {"capacity_tokens": capacity, "block_size": 16},
        "run": {"seed": seed, "num_requests": 40},
    }
    exact, fast = pair(spec)
    assert_same_requests(exact, fast)


def test_every_cost_model_takes_decode_runs():
    # Each cost model's closed form is the one taken, and runs do form (fewer step rows than steps).
    for cost in COST_MODELS.values():
        spec = {
            "model": "llama-3.1-8b", "cost_model": cost,
            "workload": {"arrival": {"kind": "poisson", "rate_per_s": 4.0},
                         "lengths": {"kind": "fixed", "input_tokens": 200, "output_tokens": 200}},
            "run": {"seed": 2, "num_requests": 30},
        }
        exact, fast = pair(spec)
        assert_same_requests(exact, fast)
        assert fast.steps["num_steps"].max() > 10 and len(fast.steps) < len(exact.steps) / 3
