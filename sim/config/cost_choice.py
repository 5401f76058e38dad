"""The cost model a scenario gets when it names none (issue 30, item 6): the most accurate one available for its GPU,
model, TP, engine and dtype, in this order:

1. a shipped whole-step profile (calibrate/profiles/<gpu>/<model>/tp<N>/steps/): whole engine steps measured on the
   GPU, within 2-5% (median) of held-out whole steps (benchmarks/RESULTS.md); bf16 only, one pipeline stage, no
   speculation, FlashAttention;
2. the measured kernel tables (AIConfigurator's, of the scenario's engine where shipped, else vLLM's) plus the
   engine's CPU terms, where the tables hold the GPU and the dtypes;
3. the learned roofline (efficiencies fitted to the measured GPUs' tables) plus the engine's CPU terms;
4. the roofline.

It runs on the raw scenario before validation (`Scenario`), like the engine presets, so the CLI, the dashboard and
the planner make the same choice; the scenario records it in `cost_model_choice`, which every output shows beside the
cost model's label.
"""

from __future__ import annotations

from typing import Any, Callable

from sim.errors import ConfigError

DEFAULT_OVERHEAD = {"engine": "vllm-cudagraph"}
# The sources in the order above. A choice's text starts with its tier; choosing again for a changed scenario (a
# dumped one, a dashboard edit) or for the variants of one file never picks a better tier than that, so variants
# compared side by side are priced by the same kind of model (`common_tier`).
TIERS = ("calibrated", "measured", "learned", "roofline")


def tier_of(choice) -> int:
    """The tier a `cost_model_choice` text names (0: none, the best may be chosen)."""
    head = (choice if isinstance(choice, str) else "").split(":", 1)[0].strip()
    return TIERS.index(head) if head in TIERS else 0


def common_tier(raws: list[dict]) -> tuple[int, bool]:
    """(the best tier every one of these raw scenarios without a cost model can have (the worst of their own),
    whether their own tiers differ)."""
    tiers = {tier_of(default_cost_model(r)[1]) for r in raws if isinstance(r, dict) and r.get("cost_model") is None}
    return max(tiers, default=0), len(tiers) > 1


def shared_choice(raws: list[dict], runs: Callable[[dict], bool] | None = None) -> str | None:
    """The `cost_model_choice` that gives these raw scenarios (the variants of a file, a plan's policies on one
    hardware, a sweep's points) the same kind of default model where they name none, the best every one of them can
    have: a comparison must not mix a whole-step profile with kernel tables. None when they would all get the same
    anyway. `runs` (for a sweep's points, a plan's candidates, each run on its own: sim/config/files.py `validates`):
    one it refuses (a model that does not fit) decides nothing; asked only where the tiers differ."""
    try:
        tier, differ = common_tier(raws)
        if differ and runs is not None:
            tier, differ = common_tier([raw for raw in raws if runs(raw)])
    except Exception:  # noqa: BLE001  (each scenario's validation reports a bad value in its own words)
        return None
    return f"{TIERS[tier]}: the tier every scenario compared with it can have" if differ else None


def with_shared_choice(raw: dict, shared: str | None) -> dict:
    """`raw`, given the shared kind of default model (`shared_choice`) where it names no cost model of its own (in
    place): how a file's variants, a sweep's points and a plan's candidates take it."""
    if shared and raw.get("cost_model") is None:
        raw["cost_model_choice"] = shared
    return raw


def _section(raw: dict, key: str) -> dict:
    value = raw.get(key)
    return value if isinstance(value, dict) else {}


def default_cost_model(raw: dict, overhead: dict | None = None, floor: int = 0) -> tuple[dict[str, Any], str]:
    """`_choose`, or the roofline where a value the choice reads is malformed (validation then names the field)."""
    try:
        return _choose(raw, overhead, floor)
    except (TypeError, ValueError, AttributeError, KeyError, ConfigError):
        return {"kind": "roofline"}, "roofline: a value the choice reads is malformed"


def _choose(raw: dict, overhead: dict | None, floor: int) -> tuple[dict[str, Any], str]:
    """(the cost_model section, why it was chosen: its tier first) for a raw scenario without one. `overhead`: the
    engine preset's CPU terms (default: vLLM's estimates), added to the kernel models that price kernels only.
    `floor`: the best tier allowed (an index of TIERS)."""
    terms = dict(overhead or DEFAULT_OVERHEAD)
    hardware, quant = _section(raw, "hardware"), _section(raw, "quantization")
    gpu, model = hardware.get("gpu", "h100-sxm"), raw.get("model", "llama-3.1-8b")
    tp, pp = hardware.get("tensor_parallel", 1), hardware.get("pipeline_parallel", 1)
    weights, kv = quant.get("weights", "bf16"), quant.get("kv_cache", "bf16")
    from sim.config.engines.presets import named_engine
    engine = named_engine(_section(raw, "engine"))
    attention = _section(raw, "attention").get("kernel", "flash")
    if attention != "flash":
        return {"kind": "roofline"}, f"roofline: only it prices attention.kernel {attention!r}"
    if not (isinstance(gpu, str) and isinstance(tp, int)) or floor >= 3:
        return {"kind": "roofline"}, "roofline: an inline GPU has no measurements" if floor < 3 else "roofline"
    if not all(isinstance(v, str) for v in (weights, kv)) or not isinstance(pp, int):
        return {"kind": "roofline"}, "roofline: the quantization or parallelism is not readable"  # validation says why
    from sim.cost.attention_support import sparse_attention_unpriced
    resolved = _resolved_model(model)
    sparse = sparse_attention_unpriced(resolved)  # (no whole-step profile prices it; some measured tables do)
    disaggregation = hardware.get("disaggregation")
    # A whole-step profile is of one catalog model on one GPU and TP; the kernel tables price any model's shapes.
    # (nor of experts split by expert parallelism: `hardware.expert_parallel` refuses a profile)
    from sim.cost.measured import measured_unsupported, sparse_attention_unmeasured
    from sim.model.memory import FP8_COMPUTE_DEFAULT
    # absent, the schema's default (weight-only fp8), to which the measured model then holds the scenario
    fp8_compute = quant.get("fp8_compute", FP8_COMPUTE_DEFAULT)
    moe_kernel = quant.get("moe_kernel")  # the engine preset's where it knows it (vLLM's Marlin MXFP4 experts)
    # bf16 only. A W8A8 profile (`calibrate steps --weights fp8`) runs cuBLASLt's fp8 GEMM (torch._scaled_mm), not
    # the engines' own (vLLM: CUTLASS, whose time jumps past powers of two in AIConfigurator's rows;
    # results/gpu-steps.md, "H200 tables of 11-30"): `cost_model: {kind: calibrated}` takes it, the default does not.
    # (nor of another attention backend: `attention.backend`, which the measured tables price)
    backend = _section(raw, "attention").get("backend")
    if (not sparse and isinstance(model, str) and pp == 1 and raw.get("speculation") is None
            and weights == "bf16" and kv == "bf16" and disaggregation is None and floor == 0
            and hardware.get("expert_parallel", 1) == 1 and backend is None
            and _whole_step_profile(gpu, model, tp, quant)):
        from sim.cost.calibrated import profile_gpu
        from sim.model.catalog import canonical_name
        owner, own = profile_gpu(gpu, tp), canonical_name(gpu)
        # (another part's where this one is the same silicon and a step crosses no link: `profile_gpu`)
        whose = "" if owner == own else f" (the {own}'s kernels, and one GPU crosses no link)"
        return {"kind": "calibrated", "overhead": terms}, (
            f"calibrated: shipped whole-step profile {owner}/{model.lower()}/tp{tp}{whose} + {terms['engine']} CPU "
            "terms (the most accurate source available)")
    why_not = None
    # (only a sparse-attention model builds a measured model here, whose rule says whether its tables price it)
    sparse_terms = dict(tensor_parallel=tp, weight_dtype=weights, kv_dtype=kv, fp8_compute=fp8_compute,
                        fp8_block=quant.get("fp8_block_scales") is True)
    if engine in ("sglang", "trtllm"):  # the engine's own tables where they hold this GPU, dtype and attention
        why_not = (measured_unsupported(gpu, weights, kv, fp8_compute=fp8_compute, tables=engine,
                                        moe_kernel=moe_kernel)
                   or sparse_attention_unmeasured(resolved, gpu, engine, **sparse_terms))
    tables = engine if engine in ("sglang", "trtllm") and why_not is None else "vllm"
    if tables == "vllm":
        why_not = (measured_unsupported(gpu, weights, kv, fp8_compute=fp8_compute, tables=tables,
                                        moe_kernel=moe_kernel)
                   or sparse_attention_unmeasured(resolved, gpu, tables, **sparse_terms))
    if why_not is None and isinstance(disaggregation, dict):  # every pool's GPU must be measured
        for pool in ("prefill", "decode"):
            section = disaggregation.get(pool)
            pool_gpu = section.get("gpu", gpu) if isinstance(section, dict) else gpu
            if not isinstance(pool_gpu, str):
                why_not = f"the {pool} pool's GPU is inline"
                break
            why_not = (measured_unsupported(pool_gpu, weights, kv, fp8_compute=fp8_compute, tables=tables,
                                            moe_kernel=moe_kernel)
                       or sparse_attention_unmeasured(resolved, pool_gpu, tables, **sparse_terms))
            if why_not is not None:
                break
    if why_not is None and floor <= 1:
        spec = {"kind": "measured", "on_missing": "error", "overhead": terms}
        if tables != "vllm":
            spec["tables"] = tables
        from sim.cost.measured import tables_gpu
        owner = tables_gpu(gpu, tables)
        # (another part's where this one is the same silicon: the H800's are the H100 SXM's, `GPUSpec.kernels_as`)
        of = gpu.lower() if owner == gpu.lower() else f"{owner}, the {gpu.lower()}'s kernels"
        return spec, (f"measured: {tables} kernel tables of {of} + {terms['engine']} CPU terms (no shipped "
                      "whole-step profile for this setup)" if floor == 0 else
                      f"measured: {tables} kernel tables of {of} + {terms['engine']} CPU terms")
    detail = f" (no whole-step profile; {_MEASURED_REFUSED}{why_not})" if why_not else ""
    if hardware.get("lockstep") is not None and resolved is not None and resolved.is_moe:
        # a lockstep group's ranks run a mixture of experts' experts at the group's tokens, which the learned
        # roofline cannot price apart (sim/config/deployment.py)
        return ({"kind": "roofline", "overhead": terms},
                f"roofline: catalog roofline + {terms['engine']} CPU terms (the learned roofline cannot price a "
                f"lockstep group's shared experts{'; ' + detail[2:-1] if detail else ''})")
    return ({"kind": "roofline", "efficiencies": "learned", "overhead": terms},
            f"learned: learned roofline + {terms['engine']} CPU terms{detail}")


_MEASURED_REFUSED = "measured tables: "  # what a choice below the measured tier says of them


def measured_refused(choice) -> str | None:
    """Why a `cost_model_choice` did not take the measured tables (None: it took them, or a better source, or never
    asked them): what the CLI notes beside a run priced by the learned roofline."""
    text = choice if isinstance(choice, str) else ""
    if _MEASURED_REFUSED not in text or not text.endswith(")"):
        return None
    return text.split(_MEASURED_REFUSED, 1)[1][:-1]


def _whole_step_profile(gpu: str, model: str, tp: int, quantization: dict) -> bool:
    """A shipped whole-step profile of (gpu, model, tp) measured in the scenario's (raw) quantization section."""
    from sim.atomic_files import plain_name
    if not (plain_name(gpu) and plain_name(model)):
        return False
    from sim.cost.calibrated import profile_gpu, shipped_step_profile_fits
    from sim.cost.profile_meta import measured_in
    return shipped_step_profile_fits(profile_gpu(gpu, tp), model, tp, measured_in(quantization))


def _resolved_model(model):
    """A raw scenario's model (a name, or an inline definition) as a ModelSpec; None where it does not resolve
    (validation refuses it in its own words)."""
    from sim.errors import ConfigError
    from sim.model.catalog import resolve_model
    try:
        return resolve_model(model)
    except (ConfigError, ValueError, TypeError):
        return None
