"""Micro-batch slots of a pipelined replica (sim/sched/pipeline.py): plain schedulers, no event loop.

Slots share the KV pool and the queue; a request scheduled by one slot is never in another slot's batch."""

from helpers import make_request

from sim.kv.paged import PagedKVManager
from sim.sched.continuous import ContinuousScheduler
from sim.sched.pipeline import MicroBatchSlots


def slots(num_blocks=64, block_size=4, num_slots=2, max_num_seqs=2, budget=64):
    kv = PagedKVManager(num_blocks, block_size)
    return MicroBatchSlots([ContinuousScheduler(kv, max_num_seqs=max_num_seqs, max_num_batched_tokens=budget,
                                                chunked_prefill=False, max_model_len=4096)
                            for _ in range(num_slots)])


def ids(plan):
    return set(plan.prefill_request_ids)


def test_the_queue_is_shared_and_each_slot_keeps_what_it_admitted():
    group = slots()
    a, b = group.slots
    requests = [make_request(prompt=8, output=3, request_id=i) for i in range(4)]
    for r in requests:
        assert group.add_request(r)
    assert group.num_waiting == 4
    pa = a.schedule(0.0)  # slot a admits the head of the queue, up to its 2 sequences
    pb = b.schedule(0.0)  # while a's batch is in flight, slot b takes the next two
    assert ids(pa) == {0, 1} and ids(pb) == {2, 3} and group.num_waiting == 0
    a.update_from_output(pa, 1.0)
    pa2 = a.schedule(1.0)  # a's requests decode in a's next batch; b's (in flight) are not in it
    assert pa2.num_decode_seqs == 2 and not pa2.prefill_request_ids
    assert set(a.tracker.members) == {0, 1} and not b.tracker.members
    # One pool: both slots' blocks come out of it (8 prompt tokens = 2 blocks each; a's next tokens 1 more each).
    assert group.kv.num_free_blocks == 64 - 4 * 2 - 2


def test_a_request_preempted_by_one_slot_can_be_admitted_by_another():
    group = slots(num_blocks=5, block_size=4, max_num_seqs=2)
    a, b = group.slots
    for i in range(2):
        group.add_request(make_request(prompt=8, output=4, request_id=i))
    pa = a.schedule(0.0)
    assert ids(pa) == {0, 1} and group.kv.num_free_blocks == 1
    a.update_from_output(pa, 1.0)
    pa = a.schedule(1.0)  # both need a third block, one is free: the last admitted is preempted
    assert pa.preempted_request_ids == [1] and pa.num_decode_seqs == 1
    assert [r.request_id for r in group.waiting] == [1]
    # Its recompute (8 prompt + 1 output tokens: 3 blocks) does not fit the 2 free blocks yet.
    assert b.schedule(1.0) is None
    now, finished = 1.0, []
    while not finished:  # slot a decodes request 0 to its end, giving its 3 blocks back
        now += 1.0
        finished = a.update_from_output(pa, now).finished
        pa = a.schedule(now) if not finished else None
    assert [r.request_id for r in finished] == [0] and group.kv.num_free_blocks == 5
    pb = b.schedule(now)  # the other slot takes the preempted request from the shared queue
    assert ids(pb) == {1} and pb.prefill_chunk_tokens == [9]
    assert [r.request_id for r in group.in_flight()] == [1]


def test_kv_usage_counts_every_slots_tokens():
    group = slots()
    a, b = group.slots
    for i in range(4):
        group.add_request(make_request(prompt=8, output=3, request_id=i))
    pa, pb = a.schedule(0.0), b.schedule(0.0)
    a.update_from_output(pa, 1.0)
    assert group.kv_usage().token_slots == 16  # a's two computed prompts; b's batch is still in flight
    b.update_from_output(pb, 1.5)
    assert group.kv_usage().token_slots == 32
