"""The one entry point the CLI, the dashboard and the planner share: `simulate(scenario) -> Result`."""

from __future__ import annotations

from typing import Callable

import numpy as np

from sim.config.deployment import Deployment, resolve
from sim.config.schema import Scenario
from sim.core.engine import Replica, Simulation
from sim.core.router import make_router
from sim.cost.roofline import FixedCostModel, RooflineCostModel, SpeculativeCostModel
from sim.errors import ConfigError
from sim.kv.contiguous import ContiguousKVManager
from sim.kv.paged import PagedKVManager
from sim.results import Result, requests_frame, steps_frame, summarize
from sim.sched.scheduler import ContinuousScheduler, StaticScheduler
from sim.sched.speculative import SpeculativeDecodeBatch
from sim.workload.generate import Workload, generate_workload


def make_workload(scenario: Scenario, deployment: Deployment | None = None) -> Workload:
    run = scenario.run
    max_len = (deployment or resolve(scenario)).max_model_len
    return generate_workload(scenario.workload, seed=run.seed, num_requests=run.num_requests,
                             duration_s=run.duration_s, max_context=max_len)


def _roofline(scenario: Scenario, deployment: Deployment, model):
    spec, q = scenario.cost_model, scenario.quantization
    return RooflineCostModel(model, deployment.gpu, tensor_parallel=deployment.tensor_parallel,
                             weight_dtype=q.weights, kv_dtype=q.kv_cache, fp8_compute=q.fp8_compute,
                             # A calibrated target's draft model: the roofline at the GPU's defaults.
                             compute_efficiency=getattr(spec, "compute_efficiency", None),
                             memory_efficiency=getattr(spec, "memory_efficiency", None),
                             step_overhead_s=getattr(spec, "step_overhead_s", None))


def _calibrated(scenario: Scenario, deployment: Deployment):
    from sim.cost.profiles import (
        make_calibrated_cost_model,  # per-op or whole-step, as the profile says
    )
    q, kv = scenario.quantization, scenario.kv_cache
    return make_calibrated_cost_model(deployment.profile_dir, deployment.model,
                                      tensor_parallel=deployment.tensor_parallel, kv_layout=kv.layout,
                                      block_size=kv.block_size, gpu=deployment.gpu, weight_dtype=q.weights,
                                      kv_dtype=q.kv_cache)


def make_cost_model(scenario: Scenario, deployment: Deployment | None = None):
    deployment = deployment or resolve(scenario)
    spec = scenario.cost_model
    if spec.kind == "fixed":
        target = FixedCostModel(spec.prefill_s, spec.decode_s)
    elif spec.kind == "calibrated":
        target = _calibrated(scenario, deployment)
    else:
        target = _roofline(scenario, deployment, deployment.model)
    spec_dec = scenario.speculation
    if spec_dec is None:
        return target
    draft = deployment.draft_model
    if draft is not None and spec.kind == "fixed":
        raise ConfigError("speculation.draft_model: a fixed cost model needs draft_cost_ratio instead")
    if draft is not None:
        # The draft's steps carry no fixed engine overhead of their own: they run inside the target's step.
        draft_cost = _roofline(scenario, deployment, draft)
        draft_cost.step_overhead_s = 0.0
        return SpeculativeCostModel(target, draft=draft_cost, sync_overhead_fraction=spec_dec.sync_overhead_fraction)
    return SpeculativeCostModel(target, draft_cost_ratio=spec_dec.draft_cost_ratio,
                                sync_overhead_fraction=spec_dec.sync_overhead_fraction)


def _speculative_batch(scenario: Scenario, kv, replica_index: int):
    spec = scenario.speculation
    acceptance = spec.acceptance
    if acceptance.kind == "fixed":
        alpha = acceptance.alpha
        sampler = lambda rng: alpha  # noqa: E731
    else:
        a, b = acceptance.mean * acceptance.concentration, (1 - acceptance.mean) * acceptance.concentration
        sampler = lambda rng: rng.beta(a, b)  # noqa: E731
    paged = isinstance(kv, PagedKVManager)
    rng = np.random.default_rng(np.random.SeedSequence([scenario.run.seed, 13, replica_index]))
    return SpeculativeDecodeBatch(num_speculative_tokens=spec.num_speculative_tokens, alpha_sampler=sampler,
                                  ragged=spec.ragged, rng=rng, block_size=kv.block_size if paged else None,
                                  kv=kv if paged else None)


def make_scheduler(scenario: Scenario, replica_index: int = 0, deployment: Deployment | None = None):
    deployment = deployment or resolve(scenario)
    kv_spec, s = scenario.kv_cache, scenario.scheduler
    tokens = deployment.kv_capacity_tokens
    max_len = deployment.max_model_len
    if kv_spec.layout == "paged":
        num_blocks = tokens // kv_spec.block_size
        if num_blocks < 1:
            raise ConfigError(f"kv_cache.block_size: {kv_spec.block_size} is larger than the KV capacity "
                              f"of {tokens} tokens")
        kv = PagedKVManager(num_blocks, kv_spec.block_size, enable_prefix_caching=kv_spec.enable_prefix_caching)
    else:
        kv = ContiguousKVManager(tokens, kv_spec.reserve, max_len)
    if s.batching == "static":
        return StaticScheduler(kv, max_batch_size=s.max_batch_size, batch_timeout_s=s.batch_timeout_s,
                               max_model_len=max_len)
    tracker = _speculative_batch(scenario, kv, replica_index) if scenario.speculation else None
    swap_tokens = 0
    if kv_spec.preemption == "swap":
        swap_tokens = kv_spec.swap_space_bytes // deployment.kv_bytes_per_token_per_gpu
    return ContinuousScheduler(kv, max_num_seqs=s.max_num_seqs,
                               max_num_batched_tokens=deployment.max_num_batched_tokens,
                               chunked_prefill=s.chunked_prefill, max_model_len=max_len, tracker=tracker,
                               swap_capacity_tokens=swap_tokens,
                               sequences_per_request=deployment.sequences_per_request)


def simulate(scenario: Scenario, workload: Workload | None = None, *,
             progress: Callable[[float, int], None] | None = None, cost_model=None) -> Result:
    """Simulate a validated scenario; `workload` defaults to the one the scenario generates."""
    deployment = resolve(scenario)
    workload = workload if workload is not None else make_workload(scenario, deployment)
    replicas = [Replica(i, make_scheduler(scenario, i, deployment), cost_model or make_cost_model(scenario, deployment))
                for i in range(scenario.hardware.num_replicas)]
    run = scenario.run
    horizon = run.horizon_s if run.horizon_s is not None else run.duration_s
    closed = workload.closed_loop
    sim = Simulation(replicas, make_router(scenario.hardware.router, run.seed),
                     arrival_s=workload.arrival_s, input_tokens=workload.input_tokens,
                     output_tokens=workload.output_tokens, horizon_s=horizon,
                     closed_loop_users=closed.num_users if closed else 0,
                     think_time_s=closed.think_time_s if closed else 0.0, seed=run.seed,
                     prefix_ids=workload.prefix_ids if scenario.kv_cache.enable_prefix_caching else None,
                     prefix_unit_tokens=workload.prefix_unit_tokens, progress=progress)
    sim.run()
    requests = requests_frame(sim.requests)
    steps = steps_frame(sim.steps.arrays())
    elapsed = horizon if horizon is not None else sim.end_s
    summary = summarize(requests, steps, elapsed_s=elapsed, slo=scenario.slo, gpu=deployment.gpu,
                        in_system_area=sim.in_system_area,
                        num_generated=workload.num_requests)
    summary["kv_capacity_tokens"] = replicas[0].scheduler.kv.capacity_slots
    # Requests whose sampled lengths did not fit max_model_len and were cut: they ran shorter than asked.
    summary["num_requests_clipped"] = workload.num_clipped
    # The backlog: the longest queue any replica had (an overload shows here even when every request finishes).
    summary["max_num_waiting"] = int(steps["num_waiting"].max()) if len(steps) else 0
    summary["max_model_len"] = deployment.max_model_len
    swapped_tokens = int(steps["swap_in_tokens"].sum() + steps["swap_out_tokens"].sum())
    summary["swapped_bytes"] = swapped_tokens * deployment.kv_bytes_per_token
    kv_bytes_total = deployment.kv_bytes_per_token
    if scenario.kv_cache.enable_prefix_caching:
        stats = [r.scheduler.kv.prefix_cache_stats() for r in replicas]
        queried = sum(x.queried_tokens for x in stats)
        queried_blocks = sum(x.queried_blocks for x in stats)
        summary["prefix_cache_hit_rate_tokens"] = sum(x.hit_tokens for x in stats) / queried if queried else 0.0
        summary["prefix_cache_hit_rate_blocks"] = (sum(x.hit_blocks for x in stats) / queried_blocks
                                                   if queried_blocks else 0.0)
        summary["prefix_cache_evictions"] = sum(x.num_evictions for x in stats)
    # Memory saved by sharing (prefix hits, forked sequences): time average of token states stored
    # once but used by several sequences.
    w = steps["duration_s"]
    summary["kv_shared_bytes_mean"] = (float((steps["kv_shared_slots"] * w).sum() / w.sum()) * kv_bytes_total
                                       if len(steps) else 0.0)
    if scenario.speculation is not None:
        drafted = sum(r.scheduler.tracker.num_drafted for r in replicas)
        accepted = sum(r.scheduler.tracker.num_accepted_drafts for r in replicas)
        summary["draft_acceptance_rate"] = accepted / drafted if drafted else float("nan")
    return Result(scenario.name, scenario, requests, steps, summary,
                  extras={"cost_model": repr(replicas[0].cost_model), "scheduler": repr(replicas[0].scheduler)})
