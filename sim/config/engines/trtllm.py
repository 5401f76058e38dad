"""TensorRT-LLM's preset (0.14-1.3): trtllm-serve's defaults, its capacity scheduler, flags and options."""

from __future__ import annotations

from typing import Any

from sim.config.engine_command import InertOption
from sim.config.engines.base import (Context, Flag, LOGGING, MODEL_FILES, PARSING, PresetResult, SERVER_ADDRESS,
                                     caches_prefixes, get_key, graph_terms, inert_group, kv_cache_dtype_flag,
                                     only_default)
from sim.config.engines.engine_work import preset_terms
from sim.errors import ConfigError


# 1.3.x (release candidates only) is accepted on the defaults read for earlier versions, said in a note: its
# source is not on PyPI (stub sdists), but AIConfigurator 0.12.0 (sdk/backends/trtllm_backend.py), whose trtllm tables
# are 1.3.0rc20-rc23's, prices it with the same KV fraction and token budget.
TRTLLM_NEWEST = (1, 3, 0)
TRTLLM_PYTORCH_SINCE = (1, 0)  # trtllm-serve's PyTorch flow, which the preset models from here (TRTLLM_FLAGS backend)
TRTLLM_UNREAD_SINCE = (1, 3, 0)


# A hybrid model's sliding layers under TensorRT-LLM's PyTorch backend: KVCacheManager
# (tensorrt_llm/_torch/pyexecutor/resource_manager.py, read at 001541ba and in an earlier stored version) gives every
# layer the window max_seq_len when KvCacheConfig.max_attention_window is None, its default, so the sliding layers
# keep every token's KV (the window only masks attention). No code path read sets the windows from the model's
# config for gpt-oss: _torch/models/modeling_gpt_oss.py (7924c7f1, 050b6cb9) passes the window to attention only,
# pyexecutor/py_executor_creator.py (bab0f2e6) only reads max_attention_window, and NVIDIA's own gpt-oss accuracy test
# sets [128, 32768] by hand. The TensorRT flow of the 0.x versions was not read: the same rule is assumed there. A
# deployment that sets per-layer windows (`--extra_llm_api_options`) overrides `kv_cache.window_memory`.
TRTLLM_WINDOW_MEMORY = "every_token"


def trtllm_fp8_without_fp8_cores(version: tuple[int, ...], block_scaled: bool, moe: bool) -> str | None:
    """TensorRT-LLM runs no fp8 weights on a GPU without fp8 tensor cores, in any version: its support matrix
    (docs/source/reference/support-matrix.md at 03dad628) lists FP8 for Hopper (SM90) and Ada (SM89) and "FP32, FP16,
    BF16, INT8, INT4" for Ampere (SM80, SM86), and GPUStack's A100 run of `trtllm-serve Qwen/Qwen3-14B-FP8` (1.2.0rc1,
    docs/performance-lab/qwen3-14b/a100.md at 10e9444a) ended in "RuntimeError: Unsupported SM version for FP8 block
    scaling GEMM"."""
    return "its FP8 kernels need SM89 or later (its support matrix: Ampere runs FP16, BF16, INT8 and INT4)"


# TensorRT-LLM's MoE kernel for MXFP4 experts (gpt-oss), moe_config.backend (--extra_llm_api_options): 'CUTLASS' by
# default up to 1.2 (MoeConfig in tensorrt_llm/llmapi/llm_args.py, read in stored versions of the file; the
# 1.2.0rc2.post2 gpt-oss deployment guide: "The default moe backend is CUTLASS"), which runs them on Hopper as W4A16
# (its WFP4A16FusedMoEMethod, sm_90 only); 'AUTO' in 1.3 (the 1.3.0rc27 API reference; added by
# NVIDIA/TensorRT-LLM#11074, merged 2026-01-30; which 1.3.0 candidate first had it was not read), which
# ModelConfig.resolve_moe_backend resolves for gpt-oss to TRITON on sm_90-99 and TRTLLM on sm_100-119, else CUTLASS.
# The TensorRT-LLM tables' MXFP4 fused-MoE rows are those of the kernel AIConfigurator's collector ran
# (collector/trtllm/collect_moe.py: triton on Hopper, trtllm on Blackwell); CUTLASS's MXFP4 rows were not measured.
TRTLLM_MOE_BACKENDS = ("AUTO", "CUTLASS", "TRITON", "TRTLLM", "CUTEDSL", "WIDEEP", "DEEPGEMM", "VANILLA")
TRTLLM_MOE_AUTO_SINCE = (1, 3)


def _trtllm_mxfp4_moe_kernel(ctx: Context, notes: list[str]) -> None:
    """Note which kernel runs an MXFP4 model's experts and whether the tables measured it (they price it either way:
    no other kernel's MXFP4 rows are measured)."""
    q = ctx.raw.get("quantization")
    if ctx.model is None or not isinstance(q, dict) or q.get("weights") != "mxfp4":
        return
    given = ctx.flags.get("moe_backend")
    backend = given or ("AUTO" if ctx.version >= TRTLLM_MOE_AUTO_SINCE else "CUTLASS")
    capability = ctx.gpu.compute_capability or (0, 0)
    measured = "TRITON" if (9, 0) <= capability < (10, 0) else "TRTLLM" if (10, 0) <= capability < (12, 0) else None
    whose = "moe_config.backend" if given else "its default moe_config.backend"
    if backend == "AUTO" and ctx.model.model_type != "gpt_oss":  # resolve_moe_backend's rule read for gpt-oss only
        notes.append(f"TensorRT-LLM {ctx.version_text}: MXFP4 experts run by what {whose} AUTO picks for "
                     f"{ctx.model.model_type or ctx.model.name} (not read); the tables' MXFP4 rows price them")
        return
    if backend == "AUTO":
        backend, whose = measured or "CUTLASS", whose + " AUTO"
    if measured is None:
        notes.append(f"TensorRT-LLM {ctx.version_text}: MXFP4 experts run by {backend} ({whose}); no MXFP4 "
                     f"fused-MoE kernel of TensorRT-LLM's is measured on {ctx.gpu.name}")
    elif backend == measured:
        notes.append(f"TensorRT-LLM {ctx.version_text}: MXFP4 experts run by {backend} ({whose}), the kernel "
                     f"the TensorRT-LLM tables of {ctx.gpu.name} measured")
    else:
        notes.append(f"TensorRT-LLM {ctx.version_text}: MXFP4 experts run by {backend} ({whose}; 'AUTO', from 1.3, "
                     f"picks {measured} here); its MXFP4 rows were not measured: the tables' {measured} rows price "
                     f"them (set moe_backend: {measured} for the kernel they measured)")


# TorchLlmArgs.cuda_graph_config (tensorrt_llm/llmapi/llm_args.py, every stored version that has it): a CudaGraphConfig
# by default, max_batch_size 0 -> 128 and enable_padding false, its batch_sizes generated as list(range(1, 32)) + [32,
# 64, 128] (the powers of 2 from 256 below max_batch_size add none at 128, in every stored version of the generator);
# graphs for decode-only batches only (the field's description). Unpadded, a decode batch replays a graph only at a
# captured size: every one up to TRTLLM_DEFAULT_GRAPH_SIZES_TO, and 64 and 128, which the overhead's single bound
# prices as eager; padded (`cuda_graph_batch_sizes`), every one up to the largest size. The other steps pay the eager
# launch term (an estimate: sim/cost/overhead.py).
TRTLLM_DEFAULT_GRAPH_SIZES_TO = 32


def _trtllm_graphs(padded_sizes: list | None, on: bool) -> dict[str, Any]:
    """The overhead terms for TensorRT-LLM's CUDA graphs (the comment above TRTLLM_DEFAULT_GRAPH_SIZES_TO); `on`
    false: none (cuda_graph_config null), every step eager."""
    return graph_terms((max(padded_sizes) if padded_sizes else TRTLLM_DEFAULT_GRAPH_SIZES_TO) if on else 0)


def derive_trtllm(ctx: Context) -> PresetResult:
    """tensorrt_llm/commands/serve.py get_llm_args and tensorrt_llm/llmapi/llm_args.py (KvCacheConfig
    free_gpu_memory_fraction 0.9, SchedulerConfig capacity_scheduler_policy GUARANTEED_NO_EVICT, chunked prefill
    off) and BuildConfig (max_batch_size 2048, max_num_tokens 8192), read at stored commits of NVIDIA/TensorRT-LLM
    (00209af1, 008b2b8d); 32 tokens per KV block (tokens_per_block). In-flight batching mixes context and
    generation requests in one step."""
    flags = ctx.flags
    if "backend" in flags and ctx.version < TRTLLM_PYTORCH_SINCE:
        raise ConfigError(f"engine.backend: {flags['backend']!r} is not modelled for TensorRT-LLM {ctx.version_text} "
                          "(the preset takes its TensorRT engine flow before 1.0); allowed: leave it out, or "
                          "TensorRT-LLM 1.0 or later")
    policy = flags.get("scheduler_policy", "GUARANTEED_NO_EVICT")
    values: dict[str, Any] = {
        "scheduler.batching": "continuous", "scheduler.mixed_batches": True,
        "scheduler.chunked_prefill": bool(flags.get("enable_chunked_prefill", False)),
        "scheduler.max_num_seqs": 2048, "scheduler.max_num_batched_tokens": 8192,
        "scheduler.kv_reservation": "whole_output" if policy == "GUARANTEED_NO_EVICT" else "on_demand",
        "kv_cache.layout": "paged", "kv_cache.block_size": 32,
        "kv_cache.free_memory_fraction": flags.get("kv_cache_free_gpu_memory_fraction", 0.9),
    }
    notes = ["TensorRT-LLM: defaults read at commits other than the version named"]
    if ctx.version >= (1, 0):
        # KvCacheConfig.enable_block_reuse, default=True in tensorrt_llm/llmapi/llm_args.py (read in six stored
        # versions of the file, whose commits the index does not name; not at the commits above); the 0.x TensorRT
        # flow is left without it
        values["kv_cache.enable_prefix_caching"] = caches_prefixes(ctx, notes, f"TensorRT-LLM {ctx.version_text}")
    if ctx.version >= TRTLLM_UNREAD_SINCE:
        notes.append(f"TensorRT-LLM {ctx.version_text}: no source of it could be read here (PyPI has stubs only); "
                     "the defaults above assumed, which AIConfigurator 0.12.0's trtllm backend, modelling 1.3.0rc20 "
                     "to rc23, states alike: free_gpu_memory_fraction 0.9, \"not version-dependent\", and "
                     "max_num_tokens 8192")
    _trtllm_mxfp4_moe_kernel(ctx, notes)
    if ctx.raw.get("speculation") is not None:
        notes.append("TensorRT-LLM: its own speculative decoding (speculative_config's MTP, Eagle and draft-target "
                     "modes, the KV it reserves for the drafts) is not read; the speculation section drafts and "
                     "verifies under the preset's scheduler as written, a what-if")
    options = get_key(ctx.raw, "engine.extra_llm_api_options")
    inert = {key: about for key, about in TRTLLM_LLM_API_INERT.items() if isinstance(options, dict) and key in options}
    if inert:
        notes.append(f"engine.extra_llm_api_options: {', '.join(inert)}: accepted, no effect on what is simulated "
                     f"({'; '.join(dict.fromkeys(inert.values()))})")
    values.update(preset_terms(ctx, "trtllm", notes))
    if "cuda_graph_batch_sizes" in flags:
        values["scheduler.cuda_graph_batch_sizes"] = list(flags["cuda_graph_batch_sizes"])
    if ctx.version >= TRTLLM_PYTORCH_SINCE:
        values["cost_model.overhead"].update(_trtllm_graphs(flags.get("cuda_graph_batch_sizes"),
                                                            flags.get("cuda_graphs", True)))
    if ctx.model is not None and ctx.model.hybrid_window:
        values["kv_cache.window_memory"] = TRTLLM_WINDOW_MEMORY
        notes.append(f"TensorRT-LLM: {ctx.model.name}'s sliding layers keep every token's KV (TRTLLM_WINDOW_MEMORY)")
    given_fraction = {"kv_cache.free_memory_fraction": "kv_cache_free_gpu_memory_fraction"} \
        if "kv_cache_free_gpu_memory_fraction" in flags else {}
    return PresetResult(values, given_fraction, notes)


# trtllm-serve --extra_llm_api_options FILE: a YAML mapping of LLM API options (tensorrt_llm/llmapi/llm_args.py
# TorchLlmArgs, read in stored versions of the file, the oldest with KvCacheConfig.dtype "auto" or "fp8",
# enable_block_reuse true and free_gpu_memory_fraction None (0.9) by default, and CudaGraphConfig's batch_sizes,
# max_batch_size and enable_padding). Its keys that a preset flag spells (the flag they give, checked as that flag),
# and those that change nothing simulated; any other key is refused in one line. ServeSim reads no file: the mapping
# is given inline.
TRTLLM_LLM_API_KEYS = {
    "max_batch_size": "max_batch_size", "max_num_tokens": "max_num_tokens", "max_seq_len": "max_seq_len",
    "enable_chunked_prefill": "enable_chunked_prefill", "backend": "backend", "tensor_parallel_size": "tp_size",
    "pipeline_parallel_size": "pp_size", "moe_expert_parallel_size": "ep_size",
    "kv_cache_config.free_gpu_memory_fraction": "kv_cache_free_gpu_memory_fraction",
    "kv_cache_config.enable_block_reuse": "enable_block_reuse", "kv_cache_config.dtype": "kv_cache_dtype",
    "scheduler_config.capacity_scheduler_policy": "scheduler_policy", "moe_config.backend": "moe_backend",
}
TRTLLM_LLM_API_INERT = {"print_iter_log": LOGGING, "trust_remote_code": MODEL_FILES}
TRTLLM_LLM_API_SECTIONS = ("kv_cache_config", "scheduler_config", "moe_config")  # mappings of keys above


def _allowed_api_keys() -> str:
    return ", ".join([*TRTLLM_LLM_API_KEYS, "cuda_graph_config: null or batch_sizes with enable_padding true",
                      *TRTLLM_LLM_API_INERT])


def read_llm_api_options(value) -> dict[str, tuple[str, Any]]:
    """--extra_llm_api_options as the flags it gives ({flag: (its key, value)}), from the mapping given inline; a
    file name (the command's value) is refused in one line, as are keys the preset does not read
    (TRTLLM_LLM_API_KEYS) and CUDA-graph settings it does not model."""
    if not isinstance(value, dict):
        raise ConfigError(f"engine.extra_llm_api_options: {value!r} is a file, which ServeSim does not read; allowed: "
                          "its YAML mapping as engine.extra_llm_api_options (and the option left out of "
                          "engine.command)")
    flags: dict[str, tuple[str, Any]] = {}
    for key, given in value.items():
        if key in TRTLLM_LLM_API_SECTIONS:
            if not isinstance(given, dict):
                raise ConfigError(f"engine.extra_llm_api_options.{key}: {given!r} is not allowed; allowed: a mapping")
            parts = {f"{key}.{sub}": sub_value for sub, sub_value in given.items()}
        else:
            parts = {str(key): given}
        for dotted, part in parts.items():
            if dotted == "cuda_graph_config" and part is None:
                flags["cuda_graphs"] = (dotted, False)
            elif dotted == "cuda_graph_config":
                flags["cuda_graph_batch_sizes"] = (dotted, _graph_sizes(part))
            elif dotted in TRTLLM_LLM_API_KEYS:
                flags[TRTLLM_LLM_API_KEYS[dotted]] = (dotted, part)
            elif dotted not in TRTLLM_LLM_API_INERT:
                raise ConfigError(f"engine.extra_llm_api_options.{dotted}: not modelled; allowed: "
                                  f"{_allowed_api_keys()}")
    return flags


def _graph_sizes(config) -> list:
    """cuda_graph_config's sizes, where the preset models them: batch_sizes, padded (enable_padding true)."""
    where = "engine.extra_llm_api_options.cuda_graph_config"
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: {config!r} is not allowed; allowed: null (no CUDA graphs), or a mapping with "
                          "batch_sizes and enable_padding true")
    unknown = sorted(set(config) - {"batch_sizes", "max_batch_size", "enable_padding"})
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: not modelled; allowed: batch_sizes, enable_padding, max_batch_size")
    sizes = config.get("batch_sizes")
    if not sizes:
        raise ConfigError(f"{where}: the sizes generated from max_batch_size (or 128) are not modelled (their rule "
                          "differs between the versions of llm_args.py read); allowed: batch_sizes")
    if config.get("enable_padding") is not True:
        raise ConfigError(f"{where}.enable_padding: {config.get('enable_padding', False)!r} is not modelled (a decode "
                          "batch between the sizes runs without a graph); allowed: true")
    if not isinstance(sizes, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1
                                              for n in sizes):
        raise ConfigError(f"{where}.batch_sizes: {sizes!r} is not allowed; allowed: a list of whole numbers >= 1")
    most = config.get("max_batch_size", 0)
    if most not in (0, max(sizes)):
        raise ConfigError(f"{where}.max_batch_size: {most!r} differs from max(batch_sizes) {max(sizes)}, which "
                          "TensorRT-LLM refuses; allowed: leave it out, or the largest size")
    return sorted(sizes)


def _moe_backend(value):
    if value not in TRTLLM_MOE_BACKENDS:
        raise ConfigError(f"engine.moe_backend: {value!r} is not allowed; allowed: {', '.join(TRTLLM_MOE_BACKENDS)}")
    return value


def _tokens_per_block(value):
    # "It must be a power of two greater than 1" (docs/source/features/kvcache.md at NVIDIA/TensorRT-LLM 0076e939;
    # trtllm-build's own check: math.log2(tokens_per_block).is_integer())
    if value < 2 or value & (value - 1):
        raise ConfigError(f"engine.tokens_per_block: {value!r} is not allowed; allowed: a power of 2 greater than 1, "
                          "as TensorRT-LLM's KV blocks need")
    return value


def _policy(value):
    if value not in ("GUARANTEED_NO_EVICT", "MAX_UTILIZATION"):
        raise ConfigError(f"engine.scheduler_policy: {value!r} is not allowed; allowed: GUARANTEED_NO_EVICT, "
                          "MAX_UTILIZATION")
    return value


TRTLLM_FLAGS = {
    "max_batch_size": Flag("scheduler.max_num_seqs", int, "--max_batch_size"),
    "max_num_tokens": Flag("scheduler.max_num_batched_tokens", int, "--max_num_tokens"),
    "max_seq_len": Flag("scheduler.max_model_len", int, "--max_seq_len"),
    "kv_cache_free_gpu_memory_fraction": Flag(None, (int, float), "--kv_cache_free_gpu_memory_fraction",
                                              aliases=("--free_gpu_memory_fraction",),
                                              decides=("kv_cache.capacity_tokens",)),
    "tokens_per_block": Flag("kv_cache.block_size", int, "tokens_per_block", _tokens_per_block),
    "enable_chunked_prefill": Flag(None, bool, "--enable_chunked_prefill", decides=("scheduler.chunked_prefill",)),
    "scheduler_policy": Flag(None, str, "capacity_scheduler_policy", _policy),
    "cuda_graph_batch_sizes": Flag(None, list, "cuda_graph_config.batch_sizes with enable_padding"),
    "cuda_graphs": Flag(None, bool, "cuda_graph_config: null (false) runs every step without CUDA graphs",
                        since=TRTLLM_PYTORCH_SINCE),
    "enable_block_reuse": Flag("kv_cache.enable_prefix_caching", bool, "kv_cache_config.enable_block_reuse",
                               since=TRTLLM_PYTORCH_SINCE),
    "kv_cache_dtype": Flag("quantization.kv_cache", str, "kv_cache_config.dtype: auto (the model's dtype) or fp8",
                           kv_cache_dtype_flag(("auto", "fp8")), since=TRTLLM_PYTORCH_SINCE),
    "extra_llm_api_options": Flag(None, (dict, str), "--extra_llm_api_options: its YAML's options given inline as "
                                  "a mapping (TRTLLM_LLM_API_KEYS)", since=TRTLLM_PYTORCH_SINCE,
                                  expands=read_llm_api_options),
    "moe_backend": Flag(None, str, "moe_config.backend: the MoE kernel (noted for MXFP4 experts, whose measured rows "
                        "are TRITON's on Hopper and TRTLLM's on Blackwell)", _moe_backend, since=(1, 0),
                        value_versions={"AUTO": (TRTLLM_MOE_AUTO_SINCE, None)}),
    # trtllm-serve's --backend at 00209af1: pytorch (the default), tensorrt (alias trt) or _autodeploy. The PyTorch
    # flow is what the preset models from 1.0 (1.0.0rc2's documentation: `from tensorrt_llm import LLM` is the PyTorch
    # LLM); before 1.0, the TensorRT engines trtllm-bench builds (`derive_trtllm` refuses the option there)
    "backend": Flag(None, str, "--backend: pytorch, the default", only_default("backend", "pytorch")),
    "tp_size": Flag("hardware.tensor_parallel", int, "--tp_size", aliases=("--tensor_parallel_size",)),
    "pp_size": Flag("hardware.pipeline_parallel", int, "--pp_size", aliases=("--pipeline_parallel_size",)),
    "ep_size": Flag("hardware.expert_parallel", int, "--ep_size (moe_expert_parallel_size; moe tp = tp_size / "
                    "ep_size, without attention data parallelism)", aliases=("--moe_expert_parallel_size",)),
}

# trtllm-serve's options that change nothing simulated, read in tensorrt_llm/commands/serve.py at NVIDIA/TensorRT-LLM
# 00209af1 (click: exact spellings).
TRTLLM_INERT = (
    inert_group(SERVER_ADDRESS, "one", "--host", "--port")
    + inert_group(MODEL_FILES, "one", "--tokenizer", "--revision", "--gpus_per_node")
    + inert_group(MODEL_FILES, "none", "--trust_remote_code")
    + inert_group(LOGGING, "one", "--log_level")
    + inert_group(PARSING, "one", "--chat_template", "--tool_parser", "--reasoning_parser")
    + (InertOption("--num_postprocess_workers", "one", "processes that turn responses into OpenAI chunks (the "
                   "TensorRT-LLM front-end is a fitted delay that does not queue)"),))
