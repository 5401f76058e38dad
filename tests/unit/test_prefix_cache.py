"""Prefix caching and block sharing in the paged KV manager: tiny configs, exact block ids and ref counts."""

import itertools
from pathlib import Path

import numpy as np
import pytest
from helpers import make_request
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core.request import Request
from sim.kv.paged import PagedKVManager
from sim.kv.prefix_keys import block_key_array

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"

_ids = itertools.count(10_000)


def block_keys(prefix_ids, unit, prompt, block_size):
    keys, num_full = block_key_array(prefix_ids, unit, prompt, block_size)
    return keys.tolist(), num_full


def req(prompt: int, ids=None, unit: int = 4, output: int = 4) -> Request:
    """A request whose prompt tokens [i*unit, (i+1)*unit) have content id ids[i]."""
    prefix = None if ids is None else np.asarray(ids, dtype=np.int64)
    return Request(next(_ids), 0.0, prompt, output, prefix_ids=prefix, prefix_unit_tokens=0 if ids is None else unit)


def admit(kv: PagedKVManager, r: Request, chunk: int | None = None):
    """What the scheduler does on admission: look up, claim and allocate, or undo."""
    n = kv.get_computed_blocks(r)
    r.num_computed_tokens = n
    got = kv.allocate_slots(r, (r.num_tokens - n) if chunk is None else chunk)
    if got is None:
        r.num_computed_tokens = 0
    return got


def assert_empty(kv: PagedKVManager):
    """Nothing leaked: every block free or evictable, no references, no sharing left."""
    kv.check_consistency()
    assert not kv.block_tables
    assert kv.num_free_blocks == kv.num_blocks
    assert not any(kv.ref_counts)
    stats = kv.sharing_stats()
    assert stats.shared_blocks == stats.saved_blocks == 0
    assert kv.usage(0).allocated_slots == 0 and kv.usage(0).shared_slots == 0


def test_hit_after_the_first_request_finishes():
    kv = PagedKVManager(8, 4, enable_prefix_caching=True)
    a = req(10, [1, 2, 3])  # blocks 0,1 full (ids 1, 2); block 2 holds 2 tokens of id 3
    assert kv.get_computed_blocks(a) == 0
    assert admit(kv, a) == [0, 1, 2]
    assert kv.num_cached_blocks == 3  # two full blocks plus the prompt's partial tail
    kv.free(a)
    assert list(kv.evictable) == [2, 1, 0]  # tail first: the last blocks are evicted first
    assert kv.num_free_blocks == 8 and kv.usage(0).cached_slots == 12 and kv.usage(0).free_slots == 32

    b = req(12, [1, 2, 9])  # shares the first two blocks of a
    assert kv.get_computed_blocks(b) == 8
    assert admit(kv, b) == [3]
    assert b.num_computed_tokens == 8 and kv.block_tables[b.request_id] == [0, 1, 3]
    assert kv.ref_counts[:4] == [1, 1, 0, 1] and list(kv.evictable) == [2]
    assert kv.num_free_blocks == 5
    stats = kv.prefix_cache_stats()
    assert stats.num_queries == 2 and stats.queried_tokens == 22 and stats.hit_tokens == 8
    assert stats.queried_blocks == 6 and stats.hit_blocks == 2 and stats.reused_blocks == 2
    assert stats.hit_rate == pytest.approx(8 / 22)
    kv.free(b)
    assert_empty(kv)


def test_hit_while_the_first_request_runs_is_sharing():
    kv = PagedKVManager(8, 4, enable_prefix_caching=True)
    a, b = req(10, [1, 2, 3]), req(12, [1, 2, 9])
    assert admit(kv, a) == [0, 1, 2]
    a.num_computed_tokens = 10
    assert admit(kv, b) == [3]
    assert kv.block_tables[b.request_id] == [0, 1, 3] and kv.ref_counts[:4] == [2, 2, 1, 1]
    stats = kv.sharing_stats()
    assert stats.shared_blocks == 2 and stats.saved_blocks == 2 and stats.saved_slots == 8
    assert stats.saved_bytes(kv_bytes_per_token=128) == 8 * 128
    # The scheduler counts 10 + 8 computed tokens; 8 of them are stored once for both.
    usage = kv.usage(18)
    assert usage.token_slots == 10 and usage.shared_slots == 8 and usage.allocated_slots == 16
    assert usage.internal_slots == 6 and usage.free_slots == 16
    kv.free(a)
    assert kv.ref_counts[:4] == [1, 1, 0, 1] and list(kv.evictable) == [2]
    assert kv.sharing_stats().shared_blocks == 0
    kv.free(b)
    assert_empty(kv)


def test_lru_eviction_order_and_eviction_when_memory_is_needed():
    kv = PagedKVManager(6, 4, enable_prefix_caching=True)
    a, b = req(9, [1, 2, 3]), req(9, [4, 5, 6])
    assert admit(kv, a) == [0, 1, 2]
    kv.free(a)
    assert admit(kv, b) == [3, 4, 5]  # never-cached blocks first
    kv.free(b)
    # Unclaimable partial tails at the head (the latest first), then a's blocks (older) before b's.
    assert list(kv.evictable) == [5, 2, 1, 0, 4, 3]
    assert kv.num_free_blocks == 6 and not kv.free_block_ids
    c = req(13)  # no ids: needs 4 blocks, all evicted, least recently used first
    assert admit(kv, c) == [5, 2, 1, 0]
    assert kv.prefix_cache_stats().num_evictions == 4
    assert list(kv.evictable) == [4, 3]
    assert kv.get_computed_blocks(req(9, [1, 2, 3])) == 0  # a's blocks are gone
    assert kv.get_computed_blocks(req(9, [4, 5, 6])) == 8  # b's full blocks are still cached
    kv.free(c)
    assert list(kv.free_block_ids) == [5, 2, 1, 0]  # unkeyed now: back to the free list
    assert_empty(kv)


def test_claimed_block_leaves_the_lru_and_returns_as_most_recent():
    kv = PagedKVManager(8, 4, enable_prefix_caching=True)
    a, b = req(8, [1, 2]), req(8, [3, 4])
    admit(kv, a)
    kv.free(a)
    admit(kv, b)
    kv.free(b)
    assert list(kv.evictable) == [1, 0, 3, 2]
    again = req(8, [1, 2])
    assert admit(kv, again) == [4]  # block 0 claimed (cap: never the whole prompt), block 1 recomputed
    assert kv.block_tables[again.request_id] == [0, 4] and list(kv.evictable) == [1, 3, 2]
    kv.free(again)
    assert list(kv.evictable) == [1, 3, 2, 0]  # 4 held a duplicate key: not cached, back to the free list
    assert 4 in kv.free_block_ids
    assert_empty(kv)


def test_allocation_is_all_or_nothing():
    kv = PagedKVManager(4, 4, enable_prefix_caching=True)
    a = req(8, [1, 2])
    admit(kv, a)
    kv.free(a)
    holder = req(4)
    assert admit(kv, holder) == [2]
    before = (list(kv.free_block_ids), list(kv.evictable), list(kv.ref_counts), kv.prefix_cache_stats())
    b = req(16, [1, 2, 5, 6])  # claims 0 and 1, needs 2 more; only block 3 is left once 0, 1 are claimed
    assert kv.get_computed_blocks(b) == 8
    assert admit(kv, b) is None
    assert b.num_computed_tokens == 0 and b.request_id not in kv.block_tables
    assert (list(kv.free_block_ids), list(kv.evictable), list(kv.ref_counts), kv.prefix_cache_stats()) == before
    kv.free(holder)
    assert admit(kv, b) == [3, 2]
    assert kv.block_tables[b.request_id] == [0, 1, 3, 2]
    kv.free(b)
    assert_empty(kv)


def test_never_the_whole_prompt():
    kv = PagedKVManager(8, 4, enable_prefix_caching=True)
    a = req(8, [1, 2])
    admit(kv, a)
    kv.free(a)
    assert kv.get_computed_blocks(req(8, [1, 2])) == 4  # at least one token is computed: one block less
    assert kv.get_computed_blocks(req(9, [1, 2, 3])) == 8
    assert kv.get_computed_blocks(req(5, [1, 2])) == 4
    assert kv.get_computed_blocks(req(4, [1])) == 0
    # An exact repeat is counted as a reuse of every block (the tail too), but hits only the first.
    repeat = req(8, [1, 2])
    admit(kv, repeat)
    stats = kv.prefix_cache_stats()
    assert stats.reused_blocks == 2 and stats.hit_blocks == 1


def test_chunked_prefill_registers_blocks_as_they_fill():
    kv = PagedKVManager(8, 4, enable_prefix_caching=True)
    a = req(12, [1, 2, 3])
    assert admit(kv, a, chunk=6) == [0, 1]
    assert kv.num_cached_blocks == 1  # block 1 is half computed after this step
    a.num_computed_tokens = 6
    assert kv.allocate_slots(a, 6) == [2]
    assert kv.num_cached_blocks == 3
    assert kv.get_computed_blocks(req(16, [1, 2, 3, 4])) == 12


@pytest.mark.parametrize("unit, block_size", [(8, 4), (2, 4), (3, 4), (4, 4), (512, 16)])
def test_units_larger_smaller_or_unrelated_to_the_block(unit, block_size):
    rng = np.random.default_rng(unit)
    ids = rng.integers(0, 1000, 40)
    prompt = 20 * unit + 1
    base = block_keys(ids, unit, prompt, block_size)[0]
    for cut in (1, 5, 13):  # same ids up to unit `cut`, then different
        other = ids.copy()
        other[cut:] += 1000
        keys = block_keys(other, unit, prompt, block_size)[0]
        same = sum(1 for _ in itertools.takewhile(lambda kk: kk[0] == kk[1], zip(base, keys)))
        assert same == cut * unit // block_size  # exactly the blocks lying inside the equal units


def test_partial_last_unit_keys_blocks_inside_the_prompt():
    # Unit 8, block 4: the prompt ends 6 tokens into its second unit (id 7).
    keys, num_full = block_keys(np.array([5, 7]), 8, 14, 4)
    assert num_full == 3 and len(keys) == 4  # blocks at 0, 4, 8 full; block at 12 holds 2 tokens
    longer, _ = block_keys(np.array([5, 7, 9]), 8, 24, 4)
    assert longer[:3] == keys[:3] and longer[3] != keys[3]
    # Ids that stop before the prompt ends: tokens past them are unique, and no tail key.
    keys, num_full = block_keys(np.array([5]), 8, 14, 4)
    assert num_full == 2 and len(keys) == 2


def test_fork_and_copy_on_write():
    kv = PagedKVManager(8, 4)
    parent = req(6)
    assert admit(kv, parent) == [0, 1]
    parent.num_computed_tokens = 6
    child = req(6)
    kv.forks.fork(parent, child)
    child.num_computed_tokens = 6
    assert kv.sharing and kv.block_tables[child.request_id] == [0, 1] and kv.ref_counts[:2] == [2, 2]
    assert kv.forks.pending == {parent.request_id, child.request_id}
    stats = kv.sharing_stats()
    assert stats.shared_blocks == 2 and stats.saved_blocks == 2 and stats.saved_slots == 8
    assert kv.usage(12).shared_slots == 6 and kv.usage(12).token_slots == 6  # block 1 holds 2 tokens
    assert kv.forks.num_copies_needed([parent.request_id, child.request_id]) == 1
    with pytest.raises(RuntimeError, match="copy_before_write"):
        kv.append_one_block_each([parent.request_id])
    # Both write their next token this step: the first copies, the last keeps the original.
    assert kv.forks.copy_on_write([parent.request_id, child.request_id]) == [2]
    assert kv.block_tables[parent.request_id] == [0, 2] and kv.block_tables[child.request_id] == [0, 1]
    assert kv.ref_counts[:3] == [2, 1, 1] and kv.sharing_stats().num_cow_copies == 1 and not kv.forks.pending
    assert kv.usage(14).shared_slots == 4
    kv.free(parent)
    kv.free(child)
    assert_empty(kv)


def test_copy_on_write_comes_before_allocate_slots_and_is_all_or_nothing():
    kv = PagedKVManager(3, 4)
    parent, child = req(6), req(6)
    admit(kv, parent)
    parent.num_computed_tokens = 6
    kv.forks.fork(parent, child)
    child.num_computed_tokens = 6
    other = req(4)
    assert admit(kv, other) == [2]  # the cache is full
    assert kv.forks.copy_on_write([child.request_id]) is None and kv.forks.pending
    with pytest.raises(RuntimeError, match="shared block 1"):
        kv.allocate_slots(child, 1)  # a write into the shared, partly filled block before its copy
    kv.free(other)
    assert kv.forks.copy_on_write([child.request_id]) == [2]  # the copy
    assert kv.allocate_slots(child, 1) == []  # token 7 goes into it: no new block
    assert kv.block_tables[child.request_id] == [0, 2] and child.request_id not in kv.forks.pending
    # The parent is now the only holder of block 1: writing into it needs no copy.
    assert kv.forks.copy_on_write([parent.request_id]) == [] and not kv.forks.pending
    kv.free(child)
    kv.free(parent)
    assert_empty(kv)


def test_fork_on_a_block_boundary_needs_no_copy():
    kv = PagedKVManager(8, 4, enable_prefix_caching=True)
    parent = req(8, [1, 2])
    admit(kv, parent)
    parent.num_computed_tokens = 8
    children = [req(8, [1, 2]) for _ in range(3)]  # parallel sampling, n = 4
    for child in children:
        kv.forks.fork(parent, child)
        child.num_computed_tokens = 8
    assert kv.ref_counts[:2] == [4, 4] and not kv.forks.pending
    assert kv.sharing_stats().saved_blocks == 6
    kv.append_one_block_each([parent.request_id] + [c.request_id for c in children])
    assert [kv.block_tables[r.request_id][-1] for r in [parent] + children] == [2, 3, 4, 5]
    for r in [parent] + children:
        kv.free(r)
    assert_empty(kv)
    assert list(kv.evictable) == [1, 0]  # freed by the last holder: its last block is evicted first


def test_fork_needs_synced_parent():
    kv = PagedKVManager(8, 4)
    parent = req(6)
    admit(kv, parent)  # blocks for 6 tokens, not yet computed
    with pytest.raises(ValueError, match="fork"):
        kv.forks.fork(parent, req(6))


def test_release_tail_blocks_and_append_blocks_with_sharing():
    kv = PagedKVManager(8, 4, enable_prefix_caching=True)
    r = req(8, [1, 2])
    admit(kv, r)
    kv.append_blocks(r.request_id, 2)
    assert kv.block_tables[r.request_id] == [0, 1, 2, 3]
    kv.release_tail_blocks(r.request_id, 2)
    assert kv.block_tables[r.request_id] == [0, 1] and list(kv.free_block_ids)[-2:] == [2, 3]
    kv.free(r)
    assert_empty(kv)


def _run_ops(kv: PagedKVManager, seed: int):
    """A fixed random sequence of admissions, chunked prefills, decodes and frees; returns every result."""
    rng = np.random.default_rng(seed)
    out, live = [], []
    for i in range(200):
        if live and rng.random() < 0.4:
            k, r = live.pop(int(rng.integers(len(live))))
            kv.free(r)
            out.append(("free", k))
            continue
        if live and rng.random() < 0.5:
            k, r = live[int(rng.integers(len(live)))]
            got = kv.allocate_slots(r, int(rng.integers(1, 6)))
            if got is not None:
                r.num_computed_tokens = len(kv.block_tables[r.request_id]) * kv.block_size
            out.append(("grow", k, got))
            continue
        r = req(int(rng.integers(1, 20)), rng.integers(0, 3, 4), unit=4)
        r.num_computed_tokens = kv.get_computed_blocks(r)  # 0 when prefix caching is off
        got = kv.allocate_slots(r, r.num_prompt_tokens - r.num_computed_tokens)
        out.append(("admit", got))
        if got is not None:
            live.append((i, r))
        out.append(("state", list(kv.free_block_ids), kv.num_free_blocks, kv.usage(0)))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_prefix_caching_off_is_the_plain_manager(seed):
    plain = _run_ops(PagedKVManager(12, 4), seed)
    with_ids_off = _run_ops(PagedKVManager(12, 4, enable_prefix_caching=False), seed)
    assert with_ids_off == plain


def test_prefix_caching_on_without_ids_allocates_the_same_blocks():
    rng = np.random.default_rng(0)
    plain, cached = PagedKVManager(10, 4), PagedKVManager(10, 4, enable_prefix_caching=True)
    live = []
    for _ in range(300):
        if live and rng.random() < 0.45:
            r = live.pop(int(rng.integers(len(live))))
            plain.free(r)
            cached.free(r)
        else:
            r = make_request(int(rng.integers(1, 17)), 3)
            a, b = plain.allocate_slots(r, r.num_prompt_tokens), admit(cached, r)
            assert a == b
            if a is not None:
                live.append(r)
        assert plain.block_tables == cached.block_tables
        assert list(plain.free_block_ids) == list(cached.free_block_ids) and not cached.evictable


@settings(max_examples=60, deadline=None)
@given(data=st.data(), num_blocks=st.integers(4, 24), block_size=st.sampled_from([1, 2, 4, 8]),
       unit=st.sampled_from([1, 2, 3, 4, 8, 16]))
def test_random_shared_prefixes_stay_in_capacity_and_leak_nothing(data, num_blocks, block_size, unit):
    kv = PagedKVManager(num_blocks, block_size, enable_prefix_caching=True)
    live: list[Request] = []
    prefixes = [list(data.draw(st.lists(st.integers(0, 5), min_size=1, max_size=6))) for _ in range(3)]
    for _ in range(data.draw(st.integers(1, 60))):
        op = data.draw(st.sampled_from(["admit", "admit", "step", "free", "fork", "cow"]))
        if op == "admit":
            base = data.draw(st.sampled_from(prefixes))
            ids = base + data.draw(st.lists(st.integers(0, 9), max_size=4))
            prompt = data.draw(st.integers(1, len(ids) * unit + 3))
            r = req(prompt, ids, unit=unit, output=data.draw(st.integers(1, 8)))
            n = kv.get_computed_blocks(r)
            assert n % block_size == 0 and n < prompt
            if admit(kv, r, chunk=data.draw(st.integers(1, r.num_tokens - n)) if n < r.num_tokens else 1) is not None:
                live.append(r)
        elif op == "step" and live:
            r = data.draw(st.sampled_from(live))
            if kv.forks.copy_on_write([r.request_id]) is None:
                continue  # its last block is shared, partly filled, and there is no room for its copy
            table = kv.block_tables[r.request_id]
            filled = min(len(table) * block_size, r.num_prompt_tokens + r.max_output_tokens)
            r.num_computed_tokens = max(r.num_computed_tokens, min(filled, r.num_computed_tokens + block_size))
            kv.allocate_slots(r, data.draw(st.integers(0, 5)))
        elif op == "free" and live:
            r = live.pop(data.draw(st.integers(0, len(live) - 1)))
            kv.free(r)
        elif op == "fork" and live:
            parent = data.draw(st.sampled_from(live))
            table = kv.block_tables[parent.request_id]
            parent.num_computed_tokens = max(1, len(table) * block_size - data.draw(st.integers(0, block_size - 1)))
            child = req(parent.num_prompt_tokens, list(parent.prefix_ids), unit=unit)
            kv.forks.fork(parent, child)
            child.num_computed_tokens = parent.num_computed_tokens
            live.append(child)
        elif op == "cow" and live:
            kv.forks.copy_on_write([r.request_id for r in live])
        kv.check_consistency()
        assert 0 <= kv.num_free_blocks <= num_blocks
        assert kv.num_allocated_slots() <= kv.capacity_slots
        assert len({b for t in kv.block_tables.values() for b in t}) <= num_blocks
    for r in live:
        kv.free(r)
    assert_empty(kv)


# --- Mooncake traces: the published reuse statistic through the cache ------------------------------

def _mooncake(name: str):
    path = TRACES / f"mooncake_{name}.jsonl"
    if not path.exists():
        pytest.skip(f"{path} not present")
    from sim.workload.traces import load_trace
    return load_trace(str(path), "mooncake", None)


def replay_arrivals(trace, num_blocks: int):
    """Admit every request of the trace (cache lookup, claim, allocate its prompt), then free it."""
    kv = PagedKVManager(num_blocks, 512, enable_prefix_caching=True)
    for i, (ids, prompt) in enumerate(zip(trace.hash_ids, trace.input_tokens)):
        r = Request(i, 0.0, int(prompt), 1, prefix_ids=ids, prefix_unit_tokens=512)
        assert admit(kv, r) is not None
        kv.free(r)
    assert_empty(kv)
    return kv.prefix_cache_stats()


@pytest.mark.parametrize("name, published", [("conversation", 36.6), ("synthetic", 64.0)])
def test_mooncake_prefix_reuse_matches_the_published_statistic(name, published):
    trace = _mooncake(name)
    # The README's definition: over all hash ids (512-token blocks), the fraction seen before.
    seen, reused, total, repeats = set(), 0, 0, 0
    for ids in trace.hash_ids:
        old = sum(1 for i in ids.tolist() if i in seen)
        reused += old
        repeats += old == len(ids)  # the whole prompt seen before
        total += len(ids)
        seen.update(ids.tolist())
    assert round(100 * reused / total, 1) == published

    unbounded = replay_arrivals(trace, total)
    assert unbounded.num_evictions == 0 and unbounded.queried_blocks == total
    # Pure reuse: prompt blocks whose key the cache held when the request arrived.
    assert unbounded.reused_blocks == reused
    # What the cache can serve is a little less: a repeated prompt's last block is always recomputed.
    assert unbounded.reused_blocks - unbounded.hit_blocks == repeats > 0
    print(f"{name}: reuse {unbounded.reuse_rate:.4f}, block hit rate "
          f"{unbounded.hit_blocks / unbounded.queried_blocks:.4f}, token hit rate {unbounded.hit_rate:.4f}")

    # A finite LRU cache hits less, and more the larger it is.
    sizes = [400, 2000, 8000, 32000]
    rates = [replay_arrivals(trace, n).hit_blocks / total for n in sizes]
    full_rate = unbounded.hit_blocks / total
    assert all(a < b for a, b in zip(rates, rates[1:])) and rates[-1] < full_rate
