"""What every KV-cache manager answers the scheduler, and the memory split it reports.

Both managers answer the same questions (`KVManager` lists them all):
- `admit(request, max_new_tokens, chunked=...)`: start a waiting request (prefix-cache lookup, claim,
  allocation, in that order); returns the tokens it computes this step, or None.
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

from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Literal, Protocol

from sim.core.request import Request

ReserveRule = Literal["max_len", "pow2", "oracle"]


@dataclass(frozen=True, slots=True)
class KVUsage:
    capacity_slots: int  # token slots the cache holds in all
    token_slots: int  # slots holding a computed token's K/V (a shared block's tokens counted once)
    reserved_slots: int  # allocated, will be filled by this request's future tokens
    internal_slots: int  # allocated, will never be filled (over-reservation, partly filled last block)
    external_slots: int  # free, but in pieces too small to serve an allocation as large as the largest hole
    cached_slots: int = 0  # free (counted in free_slots) but still holding a cached prefix, evicted on demand
    shared_slots: int = 0  # token states the requests hold beyond token_slots: stored once, used by several

    @property
    def allocated_slots(self) -> int:
        return self.token_slots + self.reserved_slots + self.internal_slots

    @property
    def free_slots(self) -> int:
        """Not allocated to any request (external fragmentation included)."""
        return self.capacity_slots - self.allocated_slots

    @property
    def usable_free_slots(self) -> int:
        """Free and usable: token + reserved + internal + external + usable_free = capacity."""
        return self.free_slots - self.external_slots

    def shares(self, *, holes_are_fragments: bool = False) -> dict[str, float]:
        """The split as shares of the whole capacity, free memory included; they sum to 1.

        `holes_are_fragments` (contiguous allocation, as the vLLM paper's Fig. 2 counts it): every free
        slot, the largest hole included, counts as external fragmentation ("external frag. & others"),
        so nothing is left as free. See `sim.results.utilization` for the reading of the paper."""
        cap = self.capacity_slots
        external = self.free_slots if holes_are_fragments else self.external_slots
        return {"token": self.token_slots / cap, "reserved": self.reserved_slots / cap,
                "internal": self.internal_slots / cap, "external": external / cap,
                "free": (self.free_slots - external) / cap}


@dataclass(frozen=True, slots=True)
class PrefixCacheStats:
    """Prefix-cache lookups, counted when a request's first blocks are allocated (its admission)."""

    num_queries: int  # admissions (a request preempted and admitted again counts again)
    queried_tokens: int  # their prompt tokens
    hit_tokens: int  # prompt tokens whose K/V came from the cache instead of being computed
    queried_blocks: int  # their prompt blocks, ceil(prompt / block_size) each
    hit_blocks: int  # blocks claimed from the cache (hit_tokens / block_size)
    reused_blocks: int  # prompt blocks whose content was cached at admission, claimable or not (see below)
    num_evictions: int  # cached blocks dropped to make room

    @property
    def hit_rate(self) -> float:
        """Fraction of prompt tokens served from the cache."""
        return self.hit_tokens / self.queried_tokens if self.queried_tokens else 0.0

    @property
    def reuse_rate(self) -> float:
        """Fraction of prompt blocks already cached at admission (no "compute at least one token" cap)."""
        return self.reused_blocks / self.queried_blocks if self.queried_blocks else 0.0


@dataclass(frozen=True, slots=True)
class SharingStats:
    """Blocks used by several requests at once (prefix hits while the owner runs, forks)."""

    shared_blocks: int  # blocks referenced by more than one request now
    saved_blocks: int  # sum over blocks of (references - 1): blocks that sharing saves now
    saved_slots: int  # saved_blocks * block_size
    num_cow_copies: int  # copy-on-write copies made so far

    def saved_bytes(self, kv_bytes_per_token: float) -> float:
        return self.saved_slots * kv_bytes_per_token


class Forks(Protocol):
    """Sequences forked from a request sharing its blocks, copied on write (sim/kv/forking.py); a layout
    that cannot share (`NoForks`) forks nothing and refuses to."""

    pending: AbstractSet[int]  # ids of forked requests whose next write may need a copy of a shared block
    num_copies: int  # copy-on-write copies made so far

    def fork(self, parent: Request, child: Request) -> None: ...
    def forget(self, request_id: int) -> None: ...
    def copy_before_write(self, writing: AbstractSet[int], make_room: Callable[[], object]) -> list: ...
    def num_copies_needed(self, request_ids: Iterable[int]) -> int: ...
    def copy_on_write(self, request_ids: Iterable[int]) -> list | None: ...


class KVManager(Protocol):
    """What the schedulers and decode batches ask of a KV cache, whatever its layout.

    A layout without a feature answers trivially rather than being told apart by type: the contiguous
    layout has `block_size` None (its regions are reserved whole at admission, so decodes never
    allocate and no block is ever free or needed), caches nothing and shares nothing, and its
    `forks.fork` raises.
    """

    capacity_slots: int  # token slots in all
    block_size: int | None  # tokens per block; None: no blocks (each request's region reserved whole)
    forks: Forks  # sequences sharing a request's blocks (parallel sampling, beam search) and their copies

    # Every step.
    def admit(self, request: Request, max_new_tokens: int, *, chunked: bool,
              step_need: Callable[[int], int] | None = None, whole_prompt: bool = True) -> int | None: ...
    def allocate_slots(self, request: Request, num_new_tokens: int) -> list | None: ...
    def free(self, request: Request) -> None: ...
    def usage(self, num_token_slots: int) -> KVUsage: ...
    # Decode runs: True where `run_usage(first_token_slots, tokens_per_step, allocated_slots, new_blocks)`
    # gives `usage` after each step of a run in bulk (columns token, reserved, internal, external, shared).
    usage_in_bulk: bool
    def can_ever_fit(self, num_tokens: int) -> bool: ...
    def num_allocated_slots(self) -> int: ...
    def held_slots(self, request_id: int) -> int: ...
    # Blocks (trivial without them).
    @property
    def num_free_blocks(self) -> int: ...
    def blocks_for(self, num_tokens: int) -> int: ...
    def blocks_for_sequence(self, num_tokens: int) -> int: ...  # at its longest, a hybrid model's window included
    def append_one_block_each(self, request_ids: Iterable[int]) -> None: ...
    def append_blocks(self, request_id: int, num_blocks: int) -> None: ...
    def append_blocks_each(self, request_ids: list[int], counts: list[int]) -> None: ...  # append_blocks, in turn
    def release_tail_blocks(self, request_id: int, num_blocks: int) -> None: ...
    def release_tail_blocks_each(self, request_ids: list[int], counts: list[int]) -> None: ...  # in turn
    # Prefix caching and sharing (trivial without them).
    def get_computed_blocks(self, request: Request) -> int: ...
    def prefix_cache_stats(self) -> PrefixCacheStats: ...
    def sharing_stats(self) -> SharingStats: ...
