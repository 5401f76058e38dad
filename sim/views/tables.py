"""The catalogs as tables for `servesim catalog` and the dashboard."""

from __future__ import annotations

import pandas as pd

from sim.config.engines import PRESETS, fitted_versions
from sim.cost.measured import MXFP4_MARLIN, TABLES, attention_kernel, load_tables, measured_gpus, tables_dir
from sim.model.catalog import GPUS, catalog_models, shipped_quantization
from sim.model.memory import kv_bytes_per_token
from sim.model.shapes import active_param_count, param_count


def models_table() -> pd.DataFrame:
    """One row per catalog model, for `servesim catalog models` (`checkpoint`: the weights' dtype its config.json
    declares, which a scenario gets unless its `quantization` says otherwise; blank: 16-bit)."""
    rows = []
    for key, m in catalog_models().items():
        quant = shipped_quantization(key)
        experts = f"{m.num_experts} (top-{m.num_experts_per_token})" if m.is_moe else ""
        rows.append(
            {
                "model": key,
                "layers": m.num_layers,
                "hidden": m.hidden_size,
                "heads": m.num_attention_heads,
                "kv_heads": m.num_kv_heads,
                "attention": m.attention,
                "experts": experts,
                "params_b": round(param_count(m) / 1e9, 2),
                "active_params_b": round(active_param_count(m) / 1e9, 2),
                "kv_bytes_per_token": kv_bytes_per_token(m),
                "max_context": m.max_context,
                "sliding_window": m.sliding_window,
                "checkpoint": (quant.weights or "") if quant is not None else "",
            }
        )
    table = pd.DataFrame(rows)
    table["sliding_window"] = table["sliding_window"].astype("Int64")  # blank, not NaN, where absent
    return table


def gpus_table() -> pd.DataFrame:
    """One row per catalog GPU, for `servesim catalog gpus`: its catalog rates and price, and the engines whose
    measured kernel tables ship for it (what a scenario without a cost model is priced by, absent a whole-step
    profile: sim/config/cost_choice.py)."""
    measured = {fw: set(measured_gpus(tables=fw)) for fw in TABLES}
    rows = [
        {
            "gpu": key,
            "bf16_tflops": g.bf16_flops_per_s / 1e12,
            "fp8_tflops": g.fp8_flops_per_s / 1e12 if g.fp8_flops_per_s else None,
            "fp4_tflops": g.fp4_flops_per_s / 1e12 if g.fp4_flops_per_s else None,
            "memory_gb": round(g.hbm_bytes / 1e9, 1),
            "memory_gb_per_s": g.hbm_bytes_per_s / 1e9,
            "interconnect_gb_per_s": g.interconnect_bytes_per_s / 1e9,
            "host_link_gb_per_s": g.host_link_bytes_per_s / 1e9,
            "usd_per_hour": g.price_per_hour,
            "measured_tables": _measured_tables(key, g, measured),
        }
        for key, g in GPUS.items()
    ]
    return pd.DataFrame(rows)


def _measured_tables(key: str, gpu, measured: dict[str, set]) -> str:
    """The engines whose tables price this GPU's kernels: its own, or those of the part it is the same silicon as
    (`GPUSpec.kernels_as`, named)."""
    own = [fw for fw in TABLES if key in measured[fw]]
    if own or not gpu.kernels_as:
        return ", ".join(own) or "-"
    twin = [fw for fw in TABLES if gpu.kernels_as in measured[fw]]
    return f"{', '.join(twin)} ({gpu.kernels_as}'s)" if twin else "-"


def measured_tables_table() -> pd.DataFrame:
    """One row per GPU and engine whose measured kernel tables ship (calibrate/measured/), for `servesim catalog
    tables`: the engine version AIConfigurator measured, the weight, fused-MoE expert and KV-cache dtypes the tables
    price from measurements (sim/cost/measured.py prices nothing else: another dtype is refused in one line, or priced
    by the roofline where a scenario asks), the attention kernel measured, and which extra tables it holds. The
    dtypes as the tables name them: fp8 is W8A8 (`quantization.fp8_compute`), fp8_block its block-scaled form
    (`fp8_block_scales`), int8 and int4 weight-only; fp16 takes the bf16 rows."""
    rows = []
    for gpu in GPUS:
        for fw in TABLES:
            if gpu not in measured_gpus(tables=fw):
                continue
            t = load_tables(tables_dir(gpu, fw))
            extra = (("sliding-window attention", t.context_window), ("MLA attention", t.context_mla),
                     ("vLLM MLA modules", t.context_mla_module), ("DSA modules", t.context_dsa_module))
            held = [name for name, frame in extra if frame is not None and len(frame)]
            rows.append({
                "gpu": gpu,
                "tables": fw,
                "version": t.meta["framework_version"],
                "weights": ", ".join(t.meta["measured_dtypes"]["weights"]),
                "moe_experts": ", ".join("mxfp4 (Marlin's rows)" if d == MXFP4_MARLIN else d
                                         for d in sorted(t.moe_dtypes)) or "-",
                "kv_cache": ", ".join(t.meta["measured_dtypes"]["kv_cache"]),
                "attention_kernel": attention_kernel(gpu, fw) or "-",
                "also": ", ".join(held) or "-",
            })
    return pd.DataFrame(rows)


def engines_table() -> pd.DataFrame:
    """One row per engine preset, for `servesim catalog engines`: the versions it knows, those with a fit of their
    own on published runs (engine_terms.json, `fitted_versions`; other versions take the nearest fit that left no
    term at a bound, and a term a fit did not pin is not used: the preset's notes say so), the flags it takes (as
    `engine: {name, version, <flag>: value}` spells them), and the source it follows."""
    return pd.DataFrame([
        {
            "engine": key,
            "label": preset.label,
            "versions": preset.known_versions(),
            "fitted_on_published_runs": ", ".join(fitted_versions(key)) or "-",
            "flags": ", ".join(preset.flags),
            "source": preset.source,
        }
        for key, preset in PRESETS.items()
    ])
