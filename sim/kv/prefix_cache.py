"""Automatic prefix caching's index for the SimPy engine: content key -> block, the LRU of cached blocks nobody
holds, hit statistics.

A prompt's content is given by `request.prefix_ids` / `prefix_unit_tokens` (see Request). Each block
of the prompt whose tokens all have ids gets a key, chained from the previous block's with its content, so
equal keys mean equal prompts up to the end of that block (`sim.kv.prefix_keys`). This module knows
which block holds which key and which cached blocks may be evicted; the paged manager decides when
blocks are claimed, registered and released, and the block pool owns the free list and the references.
Every decision (what a prompt finds, what a filled block registers, where a freed block goes on the LRU, which
one is evicted, the statistics) is `sim.kv.prefix_index`'s, which the compiled core calls too; here a cached
block's entry id is its block id.
"""

from __future__ import annotations

import numpy as np

from sim.core.request import Request
from sim.kv import prefix_index as ix
from sim.kv.base import PrefixCacheStats
from sim.kv.prefix_keys import block_key_array

# below this many blocks one lookup each is cheaper than building an index array (the development machine, 12-05:
# 4 blocks 0.9 against 1.6 us, 16 blocks 1.9 against 2.0 us, 256 blocks 26 against 8 us)
HOLDS_EACH_VECTORIZED_FROM = 16


class _LRUView:
    """The cached blocks nobody references, least recently used first (iterable, sized)."""

    def __init__(self, pcs: np.ndarray, ent: np.ndarray):
        self._pcs, self._ent = pcs, ent

    def __len__(self) -> int:
        return int(self._pcs[0, ix.S_EVICTABLE])

    def __iter__(self):
        block, nxt = int(self._pcs[0, ix.S_LRU_HEAD]), self._ent[0, ix.E_NEXT]
        while block >= 0:
            yield block
            block = int(nxt[block])


class PrefixCache:
    """Which blocks hold a registered prompt prefix, and which of them nobody references (evictable, LRU first).

    A block's key is registered when a step fills it. An evictable block counts as free but a later
    request with the same prefix claims it back; allocation evicts the least recently freed one only
    when the free list is empty. A prompt's partly filled last block is keyed too (its key includes how
    many tokens it holds), so that `reused_blocks` counts an exactly repeated prompt's tail as a reuse
    (Mooncake's per-block statistic); it can never be claimed, so it is parked at the head of the LRU.
    """

    def __init__(self, num_blocks: int, block_size: int):
        self.block_size = block_size
        self._pcs, self._table, self._ent = ix.index_arrays(1, num_blocks)
        self._found = np.zeros(num_blocks + 1, dtype=np.int64)  # scratch: the entries a lookup found
        self.evictable = _LRUView(self._pcs, self._ent)  # cached, unreferenced blocks, LRU first
        self._keys: dict[int, tuple[np.ndarray, int]] = {}  # request id -> (block keys, number of full-block keys)
        self.num_keyed: dict[int, int] = {}  # request id -> leading blocks of its table already registered

    @property
    def num_cached(self) -> int:
        """Blocks holding a registered key (referenced or evictable)."""
        return int(self._pcs[0, ix.S_CACHED])

    def keys_of(self, request: Request) -> tuple[np.ndarray, int]:
        """The content keys of the request's prompt blocks and how many of them are full blocks (the
        rest, at most one, is the prompt's partly filled last block). Memoized until `forget`."""
        rid = request.request_id
        memo = self._keys.get(rid)
        if memo is None:
            memo = self._keys[rid] = block_key_array(request.prefix_ids, request.prefix_unit_tokens,
                                                     request.num_prompt_tokens, self.block_size)
        return memo

    def forget(self, request_id: int) -> None:
        self._keys.pop(request_id, None)
        self.num_keyed.pop(request_id, None)

    def _leading(self, keys: np.ndarray, limit: int) -> int:
        return int(ix.cached_prefix(self._table, self._ent, 0, keys, limit, self._found)) if limit > 0 else 0

    def num_cached_tokens(self, request: Request) -> int:
        """Leading prompt tokens whose K/V is cached (a block multiple), leaving at least one to compute."""
        keys, num_full = self.keys_of(request)
        return self._leading(keys, min(num_full, (request.num_prompt_tokens - 1) // self.block_size)) * self.block_size

    def claimable(self, request: Request) -> list[int]:
        """The cached blocks holding the request's leading computed tokens (set by the lookup), in order."""
        keys, num_full = self.keys_of(request)
        n = self._leading(keys, min(request.num_computed_tokens // self.block_size, num_full))
        return self._found[:n].tolist()

    def count_query(self, request: Request, num_claimed: int) -> None:
        """Statistics of one admission, counted before its allocation may evict anything."""
        keys, _ = self.keys_of(request)
        ix.count_query(self._pcs, self._table, self._ent, 0, keys, len(keys), request.num_prompt_tokens, num_claimed,
                       self.block_size)

    def register(self, request: Request, table: list[int], num_tokens: int) -> None:
        """Register the keys of the table's blocks that are complete once `num_tokens` are computed."""
        keys, num_full = self.keys_of(request)
        if not len(keys):
            return
        rid = request.request_id
        done = self.num_keyed.get(rid, 0)
        limit = min(num_tokens // self.block_size, num_full)
        if num_tokens >= request.num_prompt_tokens:
            limit = len(keys)
        if limit <= done:
            return
        block_key = self._ent[0, ix.E_KEY]
        for j in range(done, limit):
            block = table[j]
            if block_key[block] == ix.NO_KEY:  # (else the block already holds a key: a fork's shared block)
                ix.register(self._pcs, self._table, self._ent, 0, keys[j], block, j >= num_full)
        self.num_keyed[rid] = limit

    def holds(self, block: int) -> bool:
        """The block holds a registered key (referenced, or evictable once nobody holds it)."""
        return self._ent[0, ix.E_KEY, block] != ix.NO_KEY

    def holds_each(self, blocks: list[int]) -> list[bool]:
        """`holds` of each block, in one array lookup where the list is long enough to pay for it."""
        if len(blocks) < HOLDS_EACH_VECTORIZED_FROM:
            return [self.holds(block) for block in blocks]
        return (self._ent[0, ix.E_KEY][blocks] != ix.NO_KEY).tolist()

    def unpark(self, block: int) -> None:
        """A claimed evictable block is referenced again: off the LRU."""
        ix.unpark(self._pcs, self._ent, 0, block)

    def park(self, blocks: list[int]) -> None:
        """Cached blocks nobody references any more, in block-table order: onto the LRU (`prefix_index.park`)."""
        for block in reversed(blocks):
            ix.park(self._pcs, self._ent, 0, block)

    def evict(self) -> int:
        """Drop the least recently used cached block's key and return the block for new content."""
        return int(ix.evict(self._pcs, self._table, self._ent, 0))

    def stats(self) -> PrefixCacheStats:
        return PrefixCacheStats(*(int(v) for v in self._pcs[0, ix.FIRST_STAT:]))

    def set_stats(self, counts: np.ndarray) -> None:
        """The statistics of a run the compiled core made on this cache's behalf (PrefixCacheStats' order)."""
        self._pcs[0, ix.FIRST_STAT:] = counts

    def check(self, free: list[int], held: list[int]) -> None:
        """Assert the index's invariants (for tests)."""
        evictable = list(self.evictable)
        assert len(evictable) == len(set(evictable)) == len(self.evictable)
        assert not set(free) & set(evictable) and not set(evictable) & set(held)
        assert all(self.holds(block) for block in evictable)
        assert not any(self.holds(block) for block in free)
        keyed = [block for block in range(self._ent.shape[2]) if self.holds(block)]
        assert len(keyed) == self.num_cached
        assert all(ix.entry_of(self._table, self._ent, 0, self._ent[0, ix.E_KEY, b]) == b for b in keyed)
