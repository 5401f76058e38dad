"""The paged KV cache's block ids: the free list, reference counts and what sharing saves.

Kept apart from the manager so that the one piece of state every block operation touches — which
blocks are free and how many block tables hold each — has one owner with one invariant: a block is
either on the free list, held (reference count > 0), or parked in the prefix cache, never two.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from functools import cached_property


class BlockPool:
    """Block ids `0..num_blocks-1`, handed out in free-list order (first freed, first reused).

    Reference counts are kept only once sharing starts (`start_counting`): without prefix caching or
    forks every held block has exactly one holder, and the plain path skips the bookkeeping.
    """

    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.counting = False  # reference counts are kept
        self.ref_counts: list[int] = []  # per block: block tables that hold it
        self.partial_fill: dict[int, int] = {}  # shared, partly filled block -> tokens in it
        self.shared_blocks = 0  # blocks with more than one reference
        self.saved_blocks = 0  # sum of (references - 1)
        self.shared_slots = 0  # sum of (references - 1) * tokens in the block

    @cached_property
    def free_block_ids(self) -> deque[int]:
        """Blocks holding nothing, first freed first reused; built when first used (a run of the compiled engine
        core never uses it, and building it for a large KV cache costs more than a planner's probe)."""
        return deque(range(self.num_blocks))

    def start_counting(self, held: Iterable[int]) -> None:
        """Switch to reference counts; `held` lists every block held so far, once per holder."""
        self.counting = True
        self.ref_counts = [0] * self.num_blocks
        for block in held:
            self.ref_counts[block] += 1

    def pop_free(self, n: int) -> list[int]:
        """`n` blocks off the free list (caller checked there are enough), reference count 1 if counting."""
        popleft = self.free_block_ids.popleft
        blocks = [popleft() for _ in range(n)]
        if self.counting:
            ref = self.ref_counts
            for block in blocks:
                ref[block] = 1
        return blocks

    def push_free(self, blocks: Iterable[int]) -> None:
        self.free_block_ids.extend(blocks)

    def incref(self, block: int) -> None:
        """One more holder; a block gaining its second or later holder is counted as shared."""
        refs = self.ref_counts[block] = self.ref_counts[block] + 1
        if refs > 1:
            self.saved_blocks += 1
            self.shared_slots += self.partial_fill.get(block, self.block_size)
            if refs == 2:
                self.shared_blocks += 1

    def decref(self, block: int) -> int:
        """One holder fewer; returns the holders left (0: the caller frees or caches the block)."""
        left = self.ref_counts[block] = self.ref_counts[block] - 1
        if left:
            self.saved_blocks -= 1
            self.shared_slots -= self.partial_fill.get(block, self.block_size)
            if left == 1:
                self.shared_blocks -= 1
                self.partial_fill.pop(block, None)
        return left

    def check(self, held: list[int]) -> None:
        """Assert the pool's invariants against the blocks the tables hold (for tests)."""
        free = list(self.free_block_ids)
        assert len(set(free)) == len(free) and not set(free) & set(held)
        if not self.counting:
            assert len(held) == len(set(held))
            return
        counts = [0] * self.num_blocks
        for block in held:
            counts[block] += 1
        assert counts == self.ref_counts
        assert self.saved_blocks == sum(max(0, c - 1) for c in counts)
        assert self.shared_blocks == sum(1 for c in counts if c > 1)
        fill = self.partial_fill
        assert all(counts[block] > 1 for block in fill)
        assert self.shared_slots == sum((c - 1) * fill.get(b, self.block_size) for b, c in enumerate(counts) if c > 1)
