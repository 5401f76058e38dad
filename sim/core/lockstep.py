"""Lockstep data parallelism in the event model: replicas that are one engine's data-parallel ranks.

Each rank is a replica (its own scheduler, KV cache and requests, routed to as any replica), but the ranks step
together, as vLLM's DPEngineCoreProc runs them (vllm/v1/engine/core.py run_busy_loop, read in 0.8.3-0.13.0;
the padding: vllm/v1/worker/gpu_model_runner.py get_dp_padding in 0.9.1-0.11.x, vllm/v1/worker/dp_utils.py
coordinate_batch_across_dp from 0.12.0; none before 0.9.1):

- before each forward the ranks all-reduce their token counts, and, unless the engine runs eager (no CUDA
  graphs), every rank runs the most of them: its own batch padded to the busiest rank's tokens. The all-reduce is
  a barrier, so a step lasts as long as the slowest rank's. The padding tokens pass through the linear layers and
  elementwise ops only (`StepPlan.num_padding_tokens`): attention reads the real tokens' metadata
  (vllm/v1/attention/backends/flash_attn.py `num_actual_tokens`), and none of them is sampled;
- while a wave runs, a rank with nothing scheduled runs a dummy forward (`execute_dummy_batch`: one token,
  padded likewise, no sampling, and no attention: `_dummy_run` builds no attention metadata outside a full CUDA
  graph, so the attention layers return at once); a step that pads or a dummy forward pays the engine's CPU terms
  per step, not per padding token (`sim.cost.overhead.with_overhead`);
- the wave ends only when the all-reduce of "any unfinished request anywhere", held every `idle_check_steps`
  steps of the wave (16, 24 or 32 by release), finds none: the ranks run dummy forwards until then. A request
  reaching an idle group starts a new wave on every rank.

A mixture of experts' ranks share its routed experts, spread over every rank's GPUs (vLLM's FusedMoE under
--data-parallel-size: moe tp x ep = ranks x tp; vllm/model_executor/layers/fused_moe/layer.py in 0.8.x,
fused_moe/config.py `FusedMoEParallelConfig.make` from 0.9.0): each expert layer gathers every rank's tokens, its
padding and dummy tokens too, runs them through the experts each GPU holds, and sends each rank its own back
(`sim.model.specs.ExpertGroup`). So each rank's step runs its experts at the group's tokens
(`StepPlan.num_expert_tokens`: the sum of every rank's forward), and everything else at its own; shared experts,
the router, attention, dense layers and the LM head run on the rank's own tokens (vLLM's DeepseekV2MoE computes
the shared experts before the dispatch; its TP group is the rank's own GPUs).

SGLang's data-parallel attention (--enable-dp-attention with --dp; sim/config/engines/sglang_dp_attention.py) runs
its ranks the same way, with three differences set by its preset: a step where some rank prefills runs unpadded
(`pad_prefill_steps` false: DpPaddingMode SUM_LEN), the ranks check for work anywhere every step (a forward runs
while any rank has one; `idle_check_steps` 1), and every layer's MLP, the dense layers' and the shared experts' too,
runs the group's gathered tokens over all its GPUs (`ExpertGroup.dense_over_group`).

One SimPy process steps the group: each rank schedules its own batch, each rank's step (or dummy forward) is
priced by its own cost model, the step lasts the longest of them, then each rank applies its own outcome. (A
mixture of experts' expert layers are barriers too: its group waits for the slowest rank at each layer, which
sums to the slowest whole step wherever one rank is the slowest in every layer; an approximation otherwise.) A rank's
step row lasts the group's step and counts its real work (its FLOPs and bytes include its padding); dummy forwards
have no row (`LockstepGroup.num_dummy_forwards` counts them, `num_padding_tokens` every padding token run).
The compiled core repeats this process decision by decision (sim/compiled/kernel.py `_group_event`), with the same
records (tests/integration/test_compiled_core.py), for a dense model: a mixture of experts' group runs here.
"""

from __future__ import annotations

import dataclasses

import simpy

from sim.core.engine import Replica, Simulation
from sim.core.step_plan import StepPlan
from sim.jit import njit

PROGRESS_EVERY_STEPS = 2048  # as often as the plain engine reports


# The padding rule, written once for both engines (the compiled core inlines these: sim/compiled/kernel.py).
@njit(cache=True)
def padding_tokens(most_tokens, own_tokens, pad_tokens):
    """The padding tokens a rank's step of `own_tokens` runs beside its batch: with `pad_tokens`, the shortfall to
    the group's `most_tokens` (vLLM's num_pad: max_tokens_across_dp - num_tokens); 0 without padding. They pass
    through the linear layers only (`StepPlan.num_padding_tokens`)."""
    short = most_tokens - own_tokens
    if not pad_tokens or short <= 0:
        return 0
    return short


@njit(cache=True)
def dummy_forward_tokens(most_tokens, pad_tokens):
    """The tokens of an idle rank's dummy forward: one, or with `pad_tokens` the group's most (`most_tokens`, 0
    when no rank has a batch: then one)."""
    return most_tokens if pad_tokens and most_tokens > 0 else 1


def padded_plan(plan: StepPlan, num_tokens: int, pad_tokens: bool = True) -> StepPlan:
    """`plan` beside `padding_tokens` to `num_tokens` tokens (none without `pad_tokens`)."""
    pad = padding_tokens(num_tokens, plan.num_tokens, pad_tokens)
    if pad == 0:
        return plan
    return dataclasses.replace(plan, num_padding_tokens=plan.num_padding_tokens + pad)


def dummy_plan(most_tokens: int, pad_tokens: bool = True) -> StepPlan:
    """An idle rank's dummy forward (`dummy_forward_tokens`): padding tokens alone, no sequence (vLLM's dummy run
    builds no attention metadata, so its attention layers compute nothing, and it samples nothing)."""
    return StepPlan(num_padding_tokens=dummy_forward_tokens(most_tokens, pad_tokens))


class LockstepGroup:
    """The ranks of one lockstep data-parallel engine and the process that steps them."""

    def __init__(self, ranks: list[LockstepRank], pad_tokens: bool, idle_check_steps: int,
                 experts_over_group: bool = False, pad_prefill_steps: bool = True):
        self.ranks = ranks
        self.pad_tokens = pad_tokens
        self.pad_prefill_steps = pad_prefill_steps  # False: a step where some rank prefills runs unpadded
        self.idle_check_steps = idle_check_steps
        self.experts_over_group = experts_over_group  # a mixture of experts: its experts run the group's tokens
        self.num_steps = 0  # forwards every rank ran together
        self.num_dummy_forwards = 0  # rank forwards with nothing scheduled
        self.num_padding_tokens = 0  # tokens the ranks ran as padding, dummy forwards' included

    def _wait_for_work(self, env: simpy.Environment, start: float):
        """Idle: wait until a request reaches any rank, or a rank's timed retry."""
        wake = env.event()
        for rank in self.ranks:
            rank.wakeup = wake
        retries = [s.next_wake_s for s in (r.scheduler for r in self.ranks)
                   if s.next_wake_s is not None and s.next_wake_s > start]
        yield (wake | env.timeout(min(retries) - start)) if retries else wake
        for rank in self.ranks:
            rank.wakeup = None

    def process(self, sim: Simulation, env: simpy.Environment):
        ranks = self.ranks
        draws = sim.step_draws
        perturb = sim.draw_functions[0] if draws is not None else None
        running = False  # a wave is running: every rank steps
        wave_steps = 0
        while sim.stopped_early_s is None:
            start = env.now
            plans = [rank.scheduler.schedule(start) for rank in ranks]
            if not running and all(plan is None for plan in plans):
                yield from self._wait_for_work(env, start)
                continue
            running = True
            waiting = [rank.scheduler.num_waiting for rank in ranks]
            most = max((plan.num_tokens for plan in plans if plan is not None), default=0)
            pad = self.pad_tokens and (self.pad_prefill_steps or not any(
                plan.num_prefill_tokens for plan in plans if plan is not None))
            runs = [dummy_plan(most, pad) if plan is None else padded_plan(plan, most, pad) for plan in plans]
            if self.experts_over_group:
                group_tokens = sum(run.num_tokens for run in runs)
                runs = [dataclasses.replace(run, num_expert_tokens=group_tokens) for run in runs]
            priced, costs, times = [], [], []
            for rank, plan, run in zip(ranks, plans, runs):
                if plan is None:
                    self.num_dummy_forwards += 1
                cost = rank.cost_model.step_cost(run)
                time_s = cost.time_s
                if draws is not None:
                    time_s = perturb(draws, time_s, rank.index, self.num_steps, run.num_prefill_tokens > 0)
                self.num_padding_tokens += run.num_padding_tokens
                priced.append(run)
                costs.append(cost)
                times.append(time_s)
            yield env.timeout(max(times))
            self.num_steps += 1
            for rank, plan, run, cost, num_waiting in zip(ranks, plans, priced, costs, waiting):
                if plan is None:
                    continue
                outcome = rank.scheduler.update_from_output(plan, env.now)
                sim.record_step(rank, run, outcome, start, env.now - start, num_waiting, cost.flops, cost.bytes)
                if outcome.finished:
                    sim.finish_requests(rank, outcome.finished, start)
            wave_steps += 1
            if wave_steps == self.idle_check_steps:  # the all-reduce of unfinished requests anywhere
                wave_steps = 0
                running = any(rank.num_outstanding for rank in ranks)
            if sim.stop_when is not None and sim.stop_when(sim):
                sim.stopped_early_s = env.now
            if sim.progress is not None and self.num_steps % PROGRESS_EVERY_STEPS == 0:
                sim.progress(env.now, sim.num_done)


class LockstepRank(Replica):
    """One data-parallel rank of a `LockstepGroup`: the first rank runs the group's process."""

    kind = "a lockstep data-parallel rank"

    def __init__(self, index: int, scheduler, cost_model):
        super().__init__(index, scheduler, cost_model)
        self.group: LockstepGroup | None = None  # set by `lockstep_group`

    def engine_processes(self, sim: Simulation, env: simpy.Environment) -> list:
        return [self.group.process(sim, env)] if self.group.ranks[0] is self else []


def lockstep_group(ranks: list[LockstepRank], pad_tokens: bool, idle_check_steps: int,
                   experts_over_group: bool = False, pad_prefill_steps: bool = True) -> LockstepGroup:
    """Join `ranks` into one group (each rank learns its group)."""
    group = LockstepGroup(ranks, pad_tokens, idle_check_steps, experts_over_group, pad_prefill_steps)
    for rank in ranks:
        rank.group = group
    return group
