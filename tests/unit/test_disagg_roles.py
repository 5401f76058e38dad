"""A replica's part in disaggregated serving (sim/sched/disagg_roles.py), without a scheduler step where none
is needed: exact block counts and token states."""

from helpers import make_request

from sim.kv.paged import PagedKVManager
from sim.sched.continuous import ContinuousScheduler
from sim.sched.disagg_roles import Colocated, DecodeRole, PrefillRole


def scheduler(num_blocks: int = 10, max_num_seqs: int = 4) -> ContinuousScheduler:
    return ContinuousScheduler(PagedKVManager(num_blocks, 4), max_num_seqs=max_num_seqs,
                               max_num_batched_tokens=256, chunked_prefill=False, max_model_len=256)


def prefilled(prompt: int, request_id: int):
    r = make_request(prompt, 4, request_id=request_id)
    r.num_computed_tokens, r.num_output_tokens = prompt, 1
    return r


def test_a_scheduler_is_colocated_until_given_a_role():
    s = scheduler()
    assert isinstance(s.role, Colocated) and not s.hold_kv_on_finish and s.incoming == ()
    assert s.role.outside_batch_tokens == 0


def test_the_prefill_role_holds_kv_until_released():
    kv = PagedKVManager(10, 4)
    role = PrefillRole(kv)
    r = make_request(10, 1, request_id=3)
    kv.admit(r, 64, chunked=False)
    r.num_computed_tokens = 10
    role.hold(r)
    assert role.held == {3: r} and role.outside_batch_tokens == 10 and kv.block_tables[3] == [0, 1, 2]
    role.release(r)
    assert not role.held and role.outside_batch_tokens == 0 and kv.num_free_blocks == 10


def test_the_decode_role_reserves_receives_and_hands_over():
    s = scheduler(num_blocks=6)
    joined = []
    role = s.role = DecodeRole(s, on_join=lambda r, now: joined.append((r.request_id, now)))
    a, b, c = prefilled(8, 1), prefilled(12, 2), prefilled(8, 3)
    assert role.reserve(a) and role.reserve(b)
    assert s.kv.block_tables == {1: [0, 1], 2: [2, 3, 4]} and role.num_reserved == 2
    assert not role.reserve(c)  # 2 blocks needed, 1 free: nothing changed
    assert role.num_reserved == 2 and role.outside_batch_tokens == 20 and s.kv_usage().token_slots == 20
    role.receive(a)
    assert role.received == [a] and role.num_reserved == 1
    assert role.take_received(4.0) == [a] and joined == [(1, 4.0)]
    assert not role.received and role.outside_batch_tokens == 12  # a's tokens are the batch's from now


def test_a_reservation_takes_a_sequence_slot_and_waits_behind_preempted_requests():
    s = scheduler(num_blocks=100, max_num_seqs=2)
    role = s.role = DecodeRole(s)
    assert role.reserve(prefilled(4, 1))
    assert role.reserve(prefilled(4, 2))
    assert not role.reserve(prefilled(4, 3))  # both slots are taken by KV on its way
    s2 = scheduler(num_blocks=100)
    s2.role = DecodeRole(s2)
    s2.add_request(make_request(4, 4))  # a request waits here (as one preempted would)
    assert not s2.role.reserve(prefilled(4, 9)) and not s2.kv.block_tables


def test_a_received_request_joins_the_decode_batch_at_the_next_step():
    s = scheduler(num_blocks=10)
    s.role = DecodeRole(s)
    r = prefilled(8, 5)
    assert s.role.reserve(r)
    s.role.receive(r)
    plan = s.schedule(1.0)
    assert list(s.running) == [5] and plan.num_decode_seqs == 1 and plan.decode_context_tokens == 9
    assert s.kv.block_tables[5] == [0, 1, 2]  # token 9 opens a third block
