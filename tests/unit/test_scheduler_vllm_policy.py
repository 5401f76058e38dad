"""ContinuousScheduler against vLLM V1's policy (vllm/v1/core/sched/scheduler.py), the one the
fidelity harness compares with: running requests first, then waiting ones in arrival order, prefills
chunked within max_num_batched_tokens, the most recently admitted running request preempted first,
and a waiting request admitted only if blocks for all its tokens are free (scheduler_reserve_full_isl)."""

from helpers import make_request

from sim.kv.paged import PagedKVManager
from sim.sched.continuous import ContinuousScheduler


def chunked(kv, budget, max_num_seqs=8):
    return ContinuousScheduler(kv, max_num_seqs=max_num_seqs, max_num_batched_tokens=budget,
                               chunked_prefill=True, max_model_len=4096)


def step(sched, now):
    plan = sched.schedule(now)
    sched.update_from_output(plan, now + 1.0)
    return plan


def test_running_first_then_waiting_in_arrival_order_with_one_partial_chunk():
    sched = chunked(PagedKVManager(64, 4), budget=10)
    d1, d2 = make_request(3, 10), make_request(3, 10)
    sched.add_request(d1)
    sched.add_request(d2)
    step(sched, 0.0)  # both prefill (6 tokens) and sample their first token: now decoding
    w1, w2, w3 = make_request(5, 10), make_request(5, 10), make_request(5, 10)
    for r in (w1, w2, w3):
        sched.add_request(r)
    p = step(sched, 1.0)
    # 2 decodes, then w1 whole (5), then w2 gets the 3 tokens left; w3 waits.
    assert p.num_decode_seqs == 2
    assert p.prefill_request_ids == [w1.request_id, w2.request_id] and p.prefill_chunk_tokens == [5, 3]
    assert p.num_tokens == 10
    p = step(sched, 2.0)
    # Running first: 3 decodes (w1 now decodes) and w2's remaining 2 tokens, before w3 is admitted.
    assert p.num_decode_seqs == 3
    assert p.prefill_request_ids == [w2.request_id, w3.request_id]
    assert p.prefill_chunk_tokens == [2, 5] and p.prefill_context_tokens == [3, 0]
    assert p.num_tokens == 10


def test_most_recently_admitted_is_preempted_first_and_goes_to_the_head_of_the_queue():
    # 16 blocks of 2 slots; three prompts of 4 tokens (2 blocks each) admitted a, b, c (max_num_seqs 3);
    # a fourth waits. They grow in step until all three need a 6th block: 18 > 16.
    kv = PagedKVManager(16, 2)
    sched = chunked(kv, budget=64, max_num_seqs=3)
    a, b, c, late = (make_request(4, 10) for _ in range(4))
    for r in (a, b, c, late):
        sched.add_request(r)
    p = step(sched, 0.0)
    assert p.prefill_request_ids == [a.request_id, b.request_id, c.request_id]
    now, victims = 1.0, []
    while not victims:
        p = step(sched, now)
        victims, now = p.preempted_request_ids, now + 1.0
    assert victims == [c.request_id]  # admitted last, preempted first, though a needed the block too
    assert list(sched.waiting)[:2] == [c, late]  # ahead of the request that never ran
    assert a.num_preemptions == b.num_preemptions == 0


def test_admission_needs_blocks_for_the_whole_prompt_not_just_its_first_chunk():
    # 8 blocks of 4 slots. A (prompt 20, 10 outputs) ends holding 29 tokens = all 8 blocks.
    kv = PagedKVManager(8, 4)
    sched = chunked(kv, budget=8)
    a = make_request(20, 10)
    sched.add_request(a)
    now = 0.0
    while a.num_output_tokens == 0:  # chunks 8, 8, 4: first token sampled
        step(sched, now)
        now += 1.0
    b = make_request(16, 2)
    sched.add_request(b)
    p = step(sched, now)
    # A's decode takes its 6th block, leaving 2: enough for B's first 7-token chunk (2 blocks) but not
    # for its whole 16-token prompt (4 blocks), so vLLM V1 keeps B waiting rather than thrash.
    assert p.num_decode_seqs == 1 and b.request_id not in p.prefill_request_ids
    assert kv.num_free_blocks == 2 and list(sched.waiting) == [b]
    plans = []
    while sched.running or sched.waiting:
        now += 1.0
        plans.append(step(sched, now))
    assert not any(p.preempted_request_ids for p in plans)
    assert a.num_preemptions == b.num_preemptions == 0
    assert b.first_scheduled_s == a.finish_s  # admitted in the step right after A's last
    assert kv.num_free_blocks == 8


def capped(kv, budget, cap, when_alone=True):
    from sim.sched.rules import SchedulingRule
    return ContinuousScheduler(kv, max_num_seqs=8, max_num_batched_tokens=budget, chunked_prefill=True,
                               max_model_len=4096,
                               rule=SchedulingRule(max_prefill_chunk_tokens=cap,
                                                   prefill_chunk_cap_when_alone=when_alone))


def test_long_prefill_token_threshold_caps_each_prompts_chunk_running_or_admitted():
    # vLLM V1's --long-prefill-token-threshold 30 under a 100-token budget: each prompt computes at most 30 tokens a
    # step, so three prompts of 70 share the budget (30 + 30 + 30) instead of the first taking 70 and the second 30
    sched = capped(PagedKVManager(256, 4), budget=100, cap=30)
    a, b, c = (make_request(70, 5) for _ in range(3))
    for r in (a, b, c):
        sched.add_request(r)
    p = step(sched, 0.0)
    assert p.prefill_request_ids == [a.request_id, b.request_id, c.request_id] and p.prefill_chunk_tokens == [30] * 3
    p = step(sched, 1.0)  # running first, each capped again: 30, 30, 30 of the 40 each has left
    assert p.prefill_chunk_tokens == [30] * 3 and p.prefill_context_tokens == [30] * 3
    p = step(sched, 2.0)  # the last 10 each, and each samples its first token
    assert p.prefill_chunk_tokens == [10] * 3 and p.num_sampled_seqs == 3
    uncapped = chunked(PagedKVManager(256, 4), budget=100)
    for r in (make_request(70, 5) for _ in range(3)):
        uncapped.add_request(r)
    assert step(uncapped, 0.0).prefill_chunk_tokens == [70, 30]


def test_from_vllm_0_31_the_threshold_leaves_a_lone_request_uncapped():
    # "When it is the only request there is nobody to starve, so let it use the whole budget" (v0.31.0)
    lone = capped(PagedKVManager(256, 4), budget=100, cap=30, when_alone=False)
    lone.add_request(make_request(70, 5))
    assert step(lone, 0.0).prefill_chunk_tokens == [70]
    two = capped(PagedKVManager(256, 4), budget=100, cap=30, when_alone=False)
    for r in (make_request(70, 5), make_request(70, 5)):
        two.add_request(r)
    assert step(two, 0.0).prefill_chunk_tokens == [30, 30]
    always = capped(PagedKVManager(256, 4), budget=100, cap=30)
    always.add_request(make_request(70, 5))
    assert step(always, 0.0).prefill_chunk_tokens == [30]


def test_the_adaptive_threshold_floors_the_cap_at_the_budgets_fair_share():
    # vLLM 0.31+ --long-prefill-token-threshold-adaptive: max(threshold, max_num_batched_tokens // requests running or
    # waiting): 2 requests under a 100-token budget may compute 50 each, though the threshold says 30
    from sim.sched.rules import SchedulingRule
    rule = SchedulingRule(max_prefill_chunk_tokens=30, prefill_chunk_cap_when_alone=False,
                          prefill_chunk_cap_fair_share=True)
    sched = ContinuousScheduler(PagedKVManager(256, 4), max_num_seqs=8, max_num_batched_tokens=100,
                                chunked_prefill=True, max_model_len=4096, rule=rule)
    for r in (make_request(70, 5), make_request(70, 5)):
        sched.add_request(r)
    assert step(sched, 0.0).prefill_chunk_tokens == [50, 50]
    four = ContinuousScheduler(PagedKVManager(256, 4), max_num_seqs=8, max_num_batched_tokens=100,
                               chunked_prefill=True, max_model_len=4096, rule=rule)
    for r in (make_request(70, 5) for _ in range(4)):
        four.add_request(r)
    assert step(four, 0.0).prefill_chunk_tokens == [30, 30, 30, 10]  # 100 // 4 = 25 < 30: the threshold holds
