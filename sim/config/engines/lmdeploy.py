"""LMDeploy's preset (TurboMind 0.1.0a0-a1, 0.12-0.16): its two schedulers, defaults, flags and options."""

from __future__ import annotations

from typing import Any

from sim.config.engines.base import (Context, Flag, LOGGING, MODEL_FILES, PARSING, PresetResult, SERVER_ADDRESS,
                                     dotted_version, get_key, inert_group, sixteen_bit_dtype)
from sim.config.engines.engine_work import preset_terms, window_memory_not_read
from sim.errors import ConfigError
from sim.model.interconnects import CUSTOM_ALL_REDUCE, NCCL_ALL_REDUCE


# The LMDeploy versions whose TurboMind scheduler the preset follows: v0.1.0a0 and v0.1.0a1 have the same
# src/turbomind/models/llama/{LlamaBatch,SequenceManager,BlockManager}.cc and triton_backend/llama/
# LlamaTritonModel.cc; "Unify prefill & decode passes" (InternLM/lmdeploy#775, first in v0.1.0a2) replaced them.
LMDEPLOY_SCHEDULER_VERSIONS = ("0.1.0a0", "0.1.0a1")
# And from "Refactor turbomind engine" (InternLM/lmdeploy#4223, first in v0.12.0): one forward pass an iteration
# within a fixed token budget, read to v0.16.0, the newest tag the stored source has (PyPI's 0.17-0.18 are binary
# wheels whose engine source could not be read here). v0.1.0a2-v0.11.x split an iteration's prompts into several
# passes (LlamaBatch.cc's mini-batches) under a budget that moved with the waiting prompts: not modelled.
LMDEPLOY_ONE_PASS_SINCE = (0, 12, 0)
LMDEPLOY_NEWEST = (0, 16, 0)
LMDEPLOY_VERSIONS = (f"{', '.join(LMDEPLOY_SCHEDULER_VERSIONS)}, {dotted_version(LMDEPLOY_ONE_PASS_SINCE)} to "
                     f"{dotted_version(LMDEPLOY_NEWEST[:2])}.x")  # the versions the preset models
LMDEPLOY_BLOCK_COUNT_UNTIL = (0, 15, 0)  # cache_max_entry_count >= 1: a number of blocks until then, refused since
# lmdeploy/utils.py get_max_batch_size (v0.10.0-v0.16.0): matched in torch's lower-cased device name, else 128
LMDEPLOY_MAX_BATCH_BY_GPU = (("a100", 384), ("a800", 384), ("h100", 1024), ("h800", 1024), ("l20y", 1024),
                             ("h200", 1024))
LMDEPLOY_OTHER_GPU_MAX_BATCH = 128
# The flags of one line only: config.ini keys of v0.1.0a, TurbomindEngineConfig fields of v0.12.0+
_LMDEPLOY_CONFIG_INI_ONLY = ("max_context_token_num", "step_length")
_LMDEPLOY_ENGINE_CONFIG_ONLY = ("max_prefill_token_num", "enable_prefix_caching", "quant_policy", "communicator",
                                "backend", "dtype")


# The weights TurboMind loads, by the formats its converter writes or reads: v0.1.0 (the PyPI wheel, sha256
# 8a998b73..., the release after v0.1.0a0-a1: lmdeploy/turbomind/deploy/target_model registers fp16, bf16 and w4, AWQ's
# 4-bit) and v0.12.0 / v0.16.0 (the wheels, sha256 22dc5c00... and 0b5b1c79...: deploy/converter.py in v0.12.0,
# turbomind/converter.py in v0.16.0, model formats hf, awq, gptq, compressed-tensors (4-bit), fp8 in 128-wide blocks
# and mxfp4). Neither has 8-bit integer or NVFP4 weights.
LMDEPLOY_WEIGHTS = {"0.1.0a": ("bf16", "fp16", "int4"), "one_pass": ("bf16", "fp16", "int4", "fp8", "mxfp4")}


def _refuse_unloaded_weights(ctx: Context, allowed: tuple[str, ...]) -> None:
    weights = get_key(ctx.raw, "quantization.weights")
    if weights is not None and weights not in allowed:
        raise ConfigError(f"quantization.weights: {weights!r} is not a weight format LMDeploy {ctx.version_text}'s "
                          f"TurboMind loads (its converter's formats); allowed: {', '.join(allowed)}")


def derive_lmdeploy(ctx: Context) -> PresetResult:
    """LMDeploy's TurboMind engine: its v0.1.0a0-a1 scheduler (`_derive_turbomind_context_pass`) or its one-pass
    engine of v0.12.0-v0.16.x (`_derive_turbomind_one_pass`); the versions between are refused in one line."""
    text = ctx.version_text.strip().lstrip("v")
    _refuse_unloaded_weights(ctx, LMDEPLOY_WEIGHTS["0.1.0a" if text in LMDEPLOY_SCHEDULER_VERSIONS else "one_pass"])
    if ctx.raw.get("speculation") is not None:
        # lmdeploy/serve/core/async_engine.py (v0.12.0 and v0.16.0 wheels): a speculative config with the turbomind
        # backend is logged ("speculative decoding is not supported by turbomind") and the engine runs without it
        raise ConfigError(f"speculation: LMDeploy {ctx.version_text}'s TurboMind does not speculate (it warns "
                          "\"speculative decoding is not supported by turbomind\" and decodes without it; LMDeploy's "
                          "PyTorch engine, which does, is not modelled); allowed: no speculation section")
    if text in LMDEPLOY_SCHEDULER_VERSIONS:
        for key in _LMDEPLOY_ENGINE_CONFIG_ONLY:
            if key in ctx.flags:
                raise ConfigError(f"engine.{key}: not a config.ini key of lmdeploy {ctx.version_text}; allowed: "
                                  f"leave it out, or engine.version {dotted_version(LMDEPLOY_ONE_PASS_SINCE)} or later")
        return _derive_turbomind_context_pass(ctx)
    if ctx.version >= LMDEPLOY_ONE_PASS_SINCE:  # (above the newest: refused by apply_engine_preset)
        for key in _LMDEPLOY_CONFIG_INI_ONLY:
            if key in ctx.flags:
                raise ConfigError(f"engine.{key}: not a flag of lmdeploy {ctx.version_text} (a config.ini key of "
                                  f"0.1.0a); allowed: leave it out, or engine.version 0.1.0a1")
        return _derive_turbomind_one_pass(ctx)
    raise ConfigError(f"engine.version: {ctx.version_text!r} is not a TurboMind scheduler the lmdeploy preset "
                      f"models; allowed: {LMDEPLOY_VERSIONS} (v0.1.0a2 unified the prefill and "
                      "decode passes, InternLM/lmdeploy#775; to v0.11.x an iteration's prompts ran in several passes)")


def lmdeploy_max_batch_size(gpu_name: str) -> int:
    """TurboMind's max_batch_size when none is given (v0.10.0+): by the GPU's name, as get_max_batch_size matches
    torch's device name ("NVIDIA H100 80GB HBM3" holds "h100"; the catalog's names hold the same words)."""
    name = gpu_name.lower()
    return next((size for word, size in LMDEPLOY_MAX_BATCH_BY_GPU if word in name), LMDEPLOY_OTHER_GPU_MAX_BATCH)


def _derive_turbomind_one_pass(ctx: Context) -> PresetResult:
    """LMDeploy's TurboMind engine, v0.12.0-v0.16.x, read at v0.16.0 (InternLM/lmdeploy, tags v0.12.0, v0.14.0,
    v0.15.0, v0.16.0): lmdeploy/messages.py TurbomindEngineConfig (max_batch_size None, cache_max_entry_count 0.8,
    cache_block_seq_len 64, max_prefill_token_num 8192, enable_prefix_caching False, quant_policy 0, communicator
    nccl), lmdeploy/utils.py get_max_batch_size (by GPU) and _get_and_verify_max_len (session_len: the model's
    context), src/turbomind/turbomind.cc (the token budget max_prefill_token_num + max_batch_size, rounded up to a
    multiple of TP; the KV cache cache_max_entry_count of the memory cudaMemGetInfo finds free once the weights are
    loaded, before the activations), src/turbomind/engine/engine.cc (at most max_batch_size requests in the engine)
    and scheduler.cc (every iteration one pass over the requests in arrival order: decodes and prompt chunks share
    it, each taking what is left of the budget; a prompt's blocks all taken when it starts, a decode's as it grows;
    out of blocks, the latest arrivals give theirs up and recompute) and models/llama/context_token_resource.h (the
    prompts prefilling in a pass hold at most max_context_token_num, session_len, tokens of context together:
    `scheduler.prefill_context_tokens`).

    A request the whole k/v cache cannot hold (a pool of a few blocks) is rejected at arrival, as one that can
    never run here. TurboMind 0.15.0-0.16.x fail it with kOutOfMemory on the first pass that admits nothing while
    nothing is in flight (engine.cc FailStalledHeadOfLine, "fail head-of-line request on cache OOM instead of
    spinning", InternLM/lmdeploy b9825af7); 0.12.0-0.14.x check only session_len (engine.cc kTooLong) and, by that
    commit's account, keep scheduling it in passes that admit nothing, so that run never ends. Neither the wait
    before the failure nor the endless run is modelled."""
    flags, model = ctx.flags, ctx.model
    notes: list[str] = []
    block_len = flags.get("cache_block_seq_len", 64)
    max_batch = flags.get("max_batch_size") or lmdeploy_max_batch_size(ctx.gpu.name)
    prefill_tokens = flags.get("max_prefill_token_num", 8192)
    entries = flags.get("cache_max_entry_count", 0.8)
    if entries <= 0 or (entries >= 1 and ctx.version >= LMDEPLOY_BLOCK_COUNT_UNTIL):
        allowed = ("a fraction of the free GPU memory in (0, 1)" if ctx.version >= LMDEPLOY_BLOCK_COUNT_UNTIL else
                   "a fraction of the free GPU memory in (0, 1), or a number of k/v blocks >= 1")
        raise ConfigError(f"engine.cache_max_entry_count: {entries!r} is not allowed by lmdeploy {ctx.version_text}; "
                          f"allowed: {allowed}")
    if prefill_tokens < 1:
        raise ConfigError(f"engine.max_prefill_token_num: {prefill_tokens!r} is not allowed; allowed: a whole number "
                          ">= 1")
    budget = -(-(prefill_tokens + max_batch) // ctx.tensor_parallel) * ctx.tensor_parallel
    values: dict[str, Any] = {"scheduler.batching": "continuous", "scheduler.chunked_prefill": True,
                              "scheduler.mixed_batches": True, "scheduler.admission": "whole_prompt",
                              "scheduler.max_num_seqs": max_batch, "scheduler.max_num_batched_tokens": budget,
                              "kv_cache.layout": "paged", "kv_cache.block_size": block_len}
    from_flags: dict[str, str] = ({"scheduler.max_num_batched_tokens": "max_prefill_token_num"}
                                  if "max_prefill_token_num" in flags else {})
    if entries >= 1:
        values["kv_cache.capacity_tokens"] = int(entries) * block_len
    else:
        values.update({"kv_cache.free_memory_fraction": entries, "kv_cache.profile_activations": False})
    if get_key(ctx.raw, "quantization.kv_cache") == "fp8":  # (quant_policy 8, written in before the derivation: int8)
        raise ConfigError("quantization.kv_cache: 'fp8' contradicts engine lmdeploy (TurboMind refuses an FP8 k/v "
                          "cache, lmdeploy/messages.py); allowed: bf16, fp16, or int8 with engine.quant_policy 8")
    values["hardware.all_reduce"] = NCCL_ALL_REDUCE  # communicator's default, nccl
    session_len = flags.get("session_len")
    if session_len is not None and model is not None and session_len > model.max_context:
        notes.append(f"LMDeploy session_len {session_len}: ServeSim's max_model_len is {model.name}'s context "
                     f"{model.max_context}")
        session_len = model.max_context
    if session_len is not None:
        values["scheduler.max_model_len"], from_flags["scheduler.max_model_len"] = session_len, "session_len"
    context_limit = session_len if session_len is not None else ctx.max_model_len()  # the scenario's, or the model's
    if context_limit is not None:
        # turbomind.cc: max_context_token_num (not in the Python config: 0) becomes session_len, times session_len
        # where that is at most max_batch_size
        values["scheduler.prefill_context_tokens"] = (context_limit * context_limit if context_limit <= max_batch
                                                      else context_limit)
    notes.append(f"LMDeploy {ctx.version_text}: max_batch_size {max_batch}"
                 f"{'' if 'max_batch_size' in flags else ' (get_max_batch_size for ' + ctx.gpu.name + ')'}, "
                 f"{budget} tokens a pass, "
                 + (f"{int(entries)} k/v blocks" if entries >= 1 else f"k/v cache {entries:g} of the memory free after "
                    "the weights (cudaMemGetInfo's free memory also lacks the CUDA context, not counted here)"))
    notes.append("LMDeploy: not modelled: the prompt chunks cut to whole blocks (from v0.15.0); a prompt past the "
                 "context limit (session_len) stopping the pass from v0.15.0 (here only the prompts behind it wait, as "
                 "to v0.14.x); the async pipeline's one-iteration "
                 "delay of each step's tokens; TurboMind runs without CUDA graphs, and its kernels are priced as "
                 "vLLM's (AIConfigurator measured none of TurboMind's)")
    if flags.get("cache_chunk_size", -1) != -1:
        notes.append("LMDeploy cache_chunk_size: no effect on the schedule (blocks are taken as needed)")
    values.update(preset_terms(ctx, "lmdeploy", notes))
    window_memory_not_read(ctx, "LMDeploy", notes)
    return PresetResult(values, from_flags, notes)


def _derive_turbomind_context_pass(ctx: Context) -> PresetResult:
    """LMDeploy's TurboMind engine, v0.1.0a0-a1 (read at v0.1.0a1, 9c46b27c, and at ebe90bc9, whose benchmark page
    names v0.1.0a1): src/turbomind/triton_backend/llama/LlamaTritonModel.cc (config.ini keys; max_context_token_num
    <= max_batch_size is multiplied by session_len), lmdeploy/turbomind/deploy/target_model/base.py (what `lmdeploy
    convert` writes: max_batch_size 64, cache_max_entry_count 0.5, cache_block_seq_len 128, step_length 1, session_len
    = the chat template's + 8), src/turbomind/models/llama/BlockManager.cc (cache_max_entry_count < 1: that fraction
    of the GPU's total memory in 128-token k/v blocks, else the number of blocks), LlamaV2.cc (session_len cut to
    the blocks' tokens), SequenceManager.cc Materialize (blocks on demand for context + step_length tokens, in
    arrival order; when none is free the latest-arrived active sequences are preempted and recomputed) and
    LlamaBatch.cc InternalThreadEntry (each iteration admits up to max_batch_size requests, runs their context
    decode, then one decode pass: SchedulingRule.context_pass)."""
    flags, model = ctx.flags, ctx.model
    if flags.get("step_length", 1) != 1:
        raise ConfigError(f"engine.step_length: {flags['step_length']} is not modelled; allowed: 1 (TurboMind's and "
                          "lmdeploy convert's default)")
    notes: list[str] = []
    block_len = flags.get("cache_block_seq_len", 128)
    max_batch = flags.get("max_batch_size", 64)
    entries = flags.get("cache_max_entry_count", 0.5)
    if entries <= 0:
        raise ConfigError(f"engine.cache_max_entry_count: {entries!r} is not allowed; allowed: a fraction of the GPU's "
                          "memory in (0, 1), or a number of k/v blocks >= 1")
    from_flags: dict[str, str] = {}
    values: dict[str, Any] = {"scheduler.batching": "continuous", "scheduler.chunked_prefill": False,
                              "scheduler.mixed_batches": True, "scheduler.context_pass": True,
                              "scheduler.max_num_seqs": max_batch, "kv_cache.layout": "paged",
                              "kv_cache.block_size": block_len}
    blocks = None
    if entries >= 1:
        blocks = int(entries)
    elif model is not None:
        # [2, layers, local kv heads, block_len, head_dim] per GPU, in the scenario's KV dtype (fp16: quant_policy 0),
        # counted in the cache's token slots (a hybrid model's sliding layers apart: `kv_slot_bytes`)
        from sim.model.memory import kv_slot_bytes
        q = ctx.raw.get("quantization") or {}
        block_bytes = kv_slot_bytes(model, q.get("kv_cache") or "bf16", ctx.tensor_parallel) * block_len
        blocks = int(ctx.gpu.hbm_bytes * entries) // block_bytes
    if blocks is not None:
        values["kv_cache.capacity_tokens"] = blocks * block_len
    session_len = flags.get("session_len")
    if session_len is None and model is not None:
        session_len = model.max_context + 8
        notes.append(f"LMDeploy session_len: {session_len} assumed ({model.name}'s context + 8: lmdeploy convert "
                     "writes its chat template's session_len + 8, llama2 4096 + 8)")
    if session_len is not None:
        if blocks is not None:
            session_len = min(session_len, blocks * block_len)  # LlamaV2.cc: "No enough blocks for session_len"
        # TurboMind has no per-iteration token budget: every admitted prompt's context decode runs in that
        # iteration (in sub-batches of max_context_token_num tokens, priced here as one pass)
        values["scheduler.max_num_batched_tokens"] = max(max_batch * session_len, max_batch)
        if model is not None and session_len > model.max_context:
            notes.append(f"LMDeploy session_len {session_len}: ServeSim's max_model_len is {model.name}'s context "
                         f"{model.max_context}")
            session_len = model.max_context
        values["scheduler.max_model_len"] = session_len
        if flags.get("session_len") is not None:  # the flag's: a scenario's different max_model_len contradicts it
            from_flags["scheduler.max_model_len"] = "session_len"
    values.update(preset_terms(ctx, "lmdeploy", notes))
    # TurboMind all-reduces with NCCL only (src/turbomind/models/llama/LlamaFfnLayer.cc and the attention layers:
    # ftNcclAllReduceSum under an NcclGuard; read at 620236d3, a 2023 commit of the v0.1 line, not at v0.1.0a1's own)
    values["hardware.all_reduce"] = NCCL_ALL_REDUCE
    if ctx.tensor_parallel > 1 and get_key(ctx.raw, "hardware.all_reduce") in (None, NCCL_ALL_REDUCE):
        notes.append("LMDeploy: NCCL's all-reduce priced from the NCCL version AIConfigurator measured (the GPU's "
                     "calibrate/measured/<gpu>/nccl/), not the one its build linked (unstated)")
    window_memory_not_read(ctx, "LMDeploy", notes)
    return PresetResult(values, from_flags, notes)


def _turbomind_only(backend: str) -> str:
    if backend != "turbomind":
        raise ConfigError(f"engine.backend: {backend!r} is not modelled; allowed: turbomind (the preset models "
                          "LMDeploy's TurboMind engine)")
    return backend


def _quant_policy(policy: int) -> str | None:
    """TurboMind's --quant-policy as `quantization.kv_cache`: 0 (the model's dtype) sets nothing, 8 int8 k/v."""
    if policy not in (0, 8):
        raise ConfigError(f"engine.quant_policy: {policy!r} is not modelled; allowed: 0 (the model's dtype), 8 (int8 "
                          "k/v; 4, int4 k/v, is not)")
    return "int8" if policy == 8 else None


def _communicator(name: str) -> str:
    """TurboMind's --communicator as `hardware.all_reduce`: nccl, or its own CUDA-IPC kernel (native is cuda-ipc's
    older name)."""
    if name not in ("nccl", "cuda-ipc", "native"):
        raise ConfigError(f"engine.communicator: {name!r} is not allowed; allowed: nccl, cuda-ipc, native")
    return NCCL_ALL_REDUCE if name == "nccl" else CUSTOM_ALL_REDUCE


LMDEPLOY_FLAGS = {  # config.ini keys of v0.1.0a; TurbomindEngineConfig fields (--max-batch-size ...) of v0.12.0+
    "max_batch_size": Flag("scheduler.max_num_seqs", int, "config.ini max_batch_size / --max-batch-size: requests "
                           "in the batch (v0.12.0+ default: by GPU, get_max_batch_size)",
                           aliases=("--max-batch-size",)),
    "cache_max_entry_count": Flag(None, (int, float), "config.ini cache_max_entry_count / --cache-max-entry-count: "
                                  "< 1 a fraction of the GPU's memory (v0.1.0a: total; v0.12.0+: free after the "
                                  "weights) for k/v blocks, else the number of blocks (refused from v0.15.0)",
                                  aliases=("--cache-max-entry-count",), decides=("kv_cache.capacity_tokens",)),
    "cache_block_seq_len": Flag("kv_cache.block_size", int, "config.ini cache_block_seq_len / "
                                "--cache-block-seq-len: tokens per k/v block", aliases=("--cache-block-seq-len",)),
    "session_len": Flag(None, int, "config.ini session_len / --session-len: the longest sequence",
                        aliases=("--session-len",), decides=("scheduler.max_model_len",)),
    "max_context_token_num": Flag(None, int, "config.ini max_context_token_num (v0.1.0a): tokens per "
                                  "context-decode sub-batch (x session_len when <= max_batch_size); its sub-batches "
                                  "are priced as one pass"),
    "cache_chunk_size": Flag(None, int, "config.ini cache_chunk_size: blocks allocated at a time (no effect on "
                             "the schedule)"),
    "step_length": Flag(None, int, "config.ini step_length (v0.1.0a): decode steps per iteration (1 only)"),
    "max_prefill_token_num": Flag(None, int, "--max-prefill-token-num (v0.12.0+): a pass's tokens, with "
                                  "max_batch_size more"),
    "enable_prefix_caching": Flag("kv_cache.enable_prefix_caching", bool, "--enable-prefix-caching (v0.12.0+)"),
    "quant_policy": Flag("quantization.kv_cache", int, "--quant-policy (v0.12.0+): 0 the model's dtype, 8 int8 k/v",
                         _quant_policy),
    "communicator": Flag("hardware.all_reduce", str, "--communicator (v0.12.0+): nccl, or cuda-ipc (native) for "
                         "TurboMind's own all-reduce", _communicator),
    "tp": Flag("hardware.tensor_parallel", int, "lmdeploy convert --tp / --tp", aliases=("--tp",)),
    "backend": Flag(None, str, "--backend: turbomind (its PyTorch engine is not modelled)", _turbomind_only),
    "dtype": Flag(None, str, "--dtype (v0.12.0+): auto, float16 or bfloat16",
                  sixteen_bit_dtype(("auto", "float16", "bfloat16"))),
}

# `lmdeploy serve api_server`'s options that change nothing simulated, read in lmdeploy/cli/serve.py and
# lmdeploy/cli/utils.py at v0.16.0. Its argparse takes unambiguous prefixes.
LMDEPLOY_INERT = (
    inert_group(SERVER_ADDRESS, "one", "--server-name", "--server-port", "--proxy-url")
    + inert_group(SERVER_ADDRESS, "many", "--allow-origins", "--allow-methods", "--allow-headers", "--api-keys")
    + inert_group(SERVER_ADDRESS, "none", "--allow-credentials", "--ssl", "--disable-fastapi-docs")
    + inert_group(MODEL_FILES, "one", "--model-name", "--revision", "--download-dir")
    + inert_group(MODEL_FILES, "none", "--trust-remote-code")
    + inert_group(LOGGING, "one", "--log-level", "--max-log-len")
    + inert_group(PARSING, "one", "--chat-template", "--tool-call-parser", "--reasoning-parser"))
