"""One KV interface for both layouts: the schedulers ask the same questions of each, and a layout
without blocks, prefix caching or sharing answers them trivially instead of being told apart by type."""

from pathlib import Path

import numpy as np
import pytest
from helpers import make_request

from sim.core.request import Request
from sim.kv.base import KVManager
from sim.kv.contiguous import ContiguousKVManager
from sim.kv.paged import PagedKVManager
from sim.sched.continuous import ContinuousScheduler
from sim.sched.decode import DecodeBatch, DecodeTracker
from sim.sched.speculative import SpeculativeDecodeBatch

SCHED = Path(__file__).resolve().parents[2] / "sim" / "sched"


def protocol_members(protocol) -> set[str]:
    names = {n for n in vars(protocol) if not n.startswith("_")} | set(protocol.__annotations__)
    return names | ({"__len__"} if "__len__" in vars(protocol) else set())


@pytest.mark.parametrize("kv", [PagedKVManager(8, 4), ContiguousKVManager(64, "oracle", 64)])
def test_both_layouts_answer_every_question_of_the_interface(kv):
    missing = [name for name in protocol_members(KVManager) if not hasattr(kv, name)]
    assert not missing


def test_both_decode_batches_answer_every_question_of_theirs():
    kv = PagedKVManager(8, 4)
    batches = [DecodeTracker(kv), SpeculativeDecodeBatch(num_speculative_tokens=2, alpha_sampler=lambda rng: 0.5,
                                                         ragged="per_request", rng=np.random.default_rng(0), kv=kv)]
    for batch in batches:
        assert not [name for name in protocol_members(DecodeBatch) if not hasattr(batch, name)]


def test_schedulers_never_ask_which_layout_they_have():
    for path in SCHED.glob("*.py"):
        source = path.read_text()
        assert "PagedKVManager" not in source and "ContiguousKVManager" not in source, path.name


def test_contiguous_has_no_blocks_no_cache_and_no_sharing():
    kv = ContiguousKVManager(capacity_slots=100, reserve="oracle", max_len=100)
    r = make_request(10, 5)
    assert kv.block_size is None and kv.num_free_blocks == 0 and kv.blocks_for(1000) == 0
    assert kv.get_computed_blocks(r) == 0 and not kv.forks.pending
    assert kv.admit(r, 64, chunked=False) == 10 and kv.held_slots(r.request_id) == 14
    assert kv.forks.num_copies_needed([r.request_id]) == 0 and kv.forks.copy_on_write([r.request_id]) == []
    assert kv.prefix_cache_stats().num_queries == 0 and kv.sharing_stats().shared_blocks == 0
    with pytest.raises(ValueError, match="fork.*paged"):
        kv.forks.fork(r, make_request(10, 5))


def test_contiguous_admit_takes_all_or_waits_unless_chunked():
    kv = ContiguousKVManager(capacity_slots=100, reserve="oracle", max_len=100)
    assert kv.admit(make_request(30, 5), 20, chunked=False) is None and kv.reserved_total == 0
    chunked = make_request(30, 5)
    assert kv.admit(chunked, 20, chunked=True) == 20 and kv.held_slots(chunked.request_id) == 34


def cached_prompt(kv: PagedKVManager) -> Request:
    """Put an 8-token prompt with content ids [1, 2] in the cache; return a request sharing its first block."""
    first = Request(900, 0.0, 8, 1, prefix_ids=np.array([1, 2]), prefix_unit_tokens=4)
    assert kv.admit(first, 64, chunked=False) == 8
    first.num_computed_tokens = 8
    kv.free(first)
    return Request(901, 0.0, 12, 1, prefix_ids=np.array([1, 7, 8]), prefix_unit_tokens=4)


def test_paged_admit_counts_cache_hits_as_computed():
    kv = PagedKVManager(8, 4, enable_prefix_caching=True)
    r = cached_prompt(kv)
    assert kv.admit(r, 64, chunked=False) == 8  # block 0 is a hit: only 8 of 12 tokens are computed
    assert r.num_computed_tokens == 4 and kv.block_tables[r.request_id][0] == 0


def test_paged_admit_changes_nothing_when_it_cannot_start():
    kv = PagedKVManager(4, 4, enable_prefix_caching=True)
    r = cached_prompt(kv)
    holder = make_request(12, 1)
    assert kv.allocate_slots(holder, 12) == [2, 3, 1]  # never-cached blocks first, then evicts block 1
    before = (list(kv.free_block_ids), list(kv.evictable), kv.prefix_cache_stats())
    assert kv.admit(r, 64, chunked=False) is None  # a hit on block 0, but 2 more blocks and none free
    assert r.num_computed_tokens == 0 and r.request_id not in kv.block_tables
    assert (list(kv.free_block_ids), list(kv.evictable), kv.prefix_cache_stats()) == before


def test_paged_admit_chunked_needs_blocks_for_the_whole_rest():
    kv = PagedKVManager(4, 4)
    assert kv.admit(make_request(20, 1), 4, chunked=True) is None  # 5 blocks for the whole prompt, 4 exist
    r = make_request(16, 1)
    assert kv.admit(r, 4, chunked=True) == 4 and kv.block_tables[r.request_id] == [0]


def test_swapped_in_request_keeps_its_computed_tokens():
    kv = PagedKVManager(8, 4)
    r = make_request(8, 10)
    r.num_output_tokens, r.num_computed_tokens = 6, 13  # its KV comes back from host memory
    assert kv.admit(r, 64, chunked=False) == 1 and r.num_computed_tokens == 13  # only the last token computed
    assert len(kv.block_tables[r.request_id]) == 4


def test_a_continuous_scheduler_runs_on_either_layout_through_the_same_calls():
    for kv in (PagedKVManager(64, 4), ContiguousKVManager(256, "max_len", 64)):
        sched = ContinuousScheduler(kv, max_num_seqs=4, max_num_batched_tokens=64, chunked_prefill=True,
                                    max_model_len=64)
        reqs = [make_request(10, 6) for _ in range(3)]
        for r in reqs:
            sched.add_request(r)
        now = 0.0
        while (plan := sched.schedule(now)) is not None:
            now += 1.0
            sched.update_from_output(plan, now)
        assert all(r.num_output_tokens == 6 for r in reqs) and kv.num_allocated_slots() == 0
