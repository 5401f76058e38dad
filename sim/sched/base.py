"""What every batching policy shares: the waiting queue, the decode batch, rejection, and the contract
with the engine — `schedule(now) -> StepPlan | None`, then `update_from_output(plan, now) -> StepOutcome`
once the step's time has passed. Synchronous, plain Python.

The scheduler owns the KV manager; the engine never touches it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from sim.core.request import Request, RequestStatus
from sim.kv.base import KVManager
from sim.sched.decode import DecodeBatch, DecodeTracker


class SchedulerBase:
    def __init__(self, kv: KVManager, max_model_len: int, tracker: DecodeBatch | None = None):
        self.kv = kv
        self.max_model_len = max_model_len
        self.waiting: deque[Request] = deque()
        # Decoding requests, advanced in bulk (or a SpeculativeDecodeBatch under speculative decoding).
        self.tracker: DecodeBatch = tracker if tracker is not None else DecodeTracker(kv)
        self.next_wake_s: float | None = None  # set when schedule() returns None but wants a timed retry

    def rejection_reason(self, request: Request) -> str:
        need = request.num_final_kv_tokens
        if request.num_prompt_tokens + request.max_output_tokens > self.max_model_len:
            return f"needs {request.num_prompt_tokens + request.max_output_tokens} tokens > max_model_len {self.max_model_len}"
        if not self.kv.can_ever_fit(need):
            return f"needs {need} KV slots but the whole cache holds {self.kv.capacity_slots}"
        return ""

    def add_request(self, request: Request) -> bool:
        """Queue a request; False (and status REJECTED with a reason) if it can never run here."""
        reason = self.rejection_reason(request)
        if reason:
            request.status = RequestStatus.REJECTED
            request.reject_reason = reason
            return False
        self.waiting.append(request)
        return True

    def decode_run_limit(self, plan, max_steps: int) -> int:
        """How many steps like `plan` (decode-only, the batch unchanged, only context lengths growing) run
        back to back, `plan` first, before the scheduler could decide anything else: a finish ends the
        run (as its last step), a block the pool cannot give or a possible admission stops it before.
        1: no run; the engine takes one step. Schedulers without a fast path answer 1."""
        return 1

    def advance_decode_steps(self, num_steps: int, after_step: Callable[[], None],
                             record_usage: Callable[[tuple], None] | None = None) -> None:
        """Apply the steps of a decode run but its last (no member finishes there), each followed by the
        next step's blocks, as `update_from_output` then `schedule` would. `after_step` is called between
        the two, when `kv_usage()` is what step-by-step simulation logs for that step. A scheduler whose KV
        manager can count those states in bulk (`KVManager.run_usage`) may instead call `record_usage` once
        with them (columns token, reserved, internal, external, shared slots; one value per step)."""
        raise NotImplementedError

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def in_flight(self) -> list[Request]:
        """Requests still here (running, then waiting), each once, their counters brought up to date. A
        forked sequence preempted back to the queue stands for nothing of its own: its request is listed
        (running, held or waiting itself), as `running_requests` lists it for its running sequences."""
        for request in self.tracker.members.values():
            self.tracker.sync(request)
        running = self.running_requests()
        listed = {r.request_id for r in running}
        waiting = [r for r in self.waiting if r.parent_id < 0 and r.request_id not in listed]
        return running + waiting

    def running_requests(self) -> list[Request]:
        raise NotImplementedError
