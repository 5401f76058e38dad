"""Schedulers at the policy level: tiny configs, exact plans, no event loop."""

import math

from helpers import make_request
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core.request import RequestStatus
from sim.kv.contiguous import ContiguousKVManager
from sim.kv.paged import PagedKVManager
from sim.sched.continuous import ContinuousScheduler
from sim.sched.static import StaticScheduler


def continuous(kv, max_num_seqs=8, budget=64, chunked=False, max_model_len=4096):
    return ContinuousScheduler(kv, max_num_seqs=max_num_seqs, max_num_batched_tokens=budget,
                               chunked_prefill=chunked, max_model_len=max_model_len)


def run_to_end(sched, max_steps=10_000):
    now, plans, finished = 0.0, [], []
    for _ in range(max_steps):
        plan = sched.schedule(now)
        if plan is None:
            break
        now += 1.0
        plans.append(plan)
        finished += sched.update_from_output(plan, now).finished
    return plans, finished


def test_one_request_prefill_then_decodes():
    sched = continuous(PagedKVManager(64, 4))
    r = make_request(prompt=10, output=3)
    sched.add_request(r)
    p1 = sched.schedule(0.0)
    assert p1.prefill_chunk_tokens == [10] and p1.prefill_context_tokens == [0] and p1.num_decode_seqs == 0
    sched.update_from_output(p1, 1.0)
    assert r.num_output_tokens == 1 and r.first_token_s == 1.0
    p2 = sched.schedule(1.0)
    assert p2.num_decode_seqs == 1 and p2.decode_context_tokens == 11 and not p2.prefill_request_ids
    sched.update_from_output(p2, 2.0)
    p3 = sched.schedule(2.0)
    assert p3.decode_context_tokens == 12
    out = sched.update_from_output(p3, 3.0)
    assert out.finished == [r] and r.status is RequestStatus.FINISHED
    assert r.num_output_tokens == 3 and r.num_computed_tokens == 12 == r.num_final_kv_tokens
    assert r.finish_s == 3.0 and sched.schedule(3.0) is None
    assert sched.kv.num_free_blocks == 64


def test_recompute_preemption_of_most_recent():
    # 6 blocks of 4 slots; two requests of prompt 8 take 2 blocks each, then grow until the cache is full.
    kv = PagedKVManager(6, 4)
    sched = continuous(kv, budget=64)
    a, b = make_request(8, 10, request_id=1000), make_request(8, 10, request_id=1001)
    sched.add_request(a)
    sched.add_request(b)
    plans, finished = run_to_end(sched)
    assert sorted(r.request_id for r in finished) == [1000, 1001]
    preempting = [p for p in plans if p.preempted_request_ids]
    assert preempting and preempting[0].preempted_request_ids == [1001]  # the later admission goes first
    assert a.num_preemptions == 0 and b.num_preemptions >= 1
    # b recomputes its prompt plus what it had generated, in one prefill, then samples the next token.
    resumed = next(p for p in plans[plans.index(preempting[0]) + 1:] if 1001 in p.prefill_request_ids)
    i = resumed.prefill_request_ids.index(1001)
    assert resumed.prefill_chunk_tokens[i] > 8 and resumed.prefill_context_tokens[i] == 0
    assert kv.num_free_blocks == 6 and not sched.running and not sched.waiting
    for p in plans:
        assert p.num_tokens <= 64


def test_chunked_prefill_decodes_first_then_chunks():
    sched = continuous(PagedKVManager(256, 16), budget=32, chunked=True)
    short, long = make_request(4, 5), make_request(100, 2)
    sched.add_request(short)
    p = sched.schedule(0.0)
    sched.update_from_output(p, 1.0)
    sched.add_request(long)
    p = sched.schedule(1.0)
    assert p.num_decode_seqs == 1 and p.prefill_chunk_tokens == [31]  # budget 32 minus one decode
    sched.update_from_output(p, 2.0)
    p = sched.schedule(2.0)
    assert p.prefill_context_tokens == [31] and p.prefill_chunk_tokens == [31]
    assert long.first_token_s is not None and math.isnan(long.first_token_s)


def test_without_chunking_a_prompt_waits_for_a_whole_budget():
    sched = continuous(PagedKVManager(256, 16), budget=40, max_num_seqs=4)
    sched.add_request(make_request(30, 4))
    sched.add_request(make_request(30, 4))
    p = sched.schedule(0.0)
    assert p.prefill_chunk_tokens == [30]  # the second does not fit the remaining 10 tokens


def test_rejects_what_can_never_fit():
    sched = continuous(PagedKVManager(4, 4), budget=64)
    r = make_request(20, 5)
    assert sched.add_request(r) is False and r.status is RequestStatus.REJECTED
    assert "KV slots" in r.reject_reason


def test_contiguous_admission_blocks_on_fragmentation():
    kv = ContiguousKVManager(capacity_slots=100, reserve="max_len", max_len=60)
    sched = continuous(kv, budget=200)
    a, b = make_request(10, 5), make_request(10, 5)
    sched.add_request(a)
    sched.add_request(b)
    p = sched.schedule(0.0)
    assert p.prefill_request_ids == [a.request_id]  # 60 slots each: only one region fits in 100


def test_static_batch_pads_and_returns_together():
    kv = ContiguousKVManager(capacity_slots=10_000, reserve="max_len", max_len=1000)
    sched = StaticScheduler(kv, max_batch_size=3, batch_timeout_s=0.0, max_model_len=1000)
    reqs = [make_request(5, 2), make_request(20, 4), make_request(10, 1), make_request(7, 3)]
    for r in reqs:
        sched.add_request(r)
    plans, finished = run_to_end(sched)
    first = plans[0]
    assert first.prefill_chunk_tokens == [20, 20, 20]  # padded to the longest prompt
    # Decodes until the longest output is done: 3 more steps, all three slots computing.
    assert [p.num_decode_seqs for p in plans[1:4]] == [3, 3, 3]
    assert [p.num_padding_seqs for p in plans[1:4]] == [1, 2, 2]
    assert [p.decode_context_tokens for p in plans[1:4]] == [63, 66, 69]
    assert {r.finish_s for r in reqs[:3]} == {4.0}
    assert reqs[0].last_token_s == 2.0 and reqs[2].last_token_s == 1.0
    assert reqs[3].first_scheduled_s == 4.0 and reqs[3].finish_s == 7.0
    assert len(finished) == 4 and kv.reserved_total == 0


def test_static_batch_timeout_waits_for_more():
    kv = PagedKVManager(1000, 16)
    sched = StaticScheduler(kv, max_batch_size=4, batch_timeout_s=2.0, max_model_len=1000)
    sched.add_request(make_request(5, 2, arrival_s=0.0))
    assert sched.schedule(0.5) is None and sched.next_wake_s == 2.0
    assert sched.schedule(2.0) is not None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(1, 30)), min_size=1, max_size=12),
       st.integers(8, 60), st.sampled_from([1, 4, 16]), st.booleans())
def test_bulk_counters_match_a_naive_replay(lengths, num_blocks, block_size, chunked):
    """Memory never exceeds capacity, nothing leaks, every request ends, counters are exact."""
    kv = PagedKVManager(num_blocks, block_size)
    sched = continuous(kv, max_num_seqs=4, budget=48, chunked=chunked)
    reqs = [make_request(p, o) for p, o in lengths]
    accepted = [r for r in reqs if sched.add_request(r)]
    now = 0.0
    for _ in range(20_000):
        plan = sched.schedule(now)
        if plan is None:
            break
        now += 1.0
        sched.update_from_output(plan, now)
        usage = sched.kv_usage()
        assert usage.allocated_slots <= usage.capacity_slots
        assert usage.token_slots <= usage.allocated_slots
        # The bulk token count equals the per-request truth.
        for r in list(sched.tracker.members.values()):
            sched.tracker.sync(r)
        assert usage.token_slots == sum(r.num_computed_tokens for r in sched.running.values())
    assert all(r.status is RequestStatus.FINISHED for r in accepted)
    assert all(r.num_output_tokens == r.max_output_tokens for r in accepted)
    assert all(r.status is RequestStatus.REJECTED for r in reqs if r not in accepted)
    assert kv.num_free_blocks == num_blocks and not kv.block_tables


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(2, 60)), min_size=1, max_size=6),
       st.sampled_from([1, 4, 16]), st.integers(1, 30))
def test_a_decode_runs_kv_states_in_bulk_are_the_per_step_ones(lengths, block_size, run_steps):
    """`advance_decode_steps` with `record_usage` (states counted from block counts) logs what asking
    `kv_usage()` after each step does, and leaves the same blocks and counters behind."""
    def decoding(record_bulk: bool):
        kv = PagedKVManager(400, block_size)
        sched = continuous(kv, max_num_seqs=8, budget=4096)
        for i, (p, o) in enumerate(lengths):
            sched.add_request(make_request(p, o, request_id=i))
        plan = sched.schedule(0.0)  # every prompt at once, then a decode-only step
        sched.update_from_output(plan, 1.0)
        plan = sched.schedule(1.0)
        steps = sched.decode_run_limit(plan, run_steps + 1) - 1
        per_step, bulk = [], []

        def after_step():
            u = sched.kv_usage()
            per_step.append((u.token_slots, u.reserved_slots, u.internal_slots, u.external_slots, u.shared_slots))
        sched.advance_decode_steps(steps, after_step, (lambda cols: bulk.extend(zip(*cols))) if record_bulk else None)
        sched.update_from_output(plan, 2.0)
        state = (sched.kv_usage(), {rid: list(t) for rid, t in kv.block_tables.items()}, sched.tracker.token_sum)
        return (bulk if record_bulk else per_step), state, steps

    want, want_state, steps = decoding(False)
    got, got_state, _ = decoding(True)
    assert len(want) == steps
    assert got == want
    assert got_state == want_state
