"""The published suite (issue 30, item 5): every run under benchmarks/published/ as a typed case, its scenario,
and the held-out protocol. `benchmarks/bench_published.py` is the command that prints the table.

    from published_suite import load_suite, run_suite
    suite = load_suite()                      # every data file; malformed cases become one-line errors
    results = run_suite(suite.cases, "roofline")

What this module does, in order:

1. `load_suite` reads every `*.yaml` under benchmarks/published/ into `PublishedCase`s. Each case's schema is
   checked field by field; a malformed case becomes one line in `Suite.errors` naming the file, the case and the
   field (it never stops the run). Normalized: the engine (`vllm`, `sglang`, `trtllm`, `lmdeploy` + its version),
   the GPU (a `servesim catalog gpus` name), the model (a catalog name or a config.json beside the data), TP,
   weight and KV dtypes, the workload (fixed lengths at the quoted means where per-request lengths are not
   given, as bench_published.py always did), the arrival (below) and the quoted metrics, each mapped to the
   ServeSim quantity it is compared with and to the benchmark tool's definition of it (`METRIC_DEFINITIONS`).
   Every assumption a case needs (a number the source does not give) is written into `PublishedCase.assumptions`.
2. `scenario` builds a case's ServeSim scenario with the engine's own defaults for that GPU and version
   (`ENGINE_DEFAULTS`: the stand-in for the engine presets until they land in sim/config). A case ServeSim
   cannot express yet raises `NotSimulated(reason)`: it is listed, never dropped.
3. The held-out protocol: `FIT_RUNS` names, per engine and version, the runs a preset's free numbers may be
   fitted on; every other run is held out. `fit_preset` is the fit hook (returns {} until the presets have
   terms to fit); `run_suite` simulates the fitted runs, calls it, then simulates the held-out runs with what
   it returned, and `summarize` gives per engine the median and max |error| over the held-out runs only.

Arrivals (the assumption each case states):
- `concurrency: N` (vllm bench serve --max-concurrency, LMDeploy's N client threads): a closed loop of N users,
  no think time; LMDeploy's static rows are N threads x 6 requests back to back.
- `request_rate: R` finite (TensorRT-LLM's online table, QPS): Poisson at R (the page names no arrival process).
- neither, or `request_rate: inf` (no --max-concurrency; trtllm-bench's offline max-throughput runs, which
  queue "all requests in rapid succession"): every prompt at t = 0 (burst); the engine's batch limits decide
  how many run at once (trtllm-bench's fixed build-time max_batch_size / max_num_tokens).
"""

from __future__ import annotations

import fnmatch
import math
import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

HERE = Path(__file__).resolve().parent
DATA_DIR = HERE / "published"
ROOT = HERE.parent

# --- engines ------------------------------------------------------------------------------------------

ENGINE_KEYS = {"vllm": "vllm", "sglang": "sglang", "tensorrt-llm": "trtllm", "trtllm": "trtllm",
               "lmdeploy-turbomind": "lmdeploy", "lmdeploy": "lmdeploy"}
ENGINE_LABELS = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM", "lmdeploy": "LMDeploy"}

# vLLM's OpenAI-server defaults (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults, v0.11.0; pinned by vLLM's
# tests/engine/test_arg_utils.py::test_defaults_with_usage_context): >= 70 GiB and not an A100 -> 8192 / 1024.
VLLM_V1_DEFAULTS = {
    "h100-sxm": {"max_num_batched_tokens": 8192, "max_num_seqs": 1024},
    "h200": {"max_num_batched_tokens": 8192, "max_num_seqs": 1024},
    "a100-80gb": {"max_num_batched_tokens": 2048, "max_num_seqs": 256},
}

# The engine defaults this harness applies, per engine and version, with where each comes from. THE PRESET'S
# STAND-IN until the engine presets land in sim/config: a value marked approximated is not the engine's own.
ENGINE_DEFAULTS: dict[str, dict[str, Any]] = {
    "vllm": {
        "versions": {"0.11.0": "cited", "0.9.2": "approximated"},
        "source": "vllm/engine/arg_utils.py EngineArgs.get_batch_defaults (v0.11.0)",
        "rule": "V1: chunked prefill always; OpenAI server: max_num_batched_tokens 8192 and max_num_seqs 1024 on a "
                ">= 70 GiB GPU that is not an A100, else 2048 / 256; gpu_memory_utilization 0.9; block 16; "
                "max_model_len = max_position_embeddings",
        "approximated": "vLLM 0.9.2: v0.11.0's batch defaults assumed (0.9.2's own arg_utils.py not checked)",
    },
    "sglang": {
        "versions": {"0.5.3": "cited", "0.5.3.post3": "cited", "0.5.5.post1": "cited"},
        "source": "python/sglang/srt/server_args.py ServerArgs._handle_gpu_memory_settings and "
                  "python/sglang/srt/model_executor/model_runner.py (max_num_reqs), the same in the PyPI wheels "
                  "sglang 0.5.3, 0.5.3.post3 and 0.5.5.post1",
        "rule": "60-160 GiB GPUs: chunked_prefill_size 8192, cuda_graph_max_bs 256 (tp < 4) else 512; "
                "mem_fraction_static = (gpu_mem - reserved) / gpu_mem with reserved = max(512 + 1.5 x "
                "chunked_prefill_size + 2 x cuda_graph_max_bs + tp x pp / 8 x 1024, 10240) MiB; "
                "max_running_requests = min(max(kv_tokens / context_len x 512, 2048), 4096); schedule_policy fcfs; "
                "page_size 1 assumed (None resolves to 1 for the default attention backends)",
        "approximated": "SGLang: defaults not checked for this version",
        "not_modelled": "SGLang runs prefill batches and decode batches separately (enable_mixed_chunk is off by "
                        "default); ServeSim's continuous batching mixes prefill chunks with decodes",
    },
    "trtllm": {
        "versions": {},  # none cited for its own version: every case is marked approximated
        "source": "tensorrt_llm/commands/serve.py get_llm_args (free_gpu_memory_fraction 0.9, chunked prefill off, "
                  "GUARANTEED_NO_EVICT) and tensorrt_llm/builder.py BuildConfig (max_batch_size 2048, max_num_tokens "
                  "8192), read at stored commits of NVIDIA/TensorRT-LLM (00209af1, 008b2b8d), not at the runs' "
                  "versions",
        "rule": "max_batch_size 2048, max_num_tokens 8192, KV cache = 0.9 of the memory free after weights "
                "(trtllm-bench 0.17: 0.95, the page's value), no chunked prefill unless --enable_chunked_prefill; "
                "32 tokens per KV block",
        "approximated": "TensorRT-LLM: defaults read at commits other than the runs' versions; trtllm-bench build "
                        "picks max_batch_size / max_num_tokens from the dataset (values unstated)",
        "not_modelled": "TensorRT-LLM's GUARANTEED_NO_EVICT admission (a request starts only when its full length "
                        "fits in the KV cache) is not modelled: ServeSim admits on demand and preempts",
    },
    "lmdeploy": {
        "versions": {"0.1.0a1": "cited"},  # the run script's own settings
        "source": "the run's own benchmark/benchmark_{7b,13b,70b}.sh (config.ini: max_batch_size, "
                  "cache_max_entry_count in 128-token blocks), lmdeploy v0.1.0a1",
        "rule": "max_num_seqs = max_batch_size; KV capacity = cache_max_entry_count x 128 tokens; no chunked prefill",
        "approximated": "LMDeploy: only the run script's settings are cited",
        "not_modelled": "TurboMind 0.1.0's prefill scheduling (max_context_token_num 4) is not modelled: vLLM-style "
                        "continuous batching without chunked prefill assumed",
    },
}

# The cost models a run can be priced with (`--cost-model NAME`); the first is today's default.
COST_MODELS = {
    "roofline": {"kind": "roofline"},
    "measured kernels": {"kind": "measured", "on_missing": "error"},
    "measured + overhead": {"kind": "measured", "on_missing": "error", "overhead": {"engine": "vllm-cudagraph"}},
    "learned roofline + overhead": {"kind": "roofline", "efficiencies": "learned",
                                    "overhead": {"engine": "vllm-cudagraph"}},
}
DEFAULT_COST_MODEL = "roofline"

# --- the held-out protocol ----------------------------------------------------------------------------

# Per (engine, version): the runs the preset's free numbers may be fitted on (the lowest-concurrency run and
# one throughput run where the version has both). Every other run is held out and reported on its own.
FIT_RUNS: dict[tuple[str, str], tuple[str, ...]] = {
    ("vllm", "0.11.0"): ("qwen3-8b h100 c1", "qwen3-14b h100 2k burst"),
    ("vllm", "0.9.2"): ("gpustack-quant qwen3-8b h100 vllm 0.9.2 bf16 sharegpt",),
    ("sglang", "0.5.3.post3"): ("qwen3-8b-h100 sglang c4",),
    ("sglang", "0.5.5.post1"): ("qwen3-14b-h100 sglang sharegpt",),
    ("sglang", "0.5.3"): ("deepseek-r1-h200 sglang tp8 sharegpt",),
    ("trtllm", "1.2.0rc1"): ("qwen3-8b-h100 trtllm c4", "qwen3-14b-h100 trtllm sharegpt"),
    ("trtllm", "1.0.0"): (),  # one run (EP8, not simulated): nothing to fit on, it is held out
    ("trtllm", "0.17"): ("trtllm 0.17 llama-3.1-8b h100-sxm tp1 fp8 1000/1000 max-throughput",),
    ("trtllm", "0.14.0"): ("trtllm 0.14 llama-3.1-8b h100-sxm tp1 bf16 467/256 qps 2",
                           "trtllm 0.14 llama-3.1-8b h100-sxm tp1 bf16 467/256 qps INF"),
    ("lmdeploy", "0.1.0a1"): ("lmdeploy llama2-7b tp1 static batch 1 128/2048", "lmdeploy llama2-7b tp1 sharegpt c64"),
}


def fit_preset(engine: str, version: str, fit_results: list["CaseResult"], cost_model: str) -> dict[str, float]:
    """The hook where a preset's free numbers are fitted, on `fit_results` (the FIT_RUNS of this engine and
    version, simulated with the unfitted preset) only. Returns the fitted numbers by name: keys of the cost
    model's `overhead` section (sim/config/schema.py OverheadSpec: per_step_s, per_seq_s, ...), which `scenario`
    puts into every run of this engine version. Empty for now: the engine presets have no terms to fit yet."""
    return {}


# Runs whose per-request lengths the source does not give, and no totals either: the totals of another run of the
# same dataset and tokenizer are taken (an assumption each such case states).
BORROWED_LENGTHS = {
    # the quantization reference page (vLLM 0.9.2, Qwen3-8B, ShareGPT, 1000 prompts): GPUStack's 1000-prompt ShareGPT
    # runs with the Qwen3 tokenizer all send the same 217,393 input tokens; the generated total is the vLLM run's
    "gpustack-quant *": "qwen3-14b-h100 vllm sharegpt",
}

# How each quoted metric is defined by the tool that printed it, and the ServeSim quantity it is compared with.
METRIC_DEFINITIONS = {
    "vllm bench serve": {
        "throughput": "output tokens / benchmark duration (first request sent to last response)",
        "ttft": "client-side time to first token (includes the HTTP front end, tokenization, queueing); ServeSim "
                "has no front end",
        "tpot": "per request (latency - TTFT) / (output tokens - 1), the first token excluded; mean over requests",
        "itl": "every gap between streamed chunks, mean over all gaps",
    },
    "trtllm-bench": {"throughput": "output tokens / total latency (the page's sample report: 3000 x 128 / 16.406 s)"},
    "triton online (unstated)": {
        "throughput": "'Output Tput (tok/s)' as printed; the load generator is unstated: output tokens / run time "
                      "assumed",
        "ttft": "'Mean TTFT' as printed, client-side (load generator unstated)",
        "itl": "'Mean ITL' as printed: mean gap between tokens after the first (assumed)",
    },
    "lmdeploy profile_generation": {
        "throughput": "all generated tokens / wall time",
        "ttft": "first-token latency in-process (no HTTP), mean over requests",
        "itl": "per-token latency of every token but the first, 50th percentile over all tokens (printed to 10 ms)",
    },
    "lmdeploy profile_throughput": {
        "throughput": "output tokens / wall time",
        "ttft": "first-token latency in-process (no HTTP), mean over requests",
    },
}

# ServeSim's quantity per metric group (what `measure` computes from a Result).
SIM_QUANTITIES = {
    "output_tok_s": "sum(finished output tokens) / (last finish - first arrival)",
    "total_tok_s": "sum(finished prompt + output tokens) / (last finish - first arrival)",
    "ttft_mean": "mean ttft_s (arrival to first token)",
    "tpot_mean": "mean tpot_s = (last token - first token) / (output tokens - 1)",
    "itl_mean": "summary itl_mean (each decode token's gap = its step's duration, token-weighted)",
    "itl_p50": "summary itl_p50 (token-weighted median of the step durations)",
    "duration_s": "last finish - first arrival",
}

HEADLINE = ("throughput", "ttft", "tpot_itl")  # the three metrics of the goals, in this order
GROUP_LABELS = {"throughput": "throughput", "ttft": "TTFT", "tpot_itl": "TPOT/ITL", "itl": "ITL",
                "duration": "duration"}


# --- typed cases ---------------------------------------------------------------------------------------

class CaseError(ValueError):
    """A malformed case: one line naming the file, the case and the field."""


class NotSimulated(Exception):
    """A case ServeSim cannot express yet (the reason is one line)."""


@dataclass(frozen=True)
class Engine:
    key: str  # vllm, sglang, trtllm, lmdeploy
    name: str  # as the file spells it
    version: str
    command: str | None
    flags: dict
    backend: str | None = None

    @property
    def label(self) -> str:
        return f"{ENGINE_LABELS[self.key]} {self.version}"


@dataclass(frozen=True)
class Metric:
    group: str  # throughput, ttft, tpot_itl (the headline three), or itl / duration (reported, not summarized)
    quoted_key: str  # the key in `quoted`, or how the value was derived
    measured: float  # in SI units: tok/s or s
    unit: str  # "tok/s" or "s"
    sim: str  # the ServeSim quantity compared (a key of SIM_QUANTITIES)
    definition: str  # the tool's definition of the quoted number
    derived: bool = False  # computed from quoted numbers rather than quoted itself


@dataclass(frozen=True)
class Workload:
    input_tokens: int
    output_tokens: int
    lengths_from: str
    arrival: str  # burst, closed_loop, poisson
    concurrency: int | None
    request_rate: float | None
    num_prompts: int


@dataclass(frozen=True)
class PublishedCase:
    file: str  # the data file's name
    name: str
    source: str
    url: str
    source_block: str | None
    engine: Engine
    model: str  # catalog name, or the path of a config.json beside the data
    model_is_file: bool
    gpu: str
    tensor_parallel: int
    pipeline_parallel: int
    expert_parallel: int  # 1: none
    dp_attention: bool
    weights: str  # bf16, fp16, fp8 (weights and compute), fp8-weights (weight-only FP8)
    kv_dtype: str  # bf16, fp16, fp8 (resolved from auto)
    dataset: dict
    kind: str  # latency or throughput
    workload: Workload
    flags: dict
    quoted: dict
    metrics: tuple[Metric, ...]
    unstated: tuple[str, ...]
    assumptions: tuple[str, ...]
    note: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return self.engine.key, self.engine.version

    @property
    def headline(self) -> list[Metric]:
        return [m for m in self.metrics if m.group in HEADLINE]


@dataclass
class Suite:
    cases: list[PublishedCase]
    errors: list[str]  # one line per malformed case or file
    files: list[Path]
    sources: dict[str, str]  # "file:source key" -> URL


# --- loading -------------------------------------------------------------------------------------------

_PINNED = re.compile(r"^https://github\.com/[^/]+/[^/]+/(blob|tree)/[0-9a-f]{40}/")
_DTYPES = {"bf16", "fp16", "fp8", "fp8-weights"}
_KV_DTYPES = {"auto": None, "bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}
_KINDS = {"latency", "throughput"}


def _num(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class _Reader:
    """Field access for one raw case: every problem raises CaseError naming file, case and field."""

    def __init__(self, file: str, raw: Any, index: int):
        self.file, self.raw, self.index = file, raw, index
        name = raw.get("name") if isinstance(raw, dict) else None
        self.name = name if isinstance(name, str) and name else f"#{index + 1}"

    def fail(self, fld: str, problem: str) -> CaseError:
        return CaseError(f"{self.file}: case {self.name!r}: field {fld!r}: {problem}")

    def get(self, fld: str, kinds: tuple, *, required: bool = True, default=None, where: dict | None = None):
        data = self.raw if where is None else where
        key = fld if where is None else fld.rsplit(".", 1)[-1]  # `where` is a nested section: fld is dotted
        if key not in data or data[key] is None:
            if required:
                raise self.fail(fld, "missing")
            return default
        value = data[key]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            allowed = " or ".join(k.__name__ for k in kinds)
            raise self.fail(fld, f"expected {allowed}, got {type(value).__name__} {value!r}")
        return value

    def positive_int(self, fld: str, *, required: bool = True, default=None, where: dict | None = None):
        value = self.get(fld, (int,), required=required, default=default, where=where)
        if value is not None and value < 1:
            raise self.fail(fld, f"expected an integer >= 1, got {value!r}")
        return value


def _gpu_names() -> set[str]:
    from sim.model.catalog import GPUS
    return set(GPUS)


def _model_names() -> set[str]:
    from sim.model.catalog import MODELS
    return set(MODELS)


def _metrics(r: _Reader, q: dict, tool: str) -> tuple[list[Metric], list[str]]:
    """The quoted metrics mapped to ServeSim quantities, in SI units; and the assumptions that took."""
    d = METRIC_DEFINITIONS[tool]
    out, assumed = [], []

    def add(group, key, value, unit, sim, definition, derived=False):
        out.append(Metric(group, key, float(value), unit, sim, definition, derived))

    # throughput: output tok/s where the source says so
    if "output_token_throughput_tok_s" in q:
        add("throughput", "output_token_throughput_tok_s", q["output_token_throughput_tok_s"], "tok/s", "output_tok_s",
            d["throughput"])
    elif "token_throughput_tok_s" in q:
        add("throughput", "token_throughput_tok_s", q["token_throughput_tok_s"], "tok/s", "output_tok_s",
            d["throughput"])
    elif "throughput_out_tok_s" in q:
        add("throughput", "throughput_out_tok_s", q["throughput_out_tok_s"], "tok/s", "output_tok_s", d["throughput"])
    elif "throughput_tok_s" in q:
        add("throughput", "throughput_tok_s", q["throughput_tok_s"], "tok/s", "total_tok_s",
            "'Throughput (tok/s)' as printed: output or total not stated; total (prompt + output) tokens / duration "
            "assumed (8B at 13,305 tok/s beside the 14B runs' 6,596 total / 3,174 output)")
        assumed.append("throughput_tok_s taken as total (prompt + output) tokens per second")
    elif "benchmark_duration_s" in q and "total_generated_tokens" in q:
        add("throughput", "total_generated_tokens / benchmark_duration_s",
            q["total_generated_tokens"] / q["benchmark_duration_s"], "tok/s", "output_tok_s",
            d["throughput"] + " (derived from the quoted duration and total)", derived=True)
    # TTFT
    if "mean_ttft_ms" in q:
        add("ttft", "mean_ttft_ms", q["mean_ttft_ms"] / 1e3, "s", "ttft_mean", d["ttft"])
    elif "ftl_ave_s" in q:
        add("ttft", "ftl_ave_s", q["ftl_ave_s"], "s", "ttft_mean", d["ttft"])
    # TPOT / ITL
    if "mean_tpot_ms" in q:
        tpot_def = METRIC_DEFINITIONS["vllm bench serve"]["tpot"]
        add("tpot_itl", "mean_tpot_ms", q["mean_tpot_ms"] / 1e3, "s", "tpot_mean", tpot_def)
        if "mean_itl_ms" in q:
            add("itl", "mean_itl_ms", q["mean_itl_ms"] / 1e3, "s", "itl_mean", d.get("itl", tpot_def))
    elif "mean_itl_ms" in q:
        add("tpot_itl", "mean_itl_ms", q["mean_itl_ms"] / 1e3, "s", "itl_mean", d["itl"])
    elif "token_latency_p50_s" in q:
        add("tpot_itl", "token_latency_p50_s", q["token_latency_p50_s"], "s", "itl_p50", d["itl"])
    if "benchmark_duration_s" in q:
        add("duration", "benchmark_duration_s", q["benchmark_duration_s"], "s", "duration_s",
            "first request sent to last response")
    if not any(m.group in HEADLINE for m in out):
        raise r.fail("quoted", "no throughput, TTFT or TPOT/ITL number the harness knows "
                     "(output_token_throughput_tok_s, token_throughput_tok_s, throughput_out_tok_s, throughput_tok_s, "
                     "mean_ttft_ms, ftl_ave_s, mean_tpot_ms, mean_itl_ms, token_latency_p50_s)")
    return out, assumed


def _tool(raw: dict) -> str:
    bench = str(raw.get("benchmark_command") or raw.get("command") or "")
    if bench.startswith("vllm bench serve"):
        return "vllm bench serve"
    if bench.startswith("trtllm-bench"):
        return "trtllm-bench"
    if "profile_generation" in bench:
        return "lmdeploy profile_generation"
    if "profile_throughput" in bench:
        return "lmdeploy profile_throughput"
    return "triton online (unstated)"


def normalize_case(raw: Any, *, file: str, index: int = 0, sources: dict | None = None, file_unstated=(),
                   data_dir: Path = DATA_DIR) -> PublishedCase:
    """One raw case of a data file -> a PublishedCase, or CaseError (one line: file, case, field)."""
    if not isinstance(raw, dict):
        raise CaseError(f"{file}: case #{index + 1}: expected a mapping of fields, got {type(raw).__name__}")
    r = _Reader(file, raw, index)
    name = r.get("name", (str,))
    source = r.get("source", (str,))
    url = ""
    if sources is not None:
        if source not in sources:
            raise r.fail("source", f"{source!r} is not a key of the file's sources ({', '.join(sources) or 'none'})")
        url = sources[source]
        if not isinstance(url, str) or not _PINNED.match(url):
            raise r.fail("source", f"{url!r} is not a GitHub URL pinned to a 40-hex commit")
    # engine
    eng = r.get("engine", (dict,))
    ename = r.get("engine.name", (str,), where=eng)
    if ename.lower() not in ENGINE_KEYS:
        raise r.fail("engine.name", f"{ename!r}; allowed: {', '.join(ENGINE_KEYS)}")
    version = eng.get("version")
    if not isinstance(version, (str, int, float)) or isinstance(version, bool) or str(version) == "":
        raise r.fail("engine.version", f"expected a version string, got {version!r}")
    flags = eng.get("flags") or {}
    if not isinstance(flags, dict):
        raise r.fail("engine.flags", f"expected a mapping, got {type(flags).__name__}")
    engine = Engine(ENGINE_KEYS[ename.lower()], ename, str(version), eng.get("command"), dict(flags),
                    eng.get("backend"))
    # model and GPU
    model = r.get("model", (str,))
    model_is_file = model.endswith(".json")
    if model_is_file:
        if not (data_dir / model).is_file():
            raise r.fail("model", f"{model!r}: no such config.json beside the data ({data_dir})")
    elif model not in _model_names():
        raise r.fail("model", f"{model!r} is neither a `servesim catalog models` name nor a config.json beside "
                     "the data")
    gpu = r.get("gpu", (str,))
    if gpu not in _gpu_names():
        raise r.fail("gpu", f"{gpu!r} is not a `servesim catalog gpus` name; allowed: "
                     f"{', '.join(sorted(_gpu_names()))}")
    tp = r.positive_int("tensor_parallel")
    pp = r.positive_int("pipeline_parallel", required=False, default=1)
    ep = raw.get("expert_parallel_size") or (tp if raw.get("expert_parallel") is True else 1)
    if not isinstance(ep, int) or isinstance(ep, bool) or ep < 1:
        raise r.fail("expert_parallel_size", f"expected an integer >= 1, got {ep!r}")
    dp_attention = raw.get("dp_attention", False)
    if not isinstance(dp_attention, bool):
        raise r.fail("dp_attention", f"expected true or false, got {dp_attention!r}")
    dtype = r.get("dtype", (str,))
    if dtype not in _DTYPES:
        raise r.fail("dtype", f"{dtype!r}; allowed: {', '.join(sorted(_DTYPES))}")
    assumptions: list[str] = []
    if "pipeline_parallel" in raw and raw["pipeline_parallel"] is None:
        assumptions.append("pipeline parallel size not given per cell: 1 assumed")
    kv_raw = raw.get("kv_cache_dtype", "auto")
    if kv_raw is None:
        kv_raw = "auto"
        assumptions.append("KV-cache dtype unstated: the activation dtype assumed")
    if kv_raw not in _KV_DTYPES:
        raise r.fail("kv_cache_dtype", f"{kv_raw!r}; allowed: {', '.join(_KV_DTYPES)} or null")
    kv_dtype = _KV_DTYPES[kv_raw] or ("fp16" if dtype == "fp16" else "bf16")
    kind = r.get("kind", (str,))
    if kind not in _KINDS:
        raise r.fail("kind", f"{kind!r}; allowed: latency, throughput")
    dataset = r.get("dataset", (dict,))
    if not isinstance(dataset.get("name"), str):
        raise r.fail("dataset.name", "missing")
    n = r.positive_int("num_prompts")
    concurrency = r.positive_int("concurrency", required=False)
    rate = raw.get("request_rate")
    if isinstance(rate, str) and rate.lower() == "inf":
        rate = math.inf
    if rate is not None and (not isinstance(rate, (int, float)) or isinstance(rate, bool) or not rate > 0):
        raise r.fail("request_rate", f"expected a positive number or inf, got {rate!r}")
    if concurrency is not None and rate is not None and math.isfinite(rate):
        raise r.fail("request_rate", "both concurrency and a finite request_rate: one arrival process only")
    # quoted numbers
    q = r.get("quoted", (dict,))
    for k, v in q.items():
        if not _num(v) and not (k == "qps" and v == "INF"):
            raise r.fail(f"quoted.{k}", f"expected a number, got {v!r}")
    if not q:
        raise r.fail("quoted", "empty")
    tool = _tool(raw)
    metrics, assumed = _metrics(r, q, tool)
    assumptions += assumed
    # lengths: the quoted totals, else the dataset's fixed lengths, else derived
    n_ok = q.get("successful_requests", n)
    if "total_input_tokens" in q and "total_generated_tokens" in q:
        lin, lout = round(q["total_input_tokens"] / n_ok), round(q["total_generated_tokens"] / n_ok)
        lengths_from = "the quoted token totals over the successful requests (means; fixed lengths)"
        if dataset["name"] != "random" or lout * n_ok != q["total_generated_tokens"]:
            assumptions.append("per-request lengths not given: fixed at the quoted means")
    elif _num(dataset.get("input_len")) and _num(dataset.get("output_len")):
        lin, lout = int(dataset["input_len"]), int(dataset["output_len"])
        lengths_from = "the dataset's fixed input/output lengths"
        if dataset["name"] == "unstated":
            assumptions.append("every request assumed to have exactly the printed input/output lengths")
    elif all(k in q for k in ("rps_req_s", "throughput_out_tok_s", "throughput_total_tok_s")):
        lout = round(q["throughput_out_tok_s"] / q["rps_req_s"])
        lin = round((q["throughput_total_tok_s"] - q["throughput_out_tok_s"]) / q["rps_req_s"])
        lengths_from = "the means implied by the quoted throughputs (output / RPS, (total - output) / RPS)"
        assumptions.append(f"ShareGPT sample lengths not given: fixed at the means {lin}/{lout} implied by the "
                           "quoted output and total throughput per request")
    else:
        lin = lout = 0  # filled from BORROWED_LENGTHS by load_suite, else the case is not simulated
        lengths_from = "unknown"
    if concurrency is not None:
        arrival = "closed_loop"
        if tool.startswith("lmdeploy"):
            assumptions.append(f"{concurrency} client threads keep {concurrency} requests in flight: a closed loop")
    elif rate is not None and math.isfinite(rate):
        arrival = "poisson"
        assumptions.append(f"QPS {rate:g}: Poisson arrivals assumed (the arrival process is unstated)")
    else:
        arrival = "burst"
        if tool == "trtllm-bench":
            assumptions.append("offline max-throughput: every request queued at t = 0 (burst); the build-time batch "
                               "limits decide how many run at once")
    if "(blank" in str(raw.get("source_block", "")):
        assumptions.append("a blank GPU cell read as the GPU of the rows above it")
    workload = Workload(lin, lout, lengths_from, arrival, concurrency, rate, n)
    unstated = tuple(raw.get("unstated") or ()) + tuple(file_unstated)
    return PublishedCase(
        file=file, name=name, source=source, url=url, source_block=raw.get("source_block"), engine=engine,
        model=model, model_is_file=model_is_file, gpu=gpu, tensor_parallel=tp, pipeline_parallel=pp,
        expert_parallel=ep, dp_attention=dp_attention, weights=dtype, kv_dtype=kv_dtype, dataset=dict(dataset),
        kind=kind, workload=workload, flags=dict(flags), quoted=dict(q), metrics=tuple(metrics), unstated=unstated,
        assumptions=tuple(assumptions), note=raw.get("note"))


def data_files(data_dir: Path = DATA_DIR) -> list[Path]:
    return sorted(data_dir.glob("*.yaml"))


def load_suite(paths: list[Path] | None = None, data_dir: Path = DATA_DIR) -> Suite:
    """Every data file's cases; a malformed case or file becomes one line in `errors`, never an exception."""
    paths = data_files(data_dir) if paths is None else [Path(p) for p in paths]
    cases, errors, sources = [], [], {}
    for path in paths:
        fname = path.name
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as err:
            errors.append(f"{fname}: cannot be read as YAML ({' '.join(str(err).split())})")
            continue
        if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
            errors.append(f"{fname}: expected a mapping with a 'cases' list")
            continue
        file_sources = data.get("sources") or {}
        if not isinstance(file_sources, dict):
            errors.append(f"{fname}: field 'sources': expected a mapping of key -> pinned URL")
            continue
        sources.update({f"{fname}:{k}": v for k, v in file_sources.items()})
        unstated = data.get("unstated") or ()
        if not isinstance(unstated, list) or not all(isinstance(u, str) for u in unstated):
            errors.append(f"{fname}: field 'unstated': expected a list of strings")
            unstated = ()
        for i, raw in enumerate(data["cases"]):
            try:
                cases.append(normalize_case(raw, file=fname, index=i, sources=file_sources, file_unstated=unstated,
                                            data_dir=path.parent))
            except CaseError as err:
                errors.append(str(err))
    names = Counter(c.name for c in cases)
    for dup in [n for n, k in names.items() if k > 1]:
        errors.append(f"case name {dup!r} appears {names[dup]} times; names must be unique")
    cases = _borrow_lengths(cases)
    return Suite(cases, errors, paths, sources)


def _borrow_lengths(cases: list[PublishedCase]) -> list[PublishedCase]:
    by_name = {c.name: c for c in cases}
    out = []
    for c in cases:
        if c.workload.lengths_from == "unknown":
            donor = next((by_name.get(d) for pat, d in BORROWED_LENGTHS.items() if fnmatch.fnmatch(c.name, pat)), None)
            if donor is not None:
                w = donor.workload
                c = _replace(c, workload=Workload(w.input_tokens, w.output_tokens, f"borrowed from {donor.name!r}",
                                                  c.workload.arrival, c.workload.concurrency, c.workload.request_rate,
                                                  c.workload.num_prompts),
                             assumptions=c.assumptions + (
                                 f"token totals not given: the lengths of {donor.name!r} (same dataset, prompt count "
                                 f"and tokenizer), {w.input_tokens}/{w.output_tokens}",))
        out.append(c)
    return out


def _replace(case: PublishedCase, **changes) -> PublishedCase:
    from dataclasses import replace
    return replace(case, **changes)


# --- selection and the protocol -----------------------------------------------------------------------------

def role(case: PublishedCase) -> str:
    """'fit' if the case is one of its engine version's FIT_RUNS, else 'held-out'."""
    return "fit" if case.name in FIT_RUNS.get(case.key, ()) else "held-out"


def fit_run_problems(cases: list[PublishedCase]) -> list[str]:
    """Every FIT_RUNS name must be a loaded case of that engine and version; every version must be in FIT_RUNS."""
    by_name = {c.name: c for c in cases}
    problems = []
    for (engine, version), names in FIT_RUNS.items():
        for name in names:
            c = by_name.get(name)
            if c is None:
                problems.append(f"FIT_RUNS[{engine}, {version}]: no case named {name!r}")
            elif c.key != (engine, version):
                problems.append(f"FIT_RUNS[{engine}, {version}]: {name!r} is a {c.engine.label} run")
    for key in sorted({c.key for c in cases} - set(FIT_RUNS)):
        problems.append(f"FIT_RUNS has no entry for {key[0]} {key[1]} (give it one, even an empty one)")
    return problems


def select(cases: list[PublishedCase], *, engine: str | None = None, pattern: str | None = None,
           only: str | None = None, quick: bool = False) -> list[PublishedCase]:
    """Filter: engine key; a glob on the case name or its data file (name or path); a substring; --quick = the
    FIT_RUNS plus the first held-out case of each engine version and kind."""
    out = [c for c in cases if engine is None or c.engine.key == ENGINE_KEYS.get(engine.lower(), engine.lower())]
    if pattern:
        base = Path(pattern).name
        out = [c for c in out if fnmatch.fnmatch(c.name, pattern) or fnmatch.fnmatch(c.file, base)]
    if only:
        out = [c for c in out if only in c.name]
    if quick:
        seen, keep = set(), []
        for c in out:
            k = (c.key, c.kind)
            if role(c) == "fit" or k not in seen:
                keep.append(c)
                if role(c) != "fit":
                    seen.add(k)
        out = keep
    return out


# --- scenarios -------------------------------------------------------------------------------------------

def _model_spec(case: PublishedCase):
    from sim.model.catalog import get_model
    from sim.model.hf_config import load_hf_config
    if case.model_is_file:
        return load_hf_config(DATA_DIR / case.model)
    return get_model(case.model)


def _flag(case: PublishedCase, *names: str):
    for n in names:
        if n in case.flags:
            return case.flags[n]
    return None


def _quantization(case: PublishedCase) -> dict:
    if case.weights == "fp8":
        return {"weights": "fp8", "kv_cache": case.kv_dtype, "fp8_compute": True}
    if case.weights == "fp8-weights":
        return {"weights": "fp8", "kv_cache": case.kv_dtype, "fp8_compute": False}
    return {"weights": case.weights, "kv_cache": case.kv_dtype}


def _kv_free_bytes(case: PublishedCase, mnbt: int, max_num_seqs: int) -> tuple[int, int]:
    """(bytes per GPU left after weights and activations at gpu_memory_utilization 1, KV bytes per token per GPU)."""
    from sim.errors import ConfigError, DoesNotFitError
    from sim.model.catalog import get_gpu
    from sim.model.memory import kv_capacity
    q = _quantization(case)
    try:
        cap = kv_capacity(_model_spec(case), get_gpu(case.gpu), tensor_parallel=case.tensor_parallel,
                          weight_dtype=q["weights"], kv_dtype=q["kv_cache"], gpu_memory_utilization=1.0,
                          max_num_batched_tokens=mnbt, max_num_seqs=max_num_seqs)
    except (DoesNotFitError, ConfigError) as err:
        raise NotSimulated(f"does not fit: {err}") from None
    return cap.kv_bytes, cap.kv_bytes_per_token


def engine_settings(case: PublishedCase) -> tuple[dict, dict, list[str]]:
    """(scheduler section, kv_cache section, approximations) as the case's engine derives them on its GPU."""
    from sim.model.catalog import get_gpu
    e, gpu = case.engine, get_gpu(case.gpu)
    approx: list[str] = []
    defaults = ENGINE_DEFAULTS[e.key]
    if defaults["versions"].get(e.version) != "cited":
        approx.append(defaults["approximated"])
    if defaults.get("not_modelled"):
        approx.append(defaults["not_modelled"])
    model = _model_spec(case)
    max_len = _flag(case, "--max-model-len", "--max_seq_len", "--context-length")
    max_len = int(max_len) if max_len is not None else None
    if e.key == "vllm":
        if case.gpu in VLLM_V1_DEFAULTS:
            batch = dict(VLLM_V1_DEFAULTS[case.gpu])
        else:  # the same rule as the table: >= 70 GiB and not an A100
            big = gpu.hbm_bytes >= 70 * 2**30 and "a100" not in case.gpu
            batch = {"max_num_batched_tokens": 8192 if big else 2048, "max_num_seqs": 1024 if big else 256}
        mnbt = _flag(case, "--max-num-batched-tokens")
        if mnbt is not None:
            batch["max_num_batched_tokens"] = int(mnbt)
        sched = {"batching": "continuous", "chunked_prefill": True, **batch}
        kv = {"layout": "paged", "block_size": 16, "gpu_memory_utilization": 0.9}
    elif e.key == "sglang":
        gpu_mem = gpu.hbm_bytes / 2**20  # MiB, as get_device_memory_capacity reports it
        if not 60 * 1024 <= gpu_mem < 160 * 1024:
            raise NotSimulated(f"SGLang's defaults are tabulated here for 60-160 GiB GPUs only, not {case.gpu}")
        chunk = 8192
        graph_bs = 256 if case.tensor_parallel < 4 else 512
        reserved = max(512 + max(chunk, 2048) * 1.5 + graph_bs * 2
                       + case.tensor_parallel * case.pipeline_parallel / 8 * 1024, 10 * 1024)
        frac = round((gpu_mem - reserved) / gpu_mem, 3)
        free, per_token = _kv_free_bytes(case, chunk, 4096)
        # kv tokens at mem_fraction_static = free share of (frac x HBM) - weights - activations
        kv_tokens = max(0, int(free - (1 - frac) * gpu.hbm_bytes)) // per_token
        context_len = max_len or model.max_context
        max_running = min(max(int(kv_tokens / context_len * 512), 2048), 4096)
        sched = {"batching": "continuous", "chunked_prefill": True, "max_num_batched_tokens": chunk,
                 "max_num_seqs": max_running}
        kv = {"layout": "paged", "block_size": 1, "gpu_memory_utilization": frac}
    elif e.key == "trtllm":
        chunked = str(_flag(case, "--enable_chunked_prefill")).lower() == "true"
        mbs, mnt = 2048, 8192
        fraction = 0.95 if e.version.startswith("0.17") else 0.9
        if not chunked and case.workload.input_tokens > mnt:
            # without chunked context a prompt is one step; ServeSim also asks room for a recompute after preemption
            mnt = case.workload.input_tokens + case.workload.output_tokens
            approx.append(f"max_num_tokens raised to {mnt} = the prompt + output length (no chunked context; the build "
                          "sizes it from the dataset, value unstated)")
        free, per_token = _kv_free_bytes(case, mnt, mbs)
        capacity = int(free * fraction) // per_token
        if capacity < 1:
            raise NotSimulated("no memory left for the KV cache after the weights")
        sched = {"batching": "continuous", "chunked_prefill": chunked, "max_num_batched_tokens": mnt,
                 "max_num_seqs": mbs}
        kv = {"layout": "paged", "block_size": 32, "capacity_tokens": capacity}
        if fraction == 0.95:
            approx.append("kv_cache_free_gpu_mem_fraction 0.95 assumed (the page: 0.95 'in majority of cases', 0.90 "
                          "on out-of-memory)")
    elif e.key == "lmdeploy":
        mbs = case.flags.get("max_batch_size")
        blocks = case.flags.get("cache_max_entry_count")
        if not isinstance(mbs, int) or not isinstance(blocks, int) or blocks <= 1:
            raise NotSimulated("LMDeploy run without max_batch_size and a block count (cache_max_entry_count > 1)")
        sched = {"batching": "continuous", "chunked_prefill": False, "max_num_seqs": mbs}
        kv = {"layout": "paged", "block_size": 128, "capacity_tokens": blocks * 128}
    else:  # pragma: no cover - ENGINE_KEYS and this list agree
        raise NotSimulated(f"no engine defaults for {e.key}")
    if max_len is not None:
        sched["max_model_len"] = max_len
    return sched, kv, approx


def unsupported(case: PublishedCase, cost_model: dict) -> str | None:
    """Why ServeSim cannot simulate this case with this cost model (None if it can): one line."""
    if case.dp_attention:
        return "data-parallel attention (--enable-dp-attention) is not modelled"
    if case.expert_parallel > 1:
        return f"expert parallelism (EP {case.expert_parallel}) is not modelled: ServeSim shards experts by TP"
    if case.workload.input_tokens < 1 or case.workload.output_tokens < 1:
        return "the per-request lengths are unknown (no totals, no fixed lengths, nothing to borrow)"
    if cost_model.get("kind") == "measured":
        from sim.cost.measured import measured_unsupported
        q = _quantization(case)
        why = measured_unsupported(case.gpu, q["weights"], q["kv_cache"])
        if why is None and case.weights == "fp8-weights":
            why = "weight-only FP8 (FP8 weights, 16-bit matmuls) is not in the measured tables"
        if why:
            return f"measured kernels: {why}"
    return None


def scenario(case: PublishedCase, cost_model: dict, fitted: dict | None = None,
             num_requests: int | None = None) -> dict:
    """The case's scenario (a dict for validate_scenario): the model, GPU and TP of the run, its engine's defaults
    for that GPU (`engine_settings`), its workload, `cost_model` with the `fitted` numbers in its overhead section.
    `num_requests` (tests only) shrinks the run. Raises NotSimulated."""
    why = unsupported(case, cost_model)
    if why:
        raise NotSimulated(why)
    sched, kv, _ = engine_settings(case)
    w = case.workload
    if w.arrival == "closed_loop":
        arrival = {"kind": "closed_loop", "num_users": w.concurrency, "think_time_s": 0.0}
    elif w.arrival == "poisson":
        arrival = {"kind": "poisson", "rate_per_s": float(w.request_rate)}
    else:
        arrival = {"kind": "burst"}
    cm = dict(cost_model)
    if fitted:
        cm["overhead"] = {**cm.get("overhead", {"engine": "vllm-cudagraph"}), **fitted}
    model = {"hf_config": str(DATA_DIR / case.model)} if case.model_is_file else case.model
    return {
        "name": case.name,
        "model": model,
        "hardware": {"gpu": case.gpu, "tensor_parallel": case.tensor_parallel},
        "workload": {"arrival": arrival,
                     "lengths": {"kind": "fixed", "input_tokens": w.input_tokens, "output_tokens": w.output_tokens}},
        "scheduler": sched,
        "kv_cache": kv,
        "quantization": _quantization(case),
        "cost_model": cm,
        "run": {"seed": 0, "num_requests": num_requests or w.num_prompts},
    }


# --- running ---------------------------------------------------------------------------------------------

@dataclass
class CaseResult:
    case: PublishedCase
    role: str  # fit or held-out
    status: str  # simulated or not simulated
    reason: str = ""
    simulated: dict = field(default_factory=dict)  # metric group -> simulated value (SI)
    errors: dict = field(default_factory=dict)  # metric group -> signed error (sim / measured - 1)
    label: str = ""  # the cost model's label
    approximations: tuple[str, ...] = ()
    fitted: dict = field(default_factory=dict)
    notes: str = ""
    wall_s: float = 0.0


def measure(result) -> dict:
    """The ServeSim quantities (SIM_QUANTITIES) of one run, in SI units."""
    import numpy as np
    r = result.requests
    fin = r[r["finished"]]
    duration = float(fin["finish_s"].max() - r["arrival_s"].min()) if len(fin) else math.nan
    out = float(fin["output_tokens"].sum())
    return {
        "output_tok_s": out / duration,
        "total_tok_s": (out + float(fin["prompt_tokens"].sum())) / duration,
        "ttft_mean": float(fin["ttft_s"].mean()),
        "tpot_mean": float(np.nanmean(fin["tpot_s"])) if fin["tpot_s"].notna().any() else math.nan,
        "itl_mean": float(result.summary.get("itl_mean", math.nan)),
        "itl_p50": float(result.summary.get("itl_p50", math.nan)),
        "duration_s": duration,
    }


def run_case(case: PublishedCase, cost_model_name: str, fitted: dict | None = None,
             num_requests: int | None = None) -> CaseResult:
    """Simulate one case; a case ServeSim cannot express comes back 'not simulated' with its reason."""
    from sim.config.files import validate_scenario
    from sim.errors import ConfigError
    from sim.run import simulate
    t0 = time.perf_counter()
    res = CaseResult(case, role(case), "not simulated", fitted=dict(fitted or {}))
    cm = COST_MODELS[cost_model_name]
    try:
        _, _, approx = engine_settings(case)
        res.approximations = tuple(approx) + (
            ("the cost model's overhead terms are vLLM's (vllm-cudagraph)",)
            if "overhead" in cm and case.engine.key != "vllm" else ())
        spec = validate_scenario(scenario(case, cm, fitted, num_requests))
    except NotSimulated as err:
        res.reason = str(err)
        return res
    except ConfigError as err:
        res.reason = f"scenario rejected: {' '.join(str(err).split())}"
        return res
    try:
        result = simulate(spec)
    except ConfigError as err:
        res.reason = f"simulation refused: {' '.join(str(err).split())}"
        return res
    sim = measure(result)
    res.status = "simulated"
    res.label = result.extras.get("cost_model_label", "")
    for m in case.metrics:
        value = sim[m.sim]
        res.simulated[m.group] = value
        res.errors[m.group] = value / m.measured - 1 if math.isfinite(value) and m.measured else math.nan
    s = result.summary
    unfinished = int(s.get("num_unfinished", 0)) + int(s.get("num_rejected", 0))
    res.notes = f"KV {s.get('kv_capacity_tokens', 0):,} tokens, {s.get('preemptions', 0)} preemptions"
    if unfinished:
        reasons = [x for x in result.requests["reject_reason"].unique() if x]
        why = f" ({reasons[0]})" if reasons else ""
        res.notes += f", {unfinished} of {len(result.requests)} requests unfinished or rejected{why}"
        if unfinished == len(result.requests):
            res.status, res.reason = "not simulated", f"ServeSim finished no request{why}"
            res.simulated, res.errors = {}, {}
    res.wall_s = time.perf_counter() - t0
    return res


def run_suite(cases: list[PublishedCase], cost_model_name: str = DEFAULT_COST_MODEL, *,
              num_requests: int | None = None, fit: Callable = fit_preset, fit_pool: list[PublishedCase] | None = None,
              progress: Callable[[CaseResult], None] | None = None) -> tuple[list[CaseResult], dict]:
    """The held-out protocol: per engine version, simulate its fitted runs, fit on them (`fit`), then simulate the
    held-out runs with the fitted numbers. The fitted runs are taken from `fit_pool` (default: `cases`), so that a
    selection of held-out runs still gets the numbers fitted on all of its version's FIT_RUNS; they are reported
    too. Returns (results: `cases`' order, then any fitted run from the pool; fitted numbers per (engine, version))."""
    if cost_model_name not in COST_MODELS:
        raise KeyError(f"unknown cost model {cost_model_name!r}; allowed: {', '.join(COST_MODELS)}")
    by_key: dict[tuple[str, str], list[PublishedCase]] = {}
    for c in cases:
        by_key.setdefault(c.key, []).append(c)
    pool = cases if fit_pool is None else fit_pool
    chosen = {c.name for c in cases}
    extra = [c for c in pool if c.key in by_key and role(c) == "fit" and c.name not in chosen]
    for c in extra:
        by_key[c.key].append(c)
    done: dict[str, CaseResult] = {}
    fitted_all: dict[tuple[str, str], dict] = {}
    for key, members in by_key.items():
        fit_cases = [c for c in members if role(c) == "fit"]
        base = [run_case(c, cost_model_name, None, num_requests) for c in fit_cases]
        fitted = fit(key[0], key[1], [r for r in base if r.status == "simulated"], cost_model_name) or {}
        fitted_all[key] = fitted
        if fitted:  # the fitted runs, as the fitted preset simulates them
            base = [run_case(c, cost_model_name, fitted, num_requests) for c in fit_cases]
        for r in base:
            done[r.case.name] = r
            if progress:
                progress(r)
        for c in members:
            if role(c) == "held-out":
                r = run_case(c, cost_model_name, fitted, num_requests)
                done[c.name] = r
                if progress:
                    progress(r)
    return [done[c.name] for c in list(cases) + extra], fitted_all


def summarize(results: list[CaseResult], which: str = "held-out") -> dict[str, dict]:
    """Per engine: for each headline metric, n, median and max |error| over the `which` runs simulated."""
    out: dict[str, dict] = {}
    for r in results:
        if r.role != which:
            continue
        e = out.setdefault(r.case.engine.key, {"runs": 0, "simulated": 0, **{g: [] for g in HEADLINE}})
        e["runs"] += 1
        if r.status != "simulated":
            continue
        e["simulated"] += 1
        for g in HEADLINE:
            if g in r.errors and math.isfinite(r.errors[g]):
                e[g].append(abs(r.errors[g]))
    for e in out.values():
        for g in HEADLINE:
            vals = e[g]
            e[g] = {"n": len(vals), "median": statistics.median(vals) if vals else math.nan,
                    "max": max(vals) if vals else math.nan}
    return out


def counts(cases: list[PublishedCase]) -> dict[str, Counter]:
    """Case counts per engine, GPU, TP, dtype and kind (and per source repository)."""
    def repo(url: str) -> str:
        m = re.match(r"https://github\.com/([^/]+/[^/]+)/", url)
        return m.group(1) if m else url
    return {
        "engine": Counter(c.engine.label for c in cases),
        "gpu": Counter(c.gpu for c in cases),
        "tp": Counter(c.tensor_parallel for c in cases),
        "dtype": Counter(c.weights for c in cases),
        "kind": Counter(c.kind for c in cases),
        "source": Counter(repo(c.url) for c in cases),
        "file": Counter(c.file for c in cases),
    }
