"""Which cost model priced a run, in a few words for a table row (issue 12).

`cost_model_label(cost_model)` reads the cost-model object a run used (not the scenario's request), so a
`measured` scenario on a GPU without measured tables says "roofline (fallback: ...)", not "measured". The full
`repr` stays in `Result.extras["cost_model"]`; this label is what the summary tables show.

`cost_model_notes(cost_model)`: what that cost model approximated in the run, one line each, which the CLI and the
report print beside the engine preset's notes: a configuration the tables did not measure and the nearest one they
did, another kernel's or engine's rows, GPU counts the all-reduce was not measured at, points priced past the
measured range.
"""

from __future__ import annotations

from sim.cost.calibrated import CalibratedCostModel
from sim.cost.engine_steps import EngineStepCostModel
from sim.cost.learned import LearnedRooflineCostModel
from sim.cost.measured import MeasuredCostModel, MeasuredFallback
from sim.cost.overhead import EngineOverhead, EngineOverheadCostModel
from sim.cost.pipeline import LayerShareCostModel, PipelineCostModel
from sim.cost.roofline import FixedCostModel, RooflineCostModel, SpeculativeCostModel
from sim.cost.steps import StepProfileCostModel
from sim.model.interconnects import NCCL_ALL_REDUCE


def overhead_label(engine: str, given: dict, fitted_for: str = "", graphs: str = "") -> str:
    """The overhead part of a label: its defaults' name, and each term given apart from them (a user's own), e.g.
    'vllm-cudagraph overhead (per_step_s 1.43 ms)'; with `fitted_for`, whose fit the terms are, named first so an
    SGLang run does not read as vLLM's: 'CPU terms fitted for SGLang 0.5.3.post3 (per_step_s 0.362 ms; rest:
    vllm-cudagraph defaults)'. `given`: term ->
    value, as the scenario's `cost_model.overhead` section holds it (None: not given); `graphs`: which steps skip
    the launch term (`EngineOverhead.graphs_described`), e.g. 'CUDA graphs for decode batches up to 256'."""
    from sim.cost.overhead import ENGINE_DEFAULTS, TERMS
    base = ENGINE_DEFAULTS.get(engine)
    apart = [f"{term} {value * 1e3:.3g} ms" for term in TERMS if (value := given.get(term)) is not None
             and (base is None or value != getattr(base, term))]
    if given.get("overlap"):
        apart.append("overlapped")
    if graphs:
        apart.append(graphs)
    if fitted_for:
        said = "; ".join(part for part in (", ".join(apart), f"rest: {engine} defaults") if part)
        return f"CPU terms fitted for {fitted_for} ({said})"
    said = ", ".join(apart)
    return f"{engine} overhead" + (f" ({said})" if said else "")


def cost_model_label(cost_model) -> str:
    """E.g. 'measured (AIConfigurator h100_sxm vllm 0.24.0)', 'roofline (fallback: no measured kernel tables for
    gpu 'l4'; ...)', 'learned roofline + vllm-cudagraph overhead'."""
    if isinstance(cost_model, SpeculativeCostModel):
        return cost_model_label(cost_model.target) + " (speculative)"
    if isinstance(cost_model, PipelineCostModel):
        return f"{_stage_label(cost_model)} over {cost_model.num_stages} pipeline stages"
    if isinstance(cost_model, EngineOverheadCostModel):
        overhead = cost_model.overhead
        given = {**overhead.terms(), "overlap": overhead.overlap}
        return (f"{cost_model_label(cost_model.kernels)} + "
                f"{overhead_label(overhead.engine, given, overhead.fitted_for, overhead.graphs_described())}")
    if isinstance(cost_model, MeasuredCostModel):
        meta = cost_model.tables.meta
        # a mixture of experts names the routing its fused-MoE rows were measured under
        routing = f", {cost_model.moe_rows_routing} MoE routing" if cost_model.moe_rows_routing else ""
        nccl = ", NCCL all-reduce" if _nccl(cost_model) else ""
        return (f"measured (AIConfigurator {meta['system']} {meta['framework']} {meta['framework_version']}"
                f"{routing}{nccl})")
    if isinstance(cost_model, MeasuredFallback):
        return f"roofline (fallback: {cost_model.reason})"
    if isinstance(cost_model, LearnedRooflineCostModel):
        return "learned roofline" + (" (NCCL all-reduce)" if _nccl(cost_model) else "")
    if isinstance(cost_model, RooflineCostModel):
        return "roofline"
    if isinstance(cost_model, (CalibratedCostModel, EngineStepCostModel, StepProfileCostModel)):
        return "calibrated"
    if isinstance(cost_model, FixedCostModel):
        return "fixed"
    return type(cost_model).__name__


def cost_model_notes(cost_model, steps=None) -> tuple[str, ...]:
    """What `cost_model` approximated, as it stands after a run, one line each, sorted: each model's own
    `note_lines(steps)` (sim/cost/measured.py, sim/cost/steps.py), through the models that wrap one; () for a model
    that keeps none. `steps`: the run's step log, for a model that keeps no notes while it prices."""
    if isinstance(cost_model, SpeculativeCostModel):
        return cost_model_notes(cost_model.target, steps)
    if isinstance(cost_model, PipelineCostModel):
        stages = [getattr(stage, "whole", stage) for stage in cost_model.stages]
        return tuple(sorted({note for stage in stages for note in cost_model_notes(stage, steps)}))
    if isinstance(cost_model, EngineOverheadCostModel):
        return cost_model_notes(cost_model.kernels, steps)
    lines = getattr(cost_model, "note_lines", None)
    return tuple(lines(steps)) if lines is not None else ()


def _nccl(cost_model) -> bool:
    """NCCL's all-reduce prices this model's tensor-parallel steps (`hardware.all_reduce: nccl`, TP above 1)."""
    return cost_model.all_reduce == NCCL_ALL_REDUCE and cost_model.tp > 1


def _stage_label(pipeline: PipelineCostModel) -> str:
    """What prices a pipeline's stages (`PipelineCostModel.stage_model`): the whole model's cost model, or the roofline
    of each stage's own layers with the driver's CPU terms (`sim.run._pipeline_cost_model`)."""
    stage = pipeline.stage_model
    if isinstance(pipeline.stages[0], LayerShareCostModel):
        return cost_model_label(stage)
    kernels = stage.kernels if isinstance(stage, EngineOverheadCostModel) else stage
    driver = pipeline.driver
    if isinstance(driver, EngineOverhead):
        given = {**driver.terms(), "overlap": driver.overlap}
        label = overhead_label(driver.engine, given, driver.fitted_for, driver.graphs_described())
        return f"{cost_model_label(kernels)} + {label}"
    return cost_model_label(kernels)
