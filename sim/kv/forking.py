"""Sequences forked from one request (parallel sampling, beam search) sharing its blocks, and copy-on-write.

A fork gives the new sequence the blocks of the one it forks from, shared (one more reference each). Full
blocks stay shared for good: nobody writes into them again. A partly filled last block would be written by
every sharer, so before a step in which sharers write, each but the last gets a private copy of it; the last
keeps the original. `copy_before_write` is the one place that orders those calls; the block manager refuses
to grow a table whose last block is still shared and partly filled (`append_blocks`, `allocate_slots`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet

from sim.core.request import Request


class ForkedBlocks:
    """The forks of one paged KV manager (`kv`, a `PagedKVManager`, which creates them; not imported here, as
    it imports this module): which tables end in a shared, partly filled block, and the copies."""

    def __init__(self, kv):
        self.kv = kv
        # Request ids whose last block may be shared and partly filled; every table whose last block is
        # shared and partly filled is among them (the manager's check of a write looks here first).
        self.pending: set[int] = set()
        self.num_copies = 0  # copy-on-write copies made so far

    def fork(self, parent: Request, child: Request) -> None:
        """Give `child` (no blocks yet) the parent's blocks, shared. Call it when the parent's counters
        are exact (decode tracker synced) and its table holds exactly its computed tokens, i.e. after
        the step that computed them; set the child's counters to the parent's yourself."""
        kv = self.kv
        table = kv.block_tables.get(parent.request_id)
        if not table:
            raise ValueError(f"fork: parent request {parent.request_id} holds no blocks")
        if kv.block_tables.get(child.request_id):
            raise ValueError(f"fork: child request {child.request_id} already holds blocks")
        filled = parent.num_computed_tokens
        if kv.blocks_for(filled) != len(table):
            raise ValueError(f"fork: parent request {parent.request_id} holds {len(table)} blocks for "
                             f"{filled} computed tokens; fork after its step, with its counters synced")
        if not kv.sharing:
            kv.start_sharing()
        partial = filled % kv.block_size
        pool = kv.pool
        if partial and pool.ref_counts[table[-1]] == 1:  # (if already shared, it was forked at this same point)
            pool.partial_fill[table[-1]] = partial  # before sharing it: the pool counts its shared tokens by it
        kv.share_table(parent.request_id, child.request_id)
        if partial:
            self.pending.update((parent.request_id, child.request_id))

    def forget(self, request_id: int) -> None:
        """The request's blocks were freed: it writes nothing more into them."""
        self.pending.discard(request_id)

    def copy_before_write(self, writing: AbstractSet[int], make_room: Callable[[], object]) -> list[int]:
        """Before the sequences in `writing` write their next token, and before any block is appended for
        them: count the copies they need; while the free blocks do not cover them, `make_room()` (the
        scheduler preempts a request, freeing its blocks); then copy. `writing` is live (a dict's keys, say):
        a request preempted to make room leaves it. Returns the new blocks."""
        writers = self.pending & writing
        while self.num_copies_needed(writers) > self.kv.num_free_blocks:
            make_room()
            writers &= writing
        return self.copy_on_write(writers)

    def num_copies_needed(self, request_ids: Iterable[int]) -> int:
        """Blocks `copy_on_write(request_ids)` would take."""
        return len(self._plan(request_ids)[1])

    def copy_on_write(self, request_ids: Iterable[int]) -> list[int] | None:
        """Each of these requests whose last block is still shared and partly filled gets a private copy.
        Returns the new blocks, or None (nothing changed) if the free blocks do not suffice. Ids not
        pending are ignored; the ones given are pending no more."""
        done, copiers = self._plan(request_ids)
        if len(copiers) > self.kv.num_free_blocks:
            return None
        new_blocks = [self.kv.replace_last_block(rid) for rid in copiers]
        self.num_copies += len(copiers)
        self.pending.difference_update(done)
        return new_blocks

    def _plan(self, request_ids: Iterable[int]) -> tuple[list[int], list[int]]:
        """(pending ids among request_ids, those that must copy): of k sharers writing, k - 1 copy."""
        pending = self.pending
        if not pending:
            return [], []
        done, copiers, refs = [], [], {}
        tables, ref_counts = self.kv.block_tables, self.kv.pool.ref_counts
        for rid in request_ids:
            if rid not in pending:
                continue
            done.append(rid)
            block = tables[rid][-1]
            left = refs.get(block, ref_counts[block])
            if left > 1:
                copiers.append(rid)
                refs[block] = left - 1
        return done, copiers


class NoForks:
    """A layout that cannot share blocks (contiguous regions): nothing is forked, so nothing is copied."""

    def __init__(self):
        self.pending: frozenset[int] = frozenset()  # on the instance: the scheduler reads it every step
        self.num_copies = 0

    def fork(self, parent: Request, child: Request) -> None:
        raise ValueError(f"fork: request {parent.request_id}: this KV layout cannot share memory between "
                         "sequences; use the paged layout")

    def forget(self, request_id: int) -> None:
        pass

    def copy_before_write(self, writing: AbstractSet[int], make_room: Callable[[], object]) -> list[int]:
        return []

    def num_copies_needed(self, request_ids: Iterable[int]) -> int:
        return 0

    def copy_on_write(self, request_ids: Iterable[int]) -> list[int]:
        return []
