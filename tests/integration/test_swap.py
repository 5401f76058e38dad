"""Swap preemption: the victim's KV goes to host memory and back instead of being recomputed."""

import pytest
from helpers import make_request

from sim.config.files import validate_scenario
from sim.kv.paged import PagedKVManager
from sim.run import simulate
from sim.sched.continuous import ContinuousScheduler


def tight(preemption: str, swap_space_bytes: int = 4 << 30):
    return validate_scenario({
        "model": "llama-3.1-8b",
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 30},
                     "lengths": {"kind": "fixed", "input_tokens": 300, "output_tokens": 300}},
        "kv_cache": {"capacity_tokens": 8000, "preemption": preemption, "swap_space_bytes": swap_space_bytes},
        "run": {"seed": 1, "num_requests": 300},
    })


def test_swapped_victim_resumes_without_recomputing():
    kv = PagedKVManager(6, 4)
    sched = ContinuousScheduler(kv, max_num_seqs=8, max_num_batched_tokens=64, chunked_prefill=False,
                                max_model_len=1000, swap_capacity_tokens=100)
    a, b = make_request(8, 10, request_id=1), make_request(8, 10, request_id=2)
    sched.add_request(a)
    sched.add_request(b)
    now, swapped_out, resumed = 0.0, None, None
    while (plan := sched.schedule(now)) is not None:
        if plan.swap_out_tokens:
            swapped_out = (plan.preempted_request_ids, plan.swap_out_tokens, b.num_computed_tokens)
        if plan.swap_in_tokens:
            resumed = plan
        now += 1
        sched.update_from_output(plan, now)
    ids, tokens, kept = swapped_out
    assert ids == [2] and tokens == kept > 8  # the whole KV went out, computed tokens kept
    i = resumed.prefill_request_ids.index(2)
    assert resumed.swap_in_tokens == tokens and resumed.prefill_chunk_tokens[i] == 1  # no recompute
    assert a.num_output_tokens == b.num_output_tokens == 10
    assert sched.swap.free_tokens == 100 and kv.num_free_blocks == 6


def test_swap_moves_bytes_over_the_host_link_and_saves_prefill():
    recompute, swap = simulate(tight("recompute")), simulate(tight("swap"))
    assert recompute.summary["preemptions"] > 0 and swap.summary["preemptions"] > 0
    assert recompute.summary["swapped_bytes"] == 0 and swap.summary["swapped_bytes"] > 0
    # Swapped tokens are not prefilled again.
    assert swap.steps["num_prefill_tokens"].sum() < recompute.steps["num_prefill_tokens"].sum()
    assert (swap.steps["swap_in_tokens"].sum() == swap.steps["swap_out_tokens"].sum())
    assert swap.summary["swapped_bytes"] == 2 * swap.steps["swap_out_tokens"].sum() * 131072


def test_swap_falls_back_to_recompute_when_host_space_is_full():
    none = simulate(tight("swap", swap_space_bytes=0))
    assert none.summary["swapped_bytes"] == 0 and none.summary["preemptions"] > 0


def test_swap_time_is_priced_by_the_host_link():
    from sim.core.step_plan import StepPlan
    from sim.cost.roofline import RooflineCostModel
    from sim.model.catalog import get_gpu, get_model
    gpu = get_gpu("h100-sxm")
    cost = RooflineCostModel(get_model("llama-3.1-8b"), gpu)
    plan = StepPlan(num_decode_seqs=4, decode_context_tokens=4000, num_sampled_seqs=4)
    moved = StepPlan(num_decode_seqs=4, decode_context_tokens=4000, num_sampled_seqs=4, swap_out_tokens=10_000)
    assert cost.step_time(moved) - cost.step_time(plan) == pytest.approx(10_000 * 131072 / gpu.host_link_bytes_per_s)
