"""Forked sequences sharing blocks, and the copy-on-write order (sim/kv/forking.py): tiny paged caches, exact
block ids, no scheduler."""

import pytest
from helpers import make_request

from sim.kv.contiguous import ContiguousKVManager
from sim.kv.forking import NoForks
from sim.kv.paged import PagedKVManager


def computed(prompt: int, kv: PagedKVManager):
    """A request whose `prompt` tokens are computed in the blocks it was just given."""
    r = make_request(prompt, 4)
    assert kv.admit(r, 64, chunked=False) == prompt
    r.num_computed_tokens = prompt
    return r


def forked(kv: PagedKVManager, parent, n: int):
    children = [make_request(parent.num_prompt_tokens, 4) for _ in range(n)]
    for child in children:
        kv.forks.fork(parent, child)
        child.num_computed_tokens = parent.num_computed_tokens
    return children


def test_a_fork_shares_every_block_and_marks_a_partly_filled_last_one():
    kv = PagedKVManager(8, 4)
    parent = computed(6, kv)  # blocks 0 (full) and 1 (2 of 4 tokens)
    assert not kv.sharing  # no reference counts until the first fork
    (child,) = forked(kv, parent, 1)
    assert kv.sharing and kv.block_tables[child.request_id] == [0, 1] and kv.ref_counts[:2] == [2, 2]
    assert kv.forks.pending == {parent.request_id, child.request_id}
    assert kv.pool.partial_fill == {1: 2}
    assert kv.usage(12).shared_slots == 4 + 2  # block 0's 4 tokens and block 1's 2 are stored once
    kv.check_consistency()


def test_a_fork_on_a_block_boundary_leaves_nothing_to_copy():
    kv = PagedKVManager(8, 4)
    parent = computed(8, kv)
    children = forked(kv, parent, 2)
    assert not kv.forks.pending and kv.ref_counts[:2] == [3, 3]
    kv.append_one_block_each([parent.request_id] + [c.request_id for c in children])
    assert [kv.block_tables[r.request_id][-1] for r in [parent, *children]] == [2, 3, 4]


def test_of_k_sharers_writing_k_minus_1_copy_and_the_last_keeps_the_block():
    kv = PagedKVManager(8, 4)
    parent = computed(6, kv)
    a, b = forked(kv, parent, 2)  # block 1 held three times
    writers = [parent.request_id, a.request_id, b.request_id]
    assert kv.forks.num_copies_needed(writers) == 2
    assert kv.forks.copy_on_write(writers) == [2, 3]
    assert [kv.block_tables[rid] for rid in writers] == [[0, 2], [0, 3], [0, 1]]
    assert kv.ref_counts[:4] == [3, 1, 1, 1] and kv.forks.num_copies == 2 and not kv.forks.pending
    assert kv.sharing_stats().num_cow_copies == 2 and not kv.pool.partial_fill
    kv.check_consistency()


def test_copy_before_write_makes_room_first_then_copies():
    kv = PagedKVManager(3, 4)
    parent = computed(6, kv)  # blocks 0, 1
    (child,) = forked(kv, parent, 1)
    other = computed(4, kv)  # block 2: the cache is full
    writing = {parent.request_id: parent, child.request_id: child}
    calls = []

    def make_room():  # the scheduler's preemption: frees a request's blocks
        calls.append(len(kv.free_block_ids))
        kv.free(other)

    assert kv.forks.copy_before_write(writing.keys(), make_room) == [2]
    assert calls == [0]  # asked once, while no block was free
    assert kv.block_tables[parent.request_id] == [0, 2] and kv.block_tables[child.request_id] == [0, 1]
    assert not kv.forks.pending


def test_copy_before_write_drops_a_writer_preempted_to_make_room():
    kv = PagedKVManager(2, 4)
    parent = computed(6, kv)  # blocks 0, 1: the cache is full
    (child,) = forked(kv, parent, 1)
    writing = {parent.request_id: parent, child.request_id: child}

    def preempt_child():
        del writing[child.request_id]  # `writing` is live: the victim leaves it
        kv.free(child)

    assert kv.forks.copy_before_write(writing.keys(), preempt_child) == []  # the parent alone keeps block 1
    assert kv.block_tables == {parent.request_id: [0, 1]} and kv.ref_counts[:2] == [1, 1]
    assert not kv.forks.pending and kv.forks.num_copies == 0


def test_the_manager_refuses_a_write_into_a_shared_partly_filled_block():
    kv = PagedKVManager(8, 4)
    parent = computed(6, kv)
    (child,) = forked(kv, parent, 1)
    with pytest.raises(RuntimeError, match="shared block 1"):
        kv.allocate_slots(child, 1)
    with pytest.raises(RuntimeError, match="shared block 1"):
        kv.append_blocks(parent.request_id, 1)
    assert kv.allocate_slots(child, 0) == []  # asking for no new token writes nothing
    kv.forks.copy_on_write([child.request_id])
    assert kv.allocate_slots(child, 3) == [3]  # tokens 7, 8 into its copy (block 2), 9 into block 3
    assert kv.block_tables[child.request_id] == [0, 2, 3]


def test_freeing_a_forked_request_forgets_its_pending_copy():
    kv = PagedKVManager(8, 4)
    parent = computed(6, kv)
    (child,) = forked(kv, parent, 1)
    kv.free(child)
    assert kv.forks.pending == {parent.request_id} and kv.ref_counts[:2] == [1, 1]
    assert kv.forks.copy_on_write([parent.request_id]) == []  # the only holder left: no copy
    kv.free(parent)
    assert kv.num_free_blocks == 8 and not kv.forks.pending
    kv.check_consistency()


def test_fork_checks_its_parent_and_child():
    kv = PagedKVManager(8, 4)
    with pytest.raises(ValueError, match="holds no blocks"):
        kv.forks.fork(make_request(6, 4), make_request(6, 4))
    parent = make_request(6, 4)
    kv.admit(parent, 64, chunked=False)  # blocks for 6 tokens, none computed yet
    with pytest.raises(ValueError, match="fork after its step"):
        kv.forks.fork(parent, make_request(6, 4))
    parent.num_computed_tokens = 6
    other = computed(4, kv)
    with pytest.raises(ValueError, match="already holds blocks"):
        kv.forks.fork(parent, other)


def test_a_contiguous_cache_forks_nothing():
    kv = ContiguousKVManager(100, "oracle", 100)
    assert isinstance(kv.forks, NoForks) and not kv.forks.pending
    assert kv.forks.copy_before_write({1: None}.keys(), lambda: pytest.fail("no room is ever needed")) == []
    with pytest.raises(ValueError, match="paged layout"):
        kv.forks.fork(make_request(4, 1), make_request(4, 1))
