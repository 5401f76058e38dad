"""Request-level batching (FasterTransformer): a batch is formed, runs to its longest member's end, then the next."""

from __future__ import annotations

from sim.core.request import Request, RequestStatus
from sim.core.step_plan import StepOutcome, StepPlan
from sim.kv.base import KVManager, KVUsage
from sim.sched.base import SchedulerBase


class StaticScheduler(SchedulerBase):
    """Request-level batching (FasterTransformer): form a batch, prefill it padded to its longest
    prompt, decode until every member is done, then form the next one.

    Finished members keep their slot and compute padding until the batch ends, and their responses
    return with the batch (as Orca, Yu et al. OSDI 2022, describes request-level scheduling).
    A batch is formed only from requests whose whole KV need fits now, so it never preempts.
    """

    def __init__(self, kv: KVManager, *, max_batch_size: int, batch_timeout_s: float, max_model_len: int):
        super().__init__(kv, max_model_len)
        self.max_batch_size = max_batch_size
        self.batch_timeout_s = batch_timeout_s
        self.batch: list[Request] = []
        self._padded_prompt = 0
        self._decode_steps_done = 0
        self._held_tokens = 0  # KV tokens of members that finished and still hold their slot

    def __repr__(self) -> str:
        return (f"StaticScheduler(max_batch_size={self.max_batch_size}, "
                f"batch_timeout_s={self.batch_timeout_s}, kv={self.kv!r})")

    @property
    def num_running(self) -> int:
        return len(self.batch)

    def _form_batch(self, now: float) -> bool:
        self.next_wake_s = None
        if len(self.waiting) < self.max_batch_size and self.batch_timeout_s > 0:
            deadline = self.waiting[0].arrival_s + self.batch_timeout_s
            if now < deadline:
                self.next_wake_s = deadline
                return False
        kv = self.kv
        # Decodes allocate blocks as they go, and a batch never preempts: blocks for every member's
        # whole sequence must be free when it is formed (0 and 0 for a layout without blocks).
        blocks_left = kv.num_free_blocks
        while self.waiting and len(self.batch) < self.max_batch_size:
            request = self.waiting[0]
            blocks = kv.blocks_for_sequence(request.num_final_kv_tokens)
            if blocks > blocks_left:
                break
            blocks_left -= blocks
            if kv.allocate_slots(request, request.num_prompt_tokens) is None:
                break
            self.waiting.popleft()
            request.status = RequestStatus.RUNNING
            request.first_scheduled_s = now
            self.batch.append(request)
        return bool(self.batch)

    def schedule(self, now: float) -> StepPlan | None:
        plan = StepPlan()
        if not self.batch:
            if not self.waiting or not self._form_batch(now):
                return None
            self._padded_prompt = max(r.num_prompt_tokens for r in self.batch)
            self._decode_steps_done = 0
            self._held_tokens = 0
            for request in self.batch:
                plan.prefill_request_ids.append(request.request_id)
                plan.prefill_chunk_tokens.append(self._padded_prompt)
                plan.prefill_context_tokens.append(0)
                plan.new_request_ids.append(request.request_id)
            plan.num_sampled_seqs = len(self.batch)
            return plan
        tracker = self.tracker
        tracker.allocate_new_blocks()  # cannot run out: the batch's whole need was free when it was formed
        batch_size = len(self.batch)
        plan.num_decode_seqs = plan.num_sampled_seqs = batch_size
        plan.num_padding_seqs = batch_size - len(tracker)
        plan.decode_context_tokens = batch_size * (self._padded_prompt + self._decode_steps_done + 1)
        return plan

    def update_from_output(self, plan: StepPlan, now: float) -> StepOutcome:
        outcome = StepOutcome()
        if plan.prefill_request_ids:
            for request in self.batch:
                request.num_computed_tokens = request.num_prompt_tokens
                request.num_output_tokens = 1
                request.first_token_s = request.last_token_s = now
                if request.max_output_tokens > 1:
                    self.tracker.add(request)
                else:
                    self._held_tokens += request.num_computed_tokens
            outcome.num_output_tokens = len(self.batch)
        else:
            self._decode_steps_done += 1
            finished, outcome.num_output_tokens = self.tracker.advance()
            for request in finished:
                request.last_token_s = now
                self._held_tokens += request.num_computed_tokens
        if not self.tracker:
            for request in self.batch:
                request.status = RequestStatus.FINISHED
                request.finish_s = now
                self.kv.free(request)
            outcome.finished, self.batch = self.batch, []
            self._held_tokens = 0
        return outcome

    def kv_usage(self) -> KVUsage:
        return self.kv.usage(self.tracker.token_sum + self._held_tokens)

    def running_requests(self) -> list[Request]:
        return list(self.batch)
