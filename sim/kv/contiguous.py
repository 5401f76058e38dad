"""Contiguous KV: one region per request in a linear address space (Orca-style reservations)."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from typing import Literal

from sim.core.request import Request
from sim.kv.base import KVUsage, PrefixCacheStats, ReserveRule, SharingStats
from sim.kv.forking import NoForks


Placement = Literal["first_fit", "best_fit", "buddy"]


def _pow2_at_least(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 1 else 1


class ContiguousKVManager:
    """One contiguous region per request in a linear KV address space.

    Placement (`placement`): `first_fit` (the lowest-addressed hole that fits; the default), `best_fit`
    (the smallest hole that fits, lowest address on ties) or `buddy` (a binary buddy allocator: a region
    is a power-of-two block, split from the smallest free block that holds it, and a freed block merges
    with its buddy whenever that is free too). A capacity that is not a power of two is cut into its
    binary digits, largest first (12 = 8 at 0 + 4 at 8), each a top block that never merges further.
    Under buddy the rounding up to a power of two is internal fragmentation (allocated, never filled),
    and the largest free block, not the largest run of free addresses, is what an allocation can use.

    The region is sized at admission by the reservation rule of the vLLM paper's baselines:
    `max_len` (Orca Max: the model's maximum length), `pow2` (Orca Pow2: the next power of two, at
    most twice the real length) or `oracle` (exactly the real length). Freed regions become holes,
    so external fragmentation comes out of the allocation history rather than a formula.

    The block-level parts of the KV interface have trivial answers here: a region is reserved whole
    at admission, so decodes never allocate (`block_size` is None, no block is ever free or needed),
    nothing is cached and nothing is shared.
    """

    block_size = None  # no blocks: decodes grow inside the region reserved at admission
    num_free_blocks = 0

    def __init__(self, capacity_slots: int, reserve: ReserveRule, max_len: int, placement: Placement = "first_fit"):
        if capacity_slots <= 0 or max_len <= 0:
            raise ValueError("capacity_slots and max_len must be positive")
        if placement not in ("first_fit", "best_fit", "buddy"):
            raise ValueError(f"placement: {placement!r} is not first_fit, best_fit or buddy")
        self.capacity_slots = capacity_slots
        self.reserve = reserve
        self.max_len = max_len
        self.placement = placement
        self.forks = NoForks()  # a region is never shared, so nothing is forked or copied on write
        self.hole_starts: list[int] = [0]  # sorted; holes never touch (freed neighbours coalesce); not under buddy
        self.hole_sizes: list[int] = [capacity_slots]
        # Buddy: free block starts per block size (sorted), and the top blocks (capacity's binary digits).
        self.buddy_free: dict[int, list[int]] = {}
        self.top_blocks: list[tuple[int, int]] = []  # (start, size), largest first
        if placement == "buddy":
            self.hole_starts, self.hole_sizes = [], []
            start = 0
            for bit in reversed(range(capacity_slots.bit_length())):
                if capacity_slots >> bit & 1:
                    self.top_blocks.append((start, 1 << bit))
                    self.buddy_free[1 << bit] = [start]
                    start += 1 << bit
        self.regions: dict[int, tuple[int, int]] = {}  # request id -> (start, size)
        self.reserved_total = 0  # sum of region sizes
        self.useful_total = 0  # sum over regions of min(size, final KV tokens): slots that will hold tokens
        self._useful: dict[int, int] = {}
        self._largest_hole: int | None = capacity_slots

    def __repr__(self) -> str:
        extra = "" if self.placement == "first_fit" else f", placement={self.placement!r}"
        return (f"ContiguousKVManager(capacity_slots={self.capacity_slots}, reserve={self.reserve!r}, "
                f"max_len={self.max_len}{extra})")

    def region_size(self, request: Request) -> int:
        """The rule's reservation, never below the real need and never above the whole cache
        (a reservation larger than the cache could never be placed, and the request would wait forever)."""
        need = request.num_final_kv_tokens
        if self.reserve == "max_len":
            rule = self.max_len
        elif self.reserve == "pow2":
            rule = min(1 << (need - 1).bit_length(), self.max_len)
        else:
            rule = need
        return max(need, min(rule, self.capacity_slots))

    def admit(self, request: Request, max_new_tokens: int, *, chunked: bool,
              step_need: Callable[[int], int] | None = None, whole_prompt: bool = True) -> int | None:
        """Start a request: reserve its region and return the tokens it computes this step (at most
        `max_new_tokens`; unchunked, all of them or nothing; `step_need`: as the paged manager's), or None with
        nothing changed. `whole_prompt` changes nothing here: the region reserved is already the whole one."""
        need = request.num_tokens - request.num_computed_tokens
        if step_need is not None:
            need = step_need(need)
        chunk = min(need, max_new_tokens)
        if (chunk < need and not chunked) or self.allocate_slots(request, chunk) is None:
            return None
        return chunk

    def allocate_slots(self, request: Request, num_new_tokens: int) -> list[tuple[int, int]] | None:
        region = self.regions.get(request.request_id)
        target = request.num_computed_tokens + num_new_tokens
        if region is not None:
            return [] if target <= region[1] else None
        size = max(self.region_size(request), target)
        if self.placement == "buddy":
            placed = self._buddy_take(size, max(target, request.num_final_kv_tokens))
        else:
            placed = self._hole_take(size)
        if placed is None:
            return None
        start, size = placed
        self.regions[request.request_id] = (start, size)
        useful = min(size, request.num_final_kv_tokens)
        self._useful[request.request_id] = useful
        self.reserved_total += size
        self.useful_total += useful
        self._largest_hole = None
        return [(start, size)]

    def _hole_take(self, size: int) -> tuple[int, int] | None:
        """First fit (lowest address) or best fit (smallest hole, lowest address on ties)."""
        sizes, i = self.hole_sizes, None
        if self.placement == "first_fit":
            i = next((j for j, hole_size in enumerate(sizes) if hole_size >= size), None)
        else:
            fits = [(hole_size, j) for j, hole_size in enumerate(sizes) if hole_size >= size]
            i = min(fits)[1] if fits else None
        if i is None:
            return None
        start, hole_size = self.hole_starts[i], self.hole_sizes[i]
        if hole_size == size:
            del self.hole_starts[i], self.hole_sizes[i]
        else:
            self.hole_starts[i] = start + size
            self.hole_sizes[i] = hole_size - size
        return start, size

    def _buddy_take(self, size: int, need: int) -> tuple[int, int] | None:
        """The power-of-two block for `size` (for `need` when that block is larger than any top block),
        split off the smallest free block that holds it (lowest address among equals)."""
        block = _pow2_at_least(size)
        if block > self.top_blocks[0][1]:
            block = _pow2_at_least(need)
        free = self.buddy_free
        have = min((b for b, starts in free.items() if b >= block and starts), default=None)
        if have is None:
            return None
        start = free[have].pop(0)
        while have > block:  # split: keep the lower half, free the upper one
            have //= 2
            bisect.insort(free.setdefault(have, []), start + have)
        return start, block

    def _buddy_give(self, start: int, size: int) -> None:
        free, top = self.buddy_free, self.top_blocks[0][1]
        while size < top:
            buddy = start ^ size
            starts = free.get(size)
            i = bisect.bisect_left(starts, buddy) if starts else 0
            if not starts or i == len(starts) or starts[i] != buddy:
                break
            del starts[i]
            start, size = min(start, buddy), size * 2
        bisect.insort(free.setdefault(size, []), start)

    def free(self, request: Request) -> None:
        region = self.regions.pop(request.request_id, None)
        if region is None:
            return
        start, size = region
        self.reserved_total -= size
        self.useful_total -= self._useful.pop(request.request_id)
        self._largest_hole = None
        if self.placement == "buddy":
            self._buddy_give(start, size)
            return
        i = bisect.bisect_left(self.hole_starts, start)
        merge_prev = i > 0 and self.hole_starts[i - 1] + self.hole_sizes[i - 1] == start
        merge_next = i < len(self.hole_starts) and start + size == self.hole_starts[i]
        if merge_prev and merge_next:
            self.hole_sizes[i - 1] += size + self.hole_sizes[i]
            del self.hole_starts[i], self.hole_sizes[i]
        elif merge_prev:
            self.hole_sizes[i - 1] += size
        elif merge_next:
            self.hole_starts[i] = start
            self.hole_sizes[i] += size
        else:
            self.hole_starts.insert(i, start)
            self.hole_sizes.insert(i, size)
        self._largest_hole = None

    def can_ever_fit(self, num_tokens: int) -> bool:
        if self.placement == "buddy":
            return _pow2_at_least(num_tokens) <= self.top_blocks[0][1]
        return num_tokens <= self.capacity_slots

    def get_computed_blocks(self, request: Request) -> int:
        """No prefix caching in a contiguous layout: nothing is ever cached."""
        return 0

    def held_slots(self, request_id: int) -> int:
        """The size of the request's region (0 if it holds none)."""
        region = self.regions.get(request_id)
        return region[1] if region else 0

    def blocks_for(self, num_tokens: int) -> int:
        """No blocks: a region is reserved whole at admission, so nothing is allocated per block later."""
        return 0

    def blocks_for_sequence(self, num_tokens: int) -> int:
        return 0

    def append_one_block_each(self, request_ids: Iterable[int]) -> None:
        if request_ids:
            raise RuntimeError("a contiguous KV cache has no blocks to append")

    def append_blocks(self, request_id: int, num_blocks: int) -> None:
        if num_blocks:
            raise RuntimeError("a contiguous KV cache has no blocks to append")

    def release_tail_blocks(self, request_id: int, num_blocks: int) -> None:
        if num_blocks:
            raise RuntimeError("a contiguous KV cache has no blocks to release")

    def append_blocks_each(self, request_ids: list[int], counts: list[int]) -> None:
        for request_id, num_blocks in zip(request_ids, counts):
            self.append_blocks(request_id, num_blocks)

    def release_tail_blocks_each(self, request_ids: list[int], counts: list[int]) -> None:
        for request_id, num_blocks in zip(request_ids, counts):
            self.release_tail_blocks(request_id, num_blocks)

    def prefix_cache_stats(self) -> PrefixCacheStats:
        return PrefixCacheStats(0, 0, 0, 0, 0, 0, 0)

    def sharing_stats(self) -> SharingStats:
        return SharingStats(0, 0, 0, 0)

    def num_allocated_slots(self) -> int:
        return self.reserved_total

    def largest_hole(self) -> int:
        """The largest region an allocation could take now (under buddy: the largest free block)."""
        if self._largest_hole is None:
            if self.placement == "buddy":
                self._largest_hole = max((b for b, starts in self.buddy_free.items() if starts), default=0)
            else:
                self._largest_hole = max(self.hole_sizes, default=0)
        return self._largest_hole

    usage_in_bulk = False  # its usage counts holes: asked step by step in decode runs

    def usage(self, num_token_slots: int) -> KVUsage:
        free = self.capacity_slots - self.reserved_total
        return KVUsage(
            self.capacity_slots,
            num_token_slots,
            self.useful_total - num_token_slots,
            self.reserved_total - self.useful_total,
            free - self.largest_hole(),
        )
