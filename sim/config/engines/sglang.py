"""SGLang's preset (0.3.0-0.5.23): its memory, batch and CUDA-graph rules by version and GPU, flags and options."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from sim.config.engines.base import (GIB, Context, Flag, LOGGING, MODEL_FILES, PARSING, PresetResult, REQUEST_LIMITS,
                                     SEED, SERVER_ADDRESS, STREAM_CHUNK_KEY, USAGE_REPORTS, at_least, caches_prefixes,
                                     config_overrides, custom_all_reduce, dotted_version, get_key, gib_as_bytes,
                                     graph_terms, inert_group, OFFLOAD_COPIED_IN, offload_note, served_config,
                                     kv_cache_dtype_flag, only_default, only_one_of, parse_version, refuse_model_before,
                                     released_before, sixteen_bit_dtype, weights_quantization)
from sim.config.engines.engine_work import inbound_work, preset_kv_tokens, preset_terms
from sim.config.engines.sglang_dp_attention import (
    SGLANG_DP_CONSERVATIVENESS_FACTOR,
    sglang_dp_attention_context,
    sglang_dp_attention_ranks,
    sglang_dp_attention_values,
)
from sim.config.engines.fitted import nearest_fits
from sim.config.engines.sparse_attention import sglang_nsa_context, sglang_nsa_fraction, sglang_nsa_values
from sim.config.engines.sglang_speculative import (NGRAM_ACCEPTANCE, SGLANG_ALGORITHMS, SGLANG_NGRAM_BFS_BREADTH,
                                                   SGLANG_NGRAM_FIXED_DRAFT_TOKENS_SINCE, SGLANG_NGRAM_MATCH_WINDOW,
                                                   SGLANG_SPECULATIVE_MAX_RUNNING, SGLangSpeculation,
                                                   sglang_speculation)
from sim.cost.overhead import ENGINE_DEFAULTS
from sim.errors import ConfigError


# SGLang's new-token ratio (python/sglang/srt/managers/scheduler.py, sglang 0.5.x; what it does: sim/sched/rules.py
# NewTokenRatio): it starts at SGLANG_INIT_NEW_TOKEN_RATIO x --schedule-conservativeness and decays, over
# SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS decode steps, to SGLANG_INIT_NEW_TOKEN_RATIO x SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR.
# The preset below and the scenario's defaults (sim/config/schema.py NewTokenRatioSpec) read these.
SGLANG_INIT_NEW_TOKEN_RATIO = 0.7
SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
SGLANG_MIN_NEW_TOKEN_RATIO = SGLANG_INIT_NEW_TOKEN_RATIO * SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR  # 0.098
SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS = 600


# SGLang 0.3.0's defaults (the PyPI wheel sglang==0.3.0): python/sglang/srt/server_args.py ServerArgs.__post_init__
# (mem_fraction_static by TP size; chunked_prefill_size 8192 and max_prefill_tokens 16384 on every GPU),
# managers/tp_worker.py ModelTpServer.__init__ (max_running_requests = min(max_total_num_tokens // 2, max_num_reqs - 1))
# and model_executor/model_runner.py init_memory_pool (max_num_reqs = min(max(kv tokens / context_len x 512, 2048),
# 5120)). Its scheduler (tp_worker.py forward_step: a prefill batch whenever one can be formed, else decode steps,
# one at a time with streaming clients; policy_scheduler.py PrefillAdder) is the 0.5.x rule below, new-token ratio
# included; it has no overlap scheduler (its CPU terms: the nearest usable fit's, engine_terms.json, with the
# scheduler's work a step where that fit ran with the overlap, `sglang_overlap_work`).
SGLANG_030_MEM_FRACTION_BY_TP = ((16, 0.79), (8, 0.83), (4, 0.85), (2, 0.87), (1, 0.88))
SGLANG_030_MAX_NUM_REQS = 5120
# 0.3.0's new-token ratio (global_config.py, tp_worker.py): it starts at 0.7 whatever --schedule-conservativeness,
# falls by 0.001 a decode step to 0.1 x schedule_conservativeness (at most 1).
SGLANG_030_INIT_NEW_TOKEN_RATIO, SGLANG_030_BASE_MIN_NEW_TOKEN_RATIO, SGLANG_030_RATIO_DECAY = 0.7, 0.1, 0.001


# SGLang's overlap scheduler (scheduler.py event_loop_overlap), on by default from 0.3.6 (--disable-overlap-schedule
# turns it off; 0.3.4-0.3.5 had it behind --enable-overlap-schedule, off by default), read in the PyPI wheels of
# 0.3.5, 0.3.6, 0.4.0, 0.4.6, 0.5.3.post3, 0.5.5.post1 and 0.5.14 (server_args.py): the scheduler builds step N + 1's
# batch and processes step N - 1's outputs while the GPU runs step N. SGLang turns it off itself for pipeline
# parallelism (its own loop, event_loop_pp) and for speculative decoding without spec v2 (sglang_speculative.py).
SGLANG_OVERLAP_SINCE = (0, 3, 6)
# What the overlap hides: the scheduler's own CPU work a step, measured by running SGLang 0.5.5.post1's Scheduler with
# a stand-in model worker (benchmarks/bench_sglang_scheduler.py, 12-01 10:36; "AMD EPYC" KVM guest, 2 vCPUs, AVX2,
# CPython 3.11.7; results/published-e2e.md): decode steps of 1, 16, 64, 256 and 512 running requests took 0.23, 0.22,
# 0.45, 1.45 and 3.59 ms (medians of 3), least squares 0.073 ms + 6.56 us a running request. Its 1,024-request cell
# (12.4 ms; repeats 8.7-18.4) lies above that line (6.8 ms): larger batches are priced low. Without the GPU's copies
# and launches, which the overlap hides too: a lower bound. The fitted CPU terms (engine_terms.json) are what the
# overlap leaves exposed on the fit runs, so where a run has no overlap but its terms were fitted with it, this work
# is added to them (`sglang_overlap_work`).
SGLANG_SCHEDULER_WORK = {"per_step_s": 0.073e-3, "per_seq_s": 6.56e-6}


def _sglang_overlap_off(ctx: Context, speculation: SGLangSpeculation | None) -> str | None:
    """Why SGLang runs this scenario without its overlap scheduler, or None when it runs with it."""
    if ctx.version < SGLANG_OVERLAP_SINCE:
        return f"SGLang {ctx.version_text} has no overlap scheduler on by default (from 0.3.6)"
    if ctx.flags.get("disable_overlap_schedule"):
        return "--disable-overlap-schedule"
    if ctx.pipeline_parallel > 1:
        return "pipeline parallelism (SGLang's own loop for it, without the overlap)"
    if speculation is not None and not speculation.keeps_overlap:
        return f"speculative decoding ({speculation.algorithm}: SGLang {ctx.version_text} turns the overlap off)"
    return None


def sglang_overlap_work(ctx: Context, speculation: SGLangSpeculation | None, overhead: dict,
                        notes: list[str]) -> dict[str, Any]:
    """The preset's CPU terms `overhead` with the scheduler's work a step added (SGLANG_SCHEDULER_WORK) where SGLang
    runs without its overlap scheduler but the terms were fitted on a release that runs with it (from 0.3.6); else
    `overhead` unchanged. Said in `notes`."""
    why = _sglang_overlap_off(ctx, speculation)
    fit = nearest_fits("sglang", ctx.version_text, ctx.fits).get("per_step_s")
    fitted_with = fit is not None and (parse_version(fit.version) or (0,)) >= SGLANG_OVERLAP_SINCE
    if why is None or not fitted_with or "per_step_s" not in overhead:
        if why is not None and ctx.flags.get("disable_overlap_schedule"):
            whose = (f"fitted on SGLang {fit.version}, which ran without it" if fit is not None
                     else "not fitted: vLLM's estimates, serial")
            notes.append(f"SGLang {ctx.version_text} --disable-overlap-schedule: its CPU terms as they are ({whose})")
        return overhead
    added = dict(overhead)
    added["per_step_s"] = overhead["per_step_s"] + SGLANG_SCHEDULER_WORK["per_step_s"]
    base_seq = overhead.get("per_seq_s", ENGINE_DEFAULTS[overhead.get("engine", "vllm-cudagraph")].per_seq_s)
    added["per_seq_s"] = base_seq + SGLANG_SCHEDULER_WORK["per_seq_s"]
    notes.append(f"SGLang {ctx.version_text} without its overlap scheduler ({why}): the scheduler's own work a step, "
                 f"{SGLANG_SCHEDULER_WORK['per_step_s'] * 1e3:.3f} ms + {SGLANG_SCHEDULER_WORK['per_seq_s'] * 1e6:.2f} "
                 f"us a running request (measured on SGLang 0.5.5.post1's scheduler, SGLANG_SCHEDULER_WORK), runs "
                 f"between the steps, added to the CPU terms fitted with the overlap on (SGLang {fit.version})")
    return added


def _derive_sglang_030(ctx: Context) -> PresetResult:
    """SGLang 0.3.x, as the 0.3.0 wheel's python/sglang/srt/server_args.py, managers/tp_worker.py and
    model_executor/model_runner.py derive it (SGLANG_030_*): mem_fraction_static 0.88 at TP 1 down to 0.79 at TP 16,
    chunked prefill of 8192 tokens on any GPU, max_running_requests = min(KV tokens // 2, max_num_reqs - 1); separate
    prefill and decode batches (enable_mixed_chunk off) and SGLang's new-token ratio for admission."""
    flags = ctx.flags
    notes: list[str] = []
    if ctx.version[:3] != (0, 3, 0):
        notes.append(f"SGLang {ctx.version_text}: 0.3.0's defaults and scheduling assumed (read in the 0.3.0 wheel)")
    if flags.get("enable_torch_compile"):
        notes.append("SGLang --enable-torch-compile: torch.compile of small decode batches not modelled (priced as "
                     "CUDA graphs without it)")
    chunk = flags.get("chunked_prefill_size", 8192)
    values = _sglang_batches(ctx, flags, chunk, notes)  # (no data-parallel attention before 0.5.3)
    init = SGLANG_030_INIT_NEW_TOKEN_RATIO
    floor = min(SGLANG_030_BASE_MIN_NEW_TOKEN_RATIO * flags.get("schedule_conservativeness", 1.0), 1.0, init)
    values["scheduler.new_token_ratio"] = {"init": init, "min": floor,
                                           "decay_steps": max(round((init - floor) / SGLANG_030_RATIO_DECAY), 1)}
    fraction = flags.get("mem_fraction_static")
    if fraction is None:
        fraction = next(f for tp, f in SGLANG_030_MEM_FRACTION_BY_TP if ctx.tensor_parallel >= tp)
    values["kv_cache.gpu_memory_utilization"] = fraction
    values.update(_sglang_memory_rule(ctx, notes))
    running = flags.get("max_running_requests")
    slots = _sglang_request_slots(ctx, fraction, values["scheduler.max_num_batched_tokens"], SGLANG_030_MAX_NUM_REQS,
                                  notes)
    capped = _sglang_token_cap(ctx, slots[1], notes)
    if capped is not None:
        values["kv_cache.capacity_tokens"] = capped
        slots = (_sglang_pool_slots(ctx, capped, SGLANG_030_MAX_NUM_REQS), capped)  # 0.3.0 sizes it after the cap
    if running is None:
        running = slots[0] - 1 if slots[1] is None else min(slots[1] // 2, slots[0] - 1)
    values["scheduler.max_num_seqs"] = running
    values.update(preset_terms(ctx, "sglang", notes))
    values["cost_model.overhead"] = sglang_overlap_work(ctx, None, values["cost_model.overhead"], notes)
    graph_bs = min(_sglang_given_graph_bs(flags) or SGLANG_030_GRAPH_MAX_BS, SGLANG_030_GRAPH_MAX_BS)  # its list's end
    values["cost_model.overhead"].update(_sglang_graphs(ctx, graph_bs, False, notes))
    values.update(custom_all_reduce(ctx, "SGLang"))
    if ctx.model is not None and ctx.model.hybrid_window:  # no hybrid SWA memory before 0.5
        values["kv_cache.window_memory"] = "every_token"
        notes.append(f"SGLang {ctx.version_text}: {ctx.model.name}'s sliding layers keep every token's KV")
    return PresetResult(values, _sglang_budget_flag(flags), notes)


def _sglang_batches(ctx: Context, flags: dict, chunk: int, notes: list[str]) -> dict[str, Any]:
    """What every SGLang version here shares: token-paged KV, separate prefill and decode batches unless
    --enable-mixed-chunk, the chunk (-1 or less: a prompt is one prefill under max_prefill_tokens) and the radix cache
    (SGLang's prefix cache: on unless --disable-radix-cache). Each version sets its own new-token ratio and request
    limit."""
    values: dict[str, Any] = {"scheduler.batching": "continuous", "kv_cache.layout": "paged",
                              "kv_cache.block_size": 1,
                              "scheduler.mixed_batches": bool(flags.get("enable_mixed_chunk", False))}
    if chunk <= 0:  # chunking disabled: a prompt is one prefill, under max_prefill_tokens
        values["scheduler.chunked_prefill"] = False
        values["scheduler.max_num_batched_tokens"] = flags.get("max_prefill_tokens", 16384)
    else:
        values["scheduler.chunked_prefill"] = True
        values["scheduler.max_num_batched_tokens"] = chunk
    if flags.get("disable_radix_cache"):
        if flags.get("enable_prefix_caching"):
            raise ConfigError("engine.disable_radix_cache: true contradicts engine.enable_prefix_caching: true (the "
                              "radix cache is SGLang's prefix cache); allowed: one of the two")
        values["kv_cache.enable_prefix_caching"] = False
    else:
        values["kv_cache.enable_prefix_caching"] = caches_prefixes(ctx, notes, f"SGLang {ctx.version_text}")
    _sglang_schedule_policy(ctx, flags, values["kv_cache.enable_prefix_caching"], notes)
    return values


def _sglang_budget_flag(flags: dict) -> dict[str, str]:
    """The flag that set the step's token budget (`_sglang_batches`), where one did: --chunked-prefill-size, or
    --max-prefill-tokens where chunking is off."""
    chunk = flags.get("chunked_prefill_size")
    if chunk is None:
        return {}  # the default chunk (max_prefill_tokens then sets nothing here)
    if chunk > 0:
        return {"scheduler.max_num_batched_tokens": "chunked_prefill_size"}
    return {"scheduler.max_num_batched_tokens": "max_prefill_tokens"} if "max_prefill_tokens" in flags else {}


# --schedule-policy's default (server_args.py ServerArgs.schedule_policy, read in the PyPI wheels of 0.3.0, 0.3.4,
# 0.3.6, 0.4.0, every release 0.4.3-0.4.5.post3, posts too, 0.4.6, 0.5.3, 0.5.5.post1 and 0.5.10): "lpm" to
# 0.4.3.post2, "fcfs" from 0.4.3.post3. LPM (managers/policy_scheduler.py in 0.3.0, schedule_policy.py later) sorts the
# waiting requests by the length of their cached prefix, longest first (a stable sort: arrival order among equals),
# and from some release falls back to FCFS above 128 waiting (0.5.5.post1's _determine_active_policy); with the radix
# cache off both give FCFS. ServeSim admits in arrival order: the same as LPM where no waiting prompt has a cached
# prefix.
SGLANG_FCFS_DEFAULT_SINCE = "0.4.3.post3"


def _sglang_schedule_policy(ctx: Context, flags: dict, prefix_caching: bool, notes: list[str]) -> None:
    """Note where SGLang's schedule policy is LPM over a prefix cache, whose order ServeSim approximates by arrival
    (SGLANG_FCFS_DEFAULT_SINCE)."""
    default = "lpm" if released_before(ctx.version, ctx.version_text, SGLANG_FCFS_DEFAULT_SINCE) else "fcfs"
    policy = flags.get("schedule_policy", default)
    if policy == "lpm" and prefix_caching:
        whose = "its default" if "schedule_policy" not in flags else "--schedule-policy"
        notes.append(f"SGLang {ctx.version_text}: LPM ({whose}) admits the waiting requests with the longest cached "
                     "prefix first; ServeSim admits them in arrival order, the same where none has a cached prefix")


# SGLang sizes its KV pool as the memory free once the weights are loaded, less (1 - mem_fraction_static) of the
# GPU's (model_runner.py profile_max_num_token: rest_memory = available_gpu_memory - total_gpu_memory x (1 -
# mem_fraction_static), read in the 0.3.0, 0.5.3.post3 and, as kv_cache_configurator.py _profile_available_bytes,
# 0.5.23 wheels): no forward pass is profiled, and the activations run in the memory mem_fraction_static leaves out
# (its reserved memory: 1.5 x the chunk and the CUDA graphs' batch, `derive_sglang`).
SGLANG_PROFILES_ACTIVATIONS = False


def _sglang_profiles_activations(ctx: Context) -> bool:
    """`kv_cache.profile_activations` as a scenario sets it, else SGLang's (SGLANG_PROFILES_ACTIVATIONS)."""
    given = get_key(ctx.raw, "kv_cache.profile_activations")
    return SGLANG_PROFILES_ACTIVATIONS if given is None else bool(given)


def _sglang_memory_rule(ctx: Context, notes: list[str]) -> dict[str, Any]:
    """The preset's value of kv_cache.profile_activations and its note (none where the scenario profiles them)."""
    if not _sglang_profiles_activations(ctx):
        notes.append(f"SGLang {ctx.version_text}: its KV pool is mem_fraction_static of the GPU less the weights, the "
                     "activations left to the rest (model_runner.py profile_max_num_token; "
                     "kv_cache.profile_activations: false)")
    return {"kv_cache.profile_activations": SGLANG_PROFILES_ACTIVATIONS}


def _sglang_request_slots(ctx: Context, fraction: float, token_budget: int, cap: int,
                          notes: list[str], window: dict | None = None) -> tuple[int, int | None]:
    """(max_num_reqs, KV tokens) as model_runner.py sizes its request pool: min(max(KV tokens / context_len x 512,
    2048), cap), the cap 5120 in 0.3.0 and 4096 in 0.5.x; (cap, None) when the model is not resolved (said).
    `window`: where a hybrid model's sliding layers are kept (`_sglang_window_memory`)."""
    kv_tokens = preset_kv_tokens(ctx, fraction, token_budget, cap, window, _sglang_profiles_activations(ctx))
    if kv_tokens is None or ctx.max_model_len() is None:
        notes.append(f"SGLang max_num_reqs: {cap} (its upper clip) taken: the model was not resolved")
        return cap, None
    return _sglang_pool_slots(ctx, kv_tokens, cap), kv_tokens


def _sglang_pool_slots(ctx: Context, kv_tokens: int, cap: int) -> int:
    """model_runner.py's max_num_reqs for `kv_tokens`: min(max(kv_tokens / context_len x 512, 2048), cap)."""
    context_len = ctx.max_model_len()
    return cap if context_len is None else min(max(int(kv_tokens / context_len * 512), 2048), cap)


# SGLang 0.4-0.5.x, read in the PyPI wheels of every release from 0.5.3 to 0.5.23 (python/sglang/srt/server_args.py
# _handle_gpu_memory_settings; from 0.5.19 arg_groups/memory_hook.py handle_gpu_memory_settings). By the GPU's
# nvidia-smi memory (MiB), in order: (below this many MiB, chunked_prefill_size, cuda-graph max batch at TP < 4, at
# TP >= 4). The 20-35 GiB tier is 0.5.20's (before: 2048 tokens, 24 / 80).
SGLANG_NEWEST = (0, 5, 23)
SGLANG_MEMORY_TIERS = ((20 * 1024, 2048, 8, 8), (35 * 1024, 4096, 48, 160), (60 * 1024, 4096, 32, 160),
                       (160 * 1024, 8192, 256, 512), (math.inf, 16384, 512, 512))
SGLANG_SMALL_TIER_BEFORE_0_5_20 = (2048, 24, 80)
# From 0.5.10rc0 a prefill CUDA graph is captured by default ("piecewise"; "breakable" on CUDA from 0.5.15): its
# memory, 8 MiB per captured size (1.5 GiB for an MLA model), is reserved too. Off with pipeline parallelism (every
# version), speculative decoding (to 0.5.13), and for MLA models in 0.5.15-0.5.17.
SGLANG_PREFILL_GRAPH_SINCE = (0, 5, 10)
SGLANG_PREFILL_GRAPH_MIB_PER_SIZE, SGLANG_PREFILL_GRAPH_MLA_MIB = 8, 1536

# SGLang's CUDA graphs and its two options for them, read in the PyPI wheels of 0.3.0, 0.3.4-0.4.10.post2 and every
# release 0.5.1-0.5.23. A decode batch above the largest captured one runs without a graph (cuda_graph_runner.py
# `can_run`), and so does every step with prompt tokens before the prefill graphs (SGLANG_PREFILL_GRAPH_SINCE): the
# eager launch term (sim/cost/overhead.py, an estimate). 0.3.0 captures decode batches up to 160 (model_runner.py
# init_cuda_graphs); from 0.3.5 --cuda-graph-max-bs cuts that list (SGLANG_TP_FRACTIONS' comment for 0.4.0-0.5.3rc0);
# from 0.5.3 it sets the largest (the memory tier's by default), an alias of
# --cuda-graph-max-bs-decode from 0.5.14 and gone in 0.5.20 (its parser then reads it as an ambiguous prefix of
# --cuda-graph-max-bs-decode and --cuda-graph-max-bs-prefill). --disable-cuda-graph turns off the decode graphs; the
# prefill graphs too from 0.5.14 (0.5.10-0.5.13's _handle_piecewise_cuda_graph does not read it). The memory rule
# still reserves the decode graphs' 2 MiB a batch slot with it up to 0.5.14 and the prefill graphs' to 0.5.13.
SGLANG_030_GRAPH_MAX_BS = 160
SGLANG_DISABLE_GRAPH_ALL_PHASES_SINCE, SGLANG_DISABLE_GRAPH_FREES_DECODE_SINCE = (0, 5, 14), (0, 5, 15)


# SGLang keeps a hybrid model's sliding layers in a pool of their own (SWATokenToKVPoolAllocator) holding
# --swa-full-tokens-ratio (0.8) tokens per token of the full-attention pool, both sized out of the same memory
# (model_runner set_num_token_hybrid), unless disable_hybrid_swa_memory is set, which server_args.py sets for Gemma
# 2/3 in every release here, and for gpt-oss in 0.5.3-0.5.7 (0.5.8-0.5.9: with the trtllm_mha attention backend, the
# default on SM100, or speculative decoding; read in the PyPI sdists and wheels of 0.5.3.post3 to 0.5.23).
SGLANG_SWA_GEMMA = ("gemma2", "gemma3_text")
SGLANG_SWA_GPT_OSS_SINCE, SGLANG_SWA_GPT_OSS_SM100_SINCE = (0, 5, 8), (0, 5, 10)


def _sglang_window_memory(ctx: Context, notes: list[str]) -> dict[str, Any]:
    """Where SGLang keeps a hybrid model's sliding layers' KV: its own SWA pool, or every token of them in the one pool
    where the version turns the hybrid SWA memory off for the architecture (or --disable-hybrid-swa-memory)."""
    model, flags = ctx.model, ctx.flags
    values: dict[str, Any] = {"kv_cache.window_memory": "own_pool"}
    if model is None or not model.hybrid_window:
        return values
    why = None
    sm100 = ctx.gpu.compute_capability is not None and ctx.gpu.compute_capability[0] == 10
    if flags.get("disable_hybrid_swa_memory"):
        why = "--disable-hybrid-swa-memory"
    elif model.model_type in SGLANG_SWA_GEMMA:
        why = f"SGLang {ctx.version_text} turns it off for Gemma 2/3"
    elif model.model_type == "gpt_oss" and (
            ctx.version < SGLANG_SWA_GPT_OSS_SINCE
            or (ctx.version < SGLANG_SWA_GPT_OSS_SM100_SINCE and (sm100 or ctx.raw.get("speculation") is not None))):
        why = f"SGLang {ctx.version_text} turns it off for gpt-oss" + (
            "" if ctx.version < SGLANG_SWA_GPT_OSS_SINCE else " with trtllm_mha attention or speculative decoding")
    if why:
        values["kv_cache.window_memory"] = "every_token"
        notes.append(f"SGLang hybrid SWA memory off ({why}): {model.name}'s sliding layers keep every token's KV")
    return values


def _sglang_prefill_graph_sizes(max_tokens: int) -> int:
    """How many prefill CUDA graphs SGLang captures up to `max_tokens` (generate_prefill_cuda_graph_batch_sizes,
    0.5.9-0.5.23: 4-32 by 4, 48-256 by 16, 288-512 by 32, 576-1024 by 64, 1280-4096 by 256, then by 512)."""
    sizes = (range(4, 33, 4), range(48, 257, 16), range(288, 513, 32), range(576, 1025, 64), range(1280, 4097, 256),
             range(4608, max_tokens + 1, 512))
    # counted, not listed: a chunk of any size costs nothing (a list of 10^12 tokens' sizes ran out of memory)
    return sum(len(range(r.start, min(r.stop, max_tokens + 1), r.step)) for r in sizes)


def _sglang_prefill_graph_mib(ctx: Context, chunk: int) -> tuple[float, str | None]:
    """The memory SGLang reserves for its prefill CUDA graphs (MiB), and why none where it captures none."""
    v, mla = ctx.version, ctx.model is not None and ctx.model.attention == "mla"
    if v < SGLANG_PREFILL_GRAPH_SINCE:
        return 0.0, None
    if ctx.pipeline_parallel > 1:
        return 0.0, "off with pipeline parallelism"
    if ctx.flags.get("disable_cuda_graph") and v >= SGLANG_DISABLE_GRAPH_ALL_PHASES_SINCE:
        return 0.0, f"off with --disable-cuda-graph from {dotted_version(SGLANG_DISABLE_GRAPH_ALL_PHASES_SINCE)}"
    if ctx.raw.get("speculation") is not None and v < (0, 5, 14):
        return 0.0, "off with speculative decoding before 0.5.14"
    if get_key(ctx.raw, "kv_cache.weights_offload_bytes") and v < SGLANG_OFFLOAD_KEEPS_PREFILL_GRAPHS_SINCE:
        return 0.0, "off with weights in host memory before 0.5.15: --cpu-offload-gb"
    if mla and (0, 5, 15) <= v < (0, 5, 18):
        return 0.0, "off for MLA models in 0.5.15-0.5.17"
    if mla:
        return SGLANG_PREFILL_GRAPH_MLA_MIB, None
    return _sglang_prefill_graph_sizes(chunk) * SGLANG_PREFILL_GRAPH_MIB_PER_SIZE, None


def _sglang_memory_tier(ctx: Context, gpu_mib: float) -> tuple[int, int]:
    """(chunked_prefill_size, cuda-graph max batch) for the GPU's memory (nvidia-smi MiB) and TP."""
    below, chunk, small_tp, large_tp = next(t for t in SGLANG_MEMORY_TIERS if gpu_mib < t[0])
    if below == 35 * 1024 and ctx.version < (0, 5, 20):
        chunk, small_tp, large_tp = SGLANG_SMALL_TIER_BEFORE_0_5_20
    return chunk, small_tp if ctx.tensor_parallel < 4 else large_tp


# SGLang before 0.5.3 sized its memory by other rules (server_args.py ServerArgs.__post_init__; the decode graphs in
# model_executor/cuda_graph_runner.py get_batch_sizes_to_capture), read in every PyPI wheel 0.4.0-0.4.10.post2 (post
# releases too), 0.5.1, 0.5.2rc2, 0.5.2 and 0.5.3rc0; gpu_mem is nvidia-smi's MiB:
# - to 0.4.7: mem_fraction_static by TP (SGLANG_TP_FRACTIONS); from 0.4.5.post3 a GPU above 81,920 MiB takes
#   (memory - 13 GiB) / memory instead; from 0.4.6.post2 by TP x PP, 0.88 above 81,920 MiB, then above 96 GiB
#   min(f + 48 GiB x (1 - f) / memory, (memory - 18 GiB) / memory), and in 0.4.7 0.79 above 180,000 MiB; chunked
#   prefill 2048 tokens below 25,000 MiB, else 8192 (0.4.7: 16384 above 180,000);
# - 0.4.7.post1 to 0.5.3rc0: (memory - reserved) / memory to 3 places, reserved by GPU memory and TP x PP
#   (SGLANG_RESERVED_TIERS); chunked prefill 2048 below 35 GiB, 8192 below 160 GiB, else 16384;
# - the decode graphs: batches up to 160, 256 on a larger GPU (above 81,920 MiB from 0.4.5.post3, 96 GiB from
#   0.4.6.post2, 90 GiB from 0.4.7.post1), 512 above 180,000 MiB (0.4.7) or 160,000 (0.4.7.post1+); on a small GPU
#   (the chunk's 2048 tier) cuda_graph_max_bs 8, 80 at TP >= 4 (from 0.4.0.post1); a given --cuda-graph-max-bs cuts
#   that list, never extends it.
SGLANG_TP_FRACTIONS = ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88))
SGLANG_RESERVED_TIERS = ((20 * 1024, 2.8, 0.1), (35 * 1024, 2.8, 0.1), (90 * 1024, 9.5, 0.5), (100 * 1024, 12, 0.5),
                         (160 * 1024, 12, 0.5), (math.inf, 32, 0.0))  # (below MiB, GiB, + GiB per GPU of TP x PP)


def _sglang_before_053(ctx: Context, gpu_mib: float, given_graph_bs: int | None,
                       listed: int | None = None) -> tuple[float, int, int]:
    """(mem_fraction_static, chunked_prefill_size, the largest decode graph) by SGLang 0.4.0-0.5.3rc0's own rules
    (the comment above SGLANG_TP_FRACTIONS); `listed`: the largest batch of a given --cuda-graph-bs, in place of the
    default list (SGLANG_GRAPH_LIST)."""
    def before(bound) -> bool:
        return released_before(ctx.version, ctx.version_text, bound)

    parallel = ctx.tensor_parallel * ctx.pipeline_parallel
    def by_size(size: int) -> float:
        return next(f for least, f in SGLANG_TP_FRACTIONS if size >= least)

    if before("0.4.7.post1"):
        small = gpu_mib < 25_000
        chunk = 16384 if not before((0, 4, 7)) and gpu_mib > 180_000 else 2048 if small else 8192
        if before("0.4.5.post3"):
            fraction = by_size(ctx.tensor_parallel)
        elif before("0.4.6.post2"):
            fraction = by_size(ctx.tensor_parallel) if gpu_mib <= 81920 else (gpu_mib - 13 * 1024) / gpu_mib
        else:
            fraction = by_size(parallel) if gpu_mib <= 81920 else 0.88
            if not before((0, 4, 7)) and gpu_mib > 180_000:
                fraction = 0.79
            elif gpu_mib > 96 * 1024:
                fraction = min(fraction + 48 * 1024 * (1 - fraction) / gpu_mib, (gpu_mib - 18 * 1024) / gpu_mib)
        larger = (256 if not before("0.4.5.post3") and gpu_mib > (81920 if before("0.4.6.post2") else 96 * 1024)
                  else 160)
        graphs = 512 if not before((0, 4, 7)) and gpu_mib > 180_000 else larger
    else:
        small = gpu_mib < 35 * 1024
        _, gib, per_gpu = next(t for t in SGLANG_RESERVED_TIERS if gpu_mib < t[0])
        fraction = round((gpu_mib - (gib + parallel * per_gpu) * 1024) / gpu_mib, 3)
        chunk = 2048 if small else 8192 if gpu_mib < 160 * 1024 else 16384
        graphs = 512 if gpu_mib > 160_000 else 256 if gpu_mib > 90 * 1024 else 160
    # the captured list (the default's largest, or --cuda-graph-bs's) cut at cuda_graph_max_bs: given, or its default,
    # 8 (80 at TP >= 4) on a small GPU and 160 on a large one to 0.4.5.post2, none after
    cut = given_graph_bs if given_graph_bs is not None else (
        (80 if ctx.tensor_parallel >= 4 and not before("0.4.0.post1") else 8) if small
        else 160 if before("0.4.5.post3") else None)
    captured = graphs if listed is None else listed
    return fraction, chunk, captured if cut is None else min(captured, cut)


# --max-total-tokens caps SGLang's KV pool at that many tokens and never raises it (model_runner.py init_memory_pool,
# from 0.5.10 _resolve_token_capacity / _apply_token_constraints: min(profiled, given), with a warning where the given
# is larger; page-aligned), read in the wheels of 0.3.0, 0.4.0, 0.4.6-0.5.23. Its request pool (max_num_reqs) is sized
# from the capped tokens in 0.3.0, 0.4.0 and from 0.5.10, from the profiled ones in 0.4.6-0.5.9 (0.4.1-0.4.5 not read:
# taken as 0.4.6); the prefill CUDA graphs stop at it (0.5.10-0.5.23: min(chunked_prefill_size, max_total_tokens)).
SGLANG_REQS_FROM_PROFILED = ((0, 4, 1), (0, 5, 10))


def _sglang_token_cap(ctx: Context, kv_tokens: int | None, notes: list[str]) -> int | None:
    """The KV pool's tokens after --max-total-tokens (`kv_cache.capacity_tokens`), or None without it."""
    given = ctx.flags.get("max_total_tokens")
    if given is None:
        return None
    if kv_tokens is None:
        notes.append(f"SGLang --max-total-tokens {given}: taken as the KV pool's size (the memory it would profile "
                     "is not known here: the model was not resolved)")
        return given
    page = ctx.flags.get("page_size", 1)
    capped = min(kv_tokens, given) // page * page
    if given > kv_tokens:
        notes.append(f"SGLang --max-total-tokens {given}: above the {kv_tokens:,} KV tokens the memory holds, so the "
                     "profiled value is used, as SGLang does (with a warning)")
    return capped


def _sglang_reqs_from_capped(ctx: Context) -> bool:
    """Whether SGLang sizes its request pool from the KV tokens after --max-total-tokens (SGLANG_REQS_FROM_PROFILED)."""
    first, last = SGLANG_REQS_FROM_PROFILED
    return not first <= ctx.version < last


# --cuda-graph-bs (type int, nargs '+'; python/sglang/srt/server_args.py, read in every PyPI wheel 0.3.0-0.5.23): from
# 0.4.1.post5; the decode batches captured in place of the default list (model_executor/cuda_graph_runner.py, read in
# 0.4.1.post5, 0.4.6, 0.5.2, 0.5.3rc0, 0.5.3, 0.5.5.post1, 0.5.13), each no larger than the request pool, and to
# 0.5.3rc0 no larger than cuda_graph_max_bs (given, or its default: 8, or 80 at TP >= 4, on a GPU under 25,000 MiB
# (35 GiB from 0.4.7.post1), and 160 on any other to 0.4.5.post2, none after); 0.5.3-0.5.13 set cuda_graph_max_bs
# to the list's largest (the memory rule reserves for it, a given --cuda-graph-max-bs replaced); from 0.5.14 a
# deprecated alias of --cuda-graph-bs-decode in a new cuda_graph_config (not read: refused there); gone in 0.5.20.
# The batches between the captured ones are not modelled: a batch is priced at its own size, as the default list's.
SGLANG_GRAPH_LIST = ("0.4.1.post5", (0, 5, 14), (0, 5, 20))  # (first, first not read, first refused by the parser)


def _graph_batches(value: list) -> list[int]:
    """--cuda-graph-bs as given: one or more whole numbers >= 1, refused in one line otherwise."""
    if not value or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value):
        raise ConfigError(f"engine.cuda_graph_bs: {value!r} is not allowed; allowed: a list of whole numbers >= 1")
    return value


def _sglang_graph_list(ctx: Context) -> int | None:
    """The largest batch of a given --cuda-graph-bs (None without one), where SGLANG_GRAPH_LIST reads it; from 0.5.14
    refused in one line."""
    batches = ctx.flags.get("cuda_graph_bs")
    if batches is None:
        return None
    if not released_before(ctx.version, ctx.version_text, SGLANG_GRAPH_LIST[1]):
        raise ConfigError(f"engine.cuda_graph_bs: not modelled for SGLang {ctx.version_text} (from 0.5.14 an alias of "
                          "--cuda-graph-bs-decode in its cuda_graph_config, whose rules were not read); allowed: "
                          "--cuda-graph-max-bs-decode, or a version before 0.5.14")
    return max(batches)


# The context SGLang derives (python/sglang/srt/hf_transformers_utils.py get_context_length, utils/hf_transformers/
# common.py from 0.5.11; the same in every PyPI wheel 0.3.0-0.5.23): max_position_embeddings x the RoPE scaling's
# factor (1 without one), unless the scaling has original_max_position_embeddings (YaRN's) or is llama3's. A longer
# --context-length is refused from 0.3.5 (configs/model_config.py: "User-specified context_length ... is greater than
# the derived context_length", unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN, not modelled) and taken as given
# before (0.3.0-0.3.4's model_config.py). The config as served: --json-model-override-args (from 0.3.1), the keys that
# change only the context (`CONTEXT_OVERRIDE_KEYS`).
SGLANG_CONTEXT_CHECKED_SINCE = (0, 3, 5)


def sglang_context(ctx: Context) -> tuple[int, str, bool]:
    """The context SGLang derives from the model's config as served (the comment above): (tokens, how, whether a
    longer --context-length is refused)."""
    positions, entries = served_config(ctx, ctx.flags.get("json_model_override_args") or {})
    factor = 1.0
    if entries:  # (get_context_length reads config.rope_scaling: one mapping, the first entry here)
        entry = entries[0]
        scaled = entry["original_max_position_embeddings"] is None and entry["rope_type"] != "llama3"
        factor = entry["factor"] if scaled and entry["factor"] is not None else 1.0
    how = f"max_position_embeddings {positions:,}" + (f" x its RoPE factor {factor:g}" if factor != 1 else "")
    return int(factor * positions), how, ctx.version >= SGLANG_CONTEXT_CHECKED_SINCE


def _sglang_given_graph_bs(flags: dict) -> int | None:
    """The decode CUDA graphs' largest batch a command gave (--cuda-graph-max-bs, --cuda-graph-max-bs-decode: one
    value, set by either), or None."""
    old, new = flags.get("cuda_graph_max_bs"), flags.get("cuda_graph_max_bs_decode")
    if old is not None and new is not None and old != new:
        raise ConfigError(f"engine.cuda_graph_max_bs: {old} contradicts engine.cuda_graph_max_bs_decode {new} (one "
                          "setting, its old and new spelling); allowed: give one of them, or the same value")
    return new if new is not None else old


def _sglang_graphs(ctx: Context, graph_bs: int, prefill_graphs: bool, notes: list[str]) -> dict[str, Any]:
    """The overhead terms for SGLang's CUDA graphs (as read: the comment above SGLANG_030_GRAPH_MAX_BS): the eager
    launch term (an estimate) for the steps that run without one: decode batches above `graph_bs`, and steps with
    prompt tokens unless `prefill_graphs`."""
    disabled = bool(ctx.flags.get("disable_cuda_graph"))
    if disabled:
        steps = "decode and prefill" if ctx.version >= SGLANG_DISABLE_GRAPH_ALL_PHASES_SINCE else "decode"
        kept = " (its prefill CUDA graphs stay, as the version keeps them)" if prefill_graphs else ""
        notes.append(f"SGLang {ctx.version_text} --disable-cuda-graph: its {steps} steps run without CUDA "
                     f"graphs{kept}: the eager launch term (cost_model.overhead.launch_per_layer_s, an estimate)")
    return graph_terms(0 if disabled else graph_bs, prefill_graphs)


def _sglang_given_running_cap(version: tuple[int, ...], slots: int, kv_tokens: int | None) -> int | None:
    """The most running requests SGLang allows when --max-running-requests is given (model_runner's
    _resolve_max_num_reqs): none to 0.5.9, the request pool's default size in 0.5.10-0.5.13, half the KV tokens from
    0.5.14; None where it sets none (or the KV tokens are not known)."""
    if (0, 5, 10) <= version < (0, 5, 14):
        return slots
    if version >= (0, 5, 14) and kv_tokens is not None:
        return kv_tokens // 2
    return None


# --enable-dp-attention, read in the PyPI releases 0.5.3 to 0.5.13 (python/sglang/srt/server_args.py): ServerArgs
# runs _handle_gpu_memory_settings, whose memory rule reserves cuda_graph_max_bs x dp_size x 3 MiB more for it (and x
# 1.5 more above a graph batch of 300), before _handle_data_parallelism, which turns it off when dp_size is 1 (no
# --dp given: its default). So `--tp N --enable-dp-attention` alone runs tensor-parallel attention with that much
# less KV memory. dp_size > 1 runs attention data-parallel over the TP group (sglang_dp_attention.py); 0.5.14 and
# later resolve the flags another way (arg_groups), not read here.
SGLANG_DP_ATTENTION_READ = ((0, 5, 3), (0, 5, 13))


def _sglang_dp_attention_mib(ctx: Context, graph_bs: int, notes: list[str]) -> float:
    """The MiB SGLang's memory rule reserves for --enable-dp-attention (above) at a decode graph batch of `graph_bs`,
    0 without the flag; ConfigError where the release was not read."""
    if not ctx.flags.get("enable_dp_attention", False):
        return 0.0
    first, last = SGLANG_DP_ATTENTION_READ
    if not first <= ctx.version[:3] <= last:
        raise ConfigError(f"engine.enable_dp_attention: true is not modelled for SGLang {ctx.version_text}; allowed: "
                          f"SGLang {dotted_version(first)} to {dotted_version(last)}, where it was read")
    dp = sglang_dp_attention_ranks(ctx)
    if dp == 1:
        reserved = "" if "mem_fraction_static" in ctx.flags else (
            ", after its memory rule reserved 3 MiB per decode graph batch slot for it (4.5 above 300): less KV")
        notes.append(f"SGLang {ctx.version_text}: --enable-dp-attention without --dp (dp_size 1) is turned off "
                     f"(server_args.py _handle_data_parallelism), attention stays tensor-parallel{reserved}")
    return (graph_bs * 3 + (graph_bs * 1.5 if graph_bs > 300 else 0.0)) * dp


# --dp-size D without --enable-dp-attention, read in the PyPI wheels of 0.4.0, 0.4.6, 0.5.3, 0.5.9 and 0.5.14
# (python/sglang/srt/managers/data_parallel_controller.py launch_dp_schedulers): D schedulers, each a TP group on GPUs
# of its own (base_gpu_id += tp x pp), sharing only the main process's TokenizerManager (and the detokenizer), which
# deals the requests out in turn (round_robin_scheduler; load_balance_method's default, "auto" resolving to it outside
# PD disaggregation from 0.5.9). server_args.py derives each worker's memory, chunk and graphs as with one: dp_size
# enters them only with --enable-dp-attention (_handle_gpu_memory_settings, _handle_data_parallelism).
SGLANG_DATA_PARALLEL_SINCE = (0, 4, 0)
SGLANG_LOAD_BALANCE = ("round_robin", "auto")  # the methods modelled: the default (auto from 0.5.9, read there)


def _sglang_data_parallel(ctx: Context, notes: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """(values, the flags that set them) for SGLang's data-parallel workers: `hardware.num_replicas` D (the flag's own
    target), dealt round robin, one front-end for them all (`frontend.replicas_per_server`)."""
    dp = ctx.flags.get("dp_size", 1)
    method = ctx.flags.get("load_balance_method")
    if dp == 1:
        if method is not None:
            notes.append(f"SGLang --load-balance-method {method}: one data-parallel worker, nothing to balance")
        return {}, {}
    notes.append(f"SGLang {ctx.version_text} --dp-size {dp}: {dp} independent workers of {ctx.tensor_parallel} GPU(s) "
                 f"each (hardware.num_replicas {dp}), requests dealt to them in turn (load_balance_method round_robin) "
                 "by one TokenizerManager: one front-end for all of them (frontend.replicas_per_server)")
    return ({"hardware.router": "round_robin", "frontend.replicas_per_server": dp},
            {"frontend.replicas_per_server": "dp_size"})


# SGLang's --attention-backend names a measured table's kernel may have (AIConfigurator's kernel_source for SGLang's
# attention, `sim.cost.measured.attention_kernel`: fa3 on H100 and H200, trtllm_mha on B200, flashinfer on L40S; the
# A100's flash_attention is none of them).
SGLANG_ATTENTION_BACKENDS = ("fa3", "trtllm_mha", "flashinfer", "triton")
# the options that name an attention kernel: for both phases, and each phase's own (server_args.py from 0.4.9.post5:
# a prefill backend equal to the decode one is the attention backend; otherwise each phase runs its own, the other
# phase the attention backend's)
SGLANG_ATTENTION_FLAGS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend")
SGLANG_PHASE_BACKENDS_SINCE = "0.4.9.post5"


def _sglang_attention_backend(ctx: Context) -> str | None:
    """--attention-backend, and --prefill-/--decode-attention-backend (each phase's own kernel), accepted where they
    name the kernel the SGLang tables of the GPU measured, so that the measured model prices the kernel asked for (a
    note says so); refused elsewhere in one line: no other SGLang attention kernel is measured (the roofline's
    attention is no particular kernel). None given: the release's default kernel, noted where the tables measured
    another (`_sglang_default_attention_note`)."""
    given = [(name, ctx.flags[name]) for name in SGLANG_ATTENTION_FLAGS if ctx.flags.get(name) is not None]
    if not given:
        return _sglang_default_attention_note(ctx)
    from sim.cost.measured import attention_kernel
    measured = attention_kernel(ctx.gpu.name, "sglang")
    measured = measured if measured in SGLANG_ATTENTION_BACKENDS else None
    for name, backend in given:
        if backend != measured:
            why = (f"the SGLang tables of {ctx.gpu.name} measured {measured} attention" if measured
                   else f"no SGLang attention kernel is measured on {ctx.gpu.name}")
            allowed = f"{measured}, or leave it out" if measured else "leave it out"
            raise ConfigError(f"engine.{name}: {backend!r} is not modelled ({why}); allowed: {allowed}")
    options = ", ".join(f"--{name.replace('_', '-')} {backend}" for name, backend in given)
    return f"SGLang {ctx.version_text}: {options}, the kernel the SGLang tables of {ctx.gpu.name} measured"


# The attention kernel a release picks when none is given, read in the sdists of 0.3.0, 0.4.0, 0.4.3.post4, 0.4.4.post3,
# 0.4.4.post4, 0.4.5, 0.4.5.post1, 0.4.5.post3, 0.4.6, 0.4.6.post2, 0.4.6.post4, 0.4.6.post5, 0.4.7, 0.4.8, 0.4.9 and
# 0.4.10.post2 (server_args.py, model_executor/model_runner.py): FlashInfer (0.3.x: unless --disable-flashinfer) for
# a model with multi-head attention, from 0.4.0 Triton for an MLA one (FlashInfer's with --enable-flashinfer-mla, which
# the preset does not read; 0.3.x runs MLA only with --enable-mla: not read here), on every GPU; from 0.4.5.post1
# (model_specific_adjustment) FA3 on Hopper for both kinds (an MHA model where is_fa3_default_architecture has it,
# as for the Llama and Qwen families).
SGLANG_FA3_DEFAULT_SINCE = "0.4.5.post1"


def _sglang_default_attention_note(ctx: Context) -> str | None:
    """Where a release before 0.4.5.post1, given no attention flag (`_sglang_attention_backend` asks), runs its
    default attention kernel (`SGLANG_FA3_DEFAULT_SINCE`'s comment) and the SGLang tables of the GPU measured
    another, the note that says so: where those tables price the run, its attention is another kernel's. None for
    later releases, or where the kernels agree."""
    if not released_before(ctx.version, ctx.version_text, SGLANG_FA3_DEFAULT_SINCE):
        return None
    from sim.cost.measured import attention_kernel
    mla = ctx.model is not None and ctx.model.attention == "mla"
    if mla and ctx.version < (0, 4):
        return None
    default = "triton" if mla else "flashinfer"
    measured = attention_kernel(ctx.gpu.name, "sglang", mla=mla)
    if measured is None or measured == default:
        return None
    kind = "MLA attention" if mla else "attention"
    return (f"SGLang {ctx.version_text} runs {default} {kind} by default (fa3 on Hopper from 0.4.5.post1; "
            f"model_executor/model_runner.py); the SGLang tables of {ctx.gpu.name} measured {measured}, which price "
            "its attention where the measured model prices the run: this release's kernel is not measured there")


# fp8 weights on a GPU without fp8 tensor cores (sm_80/86), read in the sdists of 0.3.0, 0.3.6, 0.4.0-0.4.3, 0.4.6,
# 0.4.8, 0.4.10, 0.5.0rc0-0.5.3, 0.5.5.post1, 0.5.10 and the 0.5.23 wheel (srt/layers/quantization/): to 0.4.0 "fp8" is
# vLLM's Fp8Config, whose Fp8LinearMethod runs per-tensor fp8 weight-only by Marlin below SM89; from 0.4.1 SGLang's own
# Fp8LinearMethod takes Marlin only with SGLANG_FORCE_FP8_MARLIN=1 and never for block-scaled weights (0.4.6-0.5.0rc2:
# "Marlin doesn't support block-wise fp8"), its default path (torch._scaled_mm, the Triton block kernel) needing SM89;
# from 0.5.1 it turns Marlin on by itself on SM80-88 (fp8_utils.can_auto_enable_marlin_fp8), block-scaled weights too.
# Fp8MoEMethod has no such fallback in any version read: fp8 experts need SM89.
SGLANG_OWN_FP8_SINCE = (0, 4, 1)
SGLANG_FP8_MARLIN_AUTO_SINCE = (0, 5, 1)


def sglang_fp8_without_fp8_cores(version: tuple[int, ...], block_scaled: bool, moe: bool) -> str | None:
    """None where this SGLang runs fp8 weights on a GPU without fp8 tensor cores (weight-only, by Marlin: 16-bit
    products, as the cost models price them there), else why not."""
    if moe:
        return "its fp8 MoE kernels need SM89 (Fp8MoEMethod has no weight-only fallback)"
    if version >= SGLANG_FP8_MARLIN_AUTO_SINCE:
        return None
    if version >= SGLANG_OWN_FP8_SINCE:
        return ("before 0.5.1 it runs them weight-only (Marlin) only with SGLANG_FORCE_FP8_MARLIN=1, never "
                "block-scaled, and its default fp8 path needs SM89")
    return "its Marlin fallback (vLLM's Fp8LinearMethod) takes no block-scaled weights" if block_scaled else None


# The first release whose model registry (python/sglang/srt/models/) has a model type, where it is later than the
# releases the preset knows: gpt_oss.py is in the 0.5.0rc0 wheel, not in 0.4.10.post2's.
SGLANG_MODEL_TYPE_SINCE = {"gpt_oss": (0, 5, 0)}


# --num-continuous-decode-steps (server_args.py from 0.3.4): read only by 0.3.4-0.3.5.post2's scheduler.py (a decode
# step runs N-1 more before the next request is received: event_loop); from 0.3.6 parsed and never read (grep of the
# whole wheel: 0.3.6, 0.4.0, 0.4.5, 0.5.0rc0, 0.5.3.post3, 0.5.9, 0.5.14, 0.5.19, 0.5.20, 0.5.23; of managers/ in
# every PyPI release 0.3.0-0.5.23)
SGLANG_CONTINUOUS_DECODE_READ = ((0, 3, 4), (0, 3, 6))
# --log-requests: the front-end logs each request it receives and finishes at --log-requests-level (from 0.4.3.post3;
# 2 by default from 0.5.0rc1, read in every wheel: input and output cut at 2,048 characters; 3: all of them). Measured
# in 0.5.5.post1's front-end at level 2, in turn with it off: no difference beyond the noise (engine_work.py, beside
# API_SERVER_WORK); accepted at levels 0-2 from 0.5.1, the first final release whose default is the level measured.
SGLANG_REQUEST_LOG_SINCE = (0, 5, 1)


# --cpu-offload-gb (0.3.6.post1 on; a whole number, argparse's type=int; kv_cache.weights_offload_bytes as
# model_runner's int(gb * 1024**3)): vLLM V0's maybe_offload_to_cpu, copied: whole parameters of each decoder layer
# from the first, copied in before each offloaded layer runs (functional_call), read in the PyPI wheels of
# 0.3.6.post1 and 0.4.0 (srt/utils.py, called by make_layers), 0.5.3 (srt/offloader.py OffloaderV1), 0.5.11 and
# 0.5.23 (srt/utils/offloader.py). It turns
# torch.compile's piecewise prefill graphs off ("CPU offload (breaks dynamo)": _handle_piecewise_cuda_graph in
# 0.5.10rc0-0.5.13, _disable_tc_piecewise_cudagraph_if_incompatible in 0.5.14-0.5.21; read in every wheel 0.5.10rc0-
# 0.5.22), the prefill graphs of 0.5.10-0.5.14; 0.5.15's default, the breakable graphs, keep theirs (their rule list
# has no offload in any release to 0.5.23).
SGLANG_CPU_OFFLOAD_SINCE = "0.3.6.post1"
SGLANG_OFFLOAD_KEEPS_PREFILL_GRAPHS_SINCE = (0, 5, 15)


def _sglang_offload_note(ctx: Context) -> str | None:
    """What --cpu-offload-gb does here (the comment above), noted."""
    given = ctx.flags.get("cpu_offload_gb")
    if not given:
        return None
    return offload_note(f"SGLang {ctx.version_text}", given // GIB, OFFLOAD_COPIED_IN)


def _sglang_request_log(ctx: Context) -> str | None:
    """--log-requests: noted where its measurement serves the release (SGLANG_REQUEST_LOG_SINCE), refused before."""
    if not ctx.flags.get("log_requests"):
        return None
    if released_before(ctx.version, ctx.version_text, SGLANG_REQUEST_LOG_SINCE):
        since = dotted_version(SGLANG_REQUEST_LOG_SINCE)
        raise ConfigError(f"engine.log_requests: not modelled for SGLang {ctx.version_text} (the request log was "
                          f"measured in 0.5.5.post1, whose default level is that of the releases from {since}); "
                          f"allowed: leave it out, or SGLang {since} or later")
    level = ctx.flags.get("log_requests_level", 2)
    return (f"SGLang {ctx.version_text}: --log-requests (level {level}): no work added (0.5.5.post1's front-end "
            "measured the same with its log on and off, within the noise: sim/config/engines/engine_work.py)")


def _sglang_auto_truncate(ctx: Context) -> str | None:
    """--allow-auto-truncate, noted: what it changes is not modelled."""
    if not ctx.flags.get("allow_auto_truncate"):
        return None
    return (f"SGLang {ctx.version_text} --allow-auto-truncate: a request longer than the context (prompt + output over "
            "scheduler.max_model_len) is rejected here as without it (the records' status), where SGLang serves it "
            "with its prompt, then its output, cut to fit (managers/tokenizer_manager.py _validate_one_request)")


def _sglang_continuous_decode_steps(ctx: Context) -> str | None:
    """--num-continuous-decode-steps: refused where the release runs its steps (not modelled), noted where it is
    parsed and never read."""
    steps = ctx.flags.get("num_continuous_decode_steps")
    if steps is None or steps == 1:
        return None
    if ctx.version < SGLANG_CONTINUOUS_DECODE_READ[1]:
        raise ConfigError(f"engine.num_continuous_decode_steps: {steps} is not modelled for SGLang {ctx.version_text}, "
                          f"whose scheduler runs that many decode steps before receiving requests (0.3.4-0.3.5.post2); "
                          "allowed: 1, or leave it out")
    return (f"SGLang {ctx.version_text}: --num-continuous-decode-steps {steps} changes nothing (parsed, never read "
            "since 0.3.6)")


def derive_sglang(ctx: Context) -> PresetResult:
    """python/sglang/srt/server_args.py ServerArgs._handle_gpu_memory_settings and model_runner.py (max_num_reqs),
    read in the PyPI wheels of every release from 0.5.3 to 0.5.23: chunked_prefill_size and the decode cuda-graph
    batch by GPU memory (SGLANG_MEMORY_TIERS: 8192 and 256 at TP < 4, else 512, on a 60-160 GiB GPU; 16384 and 512 on
    a B200), mem_fraction_static = (memory - reserved) / memory with reserved = 512 + 1.5 x chunk + 2 x graph batch +
    tp x pp / 8 x 1024 MiB + the prefill graphs' memory (from 0.5.10), at least 10240 MiB on a GPU over 60 GiB;
    max_running_requests = min(max(kv_tokens / context_len x 512, 2048), 4096, kv_tokens // 2), page_size 1; separate
    prefill and decode batches (enable_mixed_chunk off), SGLang's new-token ratio for admission; NCCL's all-reduce
    where its own turns off (`custom_all_reduce`). SGLang 0.4.0-0.5.3rc0: their own memory, chunk and graph rules
    (`_sglang_before_053`); 0.3.x: `_derive_sglang_030`."""
    refuse_model_before(ctx, SGLANG_MODEL_TYPE_SINCE, "SGLang", "python/sglang/srt/models")
    early_notes = [note for note in (_sglang_attention_backend(ctx), _sglang_continuous_decode_steps(ctx),
                                     _sglang_request_log(ctx), _sglang_offload_note(ctx),
                                     _sglang_auto_truncate(ctx)) if note]
    speculation = sglang_speculation(ctx, early_notes)  # (none before 0.5.3: refused there)
    if ctx.version[:2] == (0, 3):
        result = _derive_sglang_030(ctx)
        result.notes.extend(early_notes)
        return result
    as_given = ctx  # the flags as given, which SGLang's memory rule reads before its sparse-attention rule sets any
    ctx = sglang_nsa_context(ctx, early_notes)
    forced_ranks = ctx is not as_given  # (the rule set data-parallel attention itself; its note says what runs)
    kv_ctx = ctx  # a rank's, which sizes its KV: under data-parallel attention its A GPUs (sglang_dp_attention.py)
    dp_ranks = sglang_dp_attention_ranks(ctx)  # D lockstep ranks (1: none)
    if dp_ranks > 1:
        ctx, kv_ctx = sglang_dp_attention_context(ctx)
    flags, gpu = ctx.flags, ctx.gpu
    notes: list[str] = early_notes
    gpu_mib = gpu.hbm_bytes / 2**20
    given_graph_bs = _sglang_given_graph_bs(flags)
    listed = _sglang_graph_list(ctx)
    old_rules = released_before(ctx.version, ctx.version_text, (0, 5, 3))
    if old_rules:  # 0.4.0-0.5.3rc0: the memory and graphs by their own rules, no reservation formula
        old_fraction, tier_chunk, graph_bs = _sglang_before_053(ctx, gpu_mib, given_graph_bs, listed)
    else:
        tier_chunk, graph_bs = _sglang_memory_tier(ctx, gpu_mib)
        graph_bs = graph_bs if given_graph_bs is None else given_graph_bs
        if listed is not None:  # 0.5.3-0.5.13: cuda_graph_max_bs = max(cuda_graph_bs), whatever was given
            if given_graph_bs is not None and given_graph_bs != listed:
                notes.append(f"SGLang {ctx.version_text}: --cuda-graph-max-bs {given_graph_bs} replaced by the "
                             f"largest --cuda-graph-bs, {listed}, as its server_args.py replaces it")
            graph_bs = listed
    if listed is not None:
        notes.append(f"SGLang {ctx.version_text} --cuda-graph-bs: decode batches up to {graph_bs} run as CUDA graphs "
                     f"(the largest given: {listed}); those between the sizes given are priced at their own size, as "
                     "the default list's")
    # the decode graphs' batch, as SGLang reserves it for the flags given
    dp_attention_mib = _sglang_dp_attention_mib(as_given, graph_bs, [] if forced_ranks else notes)
    chunk = flags.get("chunked_prefill_size", tier_chunk)
    # each rank schedules chunk // D (after the memory rule read it whole)
    values = _sglang_batches(ctx, flags, chunk // dp_ranks if chunk > 0 else chunk, notes)
    running_flag = flags.get("max_running_requests")
    if given_graph_bs is None and running_flag is not None and ctx.version >= (0, 5, 22):
        graph_bs = min(graph_bs, running_flag)  # 0.5.22: the default decode graphs stop at the running limit
    token_cap = flags.get("max_total_tokens")
    graph_mib, why_not = _sglang_prefill_graph_mib(ctx, chunk if token_cap is None else min(chunk, token_cap))
    fraction = flags.get("mem_fraction_static")
    if fraction is None and old_rules:
        fraction = old_fraction
    elif fraction is None:
        if why_not:
            notes.append(f"SGLang {ctx.version_text}: no prefill CUDA graph memory reserved ({why_not})")
        decode_graph_mib = graph_bs * 2
        if flags.get("disable_cuda_graph") and ctx.version >= SGLANG_DISABLE_GRAPH_FREES_DECODE_SINCE:
            decode_graph_mib = 0
        reserved = (512 + max(chunk, 2048) * 1.5 + decode_graph_mib
                    + ctx.tensor_parallel * ctx.pipeline_parallel / 8 * 1024 + graph_mib + dp_attention_mib)
        if gpu_mib > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        if speculation is not None:  # after the floor, as server_args.py adds it
            reserved += speculation.reserved_mib
        fraction = round((gpu_mib - reserved) / gpu_mib, 3)
        if fraction <= 0:  # (SGLang would not start: nothing left for the weights)
            given = next((k for k in ("chunked_prefill_size", "cuda_graph_max_bs", "cuda_graph_max_bs_decode")
                          if flags.get(k) is not None), None)
            raise ConfigError(f"engine{'.' + given if given else ''}: SGLang {ctx.version_text}'s memory rule reserves "
                              f"{reserved:,.0f} MiB of {ctx.gpu.name}'s {gpu_mib:,.0f} (a {chunk}-token chunk, "
                              f"decode graphs to {graph_bs}, {graph_mib:,.0f} MiB of prefill graphs); allowed: a "
                              "smaller chunked_prefill_size or cuda_graph_max_bs, or mem_fraction_static")
    values["kv_cache.gpu_memory_utilization"] = fraction = sglang_nsa_fraction(ctx, fraction, notes)
    values.update(_sglang_memory_rule(ctx, notes))
    conservativeness = flags.get("schedule_conservativeness", 1.0)
    if dp_ranks > 1:
        conservativeness *= SGLANG_DP_CONSERVATIVENESS_FACTOR
    init = min(SGLANG_INIT_NEW_TOKEN_RATIO * conservativeness, 1.0)
    values["scheduler.new_token_ratio"] = {"init": init, "min": min(init * SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR, 1.0),
                                           "decay_steps": SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS}
    values.update(_sglang_window_memory(ctx, notes))
    nsa_values, from_flags = sglang_nsa_values(ctx, notes)
    values.update(nsa_values)
    from sim.model.memory import WINDOW_POOL_RATIO
    window = {"window_memory": values["kv_cache.window_memory"],
              "window_pool_ratio": flags.get("swa_full_tokens_ratio", WINDOW_POOL_RATIO)}
    if token_cap is not None and window["window_memory"] == "own_pool" and ctx.model is not None \
            and ctx.model.hybrid_window:
        raise ConfigError(f"engine.max_total_tokens: {token_cap} is not modelled for {ctx.model.name}'s own "
                          "sliding-window pool (SGLang splits the cap between its two pools); allowed: leave it out, "
                          "or kv_cache.capacity_tokens")
    slots, kv_tokens = _sglang_request_slots(kv_ctx, fraction, values["scheduler.max_num_batched_tokens"], 4096, notes,
                                             window)
    if speculation is not None:
        values.update(_sglang_speculation_values(ctx, speculation, slots, kv_tokens, window, from_flags, notes))
        kv_tokens = values.get("kv_cache.capacity_tokens", kv_tokens)
    capped = _sglang_token_cap(ctx, kv_tokens, notes)
    if capped is not None:
        values["kv_cache.capacity_tokens"] = kv_tokens = capped
        if _sglang_reqs_from_capped(ctx):
            slots = _sglang_pool_slots(ctx, capped, 4096)
    running = flags.get("max_running_requests")
    if running is None and speculation is not None:
        values["scheduler.max_num_seqs"] = SGLANG_SPECULATIVE_MAX_RUNNING
    elif running is None:
        values["scheduler.max_num_seqs"] = min(slots, kv_tokens // 2) if kv_tokens is not None else slots
    else:
        cap = _sglang_given_running_cap(ctx.version, slots, kv_tokens)
        if cap is not None and running > cap:
            notes.append(f"SGLang {ctx.version_text}: --max-running-requests {running} is above the {cap} the engine "
                         "allows here (model_runner's request pool); the value given is simulated")
    values.update(preset_terms(ctx, "sglang", notes, inbound_work(ctx, "sglang", notes)))
    values["cost_model.overhead"] = sglang_overlap_work(ctx, speculation, values["cost_model.overhead"], notes)
    prefill_graphs = ctx.version >= SGLANG_PREFILL_GRAPH_SINCE and why_not is None
    values["cost_model.overhead"].update(_sglang_graphs(ctx, graph_bs, prefill_graphs, notes))
    values.update(custom_all_reduce(ctx, "SGLang"))
    if dp_ranks > 1:
        parallel, parallel_flags = sglang_dp_attention_values(ctx, chunk, notes)
    else:
        parallel, parallel_flags = _sglang_data_parallel(ctx, notes)
    values.update(parallel)
    return PresetResult(values, {**_sglang_budget_flag(flags), **from_flags, **parallel_flags}, notes)


def _sglang_speculation_values(ctx: Context, speculation: SGLangSpeculation, slots: int, kv_tokens: int | None,
                               window: dict, from_flags: dict[str, str], notes: list[str]) -> dict[str, Any]:
    """What SGLang's speculative decoding sets (sglang_speculative.py): γ where a flag gives it, mixed chunks off,
    and, to 0.5.6.post2, the KV pool's headroom for the drafts (max_num_reqs `slots` x steps' and verified tokens +
    100)."""
    values: dict[str, Any] = {"scheduler.mixed_batches": False}
    if ctx.flags.get("speculative_algorithm") is not None:
        for key, value in (("num_speculative_tokens", speculation.num_steps),
                           ("draft_tree_width", speculation.topk),
                           ("num_verified_tokens", speculation.num_draft_tokens)):
            flag = speculation.setting_flags[key]
            values[f"speculation.{key}"] = value
            from_flags[f"speculation.{key}"] = flag if ctx.flags.get(flag) is not None else "speculative_algorithm"
    if not (speculation.grows_pool or speculation.draft_in_pool):
        return values
    own_pool = window["window_memory"] == "own_pool" and ctx.model is not None and ctx.model.hybrid_window
    if kv_tokens is None or own_pool:
        why = "the model was not resolved" if kv_tokens is None else "the sliding layers' own pool"
        what = ("the KV pool's headroom for the drafts not added" if speculation.grows_pool else
                "the draft's weights and KV not taken out of the KV pool")
        notes.append(f"SGLang speculative decoding: {what} ({why})")
        return values
    if not speculation.draft_in_pool:
        values["kv_cache.capacity_tokens"] = speculation.pool_tokens(kv_tokens, slots)
        return values
    from sim.model.memory import draft_head_bytes_per_gpu, engine_memory, kv_bytes_per_token, weight_bytes_per_gpu
    q = ctx.raw.get("quantization") or {}
    weights, kv_dtype = q.get("weights", "bf16"), q.get("kv_cache", "bf16")
    padding = engine_memory({}, q)["expert_padding"]
    draft = speculation.draft_model
    try:  # (a draft the target's TP does not split, or a dtype it cannot take: validation's to report, in one line)
        if draft is not None:  # STANDALONE: the draft model's own weights, its embedding and LM head included
            draft_bytes = weight_bytes_per_gpu(draft, weights, ctx.tensor_parallel)
            weighed = f"{draft.name}'s weights"
        else:
            draft_bytes = draft_head_bytes_per_gpu(ctx.model, weights, ctx.tensor_parallel, expert_padding=padding)
            weighed = (f"its weights estimated as one of {ctx.model.name}'s decoder layers with an embedding and an "
                       "LM head of its vocabulary and a 2h x h projection (an EAGLE head's or an MTP module's shapes; "
                       "sim/model/memory.py draft_head_bytes_per_gpu)")
    except ConfigError as err:  # (said, where validation takes the scenario anyway)
        notes.append(f"SGLang speculative decoding: the draft's weights and KV not taken out of the KV pool ({err})")
        return values
    token_bytes = kv_bytes_per_token(ctx.model, kv_dtype, ctx.tensor_parallel)
    tokens = speculation.pool_tokens(kv_tokens, slots, draft_bytes, token_bytes, ctx.model.num_layers)
    values["kv_cache.capacity_tokens"] = tokens
    layers = speculation.draft_layers
    notes.append(f"SGLang {ctx.version_text} speculative decoding: the draft is loaded before the KV pool is sized "
                 f"(scheduler.py init_model_worker), so {weighed}, {draft_bytes / 2**30:.2f} GiB a GPU, come out of "
                 f"it, and each token's KV cell grows by {layers} draft layer{'s' if layers > 1 else ''} of the "
                 f"target's size beside its {ctx.model.num_layers} (pool_configurator.py): {kv_tokens:,} KV tokens "
                 f"-> {tokens:,}")
    return values


SGLANG_FLAGS = {
    "max_running_requests": Flag("scheduler.max_num_seqs", int, "--max-running-requests"),
    "chunked_prefill_size": Flag(None, int, "--chunked-prefill-size (-1: no chunking)",
                                 decides=("scheduler.chunked_prefill", "scheduler.max_num_batched_tokens")),
    "max_prefill_tokens": Flag(None, int, "--max-prefill-tokens", decides=("scheduler.max_num_batched_tokens",)),
    "mem_fraction_static": Flag(None, (int, float), "--mem-fraction-static", decides=("kv_cache.capacity_tokens",)),
    "cpu_offload_gb": Flag("kv_cache.weights_offload_bytes", int, "--cpu-offload-gb: GiB of each GPU's decoder-layer "
                           "weights kept in host memory, copied in at every forward pass",
                           gib_as_bytes("cpu_offload_gb"), since=SGLANG_CPU_OFFLOAD_SINCE),
    # since: the first wheel whose server_args.py has the option, read in the PyPI wheels of 0.3.0, every release
    # 0.3.4-0.4.10.post2 (post releases too, 0.4.4's posts not) and 0.5.1-0.5.23
    "page_size": Flag("kv_cache.block_size", int, "--page-size", since=(0, 4, 4)),
    "context_length": Flag("scheduler.max_model_len", int, "--context-length"),
    "json_model_override_args": Flag(None, (str, dict), "--json-model-override-args: config.json keys as served (RoPE "
                                     "scaling, max_position_embeddings: the context SGLang derives)",
                                     config_overrides("json_model_override_args"), since=(0, 3, 1)),
    "enable_mixed_chunk": Flag(None, bool, "--enable-mixed-chunk"),
    "disable_overlap_schedule": Flag(None, bool, "--disable-overlap-schedule: the scheduler's own work between the "
                                     "steps, not behind the GPU's (sglang_overlap_work)", since=SGLANG_OVERLAP_SINCE),
    "schedule_conservativeness": Flag(None, (int, float), "--schedule-conservativeness"),
    "enable_prefix_caching": Flag("kv_cache.enable_prefix_caching", bool,
                                  "radix cache (on in SGLang unless --disable-radix-cache)"),
    "tp_size": Flag("hardware.tensor_parallel", int, "--tp-size", aliases=("--tensor-parallel-size",)),
    "pp_size": Flag("hardware.pipeline_parallel", int, "--pp-size", since="0.4.6.post2"),
    # server_args.py --kv-cache-dtype choices: auto, fp8_e5m2, fp8_e4m3 (0.5.3.post3; 0.3.0: auto, fp8_e5m2)
    "kv_cache_dtype": Flag("quantization.kv_cache", str, "--kv-cache-dtype: auto (the model's dtype), fp8_e4m3 or "
                           "fp8_e5m2", kv_cache_dtype_flag(("auto", "fp8_e4m3", "fp8_e5m2"))),
    "disable_custom_all_reduce": Flag(None, bool, "--disable-custom-all-reduce: NCCL's all-reduce "
                                      "(hardware.all_reduce nccl)"),
    "disable_radix_cache": Flag(None, bool, "--disable-radix-cache (no prefix caching)"),
    # server_args.py choices (0.3.0: lpm, random, fcfs, dfs-weight; 0.5.5.post1 adds lof and priority)
    "schedule_policy": Flag(None, str, "--schedule-policy: fcfs or lpm (SGLANG_FCFS_DEFAULT_SINCE)",
                            only_one_of("schedule_policy", ("fcfs", "lpm"), ", or leave it out")),
    "disable_hybrid_swa_memory": Flag(None, bool, "--disable-hybrid-swa-memory: a hybrid model's sliding layers keep "
                                      "every token's KV", since="0.4.9.post3"),
    "swa_full_tokens_ratio": Flag("kv_cache.window_pool_ratio", (int, float), "--swa-full-tokens-ratio",
                                  since="0.4.9.post3"),
    # --attention-backend: in server_args.py from 0.3.1 (not 0.3.0); its choices gained fa3 in 0.4.4.post2 and
    # trtllm_mha in 0.5.0rc0 (read in the PyPI wheels of 0.3.0-0.3.6, 0.4.0, 0.4.1, 0.4.3, 0.4.4-0.4.4.post3, 0.4.5,
    # 0.4.5.post1, 0.4.5.post3, 0.4.6-0.4.10.post2 (0.4.10's posts), 0.5.0rc0, 0.5.1-0.5.3, 0.5.5.post1, 0.5.9, 0.5.14
    # and 0.5.23)
    "attention_backend": Flag(None, str, "--attention-backend: the kernel the SGLang tables of the GPU measured (fa3 on "
                              "H100 and H200, trtllm_mha on B200, flashinfer on L40S)", since=(0, 3, 1),
                              value_versions={"fa3": ("0.4.4.post2", None), "trtllm_mha": ("0.5.0rc0", None)}),
    **{name: Flag(None, str, f"--{name.replace('_', '-')}: the {phase} steps' attention kernel, the one the SGLang "
                  "tables of the GPU measured", since=SGLANG_PHASE_BACKENDS_SINCE,
                  value_versions={"trtllm_mha": ("0.5.0rc0", None)})
       for name, phase in (("prefill_attention_backend", "prefill"), ("decode_attention_backend", "decode"))},
    "enable_torch_compile": Flag(None, bool, "--enable-torch-compile (0.3.x: noted, not modelled)"),
    # Switches whose effect is not modelled, accepted off only (the reason said), and the sampler and truncation
    # options below: since / until, the first wheel whose server_args.py has each and the first that refuses it, read
    # in every PyPI wheel 0.3.0-0.5.23 (0.5.5.post1's code that reads each: managers/tokenizer_manager.py,
    # layers/sampler.py, mem_cache/hiradix_cache.py)
    **{name: Flag(None, bool, f"--{name.replace('_', '-')}: false only (the default: {why})",
                  only_default(name, False, f": {why}"), since=since, until=until)
       for name, why, since, until in (
           ("skip_tokenizer_init", "the front-end tokenizes and detokenizes, as its measured work does; token ids in "
            "and out are not measured", None, None),
           ("enable_hierarchical_cache", "the radix cache in GPU memory only; its host-memory tier is not modelled",
            "0.4.2.post1", None),
           ("enable_nan_detection", "no check of every step's logits, which waits on the GPU and is not measured",
            (0, 3, 6), (0, 5, 13)),
           ("enable_metrics", "no Prometheus counters; their work in the scheduler and in the front-end's every "
            "streamed chunk is not measured", "0.3.5.post1", None))},
    "sampling_backend": Flag(None, str, "--sampling-backend: flashinfer (PyTorch's sampler is not priced)",
                             only_one_of("sampling_backend", ("flashinfer",), " (the default where FlashInfer is "
                                         "installed, as SGLang's images ship it: the sampler of the runs the CPU "
                                         "terms were fitted on), or leave it out"), since=(0, 3, 1)),
    "allow_auto_truncate": Flag(None, bool, "--allow-auto-truncate: noted (a request longer than the context is "
                                "rejected here, as without it)", since="0.4.1.post7"),
    "max_total_tokens": Flag(None, int, "--max-total-tokens: caps the KV pool at that many tokens (never raises it; "
                             "kv_cache.capacity_tokens)", at_least("max_total_tokens")),
    "cuda_graph_max_bs": Flag(None, int, "--cuda-graph-max-bs: the largest decode batch run as a CUDA graph (above "
                              "it: the eager launch term); reserves 2 MiB a batch", at_least("cuda_graph_max_bs"),
                              since=(0, 3, 5), until=(0, 5, 20)),
    "cuda_graph_max_bs_decode": Flag(None, int, "--cuda-graph-max-bs-decode: --cuda-graph-max-bs's spelling from "
                                     "0.5.14", at_least("cuda_graph_max_bs_decode"), since=(0, 5, 14)),
    "cuda_graph_bs": Flag(None, list, "--cuda-graph-bs: the decode batches captured as CUDA graphs; the largest "
                          "captured bounds the graphs here, as each version reads it (SGLANG_GRAPH_LIST)",
                          _graph_batches, since=SGLANG_GRAPH_LIST[0], until=SGLANG_GRAPH_LIST[2]),
    "disable_cuda_graph": Flag(None, bool, "--disable-cuda-graph: decode steps (from 0.5.14 prefill steps too) run "
                               "without CUDA graphs: the eager launch term"),
    # python/sglang/srt/server_args.py: --enable-ep-moe sets ep_size = tp_size (0.4.0.post1 to 0.5.3rc0); from 0.5.0
    # --ep-size alone splits the experts (moe tp = tp_size / ep_size); without --enable-dp-attention the MoE output
    # is all-reduced over the TP group
    # --enable-ep-moe: a switch from 0.4.0.post1 to 0.5.3rc0; from 0.5.3 a DeprecatedAction that raises ("Please set
    # `--ep-size` to the same value as `--tp-size` instead"), gone by 0.5.13 (server_args.py in the PyPI wheels of
    # 0.4.6-0.4.10, 0.5.1, 0.5.2, 0.5.2rc2, 0.5.3rc0, 0.5.3, 0.5.5.post1, 0.5.13)
    "enable_ep_moe": Flag("hardware.expert_parallel", bool, "--enable-ep-moe: experts split over all tp_size GPUs "
                          "(before 0.5.3; then --ep-size)", since="0.4.0.post1", until=(0, 5, 3)),
    "ep_size": Flag("hardware.expert_parallel", int, "--ep-size: GPUs of the TP group holding whole experts",
                    since=(0, 5, 0), aliases=("--ep",)),
    "enable_dp_attention": Flag(None, bool, "--enable-dp-attention: with --dp D, D lockstep ranks of tp_size / D GPUs "
                                "sharing a mixture of experts' MLPs (sglang_dp_attention.py); without --dp, turned "
                                "off after reserving memory (SGLANG_DP_ATTENTION_READ)", since=(0, 5, 3)),
    "dp_size": Flag("hardware.num_replicas", int, "--dp-size: data-parallel workers, each a replica of tp_size "
                    "GPUs behind the one server (SGLANG_DATA_PARALLEL_SINCE); with --enable-dp-attention, ranks of "
                    "tp_size / dp_size GPUs in lockstep",
                    at_least("dp_size"), since=SGLANG_DATA_PARALLEL_SINCE, aliases=("--data-parallel-size",)),
    "load_balance_method": Flag(None, str, "--load-balance-method: round_robin (auto from 0.5.9); the others are "
                                "not modelled", only_one_of("load_balance_method", SGLANG_LOAD_BALANCE),
                                since=SGLANG_DATA_PARALLEL_SINCE, value_versions={"auto": ((0, 5, 9), None)}),
    # --tokenizer-worker-num (server_args.py from 0.5.2rc0, every wheel to 0.5.23): N uvicorn workers, each an HTTP
    # server with its own TokenizerManager (entrypoints/http_server.py launch_server, 0.5.5.post1), the detokenizer
    # routing each output to its worker; each does the work measured of the one process (API_SERVER_WORK)
    "tokenizer_worker_num": Flag("frontend.num_processes", int, "--tokenizer-worker-num: HTTP front-end processes, "
                                 "each with its own tokenizer (frontend.num_processes)",
                                 at_least("tokenizer_worker_num"), since=(0, 5, 2)),
    "log_requests": Flag(None, bool, "--log-requests: the request log, no work added (SGLANG_REQUEST_LOG_SINCE)"),
    "log_requests_level": Flag(None, int, "--log-requests-level: 0, 1 or 2 (3, every input and output whole, is not "
                               "measured)", only_one_of("log_requests_level", (0, 1, 2), ", or leave it out"),
                               since="0.4.3.post3"),
    "num_continuous_decode_steps": Flag(None, int, "--num-continuous-decode-steps: 1, or any number from 0.3.6, "
                                        "which parses it and never reads it (SGLANG_CONTINUOUS_DECODE_READ)",
                                        at_least("num_continuous_decode_steps"),
                                        since=SGLANG_CONTINUOUS_DECODE_READ[0]),
    # python/sglang/srt/managers/scheduler_output_processor_mixin.py (0.5.3.post3): a streaming request's output goes
    # out when len(output_ids) % stream_interval == 1, and at its end: the first token alone, then chunks of N;
    # 0.3.0's tp_worker.py: its first token, then every N-th decode step of the batch
    "stream_interval": Flag(STREAM_CHUNK_KEY, int, "--stream-interval: tokens a streamed chunk carries after the "
                            "first (frontend.tokens_per_chunk)"),
    # --speculative-* (server_args.py from 0.4.1.post4; read, with what each algorithm sets, in sglang_speculative.py
    # for 0.5.3-0.5.23, where the preset models them: refused in one line elsewhere)
    "speculative_algorithm": Flag(None, str, "--speculative-algorithm: EAGLE, EAGLE3, NEXTN or NGRAM, the drafter "
                                  "priced by speculation.draft_cost_ratio; from 0.5.14 STANDALONE, a draft model "
                                  "(speculation.draft_model)",
                                  only_one_of("speculative_algorithm", SGLANG_ALGORITHMS), since="0.4.1.post4",
                                  value_versions={"NGRAM": ("0.5.3", None)}),
    "speculative_num_steps": Flag(None, int, "--speculative-num-steps: draft tokens a step (speculation's γ)",
                                  at_least("speculative_num_steps"), since="0.4.1.post4"),
    "speculative_eagle_topk": Flag(None, int, "--speculative-eagle-topk: 1, a chain, or a tree's branching "
                                   "(speculation.draft_tree_width)", at_least("speculative_eagle_topk"),
                                   since="0.4.1.post4"),
    "speculative_num_draft_tokens": Flag(None, int, "--speculative-num-draft-tokens: the tokens verified a request "
                                         "(speculation.num_verified_tokens); num_steps + 1 with topk 1",
                                         at_least("speculative_num_draft_tokens"), since="0.4.1.post4"),
    "speculative_draft_model_path": Flag(None, str, "--speculative-draft-model-path: the EAGLE head's weights (priced "
                                         "by speculation.draft_cost_ratio) or STANDALONE's draft model (the section's "
                                         "draft_model)", since="0.4.1.post4",
                                         aliases=("--speculative-draft-model",),
                                         alias_versions={"--speculative-draft-model": ((0, 5, 2), None)}),
    # NGRAM's own options (server_args.py from 0.5.3, arg_groups/fields/spec.py from 0.5.20; read with NGRAM in
    # sglang_speculative.py): the tree's breadth and, to 0.5.10rc0, the match window that sets the draft tokens; the
    # rest shape what the trie drafts, which the speculation section's acceptance stands for. 0.5.10rc0 renamed
    # --speculative-ngram-branch-length --speculative-ngram-max-trie-depth and 0.5.10 removed the match windows:
    # taken here at 0.5.10 (0.5.10rc0 as 0.5.9).
    **{name: Flag(None, int, f"--{name.replace('_', '-')}: {what}", at_least(name), since="0.5.3", until=until)
       for name, what, until in (
           ("speculative_ngram_max_bfs_breadth", f"NGRAM's tree breadth, SGLang's topk with it "
            f"({SGLANG_NGRAM_BFS_BREADTH} unless given)", None),
           ("speculative_ngram_max_match_window_size", f"NGRAM's draft tokens unless given "
            f"({SGLANG_NGRAM_MATCH_WINDOW} unless given)", SGLANG_NGRAM_FIXED_DRAFT_TOKENS_SINCE),
           ("speculative_ngram_min_match_window_size", NGRAM_ACCEPTANCE, SGLANG_NGRAM_FIXED_DRAFT_TOKENS_SINCE),
           ("speculative_ngram_min_bfs_breadth", NGRAM_ACCEPTANCE, None),
           ("speculative_ngram_branch_length", NGRAM_ACCEPTANCE, SGLANG_NGRAM_FIXED_DRAFT_TOKENS_SINCE),
           ("speculative_ngram_capacity", NGRAM_ACCEPTANCE, None))},
    "speculative_ngram_max_trie_depth": Flag(None, int, f"--speculative-ngram-max-trie-depth: {NGRAM_ACCEPTANCE}",
                                             at_least("speculative_ngram_max_trie_depth"),
                                             since=SGLANG_NGRAM_FIXED_DRAFT_TOKENS_SINCE),
    "speculative_ngram_match_type": Flag(None, str, f"--speculative-ngram-match-type: BFS or PROB, {NGRAM_ACCEPTANCE}",
                                         only_one_of("speculative_ngram_match_type", ("BFS", "PROB")), since="0.5.3"),
    "dtype": Flag(None, str, "--dtype: auto, half, float16 or bfloat16",
                  sixteen_bit_dtype(("auto", "half", "float16", "bfloat16"))),
    # modelopt_fp4 (NVFP4): in server_args.py's --quantization choices from 0.4.5.post1 (not 0.4.5; read in the PyPI
    # wheels of 0.4.5, 0.4.5.post1, 0.4.5.post3, 0.4.6, 0.5.3, 0.5.5.post1, 0.5.9, 0.5.14 and 0.5.23)
    "quantization": Flag("quantization.weights", str, "--quantization: fp8, w8a8_fp8, mxfp4 or modelopt_fp4 "
                         "(quantization.weights)",
                         weights_quantization({"fp8": "fp8", "w8a8_fp8": "fp8", "mxfp4": "mxfp4",
                                               "modelopt_fp4": "nvfp4"}),
                         value_versions={"modelopt_fp4": ("0.4.5.post1", None)}),
}

# SGLang's options that change nothing simulated, read in 0.5.5.post1's ServerArgs.add_cli_args (run from its wheel).
# --enable-metrics adds work in the scheduler and the front-end, not measured: a flag above, refused when given.
# The options above that came in after 0.3.0: the first release whose server_args.py has each, read in the PyPI
# wheels of 0.3.0, every release 0.3.4-0.4.10.post2 (post releases too, 0.4.4's posts not) and 0.5.1-0.5.3.
_SGLANG_INERT_SINCE = {"--watchdog-timeout": (0, 3, 5), "--decode-log-interval": (0, 3, 5),
                       "--constrained-json-whitespace-pattern": "0.3.1.post1", "--enable-cache-report": (0, 3, 4),
                       "--grammar-backend": (0, 3, 5),
                       "--download-dir": (0, 3, 6), "--revision": (0, 4, 0), "--tool-call-parser": (0, 4, 2),
                       "--dist-timeout": "0.4.3.post3", "--reasoning-parser": "0.4.3.post3", "--model": "0.4.8.post1",
                       "--skip-server-warmup": (0, 4, 9)}
SGLANG_INERT = tuple(dataclasses.replace(option, since=_SGLANG_INERT_SINCE.get(option.option)) for option in (
    inert_group(SERVER_ADDRESS, "one", "--host", "--port", "--api-key", "--log-level-http", "--watchdog-timeout",
                "--dist-timeout")
    + inert_group(SERVER_ADDRESS, "none", "--skip-server-warmup")
    + inert_group(MODEL_FILES, "one", "--model-path", "--model", "--tokenizer-path", "--load-format", "--revision",
                  "--download-dir", "--served-model-name", "--tokenizer-mode")
    + inert_group(MODEL_FILES, "none", "--trust-remote-code")
    + inert_group(LOGGING, "one", "--log-level", "--decode-log-interval")
    + inert_group(PARSING, "one", "--chat-template", "--tool-call-parser", "--reasoning-parser")
    + inert_group(SEED, "one", "--random-seed")
    # read in every PyPI wheel 0.3.0-0.5.23 (server_args.py; from 0.5.20 arg_groups/fields/): the structured-output
    # backend and its JSON whitespace; cached tokens in the usage reply (the OpenAI endpoints); a P2P check at start-up
    # (model_runner.py), after which the all-reduce runs as priced
    + inert_group(REQUEST_LIMITS, "one", "--grammar-backend", "--constrained-json-whitespace-pattern")
    + inert_group(USAGE_REPORTS, "none", "--enable-cache-report")
    + inert_group("a start-up check of the GPUs' peer access (the all-reduce is priced as the hardware's)", "none",
                  "--enable-p2p-check")))
