"""Paged KV: fixed-size blocks through per-request block tables (vLLM's PagedAttention).

The paged manager can also share blocks between requests: automatic prefix caching (vLLM's APC,
SGLang's RadixAttention at block granularity) and `fork` for parallel sampling and beam search,
with copy-on-write. See `PagedKVManager` for how a scheduler drives it.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Iterable

from sim.core.request import Request
from sim.kv.base import KVUsage, PrefixCacheStats, SharingStats
from sim.kv.prefix_keys import block_keys


class PagedKVManager:
    """Fixed-size blocks on demand through per-request block tables and a free list (vLLM's PagedAttention).

    Only a request's last block is partly filled, so internal fragmentation is under one block per
    request and there is no external fragmentation.

    **Prefix caching** (`enable_prefix_caching=True`, as vLLM's automatic prefix caching). A prompt's
    content is given by `request.prefix_ids` / `prefix_unit_tokens` (see Request). Each block of the
    prompt whose tokens all have ids gets a key, hash((key of the previous block, content)), so equal
    keys mean equal prompts up to the end of that block. A block's key is registered when it is
    allocated for a step that fills it (the step computes it). Blocks hold reference counts; `free`
    drops them, and a block nobody references keeps its key and content on an LRU list: it counts as
    free (`num_free_blocks`, `usage().free_slots`) but a later request with the same prefix claims it
    back. Allocation takes never-cached free blocks first, then evicts the least recently freed
    cached block. A freed request's blocks join the LRU last block first, so its last blocks (the
    least shared) are evicted before its first ones, as in vLLM.

    Admission, in the scheduler (a request with no blocks yet)::

        n = kv.get_computed_blocks(request)          # cached leading prompt tokens, a block multiple
        request.num_computed_tokens = n               # the step computes only the rest
        if kv.allocate_slots(request, chunk) is None:  # claims the n cached tokens' blocks, then allocates
            request.num_computed_tokens = 0            # no room: nothing changed, try again later

    where `chunk <= request.num_tokens - n`, and nothing else is allocated in between (an allocation
    may evict what the lookup found). At least one prompt token is always computed, so the step that
    ends the prompt still produces logits. A request that reaches `allocate_slots` with no blocks and
    `num_computed_tokens > 0` without a lookup (swap-in after a swap preemption: do not overwrite its
    counter with the lookup) claims whatever leading cached blocks it can and gets fresh blocks for
    the rest.

    The partly filled last block of a prompt is keyed too (its key includes how many tokens it
    holds), so that `PrefixCacheStats.reused_blocks` counts an exactly repeated prompt's tail as a
    reuse (Mooncake's per-block statistic). It can never be claimed (that would mean the whole
    prompt is cached), so when freed it goes to the head of the LRU and is evicted first.

    **Forks** (`fork(parent, child)`): for parallel sampling (n outputs of one prompt) and beam
    search. The child gets the parent's block table, every block referenced once more. A block shared
    that way that is only partly filled would be written by both, so the next writer copies it first
    (copy-on-write): before a step in which forked requests write tokens, call
    `copy_on_write(request_ids)` (or `num_cow_blocks_needed` first, to preempt for room);
    `allocate_slots` does it by itself for a request it allocates for. `cow_pending` holds the ids
    that may still need a copy. The last sharer to write keeps the original block.

    With neither feature used the manager runs exactly the plain code path (no reference counts).
    """

    def __init__(self, num_blocks: int, block_size: int, *, enable_prefix_caching: bool = False):
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError("num_blocks and block_size must be positive")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.capacity_slots = num_blocks * block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.free_block_ids: deque[int] = deque(range(num_blocks))  # blocks holding nothing
        self.block_tables: dict[int, list[int]] = {}
        # Sharing state, set up by _start_sharing() (prefix caching, or the first fork).
        self.sharing = False  # reference counts are kept
        self.ref_counts: list[int] = []  # per block: block tables that hold it
        self.block_keys: list[int | None] = []  # per block: its content key while cached
        self.cached_blocks: dict[int, int] = {}  # content key -> block holding it
        self.evictable: OrderedDict[int, None] = OrderedDict()  # cached, unreferenced blocks, LRU first
        self.cow_pending: set[int] = set()  # request ids whose last block may be shared and partly filled
        self._tail_blocks: set[int] = set()  # cached blocks keyed as a prompt's partly filled last block
        self._partial_fill: dict[int, int] = {}  # shared partly filled block -> tokens in it
        self._keys: dict[int, tuple[list[int], int]] = {}  # request id -> (block keys, number of full-block keys)
        self._num_keyed: dict[int, int] = {}  # request id -> leading blocks of its table already registered
        # Statistics.
        self.num_queries = self.queried_tokens = self.hit_tokens = 0
        self.queried_blocks = self.hit_blocks = self.reused_blocks = 0
        self.num_evictions = 0
        self.num_cow_copies = 0
        self._shared_blocks = 0  # blocks with more than one reference
        self._saved_blocks = 0  # sum of (references - 1)
        self._shared_slots = 0  # sum of (references - 1) * tokens in the block
        if enable_prefix_caching:
            self._start_sharing()

    def __repr__(self) -> str:
        extra = ", enable_prefix_caching=True" if self.enable_prefix_caching else ""
        return f"PagedKVManager(num_blocks={self.num_blocks}, block_size={self.block_size}{extra})"

    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation can take: never-cached free blocks plus evictable cached ones."""
        return len(self.free_block_ids) + len(self.evictable)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def num_new_blocks(self, request: Request, num_new_tokens: int) -> int:
        table = self.block_tables.get(request.request_id)
        have = len(table) if table else 0
        return max(0, self.blocks_for(request.num_computed_tokens + num_new_tokens) - have)

    def allocate_slots(self, request: Request, num_new_tokens: int) -> list[int] | None:
        """Blocks for the request's computed tokens plus `num_new_tokens`; returns the newly allocated
        blocks (a copy-on-write copy included; claimed cached blocks are not in the list, but are in
        the block table), or None with nothing changed when there is no room."""
        if self.sharing:
            return self._allocate_shared(request, num_new_tokens)
        need = self.num_new_blocks(request, num_new_tokens)
        if need > len(self.free_block_ids):
            return None
        popleft = self.free_block_ids.popleft
        new_blocks = [popleft() for _ in range(need)]
        self.block_tables.setdefault(request.request_id, []).extend(new_blocks)
        return new_blocks

    def append_one_block_each(self, request_ids) -> None:
        """Decode hot path: each of these requests starts a new block this step (caller checked room)."""
        if self.sharing:
            for rid in request_ids:
                self.append_blocks(rid, 1)
            return
        popleft, tables = self.free_block_ids.popleft, self.block_tables
        for rid in request_ids:
            tables[rid].append(popleft())

    def append_blocks(self, request_id: int, num_blocks: int) -> None:
        """Append `num_blocks` fresh blocks to a running request's table (caller checked room)."""
        table = self.block_tables[request_id]
        if not self.sharing:
            popleft = self.free_block_ids.popleft
            table.extend(popleft() for _ in range(num_blocks))
            return
        if request_id in self.cow_pending:
            last = table[-1]
            if self.ref_counts[last] > 1:
                raise RuntimeError(f"request {request_id} wrote into shared block {last} without copy_on_write")
            self.cow_pending.discard(request_id)
        for _ in range(num_blocks):
            block = self._take_block()
            self.ref_counts[block] = 1
            table.append(block)

    def release_tail_blocks(self, request_id: int, num_blocks: int) -> None:
        """Give back the last `num_blocks` blocks of a request's table (e.g. rejected speculative tokens)."""
        if num_blocks <= 0:
            return
        table = self.block_tables[request_id]
        tail = table[-num_blocks:]
        del table[-num_blocks:]
        if not self.sharing:
            self.free_block_ids.extend(tail)
            return
        self._release(tail)

    def free(self, request: Request) -> None:
        rid = request.request_id
        table = self.block_tables.pop(rid, None)
        if not self.sharing:
            if table:
                self.free_block_ids.extend(table)
            return
        self._keys.pop(rid, None)
        self._num_keyed.pop(rid, None)
        self.cow_pending.discard(rid)
        if table:
            self._release(table)

    def can_ever_fit(self, num_tokens: int) -> bool:
        return self.blocks_for(num_tokens) <= self.num_blocks

    def num_allocated_slots(self) -> int:
        return (self.num_blocks - self.num_free_blocks) * self.block_size

    def usage(self, num_token_slots: int) -> KVUsage:
        """`num_token_slots`: the requests' computed tokens summed (a shared block counted per sharer)."""
        allocated = self.num_allocated_slots()
        if not self.sharing:
            return KVUsage(self.capacity_slots, num_token_slots, 0, allocated - num_token_slots, 0)
        tokens = num_token_slots - self._shared_slots
        return KVUsage(self.capacity_slots, tokens, 0, allocated - tokens, 0,
                       len(self.evictable) * self.block_size, self._shared_slots)

    # --- prefix caching -----------------------------------------------------------------------------
    def get_computed_blocks(self, request: Request) -> int:
        """Leading prompt tokens whose K/V is cached (a multiple of block_size), leaving at least one
        prompt token to compute. A pure lookup: nothing is claimed until `allocate_slots`."""
        if not self.enable_prefix_caching:
            return 0
        keys, num_full = self._keys_of(request)
        limit = min(num_full, (request.num_prompt_tokens - 1) // self.block_size)
        cached = self.cached_blocks
        n = 0
        while n < limit and keys[n] in cached:
            n += 1
        return n * self.block_size

    def prefix_cache_stats(self) -> PrefixCacheStats:
        return PrefixCacheStats(self.num_queries, self.queried_tokens, self.hit_tokens, self.queried_blocks,
                                self.hit_blocks, self.reused_blocks, self.num_evictions)

    def sharing_stats(self) -> SharingStats:
        return SharingStats(self._shared_blocks, self._saved_blocks, self._saved_blocks * self.block_size,
                            self.num_cow_copies)

    @property
    def num_cached_blocks(self) -> int:
        """Blocks holding a registered prefix (referenced or evictable)."""
        return len(self.cached_blocks)

    def _keys_of(self, request: Request) -> tuple[list[int], int]:
        """The content keys of the request's prompt blocks and how many of them are full blocks (the
        rest, at most one, is the prompt's partly filled last block). Memoized until `free`."""
        rid = request.request_id
        memo = self._keys.get(rid)
        if memo is None:
            memo = self._keys[rid] = block_keys(request.prefix_ids, request.prefix_unit_tokens,
                                                request.num_prompt_tokens, self.block_size)
        return memo

    def _register(self, request: Request, table: list[int], num_tokens: int) -> None:
        """Register the keys of the table's blocks that are complete once `num_tokens` are computed."""
        keys, num_full = self._keys_of(request)
        if not keys:
            return
        rid = request.request_id
        done = self._num_keyed.get(rid, 0)
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
        self._num_keyed[rid] = limit

    # --- sharing ------------------------------------------------------------------------------------
    def fork(self, parent: Request, child: Request) -> None:
        """Give `child` (no blocks yet) the parent's blocks, shared. Call it when the parent's counters
        are exact (decode tracker synced) and its table holds exactly its computed tokens, i.e. after
        the step that computed them; set the child's counters to the parent's yourself."""
        if not self.sharing:
            self._start_sharing()
        table = self.block_tables.get(parent.request_id)
        if not table:
            raise ValueError(f"fork: parent request {parent.request_id} holds no blocks")
        if self.block_tables.get(child.request_id):
            raise ValueError(f"fork: child request {child.request_id} already holds blocks")
        filled = parent.num_computed_tokens
        if self.blocks_for(filled) != len(table):
            raise ValueError(f"fork: parent request {parent.request_id} holds {len(table)} blocks for "
                             f"{filled} computed tokens; fork after its step, with its counters synced")
        partial = filled % self.block_size
        ref = self.ref_counts
        if partial and ref[table[-1]] == 1:  # (if already shared, it was forked at this same point)
            self._partial_fill[table[-1]] = partial
        for block in table:
            ref[block] += 1
            self._shared_more(block, ref[block])
        self.block_tables[child.request_id] = list(table)
        self._num_keyed[child.request_id] = self._num_keyed.get(parent.request_id, 0)
        if partial:
            self.cow_pending.update((parent.request_id, child.request_id))

    def num_cow_blocks_needed(self, request_ids: Iterable[int]) -> int:
        """Blocks `copy_on_write(request_ids)` would take."""
        return len(self._cow_plan(request_ids)[1])

    def copy_on_write(self, request_ids: Iterable[int]) -> list[int] | None:
        """Before these requests write their next token: each whose last block is still shared and
        partly filled gets a private copy. Returns the new blocks, or None (nothing changed) if the
        free blocks do not suffice. Ids not in `cow_pending` are ignored."""
        done, copiers = self._cow_plan(request_ids)
        if len(copiers) > self.num_free_blocks:
            return None
        new_blocks = [self._copy_last_block(rid) for rid in copiers]
        self.cow_pending.difference_update(done)
        return new_blocks

    def _cow_plan(self, request_ids: Iterable[int]) -> tuple[list[int], list[int]]:
        """(pending ids among request_ids, those that must copy): of k sharers writing, k - 1 copy."""
        pending = self.cow_pending
        if not pending:
            return [], []
        done, copiers, refs = [], [], {}
        for rid in request_ids:
            if rid not in pending:
                continue
            done.append(rid)
            block = self.block_tables[rid][-1]
            left = refs.get(block, self.ref_counts[block])
            if left > 1:
                copiers.append(rid)
                refs[block] = left - 1
        return done, copiers

    def _copy_last_block(self, rid: int) -> int:
        table = self.block_tables[rid]
        old = table[-1]
        new = self._take_block()
        self.ref_counts[new] = 1
        table[-1] = new
        self.ref_counts[old] -= 1
        self._shared_less(old, self.ref_counts[old])
        self.num_cow_copies += 1
        return new

    # --- internals ----------------------------------------------------------------------------------
    def _start_sharing(self) -> None:
        """Switch to reference-counted blocks (every block held so far has one holder)."""
        self.sharing = True
        self.ref_counts = [0] * self.num_blocks
        self.block_keys = [None] * self.num_blocks
        for table in self.block_tables.values():
            for block in table:
                self.ref_counts[block] += 1

    def _allocate_shared(self, request: Request, num_new_tokens: int) -> list[int] | None:
        rid = request.request_id
        table = self.block_tables.get(rid)
        end = request.num_computed_tokens + num_new_tokens
        ref = self.ref_counts
        if not table:
            # Admission: claim the leading cached blocks of what is already computed (get_computed_blocks).
            claimed = []
            if request.num_computed_tokens and self.enable_prefix_caching:
                keys, num_full = self._keys_of(request)
                cached = self.cached_blocks
                for key in keys[:min(request.num_computed_tokens // self.block_size, num_full)]:
                    block = cached.get(key)
                    if block is None:
                        break
                    claimed.append(block)
            revived = sum(1 for block in claimed if not ref[block])
            need = self.blocks_for(end) - len(claimed)
            if need > self.num_free_blocks - revived:
                return None
            if self.enable_prefix_caching:  # before allocating, which may evict
                self._count_query(request, len(claimed))
            for block in claimed:
                if ref[block] == 0:
                    del self.evictable[block]
                ref[block] += 1
                self._shared_more(block, ref[block])
            new_blocks = self._take_blocks(need)
            table = self.block_tables[rid] = claimed + new_blocks
            self._num_keyed[rid] = len(claimed)
        else:
            computed = request.num_computed_tokens
            cow = (num_new_tokens > 0 and rid in self.cow_pending and ref[table[-1]] > 1
                   and computed % self.block_size and len(table) == self.blocks_for(computed))
            need = max(0, self.blocks_for(end) - len(table))
            if need + cow > self.num_free_blocks:
                return None
            copied = [self._copy_last_block(rid)] if cow else []
            if num_new_tokens > 0:
                self.cow_pending.discard(rid)
            new_blocks = self._take_blocks(need)
            table.extend(new_blocks)
            new_blocks = copied + new_blocks
        if self.enable_prefix_caching:
            self._register(request, table, end)
        return new_blocks

    def _count_query(self, request: Request, num_claimed: int) -> None:
        keys, _ = self._keys_of(request)
        cached = self.cached_blocks
        self.num_queries += 1
        self.queried_tokens += request.num_prompt_tokens
        self.hit_tokens += num_claimed * self.block_size
        self.queried_blocks += self.blocks_for(request.num_prompt_tokens)
        self.hit_blocks += num_claimed
        # Keys present now were registered before this request arrived (its claims included).
        self.reused_blocks += sum(map(cached.__contains__, keys))

    def _take_block(self) -> int:
        """A block for new content: a never-cached free block, else the least recently used cached one."""
        if self.free_block_ids:
            return self.free_block_ids.popleft()
        block, _ = self.evictable.popitem(last=False)
        del self.cached_blocks[self.block_keys[block]]
        self.block_keys[block] = None
        self._tail_blocks.discard(block)
        self.num_evictions += 1
        return block

    def _take_blocks(self, n: int) -> list[int]:
        free = self.free_block_ids
        if n <= len(free):
            popleft = free.popleft
            blocks = [popleft() for _ in range(n)]
        else:
            blocks = [self._take_block() for _ in range(n)]
        ref = self.ref_counts
        for block in blocks:
            ref[block] = 1
        return blocks

    def _release(self, blocks: list[int]) -> None:
        """One reference fewer on each block; unreferenced ones become free (uncached) or evictable."""
        ref, keys, to_cache = self.ref_counts, self.block_keys, []
        for block in blocks:
            left = ref[block] - 1
            ref[block] = left
            if left:
                self._shared_less(block, left)
            elif keys[block] is None:
                self.free_block_ids.append(block)
            else:
                to_cache.append(block)
        evictable = self.evictable
        for block in reversed(to_cache):  # the request's last blocks are evicted first
            evictable[block] = None
            if block in self._tail_blocks:
                evictable.move_to_end(block, last=False)  # can never be claimed: evict before anything else

    def _shared_more(self, block: int, refs: int) -> None:
        """Bookkeeping after a block gained its `refs`-th reference."""
        if refs > 1:
            self._saved_blocks += 1
            self._shared_slots += self._partial_fill.get(block, self.block_size)
            if refs == 2:
                self._shared_blocks += 1

    def _shared_less(self, block: int, refs: int) -> None:
        """Bookkeeping after a block lost a reference and has `refs` >= 1 left."""
        self._saved_blocks -= 1
        self._shared_slots -= self._partial_fill.get(block, self.block_size)
        if refs == 1:
            self._shared_blocks -= 1
            self._partial_fill.pop(block, None)

    def check_consistency(self) -> None:
        """Assert the invariants (for tests): every block is free, evictable or referenced, exactly once;
        reference counts match the block tables; the cache index matches the block keys."""
        free, evictable = list(self.free_block_ids), list(self.evictable)
        held = [block for table in self.block_tables.values() for block in table]
        assert len(set(free)) == len(free) and not set(free) & set(evictable) and not set(free) & set(held)
        assert not set(evictable) & set(held)
        assert set(free) | set(evictable) | set(held) == set(range(self.num_blocks))
        if not self.sharing:
            assert len(held) == len(set(held)) and not evictable
            return
        counts = [0] * self.num_blocks
        for block in held:
            counts[block] += 1
        assert counts == self.ref_counts
        assert all(self.block_keys[block] is not None for block in evictable)
        assert all(self.block_keys[block] is None for block in free)
        assert {key: block for block, key in enumerate(self.block_keys) if key is not None} == self.cached_blocks
        assert self._saved_blocks == sum(max(0, c - 1) for c in counts)
        assert self._shared_blocks == sum(1 for c in counts if c > 1)
        fill = self._partial_fill
        assert all(counts[block] > 1 for block in fill)
        assert self._shared_slots == sum((c - 1) * fill.get(b, self.block_size) for b, c in enumerate(counts) if c > 1)
