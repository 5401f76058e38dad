"""Parallel-sampling groups (sim/sched/sampling_groups.py): fork at the end of the prompt, return with the last
sequence. Tiny paged caches, exact block ids, no event loop."""

from helpers import make_request

from sim.kv.paged import PagedKVManager
from sim.sched.continuous import ContinuousScheduler
from sim.sched.sampling_groups import SamplingGroups, SingleSequence, sampling_groups


def prefilled(kv: PagedKVManager, prompt: int, output: int = 5, request_id: int = 7):
    """A request whose prompt was just computed and whose first token was sampled (as after its step)."""
    r = make_request(prompt, output, arrival_s=0.5, request_id=request_id)
    assert kv.admit(r, 64, chunked=False) == prompt
    r.num_computed_tokens, r.num_output_tokens = prompt, 1
    r.first_scheduled_s, r.first_token_s = 1.0, 2.0
    return r


def test_a_request_forks_its_other_sequences_onto_its_blocks():
    kv = PagedKVManager(16, 4)
    groups = SamplingGroups(3, kv.forks)
    parent = prefilled(kv, 10)  # blocks 0, 1 and 2 (2 of 4 tokens)
    children = groups.fork(parent)
    assert [c.request_id for c in children] == [-1, -2] and all(c.parent_id == 7 for c in children)
    for c in children:
        assert (c.num_computed_tokens, c.num_output_tokens, c.first_scheduled_s, c.first_token_s) == (10, 1, 1.0, 2.0)
        assert kv.block_tables[c.request_id] == [0, 1, 2]
    assert kv.ref_counts[:3] == [3, 3, 3] and kv.forks.pending == {7, -1, -2}
    assert groups.remaining == {7: 3}
    assert groups.fork(parent) == [] and groups.fork(children[0]) == []  # forked once, and never a sequence


def test_a_waiting_request_will_fork_unless_it_forked_before_or_is_a_sequence():
    kv = PagedKVManager(16, 4)
    groups = SamplingGroups(4, kv.forks)
    assert groups.will_fork(make_request(8, 4, request_id=1))
    parent = prefilled(kv, 8, request_id=2)
    (child, *_) = groups.fork(parent)
    assert not groups.will_fork(parent)  # preempted after its fork: its sequences run on their own
    assert not groups.will_fork(child)


def test_the_request_returns_with_its_last_sequence():
    kv = PagedKVManager(16, 4)
    groups = SamplingGroups(3, kv.forks)
    parent = prefilled(kv, 8)
    a, b = groups.fork(parent)
    assert groups.finish(parent, 5.0) is None and groups.held == {7: parent}
    assert groups.requests_of([a, b]) == [parent]  # its sequences stand for it while they run
    assert groups.finish(b, 6.0) is None
    assert groups.finish(a, 7.0) is parent and parent.finish_s == 7.0
    assert not groups.remaining and not groups.held and groups.requests_of([]) == []


def test_a_request_done_at_its_first_token_never_forks():
    groups = SamplingGroups(2, PagedKVManager(4, 4).forks)
    r = make_request(4, 1)
    assert groups.finish(r, 3.0) is r


def test_one_sequence_per_request_keeps_no_groups():
    groups = sampling_groups(1, PagedKVManager(4, 4).forks)
    r = make_request(4, 3)
    assert isinstance(groups, SingleSequence) and groups.sequences_per_request == 1
    assert not groups.will_fork(r) and groups.fork(r) == () and groups.finish(r, 1.0) is r
    assert groups.requests_of(iter([r])) == [r]


def test_the_scheduler_keeps_room_for_every_sequence_it_will_fork():
    kv = PagedKVManager(64, 4)
    sched = ContinuousScheduler(kv, max_num_seqs=3, max_num_batched_tokens=64, chunked_prefill=False,
                                max_model_len=100, sequences_per_request=3)
    first, second = make_request(6, 3, request_id=1), make_request(6, 3, request_id=2)
    sched.add_request(first)
    sched.add_request(second)
    plan = sched.schedule(0.0)
    assert plan.new_request_ids == [1]  # the second's 3 sequences would not fit beside the first
    outcome = sched.update_from_output(plan, 1.0)
    assert outcome.num_output_tokens == 3  # the first token of each of the 3 sequences
    assert list(sched.running) == [1, -1, -2] and list(sched.tracker.members) == [1, -1, -2]
    plan = sched.schedule(1.0)  # token 7 of each goes into the shared block 1: two copies
    assert [kv.block_tables[rid] for rid in (1, -1, -2)] == [[0, 2], [0, 3], [0, 1]]
    assert plan.num_decode_seqs == 3 and not plan.new_request_ids and list(sched.waiting) == [second]
