"""Known answer: a decode run's summary weights each of its steps by its own duration and KV state (issue 15).

Two 3-token prompts arrive at 0 and each asks for 6 output tokens; paged KV with 4-token blocks. The prefill
step (0.5 s) computes both prompts (one block each, 2 slots of internal fragmentation) and samples their first
tokens. Then 5 decode steps, each priced at context x 0.125 s: contexts 8, 10, 12, 14, 16 tokens, so
1.0, 1.25, 1.5, 1.75 and 2.0 s. The step-by-step log holds the state after each step (before the next
step's blocks): 8, 10, 12, 14 token slots, then 0 (both finish in the last step and free their blocks);
the block boundary is inside the run (the 5th token of each sequence opens a block in step 1), so
allocated slots go 8, 16, 16, 16, then 0, and internal fragmentation 0, 6, 4, 2, 0.

Token slot-seconds: 6 x 0.5 + 8 x 1 + 10 x 1.25 + 12 x 1.5 + 14 x 1.75 + 0 x 2 = 66;
internal: 2 x 0.5 + 0 + 6 x 1.25 + 4 x 1.5 + 2 x 1.75 + 0 = 18; capacity 64 slots x 8 s = 512.
(Weighting the run's end state by its whole duration, as before, gave 3 and 1.)
"""

from types import SimpleNamespace

import numpy as np
import pytest

from sim.core.engine import Replica, Simulation
from sim.core.router import make_router
from sim.cost.roofline import StepCost
from sim.kv.paged import PagedKVManager
from sim.results import (
    DecodeRuns,
    expand_steps,
    kv_slot_seconds,
    latencies,
    steps_frame,
    utilization,
)
from sim.sched.continuous import ContinuousScheduler

GPU = SimpleNamespace(hbm_bytes_per_s=1.0, bf16_flops_per_s=1.0)


class ContextCost:
    """Prefill 0.5 s; a decode step 0.125 s per context token (exact binary fractions)."""

    def step_cost(self, plan):
        if plan.prefill_request_ids:
            return StepCost(0.5, 0.0, 0.0)
        return StepCost(plan.decode_context_tokens * 0.125, 0.0, 0.0)


def run(fast: bool):
    kv = PagedKVManager(num_blocks=16, block_size=4)
    scheduler = ContinuousScheduler(kv, max_num_seqs=4, max_num_batched_tokens=64, chunked_prefill=False,
                                    max_model_len=64)
    sim = Simulation([Replica(0, scheduler, ContextCost())], make_router("round_robin", 0),
                     arrival_s=np.zeros(2), input_tokens=np.array([3, 3]), output_tokens=np.array([6, 6]),
                     fast_decode=fast)
    sim.run()
    steps = steps_frame(sim.steps.arrays())
    arrays = sim.steps.run_arrays()
    return steps, (DecodeRuns.from_arrays(arrays) if len(arrays["step_duration_s"]) else None)


@pytest.mark.parametrize("fast", [False, True])
def test_a_decode_run_weights_each_step_by_its_own_duration_and_state(fast):
    steps, runs = run(fast)
    assert list(steps["num_steps"]) == ([1, 5] if fast else [1] * 6)
    assert (runs is not None) == fast
    if fast:
        np.testing.assert_array_equal(runs.step_duration_s, [1.0, 1.25, 1.5, 1.75, 2.0])
        np.testing.assert_array_equal(runs.kv["kv_token_slots"], [8, 10, 12, 14])
        np.testing.assert_array_equal(runs.kv["kv_internal_slots"], [0, 6, 4, 2])
    area = {col: values.sum() for col, values in kv_slot_seconds(steps, runs).items()}
    assert area["kv_capacity_slots"] == 512.0
    assert area["kv_token_slots"] == 66.0
    assert area["kv_internal_slots"] == 18.0
    assert area["kv_reserved_slots"] == area["kv_external_slots"] == area["kv_shared_slots"] == 0.0
    s = utilization(steps, 8.0, GPU, runs=runs)
    assert s["kv_token_fraction"] == 66 / 512 and s["kv_internal_fraction"] == 18 / 512
    assert s["kv_free_fraction"] == (512 - 84) / 512 and s["mean_batch_size"] == 2.0
    # speculative: the mean too is the step log's gaps' (otherwise the requests' spans, and there are none here)
    itl = latencies(steps.iloc[:0].assign(ttft_s=[], tpot_s=[], e2e_s=[], queueing_s=[], normalized_latency_s=[]),
                    steps, runs, speculative=True)
    assert itl["itl_mean"] == 1.5 and itl["itl_p50"] == 1.5 and itl["itl_p90"] == 2.0 and itl["itl_p99"] == 2.0
    one_per_step = expand_steps(steps, runs)
    np.testing.assert_array_equal(one_per_step["start_s"], [0.0, 0.5, 1.5, 2.75, 4.25, 6.0])
    np.testing.assert_array_equal(one_per_step["kv_token_slots"], [6, 8, 10, 12, 14, 0])
    np.testing.assert_array_equal(one_per_step["kv_internal_slots"], [2, 0, 6, 4, 2, 0])
    np.testing.assert_array_equal(one_per_step["kv_free_slots"], [56, 56, 48, 48, 48, 64])


def test_without_the_run_records_a_run_counts_its_end_state():
    steps, _ = run(True)
    area = kv_slot_seconds(steps)
    assert area["kv_token_slots"].sum() == 3.0 and area["kv_internal_slots"].sum() == 1.0
