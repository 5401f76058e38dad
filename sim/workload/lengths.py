"""Prompt and output lengths: fixed, uniform, lognormal, empirical, published presets, from a trace."""

from __future__ import annotations

import math
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
    """Lognormal lengths given by their mean (tokens) and the sigma of the underlying normal."""

    kind: Literal["lognormal"] = "lognormal"
    input_mean: float = Field(gt=0, le=MAX_TRACE_TOKENS, description="mean prompt length in tokens")
    input_sigma: float = Field(ge=0, le=MAX_LENGTH_SIGMA, description="sigma of log(prompt length)")
    output_mean: float = Field(gt=0, le=MAX_TRACE_TOKENS, description="mean output length in tokens")
    output_sigma: float = Field(ge=0, le=MAX_LENGTH_SIGMA, description="sigma of log(output length)")


class EmpiricalLengths(StrictSpec):
    """(input, output) pairs resampled with replacement from two columns of a CSV/JSONL file."""

    kind: Literal["empirical"] = "empirical"
    path: str
    input_column: str
    output_column: str


class PresetLengths(StrictSpec):
    """Lengths shaped like a public dataset (see _PRESETS for what is published and what is assumed)."""

    kind: Literal["preset"] = "preset"
    name: Literal["sharegpt", "alpaca"]


class TraceLengths(StrictSpec):
    """The lengths recorded in the arrival trace (needs `arrival.kind: trace`)."""

    kind: Literal["trace"] = "trace"


Lengths = Annotated[
    Union[FixedLengths, UniformLengths, LognormalLengths, EmpiricalLengths, PresetLengths, TraceLengths],
    Field(discriminator="kind"),
]

# The means are published: vLLM paper (Kwon et al., "Efficient Memory Management for Large Language
# Model Serving with PagedAttention", SOSP 2023), Fig. 11: ShareGPT mean input 161.31 / output 337.99
# tokens, Alpaca 19.31 / 58.45. The lognormal shape and its sigmas are OUR ASSUMPTION, not published:
# they give heavy right tails with medians of roughly 0.4-0.9x the mean, as the paper's histograms show.
_PRESETS: dict[str, LognormalLengths] = {
    "sharegpt": LognormalLengths(input_mean=161.31, input_sigma=1.0, output_mean=337.99, output_sigma=0.9),
    "alpaca": LognormalLengths(input_mean=19.31, input_sigma=0.5, output_mean=58.45, output_sigma=0.8),
}


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
    if isinstance(spec, LognormalLengths):
        return _lognormal(input_rng, spec.input_mean, spec.input_sigma, n), _lognormal(
            output_rng, spec.output_mean, spec.output_sigma, n
        )
    if isinstance(spec, EmpiricalLengths):
        table = _cached_empirical(spec)
        # One index per request keeps each (input, output) pair together: they are correlated.
        rows = input_rng.integers(0, len(table), n)
        return table.input_tokens[rows], table.output_tokens[rows]
    raise TypeError(f"no sampler for {spec!r}")  # pragma: no cover - TraceLengths is handled by the caller


def _lognormal(rng: np.random.Generator, mean: float, sigma: float, n: int) -> np.ndarray:
    # E[exp(N(mu, sigma^2))] = exp(mu + sigma^2 / 2), so this mu gives the requested mean.
    mu = math.log(mean) - sigma**2 / 2
    # A draw above any request's limit is clipped to just over it before the cast (it is then clipped to the
    # model's context, and counted, like any prompt too long for the model), so it cannot wrap around int64.
    return np.rint(np.minimum(rng.lognormal(mu, sigma, n), MAX_TRACE_TOKENS + 1.0)).astype(np.int64)


def _cached_empirical(spec: EmpiricalLengths) -> Trace:
    columns = TraceColumns(input=spec.input_column, output=spec.output_column)
    return cached_trace(spec.path, "auto", columns, "workload.lengths.path")
