"""Automatic prefix caching's decisions, written once over arrays for both engines: which cached blocks a prompt
finds, which key a filled block registers, where a block nobody holds goes on the LRU, which one is evicted, and
the statistics of a lookup.

An *entry* is a block that holds a content key (`sim.kv.prefix_keys`): its key, its references (the block tables
holding it; the compiled core counts them here, the SimPy engine in its `BlockPool`), its place on the LRU of
cached blocks nobody holds, and whether it is a prompt's partly filled last block. Entries have ids below the
cache's block count: the SimPy engine's `PrefixCache` uses its block ids, the compiled core
(sim/compiled/prefix_cache.py) takes them from a free stack, since it does not list blocks. Keys map to entries
through an open-addressing table (linear probing, backward-shift deletion: an entry keeps its id while cached).
Each array has a row per replica (`r`); the SimPy engine's cache is one replica's.
"""

from __future__ import annotations

import numpy as np

from sim.jit import njit

# The per-replica scalars `pcs[r]`; the last seven are PrefixCacheStats' fields, in order.
(S_EVICTABLE, S_SAVED, S_LRU_HEAD, S_LRU_TAIL, S_ENTRY_TOP, S_SLOT_TOP, S_CACHED, S_QUERIES, S_QUERIED_TOKENS,
 S_HIT_TOKENS, S_QUERIED_BLOCKS, S_HIT_BLOCKS, S_REUSED_BLOCKS, S_EVICTIONS) = range(14)
NUM_PCS = 14
FIRST_STAT = S_QUERIES
# S_SAVED: references beyond the first, summed over entries (the compiled core's; BlockPool.saved_blocks);
# S_ENTRY_TOP, S_SLOT_TOP: the compiled core's free stacks; S_CACHED: entries (cached blocks, held or evictable).
# Rows of the entries `ent[r]`.
E_KEY, E_REF, E_PREV, E_NEXT, E_TAIL = range(5)
NUM_E = 5
NO_KEY = 0  # sim.kv.prefix_keys never makes a key 0


def index_arrays(num_replicas: int, num_blocks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pcs, table, ent) of an empty cache on each replica: no entry, an empty LRU, a table at least twice the
    most keys that can be cached at once."""
    capacity = 1 << max(1, int(2 * num_blocks - 1).bit_length())
    pcs = np.zeros((num_replicas, NUM_PCS), dtype=np.int64)
    pcs[:, [S_LRU_HEAD, S_LRU_TAIL]] = -1
    return pcs, np.full((num_replicas, capacity), -1, dtype=np.int64), np.zeros((num_replicas, NUM_E, num_blocks),
                                                                               dtype=np.int64)


@njit(cache=True)
def find(table, ent, r, key):
    """The table position holding `key`'s entry, or the empty position where it would go (entry -1 there)."""
    mask = table.shape[1] - 1
    i = key & mask
    while table[r, i] >= 0 and ent[r, E_KEY, table[r, i]] != key:
        i = (i + 1) & mask
    return i


@njit(cache=True)
def entry_of(table, ent, r, key):
    """The entry holding `key`, or -1."""
    return table[r, find(table, ent, r, key)]


@njit(cache=True)
def _remove_key(table, ent, r, key):
    """Drop `key` (present) from the table, moving back the entries its gap would hide from their lookups."""
    mask = table.shape[1] - 1
    i = find(table, ent, r, key)
    j = i
    while True:
        j = (j + 1) & mask
        e = table[r, j]
        if e < 0:
            break
        home = ent[r, E_KEY, e] & mask
        if (i < j and (home <= i or home > j)) or (i > j and home <= i and home > j):
            table[r, i] = e
            i = j
    table[r, i] = -1


@njit(cache=True)
def _lru_unlink(pcs, ent, r, e):
    p, q = ent[r, E_PREV, e], ent[r, E_NEXT, e]
    if p >= 0:
        ent[r, E_NEXT, p] = q
    else:
        pcs[r, S_LRU_HEAD] = q
    if q >= 0:
        ent[r, E_PREV, q] = p
    else:
        pcs[r, S_LRU_TAIL] = p


@njit(cache=True)
def cached_prefix(table, ent, r, keys, limit, out):
    """How many of the leading `limit` keys are cached, one after another (a prompt's cache hit, in blocks); their
    entries go to `out`. The caller leaves at least one prompt token to compute in `limit`."""
    n = 0
    while n < limit:
        e = entry_of(table, ent, r, keys[n])
        if e < 0:
            break
        out[n] = e
        n += 1
    return n


@njit(cache=True)
def count_query(pcs, table, ent, r, keys, num_keys, prompt_tokens, num_claimed, block_size):
    """The statistics of one admission, before its allocation may evict anything (PrefixCacheStats)."""
    pcs[r, S_QUERIES] += 1
    pcs[r, S_QUERIED_TOKENS] += prompt_tokens
    pcs[r, S_HIT_TOKENS] += num_claimed * block_size
    pcs[r, S_QUERIED_BLOCKS] += -(-prompt_tokens // block_size)
    pcs[r, S_HIT_BLOCKS] += num_claimed
    for j in range(num_keys):  # keys present now were registered before this request arrived (its claims included)
        pcs[r, S_REUSED_BLOCKS] += entry_of(table, ent, r, keys[j]) >= 0


@njit(cache=True)
def register(pcs, table, ent, r, key, e, is_tail):
    """A block just filled takes its key as entry `e`, unless another block holds that key already (then it stays
    a block without a key). Returns whether it took it. Its one reference is the caller's to count."""
    i = find(table, ent, r, key)
    if table[r, i] >= 0:
        return False
    ent[r, E_KEY, e], ent[r, E_REF, e], ent[r, E_TAIL, e] = key, 1, is_tail
    table[r, i] = e
    pcs[r, S_CACHED] += 1
    return True


@njit(cache=True)
def park(pcs, ent, r, e):
    """An entry nobody holds any more goes onto the LRU: at its tail (evicted last), or, a prompt's partly filled
    last block (never claimable), at its head. A request's blocks are parked in reverse table order, so that its
    last blocks, the least shared, go first."""
    if ent[r, E_TAIL, e]:
        head = pcs[r, S_LRU_HEAD]
        ent[r, E_PREV, e], ent[r, E_NEXT, e] = -1, head
        if head >= 0:
            ent[r, E_PREV, head] = e
        else:
            pcs[r, S_LRU_TAIL] = e
        pcs[r, S_LRU_HEAD] = e
    else:
        tail = pcs[r, S_LRU_TAIL]
        ent[r, E_PREV, e], ent[r, E_NEXT, e] = tail, -1
        if tail >= 0:
            ent[r, E_NEXT, tail] = e
        else:
            pcs[r, S_LRU_HEAD] = e
        pcs[r, S_LRU_TAIL] = e
    pcs[r, S_EVICTABLE] += 1


@njit(cache=True)
def unpark(pcs, ent, r, e):
    """A parked entry is claimed again: off the LRU."""
    _lru_unlink(pcs, ent, r, e)
    pcs[r, S_EVICTABLE] -= 1


@njit(cache=True)
def evict(pcs, table, ent, r):
    """Drop the least recently used parked entry's key and return the entry, its block free for new content."""
    e = pcs[r, S_LRU_HEAD]
    _lru_unlink(pcs, ent, r, e)
    _remove_key(table, ent, r, ent[r, E_KEY, e])
    ent[r, E_KEY, e] = NO_KEY
    pcs[r, S_EVICTABLE] -= 1
    pcs[r, S_CACHED] -= 1
    pcs[r, S_EVICTIONS] += 1
    return e
