"""Automatic prefix caching's index: content key -> block, the LRU of cached blocks nobody holds, hit statistics.

A prompt's content is given by `request.prefix_ids` / `prefix_unit_tokens` (see Request). Each block
of the prompt whose tokens all have ids gets a key, hash((key of the previous block, content)), so
equal keys mean equal prompts up to the end of that block (`sim.kv.prefix_keys`). This module knows
which block holds which key and which cached blocks may be evicted; the paged manager decides when
blocks are claimed, registered and released, and the block pool owns the free list.
"""

from __future__ import annotations

from collections import OrderedDict

from sim.core.request import Request
from sim.kv.base import PrefixCacheStats
from sim.kv.prefix_keys import block_keys


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
        self.cached_blocks: dict[int, int] = {}  # content key -> block holding it
        self.block_keys: list[int | None] = [None] * num_blocks  # per block: its content key while cached
        self.evictable: OrderedDict[int, None] = OrderedDict()  # cached, unreferenced blocks, LRU first
        self._tail_blocks: set[int] = set()  # cached blocks keyed as a prompt's partly filled last block
        self._keys: dict[int, tuple[list[int], int]] = {}  # request id -> (block keys, number of full-block keys)
        self.num_keyed: dict[int, int] = {}  # request id -> leading blocks of its table already registered
        self.num_queries = self.queried_tokens = self.hit_tokens = 0
        self.queried_blocks = self.hit_blocks = self.reused_blocks = 0
        self.num_evictions = 0

    def keys_of(self, request: Request) -> tuple[list[int], int]:
        """The content keys of the request's prompt blocks and how many of them are full blocks (the
        rest, at most one, is the prompt's partly filled last block). Memoized until `forget`."""
        rid = request.request_id
        memo = self._keys.get(rid)
        if memo is None:
            memo = self._keys[rid] = block_keys(request.prefix_ids, request.prefix_unit_tokens,
                                                request.num_prompt_tokens, self.block_size)
        return memo

    def forget(self, request_id: int) -> None:
        self._keys.pop(request_id, None)
        self.num_keyed.pop(request_id, None)

    def num_cached_tokens(self, request: Request) -> int:
        """Leading prompt tokens whose K/V is cached (a block multiple), leaving at least one to compute."""
        keys, num_full = self.keys_of(request)
        limit = min(num_full, (request.num_prompt_tokens - 1) // self.block_size)
        cached = self.cached_blocks
        n = 0
        while n < limit and keys[n] in cached:
            n += 1
        return n * self.block_size

    def claimable(self, request: Request) -> list[int]:
        """The cached blocks holding the request's leading computed tokens (set by the lookup), in order."""
        keys, num_full = self.keys_of(request)
        claimed = []
        for key in keys[:min(request.num_computed_tokens // self.block_size, num_full)]:
            block = self.cached_blocks.get(key)
            if block is None:
                break
            claimed.append(block)
        return claimed

    def count_query(self, request: Request, num_claimed: int) -> None:
        """Statistics of one admission, counted before its allocation may evict anything."""
        keys, _ = self.keys_of(request)
        self.num_queries += 1
        self.queried_tokens += request.num_prompt_tokens
        self.hit_tokens += num_claimed * self.block_size
        self.queried_blocks += -(-request.num_prompt_tokens // self.block_size)
        self.hit_blocks += num_claimed
        # Keys present now were registered before this request arrived (its claims included).
        self.reused_blocks += sum(map(self.cached_blocks.__contains__, keys))

    def register(self, request: Request, table: list[int], num_tokens: int) -> None:
        """Register the keys of the table's blocks that are complete once `num_tokens` are computed."""
        keys, num_full = self.keys_of(request)
        if not keys:
            return
        rid = request.request_id
        done = self.num_keyed.get(rid, 0)
        limit = min(num_tokens // self.block_size, num_full)
        if num_tokens >= request.num_prompt_tokens:
            limit = len(keys)
        if limit <= done:
            return
        cached, block_keys_ = self.cached_blocks, self.block_keys
        for j in range(done, limit):
            key, block = keys[j], table[j]
            if key not in cached and block_keys_[block] is None:  # else another block already holds it
                cached[key] = block
                block_keys_[block] = key
                if j >= num_full:
                    self._tail_blocks.add(block)
        self.num_keyed[rid] = limit

    def holds(self, block: int) -> bool:
        """The block holds a registered key (referenced, or evictable once nobody holds it)."""
        return self.block_keys[block] is not None

    def unpark(self, block: int) -> None:
        """A claimed evictable block is referenced again: off the LRU."""
        del self.evictable[block]

    def park(self, blocks: list[int]) -> None:
        """Cached blocks nobody references any more, in block-table order: onto the LRU, the table's
        last blocks (the least shared) to be evicted first, unclaimable tails before anything else."""
        evictable = self.evictable
        for block in reversed(blocks):
            evictable[block] = None
            if block in self._tail_blocks:
                evictable.move_to_end(block, last=False)

    def evict(self) -> int:
        """Drop the least recently used cached block's key and return the block for new content."""
        block, _ = self.evictable.popitem(last=False)
        del self.cached_blocks[self.block_keys[block]]
        self.block_keys[block] = None
        self._tail_blocks.discard(block)
        self.num_evictions += 1
        return block

    def stats(self) -> PrefixCacheStats:
        return PrefixCacheStats(self.num_queries, self.queried_tokens, self.hit_tokens, self.queried_blocks,
                                self.hit_blocks, self.reused_blocks, self.num_evictions)

    def check(self, free: list[int], held: list[int]) -> None:
        """Assert the index's invariants (for tests)."""
        evictable = list(self.evictable)
        assert not set(free) & set(evictable) and not set(evictable) & set(held)
        assert all(self.block_keys[block] is not None for block in evictable)
        assert all(self.block_keys[block] is None for block in free)
        assert {key: block for block, key in enumerate(self.block_keys) if key is not None} == self.cached_blocks
