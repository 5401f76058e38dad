"""Which kind of calibrated profile a folder holds, and the cost model that reads it.

`cost_model: {kind: calibrated}` names a folder; its meta.json says whether it holds per-op kernel
times (`python -m calibrate run`, priced by sim/calibrated.py) or whole measured steps
(`profile_kind: steps`, priced by sim/cost/steps.py). Scenario validation, the simulator and
`calibrate check` all go through here, so a folder of either kind works wherever a profile is asked for.
"""

from __future__ import annotations

from pathlib import Path

from sim.model.specs import GPUSpec, ModelSpec


def profile_kind(path: str | Path, field: str = "cost_model.profile") -> str:
    """'steps' for a whole-step profile, 'engine_steps' for one fitted to an engine's recorded steps
    (sim/cost/engine_steps.py), 'ops' for a per-op one (one-line ConfigError if none)."""
    from sim.cost.engine_steps import PROFILE_KIND as ENGINE_STEPS
    from sim.cost.profile_meta import read_meta
    from sim.cost.steps import PROFILE_KIND
    kind = read_meta(path, field).get("profile_kind")
    return {PROFILE_KIND: "steps", ENGINE_STEPS: "engine_steps"}.get(kind, "ops")


def profile_engine(path: str | Path, field: str = "cost_model.profile") -> str:
    """The engine a profile timed: meta.json's `engine` for whole steps, 'ops' for per-op kernels."""
    from sim.cost.profile_meta import read_meta
    meta = read_meta(path, field)
    return str(meta.get("engine")) if profile_kind(path, field) in ("steps", "engine_steps") else "ops"


def check_profile_matches(path: str | Path, model: ModelSpec, tensor_parallel: int,
                          field: str = "cost_model.profile") -> None:
    """Load the profile (either kind) and check it was measured for this model's shard at this TP."""
    if profile_kind(path, field) == "engine_steps":
        from sim.cost.engine_steps import (
            check_engine_step_matches,
            load_engine_step_profile,
        )
        check_engine_step_matches(load_engine_step_profile(path, field), model, tensor_parallel, field)
    elif profile_kind(path, field) == "steps":
        from sim.cost.steps import check_step_matches, load_step_profile
        check_step_matches(load_step_profile(path, field), model, tensor_parallel, field)
    else:
        from sim.cost.calibrated import check_matches, load_profile
        check_matches(load_profile(path, field), model, tensor_parallel, field)


def make_calibrated_cost_model(path: str | Path, model: ModelSpec, *, tensor_parallel: int = 1,
                               kv_layout: str = "paged", block_size: int = 16, gpu: GPUSpec | None = None,
                               weight_dtype: str = "bf16", kv_dtype: str = "bf16", fp8_compute: bool = False,
                               fp8_block: bool = False):
    """The calibrated cost model for a profile folder of any kind; a quantization the profile was not measured in
    is refused with one line (`sim.cost.profile_meta.check_profile_dtypes`)."""
    from sim.cost.profile_meta import check_profile_dtypes, read_meta
    check_profile_dtypes(read_meta(path), path, weight_dtype, kv_dtype, fp8_compute, fp8_block)
    if profile_kind(path) == "engine_steps":
        from sim.cost.engine_steps import EngineStepCostModel
        return EngineStepCostModel(path, model, tensor_parallel=tensor_parallel)
    if profile_kind(path) == "steps":
        from sim.cost.steps import StepProfileCostModel
        return StepProfileCostModel(path, model, tensor_parallel=tensor_parallel, gpu=gpu, kv_layout=kv_layout,
                                    weight_dtype=weight_dtype, kv_dtype=kv_dtype, fp8_compute=fp8_compute)
    from sim.cost.calibrated import CalibratedCostModel
    return CalibratedCostModel(path, model, tensor_parallel=tensor_parallel, kv_layout=kv_layout,
                               block_size=block_size, gpu=gpu, weight_dtype=weight_dtype, kv_dtype=kv_dtype)
