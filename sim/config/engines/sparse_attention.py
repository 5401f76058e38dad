"""DeepSeek sparse attention (DeepSeek-V3.2's DSA; SGLang calls it NSA) under the engine presets: the rules each
engine applies to such a model where they were read, and a one-line refusal where they were not.

SGLang's, read in the PyPI wheels of every release from 0.5.3 to 0.5.7 (python/sglang/srt/server_args.py
`_handle_model_specific_adjustments`, `if is_deepseek_nsa(hf_config)`; its configs/model_config.py
`is_deepseek_nsa`: a DeepSeek architecture with `index_topk`):
- the KV page is 64 tokens whatever --page-size says;
- --kv-cache-dtype auto stores the KV in bf16 on Hopper (the model's dtype) and fp8_e4m3 on Blackwell (to
  0.5.4.post1 Blackwell's is fp8_e4m3 whatever was given, which with the values the preset takes is the same);
  fp8_e5m2 is taken as fp8, as the preset takes it for every model (from 0.5.4.post2 SGLang asserts bfloat16 or
  fp8_e4m3 here: not refused);
- the attention backend is "nsa" (prefill flashmla_sparse and decode fa3 with a bf16 KV, flashmla_auto and
  flashmla_kv with an fp8 one, from 0.5.4.post2; flashmla_prefill/fa3 and flashmla_decode or flashmla_kv before):
  not priced apart, beyond FlashMLA's sparse kernel, which the roofline prices (sim/cost/roofline.py: the heads
  padded to its multiple);
- to 0.5.5.post3, data-parallel attention over every GPU: enable_dp_attention set and dp_size = tp_size whatever
  --dp says (`sglang_nsa_context`; --tp 1 leaves one rank, which `_handle_data_parallelism` turns off). From 0.5.6
  enable_dp_attention is set and --dp kept, so --tp alone runs plain tensor parallelism (dp_size 1 clears the flag)
  and --dp D data-parallel attention: `sglang_dp_attention.py`;
- 0.5.3 alone sets mem_fraction_static 0.8 whatever was given (`sglang_nsa_fraction`);
- the memory rule (`_handle_gpu_memory_settings`) runs before, on the flags as given.
0.5.3's release candidates and 0.5.8 on (which moved the rule out of server_args.py) are refused.

vLLM's, read in the PyPI wheel of 0.13.0 (its patch releases taken alike; `vllm_dsa_values`):
- the KV block is 64 tokens whatever --block-size says (vllm/platforms/cuda.py check_and_update_config: "Forcing
  kv cache block size to 64 for FlashMLASparse backend", whenever the config has `index_topk`);
- --kv-cache-dtype auto keeps the latent in the model's dtype (bf16, 576 x 2 bytes a token a layer); fp8 becomes
  "fp8_ds_mla" (models/config.py DeepseekV32ForCausalLM.verify_and_update_config), a layout of its own of 656 bytes
  (flashmla_sparse.py), which is refused here;
- each layer's indexer keys (DeepseekV32IndexerCache: 128 fp8 values and an fp32 scale, 132 bytes a token) are
  blocks of the same pool (kv_cache_utils.py: one group, the page the layers' sum), as ServeSim counts them;
- the memory set aside before the KV: the indexer's prefill workspace, 40 x max_model_len keys of 132 bytes, which
  the profiling run reserves (models/deepseek_v2.py sparse_attn_indexer, attention/backends/mla/indexer.py
  get_max_prefill_buffer_size), and the top-k index buffer, max_num_batched_tokens x index_topk int32 (deepseek_v2.py
  DeepseekV2Model): `kv_cache.reserve_bytes`;
- the attention runs on FLASHMLA_SPARSE, the only backend that takes it: with a bf16 KV its sparse prefill kernel for
  prefill and decode alike, the query heads padded to 64 on Hopper (at TP 8, 16 heads run as 64), as the roofline
  prices it; the indexer's weights_proj is bf16 whatever the checkpoint (priced at the weights' dtype here).
Chunked prefill, prefix caching, CUDA graphs (FULL_AND_PIECEWISE) and the batch defaults are vLLM's usual ones.
"""
from __future__ import annotations

from typing import Any

import dataclasses

from sim.config.engines.base import Context, dotted_version, get_key, released_before
from sim.errors import ConfigError

SGLANG_NSA_READ = ((0, 5, 3), (0, 5, 8))  # [first, end) of the SGLang releases whose rule is modelled
SGLANG_NSA_PAGE_TOKENS = 64
SGLANG_NSA_DP_GIVEN_SINCE = (0, 5, 6)  # before it, dp_size = tp_size
SGLANG_NSA_FRACTION_UNTIL, SGLANG_NSA_FRACTION = "0.5.3.post1", 0.8  # 0.5.3's mem_fraction_static
VLLM_DSA_READ = ((0, 13, 0), (0, 14, 0))  # [first, end) of the vLLM releases whose rule is modelled
VLLM_DSA_BLOCK_TOKENS = 64
VLLM_INDEXER_WORKSPACE_KEYS_PER_CONTEXT = 40  # indexer.py get_max_prefill_buffer_size: max_model_len x 40
VLLM_TOPK_INDEX_BYTES = 4  # int32


# How the cost models price it (what the engine notes say of it; the run names the cost model it took).
_PRICED = ("priced from vLLM's measured DSA modules where the GPU's vLLM tables hold them (the default there), else by "
           "the roofline: MLA over at most the top-k keys a query, its heads padded to FlashMLA's multiple, plus the "
           "indexer over every earlier token")
_SGLANG_PRICED = ("priced from SGLang's measured DSA modules where the GPU's SGLang tables hold them, else "
                  + _PRICED.removeprefix("priced "))


def check_sparse_attention(ctx: Context, engine: str, label: str) -> None:
    """ConfigError, one line, where the preset's rules for a sparse-attention model were not read."""
    model = ctx.model
    if model is None or not model.index_topk:
        return
    read = {"sglang": SGLANG_NSA_READ, "vllm": VLLM_DSA_READ}
    if engine in read:
        first, end = read[engine]
        if not released_before(ctx.version, ctx.version_text, first) and released_before(ctx.version,
                                                                                         ctx.version_text, end):
            return
    ranges = [f"{name} {dotted_version(first)} to before {dotted_version(end)}" for name, (first, end) in read.items()]
    raise ConfigError(f"engine.version: {label} {ctx.version_text} is not modelled for {model.name}'s sparse "
                      f"attention (index_topk {model.index_topk}: its engine rules were read for "
                      f"{' and '.join(ranges)} only); allowed: engine {', '.join(ranges)}, or no engine")


def _nsa(ctx: Context) -> bool:
    return ctx.model is not None and bool(ctx.model.index_topk)


def sglang_nsa_context(ctx: Context, notes: list[str]) -> Context:
    """The context SGLang's later rules read for a sparse-attention model: to 0.5.5.post3 its flags with
    enable_dp_attention set and dp_size = tp_size (data-parallel attention over every GPU, `sglang_dp_attention.py`);
    `ctx` itself otherwise. ConfigError, one line, where SGLang's own --tp is needed and not given."""
    if not _nsa(ctx) or not released_before(ctx.version, ctx.version_text, SGLANG_NSA_DP_GIVEN_SINCE):
        return ctx
    tp = ctx.flags.get("tp_size")
    if tp is None and ctx.tensor_parallel > 1:  # (hardware.tensor_parallel becomes each rank's GPUs: T is SGLang's)
        raise ConfigError(f"engine.tp_size: missing; SGLang {ctx.version_text} runs {ctx.model.name}'s attention "
                          "data-parallel over its --tp GPUs (dp_size = tp_size, server_args.py); allowed: --tp "
                          f"{ctx.tensor_parallel} in the engine's flags, with hardware.tensor_parallel left out")
    tp = tp or 1
    dp = ctx.flags.get("dp_size")
    if dp is not None and dp != tp:
        notes.append(f"SGLang {ctx.version_text}: --dp {dp} replaced by --tp {tp} for {ctx.model.name}'s sparse "
                     "attention, as its server_args.py replaces it")
    if tp > 1:
        notes.append(f"SGLang {ctx.version_text}: {ctx.model.name}'s sparse attention runs data-parallel over all "
                     f"{tp} GPUs (enable_dp_attention, dp_size = tp_size: server_args.py, to 0.5.5.post3)")
    return dataclasses.replace(ctx, flags={**ctx.flags, "enable_dp_attention": True, "dp_size": tp})


def sglang_nsa_fraction(ctx: Context, fraction: float, notes: list[str]) -> float:
    """mem_fraction_static as SGLang 0.5.3 sets it for a sparse-attention model (0.8, whatever was given or
    derived), `fraction` elsewhere."""
    if not _nsa(ctx) or not released_before(ctx.version, ctx.version_text, SGLANG_NSA_FRACTION_UNTIL):
        return fraction
    given = ctx.flags.get("mem_fraction_static")
    replaced = f"--mem-fraction-static {given}" if given is not None else f"its memory rule's {fraction}"
    if fraction != SGLANG_NSA_FRACTION:
        notes.append(f"SGLang {ctx.version_text}: {replaced} replaced by {SGLANG_NSA_FRACTION} for "
                     f"{ctx.model.name}'s sparse attention, as its server_args.py replaces it")
    return SGLANG_NSA_FRACTION


def sglang_nsa_values(ctx: Context, notes: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """(values, the flags that set them) SGLang takes for a sparse-attention model (see the module docstring)."""
    if not _nsa(ctx):
        return {}, {}
    values: dict[str, Any] = {"kv_cache.block_size": SGLANG_NSA_PAGE_TOKENS}
    given = ctx.flags.get("page_size")
    from_flags = {"kv_cache.block_size": "page_size"} if given is not None else {}
    if given is not None and given != SGLANG_NSA_PAGE_TOKENS:
        notes.append(f"SGLang {ctx.version_text}: --page-size {given} replaced by {SGLANG_NSA_PAGE_TOKENS} for "
                     f"{ctx.model.name}'s sparse attention, as its server_args.py replaces it")
    blackwell = ctx.gpu.blackwell
    if ctx.flags.get("kv_cache_dtype") in (None, "auto"):
        values["quantization.kv_cache"] = "fp8" if blackwell else "bf16"
    notes.append(f"SGLang {ctx.version_text}: {ctx.model.name}'s sparse attention on the nsa backend, "
                 f"{SGLANG_NSA_PAGE_TOKENS}-token KV pages, the KV in {'fp8' if blackwell else 'bf16'} by default "
                 f"({'Blackwell' if blackwell else 'before Blackwell'}); {_SGLANG_PRICED}")
    return values, from_flags


def vllm_dsa_values(ctx: Context, max_num_batched_tokens: int,
                    notes: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """(values, the flags that set them) vLLM takes for a sparse-attention model (see the module docstring), for a
    step of at most `max_num_batched_tokens`; ConfigError, one line, for an fp8 KV (its fp8_ds_mla layout)."""
    if not _nsa(ctx):
        return {}, {}
    model, label = ctx.model, f"vLLM {ctx.version_text}"
    if get_key(ctx.raw, "quantization.kv_cache") == "fp8":
        field = "engine.kv_cache_dtype" if ctx.flags.get("kv_cache_dtype") is not None else "quantization.kv_cache"
        raise ConfigError(f"{field}: fp8 is not modelled for {model.name}'s sparse attention under {label} (it "
                          "stores fp8_ds_mla, 656 bytes a token a layer in a layout of its own); allowed: auto or "
                          "bfloat16 (bf16)")
    values: dict[str, Any] = {"kv_cache.block_size": VLLM_DSA_BLOCK_TOKENS}
    from_flags: dict[str, str] = {}
    given = ctx.flags.get("block_size")
    if given is not None:
        from_flags["kv_cache.block_size"] = "block_size"
        if given != VLLM_DSA_BLOCK_TOKENS:
            notes.append(f"{label}: --block-size {given} replaced by {VLLM_DSA_BLOCK_TOKENS} for {model.name}'s "
                         "sparse attention, as its platforms/cuda.py replaces it")
    max_len = ctx.given_max_model_len() or ctx.derived_context or model.max_context
    workspace = VLLM_INDEXER_WORKSPACE_KEYS_PER_CONTEXT * max_len * model.index_key_bytes
    topk_buffer = max_num_batched_tokens * model.index_topk * VLLM_TOPK_INDEX_BYTES
    values["kv_cache.reserve_bytes"] = workspace + topk_buffer
    notes.append(f"{label}: {model.name}'s sparse attention on FLASHMLA_SPARSE, {VLLM_DSA_BLOCK_TOKENS}-token KV "
                 f"blocks holding the latent and the indexer's keys; {workspace + topk_buffer:,} bytes a GPU set aside "
                 f"before the KV (the indexer's prefill workspace for max_model_len {max_len:,}, the top-k index "
                 f"buffer for {max_num_batched_tokens:,} tokens: kv_cache.reserve_bytes); {_PRICED}")
    return values, from_flags
