"""DeepSeek sparse attention (DeepSeek-V3.2's DSA; SGLang calls it NSA) under the engine presets: the rules each
engine applies to such a model where they were read, and a one-line refusal where they were not.

SGLang's, read in the PyPI wheels of 0.5.6, 0.5.6.post2 and 0.5.7 (python/sglang/srt/server_args.py
`_handle_model_specific_adjustments`, `if is_deepseek_nsa(hf_config)`; its configs/model_config.py
`is_deepseek_nsa`: a DeepSeek architecture with `index_topk`): the KV page is 64 tokens whatever --page-size says;
--kv-cache-dtype auto stores the KV in bf16 on Hopper and fp8_e4m3 on Blackwell; the attention backend is "nsa"
(prefill flashmla_sparse and decode fa3 with a bf16 KV, flashmla_auto and flashmla_kv with an fp8 one);
enable_dp_attention is set, then cleared by `_handle_data_parallelism` where --dp is 1 (so --tp alone runs plain
tensor parallelism, and --dp D data-parallel attention: `sglang_dp_attention.py`). 0.5.3-0.5.5 force --dp to --tp
instead, and 0.5.8 moved the rule out of server_args.py: neither is modelled.
"""

from __future__ import annotations

from typing import Any

from sim.config.engines.base import Context, dotted_version, released_before
from sim.errors import ConfigError

SGLANG_NSA_READ = ((0, 5, 6), (0, 5, 8))  # [first, end) of the SGLang releases whose rule is modelled
SGLANG_NSA_PAGE_TOKENS = 64


def check_sparse_attention(ctx: Context, engine: str, label: str) -> None:
    """ConfigError, one line, where the preset's rules for a sparse-attention model were not read."""
    model = ctx.model
    if model is None or not model.index_topk:
        return
    first, end = SGLANG_NSA_READ
    if engine == "sglang" and not released_before(ctx.version, ctx.version_text, first) \
            and released_before(ctx.version, ctx.version_text, end):
        return
    read = f"SGLang {dotted_version(first)} to before {dotted_version(end)}"
    raise ConfigError(f"engine.version: {label} {ctx.version_text} is not modelled for {model.name}'s sparse "
                      f"attention (index_topk {model.index_topk}: its engine rules were read for {read} only); "
                      f"allowed: engine sglang {dotted_version(first)} to before {dotted_version(end)}, or no engine")


def sglang_nsa_values(ctx: Context, notes: list[str]) -> dict[str, Any]:
    """SGLang's settings for a sparse-attention model (see the module docstring)."""
    if ctx.model is None or not ctx.model.index_topk:
        return {}
    values: dict[str, Any] = {"kv_cache.block_size": SGLANG_NSA_PAGE_TOKENS}
    given = ctx.flags.get("page_size")
    if given is not None and given != SGLANG_NSA_PAGE_TOKENS:
        notes.append(f"SGLang {ctx.version_text}: --page-size {given} replaced by {SGLANG_NSA_PAGE_TOKENS} for "
                     f"{ctx.model.name}'s sparse attention, as its server_args.py replaces it")
    blackwell = ctx.gpu.compute_capability is not None and ctx.gpu.compute_capability[0] >= 10
    if ctx.flags.get("kv_cache_dtype") in (None, "auto"):
        values["quantization.kv_cache"] = "fp8" if blackwell else "bf16"
    notes.append(f"SGLang {ctx.version_text}: {ctx.model.name}'s sparse attention on the nsa backend, "
                 f"{SGLANG_NSA_PAGE_TOKENS}-token KV pages, the KV in {'fp8' if blackwell else 'bf16'} by default "
                 f"({'Blackwell' if blackwell else 'before Blackwell'}); priced by the roofline: MLA over at most "
                 f"{ctx.model.index_topk} keys a query plus the indexer over every earlier token")
    return values
