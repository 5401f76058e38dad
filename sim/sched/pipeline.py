"""The scheduler side of pipeline parallelism: one continuous scheduler per micro-batch slot, sharing the
replica's KV pool, waiting queue and swap space.

vLLM V1 keeps up to `pipeline_parallel` batches in flight (`max_concurrent_batches`) and, while a batch is in
flight, does not schedule its requests again: their next token is not known yet. Here each of the
`pipeline_parallel` slots owns the requests it admitted and schedules them only when its previous batch has
left the last stage, so a request is never in two batches at once. What the slots share is what vLLM's one
scheduler shares: the KV block pool (and prefix cache), the queue (any free slot admits its head) and host
swap space. What differs from V1: a running request stays with the slot that admitted it (V1 may put it in
any later batch), and each slot runs at most max_num_seqs / pipeline_parallel sequences (V1 caps the running
requests of all batches together at max_num_seqs); vLLM V0's virtual engines also bound requests to one of
`pipeline_parallel` schedulers, but gave each its own share of the KV blocks.
"""

from __future__ import annotations

from sim.core.request import Request
from sim.kv.base import KVUsage
from sim.sched.continuous import ContinuousScheduler


class MicroBatchSlots:
    """The slots' schedulers, seen from outside as one replica scheduler (requests in, usage out)."""

    def __init__(self, slots: list[ContinuousScheduler]):
        if not slots:
            raise ValueError("at least one micro-batch slot")
        first = slots[0]
        for slot in slots[1:]:
            if slot.kv is not first.kv:
                raise ValueError("micro-batch slots must share one KV manager")
            # One queue and one swap space: a request preempted by one slot may be re-admitted by another.
            slot.waiting = first.waiting
            slot.swap = first.swap
        self.slots = slots
        self.kv = first.kv
        self.next_wake_s = None  # continuous batching never asks for a timed retry

    def __repr__(self) -> str:
        return f"MicroBatchSlots({len(self.slots)} x {self.slots[0]!r})"

    def add_request(self, request: Request) -> bool:
        return self.slots[0].add_request(request)  # the queue is shared: any slot may admit it

    @property
    def waiting(self):
        return self.slots[0].waiting

    @property
    def num_waiting(self) -> int:
        return len(self.slots[0].waiting)

    @property
    def num_running(self) -> int:
        return sum(slot.num_running for slot in self.slots)

    def kv_usage(self) -> KVUsage:
        tokens = sum(slot.tracker.token_sum + sum(r.num_computed_tokens for r in slot.prefilling.values())
                     for slot in self.slots)
        return self.kv.usage(tokens)

    def in_flight(self) -> list[Request]:
        """Requests still here (every slot's running, then the shared queue), counters brought up to date."""
        out: list[Request] = []
        for slot in self.slots:
            for request in slot.tracker.members.values():
                slot.tracker.sync(request)
            out += slot.running_requests()
        return out + list(self.waiting)
