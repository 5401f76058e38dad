"""Prompt and output lengths: fixed, uniform, lognormal, a published dataset's pairs, empirical, listed, published
presets, from a trace."""

from __future__ import annotations

import functools
import math
from pathlib import Path
from statistics import NormalDist
from typing import Annotated, Literal, Union

import numpy as np
from pydantic import Field, model_validator

from sim.workload.arrivals import cached_trace
from sim.workload.base import StrictSpec
from sim.workload.traces import MAX_TRACE_TOKENS, Trace, TraceColumns

# --------------------------------------------------------------------------------------------------
# Length distributions


# Token counts of one request are bounded as a trace's are (MAX_TRACE_TOKENS: above any model's context, and every
# sum of counts stays exact). A lognormal's sigma above MAX_LENGTH_SIGMA spreads lengths over e^(+-2 sigma) = a
# factor of 5e8 either side of the median: no longer a length distribution (and sigma**2 overflows near 1e154).
MAX_LENGTH_SIGMA = 10.0


class FixedLengths(StrictSpec):
    kind: Literal["fixed"] = "fixed"
    input_tokens: int = Field(ge=1, le=MAX_TRACE_TOKENS)
    output_tokens: int = Field(ge=1, le=MAX_TRACE_TOKENS)


class UniformLengths(StrictSpec):
    """Integers drawn uniformly from the inclusive ranges."""

    kind: Literal["uniform"] = "uniform"
    input_min: int = Field(ge=1, le=MAX_TRACE_TOKENS)
    input_max: int = Field(ge=1, le=MAX_TRACE_TOKENS)
    output_min: int = Field(ge=1, le=MAX_TRACE_TOKENS)
    output_max: int = Field(ge=1, le=MAX_TRACE_TOKENS)

    @model_validator(mode="after")
    def _ordered(self) -> "UniformLengths":
        for name in ("input", "output"):
            low, high = getattr(self, f"{name}_min"), getattr(self, f"{name}_max")
            if low > high:
                raise ValueError(f"{name}_min={low} is above {name}_max={high}")
        return self


class LognormalLengths(StrictSpec):
    """Lognormal lengths given by their mean (tokens) and the sigma of the underlying normal.

    With a filter (`min_tokens`, `input_max`, `total_max`), a request is drawn from the lognormals and skipped unless
    its prompt and output both have at least `min_tokens`, its prompt at most `input_max` and the two together at most
    `total_max`, as benchmark clients sample a dataset (SHAREGPT_BENCH_FILTER); the means are then the kept
    requests' means, the numbers such a client's token totals give, and the lognormals' own means are solved for."""

    kind: Literal["lognormal"] = "lognormal"
    input_mean: float = Field(gt=0, le=MAX_TRACE_TOKENS, description="mean prompt length in tokens")
    input_sigma: float = Field(ge=0, le=MAX_LENGTH_SIGMA, description="sigma of log(prompt length)")
    output_mean: float = Field(gt=0, le=MAX_TRACE_TOKENS, description="mean output length in tokens")
    output_sigma: float = Field(ge=0, le=MAX_LENGTH_SIGMA, description="sigma of log(output length)")
    min_tokens: int | None = Field(None, ge=1, le=MAX_TRACE_TOKENS,
                                   description="skip a request whose prompt or output has fewer tokens")
    input_max: int | None = Field(None, ge=1, le=MAX_TRACE_TOKENS,
                                  description="skip a request whose prompt has more tokens")
    total_max: int | None = Field(None, ge=2, le=2 * MAX_TRACE_TOKENS,
                                  description="skip a request whose prompt and output have more tokens together")

    @property
    def filtered(self) -> bool:
        return (self.min_tokens, self.input_max, self.total_max) != (None, None, None)

    @model_validator(mode="after")
    def _reachable(self) -> "LognormalLengths":
        if self.filtered:
            kept_lognormal_mus(self)  # raises ValueError, naming the means, where no lognormal keeps them
        return self


class DatasetLengths(StrictSpec):
    """A published dataset's (prompt, completion) pairs as benchmark clients sample it: `sharegpt` is ShareGPT's
    first two turns (`SHAREGPT_FIRST_TURNS`, Llama 3's token counts) kept by SHAREGPT_BENCH_FILTER, drawn without
    replacement as a client walks its shuffled dataset (a new shuffle each time the draws pass the table's size).
    With `input_mean` / `output_mean`, every drawn length is scaled by the asked mean over the kept table's (another
    tokenizer counts the same text differently) and rounded: the kept requests' means are the asked ones in
    expectation (a draw of the whole table: to within rounding), and the filter is the table's counts' (a scaled
    length may cross its bounds by the scale)."""

    kind: Literal["dataset"] = "dataset"
    name: Literal["sharegpt"] = "sharegpt"
    input_mean: float | None = Field(None, gt=0, le=MAX_TRACE_TOKENS,
                                     description="the kept prompts' mean in tokens; default the table's own")
    output_mean: float | None = Field(None, gt=0, le=MAX_TRACE_TOKENS,
                                      description="the kept outputs' mean in tokens; default the table's own")


class EmpiricalLengths(StrictSpec):
    """(input, output) pairs resampled with replacement from two columns of a CSV/JSONL file."""

    kind: Literal["empirical"] = "empirical"
    path: str
    input_column: str
    output_column: str


# A listed workload is written out in the scenario itself: a benchmark result's requests, not a dataset (use
# `empirical` with a file for that).
MAX_LISTED_REQUESTS = 100_000


class ListedLengths(StrictSpec):
    """Every request's lengths, in order: a benchmark result's per-request `input_lens` / `output_lens`, replayed
    as the client sent them (a run of more requests repeats the list from its start)."""

    kind: Literal["listed"] = "listed"
    input_tokens: list[Annotated[int, Field(ge=1, le=MAX_TRACE_TOKENS)]] = Field(min_length=1,
                                                                                max_length=MAX_LISTED_REQUESTS)
    output_tokens: list[Annotated[int, Field(ge=1, le=MAX_TRACE_TOKENS)]] = Field(min_length=1,
                                                                                 max_length=MAX_LISTED_REQUESTS)

    @model_validator(mode="after")
    def _paired(self) -> "ListedLengths":
        if len(self.input_tokens) != len(self.output_tokens):
            raise ValueError(f"{len(self.input_tokens)} input_tokens and {len(self.output_tokens)} output_tokens; "
                             "give one of each per request")
        return self


class PresetLengths(StrictSpec):
    """Lengths shaped like a public dataset (see _PRESETS for what is published and what is assumed)."""

    kind: Literal["preset"] = "preset"
    name: Literal["sharegpt", "alpaca", "sharegpt_bench"]


class TraceLengths(StrictSpec):
    """The lengths recorded in the arrival trace (needs `arrival.kind: trace`)."""

    kind: Literal["trace"] = "trace"


Lengths = Annotated[
    Union[FixedLengths, UniformLengths, LognormalLengths, DatasetLengths, EmpiricalLengths, ListedLengths,
          PresetLengths, TraceLengths],
    Field(discriminator="kind"),
]

# How `vllm bench serve --dataset-name sharegpt` samples ShareGPT_V3_unfiltered_cleaned_split.json: the first two turns
# of a conversation, kept when prompt and completion both have >= 4 tokens, the prompt <= 1024 and the two <= 2048
# (vllm-project/vllm, vllm/benchmarks/datasets.py `is_valid_sequence`, at f2e97ddaf5902a9727f48b70d001b6117b8b8b12;
# LMDeploy 0.1.0's benchmark/profile_throughput.py filters the same, benchmarks/published/lmdeploy_a100.yaml).
SHAREGPT_BENCH_FILTER = {"min_tokens": 4, "input_max": 1024, "total_max": 2048}
# Every ShareGPT conversation's first two turns, in tokens (data/README.md: the source, the tokenizer, the count)
SHAREGPT_FIRST_TURNS = Path(__file__).parent / "data" / "sharegpt_v3_first_turns.csv"
# A `dataset` lengths spec's name: its table of (prompt, completion) pairs and the filter its clients keep them by
DATASET_TABLES = {"sharegpt": (SHAREGPT_FIRST_TURNS, SHAREGPT_BENCH_FILTER)}

# --------------------------------------------------------------------------------------------------
# Length sampling


def sample_lengths(spec, seq: np.random.SeedSequence, n: int) -> tuple[np.ndarray, np.ndarray]:
    input_rng, output_rng = (np.random.default_rng(s) for s in seq.spawn(2))
    if isinstance(spec, PresetLengths):
        spec = _PRESETS[spec.name]
    if isinstance(spec, FixedLengths):
        return np.full(n, spec.input_tokens, np.int64), np.full(n, spec.output_tokens, np.int64)
    if isinstance(spec, UniformLengths):
        return (
            input_rng.integers(spec.input_min, spec.input_max, n, endpoint=True),
            output_rng.integers(spec.output_min, spec.output_max, n, endpoint=True),
        )
    if isinstance(spec, DatasetLengths):
        return _dataset_pairs(spec, input_rng, n)
    if isinstance(spec, LognormalLengths) and spec.filtered:
        return _kept_lognormal(input_rng, output_rng, spec, n)
    if isinstance(spec, LognormalLengths):
        return _lognormal(input_rng, spec.input_mean, spec.input_sigma, n), _lognormal(
            output_rng, spec.output_mean, spec.output_sigma, n
        )
    if isinstance(spec, ListedLengths):
        return np.resize(np.array(spec.input_tokens, np.int64), n), np.resize(np.array(spec.output_tokens, np.int64), n)
    if isinstance(spec, EmpiricalLengths):
        table = _cached_empirical(spec)
        # One index per request keeps each (input, output) pair together: they are correlated.
        rows = input_rng.integers(0, len(table), n)
        return table.input_tokens[rows], table.output_tokens[rows]
    raise TypeError(f"no sampler for {spec!r}")  # pragma: no cover - TraceLengths is handled by the caller


def _lognormal(rng: np.random.Generator, mean: float, sigma: float, n: int) -> np.ndarray:
    # E[exp(N(mu, sigma^2))] = exp(mu + sigma^2 / 2), so this mu gives the requested mean.
    return _lognormal_tokens(rng, math.log(mean) - sigma**2 / 2, sigma, n)


def _lognormal_tokens(rng: np.random.Generator, mu: float, sigma: float, n: int) -> np.ndarray:
    # A draw above any request's limit is clipped to just over it before the cast (it is then clipped to the
    # model's context, and counted, like any prompt too long for the model), so it cannot wrap around int64.
    # sigma + 0.0: a sigma of -0.0 passes `ge=0` but numpy refuses it ("sigma < 0"); -0.0 + 0.0 is 0.0
    return np.rint(np.minimum(rng.lognormal(mu, sigma + 0.0, n), MAX_TRACE_TOKENS + 1.0)).astype(np.int64)


def _kept(inputs: np.ndarray, outputs: np.ndarray, min_tokens: int | None = None, input_max: int | None = None,
          total_max: int | None = None) -> np.ndarray:
    """Which (input, output) pairs a client's filter keeps (SHAREGPT_BENCH_FILTER's keys; None: no bound);
    broadcasts."""
    keep = np.ones(np.broadcast_shapes(inputs.shape, outputs.shape), bool)
    if min_tokens is not None:
        keep &= (inputs >= min_tokens) & (outputs >= min_tokens)
    if input_max is not None:
        keep &= inputs <= input_max
    if total_max is not None:
        keep &= inputs + outputs <= total_max
    return keep


def _kept_lognormal(input_rng: np.random.Generator, output_rng: np.random.Generator, spec: LognormalLengths,
                    n: int) -> tuple[np.ndarray, np.ndarray]:
    """n requests kept by the spec's filter, drawn in rounds as a benchmark client walks its dataset."""
    mu_in, mu_out, kept_share = kept_lognormal_mus(spec)
    inputs, outputs, count = [], [], 0
    while count < n:
        draws = int((n - count) / kept_share * 1.1) + 64
        x = _lognormal_tokens(input_rng, mu_in, spec.input_sigma, draws)
        y = _lognormal_tokens(output_rng, mu_out, spec.output_sigma, draws)
        keep = _kept(x, y, spec.min_tokens, spec.input_max, spec.total_max)
        inputs.append(x[keep])
        outputs.append(y[keep])
        count += int(keep.sum())
    return np.concatenate(inputs)[:n], np.concatenate(outputs)[:n]


# The kept means are computed on a grid of normal quantiles (midpoints of GRID_POINTS equal-probability cells per
# length, every pair of them, counted by prefix sums): deterministic, and within the noise of a million-draw sample.
GRID_POINTS = 100_000
# The least share of draws a filter may keep: below it the sampler walks 1,000 draws per request.
MIN_KEPT_SHARE = 1e-3


def kept_lognormal_mus(spec: LognormalLengths) -> tuple[float, float, float]:
    """(mu of log prompt length, mu of log output length, share of draws kept) whose kept requests have the spec's
    means. Raises ValueError where none has."""
    return _solve_kept_mus(spec.input_mean, spec.input_sigma, spec.output_mean, spec.output_sigma,
                           spec.min_tokens, spec.input_max, spec.total_max)


@functools.lru_cache(maxsize=1)
def _normal_quantiles() -> np.ndarray:
    normal = NormalDist()
    return np.array([normal.inv_cdf((i + 0.5) / GRID_POINTS) for i in range(GRID_POINTS)])


@functools.lru_cache(maxsize=256)
def _solve_kept_mus(input_mean, input_sigma, output_mean, output_sigma, min_tokens, input_max, total_max):
    z = _normal_quantiles()
    lowest = min_tokens if min_tokens is not None else 0
    mu_in = math.log(input_mean) - input_sigma**2 / 2
    mu_out = math.log(output_mean) - output_sigma**2 / 2
    for _ in range(200):
        x = np.rint(np.minimum(np.exp(mu_in + input_sigma * z), MAX_TRACE_TOKENS + 1.0))  # ascending, as z is
        y = np.rint(np.minimum(np.exp(mu_out + output_sigma * z), MAX_TRACE_TOKENS + 1.0))
        prefix_y = np.concatenate(([0.0], np.cumsum(y)))
        # For each prompt length x_i the kept outputs are the y_j in [lowest, total_max - x_i]: a range of sorted y.
        first = np.searchsorted(y, lowest, "left")
        last = np.full(GRID_POINTS, GRID_POINTS) if total_max is None else np.searchsorted(y, total_max - x, "right")
        count = np.maximum(last - first, 0)
        count[(x < lowest) | ((x > input_max) if input_max is not None else False)] = 0
        kept = count.sum()
        kept_share = kept / GRID_POINTS**2
        if kept_share < MIN_KEPT_SHARE:
            break
        kept_in = (x * count).sum() / kept
        kept_out = np.where(count > 0, prefix_y[np.maximum(last, first)] - prefix_y[first], 0.0).sum() / kept
        if abs(kept_in / input_mean - 1) < 1e-5 and abs(kept_out / output_mean - 1) < 1e-5:
            return mu_in, mu_out, float(kept_share)
        # Raising a lognormal's mu raises its kept mean, less than in proportion where the filter cuts its tail.
        mu_in += math.log(input_mean / kept_in)
        mu_out += math.log(output_mean / kept_out)
    raise ValueError(
        f"input_mean={input_mean:g} and output_mean={output_mean:g}: no lognormal with input_sigma={input_sigma:g} "
        f"and output_sigma={output_sigma:g} keeps requests of these means under min_tokens={min_tokens}, "
        f"input_max={input_max}, total_max={total_max} (at least {MIN_KEPT_SHARE:g} of its draws kept); allowed: "
        "means well inside the filter's bounds")


@functools.lru_cache(maxsize=len(DATASET_TABLES))
def kept_pairs(name: str) -> tuple[np.ndarray, np.ndarray]:
    """A dataset's (prompt, completion) pairs that its benchmark clients keep (DATASET_TABLES), in the table's
    order."""
    path, client_filter = DATASET_TABLES[name]
    table = np.loadtxt(path, dtype=np.int64, delimiter=",", skiprows=1, ndmin=2)
    inputs, outputs = table[:, 0], table[:, 1]
    keep = _kept(inputs, outputs, **client_filter)
    kept = inputs[keep], outputs[keep]
    for column in kept:
        column.flags.writeable = False  # shared by every draw
    return kept


def kept_means(name: str) -> tuple[float, float]:
    """A dataset's kept pairs' own means (prompt, completion): what a `dataset` spec draws unscaled."""
    inputs, outputs = kept_pairs(name)
    return float(inputs.mean()), float(outputs.mean())


def _dataset_pairs(spec: DatasetLengths, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    inputs, outputs = kept_pairs(spec.name)
    own_in, own_out = kept_means(spec.name)
    passes = -(-n // len(inputs))
    rows = np.concatenate([rng.permutation(len(inputs)) for _ in range(passes)])[:n]
    return _scaled(inputs[rows], spec.input_mean, own_in), _scaled(outputs[rows], spec.output_mean, own_out)


def _scaled(drawn: np.ndarray, mean: float | None, own_mean: float) -> np.ndarray:
    if mean is None:
        return drawn
    return np.maximum(1, np.rint(drawn * (mean / own_mean))).astype(np.int64)


def _cached_empirical(spec: EmpiricalLengths) -> Trace:
    columns = TraceColumns(input=spec.input_column, output=spec.output_column)
    return cached_trace(spec.path, "auto", columns, "workload.lengths.path")


# --------------------------------------------------------------------------------------------------
# Presets

# The means are published: vLLM paper (Kwon et al., "Efficient Memory Management for Large Language
# Model Serving with PagedAttention", SOSP 2023), Fig. 11: ShareGPT mean input 161.31 / output 337.99
# tokens, Alpaca 19.31 / 58.45. The lognormal shape and its sigmas are OUR ASSUMPTION, not published:
# they give heavy right tails with medians of roughly 0.4-0.9x the mean, as the paper's histograms show.
# `sharegpt_bench` is ShareGPT as the benchmark clients sample it: the dataset's own first-turn pairs, kept by
# SHAREGPT_BENCH_FILTER (DatasetLengths; data/README.md), as Llama 3's tokenizer counts them.
_SHAREGPT = LognormalLengths(input_mean=161.31, input_sigma=1.0, output_mean=337.99, output_sigma=0.9)
_PRESETS: dict[str, LognormalLengths | DatasetLengths] = {
    "sharegpt": _SHAREGPT,
    "alpaca": LognormalLengths(input_mean=19.31, input_sigma=0.5, output_mean=58.45, output_sigma=0.8),
    "sharegpt_bench": DatasetLengths(name="sharegpt"),
}


def preset_lengths(name: str) -> LognormalLengths | DatasetLengths:
    return _PRESETS[name]


def sharegpt_bench_lengths(input_mean: float, output_mean: float) -> dict:
    """A scenario's `workload.lengths` for a ShareGPT sample a benchmark client drew (SHAREGPT_BENCH_FILTER) whose
    means are known and its per-request lengths not (a result with token totals only): the dataset's own pairs,
    scaled to these kept means (DatasetLengths)."""
    return {"kind": "dataset", "name": "sharegpt", "input_mean": float(input_mean), "output_mean": float(output_mean)}
