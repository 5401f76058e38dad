"""The one entry point the CLI, the dashboard and the planner share: `simulate(scenario) -> Result`."""

from __future__ import annotations

from typing import Callable

import numpy as np

from sim.config.deployment import Deployment, resolve
from sim.config.disaggregation import pool_scenario, resolve_disaggregated
from sim.config.schema import Scenario
from sim.core.disaggregated import DisaggregatedSimulation, KVTransferLink
from sim.core.engine import Replica, Simulation
from sim.core.router import make_router
from sim.cost.roofline import FixedCostModel, RooflineCostModel, SpeculativeCostModel
from sim.errors import ConfigError
from sim.kv.contiguous import ContiguousKVManager
from sim.kv.paged import PagedKVManager
from sim.results import (
    DecodeRuns,
    FrontendCounters,
    ReplicaCounters,
    Result,
    disaggregated_requests_frame,
    disaggregation_metrics,
    measurement_window,
    requests_table,
    steps_frame,
    steps_table,
    summarize,
)
from sim.sched.continuous import ContinuousScheduler
from sim.sched.disagg_roles import DecodeRole, PrefillRole
from sim.sched.speculative import SpeculativeDecodeBatch
from sim.sched.static import StaticScheduler
from sim.workload.generate import Workload, generate_workload


def deployment_of(scenario: Scenario) -> Deployment:
    """The scenario resolved against the catalogs: the one place this module resolves one. Every builder below
    takes the `Deployment` it was given; only a caller holding a bare scenario (a test, the planner pricing one
    step) lets them come here. A disaggregated scenario's is its prefill pool's: its top-level hardware may
    not hold the model."""
    if scenario.hardware.disaggregation is not None:
        return resolve_disaggregated(scenario).prefill
    return resolve(scenario)


def make_workload(scenario: Scenario, deployment: Deployment | None = None) -> Workload:
    run = scenario.run
    max_len = (deployment or deployment_of(scenario)).max_model_len
    return generate_workload(scenario.workload, seed=run.seed, num_requests=run.num_requests,
                             duration_s=run.duration_s, max_context=max_len,
                             too_long=scenario.scheduler.too_long)


def _roofline(scenario: Scenario, deployment: Deployment, model):
    spec, q = scenario.cost_model, scenario.quantization
    # The target's experts (a pipeline stage's too) as the hardware splits them; a draft model's by TP alone.
    ep = 1 if model is deployment.draft_model else deployment.expert_parallel
    if getattr(spec, "efficiencies", "catalog") == "learned":
        from sim.cost.learned import LearnedRooflineCostModel
        given = _roofline_step_overhead(spec)
        return LearnedRooflineCostModel(model, deployment.gpu, tensor_parallel=deployment.tensor_parallel,
                                        weight_dtype=q.weights, kv_dtype=q.kv_cache, fp8_compute=q.fp8_compute,
                                        step_overhead_s=0.0 if given is None else given, expert_parallel=ep,
                                        all_reduce=scenario.hardware.all_reduce)
    return RooflineCostModel(model, deployment.gpu, tensor_parallel=deployment.tensor_parallel, expert_parallel=ep,
                             expert_group=None if model is deployment.draft_model else deployment.expert_group,
                             weight_dtype=q.weights, kv_dtype=q.kv_cache, fp8_compute=q.fp8_compute,
                             # A calibrated target's draft model: the roofline at the GPU's defaults.
                             compute_efficiency=getattr(spec, "compute_efficiency", None),
                             memory_efficiency=getattr(spec, "memory_efficiency", None),
                             step_overhead_s=_roofline_step_overhead(spec),
                             attention_kernel=scenario.attention.kernel)


def _roofline_step_overhead(spec) -> float | None:
    """The roofline's fixed step overhead: as given; 0 when an overhead model prices the engine instead."""
    given = getattr(spec, "step_overhead_s", None)
    if given is None and getattr(spec, "overhead", None) is not None:
        return 0.0
    return given


def _with_overhead(target, spec, deployment: Deployment):
    """The kernel model plus the engine's overhead outside its kernels, where the scenario asks for it, and the
    reads of weights kept in host memory, where it keeps some there (`EngineOverhead.weights_stream_s`)."""
    o = getattr(spec, "overhead", None)
    stream_s = deployment.weights_offloaded_bytes / deployment.gpu.host_link_bytes_per_s
    if o is None and not stream_s:
        return target
    from sim.cost.overhead import EngineOverheadCostModel, engine_overhead
    overhead = overhead_of(o) if o is not None else engine_overhead("none")
    if stream_s:
        from dataclasses import replace
        overhead = replace(overhead, weights_stream_s=stream_s)
    return EngineOverheadCostModel(target, overhead, deployment.model.num_layers)


def overhead_of(spec):
    """The engine overhead a scenario's `cost_model.overhead` section asks for: its engine's defaults, with each
    term it gives in their place."""
    from sim.cost.overhead import engine_overhead
    return engine_overhead(spec.engine, fitted_for=spec.fitted_for, per_step_s=spec.per_step_s,
                           per_seq_s=spec.per_seq_s, per_prefill_token_s=spec.per_prefill_token_s,
                           launch_per_layer_s=spec.launch_per_layer_s, overlap=spec.overlap,
                           graph_max_seqs=spec.graph_max_seqs, graph_prefill=spec.graph_prefill)


def _calibrated(scenario: Scenario, deployment: Deployment):
    from sim.cost.profiles import (
        make_calibrated_cost_model,  # per-op or whole-step, as the profile says
    )
    kv = scenario.kv_cache
    return make_calibrated_cost_model(deployment.profile_dir, deployment.model,
                                      tensor_parallel=deployment.tensor_parallel, kv_layout=kv.layout,
                                      block_size=kv.block_size, gpu=deployment.gpu, **_dtypes(scenario))


def _dtypes(scenario: Scenario) -> dict:
    """The scenario's quantization as the measured cost models take it: what their measurements must match
    (`sim.cost.profile_meta.measured_in`, the one translation the profile choice uses too)."""
    from sim.cost.profile_meta import measured_in
    return measured_in(scenario.quantization.model_dump())


def _measured(scenario: Scenario, deployment: Deployment):
    from sim.cost.measured import make_measured_cost_model
    spec = scenario.cost_model
    return make_measured_cost_model(deployment.model, deployment.gpu, tensor_parallel=deployment.tensor_parallel,
                                    engine=spec.engine, step_overhead_s=spec.step_overhead_s,
                                    gpu_data=spec.gpu_data, on_missing=spec.on_missing, tables=spec.tables,
                                    unmeasured_dtype=spec.unmeasured_dtype, **_dtypes(scenario),
                                    expert_parallel=deployment.expert_parallel, expert_group=deployment.expert_group,
                                    moe_routing=spec.moe_routing,
                                    moe_kernel=scenario.quantization.moe_kernel,
                                    all_reduce=scenario.hardware.all_reduce,
                                    attention_backend=scenario.attention.backend)


def make_cost_model(scenario: Scenario, deployment: Deployment | None = None):
    deployment = deployment or deployment_of(scenario)
    spec = scenario.cost_model
    from sim.cost.attention_support import check_attention_kernel
    check_attention_kernel(scenario, deployment)  # a measured cost model prices only the kernel it measured
    if spec.kind == "fixed":
        target = FixedCostModel(spec.prefill_s, spec.decode_s)
    elif spec.kind == "calibrated":
        target = _calibrated(scenario, deployment)
    elif spec.kind == "measured":
        target = _measured(scenario, deployment)
    else:
        target = _roofline(scenario, deployment, deployment.model)
    target = _with_overhead(target, spec, deployment)
    if deployment.pipeline_parallel > 1:
        return _pipeline_cost_model(scenario, deployment, target)
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
        return SpeculativeCostModel(target, draft=draft_cost, sync_overhead_fraction=spec_dec.sync_overhead_fraction,
                                    draft_tree_width=spec_dec.draft_tree_width)
    return SpeculativeCostModel(target, draft_cost_ratio=spec_dec.draft_cost_ratio,
                                sync_overhead_fraction=spec_dec.sync_overhead_fraction,
                                draft_tree_width=spec_dec.draft_tree_width)


def _pipeline_cost_model(scenario: Scenario, deployment: Deployment, whole):
    """One cost model per stage: the roofline of the stage's own layers (LM head on the last stage; the engine's
    CPU time per step is the driver's, before the first stage), or for other cost models `whole`'s step
    apportioned by layer share (their overheads included)."""
    from dataclasses import replace

    from sim.cost.pipeline import (
        FixedDriverTime,
        LayerShareCostModel,
        PipelineCostModel,
        stage_model_spec,
    )
    spec, model, layers = scenario.cost_model, deployment.model, deployment.stage_layers
    driver = None
    if spec.kind == "roofline":
        stages = []
        for i, n in enumerate(layers):
            stage = _roofline(scenario, deployment, stage_model_spec(model, layers, i))
            driver = FixedDriverTime(stage.step_overhead_s)
            stage.step_overhead_s = 0.0  # the driver's CPU time, paid once per micro-batch before the first stage
            stage.include_lm_head = i == len(layers) - 1
            if spec.overhead is not None:
                from sim.cost.overhead import EngineOverheadCostModel
                o = spec.overhead
                driver = overhead_of(o)
                # Each stage's workers launch their own layers' kernels; the CPU terms are the driver's.
                launch_only = replace(driver, per_step_s=0.0, per_seq_s=0.0, per_prefill_token_s=0.0, overlap=False)
                stage = EngineOverheadCostModel(stage, launch_only, n)
            stages.append(stage)
    else:
        stages = [LayerShareCostModel(whole, model.num_layers, n) for n in layers]
    gpu = deployment.gpu
    # Stage to stage is one GPU to another over the GPU interconnect; its fixed latency is taken to be the
    # catalog's per-collective latency (a point-to-point send is the simplest collective).
    return PipelineCostModel(stages, hidden_size=model.hidden_size, tensor_parallel=deployment.tensor_parallel,
                             link_bytes_per_s=gpu.interconnect_bytes_per_s * gpu.interconnect_efficiency,
                             link_latency_s=gpu.allreduce_latency_s, driver=driver)


def _speculative_batch(scenario: Scenario, kv, replica_index: int):
    spec = scenario.speculation
    acceptance, alpha = spec.acceptance, spec.alpha()
    if alpha is not None:
        sampler = lambda rng: alpha  # noqa: E731
    else:
        a, b = acceptance.mean * acceptance.concentration, (1 - acceptance.mean) * acceptance.concentration
        sampler = lambda rng: rng.beta(a, b)  # noqa: E731
    rng = np.random.default_rng(np.random.SeedSequence([scenario.run.seed, 13, replica_index]))
    return SpeculativeDecodeBatch(num_speculative_tokens=spec.num_speculative_tokens, alpha_sampler=sampler,
                                  ragged=spec.ragged, rng=rng, kv=kv, num_verified_tokens=spec.verified_tokens())


def seed_draws(scenario: Scenario) -> tuple[str, ...]:
    """What `run.seed` draws in this scenario's run, in words; empty where every seed runs the same requests the
    same way (a replayed trace with its own lengths, a burst of fixed lengths), so repeating a run under other seeds
    measures nothing. The seed's uses: the workload (`generate_workload`'s streams), the random router
    (`make_router`), speculative acceptance (`_speculative_batch`), closed-loop think times."""
    workload, draws = scenario.workload, []
    arrival = workload.arrival.kind
    if arrival == "closed_loop":
        draws.append("think times")
    elif arrival not in ("trace", "burst", "constant"):
        draws.append("arrival times")
    if workload.resolved_lengths.kind not in ("trace", "fixed", "listed"):
        draws.append("request lengths")
    if workload.prefix is not None:
        draws.append("shared prefixes")
    if scenario.hardware.router == "random" and (scenario.hardware.num_replicas > 1
                                                 or scenario.hardware.disaggregation is not None):
        draws.append("the random router's choices")
    if scenario.speculation is not None:  # each step's accepted drafts, whatever the acceptance rate
        draws.append("speculative acceptance")
    return tuple(draws)


def make_scheduler(scenario: Scenario, replica_index: int = 0, deployment: Deployment | None = None):
    deployment = deployment or deployment_of(scenario)
    kv_spec, s = scenario.kv_cache, scenario.scheduler
    tokens = deployment.kv_capacity_tokens
    max_len = deployment.max_model_len
    if kv_spec.layout == "paged":
        num_blocks = tokens // kv_spec.block_size
        if num_blocks < 1:
            raise ConfigError(f"kv_cache.block_size: {kv_spec.block_size} is larger than the KV capacity "
                              f"of {tokens} tokens; allowed: at least one block of KV memory (kv_cache's "
                              "gpu_memory_utilization, free_memory_fraction or capacity_tokens, or the engine's "
                              "memory flag that sets them)")
        # A hybrid model's sliding layers: their windows out of this pool (shared_pool), or not here at all (its own
        # pool, every token: the slots count them); a window on every layer frees the blocks out of it.
        model, window_bytes = deployment.model, deployment.window_kv_bytes_per_token_per_gpu
        kv = PagedKVManager(num_blocks, kv_spec.block_size, enable_prefix_caching=kv_spec.enable_prefix_caching,
                            sliding_window=None if model.hybrid_window and not window_bytes else model.sliding_window,
                            window_bytes_per_slot=(window_bytes, deployment.kv_bytes_per_token_per_gpu)
                            if window_bytes else None)
    else:
        kv = ContiguousKVManager(tokens, kv_spec.reserve, max_len, kv_spec.placement or "first_fit")
    if deployment.pipeline_parallel > 1:
        return _micro_batch_slots(scenario, kv, deployment)
    if s.batching == "static":
        return StaticScheduler(kv, max_batch_size=s.max_batch_size, batch_timeout_s=s.batch_timeout_s,
                               max_model_len=max_len)
    tracker = _speculative_batch(scenario, kv, replica_index) if scenario.speculation else None
    preemption = s.preemption
    swap_tokens = 0
    if preemption.mode == "swap":
        swap_tokens = preemption.swap_space_bytes // deployment.kv_bytes_per_token_per_stage_gpu
    return ContinuousScheduler(kv, max_num_seqs=s.max_num_seqs,
                               max_num_batched_tokens=deployment.max_num_batched_tokens,
                               chunked_prefill=s.chunked_prefill, max_model_len=max_len, tracker=tracker,
                               swap_capacity_tokens=swap_tokens, victim=preemption.victim,
                               sequences_per_request=deployment.sequences_per_request, rule=s.rule())


def _micro_batch_slots(scenario: Scenario, kv, deployment: Deployment):
    """A pipelined replica's schedulers: one per micro-batch slot, sharing `kv`, the queue and swap space."""
    from sim.sched.pipeline import MicroBatchSlots
    s, pp = scenario.scheduler, deployment.pipeline_parallel
    swap_tokens = 0
    if s.preemption.mode == "swap":
        swap_tokens = s.preemption.swap_space_bytes // deployment.kv_bytes_per_token_per_stage_gpu
    # vLLM V1 caps the running requests of all in-flight batches together at max_num_seqs: each slot a share.
    per_slot_seqs = max(1, s.max_num_seqs // pp)
    return MicroBatchSlots([
        ContinuousScheduler(kv, max_num_seqs=per_slot_seqs, max_num_batched_tokens=deployment.max_num_batched_tokens,
                            chunked_prefill=s.chunked_prefill, max_model_len=deployment.max_model_len,
                            swap_capacity_tokens=swap_tokens, victim=s.preemption.victim, rule=s.rule())
        for _ in range(pp)])


def replica_counters(scenario: Scenario, replica: Replica, deployment: Deployment) -> ReplicaCounters:
    """The counters a replica's scheduler kept that the summary reports."""
    scheduler = replica.scheduler
    speculative = scenario.speculation is not None
    return ReplicaCounters(
        kv_capacity_tokens=scheduler.kv.capacity_slots, kv_layout=scenario.kv_cache.layout,
        window_freed_blocks=getattr(scheduler.kv, "num_window_freed_blocks", 0)
        if deployment.model.sliding_window and not deployment.model.hybrid_window
        else None,
        prefix_cache=scheduler.kv.prefix_cache_stats() if scenario.kv_cache.enable_prefix_caching else None,
        num_drafted=scheduler.tracker.num_drafted if speculative else None,
        num_accepted_drafts=scheduler.tracker.num_accepted_drafts if speculative else None,
        # every member drafts γ a verification (a tree's accepted path too)
        num_verifications=scheduler.tracker.num_drafted // scheduler.tracker.gamma if speculative else None)


def pipeline_metrics(replicas: list, elapsed_s: float, steps, gpu) -> dict:
    """Busy time of a pipelined run per stage. Its step rows overlap (several micro-batches in flight), so the
    rows' summed durations overstate busy time: `busy_fraction` becomes the stages' mean busy fraction, and
    bandwidth and FLOP utilization divide each stage GPU's bytes and FLOPs by the stages' summed busy time."""
    k = len(replicas[0].stage_busy_s)
    per_stage = [sum(r.stage_busy_s[i] for r in replicas) / elapsed_s / len(replicas) if elapsed_s > 0 else 0.0
                 for i in range(k)]
    out = {f"pipeline_stage{i}_busy_fraction": x for i, x in enumerate(per_stage)}
    out.update(pipeline_stages=k, busy_fraction=sum(per_stage) / k,
               pipeline_micro_batches=int(sum(r.num_micro_batches for r in replicas)))
    busy_s = sum(sum(r.stage_busy_s) for r in replicas)
    if busy_s > 0:
        out["mbu"] = float(steps["bytes"].sum()) / (busy_s * gpu.hbm_bytes_per_s)
        out["mfu"] = float(steps["flops"].sum()) / (busy_s * gpu.bf16_flops_per_s)
    return out


def horizon_s(run) -> float | None:
    """When the simulation stops: the horizon, else the arrival duration, else None (when every request is done)."""
    return run.horizon_s if run.horizon_s is not None else run.duration_s


def steady_window(requests, run):
    """The summary's steady-state window (run.warmup_s / cooldown_s), or None without one."""
    return measurement_window(requests, run.warmup_s, run.cooldown_s, run.duration_s) if run.has_window() else None


def simulate(scenario: Scenario, workload: Workload | None = None, *,
             progress: Callable[[float, int], None] | None = None, cost_model=None,
             stop_when: Callable[[Simulation], bool] | None = None, lean_summary: bool | str = False,
             step_draws: np.ndarray | None = None) -> Result:
    """Simulate a validated scenario; `workload` defaults to the one the scenario generates.

    `stop_when(simulation)`, asked after every engine step, may end the run early, when it is certain the
    SLOs will be missed (`sim.tools.early_verdict`): the summary is then that of the cut-off run, with
    `slo_met` False and `stopped_early_s` the simulated time it stopped at. A rule with a `next_check_s`
    attribute (answering False to steps ending before it) lets decode runs (`run.fast_decode`) go up to that
    time; without one, the run goes step by step. (Disaggregated and pipelined runs do
    not ask it: they run to their end; nor do runs with a front-end, whose SLOs are the client's.)

    With `scenario.frontend` the front-end's passes (sim/frontend.py) run before the engine (client send
    times -> engine arrivals) and after it (engine token times -> the client's): the records gain the client's
    columns and the latencies are the client's (`sim.results.with_client_side`).

    `lean_summary`: the summary holds only what a capacity planner reads (`summarize`'s `lean`); "band": what a
    band's own runs are read for.

    `step_draws`: a perturbed run's step-time draw pack (`sim.cost.draws.draw_pack`, issue 31: bands): every
    priced step time is scaled by its draw, in either engine alike. None: the times as priced. A band
    (`run.band`) is `sim.bands.simulate_with_band`'s: it runs this function once per replication."""
    if step_draws is not None and scenario.hardware.disaggregation is not None:
        # Its step loops (sim/core/disaggregated.py's two pools) do not draw yet.
        raise ConfigError("hardware.disaggregation: step-time draws (run.band_sources: step_time) are not supported "
                          "there yet; allowed: run.band_sources: [workload]")
    if scenario.hardware.disaggregation is not None:
        return simulate_disaggregated(scenario, workload, progress=progress)
    deployment = deployment_of(scenario)
    workload = workload if workload is not None else make_workload(scenario, deployment)
    frontend = None
    if scenario.frontend is not None:
        from sim.frontend import FrontendStage
        frontend = FrontendStage(scenario.frontend, workload, scenario.hardware.num_replicas)
        # The engine gets the requests as they leave the front-end. The early-stop rule reads the engine's records
        # (a client-side TPOT may be below the engine's), so it is not asked.
        workload, stop_when = frontend.engine_workload, None
    replica_kind = Replica
    if deployment.pipeline_parallel > 1:
        from sim.core.pipeline import PipelineReplica
        replica_kind = PipelineReplica
        if cost_model is not None and not hasattr(cost_model, "stage_costs"):
            raise ConfigError(f"hardware.pipeline_parallel: {deployment.pipeline_parallel} needs a cost model that "
                              f"prices each stage (sim.cost.pipeline.PipelineCostModel), not {cost_model!r}")
    # One cost model for every replica: pricing is a pure function of the step, and its notes (points outside
    # measured tables) are the run's, whichever replica priced them.
    lockstep = scenario.hardware.lockstep
    if lockstep is not None:
        from sim.core.lockstep import LockstepRank
        replica_kind = LockstepRank
    cost_model = cost_model or make_cost_model(scenario, deployment)
    replicas = [replica_kind(i, make_scheduler(scenario, i, deployment), cost_model)
                for i in range(scenario.hardware.num_replicas)]
    if lockstep is not None:
        from sim.core.lockstep import lockstep_group
        lockstep_group(replicas, lockstep.pad_tokens, lockstep.idle_check_steps,
                       experts_over_group=deployment.expert_group is not None,
                       pad_prefill_steps=lockstep.pad_prefill_steps)
    run = scenario.run
    horizon = horizon_s(run)
    closed = workload.closed_loop
    sim = Simulation(replicas, make_router(scenario.hardware.router, run.seed),
                     arrival_s=workload.arrival_s, input_tokens=workload.input_tokens,
                     output_tokens=workload.output_tokens, horizon_s=horizon,
                     closed_loop_users=closed.num_users if closed else 0,
                     think_time_s=closed.think_time_s if closed else 0.0, seed=run.seed,
                     prefix_ids=workload.prefix_ids if scenario.kv_cache.enable_prefix_caching else None,
                     prefix_unit_tokens=workload.prefix_unit_tokens, progress=progress,
                     fast_decode=run.fast_decode, stop_when=stop_when,
                     frontend=frontend.in_loop if frontend is not None else None)  # a closed loop's, in its loop
    if step_draws is not None:
        from sim.cost.draws import perturb, perturb_steps  # handed to the engine loop (sim/core is below sim/cost)
        sim.step_draws, sim.draw_functions = step_draws, (perturb, perturb_steps)
    if run.compiled_core:
        from sim.compiled.engine import run_compiled
        ran = run_compiled(sim)  # in its scope: the same records, without the SimPy loop
    else:
        sim.engine_core, ran = "python (run.compiled_core is false)", False
    if not ran:
        sim.run()
    # Tables, not DataFrames: Result builds the frames if they are read (a planner reads only the summary).
    requests = requests_table(sim.requests)
    steps = steps_table(sim.steps.arrays())
    decode_runs = decode_runs_of(sim.steps)
    elapsed = horizon if horizon is not None else sim.end_s
    if frontend is not None:
        requests = frontend.client_side(requests)
        if horizon is None:  # the run ends when the client has received the last reply
            elapsed = max(elapsed, frontend.last_receive_s)
    summary = summarize(requests, steps, elapsed_s=elapsed, slo=scenario.slo, gpu=deployment.gpu,
                        in_system_area=sim.in_system_area, num_generated=workload.num_requests,
                        replicas=[replica_counters(scenario, r, deployment) for r in replicas],
                        kv_bytes_per_token=deployment.kv_bytes_per_token, num_clipped=workload.num_clipped,
                        max_model_len=deployment.max_model_len,
                        window=steady_window(requests, run), decode_runs=decode_runs, lean=lean_summary,
                        frontend=FrontendCounters(frontend.costs.num_processes, frontend.busy_s, frontend.end_s,
                                                  frontend.costs.tokens_per_chunk,
                                                  frontend.client_gaps_are_engine_steps)
                        if frontend else None)
    if sim.stopped_early_s is not None:
        summary["slo_met"] = False  # certain for the full run; the cut-off run's own records may not show it
        summary["stopped_early_s"] = float(sim.stopped_early_s)
    if deployment.pipeline_parallel > 1:
        summary.update(pipeline_metrics(replicas, elapsed, steps, deployment.gpu))
    if lockstep is not None:
        # The ranks' forwards together, those of ranks with nothing to run (no step rows), and the tokens they ran as
        # padding (in no step row's counts; in its FLOPs and bytes).
        group = replicas[0].group
        summary.update(lockstep_steps=group.num_steps, lockstep_dummy_forwards=group.num_dummy_forwards,
                       lockstep_padding_tokens=group.num_padding_tokens)
    if deployment.attention_kernel != "flash":  # (a flash run's summary keeps its keys as before)
        summary.update(attention_kernel=deployment.attention_kernel,
                       attention_score_bytes_per_gpu=deployment.score_bytes_per_gpu,
                       max_prompt_tokens_materialized=deployment.max_prompt_tokens_materialized)
    return Result(scenario.name, scenario, requests, steps, summary,
                  extras={"cost_model": repr(replicas[0].cost_model), "scheduler": repr(replicas[0].scheduler),
                          # which cost model priced the run, in a few words: every summary table shows it
                          **cost_model_extras(scenario, replicas[0].cost_model, steps=steps),
                          **engine_extras(scenario),
                          "engine_core": sim.engine_core,
                          **({"frontend": repr(frontend)} if frontend is not None else {})},
                  decode_runs=decode_runs)


def engine_extras(scenario: Scenario) -> dict:
    """The engine preset a run used and what its preset approximates (kept from the preset's run when the scenario
    was validated: `EngineSpec.notes`), for the outputs."""
    if scenario.engine is None:
        return {}
    return {"engine": f"{scenario.engine.name} {scenario.engine.version}", "engine_notes": scenario.engine.notes}


def decode_runs_of(log) -> DecodeRuns | None:
    """The steps inside a step log's decode runs (`run.fast_decode`); None when it took none."""
    arrays = log.run_arrays()
    return DecodeRuns.from_arrays(arrays) if len(arrays["step_duration_s"]) else None


def cost_model_extras(scenario: Scenario, cost_model, prefix: str = "", others=(), steps=None) -> dict:
    """`cost_model_label` (and `cost_model_choice`) of a run's extras: the label "(default)" where the scenario
    named no cost model and the best available was chosen for it (sim/config/cost_choice.py); and
    `cost_model_notes`, what it approximated in the run (with `others`, the other replicas' models of its kind:
    each notes the points it priced; `steps`, the steps it priced: sim/cost/labels.py `cost_model_notes`)."""
    from sim.cost.labels import cost_model_label, cost_model_notes  # imports every cost model: when a run ends
    choice = scenario.cost_model_choice
    out = {f"{prefix}cost_model_label": cost_model_label(cost_model) + (" (default)" if choice else ""),
           f"{prefix}cost_model_notes": tuple(sorted({note for m in (cost_model, *others)
                                                       for note in cost_model_notes(m, steps)}))}
    if choice and not prefix:
        out["cost_model_choice"] = choice
    return out


def simulate_disaggregated(scenario: Scenario, workload: Workload | None = None, *,
                           progress: Callable[[float, int], None] | None = None) -> Result:
    """A scenario with `hardware.disaggregation`: prefill replicas 0..P-1 and decode replicas P..P+D-1, each
    pool built from its own resolved deployment (sim/config/disaggregation.py, sim/core/disaggregated.py)."""
    dd = resolve_disaggregated(scenario)
    pools = {pool: pool_scenario(scenario, pool) for pool in ("prefill", "decode")}
    workload = workload if workload is not None else make_workload(scenario, dd.prefill)
    sim = disaggregated_simulation(scenario, workload, dd, progress=progress)
    sim.run()
    prefill, decode = sim.prefill_replicas, sim.decode_replicas
    run = scenario.run
    horizon = horizon_s(run)
    requests = disaggregated_requests_frame(sim.requests)
    steps = steps_frame(sim.steps.arrays())
    elapsed = horizon if horizon is not None else sim.end_s
    counters = ([replica_counters(pools["prefill"], r, dd.prefill) for r in prefill]
                + [replica_counters(pools["decode"], r, dd.decode) for r in decode])
    # Pool-blind summary keys (KV capacity, MBU/MFU, swapped bytes) are those of the decode pool's GPU and
    # KV layout: the pool that holds requests longest. The per-pool keys follow.
    summary = summarize(requests, steps, elapsed_s=elapsed, slo=scenario.slo, gpu=dd.decode.gpu,
                        in_system_area=sim.in_system_area, num_generated=workload.num_requests,
                        replicas=counters[dd.num_prefill_replicas:] + counters[:dd.num_prefill_replicas],
                        kv_bytes_per_token=dd.decode.kv_bytes_per_token, num_clipped=workload.num_clipped,
                        max_model_len=dd.decode.max_model_len,
                        window=steady_window(requests, run))
    summary.update(disaggregation_metrics(requests, steps, elapsed, num_prefill_replicas=dd.num_prefill_replicas,
                                          num_decode_replicas=dd.num_decode_replicas, num_gpus=dd.num_gpus))
    summary["prefill_kv_capacity_tokens"] = dd.prefill.kv_capacity_tokens
    summary["decode_kv_capacity_tokens"] = dd.decode.kv_capacity_tokens
    return Result(scenario.name, scenario, requests, steps, summary,
                  extras={"cost_model": repr(decode[0].cost_model), "scheduler": repr(decode[0].scheduler),
                          **cost_model_extras(scenario, decode[0].cost_model,
                                              others=[r.cost_model for r in decode[1:]],
                                              steps=steps[steps["replica"] >= dd.num_prefill_replicas]),
                          **cost_model_extras(scenario, prefill[0].cost_model, prefix="prefill_",
                                              others=[r.cost_model for r in prefill[1:]],
                                              steps=steps[steps["replica"] < dd.num_prefill_replicas]),
                          "prefill_cost_model": repr(prefill[0].cost_model),
                          "prefill_scheduler": repr(prefill[0].scheduler),
                          "kv_link": f"{dd.link.name}: {dd.link.bandwidth_bytes_per_s:g} B/s per GPU x "
                                     f"{dd.num_parallel_links}, latency {dd.link.latency_s:g} s, "
                                     f"overlap {dd.overlap}"})


def disaggregated_simulation(scenario: Scenario, workload: Workload, dd=None, *,
                             progress: Callable[[float, int], None] | None = None) -> DisaggregatedSimulation:
    """The simulation `simulate_disaggregated` runs, built and not yet run (tests inspect its replicas after)."""
    dd = dd or resolve_disaggregated(scenario)
    pools = {pool: pool_scenario(scenario, pool) for pool in ("prefill", "decode")}
    prefill = []
    for i in range(dd.num_prefill_replicas):
        scheduler = make_scheduler(pools["prefill"], i, dd.prefill)
        scheduler.role = PrefillRole(scheduler.kv)  # the KV stays until it has been sent to a decode replica
        prefill.append(Replica(i, scheduler, make_cost_model(pools["prefill"], dd.prefill)))
    decode = [Replica(dd.num_prefill_replicas + j, make_scheduler(pools["decode"], dd.num_prefill_replicas + j,
                                                                   dd.decode),
                      make_cost_model(pools["decode"], dd.decode)) for j in range(dd.num_decode_replicas)]
    for replica in decode:
        replica.scheduler.role = DecodeRole(replica.scheduler)  # takes requests whose prompt was computed elsewhere
    link = KVTransferLink(dd.link.bandwidth_bytes_per_s * dd.num_parallel_links, dd.link.latency_s, dd.overlap,
                          dd.prefill.model.num_layers)
    run = scenario.run
    horizon = horizon_s(run)
    return DisaggregatedSimulation(prefill, decode, make_router(scenario.hardware.router, run.seed), link=link,
                                   kv_transfer_bytes=dd.kv_transfer_bytes,
                                   arrival_s=workload.arrival_s, input_tokens=workload.input_tokens,
                                   output_tokens=workload.output_tokens, horizon_s=horizon, seed=run.seed,
                                   progress=progress)
