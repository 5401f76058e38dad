"""Paged KV: fixed-size blocks through per-request block tables (vLLM's PagedAttention).

The paged manager can also share blocks between requests: automatic prefix caching (vLLM's APC,
SGLang's RadixAttention at block granularity) and forks for parallel sampling and beam search, with
copy-on-write. The free list and reference counts live in `BlockPool`, the prefix index and its LRU in
`PrefixCache`, forks and their copies in `ForkedBlocks` (sim/kv/forking.py); this module keeps the block
tables and the order of operations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from sim.core.request import Request
from sim.kv.admission import admission_fits
from sim.kv.base import KVUsage, PrefixCacheStats, SharingStats
from sim.kv.block_pool import BlockPool
from sim.kv.forking import ForkedBlocks
from sim.kv.prefix_cache import PrefixCache

# The most blocks a pool may hold: the managers and the prefix cache keep arrays of this size (about 72 bytes a block;
# the largest real pools are tens of millions of tokens: a small model over eight 288 GB GPUs). Validation refuses more.
MAX_KV_BLOCKS = 1 << 25

_NO_EVICTABLE = ()
DROPPED = -1  # a block-table entry whose block fell out of the sliding window and went back to the pool


def _write_into_shared_block(request_id: int, block: int) -> RuntimeError:
    """A table is never grown while its last block is shared and partly filled: that write would be every
    sharer's. The sharers' copies come first (`ForkedBlocks.copy_before_write`)."""
    return RuntimeError(f"request {request_id} wrote into shared block {block} before forks.copy_before_write "
                        "copied it")


class PagedKVManager:
    """Fixed-size blocks on demand through per-request block tables and a free list (vLLM's PagedAttention).

    Only a request's last block is partly filled, so internal fragmentation is under one block per
    request and there is no external fragmentation.

    The scheduler admits a request with `admit` (prefix-cache lookup, claim and allocation in the one
    order that is safe: an allocation in between could evict what the lookup found), grows it with
    `allocate_slots`, and frees it with `free`. With `enable_prefix_caching` a freed block keeps its
    content on an LRU (see `PrefixCache`): it counts as free, a later request with the same prefix
    claims it back, and allocation evicts it only when no never-cached block is left.

    `forks` (sim/kv/forking.py) shares a request's blocks with the sequences forked from it (parallel
    sampling, beam search) and copies a shared, partly filled last block before a sharer writes into it;
    a table whose last block is still shared that way is never grown here (it would write for all sharers).

    With neither feature used the manager runs exactly the plain code path (no reference counts).
    """

    def __init__(self, num_blocks: int, block_size: int, *, enable_prefix_caching: bool = False,
                 sliding_window: int | None = None, window_bytes_per_slot: tuple[int, int] | None = None):
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError("num_blocks and block_size must be positive")
        if sliding_window is not None and sliding_window <= 0:
            raise ValueError("sliding_window must be positive")
        if window_bytes_per_slot is not None and (sliding_window is None or min(window_bytes_per_slot) <= 0):
            raise ValueError("window_bytes_per_slot needs a sliding_window and two positive byte counts")
        # A hybrid model (gpt-oss, Gemma 2 and 3): only some layers slide. A block holds `block_size` tokens of the
        # layers that attend to everything, and each request also holds the blocks its sliding layers need at its
        # longest, its last window's (`window_blocks`), taken with its first blocks and given back with them:
        # vLLM's hybrid allocator takes them as the window fills and frees those that fall out of it, from the same
        # memory (the same peak per request; earlier here while a request is shorter than the window).
        # `window_bytes_per_slot`: (a token's KV in the sliding layers, a token slot's bytes). A forked sequence shares
        # its parent's table and takes its own window blocks only if it allocates through `allocate_slots`.
        self.window_bytes_per_slot = window_bytes_per_slot
        # the most blocks a window touches: ceil((window - 1) / block) + 1
        self.window_blocks_span = -(-(sliding_window - 1) // block_size) + 1 if window_bytes_per_slot else 0
        self._window_held: dict[int, list[int]] = {}  # request id -> the blocks its sliding layers hold
        self._window_total = 0  # blocks in _window_held
        if window_bytes_per_slot:
            sliding_window = None  # no block of a request's table falls out: its layers attend to everything
        # Sliding-window attention (Mistral): a token attends to the last `sliding_window` tokens only, so a
        # block wholly before the window of the next token to compute goes back to the pool (vLLM's
        # SlidingWindowManager). Its table entry becomes DROPPED, keeping the table's length equal to
        # blocks_for(tokens). Off with prefix caching or forks (shared blocks): there every block is kept.
        self.sliding_window = sliding_window
        self.num_window_freed_blocks = 0  # blocks given back because they fell out of the window, in all
        self._dropped: dict[int, int] = {}  # request id -> leading table entries dropped (all DROPPED)
        self._dropped_total = 0  # sum of _dropped
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.capacity_slots = num_blocks * block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.pool = BlockPool(num_blocks, block_size)
        self.prefix_cache = PrefixCache(num_blocks, block_size) if enable_prefix_caching else None
        self.block_tables: dict[int, list[int]] = {}
        self.sharing = False  # reference counts are kept (prefix caching, or since the first fork)
        self.forks = ForkedBlocks(self)
        if enable_prefix_caching:
            self.start_sharing()

    def __repr__(self) -> str:
        extra = ", enable_prefix_caching=True" if self.enable_prefix_caching else ""
        if self.sliding_window:
            extra += f", sliding_window={self.sliding_window}"
        if self.window_bytes_per_slot:
            extra += f", window_blocks={self.window_blocks_span} x {self.window_bytes_per_slot}"
        return f"PagedKVManager(num_blocks={self.num_blocks}, block_size={self.block_size}{extra})"

    @property
    def free_block_ids(self):
        """Blocks holding nothing, in the order they are handed out."""
        return self.pool.free_block_ids

    @property
    def ref_counts(self) -> list[int]:
        """Per block: the block tables that hold it (empty until sharing starts)."""
        return self.pool.ref_counts

    @property
    def evictable(self) -> Iterable[int]:
        """Cached blocks nobody holds, least recently used first, sized (empty without prefix caching)."""
        return self.prefix_cache.evictable if self.prefix_cache else _NO_EVICTABLE

    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation can take: never-cached free blocks plus evictable cached ones."""
        free = len(self.pool.free_block_ids)
        return free + len(self.prefix_cache.evictable) if self.prefix_cache else free

    @property
    def num_cached_blocks(self) -> int:
        """Blocks holding a registered prefix (referenced or evictable)."""
        return self.prefix_cache.num_cached if self.prefix_cache else 0

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def window_blocks(self, num_tokens: int) -> int:
        """Blocks a hybrid model's sliding layers hold for a sequence of `num_tokens` at its longest: the blocks its
        last window touches, in those layers' bytes (0 for any other model)."""
        if not self.window_bytes_per_slot:
            return 0
        window_bytes, slot_bytes = self.window_bytes_per_slot
        return -(-min(self.blocks_for(num_tokens), self.window_blocks_span) * window_bytes // slot_bytes)

    def blocks_for_sequence(self, num_tokens: int) -> int:
        """Blocks one sequence of `num_tokens` holds at its longest: its tokens' and its sliding layers' window."""
        return self.blocks_for(num_tokens) + self.window_blocks(num_tokens)

    def held_slots(self, request_id: int) -> int:
        """Token slots in the request's block table (a shared block counted for each holder)."""
        return len(self.block_tables.get(request_id, ())) * self.block_size

    def num_new_blocks(self, request: Request, num_new_tokens: int) -> int:
        """Blocks to allocate for `num_new_tokens` more (a hybrid model's window blocks with a request's first)."""
        table = self.block_tables.get(request.request_id)
        have = len(table) if table else 0
        return max(0, self.blocks_for(request.num_computed_tokens + num_new_tokens) - have) + self._window_need(request)

    def _window_need(self, request: Request) -> int:
        """The window blocks a hybrid model's request takes with its first blocks (0 once it holds them)."""
        if not self.window_bytes_per_slot or request.request_id in self._window_held:
            return 0
        return self.window_blocks(request.num_final_kv_tokens)

    def _take_window(self, request: Request) -> None:
        """A hybrid model's request takes its window blocks, if it holds none yet (caller checked room)."""
        need = self._window_need(request)
        if need:
            self._window_held[request.request_id] = self._take_blocks(need)
            self._window_total += need

    # --- the scheduler's calls ----------------------------------------------------------------------
    def admit(self, request: Request, max_new_tokens: int, *, chunked: bool,
              step_need: Callable[[int], int] | None = None, whole_prompt: bool = True) -> int | None:
        """Start a request that holds no blocks: count its cached leading prompt tokens as computed,
        then allocate for the tokens it computes this step (at most `max_new_tokens`). Returns those
        tokens, or None with nothing changed (counter included) when it cannot start now.

        Whether it may start is `sim.kv.admission.admission_fits` (unchunked: the whole rest this step; chunked:
        the whole rest's blocks free now, or, `whole_prompt` False, the chunk's own), then the chunk's allocation.
        A request swapped out keeps its computed tokens: no lookup, it claims what it can and the rest
        is allocated fresh. At least one prompt token is always computed, so the step ending the prompt
        still produces logits. `step_need`: of the tokens it has left, those this step must compute (the
        scheduling rule's, e.g. the context pass's `sim.sched.rules.context_pass_chunk`); None: all of them."""
        computed_before = request.num_computed_tokens  # > 0 only for a request swapped out
        if computed_before == 0:
            request.num_computed_tokens = self.get_computed_blocks(request)
        need = request.num_tokens - request.num_computed_tokens
        this_step = step_need(need) if step_need is not None else need
        chunk = min(this_step, max_new_tokens)
        rest_blocks = self.num_new_blocks(request, need)  # cache hits count as blocks to allocate
        if (not admission_fits(chunked, whole_prompt, chunk, this_step, rest_blocks, self.num_free_blocks)
                or self.allocate_slots(request, chunk) is None):
            request.num_computed_tokens = computed_before
            return None
        return chunk

    def allocate_slots(self, request: Request, num_new_tokens: int) -> list[int] | None:
        """Blocks for the request's computed tokens plus `num_new_tokens`; returns the newly allocated
        blocks (claimed cached blocks are not in the list, but are in the block table), or None with
        nothing changed when there is no room."""
        if self.sharing:
            return self._allocate_shared(request, num_new_tokens)
        need = self.num_new_blocks(request, num_new_tokens)
        if need > len(self.pool.free_block_ids):
            return None
        if self.window_bytes_per_slot:
            need -= self._window_need(request)
            self._take_window(request)
        new_blocks = self.pool.pop_free(need)
        self.block_tables.setdefault(request.request_id, []).extend(new_blocks)
        if self.sliding_window:
            self._drop_out_of_window(request.request_id, request.num_computed_tokens)
        return new_blocks

    def _drop_out_of_window(self, rid: int, position: int) -> None:
        """Free the blocks wholly before the window of the token at `position` (the next one computed):
        it attends to positions position - sliding_window + 1 onwards."""
        first_needed = position - self.sliding_window + 1
        keep_from = max(0, first_needed) // self.block_size  # blocks before this one hold no needed token
        done = self._dropped.get(rid, 0)
        if keep_from <= done:
            return
        table = self.block_tables[rid]
        self.pool.push_free(table[done:keep_from])
        table[done:keep_from] = [DROPPED] * (keep_from - done)
        self._dropped[rid] = keep_from
        self._dropped_total += keep_from - done
        self.num_window_freed_blocks += keep_from - done

    def append_one_block_each(self, request_ids: Iterable[int]) -> None:
        """Decode hot path: each of these requests starts a new block this step (caller checked room)."""
        if self.sharing:
            for rid in request_ids:
                self.append_blocks(rid, 1)
            return
        popleft, tables = self.pool.free_block_ids.popleft, self.block_tables
        for rid in request_ids:
            tables[rid].append(popleft())
        if self.sliding_window:
            # The token computed this step starts the new (last) block: its position is (blocks - 1) * size.
            for rid in request_ids:
                self._drop_out_of_window(rid, (len(tables[rid]) - 1) * self.block_size)

    def append_blocks(self, request_id: int, num_blocks: int) -> None:
        """Append `num_blocks` fresh blocks to a running request's table (caller checked room)."""
        table = self.block_tables[request_id]
        if self.sharing and request_id in self.forks.pending and table[-1] in self.pool.partial_fill:
            raise _write_into_shared_block(request_id, table[-1])
        table.extend(self._take_blocks(num_blocks))

    def append_blocks_each(self, request_ids: list[int], counts: list[int]) -> None:
        """`append_blocks` for each request in turn (caller checked room): a speculative step's verified tokens."""
        pool = self.pool
        if (self.sharing and self.forks.pending) or sum(counts) > len(pool.free_block_ids):
            for request_id, num_blocks in zip(request_ids, counts):  # forks to check, or cached blocks to evict
                self.append_blocks(request_id, num_blocks)
            return
        blocks, tables, start = pool.pop_free(sum(counts)), self.block_tables, 0  # one pop, the same blocks in turn
        for request_id, num_blocks in zip(request_ids, counts):
            tables[request_id].extend(blocks[start:start + num_blocks])
            start += num_blocks

    def release_tail_blocks_each(self, request_ids: list[int], counts: list[int]) -> None:
        """`release_tail_blocks` for each request in turn (a speculative step's rejected drafts)."""
        if not self.sharing:
            for request_id, num_blocks in zip(request_ids, counts):
                self.release_tail_blocks(request_id, num_blocks)
            return
        tables, tails = self.block_tables, []
        for request_id, num_blocks in zip(request_ids, counts):
            if num_blocks > 0:
                table = tables[request_id]
                tails.append(table[-num_blocks:])
                del table[-num_blocks:]
        self._release_each(tails)

    def release_tail_blocks(self, request_id: int, num_blocks: int) -> None:
        """Give back the last `num_blocks` blocks of a request's table (e.g. rejected speculative tokens)."""
        if num_blocks <= 0:
            return
        table = self.block_tables[request_id]
        tail = table[-num_blocks:]
        del table[-num_blocks:]
        if not self.sharing:
            if self._dropped.get(request_id):
                gone = tail.count(DROPPED)
                tail = [block for block in tail if block != DROPPED]
                self._dropped[request_id] -= gone
                self._dropped_total -= gone
            self.pool.push_free(tail)
            return
        self._release(tail)

    def free(self, request: Request) -> None:
        rid = request.request_id
        table = self.block_tables.pop(rid, None)
        window = self._window_held.pop(rid, None) if self._window_held else None
        if window:
            self._window_total -= len(window)
            if self.sharing:
                self._release(window)
            else:
                self.pool.push_free(window)
        if not self.sharing:
            if table:
                dropped = self._dropped.pop(rid, 0) if self._dropped else 0
                self._dropped_total -= dropped
                self.pool.push_free(table[dropped:] if dropped else table)
            return
        if self.prefix_cache:
            self.prefix_cache.forget(rid)
        self.forks.forget(rid)
        if table:
            self._release(table)

    def can_ever_fit(self, num_tokens: int) -> bool:
        return self.blocks_for_sequence(num_tokens) <= self.num_blocks

    def num_allocated_slots(self) -> int:
        return (self.num_blocks - self.num_free_blocks) * self.block_size

    @property
    def usage_in_bulk(self) -> bool:
        """Whether `run_usage` can count a decode run's states (no sharing, no sliding window: the split
        then depends on the token count and the allocated blocks alone; a hybrid model's window blocks stay)."""
        return not self.sharing and not self.sliding_window

    def run_usage(self, first_token_slots: int, tokens_per_step: int, allocated_slots: int,
                  new_blocks: list[int]) -> tuple:
        """`usage` after each step of a decode run, in bulk (`usage_in_bulk` only): step k (from 0) holds
        `first_token_slots + k * tokens_per_step` tokens and the slots allocated before the run plus the
        blocks taken after steps 0..k-1 (`new_blocks`). Columns token, reserved, internal, external, shared."""
        num_steps, bs = len(new_blocks), self.block_size
        first_token_slots += self._window_total * bs  # as `usage` counts them
        tokens = [first_token_slots + k * tokens_per_step for k in range(num_steps)]
        internal = [0] * num_steps
        allocated = allocated_slots
        for k in range(num_steps):
            internal[k] = allocated - tokens[k]
            allocated += new_blocks[k] * bs
        zeros = [0] * num_steps
        return tokens, zeros, internal, zeros, zeros

    def usage(self, num_token_slots: int) -> KVUsage:
        """`num_token_slots`: the requests' computed tokens summed (a shared block counted per sharer)."""
        allocated = self.num_allocated_slots()
        # A hybrid model's window blocks hold token states (of its sliding layers), in slots of the pool.
        window = self._window_total * self.block_size
        if not self.sharing:
            # Tokens whose blocks fell out of a sliding window are no longer stored.
            tokens = num_token_slots - self._dropped_total * self.block_size + window
            return KVUsage(self.capacity_slots, tokens, 0, allocated - tokens, 0)
        shared = self.pool.shared_slots
        tokens = num_token_slots - shared + window
        return KVUsage(self.capacity_slots, tokens, 0, allocated - tokens, 0,
                       len(self.evictable) * self.block_size, shared)

    # --- prefix caching -----------------------------------------------------------------------------
    def get_computed_blocks(self, request: Request) -> int:
        """Leading prompt tokens whose K/V is cached (a multiple of block_size), leaving at least one
        prompt token to compute. A pure lookup: nothing is claimed until `allocate_slots`."""
        return self.prefix_cache.num_cached_tokens(request) if self.prefix_cache else 0

    def prefix_cache_stats(self) -> PrefixCacheStats:
        if self.prefix_cache:
            return self.prefix_cache.stats()
        return PrefixCacheStats(0, 0, 0, 0, 0, 0, 0)

    def sharing_stats(self) -> SharingStats:
        pool = self.pool
        return SharingStats(pool.shared_blocks, pool.saved_blocks, pool.saved_blocks * self.block_size,
                            self.forks.num_copies)

    # --- sharing (the primitives `forks` builds on) -----------------------------------------------
    def start_sharing(self) -> None:
        """Switch to reference-counted blocks (every block held so far has one holder). Sliding-window
        freeing stops here (the dropped entries of running requests stay dropped, but none is added)."""
        if self._dropped_total:
            raise RuntimeError("cannot start sharing blocks after sliding-window blocks were dropped")
        self.sliding_window = None
        self.sharing = True
        self.pool.start_counting(block for table in self.block_tables.values() for block in table)

    def share_table(self, from_id: int, to_id: int) -> None:
        """`to_id` (no blocks) gets a table of the same blocks as `from_id`'s, one more reference each
        (after `start_sharing`); the prefix cache counts `from_id`'s registered blocks as registered for it too."""
        table = self.block_tables[from_id]
        for block in table:
            self.pool.incref(block)
        self.block_tables[to_id] = list(table)
        if self.prefix_cache:
            keyed = self.prefix_cache.num_keyed
            keyed[to_id] = keyed.get(from_id, 0)

    def replace_last_block(self, request_id: int) -> int:
        """A fresh block in place of the last one of the request's table (its copy, for copy-on-write),
        one reference fewer on the old one (caller checked room). Returns the fresh block."""
        table = self.block_tables[request_id]
        old = table[-1]
        (table[-1],) = self._take_blocks(1)
        self.pool.decref(old)
        return table[-1]

    # --- internals ----------------------------------------------------------------------------------
    def _allocate_shared(self, request: Request, num_new_tokens: int) -> list[int] | None:
        rid = request.request_id
        table = self.block_tables.get(rid)
        end = request.num_computed_tokens + num_new_tokens
        pool, cache = self.pool, self.prefix_cache
        ref = pool.ref_counts
        if not table:
            # Admission: claim the leading cached blocks of what is already computed (get_computed_blocks).
            claimed = cache.claimable(request) if request.num_computed_tokens and cache else []
            revived = sum(1 for block in claimed if not ref[block])
            need = self.blocks_for(end) - len(claimed)
            if need + self._window_need(request) > self.num_free_blocks - revived:
                return None
            if cache:  # before allocating, which may evict
                cache.count_query(request, len(claimed))
            for block in claimed:
                if ref[block] == 0:
                    cache.unpark(block)
                pool.incref(block)
            new_blocks = self._take_blocks(need)
            self._take_window(request)
            table = self.block_tables[rid] = claimed + new_blocks
            if cache:
                cache.num_keyed[rid] = len(claimed)
        else:
            if num_new_tokens > 0 and rid in self.forks.pending and table[-1] in pool.partial_fill:
                raise _write_into_shared_block(rid, table[-1])
            need = max(0, self.blocks_for(end) - len(table))
            if need + self._window_need(request) > self.num_free_blocks:
                return None
            new_blocks = self._take_blocks(need)
            self._take_window(request)
            table.extend(new_blocks)
        if cache:
            cache.register(request, table, end)
        return new_blocks

    def _take_blocks(self, n: int) -> list[int]:
        """`n` blocks for new content (caller checked room): never-cached free blocks first, then the
        least recently used cached ones."""
        pool = self.pool
        short = n - len(pool.free_block_ids)
        if short <= 0:
            return pool.pop_free(n)
        blocks = pool.pop_free(n - short) + [self.prefix_cache.evict() for _ in range(short)]
        for block in blocks[n - short:]:
            pool.ref_counts[block] = 1
        return blocks

    def _release(self, blocks: list[int]) -> None:
        """One reference fewer on each block; unreferenced ones become free (uncached) or evictable."""
        self._release_each((blocks,))

    def _release_each(self, groups: Sequence[list[int]]) -> None:
        """`_release` of each group in turn (the prefix cache parks each group's cached blocks on its own, in this
        order), their keys read in one lookup."""
        pool, cache = self.pool, self.prefix_cache
        free, ref = pool.free_block_ids.append, pool.ref_counts
        flat = groups[0] if len(groups) == 1 else [block for group in groups for block in group]
        keyed = iter(cache.holds_each(flat) if cache else [False] * len(flat))
        for blocks in groups:
            to_cache = []
            for block, cached in zip(blocks, keyed):
                if ref[block] != 1:  # shared: the pool's bookkeeping of what sharing saves
                    pool.decref(block)
                else:  # (pool.decref's own path to 0, inline: a request's whole table comes through here)
                    ref[block] = 0
                    if cached:
                        to_cache.append(block)
                    else:
                        free(block)
            if to_cache:
                cache.park(to_cache)

    def check_consistency(self) -> None:
        """Assert the invariants (for tests): every block is free, evictable or referenced, exactly once;
        reference counts match the block tables; the cache index matches the block keys."""
        free, evictable = list(self.pool.free_block_ids), list(self.evictable)
        held = [block for table in self.block_tables.values() for block in table if block != DROPPED]
        held += [block for window in self._window_held.values() for block in window]
        assert self._window_held.keys() <= self.block_tables.keys()
        assert self._window_total == sum(map(len, self._window_held.values()))
        assert self._dropped_total == sum(self._dropped.values())
        for rid, dropped in self._dropped.items():
            table = self.block_tables[rid]
            assert table[:dropped] == [DROPPED] * dropped and DROPPED not in table[dropped:]
        assert set(free) | set(evictable) | set(held) == set(range(self.num_blocks))
        assert self.sharing == self.pool.counting
        assert self.forks.pending <= self.block_tables.keys()
        self.pool.check(held)
        if self.prefix_cache:
            self.prefix_cache.check(free, held)
