"""Published serving-benchmark results as measurement points for `python -m calibrate fit-engine --bench`.

Three formats, each read with the key names its tool writes (checked against the tool's source):

- **`vllm bench serve --save-result`** (vllm/benchmarks/serve.py, vllm-project/vllm at commit 009e6d4a; the same keys
  as benchmarks/benchmark_serving.py before it): one JSON object with `model_id`, `tokenizer_id`, `num_prompts`,
  `request_rate` (a number or the string "inf"), `burstiness`, `max_concurrency` (null: none), `completed`,
  `total_input_tokens`, `total_output_tokens`, `request_throughput`, `output_throughput`, `mean_ttft_ms`,
  `mean_tpot_ms` (per request (latency - TTFT) / (output tokens - 1), the first token excluded), `mean_itl_ms`
  (over every gap between streamed chunks), `median_*_ms`, `p99_*_ms`; `input_lens` / `output_lens` / `ttfts` /
  `errors` (per request, 0 output for a failed one) with `--save-detailed`. A request that completed with no text
  (output 0, no error) is kept: its prompt ran, and the tool averaged its TTFT in (as 0 where its `ttfts` entry is 0:
  benchmarks/backend_request_func.py, read at vllm-project/vllm 01184130, starts the clock at the first chunk with
  text).
- **`python -m sglang.bench_serving`** (python/sglang/bench_serving.py, sgl-project/sglang at commit 0033168f): one
  JSON object per line of its `--output-file` (JSONL, appended run after run) with `backend`, `dataset_name`,
  `request_rate` (inf is written as `Infinity`), `max_concurrency`, `completed`, `total_input_tokens`,
  `total_output_tokens`, `request_throughput`, `output_throughput`, `mean_ttft_ms`, `mean_tpot_ms`, `mean_itl_ms`,
  `median_itl_ms`, ...; `input_lens` / `output_lens` with `--output-details`. It does not name the model.
- **genai-perf's `profile_export_genai_perf.json`** (genai-perf/genai_perf/export_data/json_exporter.py,
  triton-inference-server/perf_analyzer at commit 09628cd6): each metric an object {"unit", "avg", "p50", "p99",
  ...}: `time_to_first_token` (ms), `inter_token_latency` (ms; per request (latency - TTFT) / (output tokens - 1),
  genai_perf/profile_data_parser/llm_profile_data_parser.py: what vLLM calls TPOT), `request_throughput`
  (requests/sec), `output_token_throughput` (tokens/sec), `input_sequence_length` / `output_sequence_length`
  (tokens), and `input_config`: the command's arguments (`model` a list of names, `concurrency`, `request_rate`).

Each result gives one point (a closed loop at `max_concurrency`, or Poisson arrivals at `request_rate`, or all at
once) with the metrics it holds, in seconds (`ttft_mean_s`, `tpot_mean_s`, `itl_mean_s`) and per second
(`request_throughput_per_s`, `output_throughput_tok_per_s`). Bad input raises ConfigError naming the file.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sim.errors import ConfigError
from sim.model.catalog import catalog_mismatch, named_weights_conflict, names_same_model
from sim.workload.base import MAX_NUM_REQUESTS

FIELD = "--bench"
# The metrics a point may hold, and the keys of vLLM / SGLang results they come from (milliseconds, per second).
_MS_KEYS = {"ttft_mean_s": "mean_ttft_ms", "tpot_mean_s": "mean_tpot_ms", "itl_mean_s": "mean_itl_ms"}
_RATE_KEYS = {"request_throughput_per_s": "request_throughput", "output_throughput_tok_per_s": "output_throughput"}
METRICS = (*_MS_KEYS, *_RATE_KEYS)
_TIME_UNITS_S = {"ms": 1e-3, "us": 1e-6, "ns": 1e-9, "s": 1.0, "sec": 1.0}


@dataclass(frozen=True)
class BenchPoint:
    """One measured run: how the load was offered, the lengths it used, and what it measured."""

    source: str  # the file (and line, for JSONL)
    tool: str  # vllm bench serve, sglang.bench_serving or genai-perf
    model: str | None  # the model the tool names (None: it names none)
    concurrency: int | None  # at most this many requests in flight (a closed loop); None: no cap
    rate_per_s: float  # requests per second offered (Poisson); inf: all at once, or as the cap allows
    num_requests: int  # completed requests
    mean_input_tokens: float
    mean_output_tokens: float
    metrics: dict[str, float]  # of METRICS, those the result holds (finite, > 0)
    input_lens: tuple[int, ...] | None = None  # per completed request, when the result holds them
    output_lens: tuple[int, ...] | None = None  # 0: completed with no text
    # Per completed request: True where the tool averaged a TTFT of 0 into its mean (no text ever came)
    zero_ttft: tuple[bool, ...] | None = None
    notes: tuple[str, ...] = field(default=())
    # The dataset the client sampled, as the command line names it (fit-engine --dataset; a result's own
    # `dataset_name` is not read: sglang.bench_serving's ShareGPT sampling is not checked against vLLM's):
    # "sharegpt" draws the lengths as vllm bench serve draws ShareGPT (engine_fit)
    dataset: str | None = None
    num_sent: int | None = None  # the requests the client sent, failed ones too, where the result says (num_prompts)

    @property
    def users(self) -> int | None:
        """The closed loop's users: the cap, or the requests the client sent where fewer (10 prompts under
        `--max-concurrency 64` had at most 10 in flight; without `num_prompts`, the completed ones). None: no cap."""
        if self.concurrency is None:
            return None
        sent = self.num_sent or self.num_requests
        return min(self.concurrency, sent) if sent > 0 else self.concurrency

    @property
    def label(self) -> str:
        """How the report and --fit-on name the point: c=N (a closed loop), rate=R/s, or burst."""
        if self.concurrency is not None:
            return f"c={self.concurrency}"
        return f"rate={self.rate_per_s:g}/s" if math.isfinite(self.rate_per_s) else "burst"


def replayed_outputs(output_lens) -> list[int]:
    """The output lengths to simulate for measured ones, in order: a request that completed with no text (output 0)
    still generated its stop token."""
    return [max(1, int(o)) for o in output_lens]


@dataclass(frozen=True)
class ClientCounts:
    """How the client counted a result whose requests include some that completed with no text (output 0): such a
    request is replayed with its stop token (`replayed_outputs`), which the client never saw. Used by `fit-engine
    --bench` and by the published suite (benchmarks/published_suite.py), on a simulated run's requests frame
    (`request_id` indexes these arrays, as it indexes the replayed workload: the measured requests in order,
    repeated to the run's count)."""

    zero_ttft: np.ndarray  # per replayed request: the tool averaged a TTFT of 0 into its mean
    outputs: np.ndarray  # per replayed request: the output tokens the client counted
    simulated: np.ndarray  # per replayed request: the output tokens simulated

    @staticmethod
    def of(output_lens, zero_ttft, n: int) -> "ClientCounts | None":
        """How the client counted a run of `n` requests replaying these (None: every request had text)."""
        outputs = np.resize(np.array(output_lens, np.int64), n)
        if outputs.all():
            return None
        zero = np.resize(np.array(zero_ttft if zero_ttft is not None else (False,) * len(output_lens), bool), n)
        return ClientCounts(zero, outputs, np.resize(np.array(replayed_outputs(output_lens), np.int64), n))

    def ttft_s(self, frame) -> np.ndarray:
        """The TTFT the client recorded for each request of `frame` that has one: 0 where it recorded 0."""
        ids = frame["request_id"].to_numpy()
        ttft = frame["ttft_s"].to_numpy(dtype=float)
        done = np.isfinite(ttft)
        return np.where(self.zero_ttft[ids], 0.0, ttft)[done]

    def output_share(self, frame) -> float:
        """The client's output tokens over the simulated ones, for the requests of `frame` that have a TTFT."""
        ids = frame["request_id"].to_numpy()[np.isfinite(frame["ttft_s"].to_numpy(dtype=float))]
        simulated = self.simulated[ids].sum()
        return float(self.outputs[ids].sum() / simulated) if simulated else 1.0


def read_bench(path: str | Path) -> list[BenchPoint]:
    """The points of one result file (a JSONL file may hold several)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"{FIELD}: '{path}' does not exist; allowed: a benchmark result file (JSON or JSONL)")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{FIELD}: '{path}' is not readable text ({type(err).__name__})") from None
    try:
        objects = [(str(p), json.loads(text))]
    except json.JSONDecodeError:
        objects = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                objects.append((f"{p}:{number}", json.loads(line)))
            except json.JSONDecodeError as err:
                raise ConfigError(f"{FIELD}: '{p}' line {number} is not valid JSON ({err.msg}); allowed: a vllm bench "
                                  "serve JSON, sglang.bench_serving JSONL or genai-perf profile_export_genai_perf.json") \
                    from None
        if not objects:
            raise ConfigError(f"{FIELD}: '{p}' is empty; allowed: a benchmark result file")
    return [_point(source, obj) for source, obj in objects]


def _point(source: str, obj) -> BenchPoint:
    if not isinstance(obj, dict):
        raise ConfigError(f"{FIELD}: '{source}' holds a JSON {type(obj).__name__}, not an object; allowed: a vllm bench "
                          "serve JSON, sglang.bench_serving JSONL or genai-perf profile_export_genai_perf.json")
    if isinstance(obj.get("time_to_first_token"), dict) or isinstance(obj.get("request_throughput"), dict):
        return _genai_perf(source, obj)
    if "model_id" in obj and any(k in obj for k in ("mean_ttft_ms", "request_throughput", "completed")):
        return _vllm_like(source, obj, "vllm bench serve")
    if "backend" in obj and any(k in obj for k in ("mean_ttft_ms", "median_itl_ms", "output_throughput")):
        return _vllm_like(source, obj, "sglang.bench_serving")
    raise ConfigError(f"{FIELD}: '{source}' is in no known format (keys {', '.join(sorted(obj)[:6])}, ...); allowed: "
                      "vllm bench serve --save-result JSON (model_id, mean_ttft_ms, ...), sglang.bench_serving JSONL "
                      "(backend, mean_ttft_ms, ...) or genai-perf profile_export_genai_perf.json (time_to_first_token)")


def _number(source: str, key: str, value) -> float | None:
    """A finite or infinite number, None for null; anything else is refused."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{FIELD}: '{source}' {key}: {value!r} is not a number; allowed: a number")
    return float(value)


def _count(source: str, key: str, value) -> int | None:
    """A whole number >= 0 (the number of requests a result counts), None for null; anything else is refused."""
    v = _number(source, key, value)
    if v is not None and not (math.isfinite(v) and v >= 0 and v == int(v)):
        raise ConfigError(f"{FIELD}: '{source}' {key}: {value!r} is not allowed; allowed: a whole number >= 0")
    return None if v is None else int(v)


def _metric(source: str, key: str, value, scale: float) -> float | None:
    v = _number(source, key, value)
    return v * scale if v is not None and math.isfinite(v) and v > 0 else None


def completed_requests(input_lens, output_lens, failed, zero_ttft) -> tuple[tuple, tuple, tuple]:
    """The requests a client's figures count, in the result's order: every one but those `failed` (the tool leaves a
    failed request out of its figures), each as (input lengths, output lengths, zero TTFT): an output of 0 is a
    request that completed with no text, and `zero_ttft` marks where the tool averaged a TTFT of 0 into its mean.
    The one rule for a result file (`_lens`) and for the published suite's copied lists."""
    kept = [k for k in range(len(input_lens)) if not failed[k]]
    return (tuple(int(input_lens[k]) for k in kept), tuple(int(output_lens[k]) for k in kept),
            tuple(bool(zero_ttft[k]) for k in kept))


def _lens(obj: dict) -> tuple[tuple[int, ...], tuple[int, ...], tuple[bool, ...]] | None:
    """Per-request (input, output, zero TTFT) of the completed requests (`completed_requests`), when the result holds
    both length lists. A request with an `errors` entry failed; without `errors`, an output of 0 is taken as a
    failure (newer tools write 0 for one), and so is a length that is not a count. With `errors`, an output of 0 is
    a request that completed with no text: its prompt ran, and where its `ttfts` entry is 0 the tool averaged a TTFT
    of 0 into its mean (the module docstring says why)."""
    ins, outs = obj.get("input_lens"), obj.get("output_lens")
    if not isinstance(ins, list) or not isinstance(outs, list) or len(ins) != len(outs) or not ins:
        return None
    errors, ttfts = obj.get("errors"), obj.get("ttfts")
    errors = errors if isinstance(errors, list) and len(errors) == len(ins) else None
    ttfts = ttfts if isinstance(ttfts, list) and len(ttfts) == len(ins) else None

    def counted(v) -> bool:  # a whole number of tokens: not inf, nan, a fraction or a bool
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v == int(v)

    failed = [not (counted(i) and counted(o)) or (bool(errors[k]) if errors is not None else o <= 0) or i <= 0 or o < 0
              for k, (i, o) in enumerate(zip(ins, outs))]
    zero = [not failed[k] and outs[k] == 0 and ttfts is not None and counted(ttfts[k]) and ttfts[k] == 0
            for k in range(len(ins))]
    kept = completed_requests(ins, outs, failed, zero)
    return kept if kept[0] else None


def _load(source: str, concurrency, rate) -> tuple[int | None, float]:
    c = _number(source, "max_concurrency", concurrency)
    # A closed loop simulates at least one request a user: no more users than a run's requests
    if c is not None and (not math.isfinite(c) or not 1 <= c <= MAX_NUM_REQUESTS or c != int(c)):
        raise ConfigError(f"{FIELD}: '{source}' max_concurrency: {concurrency!r} is not allowed; allowed: an integer "
                          f"1..{MAX_NUM_REQUESTS:,} or null")
    r = _number(source, "request_rate", rate)
    r = math.inf if r is None else r
    if not r > 0:
        raise ConfigError(f"{FIELD}: '{source}' request_rate: {rate!r} is not allowed; allowed: a number > 0 or inf")
    return (int(c) if c is not None else None), r


def _checked(point: BenchPoint) -> BenchPoint:
    if not point.metrics:
        raise ConfigError(f"{FIELD}: '{point.source}' has no usable metric (none of TTFT, TPOT, ITL, request or output "
                          "throughput is a number > 0); allowed: a result of a run that completed requests")
    if not (1 <= point.mean_input_tokens < math.inf and 1 <= point.mean_output_tokens < math.inf):
        raise ConfigError(f"{FIELD}: '{point.source}' gives no usable input and output lengths (mean input "
                          f"{point.mean_input_tokens:g}, output {point.mean_output_tokens:g} tokens); allowed: a result "
                          "with completed requests and token totals")
    return point


def _vllm_like(source: str, obj: dict, tool: str) -> BenchPoint:
    metrics = {}
    for name, key in _MS_KEYS.items():
        v = _metric(source, key, obj.get(key), 1e-3)
        if v is not None:
            metrics[name] = v
    for name, key in _RATE_KEYS.items():
        v = _metric(source, key, obj.get(key), 1.0)
        if v is not None:
            metrics[name] = v
    completed = _count(source, "completed", obj.get("completed"))
    lens = _lens(obj)
    ins, outs, zero_ttft = lens if lens is not None else (None, None, None)
    notes = ()
    if ins is not None:
        mean_in, mean_out = sum(ins) / len(ins), sum(outs) / len(outs)
        completed = completed or len(ins)
        silent = outs.count(0)
        if silent:
            zeros = sum(zero_ttft)
            counted = (f"the tool averaged {zeros} of their TTFTs into its mean as 0 (their `ttfts` entry), and so "
                       "does the comparison" if zeros else "their TTFTs as simulated")
            notes = (f"{silent} of {len(outs)} completed requests had no text (output 0): simulated with their prompts "
                     f"and one output token (the stop token the engine generated); {counted}",)
    else:
        total_in = _number(source, "total_input_tokens", obj.get("total_input_tokens"))
        total_out = _number(source, "total_output_tokens", obj.get("total_output_tokens"))
        if not completed or total_in is None or total_out is None:
            mean_in = mean_out = math.nan
        else:
            mean_in, mean_out = total_in / completed, total_out / completed
    concurrency, rate = _load(source, obj.get("max_concurrency"), obj.get("request_rate"))
    model = obj.get("model_id") if isinstance(obj.get("model_id"), str) else None
    sent = _count(source, "num_prompts", obj.get("num_prompts"))
    return _checked(BenchPoint(source, tool, model, concurrency, rate, int(completed or 0), mean_in, mean_out, metrics,
                               ins, outs, zero_ttft, notes, num_sent=sent))


def _genai_perf(source: str, obj: dict) -> BenchPoint:
    def avg(key: str, kind: str) -> float | None:
        m = obj.get(key)
        if not isinstance(m, dict):
            return None
        scale = 1.0
        if kind == "time":
            unit = str(m.get("unit", "ms")).lower()
            if unit not in _TIME_UNITS_S:
                raise ConfigError(f"{FIELD}: '{source}' {key}.unit: {unit!r} is not allowed; allowed: "
                                  f"{', '.join(_TIME_UNITS_S)}")
            scale = _TIME_UNITS_S[unit]
        return _metric(source, f"{key}.avg", m.get("avg"), scale)

    metrics = {}
    for name, key, kind in (("ttft_mean_s", "time_to_first_token", "time"), ("tpot_mean_s", "inter_token_latency", "time"),
                            ("request_throughput_per_s", "request_throughput", "rate"),
                            ("output_throughput_tok_per_s", "output_token_throughput", "rate")):
        v = avg(key, kind)
        if v is not None:
            metrics[name] = v
    config = obj.get("input_config") if isinstance(obj.get("input_config"), dict) else {}
    models = config.get("model")
    model = models[0] if isinstance(models, list) and models and isinstance(models[0], str) else (
        models if isinstance(models, str) else None)
    concurrency, rate = _load(source, config.get("concurrency"), config.get("request_rate"))
    if concurrency is None and not math.isfinite(rate):
        concurrency = 1  # genai-perf's default load: concurrency 1 (its --concurrency default)
    count = avg("request_count", "rate")
    mean_in = avg("input_sequence_length", "rate") or math.nan
    mean_out = avg("output_sequence_length", "rate") or math.nan
    return _checked(BenchPoint(source, "genai-perf", model, concurrency, rate, int(count or 0), mean_in, mean_out,
                               metrics))


def check_model(point: BenchPoint, scenario_model: str, scenario_weights: str | None = None) -> None:
    """Refuse a result measured on another model than the scenario's, or on its architecture in other weights where
    both names are catalog models (`catalog_mismatch`: Qwen/Qwen3-32B-FP8 against qwen3-32b in bf16), or whose name
    says other weights than the scenario's (`named_weights`: Qwen/Qwen3-8B-FP8 against bf16). Otherwise
    lenient: case, punctuation, an org prefix and a suffix (-Instruct, -hf) do not matter; a clear mismatch (another
    family or size) is refused."""
    if point.model is None:
        return
    mismatch = catalog_mismatch(point.model, scenario_model, scenario_weights)
    if mismatch is not None and mismatch[0] == "weights":
        raise ConfigError(f"{FIELD}: '{point.source}' model {point.model!r} is {mismatch[1]} in {mismatch[2]} "
                          f"weights, not the scenario's {scenario_model!r} in {mismatch[3]}; allowed: a result "
                          "measured on the scenario's model and weights")
    conflict = named_weights_conflict(point.model, scenario_model, scenario_weights)
    if conflict is not None:
        raise ConfigError(f"{FIELD}: '{point.source}' model {point.model!r} says {conflict[0]} weights, not the "
                          f"scenario's {conflict[1]} (quantization.weights); allowed: a result measured on the "
                          "scenario's model and weights")
    if mismatch is None and names_same_model(point.model, scenario_model):
        return
    raise ConfigError(f"{FIELD}: '{point.source}' model {point.model!r} is not the scenario's model {scenario_model!r}; "
                      "allowed: a result measured on the scenario's model")
