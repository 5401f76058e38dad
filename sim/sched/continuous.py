"""Iteration-level batching (Orca, vLLM V1): a step mixes decodes and prefill chunks, requests join and
leave between steps, and a request that cannot grow preempts another (see `sim.sched.preemption`)."""

from __future__ import annotations

import math
from collections.abc import Callable

from sim.core.request import Request, RequestStatus
from sim.core.step_plan import StepOutcome, StepPlan
from sim.kv.base import KVManager, KVUsage
from sim.sched.base import SchedulerBase
from sim.sched.decode import DecodeBatch, DecodeTracker
from sim.sched.preemption import VICTIM_POLICIES, SwapSpace


class ContinuousScheduler(SchedulerBase):
    """Iteration-level batching (Orca, vLLM), mirroring vLLM V1's policy.

    Each step: running requests first (decodes, then unfinished prefill chunks), then waiting
    requests in arrival order while `max_num_seqs`, the token budget and the KV cache allow. With
    `chunked_prefill` (Sarathi-Serve) a prompt is split to fill the budget left after decodes;
    without it a prompt is admitted only whole. When a running request needs a block and none is
    free, another running request is preempted: by default the most recently admitted (`victim`, see
    `sim.sched.preemption`). Its KV is freed and it returns to the head of the queue, to prefill prompt
    and generated tokens again (recompute) or to have its KV copied back from host memory (swap, while
    `swap_capacity_tokens` has room).
    """

    def __init__(self, kv: KVManager, *, max_num_seqs: int, max_num_batched_tokens: int,
                 chunked_prefill: bool, max_model_len: int, tracker: DecodeBatch | None = None,
                 swap_capacity_tokens: int = 0, victim: str = "last_admitted", sequences_per_request: int = 1,
                 hold_kv_on_finish: bool = False):
        super().__init__(kv, max_model_len, tracker)
        # Disaggregated serving (sim/core/disaggregated.py). A prefill replica's requests end at their first
        # token, and their KV stays until it has been sent to a decode replica (`release_held_kv`). A decode
        # replica takes requests whose prompt KV was computed elsewhere: `reserve_prefilled` claims the blocks
        # before the KV is sent, `add_prefilled` queues the request once it has arrived, and the next
        # `schedule` puts it into the decode batch.
        self.hold_kv_on_finish = hold_kv_on_finish
        self.held_kv: dict[int, Request] = {}  # finished, KV not yet released
        self.num_reserved_prefilled = 0  # blocks claimed, KV still on its way
        self.incoming: list[Request] = []  # KV arrived, joins the decode batch at the next step
        self.transfer_tokens = 0  # token states held for the requests above (counted as token slots)
        self.on_join = None  # called (request, now) when a prefilled request joins the decode batch
        # Parallel sampling (n outputs) or beam search (width w): once a request's prompt is computed,
        # its other sequences fork onto its blocks (shared, copy-on-write); it returns when all are done.
        self.sequences_per_request = sequences_per_request
        self.groups: dict[int, int] = {}  # request id -> its sequences still running
        self.held: dict[int, Request] = {}  # requests done whose other sequences are not
        self._next_child_id = -1
        if victim not in VICTIM_POLICIES:
            raise ValueError(f"victim: {victim!r} is not a victim policy; allowed: {', '.join(VICTIM_POLICIES)}")
        self.victim = victim
        self._choose_victim = VICTIM_POLICIES[victim]
        # Swap preemption: a victim's KV goes to host memory (up to this many tokens) instead of being
        # recomputed; it comes back when the victim is re-admitted. 0: always recompute.
        self.swap = SwapSpace(swap_capacity_tokens)
        if max_num_batched_tokens < max_num_seqs:
            raise ValueError("max_num_batched_tokens must be >= max_num_seqs so every decode fits a step")
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.chunked_prefill = chunked_prefill
        self.running: dict[int, Request] = {}  # in admission order
        self.prefilling: dict[int, Request] = {}  # running requests whose computed tokens lag their tokens

    def __repr__(self) -> str:
        return (f"ContinuousScheduler(max_num_seqs={self.max_num_seqs}, max_num_batched_tokens="
                f"{self.max_num_batched_tokens}, chunked_prefill={self.chunked_prefill}{self._preemption_repr()}, "
                f"kv={self.kv!r})")

    def _preemption_repr(self) -> str:
        extra = f", victim={self.victim!r}" if self.victim != "last_admitted" else ""
        if self.swap.capacity_tokens:
            extra += f", swap_capacity_tokens={self.swap.capacity_tokens}"
        return extra

    @property
    def swap_free_tokens(self) -> int:
        """Host memory left for swapped-out KV, in tokens."""
        return self.swap.free_tokens

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

    def _preempt(self, plan: StepPlan) -> Request:
        """Preempt the victim policy's choice among the running requests not yet scheduled this step."""
        victim = self._choose_victim(self._preemption_candidates(plan), self.kv)
        del self.running[victim.request_id]
        if victim.request_id in self.tracker.members:
            self.tracker.remove(victim)
        else:
            self.prefilling.pop(victim.request_id, None)
        self.kv.free(victim)
        swapped = self.swap.swap_out(victim)
        if swapped:
            plan.swap_out_tokens += swapped
        else:
            victim.num_computed_tokens = 0  # recompute: prompt and generated tokens are prefilled again
        victim.num_preemptions += 1
        victim.status = RequestStatus.WAITING
        self.waiting.appendleft(victim)
        plan.preempted_request_ids.append(victim.request_id)
        return victim

    def _preemption_candidates(self, plan: StepPlan):
        """Running requests, most recently admitted first, counters synced, without those whose prefill
        chunk is already in the plan (the request asking for room itself is a candidate: if it is
        chosen, it waits)."""
        scheduled = set(plan.prefill_request_ids)
        tracker = self.tracker
        for request in reversed(self.running.values()):
            if request.request_id in scheduled:
                continue
            if request.request_id in tracker.members:
                tracker.sync(request)
            yield request

    def schedule(self, now: float) -> StepPlan | None:
        if self.incoming:
            self._join_prefilled(now)
        if not self.running and not self.waiting:
            return None
        plan = StepPlan()
        kv, tracker = self.kv, self.tracker
        if kv.cow_pending:
            # Forked sequences about to write into a shared, partly filled block get their own copy.
            writers = kv.cow_pending & tracker.members.keys()
            while kv.num_cow_blocks_needed(writers) > kv.num_free_blocks:
                self._preempt(plan)
                writers &= tracker.members.keys()
            kv.copy_on_write(writers)
        while tracker.num_new_blocks_needed() > kv.num_free_blocks:
            self._preempt(plan)
        tracker.allocate_new_blocks()
        query_tokens = tracker.decode_query_tokens
        budget = self.max_num_batched_tokens - len(tracker) * query_tokens

        for rid in list(self.prefilling):
            request = self.prefilling.get(rid)
            if request is None or budget <= 0:
                continue  # preempted while making room for an earlier one, or no budget left
            chunk = min(request.num_tokens - request.num_computed_tokens, budget)
            while kv.allocate_slots(request, chunk) is None:
                if self._preempt(plan) is request:
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
            chunk = kv.admit(request, budget, chunked=self.chunked_prefill)
            if chunk is None:
                break
            self.waiting.popleft()
            request.status = RequestStatus.RUNNING
            if math.isnan(request.first_scheduled_s):
                request.first_scheduled_s = now
            plan.swap_in_tokens += self.swap.swap_in(request.request_id)
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

    def decode_run_limit(self, plan: StepPlan, max_steps: int) -> int:
        tracker, kv = self.tracker, self.kv
        if (max_steps <= 1 or self.incoming or plan.prefill_request_ids or plan.preempted_request_ids or plan.new_request_ids
                or plan.swap_in_tokens or plan.swap_out_tokens or type(tracker) is not DecodeTracker
                or kv.cow_pending or not len(tracker)):
            return 1  # a mixed step, a preemption, speculation or copy-on-write: step by step
        if (self.waiting and len(self.running) < self.max_num_seqs
                and self.max_num_batched_tokens > len(tracker) * tracker.decode_query_tokens):
            return 1  # the head of the queue may be admitted at the next step
        to_finish = tracker.steps_to_first_finish()
        limit = max_steps if to_finish is None else min(to_finish, max_steps)
        if tracker.block_size:
            free = kv.num_free_blocks
            for j in range(1, limit):
                need = tracker.num_blocks_needed_after(j)
                if need > free:
                    return j  # step j + 1 would have to preempt
                free -= need
        return limit

    def advance_decode_steps(self, num_steps: int, after_step: Callable[[], None],
                             record_usage: Callable[[tuple], None] | None = None) -> None:
        kv, tracker = self.kv, self.tracker
        if record_usage is None or not kv.usage_in_bulk:
            tracker.advance_without_finishes(num_steps, after_step)
            return
        # The steps' states from counts alone: tokens grow by the batch each step, blocks as taken.
        first_tokens = self.kv_token_slots() + len(tracker)
        allocated_slots = kv.num_allocated_slots()
        new_blocks = tracker.advance_without_finishes(num_steps, None)
        record_usage(kv.run_usage(first_tokens, len(tracker), allocated_slots, new_blocks))

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
        if self.hold_kv_on_finish:
            self.held_kv[request.request_id] = request
            self.transfer_tokens += request.num_computed_tokens
        else:
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

    def kv_token_slots(self) -> int:
        """The requests' computed tokens, summed: what `kv.usage` is asked about."""
        tokens = self.tracker.token_sum
        if self.prefilling:
            tokens += sum(r.num_computed_tokens for r in self.prefilling.values())
        return tokens + self.transfer_tokens

    def kv_usage(self) -> KVUsage:
        return self.kv.usage(self.kv_token_slots())

    # --- disaggregated serving ------------------------------------------------------------------
    def release_held_kv(self, request: Request) -> None:
        """Prefill replica: the request's KV has been sent; its blocks go back to the pool."""
        del self.held_kv[request.request_id]
        self.transfer_tokens -= request.num_computed_tokens
        self.kv.free(request)

    def reserve_prefilled(self, request: Request) -> bool:
        """Decode replica: claim a sequence slot and the blocks for a request whose prompt KV
        (`num_computed_tokens`) is about to be sent here. False, with nothing changed, when there is no room now,
        or while requests preempted here wait to be admitted again (they come first, or new arrivals could
        take every block they free and starve them)."""
        if self.waiting or len(self.running) + len(self.incoming) + self.num_reserved_prefilled >= self.max_num_seqs:
            return False
        if self.kv.allocate_slots(request, 0) is None:
            return False
        self.num_reserved_prefilled += 1
        self.transfer_tokens += request.num_computed_tokens
        return True

    def add_prefilled(self, request: Request) -> None:
        """Decode replica: a reserved request's KV has arrived; it decodes from the next step on."""
        self.num_reserved_prefilled -= 1
        self.incoming.append(request)

    def _join_prefilled(self, now: float) -> None:
        for request in self.incoming:
            self.transfer_tokens -= request.num_computed_tokens
            request.status = RequestStatus.RUNNING
            self.running[request.request_id] = request
            self.tracker.add(request)
            if self.on_join is not None:
                self.on_join(request, now)
        self.incoming.clear()

    def running_requests(self) -> list[Request]:
        """Requests in flight, each once: forked sequences stand for their request."""
        parents = [r for r in self.running.values() if r.parent_id < 0]
        listed = {r.request_id for r in parents}
        return parents + [r for rid, r in self.held.items() if rid not in listed]
