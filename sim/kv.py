"""KV-cache managers: where each request's keys and values live.

Both managers answer the same three questions for the scheduler:
- `allocate_slots(request, num_new_tokens)`: make room for the request's computed tokens plus
  `num_new_tokens`; returns what was newly allocated, or None when there is no room (the scheduler
  then waits or preempts).
- `free(request)`: give everything back.
- `usage(num_token_slots)`: memory split into token states, reserved-not-yet-used, internal and
  external fragmentation (the categories of the vLLM paper, Kwon et al. SOSP 2023, Fig. 2).
Token states are counted by the scheduler (it advances decoding requests in bulk), so it passes
them in.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass
from typing import Literal, Protocol

from .request import Request

ReserveRule = Literal["max_len", "pow2", "oracle"]


@dataclass(frozen=True, slots=True)
class KVUsage:
    capacity_slots: int  # token slots the cache holds in all
    token_slots: int  # slots holding a computed token's K/V
    reserved_slots: int  # allocated, will be filled by this request's future tokens
    internal_slots: int  # allocated, will never be filled (over-reservation, partly filled last block)
    external_slots: int  # free, but in pieces too small to serve an allocation as large as the largest hole

    @property
    def allocated_slots(self) -> int:
        return self.token_slots + self.reserved_slots + self.internal_slots

    @property
    def free_slots(self) -> int:
        return self.capacity_slots - self.allocated_slots


class KVManager(Protocol):
    capacity_slots: int

    def allocate_slots(self, request: Request, num_new_tokens: int) -> list | None: ...
    def free(self, request: Request) -> None: ...
    def usage(self, num_token_slots: int) -> KVUsage: ...
    def can_ever_fit(self, num_tokens: int) -> bool: ...
    def num_allocated_slots(self) -> int: ...


class PagedKVManager:
    """Fixed-size blocks on demand through per-request block tables and a free list (vLLM's PagedAttention).

    Only a request's last block is partly filled, so internal fragmentation is under one block per
    request and there is no external fragmentation.
    """

    def __init__(self, num_blocks: int, block_size: int):
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError("num_blocks and block_size must be positive")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.capacity_slots = num_blocks * block_size
        self.free_block_ids: deque[int] = deque(range(num_blocks))
        self.block_tables: dict[int, list[int]] = {}

    def __repr__(self) -> str:
        return f"PagedKVManager(num_blocks={self.num_blocks}, block_size={self.block_size})"

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def num_new_blocks(self, request: Request, num_new_tokens: int) -> int:
        table = self.block_tables.get(request.request_id)
        have = len(table) if table else 0
        return max(0, self.blocks_for(request.num_computed_tokens + num_new_tokens) - have)

    def allocate_slots(self, request: Request, num_new_tokens: int) -> list[int] | None:
        need = self.num_new_blocks(request, num_new_tokens)
        if need > len(self.free_block_ids):
            return None
        popleft = self.free_block_ids.popleft
        new_blocks = [popleft() for _ in range(need)]
        self.block_tables.setdefault(request.request_id, []).extend(new_blocks)
        return new_blocks

    def append_one_block_each(self, request_ids) -> None:
        """Decode hot path: each of these requests starts a new block this step (caller checked room)."""
        popleft, tables = self.free_block_ids.popleft, self.block_tables
        for rid in request_ids:
            tables[rid].append(popleft())

    def free(self, request: Request) -> None:
        table = self.block_tables.pop(request.request_id, None)
        if table:
            self.free_block_ids.extend(table)

    def can_ever_fit(self, num_tokens: int) -> bool:
        return self.blocks_for(num_tokens) <= self.num_blocks

    def num_allocated_slots(self) -> int:
        return (self.num_blocks - len(self.free_block_ids)) * self.block_size

    def usage(self, num_token_slots: int) -> KVUsage:
        allocated = self.num_allocated_slots()
        return KVUsage(self.capacity_slots, num_token_slots, 0, allocated - num_token_slots, 0)


class ContiguousKVManager:
    """One contiguous region per request in a linear KV address space, placed first-fit.

    The region is sized at admission by the reservation rule of the vLLM paper's baselines:
    `max_len` (Orca Max: the model's maximum length), `pow2` (Orca Pow2: the next power of two, at
    most twice the real length) or `oracle` (exactly the real length). Freed regions become holes,
    so external fragmentation comes out of the allocation history rather than a formula.
    """

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
        need = request.num_final_kv_tokens
        if self.reserve == "max_len":
            return max(self.max_len, need)
        if self.reserve == "pow2":
            return max(need, min(1 << (need - 1).bit_length(), self.max_len))
        return need

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
        return max(self.max_len if self.reserve == "max_len" else 0, num_tokens) <= self.capacity_slots

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
