"""Parallel sampling (n outputs) and beam search (width w): one request, several sequences.

A request is prefilled as one sequence. At the end of the step that computes its prompt (and samples its first
token) its other sequences fork onto its blocks (shared, copied on write: sim/kv/forking.py), each with a first
token of its own, and all of them decode. The request returns when its last sequence is done. A sequence
preempted later is recomputed or swapped on its own, like any request; a forked request never forks again.

The continuous scheduler asks its group bookkeeping three things: whether a waiting request will fork (it then
needs a sequence slot for each of its sequences: `will_fork`), the sequences to start once a prompt is computed
(`fork`), and what a finished sequence returns (`finish`). `SingleSequence` (n = 1) answers them without
bookkeeping.
"""

from __future__ import annotations

from collections.abc import Iterable

from sim.core.request import Request, RequestStatus
from sim.kv.base import Forks


class SamplingGroups:
    """The sequence groups of a scheduler whose requests each run `sequences_per_request` sequences."""

    def __init__(self, sequences_per_request: int, forks: Forks):
        self.sequences_per_request = sequences_per_request
        self.forks = forks  # the KV manager's: a forked sequence shares its parent's blocks
        self.remaining: dict[int, int] = {}  # request id -> its sequences still running (from its fork on)
        self.held: dict[int, Request] = {}  # requests done whose other sequences are not
        self._next_child_id = -1  # forked sequences get negative ids, never a request's

    def will_fork(self, request: Request) -> bool:
        """Whether a waiting request's sequences fork once its prompt is computed (it then takes
        `sequences_per_request` slots): a request not forked yet, not a sequence forked from one."""
        return request.parent_id < 0 and request.request_id not in self.remaining

    def fork(self, parent: Request) -> list[Request]:
        """The request's other sequences, forked onto its blocks once the step computing its prompt is
        over (its counters exact), each running with the parent's counters (its first token sampled).
        Nothing for a forked sequence, or for a request forked before (preempted since, and prefilled again)."""
        if parent.parent_id >= 0 or parent.request_id in self.remaining:
            return []
        self.remaining[parent.request_id] = self.sequences_per_request
        children = []
        for _ in range(self.sequences_per_request - 1):
            child = Request(self._next_child_id, parent.arrival_s, parent.num_prompt_tokens,
                            parent.max_output_tokens, prefix_ids=parent.prefix_ids,
                            prefix_unit_tokens=parent.prefix_unit_tokens, parent_id=parent.request_id)
            self._next_child_id -= 1
            child.num_computed_tokens = parent.num_computed_tokens
            child.num_output_tokens = parent.num_output_tokens
            child.first_scheduled_s, child.first_token_s = parent.first_scheduled_s, parent.first_token_s
            child.status = RequestStatus.RUNNING
            self.forks.fork(parent, child)
            children.append(child)
        return children

    def finish(self, sequence: Request, now: float) -> Request | None:
        """A sequence is done: the request that returns now (its own, at its last sequence, with
        `finish_s` now), or None while others still run."""
        root = sequence.parent_id if sequence.parent_id >= 0 else sequence.request_id
        remaining = self.remaining.get(root)
        if remaining is None:
            return sequence  # finished before it forked (its first token was its last)
        if remaining > 1:
            self.remaining[root] = remaining - 1
            if sequence.parent_id < 0:
                self.held[root] = sequence
            return None
        del self.remaining[root]
        request = sequence if sequence.parent_id < 0 else self.held.pop(root)
        request.finish_s = now  # the response returns with its last sequence
        return request

    def requests_of(self, running: Iterable[Request]) -> list[Request]:
        """The requests in flight, each once, given the running sequences: forked sequences stand for
        their request, which is listed even when its own sequence is done."""
        parents = [r for r in running if r.parent_id < 0]
        listed = {r.request_id for r in parents}
        return parents + [r for rid, r in self.held.items() if rid not in listed]


class SingleSequence:
    """One sequence per request: nothing forks, a finished sequence is its request."""

    def __init__(self):
        self.sequences_per_request = 1  # on the instance: the scheduler reads it at every admission

    def will_fork(self, request: Request) -> bool:
        return False

    def fork(self, parent: Request) -> tuple[()]:
        return ()

    def finish(self, sequence: Request, now: float) -> Request:
        return sequence

    def requests_of(self, running: Iterable[Request]) -> list[Request]:
        return list(running)


def sampling_groups(sequences_per_request: int, forks: Forks) -> SamplingGroups | SingleSequence:
    """The group bookkeeping for `sequences_per_request` sequences per request (1: none)."""
    return SamplingGroups(sequences_per_request, forks) if sequences_per_request > 1 else SingleSequence()
