"""The requests a fidelity run replays: arrival times and prompt/output lengths.

Plain numpy/pandas, so the vLLM replay (in `.venv-fidelity`) and the comparison (in `.venv`) build the
same schedule. Lengths come from the Azure LLM inference conversation trace, scaled down to fit a
small model on a 2-core CPU; arrivals keep the trace's inter-arrival pattern, rescaled to a target
mean rate (or, without the trace, a seeded Poisson process with lognormal lengths).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

DEFAULT_TRACE = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv.csv"


@dataclass(frozen=True)
class RequestSchedule:
    arrival_s: np.ndarray  # float64 seconds since the first request, non-decreasing
    input_tokens: np.ndarray  # int64 prompt tokens
    output_tokens: np.ndarray  # int64 tokens to generate (ignore_eos, fixed max_tokens)
    description: dict = field(default_factory=dict)  # how it was made, recorded in meta.json

    def __len__(self) -> int:
        return len(self.input_tokens)


@dataclass(frozen=True)
class LengthScaling:
    """Trace lengths divided by a factor and clipped: Azure conv prompts average ~1,155 tokens."""

    input_divisor: float = 4.0
    output_divisor: float = 2.0
    input_min: int = 8
    input_max: int = 512
    output_min: int = 4
    output_max: int = 128

    def apply(self, input_tokens: np.ndarray, output_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        inp = np.clip(np.rint(input_tokens / self.input_divisor), self.input_min, self.input_max)
        out = np.clip(np.rint(output_tokens / self.output_divisor), self.output_min, self.output_max)
        return inp.astype(np.int64), out.astype(np.int64)


def from_azure_trace(path: Path, *, num_requests: int, rate_per_s: float, first_row: int = 0,
                     scaling: LengthScaling = LengthScaling()) -> RequestSchedule:
    """`num_requests` consecutive rows from `first_row`, gaps rescaled so the mean rate is `rate_per_s`."""
    frame = pd.read_csv(path, nrows=first_row + num_requests)
    frame = frame.iloc[first_row:first_row + num_requests]
    if len(frame) < num_requests:
        raise ValueError(f"{path} has only {len(frame)} rows from row {first_row}, {num_requests} wanted")
    stamps = pd.to_datetime(frame["TIMESTAMP"]).to_numpy()
    offsets_s = (stamps - stamps[0]) / np.timedelta64(1, "s")
    span_s = offsets_s[-1]
    # n requests over the span: mean gap = span / (n - 1); scale it to 1 / rate.
    arrival_s = offsets_s * ((num_requests - 1) / rate_per_s / span_s) if span_s > 0 else np.zeros(num_requests)
    inp, out = scaling.apply(frame["ContextTokens"].to_numpy(), frame["GeneratedTokens"].to_numpy())
    description = {"source": f"azure_conv:{path.name}", "first_row": first_row, "num_requests": num_requests,
                   "rate_per_s": rate_per_s, "length_scaling": scaling.__dict__}
    return RequestSchedule(np.asarray(arrival_s, dtype=np.float64), inp, out, description)


def poisson(*, num_requests: int, rate_per_s: float, seed: int,
            scaling: LengthScaling = LengthScaling()) -> RequestSchedule:
    """Fallback without the trace: Poisson arrivals, lognormal lengths with Azure conv's means."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate_per_s, num_requests)
    gaps[0] = 0.0
    raw_in = rng.lognormal(np.log(1020.0), 0.6, num_requests)  # Azure conv input median 1,020
    raw_out = rng.lognormal(np.log(129.0), 0.9, num_requests)  # Azure conv output median 129
    inp, out = scaling.apply(raw_in, raw_out)
    description = {"source": "poisson", "seed": seed, "num_requests": num_requests, "rate_per_s": rate_per_s,
                   "length_scaling": scaling.__dict__}
    return RequestSchedule(np.cumsum(gaps), inp, out, description)
