"""vLLM's preset (0.6.0-0.34.x): its V1 and V0 rules, defaults by GPU and version, flags and options."""

from __future__ import annotations

import dataclasses
from typing import Any

from sim.config.engine_command import InertOption
from sim.config.engines.base import (Context, Flag, GIB, LOGGING, MODEL_FILES, PARSING, PresetResult, REQUEST_LIMITS,
                                     SEED, SERVER_ADDRESS, STREAM_CHUNK_KEY, USAGE_REPORTS, at_least, caches_prefixes,
                                     config_overrides, custom_all_reduce, dotted_version, get_key, gib_as_bytes,
                                     inert_group, json_mapping, kv_cache_dtype_flag, only_default, only_one_of,
                                     refuse_model_before, OFFLOAD_COPIED_IN, offload_note, sixteen_bit_dtype,
                                     weights_quantization)
from sim.config.engines.engine_work import inbound_work, preset_terms
from sim.config.engines.vllm_context import (VLLM_HF_OVERRIDES_SINCE, VLLM_ROPE_SCALING_UNTIL, fits_to_kv,
                                             readable_number, rope_scaling_override)
from sim.config.engines.sparse_attention import vllm_dsa_values
from sim.config.engines.vllm_data_parallel import vllm_data_parallel
from sim.config.engines.vllm_graphs import (CAPTURE_SIZE_OPTIONS, CAPTURE_SIZES, VLLM_COMPILATION_CONFIG_SINCE,
                                            VLLM_OPTIMIZATION_LEVEL_SINCE, read_compilation_config,
                                            read_optimization_level, vllm_graph_overhead, vllm_v0_compilation)
from sim.config.engines.vllm_speculative import (VLLM_SPECULATIVE_CONFIG_SINCE, VLLM_V1_DRAFT_MODEL_FALLBACK_UNTIL,
                                                  VLLM_V1_DRAFT_MODEL_SINCE, async_with_method, read_speculative_config,
                                                  refuse_asked_async, speculative_values)
from sim.errors import ConfigError
from sim.kv.paged import MAX_KV_BLOCKS
from sim.model.attention_io import TRITON_BACKEND
from sim.model.memory import pipeline_stage_layers, stage_kv_bytes_per_token


# What the vLLM preset reads, and where (each in the PyPI sdists of every release from 0.11.0 to 0.34.0 but 0.15.x,
# which PyPI has as wheels only: 0.15.x is taken as 0.16.0, and a preset note says so).
VLLM_NEWEST = (0, 34, 0)
VLLM_BATCH_TIER_160_GIB_SINCE = (0, 28, 0)  # get_batch_defaults: >= 160 GiB -> 16384 / 1024 (B200, B300)
# V1's batch tiers before 0.11.0 (EngineArgs._set_default_args_v1, read in the PyPI sdists of 0.8.0-0.8.5.post1,
# 0.9.0-0.9.2 and 0.10.0-0.10.2): 0.8.0-0.8.4 pick the big tier by the device's name ("h100" or "h200" in it) and
# 0.8.0-0.8.3 give every GPU 1024 sequences; 0.8.5 by its memory (>= 70 GiB); from 0.9.0 not an A100 either (PR 17885)
VLLM_BATCH_SEQS_BY_TIER_SINCE = (0, 8, 4)
VLLM_BATCH_BY_MEMORY_SINCE = (0, 8, 5)
VLLM_BATCH_NOT_A100_SINCE = (0, 9, 0)
VLLM_MEMORY_UTILIZATION_092_SINCE = (0, 20, 0)  # CacheConfig.gpu_memory_utilization 0.9 -> 0.92
VLLM_FULL_PROMPT_ADMISSION_SINCE = (0, 19, 0)  # SchedulerConfig.scheduler_reserve_full_isl = True
# A request longer than max_model_len (scheduler.too_long): refused by the OpenAI server where its prompt plus its
# max_tokens pass it (HTTP 400, "'max_tokens' or 'max_completion_tokens' is too large"), read in the PyPI sdists of
# 0.6.0, 0.9.2, 0.11.0, 0.12.0, 0.14.0, 0.16.0 (entrypoints/openai/serving_engine.py, 0.16's engine/serving.py
# _validate_input) and 0.16.0, 0.17.0, 0.19.0, 0.20.0, 0.27.0, 0.31.0 (renderers/params.py: max_input_tokens is
# max_total_tokens - max_output_tokens); from 0.32.0 (read in 0.32.0, 0.33.0, 0.34.0) max_input_tokens is the whole
# context, a longer prompt refused, and entrypoints/serve/utils/api_utils.py get_max_tokens clips max_tokens to what
# the prompt leaves (a prompt of the whole context leaves 0, which SamplingParams refuses: "max_tokens must be at
# least 1")
VLLM_CLIPS_OUTPUT_SINCE = (0, 32, 0)
VLLM_MLA_BLOCK_FROM_BACKEND_SINCE = (0, 18, 0)  # platforms/cuda.py no longer forces FlashMLA's 64 / CUTLASS's 128
# vllm/config/cache.py in the 0.34.0 sdist: CacheConfig.DEFAULT_BLOCK_SIZE 16 -> 64, which every CUDA attention backend
# the preset prices takes as its preferred size (platforms/interface.py update_block_size_for_backend: FlashAttention,
# FlashInfer, Triton and FlashAttention-MLA take multiples of 16, FlashInfer MLA 32 or 64); and the extensible KV cache
# on by default on CUDA (VllmConfig._resolve_extensible_kv_cache; off where --num-gpu-blocks-override or
# --kv-cache-memory-bytes sizes the cache): gpu_memory_utilization unset resolves to 1.0
# (resolved_gpu_memory_utilization) and the cache is sized from the memory free after warmup and CUDA graph capture,
# less the transient peak and a margin of max(1 GiB, 0.75 x the peak) (v1/worker/extensible_kv_cache.py
# measure_kv_cache_bytes, KV_CACHE_MARGIN_FLOOR_BYTES, KV_CACHE_MARGIN_FRACTION).
VLLM_BLOCK_64_SINCE = (0, 34, 0)
VLLM_EXTENSIBLE_KV_SINCE = (0, 34, 0)
VLLM_EXTENSIBLE_KV_MARGIN = {"floor_bytes": 1 << 30, "fraction": 0.75}
# FlashInfer MLA's kernel block sizes (v1/attention/backends/mla/flashinfer_mla.py get_supported_kernel_block_sizes,
# the 0.34.0 sdist): the default where it is one of them, else the smallest
VLLM_FLASHINFER_MLA_BLOCK_SIZES = (32, 64)
# --block-size's values, as each release's parser takes them (vllm/engine/arg_utils.py choices to 0.8.4, then the
# BlockSize Literal of vllm/config.py / vllm/config/cache.py turned into choices; read in the sdists of 0.6.0, 0.6.3,
# 0.6.4, 0.6.6, 0.7.0-0.7.3, 0.8.0-0.8.5, 0.9.0, 0.9.2, 0.10.0, 0.10.2, 0.11.0-0.11.2, 0.12.0-0.14.0, 0.16.0, 0.17.0,
# 0.17.1, 0.18.0, 0.19.0, 0.33.0, 0.34.0): from 0.18.0 any whole number (an int field; which sizes each attention
# backend then takes is not modelled). Pairs of (first release, the values).
VLLM_BLOCK_SIZE_CHOICES = (((0, 6, 0), (8, 16, 32)), ((0, 6, 4), (8, 16, 32, 64, 128)),
                           ((0, 8, 5), (1, 8, 16, 32, 64, 128)), ((0, 11, 1), (1, 8, 16, 32, 64, 128, 256)),
                           ((0, 18, 0), None))
# --async-scheduling: experimental from v0.10.0 (SchedulerConfig.async_scheduling: bool = False through v0.13.0), on
# by default from v0.14.0 (Field(default=None), resolved by VllmConfig.__post_init__: `_vllm_async_default`).
VLLM_ASYNC_SCHEDULING_SINCE = (0, 10, 0)
# --stream-interval (vllm/config/scheduler.py, in the 0.11.1 and 0.11.2 wheels, not 0.11.0's): the output processor
# (v1/engine/output_processor.py) sends a request's first token, then whenever N more have come, and its end
VLLM_STREAM_INTERVAL_SINCE = (0, 11, 1)
VLLM_ASYNC_SCHEDULING_DEFAULT_SINCE = (0, 14, 0)
VLLM_ASYNC_WITH_PIPELINE_SINCE = (0, 15, 0)  # __post_init__ no longer turns it off for PP > 1 (v0.16.0; 0.15 as 0.16)


def _vllm_batch_defaults(gpu, version: tuple[int, ...]) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) of vLLM V1's OpenAI server: vllm/engine/arg_utils.py
    EngineArgs.get_batch_defaults (v0.11.0: inline in _set_default_args; pinned by tests/engine/test_arg_utils.py):
    a GPU with >= 70 GiB (total memory, 2^30 bytes) that is not an A100 gets 8192 / 1024, any other 2048 / 256; from
    v0.28.0 one with >= 160 GiB gets 16384 / 1024 first, whatever its name (v0.33.0 also keeps the GB10, compute
    capability 12.1, on the small tier). Before 0.9.0 (`VLLM_BATCH_NOT_A100_SINCE`'s comment): 0.8.5 by memory
    alone (an A100-80GB on the big tier); 0.8.0-0.8.4 by the device's name (the catalog's names hold the same words
    as torch's), 2048 tokens elsewhere, with 1024 sequences on every GPU to 0.8.3."""
    if version < VLLM_BATCH_BY_MEMORY_SINCE:
        big = any(word in gpu.name.lower() for word in ("h100", "h200"))
        seqs = 1024 if big or version < VLLM_BATCH_SEQS_BY_TIER_SINCE else 256
        return (8192 if big else 2048), seqs
    if version >= VLLM_BATCH_TIER_160_GIB_SINCE and gpu.hbm_bytes >= 160 * GIB:
        return 16384, 1024
    big = gpu.hbm_bytes >= 70 * GIB and ("a100" not in gpu.name.lower() or version < VLLM_BATCH_NOT_A100_SINCE)
    if version >= (0, 33) and gpu.compute_capability == (12, 1):
        big = False
    return (8192, 1024) if big else (2048, 256)


def _vllm_default_block_size(version: tuple[int, ...]) -> int:
    """CacheConfig's default KV block size: 16 tokens, 64 from v0.34.0 (VLLM_BLOCK_64_SINCE)."""
    return 64 if version >= VLLM_BLOCK_64_SINCE else 16


def _vllm_mla_block_size(ctx: Context) -> tuple[int, str] | None:
    """The KV block size vLLM forces for an MLA model (DeepSeek-V2/V3/R1) on CUDA, with why; None where it keeps its
    default (`_vllm_default_block_size`; vllm/platforms/cuda.py CudaPlatformBase.check_and_update_config): to v0.17.x,
    FlashMLA's 64 on Hopper (compute capability 9.x; from v0.11.1 the backend chosen is FlashAttention-MLA, which
    takes any multiple of 16, but the FlashMLA branch still forces 64); on Blackwell (10.x) CUTLASS MLA's 128 to
    v0.14.x, then (v0.16.0) FlashInfer MLA's 64 where qk_nope_head_dim is 128, else CUTLASS's 128. From v0.18.0 the
    block size is the backend's preferred one, the default where it takes it: FlashAttention-MLA on Hopper takes any
    multiple of 16, FlashInfer MLA on Blackwell 32 or 64 (so 32 while the default is 16, the default 64 from
    v0.34.0). Other GPUs: the default."""
    model, cc = ctx.model, ctx.gpu.compute_capability
    if model is None or model.attention != "mla" or cc is None:
        return None
    v = ctx.version
    if cc[0] == 9 and v < VLLM_MLA_BLOCK_FROM_BACKEND_SINCE:
        return 64, "FlashMLA's block size, forced on Hopper"
    if cc[0] != 10:
        return None
    if v >= VLLM_MLA_BLOCK_FROM_BACKEND_SINCE:
        if _vllm_default_block_size(v) in VLLM_FLASHINFER_MLA_BLOCK_SIZES:
            return None
        return min(VLLM_FLASHINFER_MLA_BLOCK_SIZES), "FlashInfer MLA's smallest block size on Blackwell"
    if v >= (0, 15) and model.qk_nope_head_dim == 128:
        return 64, "FlashInfer MLA's block size, forced on Blackwell"
    return 128, "CUTLASS MLA's block size, forced on Blackwell"


# vLLM V1's hybrid KV cache manager (vllm/v1/core/kv_cache_coordinator.py) keeps a hybrid model's sliding layers in
# groups of their own in the one block pool, each request's blocks outside its window freed: from 0.10.0 (assumed: the
# release it came with, not read here); before it, and with --disable-hybrid-kv-cache-manager, every layer keeps every
# token's KV.
VLLM_HYBRID_KV_SINCE = (0, 10, 0)


def _vllm_window_memory(ctx: Context, notes: list[str]) -> dict[str, Any]:
    """Where vLLM keeps a hybrid model's sliding layers' KV (`kv_cache.window_memory`)."""
    model = ctx.model
    if model is None or not model.hybrid_window:
        return {}
    if ctx.flags.get("disable_hybrid_kv_cache_manager") or ctx.version < VLLM_HYBRID_KV_SINCE:
        why = ("--disable-hybrid-kv-cache-manager" if ctx.flags.get("disable_hybrid_kv_cache_manager")
               else f"vLLM {ctx.version_text} predates the hybrid KV cache manager, assumed from 0.10.0")
        notes.append(f"vLLM: {model.name}'s sliding layers keep every token's KV ({why})")
        return {"kv_cache.window_memory": "every_token"}
    return {"kv_cache.window_memory": "shared_pool"}


# vLLM V1's memory profile (vllm/v1/worker/gpu_model_runner.py profile_run, read in the 0.10.2 and 0.11.0 wheels) ends
# with `_dummy_sampler_run`: max_num_seqs rows of logits through its sampler with top-k and top-p set, "to profile the
# worst case". With FlashInfer (vLLM's Docker images ship it: docker/Dockerfile's vllm-base stage installs it on
# x86_64), at the peak it holds the bf16 logits (2 bytes each), their fp32 copy (4), FlashInfer's top-k-masked copy (4)
# and its softmax (4): 14 bytes a logit, vllm/v1/sample/sampler.py and ops/topk_topp_sampler.py `flashinfer_sample` ->
# flashinfer.sampling.top_k_top_p_sampling_from_logits. Without FlashInfer (a pip install before 0.12.0 without the
# flashinfer extra: 0.12.0's METADATA requires flashinfer-python) PyTorch's path sorts them (values and int64
# indices) and holds about 28: set kv_cache.sampler_bytes_per_logit to it. gpt-oss-120b at 1,024 rows: 2.7 GiB.
VLLM_SAMPLER_BYTES_PER_LOGIT = 14.0


# vLLM's MXFP4 MoE kernels (vllm/model_executor/layers/quantization/mxfp4.py, read in the 0.10.2, 0.11.0 and 0.12.0
# wheels; from 0.19.0 fused_moe/oracle/mxfp4.py): Marlin wherever the GPU is older than sm_90, and before 0.12.0 on
# every GPU (its wheels neither require nor ship `triton_kernels`; 0.12.0 bundles them in vllm/third_party), which pads
# each expert's hidden size to 256 and each GPU's share of its intermediate size to 128 ("n % 256 == 0 and k % 128 ==
# 0"). gpt-oss-120b on one GPU: 60.7 GiB checkpoint, 65.8 GiB padded; a vLLM log on an H100 PCIe running Marlin
# (vllm-project/vllm#23278, PyTorch 2.7.1: vLLM 0.10.1) says "Model loading took 65.9651 GiB". From 0.12.0 Hopper and
# Blackwell run the Triton kernels, whose Hopper layout pads these shapes by less than 1% (not modelled); 0.19.0 prefers
# FlashInfer's TRT-LLM kernel on sm_100 (hidden and intermediate to 256).
VLLM_MXFP4_TRITON_SINCE = (0, 12, 0)
VLLM_MXFP4_FLASHINFER_SINCE = (0, 19, 0)
VLLM_MARLIN_EXPERT_PADDING = {"hidden": 256, "intermediate": 128}
VLLM_FLASHINFER_EXPERT_PADDING = {"hidden": 256, "intermediate": 256}


def _vllm_expert_padding(ctx: Context, notes: list[str]) -> dict[str, Any]:
    """How vLLM's MXFP4 MoE kernel pads the routed experts (`quantization.expert_padding`), and which kernel it is
    where the measured tables' main one is another (`quantization.moe_kernel`: Marlin), for an mxfp4 model."""
    q = ctx.raw.get("quantization")
    if ctx.model is None or not ctx.model.is_moe or not isinstance(q, dict) or q.get("weights") != "mxfp4":
        return {}  # (mxfp4 on a dense model: refused as the scenario's weights, not as a padding it never gave)
    from sim.model.memory import MARLIN
    capability = ctx.gpu.compute_capability or (0, 0)
    values: dict[str, Any] = {}
    if capability < (9, 0) or ctx.version < VLLM_MXFP4_TRITON_SINCE:
        why = (f"sm_{capability[0]}{capability[1]} has no FP4" if capability < (9, 0) else
               "its wheel ships no triton_kernels; with them installed it runs its Triton kernel, which pads "
               "nothing here: quantization.expert_padding: null, moe_kernel: null")
        kernel, pad = f"Marlin ({why})", VLLM_MARLIN_EXPERT_PADDING
        values["quantization.moe_kernel"] = MARLIN  # priced from the tables' Marlin rows (sim/cost/measured.py)
    elif ctx.version >= VLLM_MXFP4_FLASHINFER_SINCE and (10, 0) <= capability < (11, 0):
        kernel, pad = "FlashInfer's TRT-LLM kernel on sm_100", VLLM_FLASHINFER_EXPERT_PADDING
    else:
        return {}
    notes.append(f"vLLM {ctx.version_text}: MXFP4 experts run by {kernel}, stored padded to hidden {pad['hidden']} "
                 f"and each GPU's intermediate to {pad['intermediate']}")
    return {**values, "quantization.expert_padding": dict(pad)}


# vLLM's attention backend where it is not the one its tables measured on the GPU (vllm/platforms/cuda.py
# get_attn_backend_cls, read in the 0.10.2, 0.11.0, 0.12.0, 0.13.0, 0.14.0, 0.19.0 and 0.24.0 sdists). A model with
# attention sinks (gpt-oss) runs the Triton backend on every sm_80+ GPU but sm_90 (FlashAttention 3, which has sinks)
# and sm_100 (FlashInfer's TRT-LLM kernels, where the official images ship them): to 0.11.x by an explicit rule, from
# 0.12.0 by a priority list (FlashAttention, FlashInfer, Triton; FlashInfer first on sm_10x) checked against each
# backend's features, where FlashAttention-2 has no sinks and FlashInfer has them only through its TRT-LLM kernels,
# on sm_100 exactly to 0.12.x and on every sm_10x from 0.13.0. 0.11.x's rule sent an fp8 KV cache to Triton too (not
# on sm_90 or sm_100); from 0.12.0 FlashInfer takes it first, whose rows the tables keep. An MLA model takes one of
# the MLA backends, chosen before all this. The preset says so in `attention.backend`, which the measured model
# prices (sim/cost/measured.py: FlashAttention-2's rows times Triton's measured ratio to them).
VLLM_TRITON_ATTENTION_SINCE = (0, 10)
VLLM_TRITON_FP8_KV = ((0, 11), (0, 12))  # the releases whose rule sent an fp8 KV cache to Triton
VLLM_SINKS_FLASHINFER_SM10X_SINCE = (0, 13)  # FlashInfer's TRT-LLM kernels on every sm_10x, not sm_100 alone
VLLM_BACKENDS_READ_UNTIL = (0, 24)  # the newest release read; later ones are taken to keep its rule
# Models with attention sinks. V0's attention implementations take none (their __init__ has no `sinks` argument, read
# in the 0.10.1 and 0.10.2 sdists), so a V0 fallback for one is refused (`derive_vllm`).
VLLM_SINKS_MODEL_TYPES = ("gpt_oss",)
# The first release whose model registry (vllm/model_executor/models/registry.py) has a model type, where it is later
# than the versions the preset knows: GptOssForCausalLM is in 0.10.1's sdist, not in 0.10.0's.
VLLM_MODEL_TYPE_SINCE = {"gpt_oss": (0, 10, 1)}


def _vllm_triton_attention(ctx: Context, notes: list[str]) -> dict[str, Any]:
    """`attention.backend: triton` where vLLM runs its Triton attention backend, and a note why."""
    v = ctx.version[:2]
    if ctx.model is None or v < VLLM_TRITON_ATTENTION_SINCE or ctx.model.attention == "mla":
        return {}
    capability = ctx.gpu.compute_capability or (0, 0)
    if capability < (8, 0) or capability == (9, 0):
        return {}
    flashinfer_sinks = capability == (10, 0) or (capability[0] == 10 and v >= VLLM_SINKS_FLASHINFER_SM10X_SINCE)
    fp8_kv = (get_key(ctx.raw, "quantization.kv_cache") == "fp8" and VLLM_TRITON_FP8_KV[0] <= v < VLLM_TRITON_FP8_KV[1]
              and capability != (10, 0))
    why = ("its attention sinks" if ctx.model.model_type in VLLM_SINKS_MODEL_TYPES and not flashinfer_sinks
           else "an fp8 KV cache" if fp8_kv else None)
    if why is None:
        return {}
    taken = (f"; read to {dotted_version(VLLM_BACKENDS_READ_UNTIL)}.0, taken for {ctx.version_text}"
             if v > VLLM_BACKENDS_READ_UNTIL else "")
    notes.append(f"vLLM {ctx.version_text}: attention run by its Triton backend ({why}, on sm_{capability[0]}"
                 f"{capability[1]}: vllm/platforms/cuda.py{taken}): attention.backend {TRITON_BACKEND}")
    return {"attention.backend": TRITON_BACKEND}


def _vllm_block_size_choice(ctx: Context) -> None:
    """--block-size refused in one line where the release's parser does not take the value (VLLM_BLOCK_SIZE_CHOICES)."""
    given = ctx.flags.get("block_size")
    if given is None:
        return
    choices = next(c for since, c in reversed(VLLM_BLOCK_SIZE_CHOICES) if ctx.version >= since)
    if choices is not None and given not in choices:
        raise ConfigError(f"engine.block_size: {given} is not a choice of vLLM {ctx.version_text}'s --block-size; "
                          f"allowed: {', '.join(map(str, choices))}")


def _vllm_extensible_kv(ctx: Context) -> bool:
    """Whether vLLM sizes its KV cache after warmup (VLLM_EXTENSIBLE_KV_SINCE): by default from 0.34.0, not where
    --num-gpu-blocks-override or --kv-cache-memory-bytes sizes it or --no-enable-extensible-kv-cache turns it off;
    asked for beside an override, refused in one line, as vLLM refuses it ("Explicitly requesting it where unsupported
    is an error")."""
    asked = ctx.flags.get("enable_extensible_kv_cache")
    if ctx.version < VLLM_EXTENSIBLE_KV_SINCE or asked is False:
        return False
    for sizing in ("num_gpu_blocks_override", "kv_cache_memory_bytes"):
        if ctx.flags.get(sizing) is None:
            continue
        if asked:
            raise ConfigError(f"engine.enable_extensible_kv_cache: true contradicts engine.{sizing} (vLLM sizes an "
                              "extensible KV cache from measured memory, which that setting replaces); allowed: leave "
                              "one of them out")
        return False
    return True


def derive_vllm(ctx: Context) -> PresetResult:
    """vLLM V1 (0.8+) as vllm/engine/arg_utils.py, vllm/config and vllm/platforms/cuda.py derive it, read in the PyPI
    sdist of every release from 0.11.0 to 0.33.0 (0.15.x as 0.16.0), and 0.34.0's changes to them
    (VLLM_BLOCK_64_SINCE, VLLM_EXTENSIBLE_KV_SINCE): chunked prefill with decodes and prefill chunks in one step, the
    OpenAI server's batch tiers by GPU memory (`_vllm_batch_defaults`, read from 0.8.0: by the GPU's name to 0.8.4),
    16-token KV blocks (64 from 0.34; an MLA model: its kernel's, `_vllm_mla_block_size`), gpu_memory_utilization 0.9
    (0.92 from 0.20; from 0.34 the extensible KV cache's sizing after warmup, `_vllm_extensible_kv`), async
    scheduling by default from 0.14; V0 (0.6-0.7, and 0.8-0.10 where V1 falls back to it: `_vllm_v0_fallback`) as
    each release does (`_vllm_v0_schedule`): prefill-only steps unless chunked (on by default above a 32k context),
    multi-step decoding; NCCL's all-reduce where its own turns off (`custom_all_reduce`)."""
    v, flags = ctx.version, ctx.flags
    _vllm_block_size_choice(ctx)
    values: dict[str, Any] = {"scheduler.batching": "continuous", "kv_cache.layout": "paged",
                              "kv_cache.block_size": _vllm_default_block_size(v),
                              "kv_cache.gpu_memory_utilization": 0.9,
                              "scheduler.too_long": "clip_output" if v >= VLLM_CLIPS_OUTPUT_SINCE else "refuse"}
    notes: list[str] = []
    refuse_model_before(ctx, VLLM_MODEL_TYPE_SINCE, "vLLM", "vllm/model_executor/models/registry.py")
    _vllm_refuse_draft_model(ctx)
    method, speculated = speculative_values(ctx, notes)
    values.update(speculated)
    tree = get_key(ctx.raw, "speculation.draft_tree_width")
    if isinstance(tree, int) and not isinstance(tree, bool) and tree > 1:
        notes.append(f"vLLM {ctx.version_text}: a tree of drafts (speculation.draft_tree_width {tree}) is vLLM's "
                     "speculative_token_tree, which is not read here: the section's tree is a what-if")
    values.update(fits_to_kv(flags, ctx.version_text, notes))
    _vllm_swap_notes(ctx, notes)
    _vllm_generation_note(ctx, notes)
    method = method or ("draft_model" if _vllm_draft_model(ctx) else None)  # a section's draft model names its own
    fallback = _vllm_v0_fallback(ctx)
    if fallback is not None:
        if ctx.model is not None and ctx.model.model_type in VLLM_SINKS_MODEL_TYPES:
            raise ConfigError(f"quantization.kv_cache: 'fp8' with {ctx.model.model_type} on {ctx.gpu.name} is not "
                              f"run by vLLM {ctx.version_text}: V1 falls back to V0 for it, whose attention takes no "
                              "sinks (vllm/attention/backends/flash_attn.py and xformers.py), so the model does not "
                              "load; allowed: bf16 (or leave it out), an sm_9x or sm_100 GPU, or vLLM 0.11.0 or later")
        if flags.get("speculative_config") is not None:
            raise ConfigError(f"engine.speculative_config: not modelled where vLLM {ctx.version_text} falls back to "
                              "V0 (its speculative decoding is not read); allowed: leave it out, a setup V1 runs, or "
                              "vLLM 0.11.0 or later")
        notes.append(fallback)
    v1 = v >= (0, 8) and fallback is None
    _vllm_offload_notes(ctx, v1, notes)
    if v1:
        values["kv_cache.sampler_bytes_per_logit"] = VLLM_SAMPLER_BYTES_PER_LOGIT  # its profiling run's sampler
        notes.append(f"vLLM {ctx.version_text}: its memory profile's sampler holds {VLLM_SAMPLER_BYTES_PER_LOGIT:g} "
                     "bytes a logit over max_num_seqs rows, FlashInfer's path as vLLM's Docker images ship it "
                     "(PyTorch's, without FlashInfer: about 28, kv_cache.sampler_bytes_per_logit)")
        # V1 (the default engine from 0.8.0): chunked prefill always on, decodes and prefill chunks share a step.
        if flags.get("num_scheduler_steps", 1) != 1:
            raise ConfigError(f"engine.num_scheduler_steps: {flags['num_scheduler_steps']} is not a flag of vLLM "
                              f"{ctx.version_text} (V1 has no multi-step scheduling); allowed: vLLM 0.6.0 to 0.7.x, "
                              "or leave it out")
        if flags.get("enable_chunked_prefill") is False:
            raise ConfigError(f"engine.enable_chunked_prefill: false contradicts vLLM {ctx.version_text} (V1 always "
                              "chunks prefills); allowed: true, or vLLM 0.6.0 to 0.7.x")
        mnbt, seqs = _vllm_batch_defaults(ctx.gpu, v)
        mnbt, seqs = _vllm_performance_mode(ctx, mnbt, seqs, notes)
        values.update({"scheduler.chunked_prefill": True, "scheduler.mixed_batches": True,
                       "scheduler.max_num_batched_tokens": mnbt, "scheduler.max_num_seqs": seqs,
                       # V1 caches prefixes unless told not to (--no-enable-prefix-caching): prompts that share
                       # content ids (a chat template's lead, a shared system prompt) reuse its blocks
                       "kv_cache.enable_prefix_caching": caches_prefixes(ctx, notes, f"vLLM {ctx.version_text}")})
        if v[:2] == (0, 15):
            notes.append(f"vLLM {ctx.version_text}: v0.16.0's defaults assumed (PyPI has no 0.15 sdist to read)")
        if v < VLLM_FULL_PROMPT_ADMISSION_SINCE:
            # vllm/v1/core/sched/scheduler.py (read at v0.11.0) admits on the blocks of the chunk a prompt computes
            # this step (`scheduler.admission: first_chunk`); its later chunks then preempt the last admitted, and
            # vLLM's default prefix caching gives a preempted request back its blocks still cached. ServeSim keys
            # no blocks of a prompt without content ids, so every preemption would recompute all: whole-prompt
            # admission stands in (its effect on the published suite: benchmarks/results/published-e2e.md).
            notes.append(f"vLLM {ctx.version_text}: a prompt is admitted when its whole prompt's KV blocks are "
                         "free, as v0.19.0's scheduler_reserve_full_isl does (earlier versions check its first "
                         "chunk only: `scheduler.admission: first_chunk`, without the prefix-cache hits that make "
                         "their preemptions cheap)")
        mla = None if ctx.model is not None and ctx.model.index_topk else _vllm_mla_block_size(ctx)
        sparse, sparse_flags = vllm_dsa_values(ctx, flags.get("max_num_batched_tokens")
                                               or get_key(ctx.raw, "scheduler.max_num_batched_tokens") or mnbt, notes)
        values.update(sparse)
        if mla is not None:
            values["kv_cache.block_size"] = mla[0]
            notes.append(f"vLLM {ctx.version_text}: KV block size {mla[0]} for an MLA model on {ctx.gpu.name} "
                         f"({mla[1]}; vllm/platforms/cuda.py)")
        if v >= VLLM_BLOCK_64_SINCE and mla is None and "block_size" not in flags:
            notes.append(f"vLLM {ctx.version_text}: KV blocks of 64 tokens (CacheConfig.DEFAULT_BLOCK_SIZE, which the "
                         "attention backend takes)")
        if _vllm_extensible_kv(ctx):
            values["kv_cache.gpu_memory_utilization"] = 1.0
            values["kv_cache.transient_margin"] = dict(VLLM_EXTENSIBLE_KV_MARGIN)
            margin = VLLM_EXTENSIBLE_KV_MARGIN
            notes.append(f"vLLM {ctx.version_text}: its extensible KV cache, sized from the memory free after warmup: "
                         f"gpu_memory_utilization 1.0 unless given, the peak activations and max("
                         f"{margin['floor_bytes'] / GIB:g} GiB, {margin['fraction']:g} x them) kept free "
                         "(kv_cache.transient_margin); the CUDA context's and CUDA graphs' memory, which it measures, "
                         "is not taken from the KV budget")
        elif v >= VLLM_MEMORY_UTILIZATION_092_SINCE:
            values["kv_cache.gpu_memory_utilization"] = 0.92
            notes.append(f"vLLM {ctx.version_text}: gpu_memory_utilization 0.92; the memory vLLM sets aside for CUDA "
                         "graphs (profiled from v0.20.0) is not taken from the KV budget")
    else:
        values.update(_vllm_v0_schedule(ctx, notes))
    values.update(_vllm_window_memory(ctx, notes))
    values.update(_vllm_expert_padding(ctx, notes))
    if v1:  # (V0 runs no model with attention sinks)
        values.update(_vllm_triton_attention(ctx, notes))
    values.update(preset_terms(ctx, "vllm", notes, inbound_work(ctx, "vllm", notes, v0_fallback=fallback is not None)))
    values.update(custom_all_reduce(ctx, "vLLM"))
    if v1:  # the steps that leave CUDA graphs pay the eager launch term (sim/cost/overhead.py)
        max_num_seqs = flags.get("max_num_seqs") or get_key(ctx.raw, "scheduler.max_num_seqs")
        values["cost_model.overhead"] = vllm_graph_overhead(ctx, values["cost_model.overhead"],
                                                            max_num_seqs or values["scheduler.max_num_seqs"], notes)
    else:
        vllm_v0_compilation(ctx, notes)
        if flags.get("enforce_eager"):
            values["cost_model.overhead"] = {**values["cost_model.overhead"], "engine": "vllm-eager"}
    _vllm_executor_backend(ctx)
    _vllm_frontend_in_process(ctx, v1, notes)
    asked = flags.get("async_scheduling")
    if asked and v < VLLM_ASYNC_SCHEDULING_SINCE:
        raise ConfigError(f"engine.async_scheduling: true is not a flag of vLLM {ctx.version_text}; allowed: "
                          f"vLLM {dotted_version(VLLM_ASYNC_SCHEDULING_SINCE)} or later, or leave it out")
    if asked:
        refuse_asked_async(ctx, method)
    if asked is None and v >= VLLM_ASYNC_SCHEDULING_DEFAULT_SINCE:
        asked, why = _vllm_async_default(ctx, method)
        notes.append(f"vLLM {ctx.version_text}: async scheduling {why} (vllm/config/vllm.py)")
    if asked:
        # the engine core schedules step N + 1 while the GPU runs step N (vllm/v1/engine/core.py
        # step_with_batch_queue): a step takes the longer of its kernels and the CPU terms (sim/cost/overhead.py)
        values["cost_model.overhead"] = {**values["cost_model.overhead"], "overlap": True}
        named = "--async-scheduling" if flags.get("async_scheduling") else "async scheduling"
        notes.append(f"vLLM {named}: the CPU terms (fitted on runs without it) overlap the GPU's step")
    values.update(_vllm_blocks_override(ctx, values["kv_cache.block_size"], notes))
    values.update(_vllm_kv_memory_bytes(ctx, values["kv_cache.block_size"], notes))
    capped = _vllm_long_prefill_cap(ctx, v1, notes)
    values.update(capped)
    from_flags = {key: "long_prefill_token_threshold_adaptive" if key.endswith("fair_share")
                  else "long_prefill_token_threshold" for key in capped}
    from_flags.update({key: "speculative_config" for key in values if key.startswith("speculation.")})
    if v1:
        from_flags.update(sparse_flags)
    parallel, parallel_flags = vllm_data_parallel(ctx, notes, v0_fallback=fallback is not None)
    values.update(parallel)
    return PresetResult(values, {**from_flags, **parallel_flags}, notes, v0_fallback=fallback is not None)


# --long-prefill-token-threshold (in vllm/engine/arg_utils.py from 0.8.0): vLLM V1's scheduler caps each prompt's
# chunk at it from 0.8.3 (0.8.0-0.8.2 parse it and do not read it), from 0.31.0 only while more than one request
# runs or waits (and, with --long-prefill-token-threshold-adaptive, 0.31.0 on, at least max_num_batched_tokens //
# those requests) and only with chunked prefill (sim/sched/rules.py `max_prefill_chunk_tokens`, where the files read
# are named; V1's chunked prefill is always on here); V0 reads it only to count long prompts among concurrent partial
# prefills (vllm/core/scheduler.py PartialPrefillMetadata), which --max-num-partial-prefills 1, its default, leaves
# off.
VLLM_LONG_PREFILL_CAP_SINCE = (0, 8, 3)
VLLM_LONG_PREFILL_CAP_BESIDE_OTHERS_SINCE = (0, 31, 0)


# --override-generation-config (vllm/engine/arg_utils.py from 0.7.1, read in every sdist 0.6.0-0.34.0): the keys of a
# generation config that ModelConfig.get_diff_sampling_param reads (vllm/config/model.py, 0.11.0) as the defaults of
# a request that does not set them; max_new_tokens caps every request's output tokens (vllm/entrypoints/utils.py
# get_max_tokens), which the workload's output lengths say here.
VLLM_GENERATION_OVERRIDE_SINCE = (0, 7, 1)
VLLM_SAMPLING_DEFAULTS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")


def generation_overrides(value: Any) -> dict:
    """--override-generation-config as the mapping it gives, each key a sampling default; max_new_tokens and keys
    vLLM does not read refused in one line."""
    value = json_mapping(value, "override_generation_config", "generation-config keys")
    for key in value:
        if key == "max_new_tokens":
            raise ConfigError("engine.override_generation_config: 'max_new_tokens' is not modelled (it caps every "
                              "request's output: the workload's output lengths say that here); allowed: "
                              f"{', '.join(VLLM_SAMPLING_DEFAULTS)}")
        if key not in VLLM_SAMPLING_DEFAULTS:
            raise ConfigError(f"engine.override_generation_config: {key!r} is not a key vLLM reads from it; allowed: "
                              f"{', '.join(VLLM_SAMPLING_DEFAULTS)}")
    return value


def _vllm_generation_note(ctx: Context, notes: list[str]) -> None:
    """--override-generation-config, noted: the sampler's price does not depend on its values."""
    given = ctx.flags.get("override_generation_config")
    if given:
        notes.append(f"vLLM {ctx.version_text} --override-generation-config: the default sampling parameters "
                     f"({', '.join(f'{key} {given[key]}' for key in given)}) change no price here (the sampler is "
                     "priced alike for every value)")


def _vllm_long_prefill_cap(ctx: Context, v1: bool, notes: list[str]) -> dict[str, Any]:
    """The scheduler keys --long-prefill-token-threshold (and --long-prefill-token-threshold-adaptive) set ({} where
    the release does not apply it, noted)."""
    threshold = ctx.flags.get("long_prefill_token_threshold")
    adaptive = ctx.flags.get("long_prefill_token_threshold_adaptive")
    if not threshold:
        if adaptive:
            notes.append(f"vLLM {ctx.version_text} --long-prefill-token-threshold-adaptive: no effect without "
                         "--long-prefill-token-threshold")
        return {}
    text, given = ctx.version_text, f"--long-prefill-token-threshold {threshold}"
    if not v1 or ctx.version < VLLM_LONG_PREFILL_CAP_SINCE:
        why = ("V0 reads it only among concurrent partial prefills, off at --max-num-partial-prefills 1" if not v1
               else f"V1's scheduler reads it from {dotted_version(VLLM_LONG_PREFILL_CAP_SINCE)}")
        notes.append(f"vLLM {text} {given}: no effect ({why})")
        return {}
    values: dict[str, Any] = {"scheduler.max_prefill_chunk_tokens": threshold}  # (V1 always chunks: derive_vllm)
    if ctx.version >= VLLM_LONG_PREFILL_CAP_BESIDE_OTHERS_SINCE:
        values["scheduler.prefill_chunk_cap_when_alone"] = False
    if adaptive:
        values["scheduler.prefill_chunk_cap_fair_share"] = True
    return values


# fp8 weights on a GPU without fp8 tensor cores (sm_80/86), read in the sdists of 0.6.0, 0.6.6, 0.7.0, 0.7.3, 0.8.0,
# 0.8.5, 0.9.0, 0.9.2, 0.10.0, 0.10.2 and 0.11.0 (model_executor/layers/quantization/fp8.py): Fp8LinearMethod runs
# them weight-only by Marlin (`use_marlin = not current_platform.has_device_capability(89)`) from 0.6.0, but turns
# Marlin off for block-scaled weights from 0.6.6 to 0.8.5 ("Marlin doesn't support block-wise fp8"); Fp8MoEMethod has
# the same fallback from 0.9.0. Without it the Triton kernels need SM89 (vllm-project/vllm issue 12581: DeepSeek-R1 on
# A100, "fp8e4nv data type is not supported on CUDA arch < 89").
VLLM_FP8_MARLIN_BLOCK_AND_MOE_SINCE = (0, 9, 0)


def vllm_fp8_without_fp8_cores(version: tuple[int, ...], block_scaled: bool, moe: bool) -> str | None:
    """None where this vLLM runs fp8 weights on a GPU without fp8 tensor cores (weight-only, by Marlin: 16-bit
    products, as the cost models price them there), else why not."""
    if version >= VLLM_FP8_MARLIN_BLOCK_AND_MOE_SINCE or not (block_scaled or moe):
        return None
    what = "fp8 experts" if moe else "block-scaled fp8 weights"
    return (f"its Marlin fallback takes {what} from 0.9.0, and before that its Triton kernels need SM89 "
            "(vllm-project/vllm issue 12581)")


# vLLM's executors (ParallelConfig.__post_init__ in vllm/config.py to 0.10.2, vllm/config/parallel.py from 0.11.0, read
# in the PyPI sdist of every release 0.6.0-0.34.0): on one node `mp` (a worker process per GPU) where TP x PP > 1,
# else `uni` (the worker in the engine's process; 0.6.x: its GPU executor, no name); ray only when asked for or
# inside a ray placement group. The CPU terms were fitted on runs of those defaults.
VLLM_UNI_EXECUTOR_SINCE = (0, 7, 0)  # `uni` a value of --distributed-executor-backend (0.6.x: ray, mp)


def _vllm_executor_backend(ctx: Context) -> None:
    """--distributed-executor-backend accepted where it names the default executor for the deployment's GPUs;
    another value (ray, mp on one GPU, external_launcher) is refused in one line."""
    given = ctx.flags.get("distributed_executor_backend")
    if given is None:
        return
    gpus = ctx.tensor_parallel * ctx.pipeline_parallel
    default = "mp" if gpus > 1 else ("uni" if ctx.version >= VLLM_UNI_EXECUTOR_SINCE else None)
    if given != default:
        allowed = f"{default} (the default for {gpus} GPU{'s' if gpus > 1 else ''})" if default else "leave it out"
        raise ConfigError(f"engine.distributed_executor_backend: {given!r} is not modelled for vLLM "
                          f"{ctx.version_text} on {gpus} GPU{'s' if gpus > 1 else ''} (the CPU terms are the default "
                          f"executor's); allowed: {allowed}{', or leave it out' if default else ''}")


# --disable-frontend-multiprocessing (vllm/entrypoints/openai/cli_args.py and api_server.py
# build_async_engine_client_from_engine_args, read in the sdists of 0.6.0, 0.7.3, 0.8.0, 0.8.5, 0.9.0, 0.10.0, 0.11.0,
# 0.13.0 and 0.17.0-0.18.1, which have it, and 0.19.0-0.21.0, which do not): V0 then runs its engine in the API
# server's own process, whose front-end work the model does not share with the engine's: not modelled; V1 ignores it
# with a warning ("V1 is enabled, but got --disable-frontend-multiprocessing")
VLLM_FRONTEND_MULTIPROCESSING_UNTIL = (0, 19, 0)


def _vllm_frontend_in_process(ctx: Context, v1: bool, notes: list[str]) -> None:
    """--disable-frontend-multiprocessing: noted where V1 ignores it, refused in one line where V0 would take it."""
    if not ctx.flags.get("disable_frontend_multiprocessing"):
        return
    if not v1:
        raise ConfigError(f"engine.disable_frontend_multiprocessing: not modelled for vLLM {ctx.version_text}'s V0 "
                          "engine (it runs the engine in the API server's process, whose work the front-end model "
                          "does not share with the engine's); allowed: leave it out, or a release that runs V1")
    notes.append(f"vLLM {ctx.version_text} --disable-frontend-multiprocessing: ignored by V1 with a warning "
                 "(vllm/entrypoints/openai/api_server.py): the front-end stays its own process")


def _vllm_block(ctx: Context, preset_block: int) -> int:
    """The KV block size the run takes: --block-size, else the scenario's kv_cache.block_size, else the preset's."""
    return ctx.flags.get("block_size") or get_key(ctx.raw, "kv_cache.block_size") or preset_block


def _vllm_blocks_override(ctx: Context, preset_block: int, notes: list[str]) -> dict[str, Any]:
    """--num-gpu-blocks-override: the KV cache holds that many blocks, whatever the memory would hold (V0's
    llm_engine.py _initialize_kv_caches, V1's v1/core/kv_cache_utils.py may_override_num_blocks: "Overriding
    num_gpu_blocks=%d with num_gpu_blocks_override=%d"; read in 0.6.0, 0.11.0, 0.19.0 and 0.33.0; v1/core/
    kv_cache_planning.py in 0.34.0), as
    `kv_cache.capacity_tokens` (the blocks x the block size); refused for a model with sliding-window layers, whose
    blocks vLLM shares between its KV cache groups."""
    blocks = ctx.flags.get("num_gpu_blocks_override")
    if blocks is None:
        return {}
    if ctx.model is not None and ctx.model.hybrid_window:
        raise ConfigError(f"engine.num_gpu_blocks_override: {blocks} is not modelled for {ctx.model.name}'s "
                          "sliding-window layers (vLLM shares the blocks between its KV cache groups); allowed: leave "
                          "it out, or kv_cache.capacity_tokens")
    block = _vllm_block(ctx, preset_block)
    notes.append(f"vLLM --num-gpu-blocks-override {blocks}: {blocks * block:,} KV tokens ({block}-token blocks), "
                 "whatever the memory would hold")
    return {"kv_cache.capacity_tokens": blocks * block}


# --kv-cache-memory-bytes (CacheConfig.kv_cache_memory_bytes, "Size of KV Cache per GPU in bytes", from 0.10.2: absent
# from the 0.10.0, 0.10.1 and 0.10.1.1 sdists): V0's worker.py and V1's v1/worker/gpu_worker.py
# determine_available_memory return it as the KV memory, skipping the profile and gpu_memory_utilization (read in
# 0.10.2, 0.11.0, 0.19.0 and 0.34.0).
VLLM_KV_CACHE_MEMORY_BYTES_SINCE = (0, 10, 2)


def _vllm_kv_memory_bytes(ctx: Context, preset_block: int, notes: list[str]) -> dict[str, Any]:
    """--kv-cache-memory-bytes: each GPU's KV cache holds that many bytes, as `kv_cache.capacity_tokens` (whole blocks
    of one token's KV on the GPU of the pipeline stage with the most layers); --num-gpu-blocks-override wins where both
    are given, as vLLM overrides the blocks last; refused for a model with sliding-window layers (their KV cache
    groups), as the blocks override is."""
    given = ctx.flags.get("kv_cache_memory_bytes")
    if given is None or ctx.flags.get("num_gpu_blocks_override") is not None or ctx.model is None:
        return {}
    if ctx.model.hybrid_window:
        raise ConfigError(f"engine.kv_cache_memory_bytes: {given} is not modelled for {ctx.model.name}'s "
                          "sliding-window layers (vLLM shares the blocks between its KV cache groups); allowed: leave "
                          "it out, or kv_cache.capacity_tokens")
    block = _vllm_block(ctx, preset_block)
    kv_dtype = get_key(ctx.raw, "quantization.kv_cache") or "bf16"
    layers = max(pipeline_stage_layers(ctx.model.num_layers, ctx.pipeline_parallel))
    per_token = stage_kv_bytes_per_token(ctx.model, layers, kv_dtype, ctx.tensor_parallel)
    tokens = given // (block * per_token) * block
    if tokens < 1:
        raise ConfigError(f"engine.kv_cache_memory_bytes: {given} holds no {block}-token block of "
                          f"{ctx.model.name}'s KV ({block * per_token:,} bytes a GPU); allowed: at least that")
    notes.append(f"vLLM --kv-cache-memory-bytes {given}: {tokens:,} KV tokens ({block}-token blocks of "
                 f"{block * per_token:,} bytes a GPU), whatever the memory would hold")
    return {"kv_cache.capacity_tokens": tokens}


# vLLM V1 (0.8.0-0.10.x) falls back to the V0 engine for what it does not support yet (vllm/engine/arg_utils.py
# _is_v1_supported_oracle: "--kv-cache-dtype is not supported by the V1 Engine. Falling back to V0."), read in the
# sdists of 0.8.0-0.8.5, 0.9.0-0.9.2 and 0.10.0-0.10.2: an fp8 KV cache, in 0.8.0-0.8.1 on every GPU, from 0.8.2 where
# V1's FlashAttention cannot hold one (FlashAttention 3 on sm_9x only: fa_utils.flash_attn_supports_fp8), from 0.10.0
# not on sm_100 either (platforms/cuda.py is_kv_cache_dtype_supported: "All Blackwell backends support fp8"), and in
# 0.10.2 not for an MLA model (FlashMLA's). V0 then runs as its own defaults say (`_set_default_args_v0`, the same in
# every one of those sdists: chunked prefill only past a 32k context and not for an MLA model, 256 sequences, no
# prefix caching). 0.11.0 has no V0 engine.
VLLM_V0_FALLBACK = ((0, 8), (0, 11))
VLLM_V1_FA3_FP8_SINCE = (0, 8, 2)  # before: any --kv-cache-dtype falls back
VLLM_V1_SM100_FP8_SINCE = (0, 10, 0)
VLLM_V1_MLA_FP8_SINCE = (0, 10, 2)


def _vllm_draft_model(ctx: Context) -> bool:
    """Whether the scenario speculates with a draft model (`speculation.draft_model`)."""
    speculation = ctx.raw.get("speculation")
    return isinstance(speculation, dict) and speculation.get("draft_model") is not None


def _vllm_refuse_draft_model(ctx: Context) -> None:
    """A draft model's speculation refused in one line by the releases that refuse it (above)."""
    if VLLM_V1_DRAFT_MODEL_FALLBACK_UNTIL <= ctx.version[:2] < VLLM_V1_DRAFT_MODEL_SINCE and _vllm_draft_model(ctx):
        raise ConfigError(f"speculation.draft_model: not run by vLLM {ctx.version_text} (\"Speculative decoding with "
                          "draft model is not supported yet\", vllm/engine/arg_utils.py); allowed: "
                          "speculation.draft_cost_ratio for an EAGLE, MTP or n-gram drafter, or vLLM 0.6.0-0.9.x or "
                          "0.16.0 and later")


# What a V0 fallback runs, as its note says it: the API server's work that queues is V0's (engine_work.py
# `server_kind`), the fitted terms the release's own
_V0_FALLBACK_RUNS = ("which runs with V0's defaults; the CPU terms and fitted front-end latency are still this "
                     "version's, its API server's work V0's")


def _vllm_v0_fallback(ctx: Context) -> str | None:
    """Why this V1 release runs its V0 engine instead (a note), or None where it runs V1."""
    v = ctx.version
    if VLLM_V0_FALLBACK[0] <= v[:2] < VLLM_V1_DRAFT_MODEL_FALLBACK_UNTIL and _vllm_draft_model(ctx):
        return (f"vLLM {ctx.version_text}: speculative decoding by a draft model, which V1 does not run: it falls back "
                "to the V0 engine (vllm/engine/arg_utils.py _is_v1_supported_oracle, \"Speculative Decoding\"), "
                + _V0_FALLBACK_RUNS)
    if VLLM_V0_FALLBACK[0] <= v[:2] < VLLM_V0_FALLBACK[1] and ctx.flags.get("preemption_mode") is not None:
        return (f"vLLM {ctx.version_text}: --preemption-mode, which V1 does not take: it falls back to the V0 engine "
                "(vllm/engine/arg_utils.py _is_v1_supported_oracle, _raise_or_fallback), " + _V0_FALLBACK_RUNS)
    if not VLLM_V0_FALLBACK[0] <= v[:2] < VLLM_V0_FALLBACK[1] or get_key(ctx.raw, "quantization.kv_cache") != "fp8":
        return None
    capability = ctx.gpu.compute_capability or (0, 0)
    mla = ctx.model is not None and ctx.model.attention == "mla"
    if v >= VLLM_V1_FA3_FP8_SINCE and capability[0] == 9:
        return None
    if v >= VLLM_V1_SM100_FP8_SINCE and capability == (10, 0):
        return None
    if v >= VLLM_V1_MLA_FP8_SINCE and mla:
        return None
    where = ("on any GPU" if v < VLLM_V1_FA3_FP8_SINCE
             else f"off sm_9x{' and sm_100' if v >= VLLM_V1_SM100_FP8_SINCE else ''}, where V1's FlashAttention "
             "holds none")
    return (f"vLLM {ctx.version_text}: an fp8 KV cache {where}: V1 falls back to the V0 engine (\"--kv-cache-dtype is "
            "not supported by the V1 Engine. Falling back to V0.\", vllm/engine/arg_utils.py), " + _V0_FALLBACK_RUNS)


# vLLM V0 (0.6.0-0.7.x), read in the PyPI sdists of 0.6.0-0.6.6, 0.7.0 and 0.7.3: vllm/engine/arg_utils.py
# create_engine_config and vllm/config.py SchedulerConfig.
VLLM_V0_SDISTS_READ = {(0, 6, patch) for patch in range(7)} | {(0, 7, 0), (0, 7, 3)}
VLLM_V0_LONG_CONTEXT = 32768  # use_long_context = max_model_len > 32768: chunked prefill on unless told
VLLM_V0_MULTI_STEP_CHUNKED_SINCE = (0, 6, 3)  # before: "Chunked prefill is not supported with multi-step"
VLLM_V0_CHUNK_BUDGET_2048_SINCE = (0, 6, 5)  # SchedulerConfig's chunked budget: 512 to v0.6.4, then 2048


def _vllm_v0_long_context_chunking(ctx: Context) -> str | None:
    """Why vLLM V0 chunks prefills when not told, or None where it does not: create_engine_config turns it on for a
    max_model_len above 32768 (Llama 3.1's 131072 unless --max-model-len is given) on a GPU, for a model without a
    sliding window, without speculative decoding (nor LoRA, prompt adapters or a multimodal model, which ServeSim
    does not model), and in v0.6.0 only without prefix caching (ServeSim's GPUs are taken as CUDA; v0.6.5 on
    leaves ROCm out)."""
    max_len = ctx.max_model_len()
    if max_len is None or max_len <= VLLM_V0_LONG_CONTEXT:
        return None
    if ctx.model is not None and ctx.model.sliding_window is not None:
        return None
    if ctx.raw.get("speculation") is not None:
        return None
    if ctx.version >= (0, 8) and ctx.model is not None and ctx.model.attention == "mla":
        return None  # 0.8+: "Chunked prefill not supported for Multimodal or MLA in V0" (_set_default_args_v0)
    caching = ctx.flags.get("enable_prefix_caching", get_key(ctx.raw, "kv_cache.enable_prefix_caching"))
    if ctx.version[:3] == (0, 6, 0) and caching:
        return None
    return (f"chunked prefill on: max_model_len {max_len} is above {VLLM_V0_LONG_CONTEXT} "
            "(vllm/engine/arg_utils.py create_engine_config; --max-model-len or --enable-chunked-prefill "
            "false turn it off)")


def _vllm_v0_schedule(ctx: Context, notes: list[str]) -> dict[str, Any]:
    """vLLM V0's scheduler settings: without chunked prefill a step is prefill-only or decode-only
    (vllm/core/scheduler.py _schedule_default: prefills first) under a token budget of max(max_model_len, 2048);
    with it, decodes and chunks share a step under 512 tokens (2048 from v0.6.5), or, with multi-step (from
    v0.6.3, not with pipeline parallelism), max(max_model_len, 2048): "Multi-step Chunked-Prefill doesn't allow
    prompt-chunking" (SchedulerConfig)."""
    v, text = ctx.version, ctx.version_text
    given = ctx.flags.get("enable_chunked_prefill", get_key(ctx.raw, "scheduler.chunked_prefill"))
    why = _vllm_v0_long_context_chunking(ctx)
    chunked = bool(given) if given is not None else why is not None
    steps = ctx.flags.get("num_scheduler_steps", 1)
    max_len = ctx.max_model_len()
    if chunked and steps > 1 and v < VLLM_V0_MULTI_STEP_CHUNKED_SINCE:
        if given is not None:
            raise ConfigError(f"engine.num_scheduler_steps: {steps} with enable_chunked_prefill is not supported by "
                              f"vLLM {text}; allowed: vLLM 0.6.3 or later, or one of the two")
        raise ConfigError(f"engine.num_scheduler_steps: {steps} is refused by vLLM {text} with max_model_len "
                          f"{max_len} (above {VLLM_V0_LONG_CONTEXT} it turns chunked prefill on, which it does not "
                          f"run with multi-step); allowed: engine.max_model_len of at most {VLLM_V0_LONG_CONTEXT}, "
                          "engine.enable_chunked_prefill: false, or vLLM 0.6.3 or later")
    if chunked and steps > 1 and ctx.pipeline_parallel > 1:
        raise ConfigError(f"engine.num_scheduler_steps: {steps} with chunked prefill and pipeline_parallel "
                          f"{ctx.pipeline_parallel} is not supported by vLLM {text} (\"Multi-Step Chunked-Prefill is "
                          "not supported for pipeline-parallel-size > 1\"); allowed: num_scheduler_steps 1, "
                          "enable_chunked_prefill false, or pipeline_parallel 1")
    values: dict[str, Any] = {"scheduler.chunked_prefill": chunked, "scheduler.mixed_batches": chunked,
                              "scheduler.max_num_seqs": 256, "scheduler.decode_steps_per_schedule": steps}
    if steps > 1:
        # vllm/engine/llm_engine.py LLMEngine.step (read in the 0.6.0 wheel): while a multi-step run has steps left
        # (`_has_remaining_steps`) no output is processed; its tokens go out together after its last step, so a
        # client gets a prompt's first token alone (a prefill runs one step), then one chunk per run; a sequence
        # whose last token comes inside a run is found finished after the run (sim/sched/continuous.py `_finish`)
        values[STREAM_CHUNK_KEY] = steps
    if chunked and steps == 1:
        values["scheduler.max_num_batched_tokens"] = 2048 if v >= VLLM_V0_CHUNK_BUDGET_2048_SINCE else 512
    elif max_len is not None:
        values["scheduler.max_num_batched_tokens"] = max(max_len, 2048)
    if chunked and why is not None:  # also when given: the scenario written back (to_yaml) keeps the same notes
        notes.append(f"vLLM {text}: {why}")
    read_in = ("its own PyPI sdist" if v[:3] in VLLM_V0_SDISTS_READ
               else "the 0.8.0-0.10.2 sdists, which agree" if v >= (0, 8)
               else "the 0.7.0 and 0.7.3 sdists, which agree")
    notes.append(f"vLLM {text} (V0): defaults read in {read_in} (vllm/engine/arg_utils.py, vllm/config.py)")
    return values


def _vllm_async_default(ctx: Context, method: str | None) -> tuple[bool, str]:
    """Whether vLLM >= 0.14 schedules asynchronously when not told (vllm/config/vllm.py VllmConfig.__post_init__):
    yes, unless pipeline parallelism (v0.14.x only; from v0.31.0 again, but only on the V1 model runner, which the
    V2 runner replaced as the default for nearly every model in v0.29.0), or speculative decoding by a method it
    does not run with (`method`: --speculative-config's, sim/config/engines/vllm_speculative.py, or draft_model for a
    speculation section's draft model). A drafter given by its cost ratio alone without that flag names no method:
    taken as a draft model's rule (off before v0.28.0), said in the note.
    An executor other than mp/uni also turns it off; ServeSim models one node's."""
    v = ctx.version
    if ctx.pipeline_parallel > 1 and v < VLLM_ASYNC_WITH_PIPELINE_SINCE:
        return False, "off (not with pipeline_parallel_size > 1 in v0.14.x)"
    if method is not None and not async_with_method(method, v, asked=False):
        return False, f"off (not with {method} speculative decoding in v{ctx.version_text})"
    if method is None and ctx.raw.get("speculation") is not None:
        # the drafter's method unnamed: a draft model's rule (sim/config/engines/vllm_speculative.py ASYNC_WITH)
        if not async_with_method("draft_model", v, asked=False):
            return False, ("off (a drafter whose method no --speculative-config names, taken as a draft model's: "
                           "off before v0.28.0; an EAGLE or MTP method keeps it on)")
        return True, ("on by default (a drafter whose method no --speculative-config names, taken as a draft "
                      "model's: on from v0.28.0)")
    return True, "on by default"


# --max-num-partial-prefills and --max-long-partial-prefills (vllm/engine/arg_utils.py from 0.7.3, gone in 0.27.0):
# V0's concurrent partial prefills (vllm/core/scheduler.py PartialPrefillMetadata), not modelled; V1 refuses any value
# but the default 1 ("No Concurrent Partial Prefills so far": a V0 fallback in 0.8.x-0.10.x, an error once V0 is gone)
VLLM_PARTIAL_PREFILLS = ((0, 7, 3), (0, 27, 0))
VLLM_PARTIAL_PREFILLS_WHY = "; concurrent partial prefills are V0's, which V1 refuses"


# --performance-mode (0.17.0 on; vllm/config/vllm.py PerformanceMode, in the arg_utils.py of every sdist 0.17.0-0.34.0;
# in the whole trees of 0.17.0 and 0.34.0 only config/vllm.py and engine/arg_utils.py read it): throughput doubles the
# default max_num_batched_tokens and max_num_seqs (EngineArgs._set_default_args: "If throughput mode is set, double
# ..."), interactivity captures CUDA graphs for every batch of 1 to 32 (VllmConfig._set_cudagraph_sizes), whose
# padding is not modelled
VLLM_PERFORMANCE_MODE_SINCE = (0, 17, 0)
VLLM_PERFORMANCE_MODES = ("balanced", "interactivity", "throughput")


def _vllm_performance_mode(ctx: Context, mnbt: int, seqs: int, notes: list[str]) -> tuple[int, int]:
    """The default batch limits (max_num_batched_tokens, max_num_seqs) under --performance-mode."""
    mode = ctx.flags.get("performance_mode", "balanced")
    if mode == "throughput":
        mnbt, seqs = 2 * mnbt, 2 * seqs
        notes.append(f"vLLM {ctx.version_text} --performance-mode throughput: twice the default batch limits, {mnbt} "
                     f"tokens and {seqs} sequences a step (vllm/engine/arg_utils.py)")
    elif mode == "interactivity":
        notes.append(f"vLLM {ctx.version_text} --performance-mode interactivity: CUDA graphs for every batch of 1-32 "
                     "sequences, whose padding is not modelled: priced as the default")
    return mnbt, seqs


# --swap-space is CPU memory for swapping out KV (GiB a GPU: scheduler.preemption.swap_space_bytes), which a
# single-sequence request's preemption uses only under --preemption-mode swap: V0 recomputes it otherwise
# (vllm/core/scheduler.py _preempt, read in the 0.6.0 sdist: RECOMPUTE where get_max_num_running_seqs() == 1 and no
# mode is given, SWAP for beam search and n > 1, which ServeSim does not model, and wherever "swap" is given), V1
# allocates no CPU blocks (vllm-project/vllm#27984; the option was removed by #36216). Gone from EngineArgs in 0.18.0:
# present in 0.15.0-0.17.1, absent in 0.18.0-0.29.0 (every release installed and its EngineArgs signature read:
# unslothai/unsloth-zoo#1210). --preemption-mode: in vllm/engine/arg_utils.py of every sdist 0.6.0-0.10.2, gone in
# 0.11.0; 0.8.0-0.10.x fall back to V0 wherever it is given (_is_v1_supported_oracle: `_raise_or_fallback`).
# Where V0's swap space is full it aborts the request ("Aborted due to the lack of CPU swap space"); ServeSim
# recomputes it (noted).
VLLM_SWAP_SPACE_UNTIL = (0, 18, 0)
VLLM_PREEMPTION_MODE_UNTIL = (0, 11, 0)


def _vllm_swap_notes(ctx: Context, notes: list[str]) -> None:
    """What --preemption-mode swap and --swap-space do here (the comment above), noted."""
    if ctx.flags.get("preemption_mode") == "swap":
        space = ctx.flags.get("swap_space", 4 * GIB) / GIB
        notes.append(f"vLLM {ctx.version_text} --preemption-mode swap: a preempted request's KV goes to the {space:g} "
                     "GiB a GPU of host swap space and back over the host link; where that space is full V0 aborts "
                     "the request (\"Aborted due to the lack of CPU swap space\"), ServeSim recomputes it")
    elif ctx.flags.get("swap_space") is not None:
        notes.append(f"vLLM {ctx.version_text} --swap-space: no effect here: a single-sequence request's preemption "
                     "recomputes (V0 swaps only under --preemption-mode swap; V1 does not swap)")


# --cpu-offload-gb: GiB of each GPU's decoder-layer weights kept in pinned host memory (kv_cache.weights_offload_bytes;
# sim/model/memory.py offloaded_weight_bytes says which). The option is in engine/arg_utils.py of every sdist read,
# 0.6.0, 0.6.3, 0.6.6, 0.7.3, 0.8.5, 0.9.2, 0.10.2, 0.11.0, 0.12.0, 0.14.0, 0.19.0, 0.25.0, 0.33.0, 0.34.0; what moves
# the weights, in 0.6.0-0.14.0's model_executor/models/utils.py (maybe_offload_to_cpu, which make_layers calls on each
# decoder layer; read in 0.6.0, 0.6.3, 0.6.6, 0.7.3, 0.8.5, 0.9.2, 0.10.2, 0.11.0, 0.12.0, 0.14.0) and
# model_executor/offloader/uva.py from 0.19.0 (UVAOffloader; read in 0.19.0, 0.25.0, 0.33.0). V0 copies a layer's
# offloaded parameters in before it runs (`v.to(device, non_blocking=True)`, functional_call); V1 (0.8.0 on) maps them
# into the GPU's address space (UVA) and the kernels read them there. Each forward pass reads them over the host link
# either way (sim/cost/overhead.py weights_stream_s). 0.19.0's other backend, --offload-backend prefetch
# (--offload-group-size ...), is not modelled (its flags are refused as unknown).
def _vllm_offload_notes(ctx: Context, v1: bool, notes: list[str]) -> None:
    """What --cpu-offload-gb does here (the comment above), noted."""
    given = ctx.flags.get("cpu_offload_gb")
    if given:
        how = "read by the kernels from pinned host memory (V1's UVA)" if v1 else f"{OFFLOAD_COPIED_IN} (V0)"
        notes.append(offload_note(f"vLLM {ctx.version_text}", given / GIB, how))


VLLM_FLAGS = {
    "max_num_seqs": Flag("scheduler.max_num_seqs", int, "--max-num-seqs"),
    "max_num_batched_tokens": Flag("scheduler.max_num_batched_tokens", int, "--max-num-batched-tokens",
                                   read=readable_number("max_num_batched_tokens")),
    "max_model_len": Flag("scheduler.max_model_len", int, "--max-model-len (auto: scheduler.fit_max_model_len)",
                          read=readable_number("max_model_len")),
    "gpu_memory_utilization": Flag("kv_cache.gpu_memory_utilization", (int, float), "--gpu-memory-utilization"),
    "block_size": Flag("kv_cache.block_size", int, "--block-size"),
    "num_gpu_blocks_override": Flag(None, int, "--num-gpu-blocks-override: the KV cache's blocks, as given "
                                    "(kv_cache.capacity_tokens)",
                                    at_least("num_gpu_blocks_override", most=MAX_KV_BLOCKS),
                                    decides=("kv_cache.capacity_tokens",)),
    "kv_cache_memory_bytes": Flag(None, int, "--kv-cache-memory-bytes: the KV cache's bytes a GPU, as given "
                                  "(kv_cache.capacity_tokens)", at_least("kv_cache_memory_bytes"),
                                  since=VLLM_KV_CACHE_MEMORY_BYTES_SINCE,
                                  read=readable_number("kv_cache_memory_bytes"), decides=("kv_cache.capacity_tokens",)),
    "cpu_offload_gb": Flag("kv_cache.weights_offload_bytes", (int, float), "--cpu-offload-gb: GiB of each GPU's "
                           "decoder-layer weights kept in host memory, read over the host link every forward pass",
                           gib_as_bytes("cpu_offload_gb")),
    "enable_chunked_prefill": Flag("scheduler.chunked_prefill", bool, "--enable-chunked-prefill"),
    "hf_overrides": Flag(None, (str, dict), "--hf-overrides: config.json keys as served (RoPE scaling, "
                         "max_position_embeddings: the context vLLM derives)", config_overrides("hf_overrides"),
                         since=VLLM_HF_OVERRIDES_SINCE),
    "override_generation_config": Flag(None, (str, dict), "--override-generation-config: default sampling parameters "
                                       f"({', '.join(VLLM_SAMPLING_DEFAULTS)}), noted: the sampler is priced alike "
                                       "for every value", generation_overrides, since=VLLM_GENERATION_OVERRIDE_SINCE),
    "rope_scaling": Flag(None, (str, dict), "--rope-scaling: the RoPE scaling served (the context vLLM derives)",
                         rope_scaling_override, until=VLLM_ROPE_SCALING_UNTIL),
    "preemption_mode": Flag("scheduler.preemption.mode", str, "--preemption-mode (V0): recompute, or swap (a preempted "
                            "request's KV to host memory and back)",
                            only_one_of("preemption_mode", ("recompute", "swap")), until=VLLM_PREEMPTION_MODE_UNTIL),
    "swap_space": Flag("scheduler.preemption.swap_space_bytes", (int, float), "--swap-space: GiB of host memory a GPU "
                       "for swapped KV, used by --preemption-mode swap", gib_as_bytes("swap_space"),
                       until=VLLM_SWAP_SPACE_UNTIL),
    "performance_mode": Flag(None, str, "--performance-mode: balanced (the default), interactivity or throughput "
                             "(twice the default batch limits)",
                             only_one_of("performance_mode", VLLM_PERFORMANCE_MODES),
                             since=VLLM_PERFORMANCE_MODE_SINCE),
    "max_num_partial_prefills": Flag(None, int, "--max-num-partial-prefills: 1, the default",
                                     only_default("max_num_partial_prefills", 1, VLLM_PARTIAL_PREFILLS_WHY),
                                     since=VLLM_PARTIAL_PREFILLS[0], until=VLLM_PARTIAL_PREFILLS[1]),
    "max_long_partial_prefills": Flag(None, int, "--max-long-partial-prefills: 1, the default",
                                      only_default("max_long_partial_prefills", 1, VLLM_PARTIAL_PREFILLS_WHY),
                                      since=VLLM_PARTIAL_PREFILLS[0], until=VLLM_PARTIAL_PREFILLS[1]),
    "long_prefill_token_threshold": Flag(None, int, "--long-prefill-token-threshold: the most tokens a prompt "
                                         "computes in a step (scheduler.max_prefill_chunk_tokens; 0: none)",
                                         at_least("long_prefill_token_threshold", 0, meaning=" (0: no cap)"),
                                         since=(0, 8, 0)),
    "long_prefill_token_threshold_adaptive": Flag(None, bool, "--long-prefill-token-threshold-adaptive: the cap at "
                                                  "least the budget's fair share "
                                                  "(scheduler.prefill_chunk_cap_fair_share)",
                                                  since=VLLM_LONG_PREFILL_CAP_BESIDE_OTHERS_SINCE),
    # in vllm/engine/arg_utils.py to 0.10.0, gone in 0.10.1 (every sdist 0.6.0-0.34.0)
    "num_scheduler_steps": Flag("scheduler.decode_steps_per_schedule", int, "--num-scheduler-steps (V0)",
                                until=(0, 10, 1)),
    "enable_prefix_caching": Flag("kv_cache.enable_prefix_caching", bool, "--enable-prefix-caching"),
    "tensor_parallel_size": Flag("hardware.tensor_parallel", int, "--tensor-parallel-size", aliases=("-tp",)),
    "pipeline_parallel_size": Flag("hardware.pipeline_parallel", int, "--pipeline-parallel-size", aliases=("-pp",)),
    # vllm/engine/arg_utils.py (0.6.0: auto, fp8, fp8_e5m2, fp8_e4m3) and vllm/config/cache.py CacheDType (0.11.0 adds
    # bfloat16)
    "kv_cache_dtype": Flag("quantization.kv_cache", str, "--kv-cache-dtype: auto (the model's dtype), fp8, fp8_e4m3, "
                           "fp8_e5m2 or bfloat16",
                           kv_cache_dtype_flag(("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"))),
    "enforce_eager": Flag(None, bool, "--enforce-eager: the eager launch term instead of CUDA graphs"),
    # which steps replay CUDA graphs, as each release resolves it (sim/config/engines/vllm_graphs.py)
    "compilation_config": Flag(None, (dict, int, str), "--compilation-config: cudagraph_mode, level/mode, "
                               "use_cudagraph, full_cuda_graph and the capture sizes, as the release reads them "
                               "(a JSON object on the command line; to 0.11.x also a level 0-3, -O<n>)",
                               read_compilation_config, since=VLLM_COMPILATION_CONFIG_SINCE, aliases=("-O", "-cc"),
                               alias_versions={"-O": (VLLM_COMPILATION_CONFIG_SINCE, VLLM_OPTIMIZATION_LEVEL_SINCE),
                                               "-cc": (VLLM_OPTIMIZATION_LEVEL_SINCE, None)}),
    "optimization_level": Flag(None, int, "--optimization-level: 0 (no CUDA graphs), 1 (piecewise), 2 (the "
                               "default) or 3", read_optimization_level, since=VLLM_OPTIMIZATION_LEVEL_SINCE,
                               aliases=("-O",), alias_versions={"-O": (VLLM_OPTIMIZATION_LEVEL_SINCE, None)}),
    "enable_extensible_kv_cache": Flag(None, bool, "--enable-extensible-kv-cache: the KV cache sized from the memory "
                                       "free after warmup (false: from the memory profile, gpu_memory_utilization "
                                       "0.92)", since=VLLM_EXTENSIBLE_KV_SINCE),
    "cache_aware_admission_window": Flag(None, int, "--cache-aware-admission-window: 0 only (admission in arrival "
                                         "order)",
                                         only_default("cache_aware_admission_window", 0, ": admission in arrival "
                                                      "order; another admits requests whose prefix is cached ahead"),
                                         since=(0, 34, 0)),
    "distributed_executor_backend": Flag(None, str, "--distributed-executor-backend: the default for the GPUs "
                                         "(mp for several, uni for one), the executor the CPU terms were fitted with"),
    # vllm/engine/arg_utils.py: fcfs (the default of every release that has it) or priority, which orders by a
    # request's priority field, which the workload does not set
    "scheduling_policy": Flag(None, str, "--scheduling-policy: fcfs, the default",
                              only_default("scheduling_policy", "fcfs"), since=(0, 6, 3)),
    # --model-impl (vllm/engine/arg_utils.py from 0.7.2, every sdist to 0.34.0): auto takes vLLM's own model where it
    # has one, as it does for every model the preset runs (refuse_model_before); transformers and the others run
    # another implementation, not priced
    "model_impl": Flag(None, str, "--model-impl: auto or vllm (vLLM's own model)",
                       only_one_of("model_impl", ("auto", "vllm"), " (vLLM's own implementation), or leave it out"),
                       since=(0, 7, 2)),
    # ModelConfig.task (vllm/engine/arg_utils.py choices from TaskOption): from 0.6.4, deprecated in 0.12.x, gone in
    # 0.13.0 (the sdists of 0.6.3, 0.6.4, 0.12.0 and 0.13.0); auto picks generate for a generative model
    "task": Flag(None, str, "--task: auto or generate (a generative model's own task)",
                 only_one_of("task", ("auto", "generate"), " (a pooling task is not modelled), or leave it out"),
                 since=(0, 6, 4), until=(0, 13, 0)),
    "disable_custom_all_reduce": Flag(None, bool, "--disable-custom-all-reduce: NCCL's all-reduce "
                                      "(hardware.all_reduce nccl)"),
    # vllm/config.py (vllm/config/model.py from 0.11) ModelConfig: the window off (get_sliding_window None), and
    # _get_and_verify_max_len caps the derived context at it (vllm_context.py); read in the sdists of 0.6.0, 0.6.3,
    # 0.6.6, 0.7.3, 0.8.5, 0.9.2, 0.10.2, 0.11.0, 0.12.0, 0.14.0, 0.19.0, 0.25.0, 0.33.0 and 0.34.0
    "disable_sliding_window": Flag("attention.sliding_window", bool, "--disable-sliding-window: every layer "
                                   "attends to, and keeps, every token; max_model_len capped at the window",
                                   lambda value: not value),
    "disable_hybrid_kv_cache_manager": Flag(None, bool, "--disable-hybrid-kv-cache-manager: a hybrid model's sliding "
                                            "layers keep every token's KV", since=VLLM_HYBRID_KV_SINCE),
    "disable_frontend_multiprocessing": Flag(None, bool, "--disable-frontend-multiprocessing: ignored by V1 (V0's "
                                             "engine in the API server's process is not modelled)",
                                             until=VLLM_FRONTEND_MULTIPROCESSING_UNTIL),
    # sim/config/engines/vllm_speculative.py: the method and γ, with the scenario's speculation section
    "speculative_config": Flag(None, (dict, str), "--speculative-config: method and num_speculative_tokens (with "
                               "prompt_lookup_max/min), as a JSON object; the drafter's cost and acceptance are the "
                               "speculation section's", read_speculative_config, since=VLLM_SPECULATIVE_CONFIG_SINCE),
    "async_scheduling": Flag(None, bool, "--async-scheduling (0.10+; the default from 0.14, --no-async-scheduling "
                                         "turns it off): the CPU terms overlap the GPU's step"),
    "stream_interval": Flag(STREAM_CHUNK_KEY, int, "--stream-interval: tokens a streamed chunk carries after the "
                            "first (frontend.tokens_per_chunk)", since=VLLM_STREAM_INTERVAL_SINCE),
    # vllm/entrypoints/cli/serve.py run_multi_api_server (0.9.1 on; not in 0.9.0): N API server processes, V1 only
    "api_server_count": Flag("frontend.num_processes", int, "--api-server-count: API server processes "
                             "(frontend.num_processes)", since=(0, 9, 1)),
    # --data-parallel-size (0.8.3 on; -dp from 0.8.4, accepted here from 0.8.3): independent engines from 0.14.0 with
    # a dense model, lockstep ranks before and always for a mixture of experts (vllm_data_parallel.py)
    "data_parallel_size": Flag("hardware.num_replicas", int, "--data-parallel-size: engines of tp x pp GPUs behind "
                               "the API server(s), independent from 0.14.0 with a dense model, stepping in lockstep "
                               "before and always for a mixture of experts, whose experts spread over every rank "
                               "(hardware.lockstep)",
                               at_least("data_parallel_size"), since=(0, 8, 3), aliases=("-dp",)),
    # vllm/model_executor/layers/fused_moe/layer.py (0.8.0): ep_size = tp_size x dp_size, moe tp 1, the output
    # all-reduced over the TP group as without it (with --data-parallel-size: vllm_data_parallel.py)
    "enable_expert_parallel": Flag("hardware.expert_parallel", bool, "--enable-expert-parallel: each GPU of the TP "
                                   "group (with --data-parallel-size, of every rank) holds whole experts",
                                   since=(0, 8, 0)),
    "dtype": Flag(None, str, "--dtype: auto, half, float16 or bfloat16",
                  sixteen_bit_dtype(("auto", "half", "float16", "bfloat16"))),
    # vllm/model_executor/layers/quantization/fp8.py Fp8LinearMethod: W8A8 on sm_89+, weight-only Marlin below
    # NVFP4 (ModelOptNvFp4Config): "nvfp4" in vllm/model_executor/layers/quantization/__init__.py of 0.8.0-0.8.5,
    # "modelopt_fp4" from 0.9.0 (read in the PyPI sdists of 0.7.3, 0.8.0, 0.8.2-0.8.5, 0.9.0 and 0.11.0)
    "quantization": Flag("quantization.weights", str, "--quantization: fp8, mxfp4 or modelopt_fp4 (0.8.x: nvfp4) "
                         "(quantization.weights)",
                         weights_quantization({"fp8": "fp8", "mxfp4": "mxfp4", "modelopt_fp4": "nvfp4",
                                               "nvfp4": "nvfp4"}), aliases=("-q",),
                         value_versions={"nvfp4": ((0, 8, 0), (0, 9, 0)), "modelopt_fp4": ((0, 9, 0), None)}),
}


# vLLM's options that change nothing simulated, read in the parsers of 0.10.2, 0.11.0 and 0.19.0 (make_arg_parser
# run from their wheels: each option's nargs). --disable-log-requests: from 0.10.1 a deprecated BooleanOptionalAction
# beside --enable-log-requests (request logging is off unless that option, which adds work, is given: not accepted
# here), still parsed in 0.16.0 and gone in 0.17.0 (vllm/engine/arg_utils.py of every PyPI sdist 0.10.1-0.34.0; the
# 0.12.0 cited by vllm-project/vllm#29402's downstream readers is when it was meant to go). vLLM 0.6.0's API server
# (its request log on by default) was measured with the log on and off in turn and did the same work within the noise
# (API_SERVER_WORK): its row serves both. The cost of --disable-log-stats is not modelled.
# --max-logprobs and --guided-decoding-backend bound what a request may ask (logprobs, structured output), which the
# workload does not; --max-parallel-loading-workers loads the weights; --calculate-kv-scales computes an fp8 KV
# cache's scales on the first pass (its bytes are priced by the dtype). Their first and last releases: every sdist
# 0.6.0-0.34.0 (vllm/engine/arg_utils.py).
# --use-v2-block-manager (V0), read in the PyPI sdists of 0.6.0-0.6.6, 0.7.0, 0.7.3, 0.8.0, 0.8.5, 0.9.0 and 0.10.0
# (vllm/engine/arg_utils.py): 0.6.0-0.6.2 use block manager v1 unless it is given (or multi-step turns v2 on), 0.6.3
# makes v2 the default, 0.6.4-0.9.x keep the option as a no-op ("[DEPRECATED] block manager v1 has been removed"),
# 0.10.0 has no such option. Both managers hand out the same 16-token blocks of the same profiled pool; what their
# CPU time differs by is in the version's fitted terms.
VLLM_DISABLE_LOG_REQUESTS_UNTIL = (0, 17, 0)
VLLM_CALCULATE_KV_SCALES = ((0, 7, 0), (0, 28, 0))  # (the first release that has it, the first that refuses it)
VLLM_GUIDED_DECODING_BACKEND_UNTIL = (0, 12, 0)
MULTIMODAL_INPUTS = "multimodal inputs a prompt may carry (the workload is text)"
VLLM_V2_BLOCK_MANAGER_UNTIL = (0, 10, 0)
# The options above and below that came in after 0.6.0: the first release that has each, read in the PyPI sdist of
# every release from 0.6.0 to 0.33.0 (vllm/engine/arg_utils.py; the API server's options in
# vllm/entrypoints/openai/cli_args.py, from 0.10 the fields of its FrontendArgs dataclass, whose file moved to
# entrypoints/launchers/cli_args.py in 0.29.0 and entrypoints/common/cli_args.py in 0.33.0), and in 0.34.0's. Every
# option below is in each release from its first to 0.34.0.
_VLLM_INERT_SINCE = {"--config-format": (0, 6, 1), "--disable-fastapi-docs": (0, 6, 2),
                     "--generation-config": (0, 6, 6), "--reasoning-parser": (0, 7, 1),
                     "--disable-uvicorn-access-log": (0, 8, 2), "--hf-token": (0, 8, 4),
                     "--tool-parser-plugin": (0, 6, 3), "--enable-prompt-tokens-details": (0, 6, 4),
                     "--chat-template-content-format": (0, 6, 5), "--enable-request-id-headers": (0, 6, 6),
                     "--enable-ssl-refresh": (0, 8, 0), "--enable-server-load-tracking": (0, 8, 0),
                     "--log-config-file": (0, 10, 0), "--enable-tokenizer-info-endpoint": (0, 10, 0),
                     "--enable-force-include-usage": (0, 10, 0), "--uds": (0, 10, 1),
                     "--exclude-tools-when-tool-choice-none": (0, 10, 1),
                     "--h11-max-incomplete-event-size": (0, 10, 1, 1), "--h11-max-header-count": (0, 10, 1, 1),
                     "--log-error-stack": (0, 10, 2), "--trust-request-chat-template": (0, 11, 0),
                     "--enable-offline-docs": (0, 14, 0), "--ssl-ciphers": (0, 16, 0),
                     "--disable-access-log-for-endpoints": (0, 16, 0)}
VLLM_INERT = tuple(dataclasses.replace(option, since=_VLLM_INERT_SINCE.get(option.option, option.since))
                   for option in (
    inert_group(SERVER_ADDRESS, "one", "--host", "--port", "--uvicorn-log-level", "--root-path", "--ssl-keyfile",
                "--ssl-certfile", "--allowed-origins", "--allowed-methods", "--allowed-headers", "--uds",
                "--ssl-ca-certs", "--ssl-cert-reqs", "--ssl-ciphers", "--h11-max-incomplete-event-size",
                "--h11-max-header-count", "--disable-access-log-for-endpoints")
    + inert_group(SERVER_ADDRESS, "none", "--enable-ssl-refresh", "--enable-request-id-headers",
                  "--enable-offline-docs")
    + inert_group(SERVER_ADDRESS, "many", "--api-key")
    + inert_group(SERVER_ADDRESS, "none", "--allow-credentials", "--disable-uvicorn-access-log",
                  "--disable-fastapi-docs")
    + inert_group(MODEL_FILES, "one", "--model", "--tokenizer", "--revision", "--tokenizer-revision", "--code-revision",
                  "--download-dir", "--load-format", "--tokenizer-mode", "--config-format", "--generation-config")
    + inert_group(MODEL_FILES, "many", "--served-model-name")
    + inert_group(MODEL_FILES, "optional", "--hf-token")
    + inert_group(MODEL_FILES, "none", "--trust-remote-code")
    + inert_group(LOGGING, "none", "--disable-log-stats")
    + (InertOption("--disable-log-requests", "none", "request logging off: vLLM 0.6.0's API server measured the "
                   "same with its log on and off (API_SERVER_WORK)", until=VLLM_DISABLE_LOG_REQUESTS_UNTIL),
       # from 0.10.1 request logging is off unless --enable-log-requests (vllm/engine/arg_utils.py AsyncEngineArgs;
       # read in the sdists of 0.10.0, 0.10.1, 0.10.1.1, 0.10.2, 0.17.0 and 0.34.0); its logger's cost measured in
       # 0.6.0 only (engine_work.py), a later release's assumed alike
       InertOption("--enable-log-requests", "none", "request logging on: vLLM 0.6.0's API server (its log on by "
                   "default) measured the same with its log on and off (API_SERVER_WORK); no work added",
                   since=(0, 10, 1)),
       InertOption("--rope-theta", "one", "RoPE's base frequency, which changes no price",
                   until=VLLM_ROPE_SCALING_UNTIL),
       InertOption("--use-v2-block-manager", "none", "V0's block manager v2, which hands out the same blocks as v1 "
                   "(the default from 0.6.3, a no-op from 0.6.4)", until=VLLM_V2_BLOCK_MANAGER_UNTIL))
    + inert_group(LOGGING, "one", "--max-log-len", "--log-config-file")
    + inert_group(LOGGING, "none", "--log-error-stack")
    # token usage in a reply: at most one more chunk a request with --enable-force-include-usage (`vllm bench serve`
    # asks for it anyway: stream_options include_usage)
    + inert_group(USAGE_REPORTS, "none", "--enable-prompt-tokens-details", "--enable-server-load-tracking",
                  "--enable-tokenizer-info-endpoint", "--enable-force-include-usage")
    + inert_group(REQUEST_LIMITS, "one", "--max-logprobs")
    + (InertOption("--guided-decoding-backend", "one", REQUEST_LIMITS, until=VLLM_GUIDED_DECODING_BACKEND_UNTIL),
       InertOption("--calculate-kv-scales", "none", "an fp8 KV cache's scales computed on the first pass (its bytes "
                   "are priced by the dtype)", since=VLLM_CALCULATE_KV_SCALES[0], until=VLLM_CALCULATE_KV_SCALES[1]))
    + inert_group(MODEL_FILES, "one", "--max-parallel-loading-workers")
    + inert_group(PARSING, "one", "--chat-template", "--response-role", "--tool-call-parser", "--reasoning-parser",
                  "--chat-template-content-format", "--tool-parser-plugin")
    + inert_group(PARSING, "none", "--enable-auto-tool-choice", "--exclude-tools-when-tool-choice-none",
                  "--trust-request-chat-template")
    + inert_group(SEED, "one", "--seed")
    + (InertOption("--disable-cascade-attn", "none", "cascade attention off, as priced (vLLM uses it only when every "
                   "running request shares a long prefix)", since=(0, 8, 2)),
       # in vllm/engine/arg_utils.py from the 0.34.0 sdist
       InertOption("--cache-aware-admission-threshold", "one", "the KV usage above which an admission window "
                   "applies (none is modelled: --cache-aware-admission-window 0)", since=(0, 34, 0)),
       InertOption("--max-num-inflight-kv-loads", "one", "a KV connector's loads in flight (no connector is "
                   "modelled)", since=(0, 34, 0)),
       InertOption("--checkpoint-prepare-on-startup", "none", MODEL_FILES, since=(0, 34, 0)),
       # from 0.8.3 (absent from the 0.8.0-0.8.2 sdists): the hash of a prefix-cache block's tokens, whose CPU time is
       # in the fitted terms
       InertOption("--prefix-caching-hash-algo", "one", "the prefix cache's block hash (its CPU time is in the "
                   "fitted terms)", since=(0, 8, 3)),
       # every sdist 0.6.0-0.34.0: a multimodal model's inputs a prompt may carry; the workload is text. Also read in
       # every one (vllm/engine/arg_utils.py; the API server's options in entrypoints/openai/cli_args.py, from 0.29.0
       # entrypoints/common/cli_args.py): where such inputs may come from and the cache of their processed form;
       # logprobs' tokens written as their ids
       InertOption("--limit-mm-per-prompt", "one", MULTIMODAL_INPUTS),
       InertOption("--allowed-local-media-path", "one", MULTIMODAL_INPUTS, since=(0, 6, 4)),
       InertOption("--allowed-media-domains", "many", MULTIMODAL_INPUTS, since=(0, 11, 0)),
       InertOption("--mm-processor-cache-gb", "one", MULTIMODAL_INPUTS, since=(0, 10, 1)),
       InertOption("--return-tokens-as-token-ids", "none", USAGE_REPORTS),
       InertOption("--shuffle-safetensors-files", "none", MODEL_FILES, since=(0, 34, 0)),
       # read in every sdist 0.6.0-0.34.0 (vllm/engine/arg_utils.py): --structured-outputs-config from 0.11.0 (the
       # structured-output backend, as --guided-decoding-backend before it), --enable-sleep-mode from 0.7.0
       InertOption("--structured-outputs-config", "one", REQUEST_LIMITS, since=(0, 11, 0)),
       InertOption("--enable-sleep-mode", "none", "an allocator that can release the weights and KV while the server "
                   "sleeps (its cost while serving is not modelled)", since=(0, 7, 0)))
    + tuple(InertOption(option, takes, CAPTURE_SIZES, since=since, until=until)
            for option, (takes, since, until) in CAPTURE_SIZE_OPTIONS.items())))
