"""Contiguous KV: one region per request in a linear address space (Orca-style reservations)."""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from sim.core.request import Request
from sim.kv.base import KVUsage, PrefixCacheStats, ReserveRule, SharingStats


class ContiguousKVManager:
    """One contiguous region per request in a linear KV address space, placed first-fit.

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
    cow_pending: frozenset[int] = frozenset()  # nothing is shared, so nothing is ever copied on write

    def __init__(self, capacity_slots: int, reserve: ReserveRule, max_len: int):
        if capacity_slots <= 0 or max_len <= 0:
            raise ValueError("capacity_slots and max_len must be positive")
        self.capacity_slots = capacity_slots
        self.reserve = reserve
        self.max_len = max_len
        self.hole_starts: list[int] = [0]  # sorted; holes never touch (freed neighbours coalesce)
        self.hole_sizes: list[int] = [capacity_slots]
        self.regions: dict[int, tuple[int, int]] = {}  # request id -> (start, size)
        self.reserved_total = 0  # sum of region sizes
        self.useful_total = 0  # sum over regions of min(size, final KV tokens): slots that will hold tokens
        self._useful: dict[int, int] = {}
        self._largest_hole: int | None = capacity_slots

    def __repr__(self) -> str:
        return (f"ContiguousKVManager(capacity_slots={self.capacity_slots}, reserve={self.reserve!r}, "
                f"max_len={self.max_len})")

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

    def admit(self, request: Request, max_new_tokens: int, *, chunked: bool) -> int | None:
        """Start a request: reserve its region and return the tokens it computes this step (at most
        `max_new_tokens`; unchunked, all of them or nothing), or None with nothing changed."""
        need = request.num_tokens - request.num_computed_tokens
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
        for i, hole_size in enumerate(self.hole_sizes):
            if hole_size >= size:
                start = self.hole_starts[i]
                if hole_size == size:
                    del self.hole_starts[i], self.hole_sizes[i]
                else:
                    self.hole_starts[i] = start + size
                    self.hole_sizes[i] = hole_size - size
                self.regions[request.request_id] = (start, size)
                useful = min(size, request.num_final_kv_tokens)
                self._useful[request.request_id] = useful
                self.reserved_total += size
                self.useful_total += useful
                self._largest_hole = None
                return [(start, size)]
        return None

    def free(self, request: Request) -> None:
        region = self.regions.pop(request.request_id, None)
        if region is None:
            return
        start, size = region
        self.reserved_total -= size
        self.useful_total -= self._useful.pop(request.request_id)
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

    def num_cow_blocks_needed(self, request_ids: Iterable[int]) -> int:
        return 0

    def copy_on_write(self, request_ids: Iterable[int]) -> list:
        return []

    def fork(self, parent: Request, child: Request) -> None:
        raise ValueError(f"fork: request {parent.request_id}: a contiguous KV cache cannot share a region "
                         "between sequences; use the paged layout")

    def append_one_block_each(self, request_ids: Iterable[int]) -> None:
        if request_ids:
            raise RuntimeError("a contiguous KV cache has no blocks to append")

    def append_blocks(self, request_id: int, num_blocks: int) -> None:
        if num_blocks:
            raise RuntimeError("a contiguous KV cache has no blocks to append")

    def release_tail_blocks(self, request_id: int, num_blocks: int) -> None:
        if num_blocks:
            raise RuntimeError("a contiguous KV cache has no blocks to release")

    def prefix_cache_stats(self) -> PrefixCacheStats:
        return PrefixCacheStats(0, 0, 0, 0, 0, 0, 0)

    def sharing_stats(self) -> SharingStats:
        return SharingStats(0, 0, 0, 0)

    def num_allocated_slots(self) -> int:
        return self.reserved_total

    def largest_hole(self) -> int:
        if self._largest_hole is None:
            self._largest_hole = max(self.hole_sizes, default=0)
        return self._largest_hole

    def usage(self, num_token_slots: int) -> KVUsage:
        free = self.capacity_slots - self.reserved_total
        return KVUsage(
            self.capacity_slots,
            num_token_slots,
            self.useful_total - num_token_slots,
            self.reserved_total - self.useful_total,
            free - self.largest_hole(),
        )
