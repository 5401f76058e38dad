"""The published suite (issue 30, item 5): every run under benchmarks/published/ as a typed case, its scenario,
and the held-out protocol. `benchmarks/bench_published.py` is the command that prints the table.

    from published_suite import load_suite, run_suite
    suite = load_suite()                      # every data file; malformed cases become one-line errors
    results = run_suite(suite.cases, "roofline")

What this module does, in order:

1. `load_suite` reads every `*.yaml` under benchmarks/published/ into `PublishedCase`s. Each case's schema is
   checked field by field; a malformed case becomes one line in `Suite.errors` naming the file, the case and the
   field (it never stops the run). Normalized: the engine (`vllm`, `sglang`, `trtllm`, `lmdeploy` + its version),
   the GPU (a `servesim catalog gpus` name), the model (a catalog name: a new model's config.json goes in
   sim/model/configs/), TP, weight and KV dtypes, the workload (a result file's every request where the case lists
   them, `requests`, replayed in order and counted as its client counted them; otherwise a ShareGPT sample drawn as
   the clients draw it, scaled to the quoted means, `sharegpt_bench_lengths`, and any other dataset fixed at the
   quoted means), the arrival (below) and the quoted metrics, each mapped to the ServeSim quantity it is compared
   with and to the benchmark tool's definition of it (`METRIC_DEFINITIONS`).
   Every assumption a case needs (a number the source does not give) is written into `PublishedCase.assumptions`.
2. `scenario` builds a case's ServeSim scenario: its engine preset (`engine: {name, version, flags}`, which
   sim/config/engines/ turns into that engine's defaults for the GPU and version). A case ServeSim cannot express
   yet raises `NotSimulated(reason)`: it is listed, never dropped.
3. The held-out protocol: `FIT_RUNS` names, per engine and version, the runs a preset's free numbers may be
   fitted on; every other run is held out. `fit_preset` fits them (the engine's CPU terms per_step_s and
   per_seq_s, and the API front-end's per_request_s and per_output_chunk_s where a fit run was measured at an HTTP
   client), and how well its runs pin each one (a log-normal sigma, SPREAD_METHOD; issue 31's source c);
   `run_suite` simulates the fitted runs, fits, then simulates the held-out runs with what it returned, and
   `summarize` gives per engine the median and max |error| over the held-out runs only.

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

from sim.config.engine_command import option_value
from sim.config.engines import PRESETS, option_flag_name, usable_terms
from sim.workload.lengths import SHAREGPT_BENCH_FILTER, sharegpt_bench_lengths

HERE = Path(__file__).resolve().parent
DATA_DIR = HERE / "published"
ROOT = HERE.parent

# --- engines ------------------------------------------------------------------------------------------

ENGINE_KEYS = {"vllm": "vllm", "sglang": "sglang", "tensorrt-llm": "trtllm", "trtllm": "trtllm",
               "lmdeploy-turbomind": "lmdeploy", "lmdeploy": "lmdeploy"}
ENGINE_LABELS = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM", "lmdeploy": "LMDeploy"}

# The engines with a preset (sim/config/engines/: each engine's own defaults for the GPU and version, with the
# source file and version cited there).
PRESET_ENGINES = tuple(PRESETS)

# The scenario keys a case states itself (its TP, PP, EP, weight and KV dtypes): the options that set them are the
# case's.
CASE_STATED = ("hardware.tensor_parallel", "hardware.pipeline_parallel", "hardware.expert_parallel",
               "quantization.weights", "quantization.kv_cache")


def preset_flag_name(engine: str, option: str) -> str | None:
    """The preset's name of a run's command-line option, read as `engine.command` reads it
    (sim/config/engines/presets.py `option_flag_name`: the preset's own spelling of each flag, its aliases, vLLM's
    underscores for dashes, argparse's unambiguous prefix: --mem-frac is SGLang's --mem-fraction-static); None where
    the preset has none or the option sets what the case states itself (CASE_STATED). LMDeploy 0.1.0a's run scripts
    write TurboMind's config.ini keys, which the preset spells the same way."""
    flags = PRESETS[engine].flags
    if engine == "lmdeploy" and option in flags:
        name = option
    else:
        name = option_flag_name(engine, option)
    return name if name is not None and flags[name].target not in CASE_STATED else None


# The cost models a run can be priced with (`--cost-model NAME`); the first is today's default.
# "default": none named, so ServeSim picks the most accurate model available for the run (sim/config/cost_choice.py)
# with the preset's CPU terms. A measured model reads the run's own engine's tables (sglang, trtllm) where shipped.
COST_MODELS = {
    "default": {},
    "roofline": {"kind": "roofline", "overhead": {"engine": "none"}},
    "measured kernels": {"kind": "measured", "on_missing": "error", "overhead": {"engine": "none"}},
    "measured + overhead": {"kind": "measured", "on_missing": "error", "overhead": {"engine": "vllm-cudagraph"}},
    "learned roofline + overhead": {"kind": "roofline", "efficiencies": "learned",
                                    "overhead": {"engine": "vllm-cudagraph"}},
}
DEFAULT_COST_MODEL = "default"

# --- the held-out protocol ----------------------------------------------------------------------------

# Per (engine, version): the runs the preset's free numbers may be fitted on (the lowest-concurrency run and
# one throughput run where the version has both). Every other run is held out and reported on its own.
FIT_RUNS: dict[tuple[str, str], tuple[str, ...]] = {
    ("vllm", "0.11.0"): ("qwen3-8b h100 c1", "qwen3-14b h100 2k burst"),
    ("vllm", "0.9.2"): ("gpustack-quant qwen3-8b h100 vllm 0.9.2 bf16 sharegpt",),
    ("vllm", "0.19.0"): (),  # kvcached's two stock-vLLM runs (another host than GPUStack's): both held out
    ("vllm", "0.10.2"): (),  # GPUStack's gpt-oss-120b H100 page: a new architecture and dtype, every run held out
    ("vllm", "0.13.0"): (),  # GPUStack's DeepSeek-V3.2 page: a sparse-attention model, every run held out
    ("vllm", "0.6.0"): ("sglang-060 llama-3.1-8b a100 vllm 0.6.0 rps 4",
                        "sglang-060 llama-3.1-8b a100 vllm 0.6.0 offline"),
    ("sglang", "0.5.3.post3"): ("qwen3-8b-h100 sglang c4",),
    ("sglang", "0.5.5.post1"): ("qwen3-14b-h100 sglang sharegpt",),
    ("sglang", "0.5.3"): ("deepseek-r1-h200 sglang tp8 sharegpt",),
    ("sglang", "0.5.3rc0"): (),  # one gpt-oss-120b run: held out
    ("sglang", "0.5.4.post2"): (),  # GPUStack's gpt-oss-20b pages, added to check the MXFP4 pricing: held out
    ("sglang", "0.5.6.post2"): (),  # GPUStack's DeepSeek-V3.2 page: a sparse-attention model, every run held out
    ("sglang", "0.3.0"): ("sglang-060 llama-3.1-8b a100 sglang 0.3.0 rps 4",  # the same runs as vLLM 0.6.0's
                          "sglang-060 llama-3.1-8b a100 sglang 0.3.0 offline"),
    ("vllm", "0.8.4"): (),  # llm-ie's and vLLM-Benchmark's DeepSeek-R1 runs on H200 hosts of their own: held out
    ("vllm", "0.8.2"): (),  # vLLM-Benchmark's Llama 3.1 8B FP8 runs on one H200: held out
    ("sglang", "0.4.5.post3"): (),  # llm-ie's DeepSeek-R1 runs: held out
    ("sglang", "0.4.4.post3"): (),  # vLLM-Benchmark's Llama 3.1 8B FP8 runs: held out
    ("trtllm", "1.2.0rc1"): ("qwen3-8b-h100 trtllm c4", "qwen3-14b-h100 trtllm sharegpt"),
    ("trtllm", "1.0.0"): (),  # the H200 EP8 run and the gpt-oss-120b H100 run: both held out
    ("trtllm", "0.17"): ("trtllm 0.17 llama-3.1-8b h100-sxm tp1 fp8 1000/1000 max-throughput",),
    ("trtllm", "0.14.0"): ("trtllm 0.14 llama-3.1-8b h100-sxm tp1 bf16 467/256 qps 2",
                           "trtllm 0.14 llama-3.1-8b h100-sxm tp1 bf16 467/256 qps INF"),
    ("lmdeploy", "0.1.0a1"): ("lmdeploy llama2-7b tp1 static batch 1 128/2048", "lmdeploy llama2-7b tp1 sharegpt c64"),
}




def fit_preset(engine: str, version: str, fit_results: list["CaseResult"], cost_model: str) -> dict:
    """The preset's free numbers for one engine version, fitted on `fit_results` (its FIT_RUNS, simulated with the
    unfitted preset) only: the CPU terms always, the front-end terms when some fit run was measured at an HTTP
    client. Gauss-Newton on the log errors of the runs' headline metrics (calibrate/engine_fit.py `fit_terms`),
    starting from the unfitted preset's terms (vLLM's estimates) and no front-end. Returns {} when no fit run was
    simulated; a term no fit run moves is left out (not identified), so the preset's value stays. Beside the terms:
    "<term> at bound", "<term> sigma_log" (how well the runs pin it: `fit_spread`, SPREAD_METHOD), "<term> not pinned"
    (its 90% range reaches past its bound: `not_pinned`; never used, as one at a bound) and "fit ..."
    (the noise it assumed, where from, the fit's RMS log error and its number of residuals)."""
    import numpy as np

    from calibrate.engine_fit import at_bounds, fit_spread, fit_terms, log_error, not_pinned, term_limits
    from sim.cost.overhead import ENGINE_DEFAULTS

    runs = [r for r in fit_results if r.status == "simulated" and r.case.headline]
    if not runs:
        return {}
    names = list(CPU_TERMS) + (list(FRONTEND_TERMS) if any(r.case.client_side for r in runs) else [])
    # from the presets' unfitted terms: vLLM's per-step estimate, no front-end
    start = np.array([ENGINE_DEFAULTS["vllm-cudagraph"].per_step_s, 0.0][:len(names)])
    scale, hi = term_limits(names)

    def residuals(theta: np.ndarray) -> np.ndarray:
        terms = dict(zip(names, theta.tolist()))
        out = []
        for r in runs:
            got = simulate_case(r.case, cost_model, terms)
            out += [log_error(got.get(m.sim, math.nan), m.measured) for m in r.case.headline]
        return np.array(out)

    theta, free = fit_terms(residuals, start, scale, hi, iterations=5)
    bounded = at_bounds(theta, free, hi)
    fitted = {n: float(v) for n, v, f in zip(names, theta, free) if f}
    fitted.update({f"{n} at bound": float(v) for n, v, b in zip(names, theta, bounded) if b})  # said, never kept silently
    # How well the fit runs pin each term (issue 31, source c): their metrics are known no better than the kernel
    # model that priced them, whose run-level error the CPU terms absorb (calibrate/engine_fit.py fit_spread).
    key, bias = kernel_bias([r.case for r in runs], cost_model, fitted)
    spread = fit_spread(residuals, theta, free & ~bounded, bias)
    for n, sigma, upper in zip(names, spread["sigma_log"], hi):
        if sigma is not None:
            fitted[f"{n} sigma_log"] = sigma
            if not_pinned(fitted[n], sigma, upper):  # said, never used (as a term at a bound)
                fitted[f"{n} not pinned"] = fitted[n]
    fitted.update({"fit noise_log": bias, "fit rms_log": spread["rms"], "fit residuals": spread["n"]})
    fitted["fit noise from"] = key
    return fitted


def kernel_bias(cases: list["PublishedCase"], cost_model: str, fitted: dict) -> tuple[str, float]:
    """(residuals key, bias sigma): the measured run-level error (calibrate/residuals.json, sim/bands.py
    `step_time_sigmas`) of the kernel model pricing these runs, the largest where they differ; ("no measured
    residuals", 0.0) where none has any (the spread then rests on the fit's own misfit alone, and says so)."""
    from calibrate.engine_fit import run_level_noise
    from sim.config.files import validate_scenario
    found = [run_level_noise(validate_scenario(scenario(case, COST_MODELS[cost_model], fitted))) for case in cases]
    found = [(bias, key) for key, bias in found if key is not None]
    if not found:
        return "no measured residuals", 0.0
    bias, key = max(found)
    return key, float(bias)


def simulate_case(case: "PublishedCase", cost_model_name: str, fitted: dict, num_requests: int | None = None) -> dict:
    """The ServeSim quantities (`measure`) of one case with these fitted numbers; {} if it cannot be simulated."""
    from sim.config.files import validate_scenario
    from sim.run import simulate
    n = num_requests or case.workload.num_prompts  # as the run is evaluated: a burst's throughput needs its count
    try:
        spec = validate_scenario(scenario(case, COST_MODELS[cost_model_name], fitted, n))
        return measure(simulate(spec), case.workload.requests)
    except Exception:  # noqa: BLE001  (a case the fit cannot simulate contributes its worst residual)
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
        "ttft": "client-side time to first token (includes the HTTP front end, tokenization, queueing)",
        "tpot": "per request (latency - TTFT) / (output tokens - 1), the first token excluded; mean over requests",
        "itl": "every gap between streamed chunks, mean over all gaps",
        "tpot_median": "per request (latency - TTFT) / (output tokens - 1), the first token excluded; median over "
                       "requests",
        # its "Peak output token throughput (tok/s)" (vllm/benchmarks/serve.py calculate_metrics)
        "peak": "the most tokens in one whole second: each streamed token's client time (start + TTFT + its ITLs) "
                "bucketed as int(time - the first request's start), the largest bucket",
    },
    "trtllm-bench": {"throughput": "output tokens / total latency (the page's sample report: 3000 x 128 / 16.406 s)"},
    "sglang.bench_serving": {  # it prints means and medians: the quoted key names which
        "throughput": "output tokens / benchmark duration (first request sent to last response)",
        "ttft": "client-side time to first streamed token, over requests",
        "tpot": "per request (latency - TTFT) / (output tokens - 1), over requests",
        "itl": "every gap between streamed chunks, over all gaps",
    },
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

VLLM_BENCH = METRIC_DEFINITIONS["vllm bench serve"]  # the definitions a tool that does not state its own takes

# vllm bench serve's predecessor (benchmarks/benchmark_serving.py, vLLM 0.4-0.7) prints the same figures; its TTFT
# clock starts at the first chunk with text, so a request that completed with none averages in a 0
METRIC_DEFINITIONS["vllm benchmark_serving.py"] = METRIC_DEFINITIONS["vllm bench serve"] | {
    "ttft": "client-side time to the first streamed chunk with text (includes the HTTP front end, tokenization, "
            "queueing); 0 for a request that completed with no text, averaged in"}

# ServeSim's quantity per metric group (what `measure` computes from a Result).
SIM_QUANTITIES = {
    "output_tok_s": "sum(finished output tokens) / duration_s",
    "total_tok_s": "sum(finished prompt + output tokens) / duration_s",
    "requests_per_s": "finished requests / duration_s",
    "ttft_mean": "mean ttft_s (sent to first token: the client's times with a front-end)",
    "ttft_p50": "median ttft_s",
    "tpot_mean": "mean tpot_s = (last token - first token) / (output tokens - 1)",
    "tpot_p50": "median tpot_s (requests of 2 or more output tokens)",
    "itl_mean": "summary itl_mean: the client's gaps between streamed chunks, their mean: every finished request's "
                "last chunk less its first, summed, over its gaps, summed (sim/results.py client_itl; on the "
                "engine's times where every chunk is one token sent as the engine made it, or without a "
                "front-end: sim/results.py latencies)",
    "itl_p50": "summary itl_p50: their median (requests' gaps taken as even; where every chunk is one token sent "
               "as the engine made it, or without a front-end, the median of the gaps the step log shows: each "
               "decoding step's duration plus the steps its requests sat out, sim/results.py decode_gaps)",
    "duration_s": "last response received - first request sent (with a front-end, the client's times; else the "
                  "engine's last finish - first arrival)",
    "peak_output_tok_s": "the most output tokens whose engine steps ended in one whole second counted from the first "
                         "request sent (sim/results.py peak_output_tok_s; the front-end's delay out not added)",
}

HEADLINE = ("throughput", "ttft", "tpot_itl")  # the three metrics of the goals, in this order
BESIDE = ("tpot_median", "itl", "peak")  # compared where quoted, reported beside the headline, not in the goals
GROUP_LABELS = {"throughput": "throughput", "ttft": "TTFT", "tpot_itl": "TPOT/ITL", "itl": "ITL",
                "duration": "duration", "peak": "peak output rate", "tpot_median": "median TPOT"}


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
    measured: float  # in SI units: tok/s, req/s or s
    unit: str  # "tok/s", "req/s" or "s"
    sim: str  # the ServeSim quantity compared (a key of SIM_QUANTITIES)
    definition: str  # the tool's definition of the quoted number
    derived: bool = False  # computed from quoted numbers rather than quoted itself


# A ShareGPT run's per-request lengths are never published, only their totals. The sample is drawn as the clients
# draw it (vllm bench serve and LMDeploy's profile_throughput keep a ShareGPT pair only inside
# SHAREGPT_BENCH_FILTER): the dataset's own first-turn pairs (sim/workload/data/README.md), scaled to the quoted
# means (since 12-01; before, lognormals with assumed sigmas at those means).
# Fixed lengths at the means (what the suite used before 11-28) finish every request of a burst together, where a
# real sample's longest outputs run on alone after the rest.
SHAREGPT_ASSUMPTION = ("ShareGPT per-request lengths not given: the dataset's own first-turn pairs (the first 17,671 "
                       "conversations of ShareGPT_V3_unfiltered_cleaned_split.json, Llama 3's token counts: "
                       "sim/workload/data/README.md), kept as the client's sampler keeps them (prompt and output >= "
                       f"{SHAREGPT_BENCH_FILTER['min_tokens']} tokens, prompt <= {SHAREGPT_BENCH_FILTER['input_max']}, "
                       f"both <= {SHAREGPT_BENCH_FILTER['total_max']}), drawn without replacement, every length scaled "
                       "to kept means {mean_in:.1f}/{mean_out:.1f} (the quoted ones; the run's tokenizer's counts)")


@dataclass(frozen=True)
class Workload:
    input_tokens: int
    output_tokens: int
    lengths_from: str
    arrival: str  # burst, closed_loop, poisson
    concurrency: int | None
    request_rate: float | None
    num_prompts: int
    # The scenario's `workload.lengths`: None = fixed at input_tokens/output_tokens; for a ShareGPT sample, the
    # dataset's own pairs kept as the client's sampler keeps them, scaled to the quoted means (sharegpt_bench_lengths);
    # where the source lists every request, those (`requests.lengths()`)
    lengths: dict | None = None
    # Where the source publishes every request (a `--save-result` file): how its client counted them (`measure`)
    requests: "RequestLengths | None" = None


@dataclass(frozen=True)
class RequestLengths:
    """A result file's per-request lengths, the completed requests' only (failed ones are left out, as the tool
    leaves them out of its figures), in the file's order."""

    input_lens: tuple[int, ...]
    output_lens: tuple[int, ...]  # as the client counted them; 0: the request completed with no text
    zero_ttft: tuple[bool, ...]  # the tool averaged a TTFT of 0 into its mean (no text ever came)

    def lengths(self) -> dict:
        """The scenario's `workload.lengths`: these, in order; a request with no text generated its stop token."""
        from calibrate.bench_results import replayed_outputs
        return {"kind": "listed", "input_tokens": list(self.input_lens),
                "output_tokens": replayed_outputs(self.output_lens)}

    def client(self, num_requests: int):
        """How the client counted a run of `num_requests` of them (calibrate.bench_results.ClientCounts, the one
        definition fit-engine uses too); None when every request had text."""
        from calibrate.bench_results import ClientCounts
        return ClientCounts.of(self.output_lens, self.zero_ttft, num_requests)


@dataclass(frozen=True)
class PublishedCase:
    file: str  # the data file's name
    name: str
    source: str
    url: str
    source_block: str | None
    engine: Engine
    model: str  # a `servesim catalog models` name
    gpu: str
    tensor_parallel: int
    pipeline_parallel: int
    expert_parallel: int  # 1: none
    dp_attention: bool
    weights: str  # bf16, fp16, fp8 (weights and compute), fp8-weights (weight-only FP8), mxfp4 (the experts)
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
    tool: str = "vllm bench serve"  # the benchmark tool (METRIC_DEFINITIONS' keys)
    endpoint: str = "completions"  # the OpenAI endpoint its client called: completions or chat (`_endpoint`)
    fp8_scaling: str = "tensor"  # an fp8 checkpoint's weight scales: per tensor, or per 128 x 128 block

    @property
    def client_side(self) -> bool:
        """The tool measures at an HTTP client, so its times include the API front-end."""
        return self.tool in ("vllm bench serve", "vllm benchmark_serving.py", "sglang.bench_serving",
                             "triton online (unstated)")

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
_DTYPES = {"bf16", "fp16", "fp8", "fp8-weights", "mxfp4"}
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
    from sim.model.catalog import model_names
    return set(model_names())


UNQUALIFIED = "the column says neither mean nor median; the mean (vllm bench serve's first line) assumed"


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
    elif "request_throughput_req_s" in q:
        add("throughput", "request_throughput_req_s", q["request_throughput_req_s"], "req/s", "requests_per_s",
            "'Request throughput (req/s)' as printed: successful requests / benchmark duration")
    elif "benchmark_duration_s" in q and "total_generated_tokens" in q:
        add("throughput", "total_generated_tokens / benchmark_duration_s",
            q["total_generated_tokens"] / q["benchmark_duration_s"], "tok/s", "output_tok_s",
            d["throughput"] + " (derived from the quoted duration and total)", derived=True)
    # TTFT
    if "mean_ttft_ms" in q:
        add("ttft", "mean_ttft_ms", q["mean_ttft_ms"] / 1e3, "s", "ttft_mean", d["ttft"])
    elif "ftl_ave_s" in q:
        add("ttft", "ftl_ave_s", q["ftl_ave_s"], "s", "ttft_mean", d["ttft"])
    elif "median_ttft_ms" in q:  # a source that quotes medians only
        add("ttft", "median_ttft_ms", q["median_ttft_ms"] / 1e3, "s", "ttft_p50", d["ttft"])
    elif "ttft_ms" in q:  # a column that says neither mean nor median: the mean, the first `vllm bench serve` prints
        add("ttft", "ttft_ms", q["ttft_ms"] / 1e3, "s", "ttft_mean", f"{d['ttft']} ({UNQUALIFIED})")
        assumed.append(f"ttft_ms: {UNQUALIFIED}")
    # TPOT / ITL
    if "mean_tpot_ms" in q:
        tpot_def = METRIC_DEFINITIONS["vllm bench serve"]["tpot"]
        add("tpot_itl", "mean_tpot_ms", q["mean_tpot_ms"] / 1e3, "s", "tpot_mean", tpot_def)
        if "mean_itl_ms" in q:
            add("itl", "mean_itl_ms", q["mean_itl_ms"] / 1e3, "s", "itl_mean", d.get("itl", tpot_def))
        if "median_tpot_ms" in q:
            add("tpot_median", "median_tpot_ms", q["median_tpot_ms"] / 1e3, "s", "tpot_p50",
                d.get("tpot_median", VLLM_BENCH["tpot_median"]))
    elif "mean_itl_ms" in q:
        add("tpot_itl", "mean_itl_ms", q["mean_itl_ms"] / 1e3, "s", "itl_mean", d["itl"])
    elif "token_latency_p50_s" in q:
        add("tpot_itl", "token_latency_p50_s", q["token_latency_p50_s"], "s", "itl_p50", d["itl"])
    elif "median_tpot_ms" in q:
        add("tpot_itl", "median_tpot_ms", q["median_tpot_ms"] / 1e3, "s", "tpot_p50", d["tpot"])
        if "median_itl_ms" in q:
            add("itl", "median_itl_ms", q["median_itl_ms"] / 1e3, "s", "itl_p50", d["itl"])
    elif "tpot_ms" in q:  # as ttft_ms
        add("tpot_itl", "tpot_ms", q["tpot_ms"] / 1e3, "s", "tpot_mean",
            f"{METRIC_DEFINITIONS['vllm bench serve']['tpot']} ({UNQUALIFIED})")
        assumed.append(f"tpot_ms: {UNQUALIFIED}")
    if "benchmark_duration_s" in q:
        add("duration", "benchmark_duration_s", q["benchmark_duration_s"], "s", "duration_s",
            "first request sent to last response")
    if "peak_output_token_throughput_tok_s" in q:
        add("peak", "peak_output_token_throughput_tok_s", q["peak_output_token_throughput_tok_s"], "tok/s",
            "peak_output_tok_s", d.get("peak", VLLM_BENCH["peak"]))
    if not any(m.group in HEADLINE for m in out):
        raise r.fail("quoted", "no throughput, TTFT or TPOT/ITL number the harness knows "
                     "(output_token_throughput_tok_s, token_throughput_tok_s, throughput_out_tok_s, throughput_tok_s, "
                     "request_throughput_req_s, mean_ttft_ms, ftl_ave_s, median_ttft_ms, ttft_ms, mean_tpot_ms, "
                     "mean_itl_ms, token_latency_p50_s, median_tpot_ms, tpot_ms)")
    return out, assumed


def _request_lengths(r: _Reader, q: dict, n: int) -> RequestLengths | None:
    """The case's `requests`: the per-request lists of a `--save-result` file, copied from it (`input_lens`,
    `output_lens`; `zero_ttft_indices`: where its `ttfts` entry is 0; `failed_indices`: where its `errors` entry is
    not empty). Checked against the file's own totals, so that a miscopied length fails here, not in the table."""
    from calibrate.bench_results import completed_requests
    req = r.get("requests", (dict,), required=False)
    if req is None:
        return None
    lists = {}
    for key in ("input_lens", "output_lens", "zero_ttft_indices", "failed_indices"):
        v = req.get(key, [] if key.endswith("_indices") else None)
        if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
            raise r.fail(f"requests.{key}", f"expected a list of integers >= 0, got {v!r}"[:200])
        lists[key] = v
    ins, outs = lists["input_lens"], lists["output_lens"]
    if len(ins) != n or len(outs) != n:
        raise r.fail("requests", f"{len(ins)} input and {len(outs)} output lengths; num_prompts is {n}")
    failed, zero = set(lists["failed_indices"]), set(lists["zero_ttft_indices"])
    if any(k >= n for k in failed | zero):
        raise r.fail("requests", f"an index past num_prompts {n}")
    done = RequestLengths(*completed_requests(ins, outs, [k in failed for k in range(n)],
                                              [k in zero for k in range(n)]))
    if not done.input_lens or min(done.input_lens) < 1 or any(outs[k] for k in zero):
        raise r.fail("requests", "expected every completed request to have a prompt, and a zero TTFT only where the "
                     "output is 0")
    for total, lens in (("total_input_tokens", done.input_lens), ("total_generated_tokens", done.output_lens)):
        if total in q and sum(lens) != q[total]:
            raise r.fail("requests", f"the completed requests' lengths sum to {sum(lens)}, not the quoted {total} "
                         f"{q[total]}")
    return done


def _bench_command(raw: dict) -> str:
    return str(raw.get("benchmark_command") or raw.get("command") or "")


def _endpoint(raw: dict) -> str:
    """The endpoint the benchmark command calls: chat for `--backend openai-chat` or `--endpoint
    /v1/chat/completions`, else completions (every tool's default here: vllm bench serve's `openai`, SGLang's and the
    older script's `vllm` backend; trtllm-bench and LMDeploy's profilers call no HTTP endpoint)."""
    bench = _bench_command(raw)
    return "chat" if "openai-chat" in bench or "/chat/completions" in bench else "completions"


def _tool(raw: dict) -> str:
    bench = _bench_command(raw)
    if bench.startswith("vllm bench serve"):
        return "vllm bench serve"
    if "benchmark_serving.py" in bench:
        return "vllm benchmark_serving.py"
    if bench.startswith("trtllm-bench"):
        return "trtllm-bench"
    if "sglang.bench_serving" in bench:
        return "sglang.bench_serving"
    if "profile_generation" in bench:
        return "lmdeploy profile_generation"
    if "profile_throughput" in bench:
        return "lmdeploy profile_throughput"
    return "triton online (unstated)"


def normalize_case(raw: Any, *, file: str, index: int = 0, sources: dict | None = None,
                   file_unstated=()) -> PublishedCase:
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
    negated = next((f for f in flags if str(f).startswith("--no-")), None)
    if negated is not None:  # its value would be read as the flag's own (--no-enable-prefix-caching: true -> on)
        raise r.fail("engine.flags", f"{negated!r}: a negated option; write it as '--{negated[5:]}': false")
    engine = Engine(ENGINE_KEYS[ename.lower()], ename, str(version), eng.get("command"), dict(flags),
                    eng.get("backend"))
    # model and GPU
    model = r.get("model", (str,))
    if model not in _model_names():
        raise r.fail("model", f"{model!r} is not a `servesim catalog models` name (a new model: its config.json in "
                     "sim/model/configs/)")
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
    fp8_scaling = r.get("fp8_scaling", (str,), required=False, default="tensor")
    if fp8_scaling not in ("tensor", "block") or (fp8_scaling == "block" and not dtype.startswith("fp8")):
        raise r.fail("fp8_scaling", f"{fp8_scaling!r} with dtype {dtype!r}; allowed: tensor, or block with an fp8 "
                     "dtype")
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
    mean_in = mean_out = None  # the exact means behind lin/lout, where a sample's lengths are drawn around them
    requests = _request_lengths(r, q, n)
    if requests is not None:  # every request's lengths: the scenario's fixed lengths are replaced by them
        n = len(requests.input_lens)
        lin = round(statistics.fmean(requests.input_lens))
        lout = max(1, round(statistics.fmean(requests.output_lens)))
        lengths_from = "every request's lengths, as the result file lists them (replayed in order)"
        silent = sum(o == 0 for o in requests.output_lens)
        if silent:
            assumptions.append(f"{silent} of {n} requests completed with no text: each replayed with one output "
                               "token (its stop token), counted as the client counted it (no tokens; a TTFT of 0 "
                               "where the file has 0)")
    elif "total_input_tokens" in q and "total_generated_tokens" in q:
        mean_in, mean_out = q["total_input_tokens"] / n_ok, q["total_generated_tokens"] / n_ok
        lin, lout = round(mean_in), round(mean_out)
        lengths_from = "the quoted token totals over the successful requests (means; fixed lengths)"
        if dataset["name"] == "sharegpt":
            lengths_from = "the quoted token totals over the successful requests (the kept means of the sample)"
        elif dataset["name"] != "random" or lout * n_ok != q["total_generated_tokens"]:
            assumptions.append("per-request lengths not given: fixed at the quoted means")
    elif _num(dataset.get("input_len")) and _num(dataset.get("output_len")):
        lin, lout = int(dataset["input_len"]), int(dataset["output_len"])
        lengths_from = "the dataset's fixed input/output lengths"
        if dataset["name"] == "unstated":
            assumptions.append("every request assumed to have exactly the printed input/output lengths")
    elif all(k in q for k in ("rps_req_s", "throughput_out_tok_s", "throughput_total_tok_s")):
        mean_out = q["throughput_out_tok_s"] / q["rps_req_s"]
        mean_in = (q["throughput_total_tok_s"] - q["throughput_out_tok_s"]) / q["rps_req_s"]
        lin, lout = round(mean_in), round(mean_out)
        lengths_from = "the means implied by the quoted throughputs (output / RPS, (total - output) / RPS)"
        if dataset["name"] != "sharegpt":
            assumptions.append(f"sample lengths not given: fixed at the means {lin}/{lout} implied by the "
                               "quoted output and total throughput per request")
    elif raw.get("assumed_means") is not None:
        means = r.get("assumed_means", (dict,))
        mean_in, mean_out, why = means.get("input_mean"), means.get("output_mean"), means.get("why")
        if not (_num(mean_in) and _num(mean_out) and mean_in > 0 and mean_out > 0 and isinstance(why, str) and why):
            raise r.fail("assumed_means", "expected {input_mean: > 0, output_mean: > 0, why: the reason, in words}")
        lin, lout = round(mean_in), round(mean_out)
        lengths_from = f"the case's assumed means {mean_in:g}/{mean_out:g}"
        assumptions.append(f"token totals not given: means {mean_in:g}/{mean_out:g} assumed ({why})")
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
    lengths = None
    if requests is not None:
        lengths = requests.lengths()
    elif dataset["name"] == "sharegpt" and mean_in is not None:
        lengths = sharegpt_bench_lengths(mean_in, mean_out)
        assumptions.append(SHAREGPT_ASSUMPTION.format(mean_in=mean_in, mean_out=mean_out))
    workload = Workload(lin, lout, lengths_from, arrival, concurrency, rate, n, lengths, requests)
    unstated = tuple(raw.get("unstated") or ()) + tuple(file_unstated)
    return PublishedCase(
        file=file, name=name, source=source, url=url, source_block=raw.get("source_block"), engine=engine,
        model=model, gpu=gpu, tensor_parallel=tp, pipeline_parallel=pp,
        expert_parallel=ep, dp_attention=dp_attention, weights=dtype, kv_dtype=kv_dtype, dataset=dict(dataset),
        kind=kind, workload=workload, flags=dict(flags), quoted=dict(q), metrics=tuple(metrics), unstated=unstated,
        assumptions=tuple(assumptions), note=raw.get("note"), tool=tool, fp8_scaling=fp8_scaling,
        endpoint=_endpoint(raw))


def csv_target_problem(path: Path | None) -> str | None:
    """Before any work: why `--csv PATH` may not be written (a file ServeSim did not write), or None."""
    from sim.atomic_files import check_replaceable_file
    from sim.errors import ConfigError
    if path is None:
        return None
    try:
        check_replaceable_file(path, "--csv")
    except ConfigError as err:
        return f"error: {err}"
    return None


def write_csv_rows(path: Path, fields: list[str], rows) -> None:
    """The rows (mappings of `fields`) as a CSV at `path`, written as ServeSim writes its outputs: atomically, never
    over a file it did not write (sim/atomic_files.py write_output_file)."""
    import csv
    import io

    from sim.atomic_files import write_output_file
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_output_file(path, text.getvalue(), "--csv")


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
                cases.append(normalize_case(raw, file=fname, index=i, sources=file_sources, file_unstated=unstated))
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
                                                  c.workload.num_prompts, w.lengths),
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
    return get_model(case.model)


def _flag(case: PublishedCase, *names: str):
    for n in names:
        if n in case.flags:
            return case.flags[n]
    return None


def _quantization(case: PublishedCase) -> dict:
    block = {"fp8_block_scales": True} if case.fp8_scaling == "block" else {}
    if case.weights == "fp8":
        return {"weights": "fp8", "kv_cache": case.kv_dtype, "fp8_compute": True, **block}
    if case.weights == "fp8-weights":
        return {"weights": "fp8", "kv_cache": case.kv_dtype, "fp8_compute": False, **block}
    return {"weights": case.weights, "kv_cache": case.kv_dtype}


def engine_settings(case: PublishedCase) -> tuple[dict, list[str]]:
    """(the scenario sections that say how the run's engine was set up, approximations). An engine with a preset
    gets `engine: {name, version, <its flags>}` (sim/config/engines/ derives the rest for the GPU)."""
    e = case.engine
    approx: list[str] = []
    if e.key in PRESET_ENGINES:
        engine: dict[str, Any] = {"name": e.key, "version": e.version}
        for flag, value in case.flags.items():
            name = preset_flag_name(e.key, flag)
            if name is not None:  # others (-tp, --kv-cache-dtype) are the case's TP and dtypes
                engine[name] = option_value(str(value), PRESETS[e.key].flags[name].kind, f"{flag} {value}")
        if case.dp_attention:  # SGLang's --enable-dp-attention (`unsupported` refuses it elsewhere)
            engine["enable_dp_attention"] = True
            engine.setdefault("tp_size", case.tensor_parallel)  # its T, over which a --dp > 1 divides the attention
        if e.key == "trtllm":
            if e.version.startswith("0.17") and "kv_cache_free_gpu_memory_fraction" not in engine:
                engine["kv_cache_free_gpu_memory_fraction"] = 0.95
                approx.append("kv_cache_free_gpu_mem_fraction 0.95 assumed (the page: 0.95 'in majority of cases', "
                              "0.90 on out-of-memory)")
            if case.tool == "trtllm-bench" and not ({"max_batch_size", "max_num_tokens"} & set(engine)):
                # the page's engines: `trtllm-bench build --dataset`, whose heuristics size the batch and token limits
                batch, tokens = trtllm_bench_build(case)
                engine["max_batch_size"], engine["max_num_tokens"] = batch, tokens
                approx.append(f"max_batch_size {batch}, max_num_tokens {tokens}: trtllm-bench build's tuning "
                              "heuristics for the dataset (TRTLLM_BENCH_BUILD)")
                if case.workload.input_tokens > tokens and not engine.get("enable_chunked_prefill"):
                    engine["enable_chunked_prefill"] = True
                    approx.append(f"chunked context assumed: the prompt ({case.workload.input_tokens} tokens) exceeds "
                                  f"the build's max_num_tokens ({tokens}), which it could not run unchunked")
            if (not engine.get("enable_chunked_prefill") and "max_num_tokens" not in engine
                    and case.workload.input_tokens > 8192):
                # without chunked context a prompt is one step: trtllm-bench build sizes max_num_tokens from the
                # dataset (its value is unstated)
                engine["max_num_tokens"] = case.workload.input_tokens
                approx.append(f"max_num_tokens raised to the prompt length {case.workload.input_tokens} (trtllm-bench "
                              "build sizes it from the dataset; value unstated)")
        from sim.config.engines import preset_notes
        approx += preset_notes({"engine": engine, "model": case.model, "quantization": _quantization(case),
                                "workload": {"endpoint": case.endpoint, "arrival": {"kind": case.workload.arrival}},
                                "hardware": {"gpu": case.gpu, "tensor_parallel": case.tensor_parallel,
                                             "pipeline_parallel": case.pipeline_parallel,
                                             "expert_parallel": case.expert_parallel}})
        return {"engine": engine}, approx
    raise NotSimulated(f"no engine preset for {e.key}")


TRTLLM_BENCH_BUILD = (
    "NVIDIA/TensorRT-LLM tensorrt_llm/bench/build/tuning.py calc_engine_setting and finetune_setting, read at "
    "04cba882084a25665e7f80f5bda71b35b9790b6f (the 0.17 release's copy was not found; an older stored copy differs "
    "only in counting the engine's size in GB instead of GiB); build.py passes the dataset's average input and output "
    "lengths, as the perf-overview page says ('uses high-level statistics of the dataset (average ISL/OSL, max "
    "sequence length) and tuning heuristics'). GPU memory is NVML's total (the catalog's nvidia-smi figure), the "
    "parameter count ServeSim's (TensorRT-LLM reads the checkpoint's).")


def trtllm_bench_build(case: PublishedCase) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) as `trtllm-bench build --dataset` sizes an engine (TRTLLM_BENCH_BUILD): the
    KV cache's requests of the dataset's length in 0.95 of the memory the weights leave, capped at 4096; tokens as many
    requests times (1 + ISL / OSL), capped at 32,768; both rounded up the heuristic's way (at least 64 and 2,048)."""
    from sim.model.catalog import get_gpu
    from sim.model.shapes import param_count
    gib = 1024 ** 3
    model = _model_spec(case)
    tp, isl, osl = case.tensor_parallel, case.workload.input_tokens, case.workload.output_tokens
    byte_per_elem = 1 if case.weights == "fp8" else 2  # FP8 quantization forces an FP8 KV cache (build.py)
    byte_per_kv_elem = 1 if case.kv_dtype == "fp8" or case.weights == "fp8" else 2
    byte_per_token = 2 * model.num_layers * max(tp, model.num_kv_heads) * model.head_dim * byte_per_kv_elem / gib
    engine_size = param_count(model) * byte_per_elem / gib
    available = get_gpu(case.gpu).hbm_bytes / gib * tp - engine_size
    kv_cache_max_requests = available * 0.95 / (byte_per_token * (isl + osl))
    raw_bs = min(kv_cache_max_requests, 4096)  # pp_size 1
    raw_token = min(raw_bs * (1 + isl / osl), 32768)

    def up(x: float, step: int) -> int:
        return step * math.ceil(x / step)
    max_bs = max(64, up(raw_bs, 32)) if raw_bs < 256 else up(raw_bs, 128 if raw_bs < 1024 else 256)
    max_token = (max(2048, up(raw_token, 256)) if raw_token < 4096 else
                 up(raw_token, 512 if raw_token < 8192 else 1024))
    return int(max_bs), int(max_token)


def unsupported(case: PublishedCase, cost_model: dict) -> str | None:
    """Why ServeSim cannot simulate this case with this cost model (None if it can): one line."""
    if case.dp_attention and case.engine.key != "sglang":
        return "data-parallel attention (--enable-dp-attention) is modelled for SGLang's flags only"
    if case.workload.input_tokens < 1 or case.workload.output_tokens < 1:
        return "the per-request lengths are unknown (no totals, no fixed lengths, nothing to borrow)"
    if case.weights == "fp8-weights" and cost_model.get("kind") == "measured":
        return "measured kernels: weight-only FP8 (FP8 weights, 16-bit matmuls) is not in the measured tables"
    if cost_model.get("kind") == "measured":
        from sim.cost.measured import measured_unsupported
        from sim.model.memory import FP8_COMPUTE_DEFAULT
        q = _quantization(case)
        why = measured_unsupported(case.gpu, q["weights"], q["kv_cache"],
                                   fp8_compute=q.get("fp8_compute", FP8_COMPUTE_DEFAULT), tables=own_tables(case),
                                   moe_kernel=q.get("moe_kernel"))
        if why:
            return f"measured kernels: {why}"
    return None


def own_tables(case: PublishedCase) -> str:
    """The measured tables of the run's own engine where shipped (sglang, trtllm), else vLLM's."""
    return case.engine.key if case.engine.key in ("sglang", "trtllm") else "vllm"


# The numbers a preset's fit may set: the engine's CPU terms (sim/cost/overhead.py) and, for runs measured at an
# HTTP client, the API front-end's (sim/frontend.py).
# Two numbers per engine version, one per effect the issue names (the CPU time of a step; the front-end's time per
# request): a fit on one or two runs cannot tell more terms apart (per-sequence and per-chunk terms, fitted too,
# absorbed the kernel model's error at large batches and failed on held-out runs), so the others keep the preset's
# estimates (sim/cost/overhead.py: per_seq_s 10 us) or 0. The front-end's time is its `latency_s`, a delay that does
# not queue: vLLM's 59 ms TTFT at concurrency 1 becomes only 64 ms at 2 (Qwen3-8B, H100), so it is not one
# process's serial work (`per_request_s`, which would queue to ~110 ms there).
CPU_TERMS = ("per_step_s",)
FRONTEND_TERMS = ("latency_s",)


def scenario(case: PublishedCase, cost_model: dict, fitted: dict | None = None,
             num_requests: int | None = None) -> dict:
    """The case's scenario (a dict for validate_scenario): the model, GPU and TP of the run, its engine preset, its
    workload, `cost_model` (empty: the best available, sim/config/cost_choice.py), and
    the `fitted` numbers: CPU terms into the cost model's overhead, front-end terms into a front-end for runs
    measured at an HTTP client. `num_requests` (tests only) shrinks the run. Raises NotSimulated."""
    why = unsupported(case, cost_model)
    if why:
        raise NotSimulated(why)
    sections, _ = engine_settings(case)
    w = case.workload
    if w.arrival == "closed_loop":
        arrival = {"kind": "closed_loop", "num_users": w.concurrency, "think_time_s": 0.0}
    elif w.arrival == "poisson":
        arrival = {"kind": "poisson", "rate_per_s": float(w.request_rate)}
    else:
        arrival = {"kind": "burst"}
    max_len = _flag(case, "--max-model-len", "--max_seq_len", "--context-length")
    raw = {
        "name": case.name,
        "model": case.model,
        "hardware": {"gpu": case.gpu, "tensor_parallel": case.tensor_parallel,
                     "pipeline_parallel": case.pipeline_parallel, "expert_parallel": case.expert_parallel},
        "workload": {"arrival": arrival, "endpoint": case.endpoint,
                     "lengths": w.lengths or {"kind": "fixed", "input_tokens": w.input_tokens,
                                              "output_tokens": w.output_tokens}},
        "quantization": _quantization(case),
        "run": {"seed": 0, "num_requests": num_requests or w.num_prompts},
        **sections,
    }
    if "tp_size" in sections.get("engine", {}):
        # SGLang's --tp under data-parallel attention: its rule sets each rank's GPUs (tp_size / dp_size) from it,
        # which a second value would contradict
        del raw["hardware"]["tensor_parallel"]
    if max_len is not None and "engine" not in sections:
        raw.setdefault("scheduler", {})["max_model_len"] = int(max_len)
    if max_len is None and "engine" in sections and PRESETS[case.engine.key].kv_holds_max_len:
        # The run started: whatever its max_model_len, its KV cache held one request of it (`started_with_less`)
        raw.setdefault("scheduler", {})["fit_max_model_len"] = True
    cm = dict(cost_model)
    if cm.get("kind") == "measured" and own_tables(case) != "vllm":
        cm["tables"] = own_tables(case)
    # A term the fit did not pin (`not_pinned`), and every term of a fit that left one at a bound, is what the preset
    # never uses (sim/config/engines/fitted.py `usable_terms`, the one rule): the run gets the preset's own value
    # instead, as a user's scenario would.
    fitted = usable_terms(fitted or {}, fitted or {})
    cpu = {k: fitted[k] for k in CPU_TERMS if k in fitted}
    front = {k: fitted[k] for k in FRONTEND_TERMS if k in fitted}
    if cpu or front:  # the preset as this run's fit gives it: its CPU terms (its own rules on them: SGLang's
        # scheduler work without its overlap, sglang_overlap_work) and its own front-end
        from sim.config.engines import apply_engine_preset
        preset = apply_engine_preset(raw, fits=with_this_fit(case, fitted))
        preset_raw, preset_terms = preset.raw, preset.overhead
    if not cm and cpu:  # the best available model, materialized so that the fitted terms can go into it
        from sim.config.cost_choice import default_cost_model
        cm, _ = default_cost_model(preset_raw, preset_terms)  # as validation chooses: on the preset's values
    if cpu and cm.get("kind") != "fixed":
        from sim.config.engines import fit_name  # the label names whose fit, as a preset's own terms say it
        overhead = cm.get("overhead", {"engine": "vllm-cudagraph"})
        cm["overhead"] = {**overhead, **{k: preset_terms[k] for k in cpu},
                          "fitted_for": fit_name(case.engine.key, [case.engine.version])}
    if cm:
        raw["cost_model"] = cm
    if not case.client_side:
        raw["frontend"] = None  # measured in the engine's own process: no front-end, not even the preset's
    elif front:  # the preset's front-end (its version's work that queues, sim/config/engines/), the fit's terms
        raw["frontend"] = {**(preset_raw.get("frontend") or NO_FRONTEND_WORK), **front}
    client = measuring_client(case)
    if client is not None:  # the client that timed the run, beside the server's front-end (the preset's or the fit's)
        if "frontend" not in raw:
            from sim.config.engines import apply_engine_preset
            raw["frontend"] = apply_engine_preset(raw).raw.get("frontend") or NO_FRONTEND_WORK
        raw["frontend"] = {**raw["frontend"], "client": {"tool": client.tool}}  # its measured row (bench_clients)
    return raw


def with_this_fit(case: PublishedCase, fitted: dict) -> dict | None:
    """The presets' fitted numbers with this run's fit (`fit_preset`'s, as `terms_table` stores it) in its engine
    version's place, for the preset to read (`apply_engine_preset`'s `fits`); None without one: the shipped ones."""
    from sim.config.engines.fitted import fitted_table
    entry = terms_table({case.key: fitted}, "")["engines"].get(case.engine.key, {}).get(case.engine.version)
    if entry is None:
        return None
    table = fitted_table()
    engines = {**table.get("engines", {})}
    engines[case.engine.key] = {**engines.get(case.engine.key, {}), case.engine.version: entry}
    return {**table, "engines": engines}


NO_FRONTEND_WORK = {"num_processes": 1, "per_request_s": 0.0, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0}


def measuring_client(case: PublishedCase):
    """The benchmark client whose own work is modelled for this run (sim/config/bench_clients.py): the one its tool
    measured on its endpoint, for open arrivals (a closed loop's client work is in the fitted latency, which does
    not queue); None otherwise."""
    from sim.config.bench_clients import bench_client
    if not case.client_side or case.workload.arrival == "closed_loop":
        return None
    return bench_client(case.tool, case.endpoint)


SPREAD_METHOD = (
    "sigma_log: each fitted term's log-normal sigma, the linearized spread of ln(term) of the least-squares fit "
    "(calibrate/engine_fit.py fit_spread: the sandwich (J^T J)^-1 J^T diag(s_i^2) J (J^T J)^-1, J the fit runs' log "
    "errors' derivatives in ln(term)), with each fit metric known to s_i = the larger of its own misfit and the "
    "measured run-level bias sigma of the kernel model that priced the fit runs (noise_log, calibrate/residuals.json: "
    "the error the CPU terms absorb). Draw: term x exp(sigma_log x z), z standard normal. A term at a bound has "
    "none: it is not used; nor is one whose 90% range reaches past its bound (not_pinned), nor any term of a fit "
    "that left one at a bound (sim/config/engines/fitted.py usable_terms).")


def terms_table(fitted: dict[tuple[str, str], dict], date: str) -> dict:
    """sim/config/engine_terms.json's content: per engine and version the fitted numbers, each one's log-normal
    sigma (SPREAD_METHOD, next to the values) and the runs they were fitted on; the fit's bounds (a draw of a term
    is clamped to its bound: a value the fit could never have returned)."""
    from calibrate.engine_fit import FIT_BOUNDS_S

    engines: dict[str, dict] = {}
    for (engine, version), terms in sorted(fitted.items()):
        kept = {k: v for k, v in terms.items() if k in CPU_TERMS + FRONTEND_TERMS}
        if engine in PRESET_ENGINES and kept:
            entry = {"terms": kept,
                     "sigma_log": {k: terms[f"{k} sigma_log"] for k in kept if f"{k} sigma_log" in terms}}
            if "fit noise_log" in terms:
                entry["fit_error"] = {"noise_log": terms["fit noise_log"], "noise_from": terms["fit noise from"],
                                      "rms_log": terms["fit rms_log"], "residuals": terms["fit residuals"]}
            entry["fitted_on"] = list(FIT_RUNS.get((engine, version), ()))
            entry["at_bound"] = sorted(k for k in terms if k.endswith(" at bound"))
            entry["not_pinned"] = sorted(k for k in terms if k.endswith(" not pinned"))
            engines.setdefault(engine, {})[version] = entry
    return {"source": "benchmarks/bench_published.py --write-terms: published_suite.fit_preset on each engine "
                      "version's FIT_RUNS (every other run held out)", "date": date,
            "uncertainty": {"method": SPREAD_METHOD, "bounds_s": dict(FIT_BOUNDS_S)}, "engines": engines}


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
    mfu: float = math.nan  # the simulated run's model FLOPs utilization (the summary's `mfu`)


def measure(result, requests: RequestLengths | None = None) -> dict:
    """The ServeSim quantities (SIM_QUANTITIES) of one run, in SI units; with a case's `requests`, its TTFT and
    output tokens as the client counted them (a request that completed with no text: no tokens, a TTFT of 0 where
    the result file has 0)."""
    import numpy as np
    import pandas as pd

    from sim.results import peak_output_tok_s, sent_column
    r = result.requests
    fin = r[r["finished"]]
    client = requests.client(len(r)) if requests is not None else None
    # As the benchmark client times it: from its first request sent to its last response received. With a
    # front-end those are the client's columns: the engine's own (arrival, finish) leave out the first request's
    # inbound work and the last reply's way back.
    received = "client_last_token_s" if "client_last_token_s" in r else "finish_s"
    first_sent = float(r[sent_column(r)].min())
    duration = float(fin[received].max() - first_sent) if len(fin) else math.nan
    out = float(fin["output_tokens"].sum())
    ttft = fin["ttft_s"]
    if client is not None:
        out *= client.output_share(fin)
        ttft = pd.Series(client.ttft_s(fin), dtype=float)
    return {
        "output_tok_s": out / duration,
        "total_tok_s": (out + float(fin["prompt_tokens"].sum())) / duration,
        "requests_per_s": len(fin) / duration,
        "ttft_mean": float(ttft.mean()),
        "ttft_p50": float(ttft.median()),
        "tpot_mean": float(np.nanmean(fin["tpot_s"])) if fin["tpot_s"].notna().any() else math.nan,
        "tpot_p50": float(fin["tpot_s"].median()) if fin["tpot_s"].notna().any() else math.nan,
        "itl_mean": float(result.summary.get("itl_mean", math.nan)),
        "itl_p50": float(result.summary.get("itl_p50", math.nan)),
        "duration_s": duration,
        "peak_output_tok_s": peak_output_tok_s(result.records[1], result.decode_runs, first_sent),
    }


def started_with_less(case: PublishedCase, spec) -> tuple[str, ...]:
    """The note of a run whose engine checks at start that its KV cache holds one request of max_model_len
    (`EnginePreset.kv_holds_max_len`) and whose KV cache, as ServeSim's memory arithmetic sizes it, does not hold one
    of the model's longest: the run started, so the arithmetic leaves too little KV here or the run set a shorter
    max_model_len than its command shows; simulated with max_model_len cut to what the KV cache holds
    (`scenario` sets `scheduler.fit_max_model_len`). () otherwise."""
    from sim.run import deployment_of
    if not spec.scheduler.fit_max_model_len:
        return ()
    deployment = deployment_of(spec)
    longest = spec.scheduler.max_model_len or deployment.model.max_context
    if deployment.max_model_len >= longest:
        return ()
    return (f"{case.engine.label}: ServeSim's memory arithmetic leaves {deployment.kv_capacity_tokens:,} KV token "
            f"slots, fewer than one request of the model's {longest:,}-token context takes, which vLLM refuses to "
            "start with (vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory); the run started, so its KV "
            "cache was larger (the arithmetic's activations or sampler reserve too large here) or it ran with a "
            f"shorter max_model_len than its command shows: max_model_len cut to {deployment.max_model_len:,} "
            "(scheduler.fit_max_model_len)",)


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
        _, approx = engine_settings(case)
        client = measuring_client(case)
        if client is not None:
            approx = [*approx, f"{case.tool}: the client's own work, {client.per_request_s * 1e3:.2f} ms a request "
                      f"and {client.per_event_s * 1e6:.1f} us a streamed event on /v1/{case.endpoint} "
                      f"(frontend.client), measured by benchmarks/bench_serve_client.py ({client.source}) on the "
                      "development machine; which version's client ran, and on what CPU, unstated"]
        res.approximations = tuple(approx)
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
    res.approximations += started_with_less(case, spec)
    sim = measure(result, case.workload.requests)
    res.status = "simulated"
    res.label = result.extras.get("cost_model_label", "")
    for m in case.metrics:
        value = sim[m.sim]
        res.simulated[m.group] = value
        res.errors[m.group] = value / m.measured - 1 if math.isfinite(value) and m.measured else math.nan
    s = result.summary
    res.mfu = float(s.get("mfu", math.nan))
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


def summarize(results: list[CaseResult], which: str = "held-out",
              key: Callable[[CaseResult], Any] = lambda r: r.case.engine.key,
              groups: tuple[str, ...] = HEADLINE) -> dict[Any, dict]:
    """Per `key` of a run (default: its engine): for each metric group (default: the headline's), n, median and max
    |error| over the `which` runs simulated."""
    out: dict[Any, dict] = {}
    for r in results:
        if r.role != which:
            continue
        e = out.setdefault(key(r), {"runs": 0, "simulated": 0, **{g: [] for g in groups}})
        e["runs"] += 1
        if r.status != "simulated":
            continue
        e["simulated"] += 1
        for g in groups:
            if g in r.errors and math.isfinite(r.errors[g]):
                e[g].append(abs(r.errors[g]))
    for e in out.values():
        for g in groups:
            vals = e[g]
            e[g] = {"n": len(vals), "median": statistics.median(vals) if vals else math.nan,
                    "max": max(vals) if vals else math.nan}
    return out


def source_repo(case: PublishedCase) -> str:
    """The repository a case's pinned page is in (owner/name): its source."""
    m = re.match(r"https://github\.com/([^/]+/[^/]+)/", case.url)
    return m.group(1) if m else case.url


def counts(cases: list[PublishedCase]) -> dict[str, Counter]:
    """Case counts per engine, GPU, TP, dtype and kind (and per source repository)."""
    return {
        "engine": Counter(c.engine.label for c in cases),
        "gpu": Counter(c.gpu for c in cases),
        "tp": Counter(c.tensor_parallel for c in cases),
        "dtype": Counter(c.weights for c in cases),
        "kind": Counter(c.kind for c in cases),
        "source": Counter(source_repo(c) for c in cases),
        "file": Counter(c.file for c in cases),
    }
