"""Automatic prefix caching in the compiled core, in `PagedKVManager`'s order of operations, for
sim/compiled/kernel.py. Every decision is `sim.kv.prefix_index`'s, which the SimPy engine's `PrefixCache` calls
too; this module keeps the core's own bookkeeping around them.

The rest of the core counts blocks and never lists them. Here only the blocks that hold a content key have an
identity, an entry (`sim.kv.prefix_index`; ids from a free stack), with its references counted on it. A block
without a key is as good as any other, so the replica's free-block count (the kernel's, which counts the evictable
entries in, as `PagedKVManager.num_free_blocks` does) is all the rest needs.

A request that holds blocks has a *slot* (one per running request, from a free stack): its prompt's keys
(`sim.kv.prefix_keys.block_keys_into`, the SimPy engine's own), how many are full blocks, how many leading
positions of its block table were claimed or registered (`num_keyed`), and the entry at each of them (-1: a block
whose key another block already held). The kernel calls, in `PagedKVManager`'s order: `lookup` (the cached leading
tokens, on the slot the request would take), `claim` (statistics, then the claimed entries off the LRU), `take`
(blocks for new content: uncounted free ones first, then the least recently used entries, evicted), `register`
(the keys of the blocks filled this step) and `release` (one reference fewer on each; those nobody holds go onto
the LRU in `PrefixCache.park`'s order). Each returns what changes the kernel's free-block count.
"""

from __future__ import annotations

import numpy as np

from sim.jit import njit
from sim.kv import prefix_index as ix
from sim.kv.prefix_keys import block_keys_into

# Rows of the slots' counts `meta[r, slot]`.
M_NUM_KEYS, M_NUM_FULL, M_NUM_KEYED = range(3)
NUM_M = 3


def state(num_replicas: int, num_blocks: int, max_running: int, max_keys: int, ids: np.ndarray,
          ids_start: np.ndarray) -> tuple:
    """The arrays of an empty cache on each replica, as the kernel takes them (a tuple): `max_running` requests
    holding blocks at once, each with at most `max_keys` prompt keys; `ids[ids_start[i]:ids_start[i + 1]]` are
    request i's content ids."""
    pcs, table, ent = ix.index_arrays(num_replicas, num_blocks)
    pcs[:, ix.S_ENTRY_TOP] = num_blocks
    pcs[:, ix.S_SLOT_TOP] = max_running
    entry_stack = np.tile(np.arange(num_blocks, dtype=np.int64)[::-1], (num_replicas, 1))
    slot_keys = np.zeros((num_replicas, max_running, max_keys), dtype=np.int64)
    slot_ent = np.zeros((num_replicas, max_running, max_keys), dtype=np.int64)
    meta = np.zeros((num_replicas, max_running, NUM_M), dtype=np.int64)
    slot_stack = np.tile(np.arange(max_running, dtype=np.int64)[::-1], (num_replicas, 1))
    return pcs, table, ent, entry_stack, slot_keys, slot_ent, meta, slot_stack, ids, ids_start


def no_state() -> tuple:
    """The arrays of a run without prefix caching: the same types, nothing in them (one compiled loop for both)."""
    return state(1, 1, 1, 1, np.zeros(1, dtype=np.int64), np.zeros(2, dtype=np.int64))


@njit(cache=True)
def lookup(pc, r, rid, prompt, unit, bs):
    """`PrefixCache.num_cached_tokens` for request `rid` (prompt tokens `prompt`): its keys go to the slot it would
    take, with the entries of its leading cached blocks. Returns (slot, cached tokens)."""
    pcs, table, ent, _, slot_keys, slot_ent, meta, slot_stack, ids, ids_start = pc
    slot = slot_stack[r, pcs[r, ix.S_SLOT_TOP] - 1]
    keys = slot_keys[r, slot]
    num_keys, num_full = block_keys_into(keys, ids, ids_start[rid], ids_start[rid + 1], unit, prompt, bs)
    meta[r, slot, M_NUM_KEYS], meta[r, slot, M_NUM_FULL], meta[r, slot, M_NUM_KEYED] = num_keys, num_full, 0
    n = ix.cached_prefix(table, ent, r, keys, min(num_full, (prompt - 1) // bs), slot_ent[r, slot])
    return slot, n * bs


@njit(cache=True)
def num_revived(pc, r, slot, num_claimed):
    """Of the blocks a request would claim, those nobody holds (they stop counting as free once claimed)."""
    ent, slot_ent = pc[2], pc[5]
    n = 0
    for j in range(num_claimed):
        n += ent[r, ix.E_REF, slot_ent[r, slot, j]] == 0
    return n


@njit(cache=True)
def claim(pc, r, slot, prompt, num_claimed, bs):
    """The request takes its slot: the lookup's statistics (before anything is evicted), then one more reference
    on each claimed entry, off the LRU if nobody held it."""
    pcs, table, ent, _, slot_keys, slot_ent, meta, _, _, _ = pc
    pcs[r, ix.S_SLOT_TOP] -= 1
    ix.count_query(pcs, table, ent, r, slot_keys[r, slot], meta[r, slot, M_NUM_KEYS], prompt, num_claimed, bs)
    for j in range(num_claimed):
        e = slot_ent[r, slot, j]
        if ent[r, ix.E_REF, e] == 0:
            ix.unpark(pcs, ent, r, e)
        ent[r, ix.E_REF, e] += 1
        if ent[r, ix.E_REF, e] > 1:
            pcs[r, ix.S_SAVED] += 1
    meta[r, slot, M_NUM_KEYED] = num_claimed


@njit(cache=True)
def take(pc, r, n, free_blocks):
    """`PagedKVManager._take_blocks`: `n` blocks for new content out of `free_blocks` (the kernel's count, the
    evictable entries in it): the uncounted free ones first, then the least recently used entries, evicted."""
    pcs, table, ent, entry_stack = pc[0], pc[1], pc[2], pc[3]
    for _ in range(n - (free_blocks - pcs[r, ix.S_EVICTABLE])):
        entry_stack[r, pcs[r, ix.S_ENTRY_TOP]] = ix.evict(pcs, table, ent, r)
        pcs[r, ix.S_ENTRY_TOP] += 1


@njit(cache=True)
def register(pc, r, slot, prompt, end, bs):
    """`PrefixCache.register`: the keys of the request's blocks complete once `end` tokens are computed (all of
    them, the partly filled last included, once the prompt is), each onto its block unless another holds it."""
    pcs, table, ent, entry_stack, slot_keys, slot_ent, meta, _, _, _ = pc
    num_keys, num_full, done = meta[r, slot, M_NUM_KEYS], meta[r, slot, M_NUM_FULL], meta[r, slot, M_NUM_KEYED]
    limit = num_keys if end >= prompt else min(end // bs, num_full)
    if limit <= done:
        return
    for j in range(done, limit):
        e = entry_stack[r, pcs[r, ix.S_ENTRY_TOP] - 1]
        if ix.register(pcs, table, ent, r, slot_keys[r, slot, j], e, j >= num_full):
            pcs[r, ix.S_ENTRY_TOP] -= 1
            slot_ent[r, slot, j] = e
        else:
            slot_ent[r, slot, j] = -1  # another block holds the key: this one stays plain
    meta[r, slot, M_NUM_KEYED] = limit


@njit(cache=True)
def release(pc, r, slot, held):
    """`PagedKVManager._release` of a request's `held` blocks: one reference fewer on each entry it holds; those
    nobody holds now are parked, in reverse table order. The slot is free again. Returns the blocks that became
    free (evictable ones included)."""
    pcs, _, ent, _, _, slot_ent, meta, slot_stack, _, _ = pc
    still_held = 0
    for j in range(meta[r, slot, M_NUM_KEYED] - 1, -1, -1):
        e = slot_ent[r, slot, j]
        if e < 0:
            continue
        ent[r, ix.E_REF, e] -= 1
        if ent[r, ix.E_REF, e] > 0:
            pcs[r, ix.S_SAVED] -= 1
            still_held += 1
        else:
            ix.park(pcs, ent, r, e)
    slot_stack[r, pcs[r, ix.S_SLOT_TOP]] = slot
    pcs[r, ix.S_SLOT_TOP] += 1
    return held - still_held
