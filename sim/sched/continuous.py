"""Iteration-level batching (Orca, vLLM V1): a step mixes decodes and prefill chunks, requests join and
leave between steps, and a request that cannot grow preempts another (see `sim.sched.preemption`).

The scheduler only schedules. What else a request may be is a collaborator's, each a null object when the
feature is off: where a victim's KV goes (`swap`, sim/sched/swap_space.py), a request's several sequences
(`sampling`, sim/sched/sampling_groups.py; their shared blocks are the KV manager's `forks`), and the replica's
part in disaggregated serving (`role`, sim/sched/disagg_roles.py)."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

from sim.core.request import Request, RequestStatus
from sim.core.step_plan import StepOutcome, StepPlan
from sim.kv.base import KVManager, KVUsage
from sim.sched.base import SchedulerBase
from sim.sched.decode import DecodeBatch, DecodeTracker
from sim.sched.disagg_roles import Colocated, DecodeRole, PrefillRole
from sim.sched.preemption import VICTIM_POLICIES
from sim.sched.rules import (
    SGLANG_CLIP_MAX_NEW_TOKENS,
    SchedulingRule,
    clipped_outputs_sum,
    context_charge,
    context_fits,
    context_pass_chunk,
    group_steps_left_after,
    new_token_ratio,
    padded_batch,
    prefill_chunk_limit,
    ratio_admits,
    ratio_admitted_tokens,
    reservation_fits,
    step_prefill_chunk_cap,
)
from sim.sched.sampling_groups import sampling_groups
from sim.sched.swap_space import swap_space


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

    `sequences_per_request` > 1 (parallel sampling, beam search): once a request's prompt is computed, its
    other sequences fork onto its blocks; it returns when all are done. A replica in disaggregated serving
    is given its `role` (sim/sched/disagg_roles.py) after construction.

    `rule` (sim/sched/rules.py) makes it another engine's scheduler: steps that are prefill-only or decode-only
    (prefill first, as SGLang's event loop and vLLM V0's `_schedule_default` choose), groups of decode steps no
    prompt may join (vLLM V0's `--num-scheduler-steps`), admission only when the whole sequence's blocks are
    reserved (TensorRT-LLM's GUARANTEED_NO_EVICT), decode batches padded to CUDA-graph sizes, SGLang's
    new-token-ratio reserve, or TurboMind's context pass (a step that admits prompts computes all their tokens but
    the last alone; the next step is the decode pass, which computes those last tokens beside the decodes).
    """

    def __init__(self, kv: KVManager, *, max_num_seqs: int, max_num_batched_tokens: int,
                 chunked_prefill: bool, max_model_len: int, tracker: DecodeBatch | None = None,
                 swap_capacity_tokens: int = 0, victim: str = "last_admitted", sequences_per_request: int = 1,
                 rule: SchedulingRule | None = None):
        super().__init__(kv, max_model_len, tracker)
        self.rule = rule = rule or SchedulingRule()
        if (rule.whole_output_reservation or rule.new_token_ratio is not None) and not kv.block_size:
            raise ValueError("a whole-output reservation or a new-token ratio needs paged KV")
        self._graph_sizes = rule.graph_sizes()
        self._group_steps_left = 0  # decode steps left in the current group (decode_steps_per_schedule > 1)
        self._returning: list[Request] = []  # finished inside a group, returned at its end (`update_from_output`)
        self._reserved_blocks = 0  # whole_output_reservation: the blocks of every running request's whole sequence
        self._reservations: dict[int, int] = {}
        self._ratio_reset_clock = 0  # new_token_ratio: the decode clock at the last retraction
        self.role: Colocated | PrefillRole | DecodeRole = Colocated()
        self.sampling = sampling_groups(sequences_per_request, kv.forks)
        if victim not in VICTIM_POLICIES:
            raise ValueError(f"victim: {victim!r} is not a victim policy; allowed: {', '.join(VICTIM_POLICIES)}")
        self.victim = victim
        self._choose_victim = VICTIM_POLICIES[victim]
        # Swap preemption: a victim's KV goes to host memory (up to this many tokens) instead of being
        # recomputed; it comes back when the victim is re-admitted. 0: always recompute.
        self.swap = swap_space(swap_capacity_tokens)
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.chunked_prefill = chunked_prefill
        self.running: dict[int, Request] = {}  # in admission order
        self.prefilling: dict[int, Request] = {}  # running requests whose computed tokens lag their tokens

    def __repr__(self) -> str:
        rule = "" if self.rule.is_default else f", rule={self.rule.describe()!r}"
        return (f"ContinuousScheduler(max_num_seqs={self.max_num_seqs}, max_num_batched_tokens="
                f"{self.max_num_batched_tokens}, chunked_prefill={self.chunked_prefill}{self._preemption_repr()}"
                f"{rule}, kv={self.kv!r})")

    def _preemption_repr(self) -> str:
        extra = f", victim={self.victim!r}" if self.victim != "last_admitted" else ""
        if self.swap.capacity_tokens:
            extra += f", swap_capacity_tokens={self.swap.capacity_tokens}"
        return extra

    # What sim/compiled/engine.py's scope check reads (the compiled core has none of these features).
    @property
    def sequences_per_request(self) -> int:
        return self.sampling.sequences_per_request

    @property
    def hold_kv_on_finish(self) -> bool:
        return self.role.holds_kv_on_finish

    @property
    def incoming(self):
        """Prefilled requests whose KV has arrived, not yet in the decode batch."""
        return self.role.received

    @property
    def num_running(self) -> int:
        return len(self.running)

    def rejection_reason(self, request: Request) -> str:
        reason = super().rejection_reason(request)
        # Without chunking a prompt must fit one step, and so must a recompute of prompt plus output after a
        # preemption, unless the whole sequence is reserved at admission and nothing is ever preempted.
        one_prefill = request.num_prompt_tokens if self.rule.whole_output_reservation else request.num_final_kv_tokens
        if not reason and not self.chunked_prefill and one_prefill > self.max_num_batched_tokens:
            reason = (f"needs up to {one_prefill} tokens in one prefill but "
                      f"max_num_batched_tokens is {self.max_num_batched_tokens} (enable chunked_prefill)")
        if not reason and self.rule.whole_output_reservation:
            need = self.kv.blocks_for_sequence(request.num_final_kv_tokens)
            if need > self.kv.num_blocks:
                reason = (f"needs {need} KV blocks reserved for its whole sequence but the cache has "
                          f"{self.kv.num_blocks}")
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
        self._release_reservation(victim)
        if self.rule.new_token_ratio is not None:
            self._ratio_reset_clock = self.tracker.clock
        plan.swap_out_tokens += self.swap.evict(victim)  # else it is recomputed
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
        if self.role.received:
            self._join_received(now)
        if not self.running and not self.waiting:
            return None
        plan = StepPlan()
        rule, tracker = self.rule, self.tracker
        if self._group_steps_left > 0 and len(tracker):
            self._group_steps_left -= 1  # inside a group of decode steps: no prompt joins
            return self._decode_only(plan, opens_group=False)
        self._group_steps_left = 0
        if not rule.mixed_batches or (rule.context_pass and not self.prefilling):
            # Prefill first: a step of prefill chunks whenever one can run, else a step of decodes. With the
            # context pass (an iteration's first step): the admitted prompts' tokens but their last, alone.
            self._schedule_prefills(plan, self.max_num_batched_tokens, now)
            if plan.prefill_request_ids:
                plan.decode_query_tokens = tracker.decode_query_tokens
                return plan
            if not rule.mixed_batches:
                if not len(tracker):
                    return None
                return self._decode_only(plan)
        self._room_for_decodes(plan)
        budget = self.max_num_batched_tokens - len(tracker) * tracker.decode_query_tokens
        # the decode pass (context_pass): the last tokens of the prompts whose context pass ran, no admission
        self._schedule_prefills(plan, budget, now, admit=not rule.context_pass)
        self._add_decodes(plan)
        if not plan.prefill_request_ids and not plan.num_decode_seqs:
            return None
        # a step opens a group, its prefills too (vLLM 0.6.3+ multi-step with chunked prefill: a prompt scheduled
        # with the decodes decodes in the group's other steps, vllm/sequence.py init_multi_step_from_lookahead_slots)
        self._group_steps_left = rule.decode_steps_per_schedule - 1
        return plan

    def _decode_only(self, plan: StepPlan, opens_group: bool = True) -> StepPlan | None:
        """A step of the running decodes alone; with decode_steps_per_schedule > 1 the first of a group of them."""
        self._room_for_decodes(plan)
        self._add_decodes(plan)
        if not plan.num_decode_seqs:
            return None
        if opens_group:
            self._group_steps_left = self.rule.decode_steps_per_schedule - 1
        return plan

    def _room_for_decodes(self, plan: StepPlan) -> None:
        """Blocks for the decodes' next tokens, preempting until there are."""
        kv, tracker = self.kv, self.tracker
        if kv.forks.pending:
            # Forked sequences about to write into a shared, partly filled block get their own copy first.
            kv.forks.copy_before_write(tracker.members.keys(), partial(self._preempt, plan))
        while tracker.num_new_blocks_needed() > kv.num_free_blocks:
            self._preempt(plan)
        tracker.allocate_new_blocks()

    def _add_decodes(self, plan: StepPlan) -> None:
        tracker = self.tracker
        query_tokens = tracker.decode_query_tokens
        num_decode = len(tracker)
        plan.num_decode_seqs = num_decode
        plan.decode_query_tokens = query_tokens
        plan.num_draft_tokens = tracker.num_draft_tokens if num_decode else 0
        plan.decode_context_tokens = tracker.token_sum + num_decode * query_tokens
        plan.num_sampled_seqs += num_decode
        if num_decode and len(self._graph_sizes) and not plan.prefill_request_ids:
            # The decode batch runs as the CUDA graph captured for the next size up; the padding sequences
            # compute (one token of context each) and sample nothing anyone reads.
            padding = padded_batch(self._graph_sizes, num_decode) - num_decode
            plan.num_padding_seqs = padding
            plan.num_decode_seqs += padding
            plan.decode_context_tokens += padding
            plan.num_sampled_seqs += padding

    def _schedule_prefills(self, plan: StepPlan, budget: int, now: float, admit: bool = True) -> None:
        """Running requests' prefill chunks, then (if `admit`) waiting requests in arrival order while
        `max_num_seqs`, the token budget, the KV cache (and the rule's admission test) allow."""
        kv, limit = self.kv, self.rule.prefill_context_tokens
        # (the requests running or waiting: admissions move requests from one to the other)
        cap = step_prefill_chunk_cap(self.rule.max_prefill_chunk_tokens, self.rule.prefill_chunk_cap_when_alone,
                                     self.rule.prefill_chunk_cap_fair_share, len(self.running) + len(self.waiting),
                                     self.max_num_batched_tokens)
        context_used = 0
        for rid in list(self.prefilling):
            request = self.prefilling.get(rid)
            if request is None or budget <= 0:
                continue  # preempted while making room for an earlier one, or no budget left
            chunk = min(request.num_tokens - request.num_computed_tokens,
                        prefill_chunk_limit(budget, cap))
            charge = context_charge(request.num_tokens, chunk, False)
            if not context_fits(context_used, charge, limit):
                continue
            while kv.allocate_slots(request, chunk) is None:
                if self._preempt(plan) is request:
                    break
            else:
                self._add_prefill(plan, request, chunk)
                budget -= chunk
                context_used += charge

        rule = self.rule
        ratio = running_future = admitted = 0.0
        if rule.new_token_ratio is not None and self.waiting:
            ratio, running_future = self._ratio_state()
        while (admit and self.waiting and not plan.preempted_request_ids and budget > 0
               and len(self.running) < self.max_num_seqs):
            request = self.waiting[0]
            if (len(self.running) + self.sampling.sequences_per_request > self.max_num_seqs
                    and self.sampling.will_fork(request)):
                break  # its sequences will fork once its prompt is computed: keep room for all of them
            reserve = 0
            if rule.whole_output_reservation:
                reserve = kv.blocks_for_sequence(request.num_final_kv_tokens)
                if not reservation_fits(self._reserved_blocks, reserve, kv.num_blocks):
                    break
            if not context_fits(context_used, request.num_tokens, limit):
                break
            if rule.new_token_ratio is not None:
                free_tokens = kv.num_free_blocks * kv.block_size
                remaining_out = request.max_output_tokens - request.num_output_tokens
                prompt = request.num_tokens - request.num_computed_tokens
                if not ratio_admits(free_tokens, running_future, admitted, prompt, remaining_out, ratio,
                                    SGLANG_CLIP_MAX_NEW_TOKENS):
                    break
            chunk = kv.admit(request, prefill_chunk_limit(budget, cap),
                             chunked=self.chunked_prefill,
                             step_need=context_pass_chunk if rule.context_pass else None,
                             whole_prompt=rule.whole_prompt_admission)
            if chunk is None:
                break
            if rule.new_token_ratio is not None:
                admitted += ratio_admitted_tokens(prompt, chunk, remaining_out, SGLANG_CLIP_MAX_NEW_TOKENS)
            if reserve:
                self._reservations[request.request_id] = reserve
                self._reserved_blocks += reserve
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
            context_used += request.num_tokens

    def _ratio_state(self) -> tuple[float, float]:
        """SGLang's current new-token ratio and the running requests' future tokens it reserves (each request's
        remaining output, clipped). O(running requests), only while some request waits."""
        nt = self.rule.new_token_ratio
        tracker = self.tracker
        ratio = new_token_ratio(nt.init, nt.min, nt.decay_steps, tracker.clock - self._ratio_reset_clock)
        future = clipped_outputs_sum(tracker.remaining_outputs(self.running), SGLANG_CLIP_MAX_NEW_TOKENS)
        return ratio, float(future)

    def _release_reservation(self, request: Request) -> None:
        reserve = self._reservations.pop(request.request_id, 0)
        self._reserved_blocks -= reserve

    def decode_run_limit(self, plan: StepPlan, max_steps: int) -> int:
        tracker, kv = self.tracker, self.kv
        if (max_steps <= 1 or self.role.received or plan.prefill_request_ids or plan.preempted_request_ids
                or plan.new_request_ids or plan.swap_in_tokens or plan.swap_out_tokens
                or type(tracker) is not DecodeTracker or kv.forks.pending or not len(tracker)):
            return 1  # a mixed step, a preemption, speculation or copy-on-write: step by step
        group_cap = max_steps
        if (self.waiting and len(self.running) < self.max_num_seqs
                and (self.max_num_batched_tokens > len(tracker) * tracker.decode_query_tokens
                     or self.rule.prefill_only_steps)):
            # The head of the queue may be admitted at the next step, or at the first after this group.
            if self._group_steps_left == 0:
                return 1
            group_cap = min(max_steps, self._group_steps_left + 1)
        if self._returning:
            group_cap = min(group_cap, self._group_steps_left + 1)  # they return at the group's end
        to_finish = tracker.steps_to_first_finish()
        limit = group_cap if to_finish is None else min(to_finish, group_cap)
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
        # the run's steps after its first (nothing was admitted in them: groups follow one another)
        self._group_steps_left = group_steps_left_after(self._group_steps_left, num_steps,
                                                        self.rule.decode_steps_per_schedule)
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
        returning_before = len(self._returning)
        if plan.num_decode_seqs or not self.rule.prefill_only_steps:
            # a prefill-only step (a context pass) leaves the decodes waiting
            finished, outcome.num_output_tokens = self.tracker.advance()
            for request in finished:
                self._finish(request, now)
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
                self._finish(request, now)
            else:
                self.tracker.add(request)
                forked = self.sampling.fork(request)
                if forked:  # its other sequences, each with its first token
                    for sequence in forked:
                        self.running[sequence.request_id] = sequence
                        self.tracker.add(sequence)
                    outcome.num_output_tokens += len(forked)
        if self._returning and not (self._group_steps_left > 0 and len(self.tracker)):
            # The group ends with this step (or has no decode left to run): what finished inside it returns now.
            for request in self._returning[:returning_before]:
                request.last_token_s = request.finish_s = now
            outcome.finished += self._returning
            self._returning = []
        return outcome

    def _finish(self, request: Request, now: float) -> None:
        """The request leaves the batch and frees its KV. It returns (`outcome.finished`) now, or, inside a group
        of decode steps (vLLM V0's `--num-scheduler-steps`), at the group's end: vLLM 0.6 processes a multi-step
        run's outputs after its last step (vllm/engine/async_llm_engine.py step_async: `_process_model_outputs`
        only once `_has_remaining_steps` is false), so a sequence whose last token comes earlier in the run is
        found finished, and streamed its last tokens, then. Not modelled: vLLM keeps such a sequence in the batch
        (computing, holding its KV) for the run's remaining steps, and runs them when every sequence has finished;
        here it leaves at its last token, and returns at once when no decode is left."""
        request.status = RequestStatus.FINISHED
        request.last_token_s = request.finish_s = now
        del self.running[request.request_id]
        self._release_reservation(request)
        if self.role.holds_kv_on_finish:
            self.role.hold(request)
        else:
            self.kv.free(request)
        returned = self.sampling.finish(request, now)
        if returned is not None:
            self._returning.append(returned)

    def kv_token_slots(self) -> int:
        """The requests' computed tokens, summed: what `kv.usage` is asked about."""
        tokens = self.tracker.token_sum
        if self.prefilling:
            tokens += sum(r.num_computed_tokens for r in self.prefilling.values())
        return tokens + self.role.outside_batch_tokens

    def kv_usage(self) -> KVUsage:
        return self.kv.usage(self.kv_token_slots())

    def _join_received(self, now: float) -> None:
        """Requests prefilled elsewhere whose KV has arrived join the decode batch (a decode replica's role)."""
        for request in self.role.take_received(now):
            request.status = RequestStatus.RUNNING
            self.running[request.request_id] = request
            self.tracker.add(request)

    def running_requests(self) -> list[Request]:
        """Requests in flight, each once: forked sequences stand for their request; those finished inside a group
        of decode steps that has not ended are still in flight."""
        return self.sampling.requests_of(self.running.values()) + self._returning
