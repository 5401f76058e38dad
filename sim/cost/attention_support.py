"""Which attention kernel a cost model can price: the roofline prices either (`roofline_kernel.attention_parts`);
a cost model built from measurements prices only the kernel its measurements ran.

`check_attention_kernel` is called once, where the cost model is built (`sim.run.make_cost_model`), so every
caller (run, compare, the planner, the dashboard) meets the same one-line refusal.
"""

from __future__ import annotations

from pathlib import Path

from sim.errors import ConfigError

# What the measurements behind each measured cost model ran:
# - `measured`: NVIDIA AIConfigurator's vLLM tables time vLLM's attention backends (FlashAttention / FlashInfer),
#   which never materialize the scores (each GPU's calibrate/measured/<gpu>/meta.json `tables` names them);
# - `roofline` with `efficiencies: learned`: efficiencies fitted to those same tables (calibrate/learn_roofline.py);
# - `calibrated`: the profile's meta.json `attention_kernel`, written by `calibrate steps --attention`; a profile
#   without the key was measured before the option existed, with torch SDPA choosing flash or memory-efficient
#   attention (its `op_impls` say so), neither of which materializes the scores: flash.
MEASURED_WITH = "flash"


def sparse_attention_unpriced(model) -> str | None:
    """Why a whole-step profile cannot price this model's attention, None where it may: DeepSeek sparse attention
    (`ModelSpec.index_topk`) caps MLA at its top-k keys and adds an indexer over every token, which no profile ran.
    The measured tables price it where vLLM's or SGLang's hold its modules
    (`sim.cost.measured.sparse_attention_unmeasured`)."""
    if not getattr(model, "index_topk", 0):
        return None
    return f"{model.name}'s sparse attention (index_topk {model.index_topk}), which no whole-step profile covers"


def profile_attention_kernel(profile_dir: str | Path) -> str:
    """The attention kernel a calibrated profile was measured with (meta.json `attention_kernel`; absent: flash)."""
    from sim.cost.profile_meta import read_meta
    return str(read_meta(profile_dir).get("attention_kernel", MEASURED_WITH))


def check_attention_kernel(scenario, deployment) -> None:
    """ConfigError, one line, when the scenario's cost model was measured with another attention kernel than
    `attention.kernel`, or is a profile and `attention.backend` names one."""
    kernel = scenario.attention.kernel
    spec = scenario.cost_model
    backend = scenario.attention.backend  # priced by the measured model (sim/cost/measured.py); a profile ran its own
    if backend is not None and spec.kind == "calibrated" and deployment.profile_dir is not None:
        raise ConfigError(f"attention.backend: {backend!r} is not the backend profile {deployment.profile_dir} was "
                          "measured with; allowed: null, or cost_model.kind 'measured' (which prices it)")
    if spec.kind == "calibrated" and deployment.profile_dir is not None:
        measured_with, what = profile_attention_kernel(deployment.profile_dir), f"profile {deployment.profile_dir}"
    elif spec.kind == "measured":
        measured_with, what = MEASURED_WITH, "cost_model.kind 'measured' (vLLM's kernels, AIConfigurator's tables)"
    elif spec.kind == "roofline" and getattr(spec, "efficiencies", "catalog") == "learned":
        measured_with, what = MEASURED_WITH, "cost_model.efficiencies 'learned' (fitted to vLLM's measured kernels)"
    else:
        return  # the roofline prices either kernel; a fixed cost model prices none
    sparse = sparse_attention_unpriced(getattr(deployment, "model", None))  # (a test's stand-in may have none)
    # (the learned efficiencies price it, the indexer at the roofline's peaks; the measured model refuses tables
    # without its modules itself, `MeasuredCostModel._setup_dsa`)
    if sparse and spec.kind == "calibrated":
        raise ConfigError(f"{what} cannot price {sparse}; allowed: cost_model.kind 'roofline'")
    if kernel != measured_with:
        raise ConfigError(f"attention.kernel: {kernel!r} is not the kernel {what} was measured with; allowed: "
                          f"{measured_with!r}, or cost_model.kind 'roofline' (catalog efficiencies) to price "
                          f"{kernel!r}")
