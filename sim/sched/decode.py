"""Bulk bookkeeping for requests that decode one token per step.

Every decoding request advances by exactly one token per step, so instead of touching each one we
keep a step clock and remember, per request, the clock at which its counters were exact. Finishes
come out of a heap keyed by the clock at which they happen, and with paged KV the requests whose
next token opens a new block are found by the residue of their token count modulo the block size.
Per-step work is O(1) plus O(requests that finish or need a block), not O(batch).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Protocol

import numpy as np

from sim.core.request import Request
from sim.kv.base import KVManager


class DecodeBatch(Protocol):
    """What a scheduler asks of its decoding requests, plain (`DecodeTracker`) or speculative
    (`SpeculativeDecodeBatch`). Members' counters may lag until `sync`; the batch takes the KV
    blocks its members' next tokens need from the manager it was given."""

    decode_query_tokens: int  # tokens each member computes in a step (1, or γ + 1 when verifying drafts)
    num_draft_tokens: int  # drafted tokens per member per step (0 without speculation)
    members: dict[int, Request]  # request id -> request, for every decoding request
    token_sum: int  # the members' computed tokens, summed, at the current step
    clock: int  # decode steps applied so far

    def live_output_tokens(self, request: Request) -> int: ...
    def remaining_outputs(self, running: dict[int, Request]) -> np.ndarray: ...

    def __len__(self) -> int: ...
    def add(self, request: Request) -> None: ...
    def sync(self, request: Request) -> None: ...
    def remove(self, request: Request) -> None: ...
    def num_new_blocks_needed(self) -> int: ...
    def allocate_new_blocks(self) -> None: ...
    def advance(self) -> tuple[list[Request], int]: ...


class DecodeTracker:
    decode_query_tokens = 1  # each member computes one token per step
    num_draft_tokens = 0

    def __init__(self, kv: KVManager):
        self.kv = kv  # new blocks come from here (none when its block_size is None)
        self.clock = 0  # decode steps applied so far
        self.members: dict[int, Request] = {}
        self.token_sum = 0  # sum of members' computed tokens at the current clock
        self._finish_heap: list[tuple[int, int]] = []  # (clock at which it samples its last token, id)
        self.block_size = block_size = kv.block_size
        self._buckets = [set() for _ in range(block_size)] if block_size else None

    def __len__(self) -> int:
        return len(self.members)

    def add(self, request: Request) -> None:
        """Start tracking a request whose counters are exact now and that decodes from the next step."""
        rid = request.request_id
        request.decode_anchor = self.clock
        self.members[rid] = request
        self.token_sum += request.num_computed_tokens
        finish_clock = self.clock + request.max_output_tokens - request.num_output_tokens
        heapq.heappush(self._finish_heap, (finish_clock, rid))
        if self._buckets is not None:
            self._buckets[(self.clock - request.num_computed_tokens) % self.block_size].add(rid)

    def sync(self, request: Request) -> None:
        """Bring a member's counters up to the current clock."""
        delta = self.clock - request.decode_anchor
        if delta:
            request.num_computed_tokens += delta
            request.num_output_tokens += delta
            request.decode_anchor = self.clock

    def live_output_tokens(self, request: Request) -> int:
        """A request's output tokens now, its counters left as they are (a member's lag behind the clock)."""
        if request.request_id in self.members:
            return request.num_output_tokens + self.clock - request.decode_anchor
        return request.num_output_tokens

    def remaining_outputs(self, running: dict[int, Request]) -> np.ndarray:
        """The output tokens each running request (members and the rest) has still to produce, as int64."""
        live = self.live_output_tokens
        return np.fromiter((request.max_output_tokens - live(request) for request in running.values()), np.int64,
                           len(running))

    def remove(self, request: Request) -> None:
        self.sync(request)
        del self.members[request.request_id]
        self.token_sum -= request.num_computed_tokens
        if self._buckets is not None:
            self._buckets[(self.clock - request.num_computed_tokens) % self.block_size].discard(request.request_id)
        request.decode_anchor = -1  # the heap entry goes stale and is skipped when popped

    def needing_new_block(self) -> set[int]:
        """Ids of members whose token computed in the coming step starts a new block."""
        return self._buckets[self.clock % self.block_size]

    def num_new_blocks_needed(self) -> int:
        return len(self._buckets[self.clock % self.block_size]) if self.block_size else 0

    def allocate_new_blocks(self) -> None:
        if self.block_size:
            needing = self._buckets[self.clock % self.block_size]
            if needing:
                self.kv.append_one_block_each(needing)

    def advance_without_finishes(self, num_steps: int, after_step: Callable[[], None] | None) -> list[int]:
        """Apply `num_steps` decode steps that no member finishes in (the caller knows, from
        `steps_to_first_finish`), each followed by the next step's new blocks (the caller checked room).
        Returns the new blocks taken after each step.

        `after_step`, if given, is called after each step is applied and before the next step's blocks are
        taken, with the counters exact: the state step-by-step simulation logs for that step."""
        n = len(self.members)
        buckets, bs, append = self._buckets, self.block_size, self.kv.append_one_block_each
        new_blocks = [0] * num_steps
        for k in range(num_steps):
            self.clock += 1
            self.token_sum += n
            if after_step is not None:
                after_step()
            if bs:
                needing = buckets[self.clock % bs]
                if needing:
                    append(needing)
                    new_blocks[k] = len(needing)
        return new_blocks

    def steps_to_first_finish(self) -> int | None:
        """Steps (counting the coming one) until the first member samples its last token; None: no member."""
        heap = self._finish_heap
        while heap:
            finish_clock, rid = heap[0]
            request = self.members.get(rid)
            if request is None or (request.decode_anchor + request.max_output_tokens
                                   - request.num_output_tokens) != finish_clock:
                heapq.heappop(heap)  # stale: `advance` would skip it too
                continue
            return finish_clock - self.clock
        return None

    def num_blocks_needed_after(self, num_steps: int) -> int:
        """New blocks the step `num_steps` steps after the coming one will need (0 without paged KV)."""
        return len(self._buckets[(self.clock + num_steps) % self.block_size]) if self.block_size else 0

    def advance(self) -> tuple[list[Request], int]:
        """Apply one decode step to every member; return those that sampled their last token (synced,
        removed) and the number of tokens generated."""
        num_tokens = len(self.members)
        self.clock += 1
        self.token_sum += len(self.members)
        finished = []
        heap = self._finish_heap
        while heap and heap[0][0] <= self.clock:
            finish_clock, rid = heapq.heappop(heap)
            request = self.members.get(rid)
            if request is None or (request.decode_anchor + request.max_output_tokens
                                   - request.num_output_tokens) != finish_clock:
                continue  # stale entry of a request that was removed (and maybe re-added)
            self.remove(request)
            finished.append(request)
        return finished, num_tokens
