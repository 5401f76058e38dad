"""The engines' scheduling rules (sim/sched/rules.py) on tiny configs, schedules computed by hand, no event loop:
prefill-only or decode-only steps (SGLang, vLLM V0), groups of decode steps (vLLM V0 --num-scheduler-steps), the
whole sequence reserved at admission (TensorRT-LLM GUARANTEED_NO_EVICT), a chunked prompt admitted on its first
chunk's blocks (vLLM V1 to v0.18), decode batches padded to CUDA-graph sizes,
SGLang's new-token ratio, and TurboMind's context pass (LMDeploy 0.1)."""

import numpy as np
import pytest
from helpers import make_request
from hypothesis import given
from hypothesis import strategies as st

from sim.kv.paged import PagedKVManager
from sim.sched.continuous import ContinuousScheduler
from sim.sched.rules import (
    NewTokenRatio,
    SchedulingRule,
    clipped_outputs_sum,
    context_pass_chunk,
    new_token_ratio,
    padded_batch,
    ratio_admits,
    ratio_admitted_tokens,
    running_future_bound,
)


def scheduler(kv, rule, budget=64, max_num_seqs=8, chunked=True):
    return ContinuousScheduler(kv, max_num_seqs=max_num_seqs, max_num_batched_tokens=budget,
                               chunked_prefill=chunked, max_model_len=4096, rule=rule)


def step(sched, now):
    plan = sched.schedule(now)
    sched.update_from_output(plan, now + 1.0)
    return plan


def test_prefill_first_steps_never_mix_and_decodes_wait_during_a_prefill():
    sched = scheduler(PagedKVManager(64, 4), SchedulingRule(mixed_batches=False))
    a = make_request(6, 3)
    sched.add_request(a)
    p = step(sched, 0.0)
    assert p.prefill_request_ids == [a.request_id] and p.num_decode_seqs == 0
    assert a.num_output_tokens == 1  # its first token
    b = make_request(5, 3)
    sched.add_request(b)
    p = step(sched, 1.0)  # b can prefill: a prefill-only step, a's decode waits
    assert p.prefill_request_ids == [b.request_id] and p.num_decode_seqs == 0
    assert a.num_output_tokens == 1 and a.num_computed_tokens == 6
    p = step(sched, 2.0)  # nothing to prefill: both decode
    assert not p.prefill_request_ids and p.num_decode_seqs == 2
    sched.tracker.sync(a)
    assert a.num_output_tokens == 2


def test_mixed_default_puts_the_new_prompt_beside_the_decode():
    sched = scheduler(PagedKVManager(64, 4), SchedulingRule())
    a, b = make_request(6, 3), make_request(5, 3)
    sched.add_request(a)
    step(sched, 0.0)
    sched.add_request(b)
    p = step(sched, 1.0)
    assert p.prefill_request_ids == [b.request_id] and p.num_decode_seqs == 1


def test_a_group_of_decode_steps_keeps_a_new_prompt_waiting():
    # num_scheduler_steps 4: after the prefill, decode steps come in groups of 4 that no prompt joins.
    sched = scheduler(PagedKVManager(64, 4), SchedulingRule(mixed_batches=False, decode_steps_per_schedule=4))
    a = make_request(4, 20)
    sched.add_request(a)
    step(sched, 0.0)  # prefill
    step(sched, 1.0)  # decode step 1 of a group of 4
    b = make_request(4, 20)
    sched.add_request(b)
    kinds = []
    for t in range(2, 7):
        p = step(sched, float(t))
        kinds.append("prefill" if p.prefill_request_ids else "decode")
    # steps 2, 3, 4 of the group, then b's prefill, then a new group
    assert kinds == ["decode", "decode", "decode", "prefill", "decode"]


def test_a_request_that_finishes_inside_a_group_returns_at_the_groups_end():
    # vLLM 0.6 multi-step processes a run's outputs after its last step: a (3 output tokens) and b (12) prefill in
    # step 0, ending at t=1 (a's and b's first tokens); the group of 4 decode steps ends at t=2, 3, 4, 5. a samples
    # its last token in the group's second step (t=3) but returns with its fourth (t=5); b returns with its own last
    # token (t=12, the third group's third step): no decode is left to run the group on (see the next test).
    sched = scheduler(PagedKVManager(64, 4), SchedulingRule(mixed_batches=False, decode_steps_per_schedule=4))
    a, b = make_request(4, 3), make_request(4, 12)
    sched.add_request(a)
    sched.add_request(b)
    returned = {}
    for t in range(12):
        plan = sched.schedule(float(t))
        for request in sched.update_from_output(plan, t + 1.0).finished:
            returned[request.request_id] = t + 1.0
    assert returned == {a.request_id: 5.0, b.request_id: 12.0}
    assert (a.first_token_s, a.last_token_s, a.finish_s) == (1.0, 5.0, 5.0)
    assert a.num_output_tokens == 3 and b.num_output_tokens == 12
    # without groups a returns with its last token
    sched = scheduler(PagedKVManager(64, 4), SchedulingRule(mixed_batches=False))
    a = make_request(4, 3)
    sched.add_request(a)
    finished_at = [t + 1.0 for t in range(3) if sched.update_from_output(sched.schedule(float(t)), t + 1.0).finished]
    assert finished_at == [3.0] and a.last_token_s == 3.0


def test_a_group_whose_last_decode_finishes_returns_its_waiting_requests_at_once():
    # a (2 output tokens) finishes in the group's first step and waits; b (3) finishes in its second, leaving no
    # decode: both return then (vLLM would run the group's two remaining steps; not modelled, see `_finish`).
    sched = scheduler(PagedKVManager(64, 4), SchedulingRule(mixed_batches=False, decode_steps_per_schedule=4))
    a, b = make_request(4, 2), make_request(4, 3)
    sched.add_request(a)
    sched.add_request(b)
    finished = [[r.request_id for r in sched.update_from_output(sched.schedule(float(t)), t + 1.0).finished]
                for t in range(3)]
    assert finished == [[], [], [a.request_id, b.request_id]]
    assert a.finish_s == b.finish_s == 3.0 and sched.schedule(3.0) is None


def test_with_mixed_batches_a_prompts_step_opens_the_group_it_then_decodes_in():
    # vLLM 0.6.3+ multi-step with chunked prefill (vllm/sequence.py init_multi_step_from_lookahead_slots): a prompt
    # scheduled beside the decodes runs num_scheduler_steps steps, its first token in the first, so the group's
    # other steps are decodes that no prompt joins, the new one's among them.
    sched = scheduler(PagedKVManager(64, 4), SchedulingRule(mixed_batches=True, decode_steps_per_schedule=3))
    a, b, c = make_request(4, 20), make_request(4, 20), make_request(4, 20)
    sched.add_request(a)
    plans = [step(sched, 0.0)]  # a's prefill opens a group of 3
    sched.add_request(b)
    plans += [step(sched, float(t)) for t in (1, 2)]  # a decodes; b waits for the group's end
    sched.add_request(c)
    plans += [step(sched, float(t)) for t in (3, 4, 5, 6)]  # b and c with a's decode, then a group of 3 decodes
    ids = {a.request_id: "a", b.request_id: "b", c.request_id: "c"}
    assert [("".join(ids[r] for r in p.prefill_request_ids), p.num_decode_seqs) for p in plans] == [
        ("a", 0), ("", 1), ("", 1), ("bc", 1), ("", 3), ("", 3), ("", 3)]


def test_first_chunk_admission_lets_a_prompt_in_that_its_later_chunks_then_preempt():
    # 16 blocks of 4 tokens, a budget of 16 tokens; a and b: 40-token prompts. a's prompt takes steps 0-2 (16, 16,
    # 8 tokens: 10 blocks). At step 2 the 8 tokens left of the budget could start b: the whole prompt (10 blocks)
    # does not fit in the 6 free, its first chunk (2 blocks) does. vLLM V1 to v0.18 starts it (allocate_slots for
    # the chunk alone); at step 3 a's decode takes its 11th block (3 free) and b's next chunk of 15 tokens needs 4
    # more: b, the last admitted, is preempted, freeing its 2; at step 4 it starts again on its first chunk (15
    # tokens, 4 of the 5 free blocks), and at step 5 the same happens again.
    plans = {}
    for whole in (True, False):
        kv = PagedKVManager(16, 4)
        sched = scheduler(kv, SchedulingRule(whole_prompt_admission=whole), budget=16)
        a, b = make_request(40, 10), make_request(40, 10)
        sched.add_request(a)
        sched.add_request(b)
        plans[whole] = [(step(sched, float(t)), kv.num_free_blocks) for t in range(6)]
        ids = a.request_id, b.request_id
        plans[whole] = [([ids.index(r) for r in p.new_request_ids], [ids.index(r) for r in p.preempted_request_ids],
                         p.prefill_chunk_tokens, free) for p, free in plans[whole]]
    # whole prompt (v0.19+): b waits for a's blocks, nothing is preempted
    assert [(new, out, free) for new, out, _, free in plans[True]] == [
        ([0], [], 12), ([], [], 8), ([], [], 6), ([], [], 5), ([], [], 5), ([], [], 5)]
    assert plans[False] == [
        ([0], [], [16], 12), ([], [], [16], 8), ([1], [], [8, 8], 4),  # b starts on 2 blocks
        ([], [1], [], 5),  # a's decode block, then b preempted: its 2 blocks back
        ([1], [], [15], 1),  # b again, on its first 15 tokens
        ([], [1], [], 5)]


def test_whole_output_reservation_admits_only_what_fits_to_the_end_and_never_preempts():
    # 10 blocks of 4 slots. Each request needs 8 + 12 - 1 = 19 slots at the end: 5 blocks. Two fit, a third
    # waits although its prompt (2 blocks) would fit now.
    kv = PagedKVManager(10, 4)
    sched = scheduler(kv, SchedulingRule(whole_output_reservation=True))
    reqs = [make_request(8, 12) for _ in range(3)]
    for r in reqs:
        sched.add_request(r)
    p = step(sched, 0.0)
    assert p.new_request_ids == [reqs[0].request_id, reqs[1].request_id]
    now, preempted = 1.0, 0
    while reqs[0].status.value != "finished":
        p = step(sched, now)
        preempted += len(p.preempted_request_ids)
        assert reqs[2].request_id not in p.new_request_ids
        now += 1.0
    assert preempted == 0
    p = step(sched, now)  # both finished together: the third is admitted now
    assert reqs[2].request_id in p.new_request_ids


def test_on_demand_blocks_preempt_where_the_reservation_would_not():
    kv = PagedKVManager(10, 4)
    sched = scheduler(kv, SchedulingRule())
    reqs = [make_request(8, 12) for _ in range(3)]
    for r in reqs:
        sched.add_request(r)
    p = step(sched, 0.0)
    assert len(p.new_request_ids) == 3  # 6 blocks now; they outgrow the 10 later
    preempted = sum(len(step(sched, float(t)).preempted_request_ids) for t in range(1, 12))
    assert preempted > 0


def test_reserved_requests_are_admitted_unchunked_when_only_the_prompt_fits_the_budget():
    # Item 8: without chunked prefill a request whose prompt + output exceeds the token budget is refused only
    # when a recompute could need it; with the whole output reserved nothing is recomputed.
    kv = PagedKVManager(100, 4)
    reserved = scheduler(kv, SchedulingRule(whole_output_reservation=True), budget=16, chunked=False)
    r = make_request(10, 20)
    assert reserved.add_request(r)
    plain = scheduler(PagedKVManager(100, 4), SchedulingRule(), budget=16, chunked=False)
    r2 = make_request(10, 20)
    assert not plain.add_request(r2) and "max_num_batched_tokens" in r2.reject_reason


def test_cuda_graph_padding_prices_the_next_captured_size():
    sched = scheduler(PagedKVManager(64, 4), SchedulingRule(cuda_graph_batch_sizes=(1, 2, 4, 8)))
    reqs = [make_request(3, 10) for _ in range(3)]
    for r in reqs:
        sched.add_request(r)
    step(sched, 0.0)
    p = step(sched, 1.0)
    assert p.num_decode_seqs == 4 and p.num_padding_seqs == 1
    assert p.decode_context_tokens == 3 * 4 + 1  # three real decodes of 4 tokens, one padding token
    sizes = np.array([1, 2, 4, 8], dtype=np.int64)
    assert [padded_batch(sizes, n) for n in (1, 3, 5, 8, 9)] == [1, 4, 8, 8, 9]


def test_new_token_ratio_decays_to_its_floor_and_gates_admission():
    assert new_token_ratio(0.7, 0.098, 600, 0) == 0.7
    assert new_token_ratio(0.7, 0.098, 600, 300) == pytest.approx(0.399)
    assert new_token_ratio(0.7, 0.098, 600, 10_000) == 0.098
    # 100 free tokens, running requests expected to write 100 more at ratio 0.5: 50 reserved; a request of 25
    # prompt tokens and 20 output needs 25 + 20 = 45 < 50: admitted (its own output is counted whole, not at the
    # ratio); one of 30 + 20 = 50 is not (SGLang refuses at total_tokens >= rem_total_tokens).
    assert ratio_admits(100.0, 100.0, 0.0, 25, 20, 0.5, 4096)
    assert not ratio_admits(100.0, 100.0, 0.0, 30, 20, 0.5, 4096)
    # what an earlier admission in the same step adds (its prompt's KV is already out of the free tokens), and the clip
    assert not ratio_admits(100.0, 100.0, 10.0, 25, 20, 0.5, 4096)
    assert ratio_admits(10_000.0, 0.0, 0.0, 10, 9_000, 0.5, 4096)  # 10 + 4096 < 10,000
    # an admitted request adds its clipped output when its prompt is computed whole, nothing when it was cut
    assert ratio_admitted_tokens(30, 30, 20, 4096) == 20.0
    assert ratio_admitted_tokens(30, 8, 20, 4096) == 0.0
    assert ratio_admitted_tokens(30, 30, 9_000, 4096) == 4096.0


@given(remaining=st.lists(st.integers(0, 20_000), max_size=300), free=st.integers(0, 2_000_000),
       admitted=st.floats(0, 1e6), prompt=st.integers(1, 10_000), output=st.integers(0, 20_000),
       ratio=st.floats(0.0, 1.5), clip=st.sampled_from([1, 7, 4096, 100_000]))
def test_the_ratio_bound_admits_only_what_the_count_admits(remaining, free, admitted, prompt, output, ratio, clip):
    # The compiled core counts the running requests' future tokens only when the bound refuses, so the bound
    # admitting must imply the count admits, in floats as the core computes them.
    counted = float(clipped_outputs_sum(np.array(remaining, dtype=np.int64), clip))
    bound = running_future_bound(len(remaining), max(remaining, default=0), clip)
    assert bound >= counted
    if ratio_admits(float(free), bound, admitted, prompt, output, ratio, clip):
        assert ratio_admits(float(free), counted, admitted, prompt, output, ratio, clip)
    # with none running the bound is the count, nothing
    assert running_future_bound(0, max(remaining, default=0), clip) == 0.0


def test_new_token_ratio_holds_back_a_request_the_blocks_alone_would_admit():
    # 40 slots (page size 1). a: 10 prompt + 20 output is running; at ratio 0.7 it reserves 19 x 0.7 = 13.3 tokens
    # more, so 40 - 11 held - 13.3 = 15.7 are free in SGLang's estimate; b (10 + 20 = 30) must wait.
    kv = PagedKVManager(40, 1)
    sched = scheduler(kv, SchedulingRule(mixed_batches=False, new_token_ratio=NewTokenRatio(0.7, 0.7, 600)))
    a, b = make_request(10, 20), make_request(10, 20)
    sched.add_request(a)
    step(sched, 0.0)
    sched.add_request(b)
    p = step(sched, 1.0)
    assert not p.prefill_request_ids and p.num_decode_seqs == 1
    plain = scheduler(PagedKVManager(40, 1), SchedulingRule(mixed_batches=False))
    a2, b2 = make_request(10, 20), make_request(10, 20)
    plain.add_request(a2)
    step(plain, 0.0)
    plain.add_request(b2)
    assert step(plain, 1.0).prefill_request_ids == [b2.request_id]



def test_an_admission_counts_the_whole_outputs_admitted_before_it_in_the_same_step():
    # 100 slots (page size 1), nothing running. a (10 prompt, 40 output): 100 > 10 + 40, admitted; its prompt takes
    # 10 slots and its output is counted in full (40), so b (10 + 40) meets 90 - 40 = 50, not more: b waits
    # (at the ratio, as before this rule was read again, b was admitted: 90 - 28 > 38).
    sched = scheduler(PagedKVManager(100, 1), SchedulingRule(mixed_batches=False,
                                                             new_token_ratio=NewTokenRatio(0.7, 0.7, 600)))
    a, b = make_request(10, 40), make_request(10, 40)
    sched.add_request(a)
    sched.add_request(b)
    assert step(sched, 0.0).prefill_request_ids == [a.request_id]

# --- TurboMind's context pass (LMDeploy 0.1.0a1, LlamaBatch.cc: ContextDecode, then Generate) -------------------

CONTEXT = SchedulingRule(context_pass=True)


def test_a_context_pass_computes_the_prompt_but_its_last_token_and_the_decode_pass_gives_the_first_token():
    # 16 blocks of 4 slots, no token budget to speak of. a: 6 prompt tokens, 3 output tokens.
    kv = PagedKVManager(16, 4)
    sched = scheduler(kv, CONTEXT, budget=1000, chunked=False)
    a = make_request(6, 3)
    sched.add_request(a)
    p = step(sched, 0.0)  # the context pass: tokens 1..5 alone, no output
    assert p.prefill_request_ids == [a.request_id] and p.prefill_chunk_tokens == [5] and p.num_decode_seqs == 0
    assert p.num_sampled_seqs == 0 and a.num_computed_tokens == 5 and a.num_output_tokens == 0
    assert kv.num_free_blocks == 16 - 2  # blocks for the 5 tokens computed
    b = make_request(5, 3)
    sched.add_request(b)
    p = step(sched, 1.0)  # the decode pass: a's last prompt token gives its first output; b waits for the next
    assert p.prefill_request_ids == [a.request_id] and p.prefill_chunk_tokens == [1]
    assert p.prefill_context_tokens == [5] and p.new_request_ids == [] and p.num_sampled_seqs == 1
    assert a.num_output_tokens == 1 and a.num_computed_tokens == 6
    p = step(sched, 2.0)  # b's context pass (4 tokens); a's decode waits
    assert p.prefill_request_ids == [b.request_id] and p.prefill_chunk_tokens == [4] and p.num_decode_seqs == 0
    sched.tracker.sync(a)
    assert a.num_output_tokens == 1
    p = step(sched, 3.0)  # the decode pass: a decodes, b's last prompt token gives its first output
    assert p.prefill_request_ids == [b.request_id] and p.prefill_chunk_tokens == [1] and p.num_decode_seqs == 1
    sched.tracker.sync(a)
    assert a.num_output_tokens == 2 and b.num_output_tokens == 1
    p = step(sched, 4.0)  # nothing waits: a decode-only step (an iteration without a context pass)
    assert not p.prefill_request_ids and p.num_decode_seqs == 2


def test_one_context_pass_takes_every_prompt_the_slots_and_blocks_allow():
    # max_batch_size 3 slots: three of four waiting prompts go through one context pass, with no token budget
    # between them (TurboMind splits them into sub-batches of max_context_token_num tokens, passes of one step here)
    kv = PagedKVManager(64, 4)
    sched = scheduler(kv, CONTEXT, budget=1000, max_num_seqs=3, chunked=False)
    reqs = [make_request(n, 4) for n in (9, 17, 4, 7)]
    for r in reqs:
        sched.add_request(r)
    p = step(sched, 0.0)
    assert p.new_request_ids == [r.request_id for r in reqs[:3]]
    assert p.prefill_chunk_tokens == [8, 16, 3] and p.num_decode_seqs == 0
    assert kv.num_free_blocks == 64 - (2 + 4 + 1)
    p = step(sched, 1.0)
    assert p.prefill_chunk_tokens == [1, 1, 1] and p.num_sampled_seqs == 3 and p.new_request_ids == []


def test_a_one_token_remainder_is_computed_in_the_context_pass():
    assert [context_pass_chunk(n) for n in (1, 2, 3, 2048)] == [1, 1, 2, 2047]
    sched = scheduler(PagedKVManager(16, 4), CONTEXT, budget=1000, chunked=False)
    a = make_request(1, 3)
    sched.add_request(a)
    p = step(sched, 0.0)
    assert p.prefill_chunk_tokens == [1] and p.num_sampled_seqs == 1 and a.num_output_tokens == 1


def test_out_of_blocks_the_context_pass_preempts_the_latest_and_recomputes_its_tokens_but_the_last():
    # 6 blocks of 4 slots: two requests of 8 prompt tokens take 2 blocks each in their context pass (7 tokens) and
    # grow; the later one is preempted when the earlier needs a block, and comes back through a context pass of
    # its prompt and output but the last token.
    kv = PagedKVManager(6, 4)
    sched = scheduler(kv, CONTEXT, budget=1000, chunked=False)
    a, b = make_request(8, 12), make_request(8, 12)
    sched.add_request(a)
    sched.add_request(b)
    p = step(sched, 0.0)
    assert p.prefill_chunk_tokens == [7, 7]
    now, victim_plan = 1.0, None
    while victim_plan is None:
        assert now < 100, "no preemption within 100 steps"
        p = step(sched, now)
        now += 1.0
        if p.preempted_request_ids:
            victim_plan = p
    assert victim_plan.preempted_request_ids == [b.request_id]
    generated = b.num_output_tokens
    p = None
    while a.status.value != "finished":
        assert now < 200, "a never finished"
        p = step(sched, now)
        now += 1.0
        assert b.request_id not in p.new_request_ids or p.prefill_chunk_tokens == [8 + generated - 1]
    while b.request_id not in sched.running:
        assert now < 300, "b was never readmitted"
        p = step(sched, now)
        now += 1.0
    assert p.new_request_ids == [b.request_id] and p.prefill_chunk_tokens == [8 + generated - 1]
    assert p.num_decode_seqs == 0


def test_a_step_may_be_prefill_only_without_mixed_batches_or_with_the_context_pass():
    assert not SchedulingRule().prefill_only_steps  # vLLM V1: prefill chunks always ride with the decodes
    assert SchedulingRule(mixed_batches=False).prefill_only_steps  # SGLang, vLLM V0 without chunked prefill
    assert SchedulingRule(context_pass=True).prefill_only_steps  # TurboMind 0.1's context pass
    assert not SchedulingRule(decode_steps_per_schedule=8, whole_output_reservation=True).prefill_only_steps


# --- TurboMind 0.12+'s context limit (context_token_resource.h: max_context_token_num, session_len) -----------

def test_the_prompts_prefilling_in_a_step_hold_at_most_the_context_limit_each_counted_whole():
    from sim.sched.rules import context_charge, context_fits
    assert [context_charge(40, chunk, starts) for chunk, starts in ((1, False), (2, False), (1, True))] == [0, 40, 40]
    assert context_fits(0, 500, 100) and context_fits(60, 40, 100) and not context_fits(61, 40, 100)
    assert context_fits(10_000, 10_000, 0)  # 0: no limit
    # limit 40 tokens of context; budget 64, chunked. a: 30 prompt tokens, b: 20, c: 8.
    sched = scheduler(PagedKVManager(64, 4), SchedulingRule(prefill_context_tokens=40), budget=64)
    a, b, c = make_request(30, 3), make_request(20, 3), make_request(8, 3)
    for r in (a, b, c):
        sched.add_request(r)
    p = step(sched, 0.0)  # a charges 30; b's 20 would make 50: b waits, and c behind it (arrival order)
    assert p.new_request_ids == [a.request_id] and p.prefill_chunk_tokens == [30]
    p = step(sched, 1.0)  # a decodes (charges nothing); b (20) and c (8) start: 28
    assert p.new_request_ids == [b.request_id, c.request_id] and p.num_decode_seqs == 1
    # without the limit all three start at once
    free = scheduler(PagedKVManager(64, 4), SchedulingRule(), budget=64)
    for r in (make_request(30, 3), make_request(20, 3), make_request(8, 3)):
        free.add_request(r)
    assert len(step(free, 0.0).new_request_ids) == 3


def test_a_prompt_longer_than_the_context_limit_still_runs_alone_and_its_chunks_charge_it_whole():
    # limit 40; a: 100 prompt tokens in chunks of the budget 32 (each chunk charges all 100: the step's first always
    # runs); b (10 tokens) waits until a's prompt is done, then starts beside a's decode
    sched = scheduler(PagedKVManager(64, 4), SchedulingRule(prefill_context_tokens=40), budget=32)
    a, b = make_request(100, 3), make_request(10, 3)
    sched.add_request(a)
    sched.add_request(b)
    chunks = [step(sched, float(t)).prefill_chunk_tokens for t in range(4)]
    assert chunks == [[32], [32], [32], [4]]
    p = step(sched, 4.0)
    assert p.new_request_ids == [b.request_id] and p.num_decode_seqs == 1
