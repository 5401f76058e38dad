"""Lockstep data-parallel ranks (sim/core/lockstep.py): hand-computed schedules of ranks that step together,
padded to the busiest rank's tokens, running dummy forwards until a check finds no work anywhere."""

import numpy as np
import pytest

from helpers import run_refused
from sim.config.files import validate_scenario
from sim.core.engine import Replica, Simulation
from sim.core.lockstep import (LockstepRank, dummy_forward_tokens, dummy_plan, lockstep_group, padded_plan,
                               padding_tokens)
from sim.core.router import make_router
from sim.core.step_plan import StepPlan, linear_tokens
from sim.cost.roofline import StepCost
from sim.kv.paged import PagedKVManager
from sim.results import steps_frame
from sim.run import simulate
from sim.sched.continuous import ContinuousScheduler


class TokenCost:
    """0.25 s a token through the model, padding included (exact binary fractions)."""

    def __init__(self):
        self.priced: list[StepPlan] = []

    def step_cost(self, plan):
        self.priced.append(plan)
        return StepCost(0.25 * plan.num_tokens, 0.0, 0.0)


def run(arrival_s, prompts, outputs, lockstep=True, pad_tokens=True, idle_check_steps=32, pad_prefill_steps=True):
    cost = TokenCost()
    ranks = []
    for i in range(2):
        scheduler = ContinuousScheduler(PagedKVManager(num_blocks=64, block_size=4), max_num_seqs=8,
                                        max_num_batched_tokens=64, chunked_prefill=False, max_model_len=64)
        ranks.append((LockstepRank if lockstep else Replica)(i, scheduler, cost))
    group = (lockstep_group(ranks, pad_tokens, idle_check_steps, pad_prefill_steps=pad_prefill_steps)
             if lockstep else None)
    sim = Simulation(ranks, make_router("round_robin", 0), arrival_s=np.array(arrival_s, dtype=float),
                     input_tokens=np.array(prompts), output_tokens=np.array(outputs))
    sim.run()
    return sim, cost, group


def test_a_step_lasts_the_busiest_ranks_and_the_idle_one_is_padded_to_it():
    # rank 0: a prompt of 8 tokens; rank 1: one of 2; 3 output tokens each (the prefill samples the first).
    sim, cost, group = run([0.0, 0.0], [8, 2], [3, 3])
    assert list(sim.requests.first_token_s) == [2.0, 2.0]  # both ranks run 8 tokens: 8 x 0.25
    assert list(sim.requests.finish_s) == [2.5, 2.5]  # two decode steps of one token each
    steps = steps_frame(sim.steps.arrays())
    first = steps[steps.start_s == 0.0].sort_values("replica")
    assert list(first.num_prefill_tokens) == [8, 2]
    assert [plan.num_padding_tokens for plan in cost.priced[:2]] == [0, 6]  # rank 1's prompt padded to 8 tokens
    assert list(first.num_padding_seqs) == [0, 0]  # padding tokens are no sequences (the summary counts them)
    # ... and then both ranks' one-token dummy forwards to the wave's check at step 32
    assert group.num_padding_tokens == 6 + 2 * 29 and steps.num_decode_seqs.sum() == 4
    assert list(first.duration_s) == [2.0, 2.0]
    # alone, rank 1's request would have its first token after its own 2 tokens
    alone, _, _ = run([0.0, 0.0], [8, 2], [3, 3], lockstep=False)
    assert list(alone.requests.first_token_s) == [2.0, 0.5]


def test_without_padding_each_rank_runs_its_own_tokens_but_waits_for_the_slowest():
    sim, cost, _ = run([0.0, 0.0], [8, 2], [3, 3], pad_tokens=False)
    assert list(sim.requests.first_token_s) == [2.0, 2.0]
    steps = steps_frame(sim.steps.arrays())
    assert steps.num_padding_seqs.sum() == 0  # and the ranks' own steps no padding tokens (a dummy forward: one)
    assert all(plan.num_padding_tokens == (0 if plan.num_seqs else 1) for plan in cost.priced)
    assert sorted(plan.num_tokens for plan in cost.priced[:2]) == [2, 8]


@pytest.mark.parametrize("pad_prefill_steps, first_padding", [(True, [0, 8]), (False, [0, 0])])
def test_sglang_s_ranks_pad_decode_steps_alone(pad_prefill_steps, first_padding):
    # In turn: rank 0 prompts of 8 and 2, rank 1 one of 2. The first step prefills (rank 0 10 tokens): padded only
    # where steps with a prefill are; the next decodes (rank 0 two sequences, rank 1 one): padded by one either way.
    sim, cost, _ = run([0.0, 0.0, 0.0], [8, 2, 2], [3, 3, 3], pad_prefill_steps=pad_prefill_steps,
                       idle_check_steps=1)
    assert [plan.num_padding_tokens for plan in cost.priced[:4]] == first_padding + [0, 1]
    assert sim.requests.first_token_s.tolist() == [2.5, 2.5, 2.5]  # the 10-token step either way


def test_a_group_padding_decode_steps_alone_runs_in_the_simpy_engine():
    result = simulate(validate_scenario(scenario({"pad_prefill_steps": False})))
    assert result.extras["engine_core"] == "python (a lockstep group that pads no step with a prefill)"


def test_idle_ranks_run_dummy_forwards_until_the_check_finds_no_work():
    # Rank 0: a prompt of 8 and 3 output tokens (steps 1-3, 0-2.5 s); rank 1 runs a dummy forward each of them,
    # padded to rank 0's tokens (8, 1, 1). Then both run dummy forwards of one token, 0.25 s each, and a request
    # reaching rank 1 at 3.1 (in turn) waits for the one in flight (3.0-3.25), then prefills with rank 0 padded to
    # it (step 7). The wave ends at its 32nd step, where the check finds nothing unfinished.
    sim, cost, group = run([0.0, 3.1], [8, 8], [3, 1])
    assert list(sim.requests.first_token_s) == [2.0, 3.25 + 2.0]
    assert group.num_steps == 32
    assert group.num_dummy_forwards == 6 + 4 + 2 * 25  # rank 1 in steps 1-6, rank 0 in 4-7, both in 8-32
    dummies = [plan for plan in cost.priced if not plan.prefill_request_ids and not plan.num_sampled_seqs]
    assert [plan.num_tokens for plan in dummies[:4]] == [8, 1, 1, 1]
    assert len(dummies) == group.num_dummy_forwards
    assert all(plan.num_seqs == 0 and plan.num_padding_tokens == plan.num_tokens for plan in dummies)
    # rank 1's 6 dummies (8, 1, 1, 1, 1, 1: padded to rank 0's prefill of 8, then its decodes of 1), rank 0's 4
    # (1, 1, 1, then 8 beside rank 1's prefill at step 7), both ranks' 25 x 1 after; step 7's prefill pads nothing
    assert group.num_padding_tokens == 13 + 11 + 50
    assert dummy_plan(8).num_sampled_seqs == 0


def test_after_the_wave_ends_a_request_starts_at_once():
    # The first wave: 3 steps of work, then dummy forwards of 0.25 s to the 32nd step: 2.5 + 29 x 0.25 = 9.75.
    sim, _, group = run([0.0, 20.0], [8, 8], [3, 3])
    assert list(sim.requests.first_token_s) == [2.0, 22.0]  # no wave was running at 20: no wait
    assert group.num_steps == 64  # each wave ran to its check: 32 steps
    assert group.num_dummy_forwards == 2 * (3 + 2 * 29)  # the idle rank in the 3 working steps, then both
    short, _, short_group = run([0.0, 20.0], [8, 8], [3, 3], idle_check_steps=1)
    assert short_group.num_steps == 6 and list(short.requests.first_token_s) == [2.0, 22.0]


def test_padding_tokens_are_the_shortfall_exactly_and_attend_nothing():
    plan = StepPlan(num_decode_seqs=2, decode_context_tokens=40, decode_query_tokens=3, num_sampled_seqs=2)
    padded = padded_plan(plan, 10)  # 6 tokens -> 4 short: 4 padding tokens (vLLM pads tokens, not sequences)
    assert (padded.num_decode_seqs, padded.num_padding_tokens, padded.num_tokens) == (2, 4, 10)
    assert (padded.decode_context_tokens, padded.num_sampled_seqs, padded.num_seqs) == (40, 2, 2)
    assert padded_plan(plan, 6) is plan


BURST = {"arrival": {"kind": "burst"}, "lengths": {"kind": "fixed", "input_tokens": 400, "output_tokens": 60}}


def scenario(lockstep=None, num_replicas=2, **hardware):
    raw = {"model": "llama-3.1-8b", "workload": BURST, "run": {"num_requests": 40},
           "hardware": {"gpu": "h100-sxm", "num_replicas": num_replicas, **hardware}}
    if lockstep is not None:
        raw["hardware"]["lockstep"] = lockstep
    return raw


def test_ranks_with_the_same_work_step_as_independent_replicas_would():
    # 40 equal requests at once, dealt in turn: both ranks hold the same batches every step, so nothing waits
    # or pads, and the records are those of two independent replicas (whichever engine ran them).
    independent = simulate(validate_scenario(scenario()))
    lockstep = simulate(validate_scenario(scenario({})))
    assert lockstep.extras["engine_core"] == "compiled"  # (tests/integration/test_compiled_core.py: the same records)
    # every step ran on both ranks; dummy forwards only after the work, to the check at a multiple of 32 steps
    steps = lockstep.summary["lockstep_steps"]
    assert steps % 32 == 0 and lockstep.summary["lockstep_dummy_forwards"] == 2 * (steps - len(lockstep.steps) // 2)
    columns = ["replica", "first_token_s", "finish_s", "output_tokens"]
    a, b = (r.requests.sort_values("request_id")[columns].reset_index(drop=True) for r in (independent, lockstep))
    assert a.equals(b)


def test_unequal_ranks_are_slower_together_than_apart():
    uneven = {"arrival": {"kind": "burst"}, "lengths": {"kind": "uniform", "input_min": 50, "input_max": 2000,
                                                        "output_min": 10, "output_max": 200}}
    apart = simulate(validate_scenario({**scenario(), "workload": uneven}))
    together = simulate(validate_scenario({**scenario({}), "workload": uneven}))
    assert together.summary["ttft_s_mean"] > apart.summary["ttft_s_mean"]
    assert together.requests.finish_s.max() >= apart.requests.finish_s.max()


@pytest.mark.parametrize("hardware, message", [
    ({"pipeline_parallel": 2}, "hardware: lockstep: not modelled with pipeline_parallel 2; allowed: "
                               "pipeline_parallel 1, or no lockstep"),
    ({"lockstep": {"idle_check_steps": 0}}, "hardware.lockstep.idle_check_steps"),
])
def test_what_lockstep_does_not_model_is_refused_in_one_line(tmp_path, hardware, message):
    raw = scenario({})
    raw["hardware"].update(hardware)
    assert message in run_refused(tmp_path, raw)  # one line, exit 2, nothing written (run_refused checks)


def test_a_mixture_of_experts_in_lockstep_runs_each_rank_s_experts_at_the_group_s_tokens():
    # each expert layer gathers every rank's forward, padding and dummy tokens too (vLLM's FusedMoE under DP)
    raw = scenario({})
    raw["model"] = "qwen3-30b-a3b"
    cost = TokenCost()
    result = simulate(validate_scenario(raw), cost_model=cost)
    assert result.extras["engine_core"] == "python (a lockstep group sharing a mixture of experts)"
    assert result.summary["num_finished"] == 40
    assert len(cost.priced) == 2 * result.summary["lockstep_steps"]
    for first, second in zip(cost.priced[::2], cost.priced[1::2]):
        assert first.num_expert_tokens == second.num_expert_tokens == first.num_tokens + second.num_tokens
    dense = scenario({})  # a dense model's ranks share nothing
    simulate(validate_scenario(dense), cost_model=cost)
    assert cost.priced[-1].num_expert_tokens == 0


@pytest.mark.parametrize("cost_model, message", [
    ({"kind": "roofline", "efficiencies": "learned"},
     "hardware.lockstep: cost_model roofline with efficiencies learned cannot price qwen3-30b-a3b's experts at the "
     "group's tokens apart from each rank's own; allowed: cost_model measured, or roofline with catalog efficiencies"),
])
def test_a_mixture_of_experts_group_needs_a_per_layer_pricer(tmp_path, cost_model, message):
    raw = scenario({})
    raw["model"] = "qwen3-30b-a3b"
    raw["cost_model"] = cost_model
    assert message in run_refused(tmp_path, raw)


def test_the_padding_rule_both_engines_call():
    # 10 tokens against the busiest rank's 17: 7 padding tokens; none without padding, none for the busiest
    assert padding_tokens(17, 10, True) == 7
    assert padding_tokens(17, 10, False) == 0 and padding_tokens(10, 17, True) == 0
    assert (dummy_forward_tokens(17, True), dummy_forward_tokens(17, False)) == (17, 1)
    assert dummy_forward_tokens(0, True) == 1  # no rank has a batch (a wave's idle step): one token each
    assert padded_plan(StepPlan(num_decode_seqs=4, decode_context_tokens=40), 9, pad_tokens=False).num_tokens == 4
    assert dummy_plan(17, pad_tokens=False).num_tokens == 1



def test_a_steps_linear_tokens_count_padding_once_beside_prefill_and_query_tokens():
    # 60 + 40 prefill tokens, 5 sequences verifying 3 drafts (4 query tokens each), 7 padding tokens: 127
    plan = StepPlan(prefill_request_ids=[1, 2], prefill_chunk_tokens=[60, 40], num_decode_seqs=5,
                    decode_query_tokens=4, num_padding_tokens=7)
    assert plan.num_tokens == linear_tokens(100, 5, 4, 7) == 127

LLAMA_8B_LINEAR_WEIGHTS = 32 * (4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 3 * 4096 * 14336)  # q, k+v, o, MLP


@pytest.mark.parametrize("cost_model", [None, {"kind": "measured"}, {"kind": "calibrated"},
                                        {"kind": "roofline", "efficiencies": "learned"},
                                        {"kind": "measured", "overhead": {"engine": "vllm-cudagraph"}}])
def test_padding_tokens_are_priced_through_the_linear_layers_alone(cost_model):
    # vLLM runs a rank's padding through the linear layers only: attention reads the real tokens' metadata and a
    # dummy run builds none (vllm/v1/attention/backends/flash_attn.py num_actual_tokens; gpu_model_runner.py
    # _dummy_run). So what padding adds to a step does not depend on what the real decodes attend, and its FLOPs
    # are the linear layers' 2 x weights a token (Llama-3.1-8B: 6,979,321,856 weights in them, by hand).
    from sim.run import make_cost_model
    raw = scenario()
    if cost_model is not None:
        raw["cost_model"] = cost_model
    model = make_cost_model(validate_scenario(raw))

    def added(context_per_seq, pad):
        plan = StepPlan(num_decode_seqs=16, decode_context_tokens=16 * context_per_seq, num_sampled_seqs=16)
        return model.step_cost(padded_plan(plan, 16 + pad)).time_s - model.step_cost(plan).time_s

    for pad in (48, 4000):
        assert added(100, pad) > 0.0
        assert added(100, pad) == pytest.approx(added(20_000, pad), rel=1e-9)
    dummy = model.step_cost(dummy_plan(4000))
    assert dummy.time_s == pytest.approx(added(100, 3999) + model.step_cost(dummy_plan(1)).time_s, rel=0.05)
    if cost_model is None:  # the roofline counts every FLOP: the linear layers' alone (no attention, no LM head)
        assert dummy.flops == 2 * LLAMA_8B_LINEAR_WEIGHTS * 4000
