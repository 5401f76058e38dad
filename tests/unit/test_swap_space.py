"""Where a preempted request's KV goes (sim/sched/swap_space.py): host memory while it has room, else recompute."""

import pytest
from helpers import make_request

from sim.kv.paged import PagedKVManager
from sim.sched.continuous import ContinuousScheduler
from sim.sched.swap_space import NoSwapSpace, SwapSpace, swap_space


def victim(computed: int, request_id: int):
    r = make_request(computed, 10, request_id=request_id)
    r.num_computed_tokens = computed
    return r


def test_a_victim_that_fits_keeps_its_tokens_and_comes_back():
    space = SwapSpace(100)
    a, b = victim(60, 1), victim(30, 2)
    assert space.evict(a) == 60 and a.num_computed_tokens == 60
    assert space.evict(b) == 30 and space.free_tokens == 10 and space.swapped == {1: 60, 2: 30}
    assert space.swap_in(1) == 60 and space.free_tokens == 70 and space.swapped == {2: 30}
    assert space.swap_in(3) == 0 and space.free_tokens == 70  # never swapped out


def test_a_victim_that_does_not_fit_is_recomputed():
    space = SwapSpace(50)
    big = victim(60, 1)
    assert space.evict(big) == 0 and big.num_computed_tokens == 0 and space.free_tokens == 50
    nothing = victim(0, 2)  # nothing computed yet: nothing to keep
    assert space.evict(nothing) == 0 and not space.swapped


def test_recompute_mode_has_no_space_and_no_bookkeeping():
    space = swap_space(0)
    assert isinstance(space, NoSwapSpace) and space.capacity_tokens == space.free_tokens == 0
    r = victim(40, 1)
    assert space.evict(r) == 0 and r.num_computed_tokens == 0
    assert space.swap_in(1) == 0
    assert isinstance(swap_space(8), SwapSpace)


@pytest.mark.parametrize("capacity_tokens, swapped", [(10, True), (6, False)])
def test_the_scheduler_sends_its_victim_through_its_swap_space(capacity_tokens, swapped):
    kv = PagedKVManager(4, 4)
    sched = ContinuousScheduler(kv, max_num_seqs=4, max_num_batched_tokens=64, chunked_prefill=False,
                                max_model_len=64, swap_capacity_tokens=capacity_tokens)
    a, b = make_request(4, 8, request_id=1), make_request(4, 8, request_id=2)
    sched.add_request(a)
    sched.add_request(b)
    now = 0.0
    for _ in range(5):  # both prompts (blocks 0, 1), then tokens 5 (blocks 2, 3) to 8: the cache is full
        plan = sched.schedule(now)
        assert not plan.preempted_request_ids
        now += 1
        sched.update_from_output(plan, now)
    plan = sched.schedule(now)  # token 9 of each needs a block and none is free: b (last admitted) goes
    assert plan.preempted_request_ids == [2] and plan.num_decode_seqs == 1
    assert kv.block_tables == {1: [0, 2, 1]}  # b's blocks 1 and 3 freed, block 1 taken by a's token 9
    if swapped:
        assert plan.swap_out_tokens == 8 and b.num_computed_tokens == 8 and sched.swap.free_tokens == 2
    else:
        assert plan.swap_out_tokens == 0 and b.num_computed_tokens == 0 and sched.swap.free_tokens == 6
    while (plan := sched.schedule(now)) is not None and 2 not in plan.new_request_ids:
        now += 1
        sched.update_from_output(plan, now)
    # Back once a has finished: a swapped b copies its 8 tokens in and computes one; else all 8 + 1 again.
    assert plan.swap_in_tokens == (8 if swapped else 0)
    assert plan.prefill_chunk_tokens == [1 if swapped else 9] and sched.swap.free_tokens == capacity_tokens
