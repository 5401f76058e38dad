"""Engine presets (issue 30): `engine: {name, version, <flags as the engine spells them>}` in a scenario.

A preset is data plus a policy (../shared/STYLE.md): from the engine, its version, the user's flags, the GPU and the
model it derives what that engine's own argument handling derives — the batch limits, the token budget, the KV
memory and block size, the scheduling rule (sim/sched/rules.py) and the engine's CPU terms — and writes them into
the scenario's sections *under* whatever the scenario itself says. So every value can be overridden: a scenario key
wins over the preset's default; a flag and the scenario key it maps to may both be given only if they agree.

It runs once, on the raw scenario before validation (`Scenario` calls `apply_engine_preset`), so the CLI, the
dashboard, the planner and the sweeps (which all validate raw scenarios, after merging variants and grid points)
see the same derived values, and a dumped scenario shows them.

Each engine's derivation cites the source file and version it follows, and `PresetResult.notes` lists what is an
approximation (a default read at another version than the one named).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from sim.config.engine_command import (CommandFlags, CommandSyntax, InertOption, as_command_error, command_notes,
                                      read_command, resolve_option)
from sim.config.checkpoint import runs_fp8_products
from sim.config.words import allowed_words, shown, type_words
from sim.errors import ConfigError
from sim.model.interconnects import CUSTOM_ALL_REDUCE, NCCL_ALL_REDUCE, interconnect_class
from sim.workload.generate import endpoint_of

GIB = 1 << 30
# The presets' fitted numbers (the engine's CPU time per step, the front-end's latency), per engine and version, with
# the runs they were fitted on: written by `benchmarks/bench_published.py --write-terms` (the published suite's
# held-out protocol, benchmarks/published_suite.py fit_preset), read here. Absent for a version: the nearest
# fitted version of the engine, and the preset says so; none at all: the estimates of sim/cost/overhead.py.
TERMS_PATH = Path(__file__).with_name("engine_terms.json")


@dataclass(frozen=True)
class Flag:
    """One engine flag: the scenario key it sets (None: the preset reads it itself) and the values it takes."""

    target: str | None
    kind: type | tuple  # the Python type(s) accepted (bool is not an int here)
    doc: str
    convert: Callable[[Any], Any] = lambda value: value
    since: tuple[int, ...] | str | None = None  # the first version that has it ("0.4.6.post2"; None: every one known)
    aliases: tuple[str, ...] = ()  # the option's other spellings on the engine's command line (vLLM's -tp)
    until: tuple[int, ...] | str | None = None  # the first release whose parser refuses it (None: none known)

    @property
    def option(self) -> str | None:
        """The engine's own command-line spelling of the flag: `doc` starts with it (`--max-num-seqs`); None where
        the doc names a config key instead (LMDeploy's config.ini, TensorRT-LLM's YAML options)."""
        head = self.doc.split(maxsplit=1)[0].rstrip(":")
        return head if head.startswith("--") else None


def _kv_cache_dtype(allowed: tuple[str, ...]) -> Callable[[str], str | None]:
    """An engine's --kv-cache-dtype as `quantization.kv_cache`: auto (the model's own dtype) sets nothing; fp8,
    fp8_e4m3 and fp8_e5m2 set fp8 (the same bytes a value); bfloat16 sets bf16; another value is refused in one
    line."""
    def convert(value: str) -> str | None:
        if value not in allowed:
            raise ConfigError(f"engine.kv_cache_dtype: {value!r} is not allowed; allowed: {', '.join(allowed)}")
        if value == "auto":
            return None
        return "fp8" if value.startswith("fp8") else "bf16"
    return convert


def _at_least_one(name: str) -> Callable[[int], int]:
    """An engine flag's count that must be 1 or more, refused in one line otherwise."""
    def convert(value: int) -> int:
        if value < 1:
            raise ConfigError(f"engine.{name}: {value!r} is not allowed; allowed: a whole number >= 1")
        return value
    return convert


def _sixteen_bit(allowed: tuple[str, ...]) -> Callable[[str], str]:
    """An engine's --dtype: the 16-bit activation dtypes every price here assumes are accepted (the weights priced
    are the scenario's `quantization.weights`); float32 and others are refused in one line."""
    def convert(value: str) -> str:
        if value not in allowed:
            raise ConfigError(f"engine.dtype: {value!r} is not modelled; allowed: {', '.join(allowed)} (16-bit "
                              "activations, as priced)")
        return value
    return convert


def _only_default(name: str, default: str) -> Callable[[str], str]:
    """An engine option accepted at its default value only (the engine as modelled), another value refused in one
    line."""
    def convert(value: str) -> str:
        if value != default:
            raise ConfigError(f"engine.{name}: {value!r} is not modelled; allowed: {default} (the default), or leave "
                              "it out")
        return value
    return convert


def _weights_quantization(methods: dict[str, str]) -> Callable[[str], str]:
    """An engine's --quantization as `quantization.weights` (the methods it names that ServeSim prices: fp8 as the
    engine's W8A8 where the GPU has an fp8 rate, `_derive` sets fp8_compute so, weight-only elsewhere); another
    method is refused in one line, never priced as 16-bit."""
    def convert(value: str) -> str:
        if value not in methods:
            raise ConfigError(f"engine.quantization: {value!r} is not modelled; allowed: {', '.join(methods)} (or "
                              "leave it out and set quantization.weights)")
        return methods[value]
    return convert


# How many output tokens the engine hands its front-end at once (after a prompt's first token): a value a preset
# derives for the scenario's front-end, which it only has with a `frontend:` section (`_place_frontend_value`, as
# every `frontend.` key a preset sets).
STREAM_CHUNK_KEY = "frontend.tokens_per_chunk"


@dataclass
class PresetResult:
    values: dict[str, Any]  # dotted scenario key -> the preset's default
    from_flags: dict[str, str]  # dotted scenario key -> the flag that set it
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class EnginePreset:
    name: str
    label: str
    oldest: tuple[int, ...]
    newest: tuple[int, ...]  # newest minor version known; its patch releases are accepted
    source: str
    flags: dict[str, Flag]
    derive: Callable[["Context"], PresetResult]
    versions: str | None = None  # the versions modelled, where not every one from oldest to newest is
    inert: tuple[InertOption, ...] = ()  # options `engine.command` accepts without effect (engine_command.py)
    syntax: CommandSyntax = CommandSyntax()  # how the engine's parser reads its command line
    # whether the engine cuts a step's running decodes to its token budget (vLLM V1's scheduler, and its
    # SchedulerConfig refuses max_num_batched_tokens < max_num_seqs; TensorRT-LLM's MicroBatchScheduler stops at the
    # first generation request past max_num_tokens: cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp at
    # 0a949d31), which the scheduler here does not model, so the budget must hold them all; SGLang's decode batches
    # hold every running request (its max_running_requests may exceed chunked_prefill_size: 4096 against 2048 on two
    # 24 GB GPUs)
    decodes_within_budget: bool = True

    def known_versions(self) -> str:
        return self.versions or f"{_dotted(self.oldest)} to {_dotted(self.newest[:2])}.x"

    def options(self) -> dict[str, tuple[str, Any]]:
        """Each command-line spelling of a flag's option (`Flag.option`, `Flag.aliases`) -> (the flag, its kind)."""
        return {spelled: (name, flag.kind) for name, flag in self.flags.items()
                for spelled in ((flag.option,) if flag.option else ()) + flag.aliases}

    def inert_options(self) -> dict[str, InertOption]:
        return {option.option: option for option in self.inert}

    def read_command(self, text: Any) -> CommandFlags:
        """`engine.command`, the engine's launch command, read into this preset's flags (engine_command.py)."""
        return read_command(text, self.name, self.options(), self.inert_options(), self.syntax)


@dataclass
class Context:
    """What a derivation reads: the version, the flags given, the GPU, TP, the model (None if unresolved)."""

    version: tuple[int, ...]
    version_text: str
    flags: dict[str, Any]
    gpu: Any
    tensor_parallel: int
    pipeline_parallel: int
    model: Any
    raw: dict

    max_model_len_flag: int | None = None  # the engine flag that sets scheduler.max_model_len, when given

    def max_model_len(self) -> int | None:
        given = self.max_model_len_flag or _get(self.raw, "scheduler.max_model_len")
        if given is not None:
            return given
        return self.model.max_context if self.model is not None else None


def _dotted(version: tuple[int, ...] | str) -> str:
    return version if isinstance(version, str) else ".".join(str(v) for v in version)


_VERSION = re.compile(r"v?(\d+(?:\.\d+)+)((?:[.\-+]?(?:post|rc|dev|a|b)\d*)*)")


def _parse_version(text: str) -> tuple[int, ...] | None:
    """The release numbers of a version string, at least two ("0.10.1.1", vLLM's fourth-number releases, keeps all
    four); a pre-, post- or dev-release suffix names the same release (0.5.3.post3 is 0.5.3)."""
    match = _VERSION.fullmatch(text.strip())
    if not match:
        return None
    return tuple(int(part) for part in match.group(1).split("."))


def _suffix(version_text: str) -> tuple[bool, int]:
    """(whether a version string names a pre- or dev-release, its post-release number or -1)."""
    match = _VERSION.fullmatch(version_text.strip())
    suffix = match.group(2) if match is not None else ""
    post = re.search(r"post(\d+)", suffix)
    return re.search(r"rc|dev|a|b", suffix) is not None, int(post.group(1)) if post else -1


def _released_before(version: tuple[int, ...], version_text: str, bound: tuple[int, ...] | str,
                     pre_before: bool = True) -> bool:
    """Whether a release came out before `bound`, the release numbers of a final release or a version string that
    may name a post release ("0.4.6.post2": 0.4.6 and 0.4.6.post1 come before it): a lower version; a post release
    before the bound's; with `pre_before`, a pre- or dev-release of the bound itself (0.5.3rc0, which
    `_parse_version` reads as 0.5.3)."""
    numbers = _parse_version(bound) if isinstance(bound, str) else bound
    if version[:len(numbers)] != numbers:
        return version < numbers
    pre, post = _suffix(version_text)
    return (pre_before and pre) or post < (_suffix(bound)[1] if isinstance(bound, str) else -1)


def _outside_versions(version: tuple[int, ...], version_text: str, since: tuple[int, ...] | str | None,
                      until: tuple[int, ...] | str | None) -> tuple[str, str] | None:
    """Why a flag or option is not one of this release's (`since`: the first release that has it, a pre-release of
    it counted as it; `until`: the first whose parser refuses it; either may name a post release, "0.4.6.post2"),
    and the versions allowed instead; None where it is."""
    if since is not None and _released_before(version, version_text, since, pre_before=False):
        return f"it came in {_dotted(since)}", f"engine.version {_dotted(since)} or later"
    if until is not None and not _released_before(version, version_text, until):
        return f"its parser refuses it from {_dotted(until)}", f"engine.version before {_dotted(until)}"
    return None


_ABSENT = object()


def _lookup(raw: dict, dotted: str):
    """The value at a dotted key of a raw scenario, or _ABSENT."""
    node = raw
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return _ABSENT
        node = node[key]
    return node


def _get(raw: dict, dotted: str):
    value = _lookup(raw, dotted)
    return None if value is _ABSENT else value


def _has(raw: dict, dotted: str) -> bool:
    return _lookup(raw, dotted) is not _ABSENT


def _set(raw: dict, dotted: str, value) -> None:
    node = raw
    keys = dotted.split(".")
    for key in keys[:-1]:
        if node.get(key) is None:
            node[key] = {}
        node = node[key]
        if not isinstance(node, dict):
            return  # a malformed section: validation reports it
    node[keys[-1]] = value


# --- vLLM ------------------------------------------------------------------------------------------------

# What the vLLM preset reads, and where (each in the PyPI sdists of every release from 0.11.0 to 0.33.0 but 0.15.x,
# which PyPI has as wheels only: 0.15.x is taken as 0.16.0, and a preset note says so).
VLLM_NEWEST = (0, 33, 0)
VLLM_BATCH_TIER_160_GIB_SINCE = (0, 28, 0)  # get_batch_defaults: >= 160 GiB -> 16384 / 1024 (B200, B300)
VLLM_MEMORY_UTILIZATION_092_SINCE = (0, 20, 0)  # CacheConfig.gpu_memory_utilization 0.9 -> 0.92
VLLM_FULL_PROMPT_ADMISSION_SINCE = (0, 19, 0)  # SchedulerConfig.scheduler_reserve_full_isl = True
VLLM_MLA_BLOCK_FROM_BACKEND_SINCE = (0, 18, 0)  # platforms/cuda.py no longer forces FlashMLA's 64 / CUTLASS's 128
# --async-scheduling: experimental from v0.10.0 (SchedulerConfig.async_scheduling: bool = False through v0.13.0), on
# by default from v0.14.0 (Field(default=None), resolved by VllmConfig.__post_init__: `_vllm_async_default`).
VLLM_ASYNC_SCHEDULING_SINCE = (0, 10, 0)
# --stream-interval (vllm/config/scheduler.py, in the 0.11.1 and 0.11.2 wheels, not 0.11.0's): the output processor
# (v1/engine/output_processor.py) sends a request's first token, then whenever N more have come, and its end
VLLM_STREAM_INTERVAL_SINCE = (0, 11, 1)
VLLM_ASYNC_SCHEDULING_DEFAULT_SINCE = (0, 14, 0)
VLLM_ASYNC_WITH_PIPELINE_SINCE = (0, 15, 0)  # __post_init__ no longer turns it off for PP > 1 (v0.16.0; 0.15 as 0.16)
VLLM_ASYNC_WITH_DRAFT_MODEL_SINCE = (0, 28, 0)  # ... nor for a draft model


def _vllm_batch_defaults(gpu, version: tuple[int, ...]) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) of vLLM's OpenAI server: vllm/engine/arg_utils.py
    EngineArgs.get_batch_defaults (v0.11.0: inline in _set_default_args; pinned by tests/engine/test_arg_utils.py):
    a GPU with >= 70 GiB (total memory, 2^30 bytes) that is not an A100 gets 8192 / 1024, any other 2048 / 256; from
    v0.28.0 one with >= 160 GiB gets 16384 / 1024 first, whatever its name (v0.33.0 also keeps the GB10, compute
    capability 12.1, on the small tier)."""
    if version >= VLLM_BATCH_TIER_160_GIB_SINCE and gpu.hbm_bytes >= 160 * GIB:
        return 16384, 1024
    big = gpu.hbm_bytes >= 70 * GIB and "a100" not in gpu.name.lower()
    if version >= (0, 33) and gpu.compute_capability == (12, 1):
        big = False
    return (8192, 1024) if big else (2048, 256)


def _vllm_mla_block_size(ctx: Context) -> tuple[int, str] | None:
    """The KV block size vLLM forces for an MLA model (DeepSeek-V2/V3/R1) on CUDA, with why; None where it keeps 16
    (vllm/platforms/cuda.py CudaPlatformBase.check_and_update_config): to v0.17.x, FlashMLA's 64 on Hopper (compute
    capability 9.x; from v0.11.1 the backend chosen is FlashAttention-MLA, which takes any multiple of 16, but the
    FlashMLA branch still forces 64); on Blackwell (10.x) CUTLASS MLA's 128 to v0.14.x, then (v0.16.0) FlashInfer MLA's
    64 where qk_nope_head_dim is 128, else CUTLASS's 128. From v0.18.0 the block size is the backend's preferred one:
    16 for FlashAttention-MLA on Hopper, 32 (the smallest FlashInfer MLA takes) on Blackwell. Other GPUs: 16."""
    model, cc = ctx.model, ctx.gpu.compute_capability
    if model is None or model.attention != "mla" or cc is None:
        return None
    v = ctx.version
    if cc[0] == 9 and v < VLLM_MLA_BLOCK_FROM_BACKEND_SINCE:
        return 64, "FlashMLA's block size, forced on Hopper"
    if cc[0] != 10:
        return None
    if v >= VLLM_MLA_BLOCK_FROM_BACKEND_SINCE:
        return 32, "FlashInfer MLA's smallest block size on Blackwell"
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
    if ctx.model is None or not isinstance(q, dict) or q.get("weights") != "mxfp4":
        return {}
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


# vLLM's custom all-reduce (vllm/distributed/device_communicators/custom_all_reduce.py, CustomAllreduce, read in the
# stored vLLM source): _SUPPORTED_WORLD_SIZES [2, 4, 6, 8]; off on more than two GPUs that NVLink does not join all
# together ("Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs"); off with
# --disable-custom-all-reduce. Its all-reduces are then NCCL's. SGLang's copy (python/sglang/srt/distributed/
# device_communicators/custom_all_reduce.py, "Adapted from" vLLM v0.6.4's) keeps the sizes, and its should_custom_ar
# runs the kernel only on 2 GPUs or full NVLink.
CUSTOM_ALL_REDUCE_WORLD_SIZES = (2, 4, 6, 8)


def _custom_all_reduce(ctx: Context, engine: str) -> dict[str, Any]:
    """`hardware.all_reduce` nccl where vLLM's custom all-reduce (or SGLang's copy) turns itself off or is turned
    off (the flag `disable_custom_all_reduce`); {} where it runs (the default, custom)."""
    tp, off = ctx.tensor_parallel, ctx.flags.get("disable_custom_all_reduce")
    if off and _get(ctx.raw, "hardware.all_reduce") == CUSTOM_ALL_REDUCE:
        raise ConfigError(f"engine.disable_custom_all_reduce: true contradicts hardware.all_reduce 'custom'; allowed: "
                          f"give one of them, or hardware.all_reduce '{NCCL_ALL_REDUCE}' ({engine})")
    pcie_only = interconnect_class(ctx.gpu) == "pcie"
    if off or (tp > 1 and tp not in CUSTOM_ALL_REDUCE_WORLD_SIZES) or (tp > 2 and pcie_only):
        return {"hardware.all_reduce": NCCL_ALL_REDUCE}
    return {}


def _derive_vllm(ctx: Context) -> PresetResult:
    """vLLM V1 (0.8+) as vllm/engine/arg_utils.py, vllm/config and vllm/platforms/cuda.py derive it, read in the PyPI
    sdist of every release from 0.11.0 to 0.33.0 (0.15.x as 0.16.0): chunked prefill with decodes and prefill chunks
    in one step, the OpenAI server's batch tiers by GPU memory (`_vllm_batch_defaults`), 16-token KV blocks (an MLA
    model: its kernel's, `_vllm_mla_block_size`), gpu_memory_utilization 0.9 (0.92 from 0.20), async scheduling by
    default from 0.14; V0 (0.6-0.7) as each release does (`_vllm_v0_schedule`): prefill-only steps unless chunked
    (on by default above a 32k context), multi-step decoding; NCCL's all-reduce where its own turns off
    (`_custom_all_reduce`)."""
    v, flags = ctx.version, ctx.flags
    values: dict[str, Any] = {"scheduler.batching": "continuous", "kv_cache.layout": "paged",
                              "kv_cache.block_size": 16, "kv_cache.gpu_memory_utilization": 0.9}
    notes: list[str] = []
    v1 = v >= (0, 8)
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
        values.update({"scheduler.chunked_prefill": True, "scheduler.mixed_batches": True,
                       "scheduler.max_num_batched_tokens": mnbt, "scheduler.max_num_seqs": seqs,
                       # V1 caches prefixes unless told not to (--no-enable-prefix-caching): prompts that share
                       # content ids (a chat template's lead, a shared system prompt) reuse its blocks
                       "kv_cache.enable_prefix_caching": _caches_prefixes(ctx, notes, f"vLLM {ctx.version_text}")})
        if v < (0, 11):
            notes.append(f"vLLM {ctx.version_text}: v0.11.0's batch defaults assumed")
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
        mla = _vllm_mla_block_size(ctx)
        if mla is not None:
            values["kv_cache.block_size"] = mla[0]
            notes.append(f"vLLM {ctx.version_text}: KV block size {mla[0]} for an MLA model on {ctx.gpu.name} "
                         f"({mla[1]}; vllm/platforms/cuda.py)")
        if v >= VLLM_MEMORY_UTILIZATION_092_SINCE:
            values["kv_cache.gpu_memory_utilization"] = 0.92
            notes.append(f"vLLM {ctx.version_text}: gpu_memory_utilization 0.92; the memory vLLM sets aside for CUDA "
                         "graphs (profiled from v0.20.0) is not taken from the KV budget")
    else:
        values.update(_vllm_v0_schedule(ctx, notes))
    values.update(_vllm_window_memory(ctx, notes))
    values.update(_vllm_expert_padding(ctx, notes))
    values.update(_engine_terms(ctx, "vllm", notes, _inbound_work(ctx, "vllm", notes)))
    values.update(_custom_all_reduce(ctx, "vLLM"))
    if flags.get("enforce_eager"):  # no CUDA graphs: the eager launch term (sim/cost/overhead.py)
        values["cost_model.overhead"] = {**values["cost_model.overhead"], "engine": "vllm-eager"}
    _vllm_executor_backend(ctx)
    asked = flags.get("async_scheduling")
    if asked and v < VLLM_ASYNC_SCHEDULING_SINCE:
        raise ConfigError(f"engine.async_scheduling: true is not a flag of vLLM {ctx.version_text}; allowed: "
                          f"vLLM {_dotted(VLLM_ASYNC_SCHEDULING_SINCE)} or later, or leave it out")
    if asked is None and v >= VLLM_ASYNC_SCHEDULING_DEFAULT_SINCE:
        asked, why = _vllm_async_default(ctx)
        notes.append(f"vLLM {ctx.version_text}: async scheduling {why} (vllm/config/vllm.py)")
    if asked:
        # the engine core schedules step N + 1 while the GPU runs step N (vllm/v1/engine/core.py
        # step_with_batch_queue): a step takes the longer of its kernels and the CPU terms (sim/cost/overhead.py)
        values["cost_model.overhead"] = {**values["cost_model.overhead"], "overlap": True}
        named = "--async-scheduling" if flags.get("async_scheduling") else "async scheduling"
        notes.append(f"vLLM {named}: the CPU terms (fitted on runs without it) overlap the GPU's step")
    values.update(_vllm_blocks_override(ctx, values["kv_cache.block_size"], notes))
    return PresetResult(values, {}, notes)


# vLLM's executors (ParallelConfig.__post_init__ in vllm/config.py to 0.10.2, vllm/config/parallel.py from 0.11.0, read
# in the PyPI sdist of every release 0.6.0-0.33.0): on one node `mp` (a worker process per GPU) where TP x PP > 1,
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


def _vllm_blocks_override(ctx: Context, preset_block: int, notes: list[str]) -> dict[str, Any]:
    """--num-gpu-blocks-override: the KV cache holds that many blocks, whatever the memory would hold (V0's
    llm_engine.py _initialize_kv_caches, V1's v1/core/kv_cache_utils.py may_override_num_blocks: "Overriding
    num_gpu_blocks=%d with num_gpu_blocks_override=%d"; read in 0.6.0, 0.11.0, 0.19.0 and 0.33.0), as
    `kv_cache.capacity_tokens` (the blocks x the block size); refused for a model with sliding-window layers, whose
    blocks vLLM shares between its KV cache groups."""
    blocks = ctx.flags.get("num_gpu_blocks_override")
    if blocks is None:
        return {}
    if ctx.model is not None and ctx.model.hybrid_window:
        raise ConfigError(f"engine.num_gpu_blocks_override: {blocks} is not modelled for {ctx.model.name}'s "
                          "sliding-window layers (vLLM shares the blocks between its KV cache groups); allowed: leave "
                          "it out, or kv_cache.capacity_tokens")
    block = ctx.flags.get("block_size") or _get(ctx.raw, "kv_cache.block_size") or preset_block
    notes.append(f"vLLM --num-gpu-blocks-override {blocks}: {blocks * block:,} KV tokens ({block}-token blocks), "
                 "whatever the memory would hold")
    return {"kv_cache.capacity_tokens": blocks * block}


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
    caching = ctx.flags.get("enable_prefix_caching", _get(ctx.raw, "kv_cache.enable_prefix_caching"))
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
    given = ctx.flags.get("enable_chunked_prefill", _get(ctx.raw, "scheduler.chunked_prefill"))
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
        # client gets a prompt's first token alone (a prefill runs one step), then one chunk per run
        values[STREAM_CHUNK_KEY] = steps
    if chunked and steps == 1:
        values["scheduler.max_num_batched_tokens"] = 2048 if v >= VLLM_V0_CHUNK_BUDGET_2048_SINCE else 512
    elif max_len is not None:
        values["scheduler.max_num_batched_tokens"] = max(max_len, 2048)
    if chunked and why is not None:  # also when given: the scenario written back (to_yaml) keeps the same notes
        notes.append(f"vLLM {text}: {why}")
    read_in = "its own PyPI sdist" if v[:3] in VLLM_V0_SDISTS_READ else "the 0.7.0 and 0.7.3 sdists, which agree"
    notes.append(f"vLLM {text} (V0): defaults read in {read_in} (vllm/engine/arg_utils.py, vllm/config.py)")
    return values


def _vllm_async_default(ctx: Context) -> tuple[bool, str]:
    """Whether vLLM >= 0.14 schedules asynchronously when not told (vllm/config/vllm.py VllmConfig.__post_init__):
    yes, unless pipeline parallelism (v0.14.x only; from v0.31.0 again, but only on the V1 model runner, which the
    V2 runner replaced as the default for nearly every model in v0.29.0), or speculative decoding by a draft model
    (ServeSim's speculation) before v0.28.0. An executor other than mp/uni also turns it off; ServeSim models one
    node's."""
    v = ctx.version
    if ctx.pipeline_parallel > 1 and v < VLLM_ASYNC_WITH_PIPELINE_SINCE:
        return False, "off (not with pipeline_parallel_size > 1 in v0.14.x)"
    if ctx.raw.get("speculation") is not None and v < VLLM_ASYNC_WITH_DRAFT_MODEL_SINCE:
        return False, "off (not with draft-model speculative decoding before v0.28.0)"
    return True, "on by default"


_VLLM_FLAGS = {
    "max_num_seqs": Flag("scheduler.max_num_seqs", int, "--max-num-seqs"),
    "max_num_batched_tokens": Flag("scheduler.max_num_batched_tokens", int, "--max-num-batched-tokens"),
    "max_model_len": Flag("scheduler.max_model_len", int, "--max-model-len"),
    "gpu_memory_utilization": Flag("kv_cache.gpu_memory_utilization", (int, float), "--gpu-memory-utilization"),
    "block_size": Flag("kv_cache.block_size", int, "--block-size"),
    "num_gpu_blocks_override": Flag(None, int, "--num-gpu-blocks-override: the KV cache's blocks, as given "
                                    "(kv_cache.capacity_tokens)", _at_least_one("num_gpu_blocks_override")),
    "enable_chunked_prefill": Flag("scheduler.chunked_prefill", bool, "--enable-chunked-prefill"),
    # in vllm/engine/arg_utils.py to 0.10.0, gone in 0.10.1 (every sdist 0.6.0-0.33.0)
    "num_scheduler_steps": Flag("scheduler.decode_steps_per_schedule", int, "--num-scheduler-steps (V0)",
                                until=(0, 10, 1)),
    "enable_prefix_caching": Flag("kv_cache.enable_prefix_caching", bool, "--enable-prefix-caching"),
    "tensor_parallel_size": Flag("hardware.tensor_parallel", int, "--tensor-parallel-size", aliases=("-tp",)),
    "pipeline_parallel_size": Flag("hardware.pipeline_parallel", int, "--pipeline-parallel-size", aliases=("-pp",)),
    # vllm/engine/arg_utils.py (0.6.0: auto, fp8, fp8_e5m2, fp8_e4m3) and vllm/config/cache.py CacheDType (0.11.0 adds
    # bfloat16)
    "kv_cache_dtype": Flag("quantization.kv_cache", str, "--kv-cache-dtype: auto (the model's dtype), fp8, fp8_e4m3, "
                           "fp8_e5m2 or bfloat16",
                           _kv_cache_dtype(("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"))),
    "enforce_eager": Flag(None, bool, "--enforce-eager: the eager launch term instead of CUDA graphs"),
    "distributed_executor_backend": Flag(None, str, "--distributed-executor-backend: the default for the GPUs "
                                         "(mp for several, uni for one), the executor the CPU terms were fitted with"),
    # vllm/engine/arg_utils.py: fcfs (the default of every release that has it) or priority, which orders by a
    # request's priority field, which the workload does not set
    "scheduling_policy": Flag(None, str, "--scheduling-policy: fcfs, the default", _only_default("scheduling_policy",
                                                                                              "fcfs"),
                              since=(0, 6, 3)),
    "disable_custom_all_reduce": Flag(None, bool, "--disable-custom-all-reduce: NCCL's all-reduce "
                                      "(hardware.all_reduce nccl)"),
    "disable_hybrid_kv_cache_manager": Flag(None, bool, "--disable-hybrid-kv-cache-manager: a hybrid model's sliding "
                                            "layers keep every token's KV", since=VLLM_HYBRID_KV_SINCE),
    "async_scheduling": Flag(None, bool, "--async-scheduling (0.10+; the default from 0.14, --no-async-scheduling "
                                         "turns it off): the CPU terms overlap the GPU's step"),
    "stream_interval": Flag(STREAM_CHUNK_KEY, int, "--stream-interval: tokens a streamed chunk carries after the "
                            "first (frontend.tokens_per_chunk)", since=VLLM_STREAM_INTERVAL_SINCE),
    # vllm/entrypoints/cli/serve.py run_multi_api_server (0.9.1 on; not in 0.9.0): N API server processes, V1 only
    "api_server_count": Flag("frontend.num_processes", int, "--api-server-count: API server processes "
                             "(frontend.num_processes)", since=(0, 9, 1)),
    # vllm/model_executor/layers/fused_moe/layer.py (0.8.0): ep_size = tp_size x dp_size, moe tp 1, the output
    # all-reduced over the TP group as without it (data parallelism is not modelled: EP = TP)
    "enable_expert_parallel": Flag("hardware.expert_parallel", bool, "--enable-expert-parallel: each GPU of the TP "
                                   "group holds whole experts", since=(0, 8, 0)),
    "dtype": Flag(None, str, "--dtype: auto, half, float16 or bfloat16", _sixteen_bit(("auto", "half", "float16",
                                                                                       "bfloat16"))),
    # vllm/model_executor/layers/quantization/fp8.py Fp8LinearMethod: W8A8 on sm_89+, weight-only Marlin below
    "quantization": Flag("quantization.weights", str, "--quantization: fp8 or mxfp4 (quantization.weights)",
                         _weights_quantization({"fp8": "fp8", "mxfp4": "mxfp4"}), aliases=("-q",)),
}

# What each group of options accepted without effect sets (`engine.command`'s note names them).
SERVER_ADDRESS = "the server's address, HTTP and access settings"
MODEL_FILES = "where the model's files come from and what it is called: the scenario's model is priced"
LOGGING = "logging, whose cost is not modelled"
PARSING = "chat-template and tool-call parsing settings"
SEED = "the sampler's seed (run.seed draws the workload)"
USAGE_REPORTS = "what the responses and endpoints report (token usage, load counters): not priced"


def _inert(about: str, takes: str, *options: str) -> tuple[InertOption, ...]:
    return tuple(InertOption(option, takes, about) for option in options)


# vLLM's options that change nothing simulated, read in the parsers of 0.10.2, 0.11.0 and 0.19.0 (make_arg_parser
# run from their wheels: each option's nargs). --disable-log-requests: from 0.10.1 a deprecated BooleanOptionalAction
# beside --enable-log-requests (request logging is off unless that option, which adds work, is given: not accepted
# here), still parsed in 0.16.0 and gone in 0.17.0 (vllm/engine/arg_utils.py of every PyPI sdist 0.10.1-0.33.0; the
# 0.12.0 cited by vllm-project/vllm#29402's downstream readers is when it was meant to go). vLLM 0.6.0's API server
# (its request log on by default) was measured with the log on and off in turn and did the same work within the noise
# (API_SERVER_WORK): its row serves both. The cost of --disable-log-stats is not modelled.
# --max-logprobs and --guided-decoding-backend bound what a request may ask (logprobs, structured output), which the
# workload does not; --max-parallel-loading-workers loads the weights; --calculate-kv-scales computes an fp8 KV
# cache's scales on the first pass (its bytes are priced by the dtype). Their first and last releases: every sdist
# 0.6.0-0.33.0 (vllm/engine/arg_utils.py).
# --swap-space is CPU memory for swapping out KV, which a single-sequence request's preemption does not use: V0
# recomputes it (vllm/core/scheduler.py _preempt: RECOMPUTE where get_max_num_running_seqs() == 1, SWAP only for
# beam search and n > 1, which ServeSim does not model), V1 allocates no CPU blocks (vllm-project/vllm#27984; the
# option was removed by #36216). Gone from EngineArgs in 0.18.0: present in 0.15.0-0.17.1, absent in 0.18.0-0.29.0
# (every release installed and its EngineArgs signature read: unslothai/unsloth-zoo#1210).
# --use-v2-block-manager (V0), read in the PyPI sdists of 0.6.0-0.6.6, 0.7.0, 0.7.3, 0.8.0, 0.8.5, 0.9.0 and 0.10.0
# (vllm/engine/arg_utils.py): 0.6.0-0.6.2 use block manager v1 unless it is given (or multi-step turns v2 on), 0.6.3
# makes v2 the default, 0.6.4-0.9.x keep the option as a no-op ("[DEPRECATED] block manager v1 has been removed"),
# 0.10.0 has no such option. Both managers hand out the same 16-token blocks of the same profiled pool; what their
# CPU time differs by is in the version's fitted terms.
VLLM_DISABLE_LOG_REQUESTS_UNTIL = (0, 17, 0)
VLLM_CALCULATE_KV_SCALES = ((0, 7, 0), (0, 28, 0))  # (the first release that has it, the first that refuses it)
VLLM_GUIDED_DECODING_BACKEND_UNTIL = (0, 12, 0)
REQUEST_LIMITS = "limits on what a request may ask (logprobs, structured output), which the workload does not ask"
VLLM_SWAP_SPACE_UNTIL = (0, 18, 0)
VLLM_V2_BLOCK_MANAGER_UNTIL = (0, 10, 0)
# The options above and below that came in after 0.6.0: the first release that has each, read in the PyPI sdist of
# every release from 0.6.0 to 0.33.0 (vllm/engine/arg_utils.py; the API server's options in
# vllm/entrypoints/openai/cli_args.py, from 0.10 the fields of its FrontendArgs dataclass, whose file moved to
# entrypoints/launchers/cli_args.py in 0.29.0 and entrypoints/common/cli_args.py in 0.33.0). Every option below is
# in each release from its first to 0.33.0.
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
_VLLM_INERT = tuple(dataclasses.replace(option, since=_VLLM_INERT_SINCE.get(option.option, option.since))
                    for option in (
    _inert(SERVER_ADDRESS, "one", "--host", "--port", "--uvicorn-log-level", "--root-path", "--ssl-keyfile",
           "--ssl-certfile", "--allowed-origins", "--allowed-methods", "--allowed-headers", "--uds", "--ssl-ca-certs",
           "--ssl-cert-reqs", "--ssl-ciphers", "--h11-max-incomplete-event-size", "--h11-max-header-count",
           "--disable-access-log-for-endpoints")
    + _inert(SERVER_ADDRESS, "none", "--enable-ssl-refresh", "--enable-request-id-headers", "--enable-offline-docs")
    + _inert(SERVER_ADDRESS, "many", "--api-key")
    + _inert(SERVER_ADDRESS, "none", "--allow-credentials", "--disable-uvicorn-access-log", "--disable-fastapi-docs")
    + _inert(MODEL_FILES, "one", "--model", "--tokenizer", "--revision", "--tokenizer-revision", "--code-revision",
             "--download-dir", "--load-format", "--tokenizer-mode", "--config-format", "--generation-config")
    + _inert(MODEL_FILES, "many", "--served-model-name")
    + _inert(MODEL_FILES, "optional", "--hf-token")
    + _inert(MODEL_FILES, "none", "--trust-remote-code")
    + _inert(LOGGING, "none", "--disable-log-stats")
    + (InertOption("--disable-log-requests", "none", "request logging off: vLLM 0.6.0's API server measured the "
                   "same with its log on and off (API_SERVER_WORK)", until=VLLM_DISABLE_LOG_REQUESTS_UNTIL),
       InertOption("--swap-space", "one", "CPU swap space, which a single-sequence request's preemption does not "
                   "use (V0 recomputes it, V1 does not swap)", until=VLLM_SWAP_SPACE_UNTIL),
       InertOption("--use-v2-block-manager", "none", "V0's block manager v2, which hands out the same blocks as v1 "
                   "(the default from 0.6.3, a no-op from 0.6.4)", until=VLLM_V2_BLOCK_MANAGER_UNTIL))
    + _inert(LOGGING, "one", "--max-log-len", "--log-config-file")
    + _inert(LOGGING, "none", "--log-error-stack")
    # token usage in a reply: at most one more chunk a request with --enable-force-include-usage (`vllm bench serve`
    # asks for it anyway: stream_options include_usage)
    + _inert(USAGE_REPORTS, "none", "--enable-prompt-tokens-details", "--enable-server-load-tracking",
             "--enable-tokenizer-info-endpoint", "--enable-force-include-usage")
    + _inert(REQUEST_LIMITS, "one", "--max-logprobs")
    + (InertOption("--guided-decoding-backend", "one", REQUEST_LIMITS, until=VLLM_GUIDED_DECODING_BACKEND_UNTIL),
       InertOption("--calculate-kv-scales", "none", "an fp8 KV cache's scales computed on the first pass (its bytes "
                   "are priced by the dtype)", since=VLLM_CALCULATE_KV_SCALES[0], until=VLLM_CALCULATE_KV_SCALES[1]))
    + _inert(MODEL_FILES, "one", "--max-parallel-loading-workers")
    + _inert(PARSING, "one", "--chat-template", "--response-role", "--tool-call-parser", "--reasoning-parser",
             "--chat-template-content-format", "--tool-parser-plugin")
    + _inert(PARSING, "none", "--enable-auto-tool-choice", "--exclude-tools-when-tool-choice-none",
             "--trust-request-chat-template")
    + _inert(SEED, "one", "--seed")
    + (InertOption("--disable-cascade-attn", "none", "cascade attention off, as priced (vLLM uses it only when every "
                   "running request shares a long prefix)", since=(0, 8, 2)),)))


# --- SGLang ----------------------------------------------------------------------------------------------

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
# included; it has no overlap scheduler (its CPU terms are its own fit's, engine_terms.json).
SGLANG_030_MEM_FRACTION_BY_TP = ((16, 0.79), (8, 0.83), (4, 0.85), (2, 0.87), (1, 0.88))
SGLANG_030_MAX_NUM_REQS = 5120
# 0.3.0's new-token ratio (global_config.py, tp_worker.py): it starts at 0.7 whatever --schedule-conservativeness,
# falls by 0.001 a decode step to 0.1 x schedule_conservativeness (at most 1).
SGLANG_030_INIT_NEW_TOKEN_RATIO, SGLANG_030_BASE_MIN_NEW_TOKEN_RATIO, SGLANG_030_RATIO_DECAY = 0.7, 0.1, 0.001


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
    values = _sglang_batches(ctx, flags, chunk, notes)
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
    values.update(_engine_terms(ctx, "sglang", notes))
    graph_bs = min(_sglang_given_graph_bs(flags) or SGLANG_030_GRAPH_MAX_BS, SGLANG_030_GRAPH_MAX_BS)  # its list's end
    values["cost_model.overhead"].update(_sglang_graphs(ctx, graph_bs, False, notes))
    values.update(_custom_all_reduce(ctx, "SGLang"))
    if ctx.model is not None and ctx.model.hybrid_window:  # no hybrid SWA memory before 0.5
        values["kv_cache.window_memory"] = "every_token"
        notes.append(f"SGLang {ctx.version_text}: {ctx.model.name}'s sliding layers keep every token's KV")
    return PresetResult(values, {}, notes)


def _caches_prefixes(ctx: Context, notes: list[str], engine: str) -> bool:
    """Whether the preset turns on `kv_cache.enable_prefix_caching`, as an engine that caches prefixes by default:
    yes, but for a model whose every layer slides, where ServeSim keeps a sequence's windowed blocks under prefix
    caching (docs/scenarios.md, sliding windows) that the engine frees: there the window's freeing is kept, noted."""
    model = ctx.model
    if model is not None and model.sliding_window is not None and not model.hybrid_window:
        notes.append(f"{engine}: prefix caching left off for {model.name}, whose every layer slides (ServeSim frees "
                     "no windowed blocks under prefix caching); kv_cache.enable_prefix_caching turns it on")
        return False
    return True


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
        values["kv_cache.enable_prefix_caching"] = _caches_prefixes(ctx, notes, f"SGLang {ctx.version_text}")
    return values


# SGLang sizes its KV pool as the memory free once the weights are loaded, less (1 - mem_fraction_static) of the
# GPU's (model_runner.py profile_max_num_token: rest_memory = available_gpu_memory - total_gpu_memory x (1 -
# mem_fraction_static), read in the 0.3.0, 0.5.3.post3 and, as kv_cache_configurator.py _profile_available_bytes,
# 0.5.23 wheels): no forward pass is profiled, and the activations run in the memory mem_fraction_static leaves out
# (its reserved memory: 1.5 x the chunk and the CUDA graphs' batch, `_derive_sglang`).
SGLANG_PROFILES_ACTIVATIONS = False


def _sglang_profiles_activations(ctx: Context) -> bool:
    """`kv_cache.profile_activations` as a scenario sets it, else SGLang's (SGLANG_PROFILES_ACTIVATIONS)."""
    given = _get(ctx.raw, "kv_cache.profile_activations")
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
    kv_tokens = _kv_tokens(ctx, fraction, token_budget, cap, window, _sglang_profiles_activations(ctx))
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
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
             *range(1280, 4097, 256), *range(4608, max_tokens + 1, 512)]
    return sum(1 for size in sizes if size <= max_tokens)


def _sglang_prefill_graph_mib(ctx: Context, chunk: int) -> tuple[float, str | None]:
    """The memory SGLang reserves for its prefill CUDA graphs (MiB), and why none where it captures none."""
    v, mla = ctx.version, ctx.model is not None and ctx.model.attention == "mla"
    if v < SGLANG_PREFILL_GRAPH_SINCE:
        return 0.0, None
    if ctx.pipeline_parallel > 1:
        return 0.0, "off with pipeline parallelism"
    if ctx.flags.get("disable_cuda_graph") and v >= SGLANG_DISABLE_GRAPH_ALL_PHASES_SINCE:
        return 0.0, f"off with --disable-cuda-graph from {_dotted(SGLANG_DISABLE_GRAPH_ALL_PHASES_SINCE)}"
    if ctx.raw.get("speculation") is not None and v < (0, 5, 14):
        return 0.0, "off with speculative decoding before 0.5.14"
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


def _sglang_before_053(ctx: Context, gpu_mib: float, given_graph_bs: int | None) -> tuple[float, int, int]:
    """(mem_fraction_static, chunked_prefill_size, the largest decode graph) by SGLang 0.4.0-0.5.3rc0's own rules
    (the comment above SGLANG_TP_FRACTIONS)."""
    def before(bound) -> bool:
        return _released_before(ctx.version, ctx.version_text, bound)

    parallel = ctx.tensor_parallel * ctx.pipeline_parallel
    def by_size(size: int) -> float:
        return next(f for at_least, f in SGLANG_TP_FRACTIONS if size >= at_least)

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
    default = (80 if ctx.tensor_parallel >= 4 and not before("0.4.0.post1") else 8) if small else graphs
    return fraction, chunk, min(default if given_graph_bs is None else given_graph_bs, graphs)


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
    from sim.cost.overhead import ENGINE_DEFAULTS
    disabled = bool(ctx.flags.get("disable_cuda_graph"))
    if disabled:
        steps = "decode and prefill" if ctx.version >= SGLANG_DISABLE_GRAPH_ALL_PHASES_SINCE else "decode"
        kept = " (its prefill CUDA graphs stay, as the version keeps them)" if prefill_graphs else ""
        notes.append(f"SGLang {ctx.version_text} --disable-cuda-graph: its {steps} steps run without CUDA "
                     f"graphs{kept}: the eager launch term (cost_model.overhead.launch_per_layer_s, an estimate)")
    return {"launch_per_layer_s": ENGINE_DEFAULTS["vllm-eager"].launch_per_layer_s,
            "graph_max_seqs": 0 if disabled else graph_bs, "graph_prefill": prefill_graphs}


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
# less KV memory. dp_size > 1 (attention data-parallel over the TP group) is not modelled; 0.5.14 and later resolve
# the flags another way (arg_groups), not read here.
SGLANG_DP_ATTENTION_READ = ((0, 5, 3), (0, 5, 13))


def _sglang_dp_attention_mib(ctx: Context, graph_bs: int, notes: list[str]) -> float:
    """The MiB SGLang's memory rule reserves for --enable-dp-attention (above) at a decode graph batch of `graph_bs`,
    0 without the flag; ConfigError where the flags ask for what is not modelled."""
    dp = ctx.flags.get("dp_size", 1)
    if dp != 1:
        raise ConfigError(f"engine.dp_size: {dp} is not modelled; allowed: 1 (SGLang's data-parallel workers and its "
                          "attention data parallelism are not simulated)")
    if not ctx.flags.get("enable_dp_attention", False):
        return 0.0
    first, last = SGLANG_DP_ATTENTION_READ
    if not first <= ctx.version[:3] <= last:
        raise ConfigError(f"engine.enable_dp_attention: true is not modelled for SGLang {ctx.version_text}; allowed: "
                          f"SGLang {_dotted(first)} to {_dotted(last)}, where it was read")
    reserved = "" if "mem_fraction_static" in ctx.flags else (
        ", after its memory rule reserved 3 MiB per decode graph batch slot for it (4.5 above 300): less KV")
    notes.append(f"SGLang {ctx.version_text}: --enable-dp-attention without --dp (dp_size 1) is turned off "
                 f"(server_args.py _handle_data_parallelism), attention stays tensor-parallel{reserved}")
    return graph_bs * 3 + (graph_bs * 1.5 if graph_bs > 300 else 0.0)  # x dp_size, which is 1 here


def _derive_sglang(ctx: Context) -> PresetResult:
    """python/sglang/srt/server_args.py ServerArgs._handle_gpu_memory_settings and model_runner.py (max_num_reqs),
    read in the PyPI wheels of every release from 0.5.3 to 0.5.23: chunked_prefill_size and the decode cuda-graph
    batch by GPU memory (SGLANG_MEMORY_TIERS: 8192 and 256 at TP < 4, else 512, on a 60-160 GiB GPU; 16384 and 512 on
    a B200), mem_fraction_static = (memory - reserved) / memory with reserved = 512 + 1.5 x chunk + 2 x graph batch +
    tp x pp / 8 x 1024 MiB + the prefill graphs' memory (from 0.5.10), at least 10240 MiB on a GPU over 60 GiB;
    max_running_requests = min(max(kv_tokens / context_len x 512, 2048), 4096, kv_tokens // 2), page_size 1; separate
    prefill and decode batches (enable_mixed_chunk off), SGLang's new-token ratio for admission; NCCL's all-reduce
    where its own turns off (`_custom_all_reduce`). SGLang 0.4.0-0.5.3rc0: their own memory, chunk and graph rules
    (`_sglang_before_053`); 0.3.x: `_derive_sglang_030`."""
    if ctx.version[:2] == (0, 3):
        return _derive_sglang_030(ctx)
    flags, gpu = ctx.flags, ctx.gpu
    notes: list[str] = []
    gpu_mib = gpu.hbm_bytes / 2**20
    given_graph_bs = _sglang_given_graph_bs(flags)
    old_rules = _released_before(ctx.version, ctx.version_text, (0, 5, 3))
    if old_rules:  # 0.4.0-0.5.3rc0: the memory and graphs by their own rules, no reservation formula
        old_fraction, tier_chunk, graph_bs = _sglang_before_053(ctx, gpu_mib, given_graph_bs)
    else:
        tier_chunk, graph_bs = _sglang_memory_tier(ctx, gpu_mib)
        graph_bs = graph_bs if given_graph_bs is None else given_graph_bs
    dp_attention_mib = _sglang_dp_attention_mib(ctx, graph_bs, notes)  # the decode graphs' batch, as SGLang reserves it
    chunk = flags.get("chunked_prefill_size", tier_chunk)
    values = _sglang_batches(ctx, flags, chunk, notes)
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
        fraction = round((gpu_mib - reserved) / gpu_mib, 3)
    values["kv_cache.gpu_memory_utilization"] = fraction
    values.update(_sglang_memory_rule(ctx, notes))
    conservativeness = flags.get("schedule_conservativeness", 1.0)
    init = min(SGLANG_INIT_NEW_TOKEN_RATIO * conservativeness, 1.0)
    values["scheduler.new_token_ratio"] = {"init": init, "min": min(init * SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR, 1.0),
                                           "decay_steps": SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS}
    values.update(_sglang_window_memory(ctx, notes))
    from sim.model.memory import WINDOW_POOL_RATIO
    window = {"window_memory": values["kv_cache.window_memory"],
              "window_pool_ratio": flags.get("swa_full_tokens_ratio", WINDOW_POOL_RATIO)}
    if token_cap is not None and window["window_memory"] == "own_pool" and ctx.model is not None \
            and ctx.model.hybrid_window:
        raise ConfigError(f"engine.max_total_tokens: {token_cap} is not modelled for {ctx.model.name}'s own "
                          "sliding-window pool (SGLang splits the cap between its two pools); allowed: leave it out, "
                          "or kv_cache.capacity_tokens")
    slots, kv_tokens = _sglang_request_slots(ctx, fraction, values["scheduler.max_num_batched_tokens"], 4096, notes,
                                             window)
    capped = _sglang_token_cap(ctx, kv_tokens, notes)
    if capped is not None:
        values["kv_cache.capacity_tokens"] = kv_tokens = capped
        if _sglang_reqs_from_capped(ctx):
            slots = _sglang_pool_slots(ctx, capped, 4096)
    running = flags.get("max_running_requests")
    if running is None:
        values["scheduler.max_num_seqs"] = min(slots, kv_tokens // 2) if kv_tokens is not None else slots
    else:
        cap = _sglang_given_running_cap(ctx.version, slots, kv_tokens)
        if cap is not None and running > cap:
            notes.append(f"SGLang {ctx.version_text}: --max-running-requests {running} is above the {cap} the engine "
                         "allows here (model_runner's request pool); the value given is simulated")
    values.update(_engine_terms(ctx, "sglang", notes, _inbound_work(ctx, "sglang", notes)))
    prefill_graphs = ctx.version >= SGLANG_PREFILL_GRAPH_SINCE and why_not is None
    values["cost_model.overhead"].update(_sglang_graphs(ctx, graph_bs, prefill_graphs, notes))
    values.update(_custom_all_reduce(ctx, "SGLang"))
    return PresetResult(values, {}, notes)


_SGLANG_FLAGS = {
    "max_running_requests": Flag("scheduler.max_num_seqs", int, "--max-running-requests"),
    "chunked_prefill_size": Flag(None, int, "--chunked-prefill-size (-1: no chunking)"),
    "max_prefill_tokens": Flag(None, int, "--max-prefill-tokens"),
    "mem_fraction_static": Flag(None, (int, float), "--mem-fraction-static"),
    # since: the first wheel whose server_args.py has the option, read in the PyPI wheels of 0.3.0, every release
    # 0.3.4-0.4.10.post2 (post releases too, 0.4.4's posts not) and 0.5.1-0.5.23
    "page_size": Flag("kv_cache.block_size", int, "--page-size", since=(0, 4, 4)),
    "context_length": Flag("scheduler.max_model_len", int, "--context-length"),
    "enable_mixed_chunk": Flag(None, bool, "--enable-mixed-chunk"),
    "schedule_conservativeness": Flag(None, (int, float), "--schedule-conservativeness"),
    "enable_prefix_caching": Flag("kv_cache.enable_prefix_caching", bool,
                                  "radix cache (on in SGLang unless --disable-radix-cache)"),
    "tp_size": Flag("hardware.tensor_parallel", int, "--tp-size", aliases=("--tensor-parallel-size",)),
    "pp_size": Flag("hardware.pipeline_parallel", int, "--pp-size", since="0.4.6.post2"),
    # server_args.py --kv-cache-dtype choices: auto, fp8_e5m2, fp8_e4m3 (0.5.3.post3; 0.3.0: auto, fp8_e5m2)
    "kv_cache_dtype": Flag("quantization.kv_cache", str, "--kv-cache-dtype: auto (the model's dtype), fp8_e4m3 or "
                           "fp8_e5m2", _kv_cache_dtype(("auto", "fp8_e4m3", "fp8_e5m2"))),
    "disable_custom_all_reduce": Flag(None, bool, "--disable-custom-all-reduce: NCCL's all-reduce "
                                      "(hardware.all_reduce nccl)"),
    "disable_radix_cache": Flag(None, bool, "--disable-radix-cache (no prefix caching)"),
    "disable_hybrid_swa_memory": Flag(None, bool, "--disable-hybrid-swa-memory: a hybrid model's sliding layers keep "
                                      "every token's KV", since="0.4.9.post3"),
    "swa_full_tokens_ratio": Flag("kv_cache.window_pool_ratio", (int, float), "--swa-full-tokens-ratio",
                                  since="0.4.9.post3"),
    "enable_torch_compile": Flag(None, bool, "--enable-torch-compile (0.3.x: noted, not modelled)"),
    "max_total_tokens": Flag(None, int, "--max-total-tokens: caps the KV pool at that many tokens (never raises it; "
                             "kv_cache.capacity_tokens)", _at_least_one("max_total_tokens")),
    "cuda_graph_max_bs": Flag(None, int, "--cuda-graph-max-bs: the largest decode batch run as a CUDA graph (above "
                              "it: the eager launch term); reserves 2 MiB a batch", _at_least_one("cuda_graph_max_bs"),
                              since=(0, 3, 5), until=(0, 5, 20)),
    "cuda_graph_max_bs_decode": Flag(None, int, "--cuda-graph-max-bs-decode: --cuda-graph-max-bs's spelling from "
                                     "0.5.14", _at_least_one("cuda_graph_max_bs_decode"), since=(0, 5, 14)),
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
    "enable_dp_attention": Flag(None, bool, "--enable-dp-attention: without --dp, turned off after reserving memory "
                                "(SGLANG_DP_ATTENTION_READ)", since=(0, 5, 3)),
    "dp_size": Flag(None, int, "--dp-size: data-parallel workers (1 only: more are not modelled)", since=(0, 5, 3)),
    # python/sglang/srt/managers/scheduler_output_processor_mixin.py (0.5.3.post3): a streaming request's output goes
    # out when len(output_ids) % stream_interval == 1, and at its end: the first token alone, then chunks of N;
    # 0.3.0's tp_worker.py: its first token, then every N-th decode step of the batch
    "stream_interval": Flag(STREAM_CHUNK_KEY, int, "--stream-interval: tokens a streamed chunk carries after the "
                            "first (frontend.tokens_per_chunk)"),
    "dtype": Flag(None, str, "--dtype: auto, half, float16 or bfloat16", _sixteen_bit(("auto", "half", "float16",
                                                                                       "bfloat16"))),
    "quantization": Flag("quantization.weights", str, "--quantization: fp8, w8a8_fp8 or mxfp4 (quantization.weights)",
                         _weights_quantization({"fp8": "fp8", "w8a8_fp8": "fp8", "mxfp4": "mxfp4"})),
}

# SGLang's options that change nothing simulated, read in 0.5.5.post1's ServerArgs.add_cli_args (run from its wheel).
# --log-requests and --enable-metrics add work and are not accepted here.
# The options above that came in after 0.3.0: the first release whose server_args.py has each, read in the PyPI
# wheels of 0.3.0, every release 0.3.4-0.4.10.post2 (post releases too, 0.4.4's posts not) and 0.5.1-0.5.3.
_SGLANG_INERT_SINCE = {"--watchdog-timeout": (0, 3, 5), "--decode-log-interval": (0, 3, 5),
                       "--download-dir": (0, 3, 6), "--revision": (0, 4, 0), "--tool-call-parser": (0, 4, 2),
                       "--dist-timeout": "0.4.3.post3", "--reasoning-parser": "0.4.3.post3", "--model": "0.4.8.post1",
                       "--skip-server-warmup": (0, 4, 9)}
_SGLANG_INERT = tuple(dataclasses.replace(option, since=_SGLANG_INERT_SINCE.get(option.option)) for option in (
    _inert(SERVER_ADDRESS, "one", "--host", "--port", "--api-key", "--log-level-http", "--watchdog-timeout",
           "--dist-timeout")
    + _inert(SERVER_ADDRESS, "none", "--skip-server-warmup")
    + _inert(MODEL_FILES, "one", "--model-path", "--model", "--tokenizer-path", "--load-format", "--revision",
             "--download-dir", "--served-model-name", "--tokenizer-mode")
    + _inert(MODEL_FILES, "none", "--trust-remote-code")
    + _inert(LOGGING, "one", "--log-level", "--decode-log-interval")
    + _inert(PARSING, "one", "--chat-template", "--tool-call-parser", "--reasoning-parser")
    + _inert(SEED, "one", "--random-seed")))


# --- TensorRT-LLM ------------------------------------------------------------------------------------------

# 1.3.x (release candidates only) is accepted on the defaults read for earlier versions, said in a note: its
# source is not on PyPI (stub sdists), but AIConfigurator 0.12.0 (sdk/backends/trtllm_backend.py), whose trtllm tables
# are 1.3.0rc20-rc23's, prices it with the same KV fraction and token budget.
TRTLLM_NEWEST = (1, 3, 0)
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


def _derive_trtllm(ctx: Context) -> PresetResult:
    """tensorrt_llm/commands/serve.py get_llm_args and tensorrt_llm/llmapi/llm_args.py (KvCacheConfig
    free_gpu_memory_fraction 0.9, SchedulerConfig capacity_scheduler_policy GUARANTEED_NO_EVICT, chunked prefill
    off) and BuildConfig (max_batch_size 2048, max_num_tokens 8192), read at stored commits of NVIDIA/TensorRT-LLM
    (00209af1, 008b2b8d); 32 tokens per KV block (tokens_per_block). In-flight batching mixes context and
    generation requests in one step."""
    flags = ctx.flags
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
        values["kv_cache.enable_prefix_caching"] = _caches_prefixes(ctx, notes, f"TensorRT-LLM {ctx.version_text}")
    if ctx.version >= TRTLLM_UNREAD_SINCE:
        notes.append(f"TensorRT-LLM {ctx.version_text}: no source of it could be read here (PyPI has stubs only); "
                     "the defaults above assumed, which AIConfigurator 0.12.0's trtllm backend, modelling 1.3.0rc20 "
                     "to rc23, states alike: free_gpu_memory_fraction 0.9, \"not version-dependent\", and "
                     "max_num_tokens 8192")
    values.update(_engine_terms(ctx, "trtllm", notes))
    if "cuda_graph_batch_sizes" in flags:
        values["scheduler.cuda_graph_batch_sizes"] = list(flags["cuda_graph_batch_sizes"])
    if ctx.model is not None and ctx.model.hybrid_window:
        values["kv_cache.window_memory"] = TRTLLM_WINDOW_MEMORY
        notes.append(f"TensorRT-LLM: {ctx.model.name}'s sliding layers keep every token's KV (TRTLLM_WINDOW_MEMORY)")
    return PresetResult(values, {}, notes)


def _policy(value):
    if value not in ("GUARANTEED_NO_EVICT", "MAX_UTILIZATION"):
        raise ConfigError(f"engine.scheduler_policy: {value!r} is not allowed; allowed: GUARANTEED_NO_EVICT, "
                          "MAX_UTILIZATION")
    return value


_TRTLLM_FLAGS = {
    "max_batch_size": Flag("scheduler.max_num_seqs", int, "--max_batch_size"),
    "max_num_tokens": Flag("scheduler.max_num_batched_tokens", int, "--max_num_tokens"),
    "max_seq_len": Flag("scheduler.max_model_len", int, "--max_seq_len"),
    "kv_cache_free_gpu_memory_fraction": Flag(None, (int, float), "--kv_cache_free_gpu_memory_fraction",
                                              aliases=("--free_gpu_memory_fraction",)),
    "tokens_per_block": Flag("kv_cache.block_size", int, "tokens_per_block"),
    "enable_chunked_prefill": Flag(None, bool, "--enable_chunked_prefill"),
    "scheduler_policy": Flag(None, str, "capacity_scheduler_policy", _policy),
    "cuda_graph_batch_sizes": Flag(None, list, "cuda_graph_config.batch_sizes with enable_padding"),
    "tp_size": Flag("hardware.tensor_parallel", int, "--tp_size", aliases=("--tensor_parallel_size",)),
    "pp_size": Flag("hardware.pipeline_parallel", int, "--pp_size", aliases=("--pipeline_parallel_size",)),
    "ep_size": Flag("hardware.expert_parallel", int, "--ep_size (moe_expert_parallel_size; moe tp = tp_size / "
                    "ep_size, without attention data parallelism)", aliases=("--moe_expert_parallel_size",)),
}

# trtllm-serve's options that change nothing simulated, read in tensorrt_llm/commands/serve.py at NVIDIA/TensorRT-LLM
# 00209af1 (click: exact spellings).
_TRTLLM_INERT = (
    _inert(SERVER_ADDRESS, "one", "--host", "--port")
    + _inert(MODEL_FILES, "one", "--tokenizer", "--revision", "--gpus_per_node")
    + _inert(MODEL_FILES, "none", "--trust_remote_code")
    + _inert(LOGGING, "one", "--log_level")
    + _inert(PARSING, "one", "--chat_template", "--tool_parser", "--reasoning_parser"))


# --- LMDeploy (TurboMind) ---------------------------------------------------------------------------------

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
LMDEPLOY_BLOCK_COUNT_UNTIL = (0, 15, 0)  # cache_max_entry_count >= 1: a number of blocks until then, refused since
# lmdeploy/utils.py get_max_batch_size (v0.10.0-v0.16.0): matched in torch's lower-cased device name, else 128
LMDEPLOY_MAX_BATCH_BY_GPU = (("a100", 384), ("a800", 384), ("h100", 1024), ("h800", 1024), ("l20y", 1024),
                             ("h200", 1024))
LMDEPLOY_OTHER_GPU_MAX_BATCH = 128
# The flags of one line only: config.ini keys of v0.1.0a, TurbomindEngineConfig fields of v0.12.0+
_LMDEPLOY_CONFIG_INI_ONLY = ("max_context_token_num", "step_length")
_LMDEPLOY_ENGINE_CONFIG_ONLY = ("max_prefill_token_num", "enable_prefix_caching", "quant_policy", "communicator",
                                "backend", "dtype")


def _derive_lmdeploy(ctx: Context) -> PresetResult:
    """LMDeploy's TurboMind engine: its v0.1.0a0-a1 scheduler (`_derive_turbomind_context_pass`) or its one-pass
    engine of v0.12.0-v0.16.x (`_derive_turbomind_one_pass`); the versions between are refused in one line."""
    text = ctx.version_text.strip().lstrip("v")
    if text in LMDEPLOY_SCHEDULER_VERSIONS:
        for key in _LMDEPLOY_ENGINE_CONFIG_ONLY:
            if key in ctx.flags:
                raise ConfigError(f"engine.{key}: not a config.ini key of lmdeploy {ctx.version_text}; allowed: "
                                  f"leave it out, or engine.version {_dotted(LMDEPLOY_ONE_PASS_SINCE)} or later")
        return _derive_turbomind_context_pass(ctx)
    if ctx.version >= LMDEPLOY_ONE_PASS_SINCE:  # (above the newest: refused by apply_engine_preset)
        for key in _LMDEPLOY_CONFIG_INI_ONLY:
            if key in ctx.flags:
                raise ConfigError(f"engine.{key}: not a flag of lmdeploy {ctx.version_text} (a config.ini key of "
                                  f"0.1.0a); allowed: leave it out, or engine.version 0.1.0a1")
        return _derive_turbomind_one_pass(ctx)
    raise ConfigError(f"engine.version: {ctx.version_text!r} is not a TurboMind scheduler the lmdeploy preset "
                      f"models; allowed: {PRESETS['lmdeploy'].known_versions()} (v0.1.0a2 unified the prefill and "
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
    `scheduler.prefill_context_tokens`)."""
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
    from_flags: dict[str, str] = {}
    if entries >= 1:
        values["kv_cache.capacity_tokens"] = int(entries) * block_len
    else:
        values.update({"kv_cache.free_memory_fraction": entries, "kv_cache.profile_activations": False})
    if _get(ctx.raw, "quantization.kv_cache") == "fp8":  # (quant_policy 8, written in before the derivation: int8)
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
    values.update(_engine_terms(ctx, "lmdeploy", notes))
    _window_memory_not_read(ctx, "LMDeploy", notes)
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
    values.update(_engine_terms(ctx, "lmdeploy", notes))
    # TurboMind all-reduces with NCCL only (src/turbomind/models/llama/LlamaFfnLayer.cc and the attention layers:
    # ftNcclAllReduceSum under an NcclGuard; read at 620236d3, a 2023 commit of the v0.1 line, not at v0.1.0a1's own)
    values["hardware.all_reduce"] = NCCL_ALL_REDUCE
    if ctx.tensor_parallel > 1 and _get(ctx.raw, "hardware.all_reduce") in (None, NCCL_ALL_REDUCE):
        notes.append("LMDeploy: NCCL's all-reduce priced from the NCCL version AIConfigurator measured (the GPU's "
                     "calibrate/measured/<gpu>/nccl/), not the one its build linked (unstated)")
    _window_memory_not_read(ctx, "LMDeploy", notes)
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


_LMDEPLOY_FLAGS = {  # config.ini keys of v0.1.0a; TurbomindEngineConfig fields (--max-batch-size ...) of v0.12.0+
    "max_batch_size": Flag("scheduler.max_num_seqs", int, "config.ini max_batch_size / --max-batch-size: requests "
                           "in the batch (v0.12.0+ default: by GPU, get_max_batch_size)",
                           aliases=("--max-batch-size",)),
    "cache_max_entry_count": Flag(None, (int, float), "config.ini cache_max_entry_count / --cache-max-entry-count: "
                                  "< 1 a fraction of the GPU's memory (v0.1.0a: total; v0.12.0+: free after the "
                                  "weights) for k/v blocks, else the number of blocks (refused from v0.15.0)",
                                  aliases=("--cache-max-entry-count",)),
    "cache_block_seq_len": Flag("kv_cache.block_size", int, "config.ini cache_block_seq_len / "
                                "--cache-block-seq-len: tokens per k/v block", aliases=("--cache-block-seq-len",)),
    "session_len": Flag(None, int, "config.ini session_len / --session-len: the longest sequence",
                        aliases=("--session-len",)),
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
    "dtype": Flag(None, str, "--dtype (v0.12.0+): auto, float16 or bfloat16", _sixteen_bit(("auto", "float16",
                                                                                           "bfloat16"))),
}

# `lmdeploy serve api_server`'s options that change nothing simulated, read in lmdeploy/cli/serve.py and
# lmdeploy/cli/utils.py at v0.16.0. Its argparse takes unambiguous prefixes.
_LMDEPLOY_INERT = (
    _inert(SERVER_ADDRESS, "one", "--server-name", "--server-port", "--proxy-url")
    + _inert(SERVER_ADDRESS, "many", "--allow-origins", "--allow-methods", "--allow-headers", "--api-keys")
    + _inert(SERVER_ADDRESS, "none", "--allow-credentials", "--ssl", "--disable-fastapi-docs")
    + _inert(MODEL_FILES, "one", "--model-name", "--revision", "--download-dir")
    + _inert(MODEL_FILES, "none", "--trust-remote-code")
    + _inert(LOGGING, "one", "--log-level", "--max-log-len")
    + _inert(PARSING, "one", "--chat-template", "--tool-call-parser", "--reasoning-parser"))


PRESETS: dict[str, EnginePreset] = {
    "vllm": EnginePreset("vllm", "vLLM", (0, 6, 0), VLLM_NEWEST, "vllm/engine/arg_utils.py, vllm/config.py",
                         _VLLM_FLAGS, _derive_vllm, inert=_VLLM_INERT,
                         syntax=CommandSyntax(underscores=True, prefixes=True, negation=True)),
    "sglang": EnginePreset("sglang", "SGLang", (0, 3, 0), SGLANG_NEWEST, "python/sglang/srt/server_args.py",
                           _SGLANG_FLAGS, _derive_sglang, inert=_SGLANG_INERT, syntax=CommandSyntax(prefixes=True),
                           decodes_within_budget=False),
    "trtllm": EnginePreset("trtllm", "TensorRT-LLM", (0, 14, 0), TRTLLM_NEWEST, "tensorrt_llm/llmapi/llm_args.py",
                           _TRTLLM_FLAGS, _derive_trtllm, inert=_TRTLLM_INERT),
    "lmdeploy": EnginePreset("lmdeploy", "LMDeploy (TurboMind)", (0, 1, 0), LMDEPLOY_NEWEST,
                             "src/turbomind/models/llama/LlamaBatch.cc (0.1.0a), src/turbomind/engine/scheduler.cc",
                             _LMDEPLOY_FLAGS, _derive_lmdeploy,
                             f"{', '.join(LMDEPLOY_SCHEDULER_VERSIONS)}, {_dotted(LMDEPLOY_ONE_PASS_SINCE)} to "
                             f"{_dotted(LMDEPLOY_NEWEST[:2])}.x", inert=_LMDEPLOY_INERT,
                             syntax=CommandSyntax(prefixes=True)),
}


@lru_cache(maxsize=1)
def _fitted_table() -> dict:
    """The shipped fits (TERMS_PATH). Unreadable is an install without its data (pyproject.toml's package-data), not
    "no fits": refused in one line rather than priced with the estimates."""
    try:
        return json.loads(TERMS_PATH.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ConfigError(f"engine presets: their fitted terms, {TERMS_PATH}, cannot be read ({type(err).__name__}); "
                          "allowed: an install that ships them (the repository, or a wheel built from it)") from None


def fitted_terms(name: str, version: tuple[int, ...]) -> tuple[dict, str] | None:
    """(the fitted numbers, where they come from) for this engine version: each term from its own fit, else from
    the nearest version whose fit identified it (said in the source); None when the engine has none."""
    nearest = _nearest_fits(name, version)
    if not nearest:
        return None
    by_version: dict[tuple[str, bool], list[str]] = {}
    for term, fit in nearest.items():
        by_version.setdefault((fit.version, fit.borrowed), []).append(term)
    parts = []
    for (text, borrowed), terms in by_version.items():
        entry = _fitted_table()["engines"][name][text]
        part = f"fitted on {', '.join(entry.get('fitted_on', [])) or 'no run'} ({name} {text})"
        if len(by_version) > 1:
            part = f"{', '.join(terms)} {part}"
        if borrowed:
            part += f", taken for {name} {_dotted(version)}, {_why_borrowed(name, version, terms)}"
        parts.append(part)
    return {term: fit.value for term, fit in nearest.items()}, "; ".join(parts)


def fit_name(name: str, versions) -> str:
    """How a cost model's label names the fit of an engine's versions (`cost_model.overhead.fitted_for`)."""
    return f"{PRESETS[name].label} {', '.join(versions)}"


def _why_borrowed(name: str, version: tuple[int, ...], terms=()) -> str:
    """Why a version takes `terms` from another version's fit: it has none, or its own did not pin them (left them
    at a bound, or with a 90% range reaching past the bound: `calibrate.engine_fit.not_pinned`)."""
    table = _fitted_table().get("engines", {}).get(name, {})
    own = [entry for v, entry in table.items() if _is_version(_parse_version(v), version)]
    if not own:
        return "which has no fit of its own"
    if any(f"{t} not pinned" in own[0].get("not_pinned", []) for t in terms):
        return "whose own fit did not pin it (its 90% range reaches past the fit's bound)"
    return "whose own fit left it at a bound"


def release_distance(other: tuple[int, ...], version: tuple[int, ...]) -> tuple[int, ...]:
    """How far `other` lies from `version` in release order, as a sort key (smaller is nearer). The same release is
    nearest; then one that shares more leading numbers (0.5.6 is nearer 0.5.3 than 0.4.9 is); then the one whose
    first differing number is closer (for 0.4.6, 0.5.x before 0.7.x; for 1.0.0, 0.11.0 before 0.6.0); then a later
    release before an earlier one (a convention: for 0.4.6, 0.5.x before 0.3.x); then, of releases on one side, the
    one closer in order (for 0.4.6, 0.5.3 before 0.5.5; for 0.6.0, 0.5.5 before 0.5.3)."""
    width = max(len(other), len(version))
    a, b = other + (0,) * (width - len(other)), version + (0,) * (width - len(version))
    if a == b:
        return (0,)
    first = next(i for i in range(width) if a[i] != b[i])
    later = a > b
    rest = a[first + 1:] if later else tuple(-n for n in a[first + 1:])
    return (1, -first, abs(a[first] - b[first]), int(not later), *rest)


def _is_version(parsed: tuple[int, ...] | None, version: tuple[int, ...]) -> bool:
    """Whether a fitted version's parsed text is this version (a shorter text, "0.17", names every 0.17.x)."""
    return parsed is not None and version[:len(parsed)] == parsed


def usable_terms(terms: dict, flags) -> dict:
    """The fitted terms a preset may use: every one but those `flags` name "<term> at bound" or "<term> not pinned"
    (`calibrate.engine_fit.not_pinned`): their runs did not identify them. The one rule for engine_terms.json's
    entries (`at_bound`, `not_pinned` lists) and the published suite's fits (the same names as keys)."""
    flagged = set(flags)
    return {k: v for k, v in terms.items() if f"{k} at bound" not in flagged and f"{k} not pinned" not in flagged}


@dataclass(frozen=True)
class NearestFit:
    """One fitted term as a version's preset takes it: from `version`'s fit (`borrowed`: another version's)."""

    version: str
    value: float
    borrowed: bool


def _nearest_fits(name: str, version: tuple[int, ...]) -> dict[str, NearestFit]:
    """Per term, its fit for this engine version: the version's own, else the nearest fitted version's whose fit
    identified that term (a term the fit left at a bound, or whose 90% range reaches past the bound, was not
    identified by its runs: never used as if it had been); empty when the engine has none. Per term, so that a
    version whose own fit pinned only its CPU time still takes its front-end latency from the nearest version that
    pinned one, not from none.

    A fit that left any term at a bound is lent to no other version: the model could not reproduce its runs, and its
    other terms took up what that one could not (the fits it has happened to, and what they gave: benchmarks/
    RESULTS.md, "A fit left at a bound serves its own version only"). Its own version still uses them."""
    table = _fitted_table().get("engines", {}).get(name, {})
    usable = {v: usable_terms(e.get("terms", {}), [*e.get("at_bound", []), *e.get("not_pinned", [])])
              for v, e in table.items()}
    candidates = [(v, _parse_version(v)) for v in usable]
    candidates = [(text, parsed) for text, parsed in candidates
                  if parsed is not None and (not table[text].get("at_bound") or _is_version(parsed, version))]

    out: dict[str, NearestFit] = {}
    for term in sorted({t for text, _ in candidates for t in usable[text]}):
        having = [(text, parsed) for text, parsed in candidates if term in usable[text]]
        text, parsed = min(having, key=lambda c: (release_distance(c[1], version), c[0]))
        out[term] = NearestFit(text, float(usable[text][term]), not _is_version(parsed, version))
    return out


# The preset's front-end is one fitted delay, and, where a version's API-server work was measured
# (`frontend_work`), that work, which queues; elsewhere nothing in it queues, so a burst of short prompts is
# never front-end bound there, as published ones were. No term that queues is fitted: the published runs disagree on
# how the work queues and leave the host's CPU unstated (benchmarks/results/published-e2e.md, "A fifth source").
FRONTEND_CAPACITY_NOTE = ("front-end: a fitted delay that does not queue, so the API server's capacity is not modelled "
                          "(bursts of short prompts can be front-end bound); frontend.per_request_s adds work that "
                          "queues")
QUEUEING_FRONTEND_TERMS = ("per_request_s", "per_prompt_token_s", "per_output_chunk_s")  # a user's own: no note


@dataclass(frozen=True)
class TemplateParse:
    """vLLM versions whose API server parses the chat template's source anew for every chat request."""

    since: tuple[int, ...]  # the first version that does
    until: tuple[int, ...]  # the first that no longer does
    work_s: float  # one request's parse (seconds of the API server's event loop)
    what: str  # what it runs, as the source names it


# vLLM's OpenAI server renders a /v1/chat/completions request's messages through the model's Jinja chat template,
# synchronously in its event loop: work that queues on the API server process. The render itself is cheap
# (transformers caches the compiled template), but two version ranges also parse the template's source again per
# request, read in vllm/entrypoints/chat_utils.py of 22 releases (PyPI sdists and wheels: 0.6.0, 0.6.3, 0.6.4, 0.6.6,
# 0.7.0, 0.7.3, 0.8.0-0.8.5, 0.9.0-0.9.2, 0.10.0-0.10.2, 0.11.0, 0.11.1, 0.12.0): 0.8.2 to 0.9.1 through
# resolve_chat_template_content_format (cached to 0.8.1, cached again in 0.9.2 by pull request 20065, "6-8 seconds
# delay" for 1,000 requests), and 0.11.0 through resolve_chat_template_kwargs (absent to 0.10.2, cached from 0.11.1).
# Each costs what benchmarks/bench_chat_template.py measured for Qwen3's chat template (4,169 characters) on the
# development machine (AMD EPYC KVM guest, AVX2, CPython 3.11.7, jinja2 3.1.6, 11-30 13:35): the minimum over 3
# processes x 7 rounds (an unloaded core; the median was 12.0 and 33.8 ms); its spread,
# ESTIMATE_RANGES["per_request_s"].
TEMPLATE_PARSES = (
    TemplateParse((0, 8, 2), (0, 9, 2), 7.5e-3, "_detect_content_format: the template parsed, its loops walked"),
    TemplateParse((0, 11, 0), (0, 11, 1), 17.9e-3,
                  "resolve_chat_template_kwargs: the template parsed in a new environment, its undeclared variables "
                  "found"),
)
# gpt-oss's chat requests go through openai_harmony instead of the Jinja template (serving_chat.py use_harmony)
HARMONY_MODEL_TYPES = ("gpt_oss",)


def chat_template_parse(version: tuple[int, ...], model_type: str | None, endpoint: str) -> TemplateParse | None:
    """The per-request template parse a vLLM version's API server does for this model and endpoint, or None: only
    chat requests are rendered through a template, and a harmony model's are not."""
    if endpoint != "chat" or model_type in HARMONY_MODEL_TYPES:
        return None
    return next((p for p in TEMPLATE_PARSES if p.since <= version < p.until), None)


@dataclass(frozen=True)
class ApiServerWork:
    """An engine version's HTTP front-end work that queues, measured by running that version's own server code."""

    engine: str  # the preset: vllm, sglang
    since: tuple[int, ...]  # the first version measured to do it
    until: tuple[int, ...]  # the first version not measured (another front-end, or not run)
    per_request_s: float  # a request's intake: HTTP, the request model, the request log, the RPC send
    per_prompt_token_s: float  # and per prompt token: tokenization, the logged token ids, their pickling
    # one streamed chunk: the response model, its JSON, the SSE write (None: not run). The model streams a chunk a
    # token; V1's and SGLang's servers merge a request's pending tokens into one chunk when behind, so what a loaded
    # server spends a token is what counts: measured with the tokens ahead of the server (0.6.0, whose streams do not
    # merge: a chunk a token)
    per_output_chunk_s: float | None
    discipline: str  # how its process serves a burst of open arrivals (sim/frontend.py): event_loop, fifo
    bench: str  # what measured it
    # the workload endpoints it is taken for: a row measured on /v1/completions alone serves both (a chat request's
    # own work is not measured there); vLLM 0.11.0's and SGLang 0.5.5.post1's were measured on each
    endpoints: tuple[str, ...] = ("completions", "chat")
    # where the figures are another row's times ratios measured in turn with it on one host (seconds measured in
    # another window do not compare): which, said in the preset's note; "" where the row is its own measurement
    scaled_from: str = ""


# vLLM 0.6.0's OpenAI server with its multiprocessing front-end (the default in 0.6.0: AsyncEngineRPCClient, one
# new inproc socket and a cloudpickled RPCGenerateRequest per request, every RequestOutput pickled back), request
# logging on (no --disable-log-requests), run for real from its PyPI wheel on the development machine against a
# stand-in engine (benchmarks/bench_vllm_api_server.py; "AMD EPYC" KVM guest, 2 vCPUs, AVX-512, CPython 3.11.7,
# the API server alone on one core, 11-30 19:05): bursts of 40, 160 and 320 /v1/completions requests of 16 and 900
# prompt tokens (Llama 3's tokenizer), 5 repeats, each request's intake the time the burst's last request reached
# the engine over the burst's size (its requests reach it together, in turn between awaits: processor sharing); the
# medians per cell fitted as per request + per prompt token; a streamed chunk from the API server's CPU time per
# chunk (bursts of 160 streaming 1 and 41 tokens, 3 repeats). vLLM 0.11.0's V1 server the same way (11-30 20:07;
# its AsyncLLM tokenizes and detokenizes in the API server process; the stand-in engine core in that process, the
# ZMQ hop to the real one not measured; its defaults: no request log, uvloop). V1's requests do not all reach the
# engine at the end of a burst as event_loop has them: in six bursts of 320 (12-01 00:12) the first arrived at 21-62%
# of the last one's time, after 0.5-1.3 ms a request shared by all (results/published-e2e.md): event_loop hands a
# burst's first requests over late. vLLM 0.10.2's V1 server the same way (12-01 05:08-05:19, the same machine; in
# bursts of 160 and 320 its first request arrived at 20-48% of the last one's time). Their stand-in core queued a
# request's tokens at once, so the server, behind, merged them (RequestOutputCollector): 20 and 23 us are the CPU per
# token of a loaded server. A chunk a token costs more (12-01 10:55-11:03, another "AMD EPYC" guest, 2 vCPUs, AVX2,
# the stand-in stepping every 50 ms, one EngineCoreOutputs for every running request; the CPU over the chunks the
# clients received, one a token): 136 us (0.11.0) and 106 us (0.10.2) a chunk, which only a server that keeps up
# pays. vLLM 0.11.0's chat endpoint (10:44-10:55, that guest): /v1/chat/completions requests as `vllm bench serve
# --backend openai-chat` sends them, rendered through Qwen3's chat template with 0.11.0's per-request parse cached
# (as 0.11.1 caches it: TEMPLATE_PARSES prices it), fitted as above. Its streaming was not run with the tokens all
# ahead of the server: it takes the completions row's 20 us a token (the two endpoints agreed within the noise
# where both ran: 119 against 136 us a chunk at a step of 50 ms, 80 against 72 us a token at 1 ms).
# SGLang 0.5.5.post1's HTTP front-end the same way (benchmarks/bench_sglang_tokenizer_manager.py, 12-01 06:33-06:40,
# the same machine): its own `launch_server`, whose main process serves HTTP and runs the TokenizerManager (the
# request model, tokenization, the ZMQ send), with its real detokenizer and a stand-in scheduler; bursts of 40, 160
# and 320 /v1/completions requests of 16 and 900 prompt tokens, 3 repeats, fitted as vLLM's.
# Its requests reach the scheduler one by one as each is tokenized, though not one request's work apart: a burst's
# first arrived at 13-35% of the last one's time (medians per cell), where first come, first served hands it over
# after one request's work and event_loop at the end: fifo, the nearer. Its chat endpoint the same way (12-01
# 10:02-10:14, another "AMD EPYC" guest, 2 vCPUs, AVX2 where the first had AVX-512): /v1/chat/completions requests as
# `vllm bench serve --backend openai-chat` sends them, rendered through Qwen3's chat template (4,169 characters) and
# tokenized in the main process; its first arrivals at 7-31% of the last (fifo). Its streaming on each endpoint (that
# AVX2 guest, the chat one 10:14-10:17, /v1/completions 10:17-10:21): bursts of 160 requests of 16 prompt tokens
# streaming 1 and 41 tokens, the stand-in scheduler sending a decode step's tokens every 50 ms (one message for all
# running requests, as its stream_output does), the main process's extra CPU time over the extra chunks its clients
# received (the detokenizer, a process of its own, not counted): a chunk a token costs 121 us (chat) and 82 us
# (completions) at a step of 50 ms; at 1 ms (11:07-11:17) the main process falls behind and merges ~1.8 tokens a
# chunk: 67 us (chat) and 59 us (completions) a token, the rows' figures (the chat endpoint at a step of 0.01 ms
# merged no further).
#
# vLLM 0.19.0's V1 server the same way (its build_app and init_app_state as its build_and_serve calls them), side by
# side with 0.11.0's on one host in one window (12-01 23:18 to 12-02 00:03, the development machine: "AMD EPYC" KVM
# guest, 2 vCPUs, AVX2, CPython 3.11.7, whose speed that evening gave 0.11.0's intake 4.02 ms a request where 0.11.0's
# row took 1.57 on 11-30: seconds from another window do not compare, so 0.19.0's row is 0.11.0's /v1/completions row
# times the ratios of the two versions in this window, `V0190_OVER_V0110`): intake 4.42 ms + 5.81 us a prompt token (5
# repeats) against 4.02 ms + 4.61 us (3 repeats); a loaded server's token (the stand-in stepping every 0.01 ms, far
# ahead: each stream merged into one chunk) 76.6 against 53.1 us (9 repeats each, three runs in turn, the medians'
# difference); a chunk a token at a step of 50 ms 138 against 158 us (3 repeats each; not in the row: a loaded server's
# token is). Its first requests reached the engine at 16-43% of the last one's time (medians per cell; 0.11.0 22-66% in
# the same window): event_loop, as 0.11.0's. It serves both endpoints, as 0.10.2's (its chat render was not run).
# Repeats of one cell spread by up to 2x. No other version has work that queues here. Spread: ESTIMATE_RANGES.
#
# vLLM 0.6.0 with its request log off (--disable-log-requests, as the SGLang page's 0.6.0 runs served; the row above
# has it on, 0.6.0's default), in turn with it on (12-02 11:58-12:14, another "AMD EPYC" guest, 2 vCPUs, AVX-512,
# CPython 3.11.7; five alternations of one intake repeat and three streaming pairs each; the medians per cell
# fitted as above): off 1.305 ms a request + 1.061 us a prompt token, 127 us a chunk; on 1.311 ms + 1.096 us, 136 us
# (ratios 0.995, 0.968, 0.931), where single runs of one setting spread from 1.00 to 1.68 ms a request. No difference
# beyond the noise: the row serves both, and --disable-log-requests is accepted without effect.
V0190_OVER_V0110 = {"per_request_s": 4.42 / 4.02, "per_prompt_token_s": 5.81 / 4.61,
                    "per_output_chunk_s": 76.6 / 53.1}
_VLLM_BENCH = "benchmarks/bench_vllm_api_server.py"
_SGLANG_BENCH = "benchmarks/bench_sglang_tokenizer_manager.py"
_VLLM_0110 = ApiServerWork("vllm", (0, 11, 0), (0, 11, 1), 1.57e-3, 2.18e-6, 20e-6, "event_loop", _VLLM_BENCH,
                           ("completions",))
API_SERVER_WORK = (
    ApiServerWork("vllm", (0, 6, 0), (0, 6, 1), 1.24e-3, 1.69e-6, 162e-6, "event_loop", _VLLM_BENCH),
    ApiServerWork("vllm", (0, 10, 2), (0, 10, 3), 1.57e-3, 1.99e-6, 23e-6, "event_loop", _VLLM_BENCH),
    _VLLM_0110,
    ApiServerWork("vllm", (0, 11, 0), (0, 11, 1), 3.30e-3, 3.52e-6, 20e-6, "event_loop", _VLLM_BENCH, ("chat",)),
    dataclasses.replace(_VLLM_0110, since=(0, 19, 0), until=(0, 19, 1), endpoints=("completions", "chat"),
                        scaled_from="0.11.0's /v1/completions row times 0.19.0's ratios to it, measured in turn",
                        **{k: getattr(_VLLM_0110, k) * r for k, r in V0190_OVER_V0110.items()}),
    ApiServerWork("sglang", (0, 5, 5), (0, 5, 6), 1.21e-3, 1.85e-6, 59e-6, "fifo", _SGLANG_BENCH,
                  ("completions",)),
    ApiServerWork("sglang", (0, 5, 5), (0, 5, 6), 2.42e-3, 2.07e-6, 67e-6, "fifo", _SGLANG_BENCH, ("chat",)),
)


def api_server_work(version: tuple[int, ...], engine: str = "vllm",
                    endpoint: str = "completions") -> ApiServerWork | None:
    """The measured front-end work of this engine version on this endpoint (`API_SERVER_WORK`), or None where none
    was measured."""
    return next((w for w in API_SERVER_WORK
                 if w.engine == engine and w.since <= version < w.until and endpoint in w.endpoints), None)


def measured_work(engine: str, version: tuple[int, ...], model_type: str | None,
                  endpoint: str) -> tuple[ApiServerWork | None, TemplateParse | None]:
    """An engine version's measured front-end work: its intake and streaming on the endpoint (`api_server_work`)
    and, for vLLM, the chat-template parse of the versions that parse per request (`chat_template_parse`); None where
    there is none. vLLM's chat requests of a harmony model take the /v1/completions row: openai_harmony renders and
    parses them, where the chat rows were measured through a Jinja template."""
    parse = chat_template_parse(version, model_type, endpoint) if engine == "vllm" else None
    if engine == "vllm" and endpoint == "chat" and model_type in HARMONY_MODEL_TYPES:
        endpoint = "completions"
    return api_server_work(version, engine, endpoint), parse


def frontend_work(engine: str, version: tuple[int, ...], model_type: str | None, endpoint: str) -> dict[str, float]:
    """The front-end work that queues on an engine version's HTTP server (`measured_work`), as front-end keys; {}
    where there is none."""
    return _work_keys(*measured_work(engine, version, model_type, endpoint))


def _work_keys(intake: ApiServerWork | None, parse: TemplateParse | None) -> dict[str, float]:
    """The front-end keys of a version's measured intake and its template parse (both add to per_request_s)."""
    work: dict[str, float] = {}
    if intake is not None:
        work = {"per_request_s": intake.per_request_s, "per_prompt_token_s": intake.per_prompt_token_s}
        if intake.per_output_chunk_s is not None:
            work["per_output_chunk_s"] = intake.per_output_chunk_s
    if parse is not None:
        work["per_request_s"] = work.get("per_request_s", 0.0) + parse.work_s
    return work


# Per engine: its name, its HTTP server's, and where that work runs
_SERVER_NAMES = {"vllm": ("vLLM", "API server", ""),
                 "sglang": ("SGLang", "HTTP front-end", " (the TokenizerManager in its main process)")}
# Where a row measured on one endpoint says so (vLLM's, measured on /v1/completions, are taken for both)
_MEASURED_ON = {("completions",): " on /v1/completions",
                ("chat",): " on /v1/chat/completions, Qwen3's chat template rendered"}
# How each discipline serves a burst, as the notes say it
_DISCIPLINE_NOTES = {
    "event_loop": "its requests served in turn (frontend.discipline: event_loop, as its event loop takes them between "
                  "awaits, none overtaking one sent before it)",
    "fifo": "its requests served first come, first served (frontend.discipline: fifo, each sent on to the scheduler "
            "once tokenized)",
}


def _inbound_work(ctx: Context, engine: str, notes: list[str]) -> tuple[dict, str]:
    """The front-end work of this engine version that queues (`frontend_work`), as front-end keys for the preset's
    own front-end, and the note that says so; ({}, "") where there is none."""
    model_type = ctx.model.model_type if ctx.model is not None else None
    endpoint = endpoint_of(ctx.raw.get("workload"))
    intake, parse = measured_work(engine, ctx.version, model_type, endpoint)
    if (engine == "vllm" and endpoint == "chat" and model_type in HARMONY_MODEL_TYPES
            and chat_template_parse(ctx.version, None, endpoint)):
        notes.append(f"vLLM {ctx.version_text}: {model_type}'s chat requests are rendered by openai_harmony, not "
                     "its Jinja template: no template parse per request")
    if endpoint == "chat" and intake is not None and "chat" not in intake.endpoints:  # measured_work's choice
        notes.append(f"vLLM {ctx.version_text}: {model_type}'s chat requests (openai_harmony's) take the API server's "
                     "work measured on /v1/completions; its chat endpoint was measured through a Jinja template")
    work = _work_keys(intake, parse)
    if not work:
        return {}, ""
    label, server, where = _SERVER_NAMES[engine]
    open_arrivals = _get(ctx.raw, "workload.arrival.kind") != "closed_loop"
    said = []
    if intake is not None:
        chunk = ("its streaming not run (no per_output_chunk_s)" if intake.per_output_chunk_s is None else
                 f"{intake.per_output_chunk_s * 1e6:.0f} us a streamed chunk on the way out (per_output_chunk_s)")
        on = _MEASURED_ON.get(intake.endpoints, "")
        said.append(f"its {server}'s own work{where}, measured by running {label} {ctx.version_text}'s server code "
                    f"({intake.bench}){on}{f' as {intake.scaled_from}' if intake.scaled_from else ''}: "
                    f"{intake.per_request_s * 1e3:.2f} ms a request + "
                    f"{intake.per_prompt_token_s * 1e6:.2f} us a prompt token on the way in (frontend.per_request_s, "
                    f"per_prompt_token_s), {chunk}")
    if parse is not None:
        said.append(f"it parses the chat template again for every chat request ({parse.what}; "
                    f"vllm/entrypoints/chat_utils.py, {_dotted(parse.since)} to before {_dotted(parse.until)}): "
                    f"{parse.work_s * 1e3:.1f} ms a request (frontend.per_request_s, measured for Qwen3's template: "
                    "benchmarks/bench_chat_template.py)")
    discipline = intake.discipline if intake is not None and open_arrivals else "fifo"
    note = (f"{label} {ctx.version_text}: " + "; ".join(said) + f", work that queues on the {server}, "
            + (_DISCIPLINE_NOTES[discipline] if open_arrivals
               else "first come, first served in a closed loop (the one discipline modelled there)")
            + "; the rest of the front-end is the fitted delay, which does not queue")
    return {**work, "discipline": discipline}, note


def _engine_terms(ctx: Context, name: str, notes: list[str], inbound: tuple[dict, str] | None = None) -> dict:
    """The preset's CPU terms and front-end, fitted where the suite fitted them (`fitted_terms`).

    The CPU time is priced serially (kernels + CPU), also for the engines that overlap it with the GPU (SGLang's
    overlap scheduler, TensorRT-LLM 1.x's PyTorch backend): on the published suite's fit runs, pricing a step as the
    longer of the two (`cost_model.overhead.overlap: true`) missed by more (SGLang c4 throughput +13% against +2%,
    ShareGPT +107% against +4%; TensorRT-LLM ShareGPT +137% against +108%; 11-25), so the fitted per-step term is the
    CPU time the overlap leaves exposed."""
    values: dict[str, Any] = {}
    work, work_note = inbound or ({}, "")
    found = fitted_terms(name, ctx.version)
    overhead: dict[str, Any] = {"engine": "vllm-cudagraph"}
    if found is None:
        notes.append(f"{name}: no fitted CPU terms or front-end: vLLM's estimates (sim/cost/overhead.py), no front-end")
    else:
        terms, where = found
        overhead.update({k: v for k, v in terms.items() if k in ("per_step_s", "per_seq_s", "per_prefill_token_s")})
        cpu_fits = sorted({fit.version for term, fit in _nearest_fits(name, ctx.version).items() if term in overhead})
        if cpu_fits:  # the label names whose fit they are (`overhead.engine` names only the defaults they replace)
            overhead["fitted_for"] = fit_name(name, cpu_fits)
        if "latency_s" in terms:
            # num_processes left to the engine's flag (api_server_count) or the default, one: vLLM's single API server
            values["frontend"] = {"per_request_s": 0.0, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0,
                                  "latency_s": terms["latency_s"], **work}
        notes.append(f"{name}: CPU terms and front-end latency {where}")
        own = ctx.raw.get("frontend", values.get("frontend"))  # the scenario's own front-end wins over the preset's
        if work and isinstance(own, dict) and own.get("per_request_s") == work["per_request_s"]:
            notes.append(work_note)  # only where the scenario's front-end does this version's work
        elif "latency_s" in terms and not any(_get(ctx.raw, f"frontend.{t}") for t in QUEUEING_FRONTEND_TERMS):
            notes.append(FRONTEND_CAPACITY_NOTE)
    values["cost_model.overhead"] = overhead
    return values


def _window_memory_not_read(ctx: Context, engine: str, notes: list[str]) -> None:
    """Say that a hybrid model's sliding layers are kept as vLLM keeps them (`kv_cache.window_memory` shared_pool, the
    default) under an engine whose own rule was not read in its source."""
    if ctx.model is not None and ctx.model.hybrid_window:
        notes.append(f"{engine}: {ctx.model.name}'s sliding layers' KV read as each request's last window in the one "
                     "pool, as vLLM keeps it (the engine's own rule is not read in its source)")


def _kv_tokens(ctx: Context, utilization: float, token_budget: int, max_num_seqs: int,
               window: dict | None = None, profiled_activations: bool = True) -> int | None:
    """KV token slots at this memory fraction (a hybrid model's sliding layers kept as `window` says: `window_memory`,
    `window_pool_ratio`; the activations left out of the budget or not: `kv_cache.profile_activations`), or None
    when the model is not resolved or does not fit."""
    if ctx.model is None:
        return None
    from sim.model.memory import engine_memory, kv_capacity
    q = ctx.raw.get("quantization") or {}
    kv = ctx.raw.get("kv_cache") or {}
    try:  # (a malformed section is validation's to report, in its own words)
        memory = {**engine_memory(kv if isinstance(kv, dict) else {}, q if isinstance(q, dict) else {}),
                  **(window or {}), "profiled_activations": profiled_activations}
        cap = kv_capacity(ctx.model, ctx.gpu, tensor_parallel=ctx.tensor_parallel,
                          weight_dtype=q.get("weights", "bf16"), kv_dtype=q.get("kv_cache", "bf16"),
                          gpu_memory_utilization=utilization, max_num_batched_tokens=token_budget,
                          max_num_seqs=max_num_seqs, **memory)
    except Exception:  # noqa: BLE001  (validation reports a model that does not fit, in its own words)
        return None
    return cap.num_tokens


def _resolve_gpu_and_model(raw: dict):
    from sim.model.catalog import resolve_gpu
    from sim.model.specs import GPUSpec
    from pydantic import ValidationError
    hardware = raw.get("hardware") or {}
    given = hardware.get("gpu", "h100-sxm") if isinstance(hardware, dict) else "h100-sxm"
    if not isinstance(given, (str, dict)):  # the preset derives from the GPU: it must be readable first
        raise ConfigError(f"hardware.gpu: {given!r} is not allowed; allowed: a catalog GPU name or an inline GPU")
    try:
        gpu = resolve_gpu(given)
    except ValidationError as err:  # (sim.config.messages imports the schema, which imports this module)
        first = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        if first["type"] == "missing":
            raise ConfigError(f"hardware.gpu.{where}: missing; it is required") from None
        field = GPUSpec.model_fields.get(str(first["loc"][0])) if first["loc"] else None
        allowed = allowed_words(first, field.annotation) if field is not None else None
        raise ConfigError(f"hardware.gpu.{where}: {shown(first.get('input'))} is not allowed; allowed: "
                          f"{allowed or first['msg']}") from None
    return gpu, model_of_raw(raw)


def model_of_raw(raw: dict):
    """The ModelSpec a raw scenario names, or None where it cannot be read yet (validation then reports it)."""
    from sim.model.catalog import get_model
    from sim.model.hf_config import read_model_ref
    from sim.model.specs import ModelSpec
    try:
        value = read_model_ref(raw.get("model", "llama-3.1-8b"))
        return value if isinstance(value, ModelSpec) else (
            ModelSpec.model_validate(value) if isinstance(value, dict) else get_model(value, "model"))
    except Exception:  # noqa: BLE001  (validation reports a bad model in its own words)
        return None


def apply_engine_preset(raw: dict, value_problem: Callable[[str, Any, str], str | None] | None = None
                        ) -> tuple[dict, dict | None, list[str]]:
    """(the raw scenario with the engine preset's values written under the scenario's own (a copy), the preset's
    CPU terms: the `overhead` section it gives a cost model, which `sim.config.cost_choice` uses when the scenario
    names no cost model, what the preset approximates (`PresetResult.notes`, one line each), which the validated
    scenario keeps on its engine: `EngineSpec.notes`). `value_problem(scenario key, value, flag)` (the schema's
    `field_value_problem`) says in one line when a flag's value is not allowed in the key it sets."""
    spec = raw.get("engine")
    if spec is None:
        return raw, None, []
    if not isinstance(spec, dict):
        raise ConfigError(f"engine: {spec!r} is not allowed; allowed: a mapping with name, version and the "
                          "engine's flags")
    name = spec.get("name")
    if not isinstance(name, str) or name not in PRESETS:  # (a list or a mapping is not hashable)
        given = "missing" if name is None else f"{name!r} is not an engine preset"
        raise ConfigError(f"engine.name: {given}; allowed: {', '.join(PRESETS)}")
    preset = PRESETS[name]
    version_text = spec.get("version")
    if not isinstance(version_text, str):
        given = "missing" if version_text is None else f"{version_text!r} is not allowed"
        raise ConfigError(f"engine.version: {given}; allowed: a quoted version string of "
                          f"{name}, {preset.known_versions()} (e.g. \"{_dotted(preset.newest)}\")")
    version = _parse_version(version_text)
    if version is None or not (preset.oldest <= version < preset.newest[:2] + (1 << 30,)):
        raise ConfigError(f"engine.version: {version_text!r} is not a {name} version the preset knows; allowed: "
                          f"{preset.known_versions()}")
    given, command = _given_flags(spec, preset, version, version_text)
    if command is None:
        return _apply_flags(raw, name, preset, version, version_text, given, value_problem)
    try:
        raw, overhead, notes = _apply_flags(raw, name, preset, version, version_text, given, value_problem)
    except ConfigError as err:
        raise as_command_error(err, command, set(spec) - {"name", "version", "command"}) from None
    return raw, overhead, notes + command_notes(command)


def _given_flags(spec: dict, preset: EnginePreset, version: tuple[int, ...],
                 version_text: str) -> tuple[dict, CommandFlags | None]:
    """(the flags an engine section gives: its `engine.<flag>` keys and its command's, the command as read, or None
    without one). A flag given both ways must agree, and an option accepted without effect must be one the
    version's parser still has; refused in one line otherwise."""
    given = {key: value for key, value in spec.items() if key not in ("name", "version", "command")}
    if "command" not in spec:
        return given, None
    command = preset.read_command(spec["command"])
    for written, option in command.inert:
        outside = _outside_versions(version, version_text, option.since, option.until)
        if outside:
            raise ConfigError(f"engine.command {written!r}: not an option of {preset.name} {version_text} "
                              f"({outside[0]}); allowed: leave it out, or {outside[1]}")
    for key, value in command.flags.items():
        if key in given and given[key] != value:
            raise ConfigError(f"engine.command {command.written[key]!r}: contradicts engine.{key} {given[key]!r}; "
                              "allowed: give one of them, or the same value")
        given[key] = value
    return given, command


def _apply_flags(raw: dict, name: str, preset: EnginePreset, version: tuple[int, ...], version_text: str,
                 given: dict, value_problem) -> tuple[dict, dict | None, list[str]]:
    """apply_engine_preset once the engine's name, version and flags (`given`) are known."""
    flags = {}
    for key, value in given.items():
        flag = preset.flags.get(key)
        if flag is None:
            raise ConfigError(f"engine.{key}: not a flag of the {name} preset; allowed: "
                              f"{', '.join(sorted(preset.flags))}")
        kinds = flag.kind if isinstance(flag.kind, tuple) else (flag.kind,)
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            raise ConfigError(f"engine.{key}: {value!r} is not allowed; allowed: {type_words(kinds)}")
        outside = _outside_versions(version, version_text, flag.since, flag.until)
        if outside:
            raise ConfigError(f"engine.{key}: not a flag of {name} {version_text} ({outside[0]}); allowed: leave it "
                              f"out, or {outside[1]}")
        flags[key] = flag.convert(value)
    if _get(raw, "scheduler.batching") == "static":
        raise ConfigError(f"scheduler.batching: 'static' contradicts engine {name} (it batches continuously); "
                          "allowed: continuous, or leave engine out")
    raw = copy.deepcopy(raw)
    result = _derive(raw, name, preset, version, version_text, flags)
    for dotted, flag in result.from_flags.items():  # a flag's value is checked as the user's, before any contradiction
        problem = value_problem(dotted, result.values[dotted], f"engine.{flag}") if value_problem else None
        if problem:
            raise ConfigError(problem)
    for dotted, value in result.values.items():
        if dotted.startswith("frontend."):
            continue  # placed below, once the scenario's front-end is known
        if _has(raw, dotted):
            given = _get(raw, dotted)
            _check_flag_agrees(result.from_flags.get(dotted), dotted, value, given)
            continue  # the scenario's own value wins over the preset's default
        if dotted.startswith("cost_model."):
            continue  # handled below: only a cost model that takes engine terms gets them
        _set(raw, dotted, value)
    overhead = result.values.get("cost_model.overhead")
    _apply_cost_terms(raw, overhead)
    for dotted, value in result.values.items():
        if dotted.startswith("frontend."):
            _place_frontend_value(raw, dotted, value, result.from_flags.get(dotted), result.notes)
    return raw, overhead, result.notes


def option_flag_name(engine: str, option: str) -> str | None:
    """The preset flag a command-line option sets, spelled as the engine's parser reads it (`engine.command`: its
    aliases, vLLM's underscores, argparse's unambiguous prefixes), or None where it sets none (an option accepted
    without effect, an ambiguous prefix, one the preset does not know)."""
    preset = PRESETS[engine]
    options = preset.options()
    try:
        spelled, _ = resolve_option(option.partition("=")[0], options, preset.inert_options(), preset.syntax)
    except ConfigError:
        return None
    return options[spelled][0] if spelled in options else None


def _place_frontend_value(raw: dict, dotted: str, value, flag: str | None, notes: list[str]) -> None:
    """A front-end value of the preset's (`frontend.<key>`: the engine's streamed chunk size, its API server count)
    into the scenario's front-end (the preset's or its own) where it has one and does not give its own; the engine's
    flag for it (`flag`, e.g. SGLang's stream_interval) and a different value of the scenario's contradict each
    other. Without a front-end nothing reaches a client through one: nothing is set (a flag that asked is noted)."""
    front = raw.get("frontend")
    key = dotted.split(".", 1)[1]
    if not isinstance(front, dict):
        if flag is not None and front is None:
            notes.append(f"engine.{flag} {value}: the scenario has no front-end, so it changes nothing (add a "
                         "frontend: section to model one)")
        return
    given = front.get(key)
    if given is None:
        front[key] = value
    else:
        _check_flag_agrees(flag, dotted, value, given)


def _check_flag_agrees(flag: str | None, dotted: str, value, given) -> None:
    """The value an engine flag (`flag`; None: a preset default, which the scenario's own overrides) set for `dotted`
    and the scenario's own `given` there: different, they contradict each other, refused in one line."""
    if flag is not None and given != value:
        raise ConfigError(f"engine.{flag}: {value!r} contradicts {dotted} {given!r}; allowed: give one of them, or "
                          "the same value")


def _unvalidated_derivation(raw: dict) -> PresetResult | None:
    """The preset's derivation for a raw scenario that is not validated, or None without an engine, or with a name,
    version or command the preset refuses (validation says why)."""
    spec = raw.get("engine")
    if not isinstance(spec, dict) or spec.get("name") not in PRESETS:
        return None
    version = _parse_version(str(spec.get("version", "")))
    if version is None:
        return None
    preset = PRESETS[spec["name"]]
    try:
        flags, command = _given_flags(spec, preset, version, str(spec["version"]))
    except ConfigError:
        return None
    result = _derive(copy.deepcopy(raw), spec["name"], preset, version, str(spec["version"]), flags)
    if command is not None:
        result.notes.extend(command_notes(command))
    return result


def preset_notes(raw: dict) -> list[str]:
    """What the preset of a raw scenario's engine approximates (a default read at another version than the one
    named, a term not yet fitted), one line each; [] without an engine. For a raw scenario that is not validated
    (the published suite's cases); a validated scenario keeps the notes of its one derivation: `EngineSpec.notes`."""
    result = _unvalidated_derivation(raw)
    return result.notes if result is not None else []


def preset_keys(raw: dict) -> set[str]:
    """The scenario keys (dotted) the preset of a raw scenario's engine sets: where the scenario's own value would
    win over the engine's default (the dashboard drops its form's defaults there when an engine is chosen); empty
    without an engine, or with a name or version the preset refuses."""
    result = _unvalidated_derivation(raw)
    return set(result.values) if result is not None else set()


def fitted_versions(name: str) -> list[str]:
    """The versions of an engine with a fit of their own on published runs (engine_terms.json), oldest first. A term
    such a fit left at a bound or did not pin is not used (`usable_terms`): the preset's notes say which."""
    table = _fitted_table().get("engines", {}).get(name, {})
    return sorted((v for v in table if _parse_version(v) is not None), key=_parse_version)


# Scenario keys the derivation reads (the GPUs a model is split over, the KV bytes memory is sized with): an engine
# flag that sets one is written into the scenario before deriving, where the scenario gives none (a different own
# value is a contradiction, refused after the derivation).
DERIVATION_INPUTS = ("hardware.tensor_parallel", "hardware.pipeline_parallel", "quantization.kv_cache")


def _derive(raw: dict, name: str, preset: EnginePreset, version: tuple[int, ...], version_text: str,
            flags: dict) -> PresetResult:
    gpu, model = _resolve_gpu_and_model(raw)
    for key, flag in preset.flags.items():
        if flag.target in DERIVATION_INPUTS and flags.get(key) is not None and not _has(raw, flag.target):
            _set(raw, flag.target, flags[key])
    hardware = raw.get("hardware") or {}
    tp = hardware.get("tensor_parallel", 1) if isinstance(hardware, dict) else 1
    pp = hardware.get("pipeline_parallel", 1) if isinstance(hardware, dict) else 1
    length_flag = next((key for key, flag in preset.flags.items() if flag.target == "scheduler.max_model_len"), None)
    length = flags.get(length_flag)
    ctx = Context(version, version_text, flags, gpu, tp if isinstance(tp, int) else 1,
                  pp if isinstance(pp, int) else 1, model, raw, length if isinstance(length, int) else None)
    result = preset.derive(ctx)
    for key, flag in preset.flags.items():
        if flag.target is not None and key in flags and flags[key] is not None:  # None: the engine's "auto"
            value = flags[key]
            if flag.target == "hardware.expert_parallel" and isinstance(value, bool):
                if not value:
                    continue
                value = ctx.tensor_parallel  # the engine splits the experts over its whole TP group
            result.values[flag.target] = value
            result.from_flags[flag.target] = key
    if result.from_flags.get("quantization.weights") and result.values["quantization.weights"] == "fp8" \
            and not _has(raw, "quantization.fp8_compute"):
        result.values["quantization.fp8_compute"] = runs_fp8_products(gpu)
    return result


def _apply_cost_terms(raw: dict, overhead: dict | None) -> None:
    """The preset's CPU terms go to the scenario's cost model where it prices kernels only, unless it says its own
    (`overhead:`, or the roofline's fixed `step_overhead_s`). No cost model: `sim.config.cost_choice` picks one."""
    cost_model = raw.get("cost_model")
    if overhead is None or cost_model is None:
        return
    if not isinstance(cost_model, dict) or cost_model.get("kind", "roofline") == "fixed":
        return
    if "overhead" in cost_model or "step_overhead_s" in cost_model:
        return
    cost_model["overhead"] = dict(overhead)


# --- how far a preset's CPU terms and front-end can be trusted (issue 31, source c) ---------------------------
# Every uncertain number a preset writes into a scenario is drawn log-normally, value x exp(sigma_log x z) with z
# standard normal (a time is positive; "x 2" and "/ 2" weigh the same): a fitted term with its fit's sigma
# (engine_terms.json, benchmarks/published_suite.py SPREAD_METHOD), an estimate with the sigma of the range stated
# below. sim/bands.py draws z; `with_engine_terms_drawn` sets the drawn values.

Z90 = 1.6448536269514722  # the standard normal's 95th percentile: a 90% range is value x/÷ exp(Z90 x sigma_log)
_OVERHEAD_TERMS = ("per_step_s", "per_seq_s", "per_prefill_token_s", "launch_per_layer_s")
_FIELDS = {**{t: f"cost_model.overhead.{t}" for t in _OVERHEAD_TERMS}, "latency_s": "frontend.latency_s",
           **{t: f"frontend.{t}" for t in QUEUEING_FRONTEND_TERMS}}


def _sigma_of_factor(factor: float) -> float:
    """The log-normal sigma whose 90% range is value x/÷ factor."""
    return math.log(factor) / Z90


# The presets' numbers that are estimates, not fits, each with its stated 90% range (value x/÷ the factor) and why.
# One place: `engine_term_spread` reads only this.
ESTIMATE_RANGES: dict[str, tuple[float, str]] = {
    "per_seq_s": (3.0, "ServeSim's estimate for vLLM V1 (sim/cost/overhead.py: 10 us per scheduled sequence), which "
                  "no preset fits (a per-sequence term fitted on the suite's one or two runs absorbed the kernels' "
                  "error at large batches, benchmarks/published_suite.py CPU_TERMS); no published number gives it, "
                  "and vLLM V1's scheduler alone measured 8-15 us on one CPU (benchmarks/bench_vllm_engine_core.py, "
                  "the worker's share not measured): 3.3-30 us, a factor of 3 either way"),
    "launch_per_layer_s": (2.0, "--enforce-eager's kernel launches, an estimate (sim/cost/overhead.py: ~12 kernels a "
                           "layer at ~5 us each): 2.5-10 us a kernel, a factor of 2 either way"),
    "per_step_s": (3.0, "the engine has no fitted CPU term: vLLM's estimate (sim/cost/overhead.py 0.5 ms); the "
                   "terms fitted on 8B runs span 0.67-2.4 ms (engine_terms.json): a factor of 3 either way"),
    "per_request_s": (2.0, "an engine's HTTP front-end work per request (API_SERVER_WORK, vLLM's and SGLang's; "
                      "TEMPLATE_PARSES: its intake, vLLM's chat-template parse), measured on one CPU (the development "
                      "machine's AMD EPYC guest, where a burst's intake at 16 prompt tokens ran 0.9-2.3 ms a request "
                      "over 15 bursts, once 5.2, and the template parse's median over rounds up to 1.9x its "
                      "minimum), for one tokenizer and one template: another host's CPU and another model's, a factor "
                      "of 2 either way"),
    "per_prompt_token_s": (2.0, "an engine's HTTP front-end work per prompt token (API_SERVER_WORK): tokenization "
                           "and the logged token ids, measured on one CPU for Llama 3's tokenizer: another host, "
                           "another tokenizer and other text, a factor of 2 either way"),
    "per_output_chunk_s": (2.0, "an engine's HTTP front-end work per streamed token of a loaded server "
                           "(API_SERVER_WORK, vLLM's and SGLang's, their tokens merged into fewer chunks), measured on "
                           "one CPU: another host's, a factor of 2 either way; not the cost of a chunk a token, which "
                           "a server that keeps up pays (vLLM V1 106-136 us, SGLang 82-121 us) and the model, which "
                           "does not merge, leaves out"),
}
# A term taken from another version's fit (the version has none of its own): the fit's sigma and, in quadrature, how
# far one engine's terms move between versions: TensorRT-LLM's fits at 0.14.0 and 1.2.0rc1 (both terms inside
# their bounds, 8B models on an H100: the one like-for-like pair in engine_terms.json) differ by 2.19x per step
# (1.08 against 2.36 ms) and 5.22x in the front-end (5.6 against 29.3 ms), taken as each term's 90% factor.
OTHER_VERSION_FACTORS = {"per_step_s": 2.19, "latency_s": 5.22}


@dataclass(frozen=True)
class TermSpread:
    """One uncertain number an engine preset put into a scenario: drawn as point x exp(sigma_log x z)."""

    key: str  # the scenario key it sets, dotted: cost_model.overhead.per_step_s, frontend.latency_s, ...
    point: float  # its value in the scenario (seconds), returned exactly at z = 0
    sigma_log: float  # log-normal sigma of the value
    kind: str  # "fitted" (the fit's own spread), "other version" (a fit of another version) or "estimate"
    source: str  # where the value and its sigma come from
    upper_s: float | None  # a draw above this is clamped to it (None: never clamped) ...
    clamp_reason: str  # ... because of this

    def range90(self) -> tuple[float, float]:
        """The 90% range of the draws (clamped like them)."""
        return self.drawn(-Z90), self.drawn(Z90)

    def drawn(self, z: float) -> float:
        """The value at standard-normal draw z (the point itself at z = 0)."""
        if z == 0:
            return self.point
        value = self.point * math.exp(self.sigma_log * z)
        return min(value, self.upper_s) if self.upper_s is not None else value


def engine_model_misfit(scenario) -> tuple[float, str] | None:
    """(sigma_log, where it comes from) of what an engine preset's model misses beyond its terms' spread: the
    preset's log errors on its own fit runs after fitting (engine_terms.json `fit_error`), pooled over the engine's
    fitted versions that have more residuals than fitted terms, as the unbiased residual sigma
    sqrt(sum n_i rms_i^2 / sum (n_i - p_i)) (a version alone has 1-4 degrees of freedom). It is the scheduling,
    front-end and kernel behaviour that engine's preset lacks, which no term can absorb; sim/bands.py draws it as
    a further step-time bias. Per engine, because the presets differ: one engine's poor fit says nothing about
    another's rule. An engine without such a version takes every engine's pool, and says so. None without an engine
    preset or without fits."""
    if getattr(scenario, "engine", None) is None or scenario.engine.name not in PRESETS:
        return None
    fits = _fitted_table().get("engines", {})
    whose = f"the {scenario.engine.name} preset's"
    sigma, dof, versions = _pooled_misfit({scenario.engine.name: fits.get(scenario.engine.name, {})})
    if not dof:
        whose = "every preset's (none of its own has residuals to spare)"
        sigma, dof, versions = _pooled_misfit(fits)
    if not dof:
        return None
    return sigma, (f"{whose} misfit on its fit runs, pooled over {versions} fitted versions ({dof} degrees of "
                   "freedom; sim/config/engine_terms.json)")


def _pooled_misfit(fits: dict) -> tuple[float, int, int]:
    """(unbiased residual sigma, degrees of freedom, versions) pooled over these engines' fitted versions that have
    more residuals than fitted terms; (0, 0, 0) without any."""
    squares, dof, versions = 0.0, 0, 0
    for entries in fits.values():
        for entry in entries.values():
            error, fitted = entry.get("fit_error"), len(entry.get("terms", {}))
            if error and error["residuals"] > fitted:
                squares += error["rms_log"] ** 2 * error["residuals"]
                dof += error["residuals"] - fitted
                versions += 1
    return (math.sqrt(squares / dof) if dof else 0.0), dof, versions


def engine_term_spread(scenario) -> list[TermSpread]:
    """The uncertain numbers the scenario's engine preset put into it (a validated `Scenario`), in a fixed order:
    the fitted CPU term and front-end latency with their fit's sigma (engine_terms.json), widened for a version
    that borrows another's fit (OTHER_VERSION_FACTORS), and the CPU estimates in effect (ESTIMATE_RANGES); then the
    benchmark client's measured costs (`bench_client_spread`, with or without a preset). [] without either.

    What a preset writes that is not drawn, and why:
    - a term the scenario sets to another value than the preset's: the user's value is theirs (only a value the
      preset wrote, equal to it, is drawn);
    - frontend.per_prompt_token_s, per_output_chunk_s and per_request_s (but for the engine versions whose front-end
      work was measured, API_SERVER_WORK and TEMPLATE_PARSES, drawn with ESTIMATE_RANGES' spread): 0 by
      construction, the preset's front-end is one delay that does not queue (latency_s: vLLM's TTFT is 59 ms at
      concurrency 1 and 64 ms at 2, not the ~110 ms a serial per-request cost would give,
      benchmarks/published_suite.py CPU_TERMS); its spread is latency_s's;
    - cost_model.overhead.per_prefill_token_s and any other estimate at 0 (sim/cost/overhead.py): a per-token CPU
      cost the published runs cannot separate from the kernels' prefill time; a log-normal draw of 0 is 0;
    - frontend.num_processes, the scheduler and KV defaults: the engine's own defaults read from its source at a
      named version (a default read at another version is a preset note): settings, not estimates."""
    return _preset_term_spread(scenario) + bench_client_spread(scenario)


def bench_client_spread(scenario) -> list[TermSpread]:
    """The benchmark client's costs (`frontend.client`) where it names its `tool` and keeps that tool's measured row
    for the scenario's endpoint (sim/config/bench_clients.py), each drawn x/÷ `BENCH_CLIENT_RANGE`; numbers of the
    user's own (given without a tool, or over its row) are theirs: not drawn."""
    client = scenario.frontend.client if scenario.frontend is not None else None
    if client is None or client.tool is None:
        return []
    from sim.config.bench_clients import BENCH_CLIENT_RANGE, bench_client
    row = bench_client(client.tool, scenario.workload.endpoint)
    measured = (client.per_request_s, client.per_event_s)
    if row is None or (row.per_request_s, row.per_event_s) != measured:
        return []
    factor, why = BENCH_CLIENT_RANGE
    return [TermSpread(f"frontend.client.{term}", float(value), _sigma_of_factor(factor), "estimate", why, None, "")
            for term, value in zip(("per_request_s", "per_event_s"), measured) if value > 0]


def _preset_term_spread(scenario) -> list[TermSpread]:
    """`engine_term_spread`'s numbers from the engine preset."""
    engine = scenario.engine
    if engine is None or engine.name not in PRESETS:
        return []
    version = _parse_version(engine.version)
    if version is None:
        return []
    table = _fitted_table()
    bounds = table.get("uncertainty", {}).get("bounds_s", {})
    nearest = _nearest_fits(engine.name, version)
    overhead = getattr(scenario.cost_model, "overhead", None)
    present: dict[str, float | None] = {}
    if overhead is not None:
        present.update({t: getattr(overhead, t) for t in _OVERHEAD_TERMS})
    if scenario.frontend is not None:
        present["latency_s"] = scenario.frontend.latency_s
    out: list[TermSpread] = []
    for term in ("per_step_s", "latency_s"):
        fit = nearest.get(term)
        if term not in present or fit is None or present[term] != fit.value:
            continue  # absent, or the user's own value
        sigmas = table["engines"][engine.name][fit.version].get("sigma_log", {})
        if term not in sigmas:
            continue  # a fit with no spread (written before the spreads were): nothing stated, nothing drawn
        where = f"{engine.name} {fit.version}'s fit (sim/config/engine_terms.json)"
        sigma, kind, source = sigmas[term], "fitted", f"{where}: the fit's spread"
        if fit.borrowed:
            extra = _sigma_of_factor(OTHER_VERSION_FACTORS[term])
            sigma, kind = math.hypot(sigma, extra), "other version"
            source += (f", and x/÷ {OTHER_VERSION_FACTORS[term]:g} for {engine.name} {engine.version}, "
                       f"{_why_borrowed(engine.name, version, (term,))} (sim/config/engines.py OTHER_VERSION_FACTORS)")
        out.append(_spread(term, fit.value, sigma, kind, source, bounds))
    work = _scenario_frontend_work(scenario, version)
    for term in QUEUEING_FRONTEND_TERMS:
        point = work.get(term)
        if point and getattr(scenario.frontend, term) == point:  # the preset's, not the user's own
            factor, why = ESTIMATE_RANGES[term]
            out.append(_spread(term, point, _sigma_of_factor(factor), "estimate", why, bounds))
    if overhead is not None and overhead.engine in ("vllm-cudagraph", "vllm-eager"):
        from sim.cost.overhead import ENGINE_DEFAULTS
        defaults = ENGINE_DEFAULTS[overhead.engine]
        eager_launch_s = ENGINE_DEFAULTS["vllm-eager"].launch_per_layer_s
        for term in ("per_step_s", "per_seq_s", "launch_per_layer_s"):
            point = getattr(defaults, term)
            if term == "launch_per_layer_s" and present.get(term) == eager_launch_s:
                point = eager_launch_s  # the eager estimate a preset wrote (SGLang's steps outside its CUDA graphs)
            elif present.get(term) is not None or point <= 0:
                continue  # set (fitted above, or the user's), or a zero that has no spread (see the docstring)
            factor, why = ESTIMATE_RANGES[term]
            out.append(_spread(term, point, _sigma_of_factor(factor), "estimate", why, bounds))
    return out


def _scenario_frontend_work(scenario, version: tuple[int, ...]) -> dict[str, float]:
    """The front-end work that queues a validated scenario's engine preset prices (`frontend_work`), or {}."""
    if scenario.frontend is None:
        return {}
    from sim.model.catalog import resolve_model
    return frontend_work(scenario.engine.name, version, resolve_model(scenario.model).model_type,
                         scenario.workload.endpoint)


def _spread(term: str, point: float, sigma: float, kind: str, source: str, bounds: dict) -> TermSpread:
    upper = bounds.get(term)
    reason = (f"{term} above {upper:g} s is beyond the published suite's fit range (calibrate/engine_fit.py "
              "FIT_BOUNDS_S): a value no fit could return" if upper is not None else "")
    return TermSpread(_FIELDS[term], float(point), float(sigma), kind, source, upper, reason)


def with_engine_terms_drawn(scenario, z: dict[str, float]):
    """The scenario with each uncertain term (`engine_term_spread`) at its value for the standard-normal draw
    z[key] (a `model_copy`: nothing else changes). A term missing from z, or at z = 0, keeps its value exactly;
    a z for a key this scenario has no spread for is ignored (every variant of a comparison can take the same
    draws)."""
    updates: dict[str, dict[str, float]] = {"cost_model.overhead": {}, "frontend": {}, "frontend.client": {}}
    for spread in engine_term_spread(scenario):
        zk = float(z.get(spread.key, 0.0))
        if zk == 0.0:
            continue
        section, term = spread.key.rsplit(".", 1)
        updates[section][term] = spread.drawn(zk)
    update: dict[str, Any] = {}
    if updates["cost_model.overhead"]:
        cost_model = scenario.cost_model
        update["cost_model"] = cost_model.model_copy(
            update={"overhead": cost_model.overhead.model_copy(update=updates["cost_model.overhead"])})
    frontend_update: dict[str, Any] = dict(updates["frontend"])
    if updates["frontend.client"]:
        frontend_update["client"] = scenario.frontend.client.model_copy(update=updates["frontend.client"])
    if frontend_update:
        update["frontend"] = scenario.frontend.model_copy(update=frontend_update)
    return scenario.model_copy(update=update) if update else scenario
