"""Fast decode runs (issue 15) against step-by-step simulation, over random small scenarios (hypothesis).

A run of decode-only steps is taken in one engine turn; its step times are the cost model's, summed one
step at a time from the run's start exactly as SimPy's clock would add them, so every per-request record
is bit-identical (no tolerance anywhere): same finish, first-token and last-token times, same counters.
Features without a fast path (speculation, static batching, closed loops over several replicas) fall
back to exact steps: their step records are then identical too.

The summary is the exact mode's too: a run keeps each step's duration and KV state (`Result.decode_runs`).
Every key is identical but the float sums taken in another order (`REASSOCIATED`): a run's row sums its
steps' durations, FLOPs, bytes and KV slot-seconds first, and the summary then sums the rows, where the
exact mode sums the steps in one go (and with several replicas a run's steps are not interleaved with the
other replicas' as the step-by-step log has them). Those agree to float rounding (relative 1e-12).
"""

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.config.files import validate_scenario
from sim.core.engine import _Environment
from sim.errors import ConfigError
from sim.results import REASSOCIATED_SUM_KEYS as REASSOCIATED
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


def assert_same_summary(exact, fast):
    """Every key identical, but REASSOCIATED ones equal to float rounding."""
    assert_summaries_agree(exact.summary, fast.summary)


def assert_summaries_agree(want_summary: dict, got_summary: dict):
    assert list(got_summary) == list(want_summary)
    for key, want in want_summary.items():
        got = got_summary[key]
        if isinstance(want, float) and math.isnan(want):
            assert isinstance(got, float) and math.isnan(got), (key, want, got)
        elif key in REASSOCIATED:
            assert math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-15), (key, want, got)
        else:
            assert got == want and type(got) is type(want), (key, want, got)


def assert_same_steps(exact, fast):
    """The fast step log expanded (`expand_steps` with the runs' records) is the step-by-step one: identical,
    but for FLOPs and bytes (a run's shared out evenly) and, with several replicas, the order of the rows."""
    expanded = expand_steps(fast.steps, fast.decode_runs)
    flops_bytes = ["flops", "bytes"]
    np.testing.assert_allclose(expanded[flops_bytes].sum(), exact.steps[flops_bytes].sum(), rtol=1e-12)
    order = ["replica", "start_s"]
    pd.testing.assert_frame_equal(
        expanded.drop(columns=flops_bytes).sort_values(order, kind="stable").reset_index(drop=True),
        exact.steps.drop(columns=flops_bytes).sort_values(order, kind="stable").reset_index(drop=True),
        check_exact=True)


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
       router=st.sampled_from(["round_robin", "least_outstanding", "least_loaded", "fewest_waiting", "random"]),
       horizon=st.one_of(st.none(), st.floats(0.5, 20.0)), prefix=st.booleans(),
       preemption=st.sampled_from(["recompute", "swap"]), samples=st.sampled_from([1, 1, 3]),
       arrival=st.sampled_from(["poisson", "constant", "closed_loop"]), max_num_seqs=st.sampled_from([2, 8, 16]),
       speculative=st.booleans(), window=st.sampled_from([None, (0.5, 0.5), (1.0, 0.0)]))
def test_fast_decode_runs_give_the_same_request_records(policy, capacity, block_size, rate, seed, replicas, router,
                                                         horizon, prefix, preemption, samples, arrival,
                                                         max_num_seqs, speculative, window):
    batching, layout, chunked = policy
    speculative = speculative and batching == "continuous"
    if arrival == "closed_loop":
        arrival_spec = {"kind": "closed_loop", "num_users": 4, "think_time_s": 0.0 if rate < 30 else 0.05}
    else:
        arrival_spec = {"kind": arrival, "rate_per_s": rate}
    # several samples a prompt share blocks (paged, continuous) and start together (at most max_num_seqs of them)
    sampled = layout == "paged" and batching == "continuous" and not speculative and samples <= max_num_seqs
    spec = {
        "model": "llama-3.1-8b",
        "hardware": {"num_replicas": replicas, "router": router},
        "workload": {"arrival": arrival_spec,
                     "lengths": {"kind": "lognormal", "input_mean": 150, "input_sigma": 1.0,
                                 "output_mean": 40, "output_sigma": 1.0},
                     "samples_per_prompt": samples if sampled else 1},
        "scheduler": {"batching": batching, "chunked_prefill": chunked, "max_num_seqs": max_num_seqs,
                      "max_num_batched_tokens": 256 if chunked else None, "max_model_len": 2048,
                      "max_batch_size": 4, "preemption": {"mode": preemption, "swap_space_bytes": 1 << 26}},
        "kv_cache": {"layout": layout, "capacity_tokens": capacity, "block_size": block_size,
                     "enable_prefix_caching": prefix and layout == "paged"},
        "run": {"seed": seed, "num_requests": 40, "horizon_s": horizon},
    }
    if window is not None and arrival != "closed_loop":  # a steady-state window: its keys count steps by end time
        spec["run"]["warmup_s"], spec["run"]["cooldown_s"] = window
    if prefix and layout == "paged":
        spec["workload"]["prefix"] = {"kind": "shared_system_prompt", "tokens": 64, "fraction": 0.5}
    if speculative:
        spec["speculation"] = {"draft_cost_ratio": 0.1, "num_speculative_tokens": 3}
    try:
        exact, fast = pair(spec)
    except ConfigError as e:  # a window the arrivals do not reach
        assert "warmup_s" in str(e)
        return
    assert_same_requests(exact, fast)
    assert_same_summary(exact, fast)
    assert_same_steps(exact, fast)
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
    # Expanded on demand, the runs give back the steps, each with its own time and KV state.
    assert_same_steps(exact, fast)
    assert_same_summary(exact, fast)
    pd.testing.assert_frame_equal(expand_steps(exact.steps), exact.steps)
    # A step log without the runs' records (read back from a file): the runs' mean step times, same count.
    steps = expand_steps(fast.steps)
    assert len(steps) == len(exact.steps)
    assert (steps["num_output_tokens"].to_numpy() == exact.steps["num_output_tokens"].to_numpy()).all()
    np.testing.assert_allclose(steps["start_s"], exact.steps["start_s"], rtol=1e-3)
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
    assert_same_summary(exact, fast)


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


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), rate=st.floats(0.5, 20.0), sliding_window=st.sampled_from([24, 64, 200]),
       block_size=st.sampled_from([4, 16]), replicas=st.integers(1, 2))
def test_sliding_window_runs_give_the_same_summary(seed, rate, sliding_window, block_size, replicas):
    # Blocks leaving the window go back to the pool inside a run: token and internal slots move with them.
    from sim.model.catalog import get_model

    model = get_model("mistral-7b-v0.1").model_copy(update={"name": "mistral-windowed",
                                                            "sliding_window": sliding_window})
    spec = {
        "model": model.model_dump(mode="json"),
        "hardware": {"num_replicas": replicas, "router": "round_robin"},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": rate},
                     "lengths": {"kind": "lognormal", "input_mean": 150, "input_sigma": 1.0,
                                 "output_mean": 80, "output_sigma": 1.0}},
        "scheduler": {"max_num_seqs": 8, "max_model_len": 2048},
        "kv_cache": {"capacity_tokens": 3000, "block_size": block_size},
        "run": {"seed": seed, "num_requests": 30},
    }
    exact, fast = pair(spec)
    assert exact.summary["kv_window_freed_blocks"] > 0
    assert_same_requests(exact, fast)
    assert_same_summary(exact, fast)
    assert_same_steps(exact, fast)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), rate=st.floats(5.0, 60.0), replicas=st.integers(1, 3),
       check_every_s=st.sampled_from([0.05, 0.5]))
def test_a_run_stopped_early_is_cut_at_the_same_step(seed, rate, replicas, check_every_s):
    # The planner's stop rule looks after the first step ending at or past its next check: a decode run ends
    # there too, so the cut-off run (and its summary) is the step-by-step one.
    from sim.tools.early_verdict import SLOMissRule

    spec = {
        "model": "llama-3.1-8b",
        "hardware": {"num_replicas": replicas, "router": "least_outstanding"},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": rate},
                     "lengths": {"kind": "lognormal", "input_mean": 300, "input_sigma": 1.0,
                                 "output_mean": 150, "output_sigma": 1.0}},
        "scheduler": {"max_num_seqs": 8, "max_model_len": 2048},
        "kv_cache": {"capacity_tokens": 4000, "block_size": 16},
        "slo": {"ttft_s": 0.3, "tpot_s": 0.03, "percentile": 90},
        "run": {"seed": seed, "num_requests": 60},
    }
    results = []
    for fast in (False, True):
        spec["run"]["fast_decode"] = fast
        scenario = validate_scenario(spec)
        results.append(simulate(scenario, stop_when=SLOMissRule(scenario.slo, 60, check_every_s=check_every_s)))
    exact, fast = results
    assert exact.summary.get("stopped_early_s") == fast.summary.get("stopped_early_s")
    pd.testing.assert_frame_equal(exact.requests, fast.requests, check_exact=True)
    assert_same_summary(exact, fast)
    assert_same_steps(exact, fast)


def test_a_stop_rule_without_a_check_time_takes_no_runs():
    spec = {
        "model": "llama-3.1-8b",
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 4.0},
                     "lengths": {"kind": "fixed", "input_tokens": 200, "output_tokens": 100}},
        "run": {"seed": 1, "num_requests": 20, "fast_decode": True},
    }
    result = simulate(validate_scenario(spec), stop_when=lambda sim: False)
    assert (result.steps["num_steps"] == 1).all() and result.decode_runs is None
