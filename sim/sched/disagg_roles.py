"""The part a replica's scheduler plays in disaggregated serving (sim/core/disaggregated.py).

- `PrefillRole`: a request ends at its first token, and its KV stays in the cache until it has been sent to a
  decode replica (`release`).
- `DecodeRole`: takes requests whose prompt KV was computed elsewhere. `reserve` claims a sequence slot and the
  blocks before the KV is sent, `receive` queues the request once it has arrived, and the scheduler's next step
  puts it into the decode batch (`take_received`).
- `Colocated` (every other replica): neither.

Both roles keep token states in the KV cache for requests outside the batch (`outside_batch_tokens`): the
scheduler reports them as token slots, not as fragmentation. The scheduler reads a role's attributes every
step, so every role sets them on the instance (a class attribute read through an instance is a slower lookup).
"""

from __future__ import annotations

from collections.abc import Callable

from sim.core.request import Request
from sim.kv.base import KVManager


class Colocated:
    """Neither role: a finished request's KV is freed at once, and nothing arrives prefilled."""

    def __init__(self):
        self.holds_kv_on_finish = False
        self.received: tuple[()] = ()  # requests whose KV has arrived, to join the decode batch (none)
        self.outside_batch_tokens = 0  # token states kept for requests outside the batch


class PrefillRole:
    """A prefill replica's: finished requests keep their KV until it has been sent."""

    def __init__(self, kv: KVManager):
        self.kv = kv
        self.holds_kv_on_finish = True
        self.received: tuple[()] = ()
        self.held: dict[int, Request] = {}  # finished, KV not yet released
        self.outside_batch_tokens = 0  # the held requests' computed tokens

    def hold(self, request: Request) -> None:
        """A request finished (at its first token): keep its KV for the transfer."""
        self.held[request.request_id] = request
        self.outside_batch_tokens += request.num_computed_tokens

    def release(self, request: Request) -> None:
        """The request's KV has been sent; its blocks go back to the pool."""
        del self.held[request.request_id]
        self.outside_batch_tokens -= request.num_computed_tokens
        self.kv.free(request)


class DecodeRole:
    """A decode replica's: requests prefilled elsewhere are reserved, received, then join the decode batch.

    `scheduler` is the replica's continuous scheduler: a reservation counts against its `max_num_seqs` and
    takes blocks from its KV manager. `on_join(request, now)`, if given, is called as a request joins."""

    def __init__(self, scheduler, on_join: Callable[[Request, float], None] | None = None):
        self.scheduler = scheduler
        self.on_join = on_join
        self.holds_kv_on_finish = False
        self.num_reserved = 0  # blocks claimed, KV still on its way
        self.received: list[Request] = []  # KV arrived, joins the decode batch at the next step
        self.outside_batch_tokens = 0  # the reserved and received requests' computed tokens

    def reserve(self, request: Request) -> bool:
        """Claim a sequence slot and the blocks for a request whose prompt KV (`num_computed_tokens`) is about
        to be sent here. False, with nothing changed, when there is no room now, or while requests preempted
        here wait to be admitted again (they come first, or new arrivals could take every block they free and
        starve them)."""
        s = self.scheduler
        if s.waiting or len(s.running) + len(self.received) + self.num_reserved >= s.max_num_seqs:
            return False
        if s.kv.allocate_slots(request, 0) is None:
            return False
        self.num_reserved += 1
        self.outside_batch_tokens += request.num_computed_tokens
        return True

    def receive(self, request: Request) -> None:
        """A reserved request's KV has arrived; it decodes from the scheduler's next step on."""
        self.num_reserved -= 1
        self.received.append(request)

    def take_received(self, now: float) -> list[Request]:
        """The received requests, handed to the decode batch now (their tokens are counted there from now)."""
        joining, self.received = self.received, []
        for request in joining:
            self.outside_batch_tokens -= request.num_computed_tokens
            if self.on_join is not None:
                self.on_join(request, now)
        return joining
