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


RATE_FIELDS = {"poisson": "rate_per_s", "gamma": "rate_per_s", "constant": "rate_per_s",
               "trace": "target_rate_per_s"}  # the field a load's rate sets, per arrival kind


def read_workload(path: Path) -> dict:
    """A ServeSim workload specification from YAML/JSON: a scenario's `workload:` section, a whole
    scenario (its `workload:` is used) or the section's keys at the top level. Checked by ServeSim's
    own schema; bad input is one line naming --workload."""
    import json

    import yaml
    from pydantic import ValidationError

    from sim.errors import ConfigError
    from sim.workload.generate import WorkloadSpec

    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"--workload: '{path}' is not a file; allowed: a YAML/JSON ServeSim workload specification")
    try:
        raw = json.loads(p.read_text()) if p.suffix.lower() == ".json" else yaml.safe_load(p.read_text())
    except (yaml.YAMLError, json.JSONDecodeError, UnicodeDecodeError):
        raise ConfigError(f"--workload: '{path}' is not valid YAML/JSON") from None
    if isinstance(raw, dict) and isinstance(raw.get("workload"), dict):
        raw = raw["workload"]
    if isinstance(raw, dict):
        from sim.config.files import anchor_paths
        anchor_paths({"workload": raw}, p.resolve().parent)  # trace paths relative to the file, as in a scenario
    if not isinstance(raw, dict) or not isinstance(raw.get("arrival"), dict):
        raise ConfigError(f"--workload: '{path}' has no arrival section; allowed: a ServeSim `workload:` section")
    kind = raw["arrival"].get("kind")
    if kind not in RATE_FIELDS:
        raise ConfigError(f"--workload: arrival kind {kind!r} in '{path}' is not allowed; allowed: "
                          f"{', '.join(RATE_FIELDS)} (a load sets its rate)")
    try:
        WorkloadSpec.model_validate(_with_rate(raw, 1.0))
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        where = ".".join(map(str, first["loc"])) or "(top level)"
        raise ConfigError(f"--workload: '{path}' field {where}: {first['msg']}") from None
    return raw


def _with_rate(raw: dict, rate_per_s: float) -> dict:
    arrival = dict(raw["arrival"])
    arrival[RATE_FIELDS[arrival["kind"]]] = rate_per_s
    return {**raw, "arrival": arrival}


def from_workload(raw: dict, *, num_requests: int, rate_per_s: float, seed: int, max_context: int,
                  first_row: int = 0, scaling: LengthScaling | None = LengthScaling(),
                  source: str = "workload") -> RequestSchedule:
    """Requests first_row .. first_row + num_requests - 1 of ServeSim's own workload generation
    (sim.workload.generate) at `rate_per_s`, arrivals shifted to start at 0 (a trace's window rescaled
    to exactly that mean rate); lengths scaled and clipped
    by `scaling` (None: as generated) so that a small model on a CPU serves them."""
    from sim.workload.generate import WorkloadSpec, generate_workload

    spec = WorkloadSpec.model_validate(_with_rate(raw, rate_per_s))
    workload = generate_workload(spec, seed=seed, num_requests=first_row + num_requests, duration_s=None,
                                 max_context=max_context)
    if workload.num_requests < first_row + num_requests:
        from sim.errors import ConfigError
        raise ConfigError(f"--first-row: {first_row} is not allowed with {num_requests} requests; the workload "
                          f"holds {workload.num_requests}; allowed: at most {workload.num_requests - num_requests}")
    window = slice(first_row, first_row + num_requests)
    arrival = workload.arrival_s[window] - workload.arrival_s[first_row]
    if spec.arrival.kind == "trace" and num_requests > 1 and arrival[-1] > 0:
        # A trace's rate is rescaled over the whole file; the window replayed gets exactly this rate,
        # keeping the pattern of its own gaps (as `from_azure_trace`).
        arrival = arrival * ((num_requests - 1) / rate_per_s / arrival[-1])
    inp, out = workload.input_tokens[window], workload.output_tokens[window]
    if scaling is not None:
        inp, out = scaling.apply(inp, out)
    description = {"source": source, "workload": spec.model_dump(mode="json", exclude_none=True), "seed": seed,
                   "first_row": first_row, "num_requests": num_requests, "rate_per_s": rate_per_s,
                   "length_scaling": scaling.__dict__ if scaling is not None else None}
    return RequestSchedule(np.asarray(arrival, dtype=np.float64), inp.astype(np.int64),
                           out.astype(np.int64), description)
