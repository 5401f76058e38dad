"""`servesim catalog import config.json`: a Hugging Face model as an inline ModelSpec, with what follows from it."""

from __future__ import annotations

import yaml

from sim.model.hf_config import IGNORED, read_hf_config
from sim.model.memory import kv_bytes_per_token, kv_slot_bytes, window_kv_bytes_per_token
from sim.model.shapes import active_param_count, param_count


def import_text(path: str, name: str | None = None) -> str:
    """YAML to paste as a scenario's `model:` (comment lines first: parameters, KV bytes per token, caveats)."""
    spec, model_type, quant = read_hf_config(path, name, field="catalog import")
    total, active = param_count(spec), active_param_count(spec)
    kv = kv_bytes_per_token(spec)
    if spec.hybrid_window:
        full, sliding = kv_slot_bytes(spec), window_kv_bytes_per_token(spec)
        kv_line = (f"# KV cache, on one GPU in bf16: {full:,} bytes per token ({full / 1024:.1f} KiB) in the "
                   f"{spec.num_layers - spec.num_window_layers} full-attention layers, and {sliding:,} per token of "
                   f"the last {spec.sliding_window:,} in the {spec.num_window_layers} sliding-window layers")
    else:
        kv_line = (f"# KV cache: {kv:,} bytes per token in bf16 ({kv / 1024:.1f} KiB), on one GPU"
                   + (f"; sliding window {spec.sliding_window:,} tokens" if spec.sliding_window else ""))
    lines = [f"# {spec.name}: read from {path} (model_type {model_type})",
             f"# parameters: {total:,} ({total / 1e9:.2f} B)"
             + (f"; active per token: {active:,} ({active / 1e9:.2f} B)" if spec.is_moe else ""),
             kv_line]
    if model_type in IGNORED:
        lines.append(f"# not modelled: {IGNORED[model_type]}")
    # (the model carries its model_type, which engine presets key rules on, and what is not modelled, said at each run)
    section = {"model": spec.model_dump(mode="json", exclude_defaults=True) | {"name": spec.name}}
    if quant is not None:
        lines.append(f"# checkpoint: {quant.describe()}")
        if quant.fp8_activations:
            lines.append("# fp8_compute: true as the engines run it on a GPU with an fp8 rate; false on one without "
                         "(A100: weight-only fp8)")
        if quant.weights is not None:  # pasted with the model, the scenario is priced as the checkpoint is stored
            section["quantization"] = {"weights": quant.weights} | (
                {"fp8_block_scales": True} if quant.fp8_block_scales else {}) | (
                {"fp8_compute": True} if quant.fp8_activations else {})
    body = yaml.safe_dump(section, sort_keys=False)
    return "\n".join(lines) + "\n" + body
