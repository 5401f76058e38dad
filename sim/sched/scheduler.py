"""Batching policies. Synchronous, plain Python: `schedule(now) -> StepPlan | None`, then
`update_from_output(plan, now) -> StepOutcome` once the step's time has passed.

The scheduler owns the KV manager; the engine never touches it.
"""

from __future__ import annotations

import math
from collections import deque

from sim.core.request import Request, RequestStatus
from sim.core.step_plan import StepOutcome, StepPlan
from sim.kv.base import KVManager, KVUsage
from sim.kv.paged import PagedKVManager
from sim.sched.decode import DecodeTracker


class _SchedulerBase:
    def __init__(self, kv: KVManager, max_model_len: int, tracker=None):
        self.kv = kv
        self.max_model_len = max_model_len
        self.waiting: deque[Request] = deque()
        paged = isinstance(kv, PagedKVManager)
        # Decoding requests, advanced in bulk (or a SpeculativeDecodeBatch under speculative decoding).
        self.tracker = tracker if tracker is not None else DecodeTracker(kv.block_size if paged else None,
                                                                         kv if paged else None)
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

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def in_flight(self) -> list[Request]:
        """Requests still here (running, then waiting), their counters brought up to date."""
        for request in self.tracker.members.values():
            self.tracker.sync(request)
        return self.running_requests() + list(self.waiting)


class ContinuousScheduler(_SchedulerBase):
    """Iteration-level batching (Orca, vLLM), mirroring vLLM V1's policy.

    Each step: running requests first (decodes, then unfinished prefill chunks), then waiting
    requests in arrival order while `max_num_seqs`, the token budget and the KV cache allow. With
    `chunked_prefill` (Sarathi-Serve) a prompt is split to fill the budget left after decodes;
    without it a prompt is admitted only whole. When a running request needs a block and none is
    free, the most recently admitted running request is preempted (recompute: its KV is freed and it
    returns to the head of the queue to prefill prompt and generated tokens again).
    """

    def __init__(self, kv: KVManager, *, max_num_seqs: int, max_num_batched_tokens: int,
                 chunked_prefill: bool, max_model_len: int, tracker=None, swap_capacity_tokens: int = 0,
                 sequences_per_request: int = 1):
        super().__init__(kv, max_model_len, tracker)
        # Parallel sampling (n outputs) or beam search (width w): once a request's prompt is computed,
        # its other sequences fork onto its blocks (shared, copy-on-write); it returns when all are done.
        self.sequences_per_request = sequences_per_request
        self.groups: dict[int, int] = {}  # request id -> its sequences still running
        self.held: dict[int, Request] = {}  # requests done whose other sequences are not
        self._next_child_id = -1
        # Swap preemption: a victim's KV goes to host memory (up to this many tokens) instead of being
        # recomputed; it comes back when the victim is re-admitted. 0: always recompute.
        self.swap_capacity_tokens = swap_capacity_tokens
        self.swap_free_tokens = swap_capacity_tokens
        self.swapped: dict[int, int] = {}  # request id -> KV tokens held in host memory
        if max_num_batched_tokens < max_num_seqs:
            raise ValueError("max_num_batched_tokens must be >= max_num_seqs so every decode fits a step")
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.chunked_prefill = chunked_prefill
        self.running: dict[int, Request] = {}  # admission order: the last one is preempted first
        self.prefilling: dict[int, Request] = {}  # running requests whose computed tokens lag their tokens

    def __repr__(self) -> str:
        return (f"ContinuousScheduler(max_num_seqs={self.max_num_seqs}, max_num_batched_tokens="
                f"{self.max_num_batched_tokens}, chunked_prefill={self.chunked_prefill}, kv={self.kv!r})")

    @property
    def num_running(self) -> int:
        return len(self.running)

    def rejection_reason(self, request: Request) -> str:
        reason = super().rejection_reason(request)
        if not reason and not self.chunked_prefill and request.num_final_kv_tokens > self.max_num_batched_tokens:
            # Without chunking a prompt (or a recompute of prompt plus output) must fit one step.
            reason = (f"needs up to {request.num_final_kv_tokens} tokens in one prefill but "
                      f"max_num_batched_tokens is {self.max_num_batched_tokens} (enable chunked_prefill)")
        return reason

    def _preempt_last(self, plan: StepPlan) -> Request:
        _, victim = self.running.popitem()
        if victim.request_id in self.tracker.members:
            self.tracker.remove(victim)
        else:
            self.prefilling.pop(victim.request_id, None)
        self.kv.free(victim)
        if 0 < victim.num_computed_tokens <= self.swap_free_tokens:
            self.swapped[victim.request_id] = victim.num_computed_tokens
            self.swap_free_tokens -= victim.num_computed_tokens
            plan.swap_out_tokens += victim.num_computed_tokens
        else:
            victim.num_computed_tokens = 0  # recompute: prompt and generated tokens are prefilled again
        victim.num_preemptions += 1
        victim.status = RequestStatus.WAITING
        self.waiting.appendleft(victim)
        plan.preempted_request_ids.append(victim.request_id)
        return victim

    def schedule(self, now: float) -> StepPlan | None:
        if not self.running and not self.waiting:
            return None
        plan = StepPlan()
        kv, tracker = self.kv, self.tracker
        if tracker.block_size:
            if kv.cow_pending:
                # Forked sequences about to write into a shared, partly filled block get their own copy.
                writers = kv.cow_pending & tracker.members.keys()
                while kv.num_cow_blocks_needed(writers) > kv.num_free_blocks:
                    self._preempt_last(plan)
                    writers &= tracker.members.keys()
                kv.copy_on_write(writers)
            while tracker.num_new_blocks_needed() > kv.num_free_blocks:
                self._preempt_last(plan)
            tracker.allocate_new_blocks()
        query_tokens = tracker.decode_query_tokens
        budget = self.max_num_batched_tokens - len(tracker) * query_tokens

        for rid in list(self.prefilling):
            request = self.prefilling.get(rid)
            if request is None or budget <= 0:
                continue  # preempted while making room for an earlier one, or no budget left
            chunk = min(request.num_tokens - request.num_computed_tokens, budget)
            while kv.allocate_slots(request, chunk) is None:
                if self._preempt_last(plan) is request:
                    break
            else:
                self._add_prefill(plan, request, chunk)
                budget -= chunk

        while (self.waiting and not plan.preempted_request_ids and budget > 0
               and len(self.running) < self.max_num_seqs):
            request = self.waiting[0]
            unforked = request.parent_id < 0 and request.request_id not in self.groups
            if unforked and len(self.running) + self.sequences_per_request > self.max_num_seqs:
                break  # its sequences will fork once its prompt is computed: keep room for all of them
            chunk = self._allocate_for_admission(request, budget)
            if chunk is None:
                break
            self.waiting.popleft()
            request.status = RequestStatus.RUNNING
            if math.isnan(request.first_scheduled_s):
                request.first_scheduled_s = now
            swapped = self.swapped.pop(request.request_id, 0)
            if swapped:
                self.swap_free_tokens += swapped
                plan.swap_in_tokens += swapped
            self.running[request.request_id] = request
            self.prefilling[request.request_id] = request
            plan.new_request_ids.append(request.request_id)
            self._add_prefill(plan, request, chunk)
            budget -= chunk

        plan.num_decode_seqs = len(tracker)
        plan.decode_query_tokens = query_tokens
        plan.num_draft_tokens = tracker.num_draft_tokens if len(tracker) else 0
        plan.decode_context_tokens = tracker.token_sum + len(tracker) * query_tokens
        plan.num_sampled_seqs += len(tracker)
        if not plan.prefill_request_ids and not plan.num_decode_seqs:
            return None
        return plan

    def _allocate_for_admission(self, request: Request, budget: int) -> int | None:
        """Tokens the waiting request computes this step, its KV allocated; None if it cannot start now."""
        computed_before = request.num_computed_tokens  # > 0 only for a request swapped out
        if computed_before == 0:
            # Prefix cache: cached leading prompt blocks are not computed again. Looked up right before
            # allocating, since any allocation in between may evict them.
            request.num_computed_tokens = self.kv.get_computed_blocks(request)
        need = request.num_tokens - request.num_computed_tokens
        chunk = min(need, budget)
        if ((need > budget and not self.chunked_prefill) or not self._whole_sequence_fits(request, need)
                or self.kv.allocate_slots(request, chunk) is None):
            request.num_computed_tokens = computed_before
            return None
        return chunk

    def _whole_sequence_fits(self, request: Request, need: int) -> bool:
        """vLLM V1 admits a request only if blocks for all its tokens are free now, not just for its
        first chunk (`scheduler_reserve_full_isl`, default on), so chunked prefills cannot over-admit
        and then preempt each other. Prefix-cache hits are counted as blocks to allocate (as vLLM does
        for evictable ones; conservative for a hit block another request is using)."""
        if not isinstance(self.kv, PagedKVManager) or not self.chunked_prefill:
            return True  # unchunked, the allocation itself covers the whole sequence
        return self.kv.num_new_blocks(request, need) <= self.kv.num_free_blocks

    @staticmethod
    def _add_prefill(plan: StepPlan, request: Request, chunk: int) -> None:
        plan.prefill_request_ids.append(request.request_id)
        plan.prefill_chunk_tokens.append(chunk)
        plan.prefill_context_tokens.append(request.num_computed_tokens)
        if request.num_computed_tokens + chunk == request.num_tokens:
            plan.num_sampled_seqs += 1

    def update_from_output(self, plan: StepPlan, now: float) -> StepOutcome:
        outcome = StepOutcome()
        finished, outcome.num_output_tokens = self.tracker.advance()
        for request in finished:
            self._finish(request, now, outcome)
        for rid, chunk in zip(plan.prefill_request_ids, plan.prefill_chunk_tokens):
            request = self.running[rid]
            request.num_computed_tokens += chunk
            if request.num_computed_tokens < request.num_tokens:
                continue
            del self.prefilling[rid]
            request.num_output_tokens += 1
            outcome.num_output_tokens += 1
            if math.isnan(request.first_token_s):
                request.first_token_s = now
            request.last_token_s = now
            if request.num_output_tokens >= request.max_output_tokens:
                self._finish(request, now, outcome)
            else:
                self.tracker.add(request)
                if self.sequences_per_request > 1 and request.parent_id < 0 and rid not in self.groups:
                    self._fork_sequences(request)
                    outcome.num_output_tokens += self.sequences_per_request - 1  # their first tokens
        return outcome

    def _fork_sequences(self, parent: Request) -> None:
        self.groups[parent.request_id] = self.sequences_per_request
        for _ in range(self.sequences_per_request - 1):
            child = Request(self._next_child_id, parent.arrival_s, parent.num_prompt_tokens,
                            parent.max_output_tokens, prefix_ids=parent.prefix_ids,
                            prefix_unit_tokens=parent.prefix_unit_tokens, parent_id=parent.request_id)
            self._next_child_id -= 1
            child.num_computed_tokens = parent.num_computed_tokens
            child.num_output_tokens = parent.num_output_tokens
            child.first_scheduled_s, child.first_token_s = parent.first_scheduled_s, parent.first_token_s
            child.status = RequestStatus.RUNNING
            self.kv.fork(parent, child)
            self.running[child.request_id] = child
            self.tracker.add(child)

    def _finish(self, request: Request, now: float, outcome: StepOutcome) -> None:
        request.status = RequestStatus.FINISHED
        request.last_token_s = request.finish_s = now
        del self.running[request.request_id]
        self.kv.free(request)
        root = request.parent_id if request.parent_id >= 0 else request.request_id
        remaining = self.groups.get(root)
        if remaining is None:
            outcome.finished.append(request)
            return
        if remaining > 1:
            self.groups[root] = remaining - 1
            if request.parent_id < 0:
                self.held[root] = request
            return
        del self.groups[root]
        parent = request if request.parent_id < 0 else self.held.pop(root)
        parent.finish_s = now  # the response returns with its last sequence
        outcome.finished.append(parent)

    def kv_usage(self) -> KVUsage:
        tokens = self.tracker.token_sum + sum(r.num_computed_tokens for r in self.prefilling.values())
        return self.kv.usage(tokens)

    def running_requests(self) -> list[Request]:
        """Requests in flight, each once: forked sequences stand for their request."""
        parents = [r for r in self.running.values() if r.parent_id < 0]
        listed = {r.request_id for r in parents}
        return parents + [r for rid, r in self.held.items() if rid not in listed]


class StaticScheduler(_SchedulerBase):
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
        paged = isinstance(kv, PagedKVManager)
        blocks_left = kv.num_free_blocks if paged else 0
        while self.waiting and len(self.batch) < self.max_batch_size:
            request = self.waiting[0]
            if paged:
                blocks = kv.blocks_for(request.num_final_kv_tokens)
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
        if tracker.block_size:
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
