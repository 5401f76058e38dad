"""Arrival processes: when requests arrive (Poisson, Gamma, constant, schedules, diurnal, closed loop, trace timestamps,
a burst at t = 0).

Each spec knows its own rate: `mean_rate_per_s` (requests per second over the long run) and
`with_rate(rate_per_s)` (the same process, shape kept, at another mean rate). Sweeps, the planner and the
dashboard change the load through these two, never by knowing which field holds a kind's rate.

Each process is sampled in chunks of many requests, never one Python iteration per request; a chunk
continues where the last one stopped, so asking for more requests extends the same arrivals.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Annotated, ClassVar, Literal, Union, get_args

import numpy as np
from pydantic import Field, model_validator

from sim.errors import ConfigError
from sim.workload.base import StrictSpec
from sim.workload.traces import Trace, TraceColumns, TraceFormat, load_trace

# --------------------------------------------------------------------------------------------------
# Arrival processes

# The highest arrival rate a scenario may ask for. A million requests per second is ~10,000 times what one
# GPU replica serves; a rate beyond it is a typo (1e308, an extra zero run), and its arrays would not fit.
MAX_RATE_PER_S = 1e6
# A trace replayed a million times slower is the slowest replay that means anything (a second becomes 11.6 days);
# beyond it the scaled times stop being finite long before they stop being useless.
MAX_TIME_SCALE = 1e6


def _checked_rate(rate_per_s: float) -> float:
    if isinstance(rate_per_s, bool) or not isinstance(rate_per_s, numbers.Real) or not (
            math.isfinite(rate_per_s) and 0 < rate_per_s <= MAX_RATE_PER_S):
        raise ConfigError(f"rate: {rate_per_s!r} is not allowed; allowed: a positive number of requests per second, "
                          f"at most {MAX_RATE_PER_S:g}")
    return float(rate_per_s)


def _rebuilt(spec: StrictSpec, drop: tuple[str, ...] = (), **changes) -> StrictSpec:
    """A validated copy of `spec` with `changes`; only the keys the original set (and `changes`) count as
    set, so `model_dump(exclude_unset=True)` still reads like the file it came from."""
    data = spec.model_dump(exclude_unset=True, exclude=set(drop)) | {"kind": spec.kind} | changes
    return type(spec).model_validate(data)


class PoissonArrival(StrictSpec):
    """Independent requests: exponential inter-arrival gaps (CV 1)."""

    kind: Literal["poisson"] = "poisson"
    rate_per_s: float = Field(gt=0, le=MAX_RATE_PER_S)
    has_rate: ClassVar[bool] = True

    @property
    def mean_rate_per_s(self) -> float:
        return self.rate_per_s

    def with_rate(self, rate_per_s: float) -> "PoissonArrival":
        return _rebuilt(self, rate_per_s=_checked_rate(rate_per_s))


class GammaArrival(StrictSpec):
    """Renewal process with gamma gaps: cv > 1 is burstier than Poisson, cv < 1 more regular."""

    kind: Literal["gamma"] = "gamma"
    rate_per_s: float = Field(gt=0, le=MAX_RATE_PER_S)
    cv: float = Field(gt=0, description="coefficient of variation of the inter-arrival gaps")
    has_rate: ClassVar[bool] = True

    @property
    def mean_rate_per_s(self) -> float:
        return self.rate_per_s

    def with_rate(self, rate_per_s: float) -> "GammaArrival":
        return _rebuilt(self, rate_per_s=_checked_rate(rate_per_s))


class ConstantArrival(StrictSpec):
    """One request every 1/rate seconds (CV 0)."""

    kind: Literal["constant"] = "constant"
    rate_per_s: float = Field(gt=0, le=MAX_RATE_PER_S)
    has_rate: ClassVar[bool] = True

    @property
    def mean_rate_per_s(self) -> float:
        return self.rate_per_s

    def with_rate(self, rate_per_s: float) -> "ConstantArrival":
        return _rebuilt(self, rate_per_s=_checked_rate(rate_per_s))


class ScheduleStep(StrictSpec):
    duration_s: float = Field(gt=0)
    rate_per_s: float = Field(ge=0, le=MAX_RATE_PER_S)


class ScheduleArrival(StrictSpec):
    """Poisson arrivals whose rate is piecewise constant: each step holds its rate for its duration.

    With `repeat` the steps cycle forever; without it the last step's rate holds after the schedule
    ends (a last step with rate 0 ends the workload there).
    """

    kind: Literal["schedule"] = "schedule"
    steps: list[ScheduleStep] = Field(min_length=1)
    repeat: bool = True
    has_rate: ClassVar[bool] = True

    @property
    def mean_rate_per_s(self) -> float:
        """The time-weighted mean of the steps' rates over one pass of the schedule."""
        durations = np.array([s.duration_s for s in self.steps])
        rates = np.array([s.rate_per_s for s in self.steps])
        return float(durations @ rates / durations.sum())

    def with_rate(self, rate_per_s: float) -> "ScheduleArrival":
        """Every step's rate scaled by one factor: the schedule keeps its shape."""
        factor = _checked_rate(rate_per_s) / self.mean_rate_per_s
        steps = [step.model_dump(exclude_unset=True) | {"rate_per_s": step.rate_per_s * factor} for step in self.steps]
        return _rebuilt(self, steps=steps)

    @model_validator(mode="after")
    def _some_traffic(self) -> "ScheduleArrival":
        if not any(step.rate_per_s > 0 for step in self.steps):
            raise ValueError("at least one step needs rate_per_s > 0")
        return self


class DiurnalArrival(StrictSpec):
    """Poisson arrivals with a sinusoidal rate:
    rate(t) = mean_rate_per_s * (1 + amplitude * sin(2 pi (t - phase_s) / period_s)).
    """

    kind: Literal["diurnal"] = "diurnal"
    mean_rate_per_s: float = Field(gt=0, le=MAX_RATE_PER_S)
    amplitude: float = Field(ge=0, lt=1, description="peak deviation as a fraction of the mean rate")
    period_s: float = Field(gt=0)
    phase_s: float = Field(0.0, description="time at which the rate crosses its mean going up")
    has_rate: ClassVar[bool] = True
    # mean_rate_per_s is a field: the sinusoid swings around it and averages to it over whole periods.

    def with_rate(self, rate_per_s: float) -> "DiurnalArrival":
        """The same swing around another mean: amplitude is a fraction of the mean, so the peak scales too."""
        return _rebuilt(self, mean_rate_per_s=_checked_rate(rate_per_s))


class ClosedLoopArrival(StrictSpec):
    """`num_users` users, each sending its next request `think_time_s` after the previous one finishes.

    Arrival times depend on the simulated system, so the engine runs the users; the workload only
    holds the lengths of the requests they will send.
    """

    kind: Literal["closed_loop"] = "closed_loop"
    num_users: int = Field(ge=1)
    think_time_s: float = Field(ge=0)
    has_rate: ClassVar[bool] = False

    @property
    def mean_rate_per_s(self) -> float:
        raise ConfigError(_NO_RATE)

    def with_rate(self, rate_per_s: float) -> "ClosedLoopArrival":
        raise ConfigError(_NO_RATE)


class BurstArrival(StrictSpec):
    """Every request at t = 0 (batch-inference jobs, microbenchmarks): needs run.num_requests.

    It has no rate: a sweep or planner that sets the load refuses it in one line.
    """

    kind: Literal["burst"] = "burst"
    has_rate: ClassVar[bool] = False

    @property
    def mean_rate_per_s(self) -> float:
        raise ConfigError(_NO_BURST_RATE)

    def with_rate(self, rate_per_s: float) -> "BurstArrival":
        raise ConfigError(_NO_BURST_RATE)


_NO_BURST_RATE = ("workload.arrival.kind: 'burst' has no arrival rate (every request arrives at t = 0); "
                  "allowed for a rate: poisson, gamma, constant, schedule, diurnal, trace")


class TraceArrival(StrictSpec):
    """Replay the arrival times of a trace file (see sim.workload.traces)."""

    kind: Literal["trace"] = "trace"
    path: str
    format: TraceFormat = "auto"
    columns: TraceColumns | None = None
    time_scale: float = Field(1.0, gt=0, le=MAX_TIME_SCALE, description="multiplies every inter-arrival gap")
    target_rate_per_s: float | None = Field(None, gt=0, le=MAX_RATE_PER_S,
                                             description="rescale gaps to this mean rate")

    has_rate: ClassVar[bool] = True

    @model_validator(mode="after")
    def _one_rescaling(self) -> "TraceArrival":
        if self.target_rate_per_s is not None and self.time_scale != 1.0:
            raise ValueError("give time_scale or target_rate_per_s, not both")
        return self

    def recorded_arrival_s(self) -> np.ndarray:
        """The trace's own arrival times (seconds from its first request), parsed once per file."""
        trace = cached_trace(self.path, self.format, self.columns, "workload.arrival.path")
        if trace.arrival_s is None:
            raise ConfigError(
                f"workload.arrival.path: '{self.path}' has no arrival column; use it as "
                "lengths: {kind: empirical, ...} with a synthetic arrival, or give columns.arrival"
            )
        return trace.arrival_s

    @property
    def mean_rate_per_s(self) -> float:
        """The whole trace's mean rate as replayed: its target, else its recorded rate / time_scale (reads the file)."""
        if self.target_rate_per_s is not None:
            return self.target_rate_per_s
        arrival_s = self.recorded_arrival_s()
        # Mean rate = 1 / mean gap = (n - 1) / span of the replayed (scaled) times.
        return (len(arrival_s) - 1) / (_recorded_span_s(arrival_s, self.path, "path") * self.time_scale)

    def with_rate(self, rate_per_s: float) -> "TraceArrival":
        """The trace's gaps rescaled to a mean rate (target_rate_per_s, time_scale back to 1): burstiness kept."""
        return _rebuilt(self, drop=("time_scale",), target_rate_per_s=_checked_rate(rate_per_s))


ARRIVAL_SPECS = (PoissonArrival, GammaArrival, ConstantArrival, ScheduleArrival, DiurnalArrival, ClosedLoopArrival,
                 TraceArrival, BurstArrival)
Arrival = Annotated[Union[ARRIVAL_SPECS], Field(discriminator="kind")]
ARRIVAL_KINDS = tuple(get_args(spec.model_fields["kind"].annotation)[0] for spec in ARRIVAL_SPECS)
RATE_KINDS = tuple(kind for kind, spec in zip(ARRIVAL_KINDS, ARRIVAL_SPECS) if spec.has_rate)  # a load can be set

_NO_RATE = ("workload.arrival.kind: 'closed_loop' has no arrival rate (each user sends its next request "
            "think_time_s after the last one finishes, so the rate follows the system); allowed for a rate: "
            + ", ".join(RATE_KINDS))


def expected_arrivals(spec: PoissonArrival | GammaArrival | ConstantArrival | ScheduleArrival | DiurnalArrival,
                      duration_s: float) -> float:
    """The expected number of arrivals in [0, duration_s) of a synthetic process with a rate, without sampling
    it (the run-size check's estimate): the mean rate times the duration, a schedule's steps integrated."""
    if not isinstance(spec, ScheduleArrival):
        return spec.mean_rate_per_s * duration_s
    durations = np.array([s.duration_s for s in spec.steps])
    rates = np.array([s.rate_per_s for s in spec.steps])
    period_s = float(durations.sum())

    def within(t_s: float) -> float:  # expected arrivals in the first t_s seconds of one pass
        starts = np.cumsum(durations) - durations
        return float(rates @ np.clip(t_s - starts, 0.0, durations))

    if spec.repeat:
        cycles, rest_s = divmod(duration_s, period_s)
        return cycles * within(period_s) + within(rest_s)
    return within(min(duration_s, period_s)) + max(duration_s - period_s, 0.0) * float(rates[-1])


# --------------------------------------------------------------------------------------------------
# Arrival sampling


def synthetic_arrivals(
    spec: PoissonArrival | GammaArrival | ConstantArrival | ScheduleArrival | DiurnalArrival | BurstArrival,
    seq: np.random.SeedSequence,
    num_requests: int | None,
    duration_s: float | None,
) -> np.ndarray:
    """Draw chunks of arrivals until `num_requests` are in hand or the process has passed `duration_s`."""
    if isinstance(spec, BurstArrival):
        if num_requests is None:
            raise ConfigError("run.num_requests: missing; a burst arrival needs it (every request arrives at t = 0, "
                              "so duration_s alone does not say how many)")
        return np.zeros(num_requests)
    expected = num_requests if num_requests is not None else spec.mean_rate_per_s * duration_s
    # One chunk in the common case; the margin covers the Poisson spread of the count over a duration.
    chunk = int(min(max(expected + 6 * math.sqrt(expected) + 64, 1024), 1 << 22))
    if num_requests is not None:
        chunk = min(chunk, num_requests)
    parts, count = [], 0
    for times, reached_s in _arrival_chunks(spec, seq, chunk):
        if duration_s is not None:
            times = times[: np.searchsorted(times, duration_s, side="left")]
        parts.append(times)
        count += len(times)
        if (num_requests is not None and count >= num_requests) or (duration_s is not None and reached_s >= duration_s):
            break
    arrival_s = np.concatenate(parts) if parts else np.empty(0)
    return arrival_s[:num_requests]


def _arrival_chunks(spec, seq: np.random.SeedSequence, chunk: int) -> Iterator[tuple[np.ndarray, float]]:
    """Yield (sorted arrival times, time up to which the process has been sampled), forever or until it ends.

    Each chunk continues where the last one stopped and every stream is consumed in order, so the
    arrivals do not depend on the chunk size.
    """
    gaps_rng, thin_rng = (np.random.default_rng(s) for s in seq.spawn(2))
    t0 = 0.0
    if isinstance(spec, ConstantArrival):
        k = 0
        while True:
            times = np.arange(k + 1, k + chunk + 1) / spec.rate_per_s
            k += chunk
            yield times, float(times[-1])
    elif isinstance(spec, (PoissonArrival, GammaArrival)):
        while True:
            if isinstance(spec, PoissonArrival):
                gaps = gaps_rng.exponential(1.0 / spec.rate_per_s, chunk)
            else:
                shape = 1.0 / spec.cv**2  # gamma CV is 1/sqrt(shape); the scale then fixes the mean gap
                gaps = gaps_rng.gamma(shape, 1.0 / (spec.rate_per_s * shape), chunk)
            times = _accumulate(t0, gaps)
            t0 = float(times[-1])
            yield times, t0
    elif isinstance(spec, DiurnalArrival):
        # Thinning (Lewis & Shedler 1979): candidates at the peak rate, each kept with prob rate(t)/peak.
        peak = spec.mean_rate_per_s * (1 + spec.amplitude)
        while True:
            candidates = _accumulate(t0, gaps_rng.exponential(1.0 / peak, chunk))
            rate = spec.mean_rate_per_s * (
                1 + spec.amplitude * np.sin(2 * np.pi * (candidates - spec.phase_s) / spec.period_s)
            )
            t0 = float(candidates[-1])
            yield candidates[thin_rng.random(chunk) * peak < rate], t0
    elif isinstance(spec, ScheduleArrival):
        yield from _schedule_chunks(spec, gaps_rng, chunk)
    else:  # pragma: no cover - the discriminated union is exhaustive
        raise TypeError(f"no sampler for {spec!r}")


def _accumulate(t0: float, gaps: np.ndarray) -> np.ndarray:
    # Prepending t0 (not adding it afterwards) keeps the sums bit-identical across chunk sizes.
    return np.cumsum(np.concatenate(([t0], gaps)))[1:]


def _schedule_chunks(spec: ScheduleArrival, rng: np.random.Generator, chunk: int) -> Iterator[tuple[np.ndarray, float]]:
    """Time rescaling: unit-rate Poisson points S_k mapped through the inverse of the cumulative rate."""
    durations = np.array([s.duration_s for s in spec.steps])
    rates = np.array([s.rate_per_s for s in spec.steps])
    step_end_s = np.cumsum(durations)
    step_start_s = step_end_s - durations
    mass_end = np.cumsum(durations * rates)  # expected arrivals by the end of each step
    mass_start = mass_end - durations * rates
    period_s, period_mass = float(step_end_s[-1]), float(mass_end[-1])
    last_busy = int(np.flatnonzero(rates > 0)[-1])

    def invert(mass: np.ndarray) -> np.ndarray:
        cycles = np.floor(mass / period_mass) if spec.repeat else np.zeros_like(mass)
        within = np.clip(mass - cycles * period_mass, 0.0, None)
        # side="right" skips zero-rate steps, whose cumulative mass does not grow.
        step = np.minimum(np.searchsorted(mass_end, within, side="right"), last_busy)
        times = cycles * period_s + step_start_s[step] + (within - mass_start[step]) / rates[step]
        if not spec.repeat:
            beyond = mass >= period_mass
            if rates[-1] > 0:
                times[beyond] = period_s + (mass[beyond] - period_mass) / rates[-1]
            else:
                times = times[~beyond]
        return times

    s0 = 0.0
    while True:
        masses = _accumulate(s0, rng.exponential(1.0, chunk))
        s0 = float(masses[-1])
        times = invert(masses)
        if len(times) < chunk:  # a schedule that does not repeat and ends at rate 0 has run out
            yield times, math.inf
            return
        yield times, float(times[-1])


def replay_arrivals(
    arrival_s: np.ndarray, spec: TraceArrival, num_requests: int | None, duration_s: float | None
) -> np.ndarray:
    """The trace's times, rescaled (over the whole trace, before truncation), then cut to the run."""
    if spec.target_rate_per_s is not None:
        # Mean rate = 1 / mean gap = (n - 1) / span, the same definition summarize() reports.
        span_s = _recorded_span_s(arrival_s, spec.path, "target_rate_per_s")
        scale = (len(arrival_s) - 1) / (span_s * spec.target_rate_per_s)
    else:
        scale = spec.time_scale
    times = arrival_s * scale
    if duration_s is not None:
        times = times[: np.searchsorted(times, duration_s, side="left")]
    return times[:num_requests]


def _recorded_span_s(arrival_s: np.ndarray, path: str, field: str) -> float:
    """First to last recorded arrival; a trace spanning no time has no rate."""
    span_s = float(arrival_s[-1] - arrival_s[0]) if len(arrival_s) else 0.0
    if len(arrival_s) < 2 or span_s <= 0:
        raise ConfigError(f"workload.arrival.{field}: '{path}' spans no time, so it has no rate to rescale")
    return span_s


@lru_cache(maxsize=16)
def _load_cached(key: tuple, path: str, fmt: str, columns: TraceColumns | None, field: str) -> Trace:
    return load_trace(path, fmt, columns, field=field)


def cached_trace(path: str, fmt: str, columns: TraceColumns | None, field: str) -> Trace:
    """Sweeps generate many workloads from one trace: parse it once (Trace arrays are read-only)."""
    file = Path(path).expanduser()
    try:
        stat = file.stat()
    except OSError:
        return load_trace(path, fmt, columns, field=field)  # raises the one-line "not found" error
    # Keyed on the absolute path and its mtime/size so that an edited file is read again.
    return _load_cached((str(file.resolve()), stat.st_mtime_ns, stat.st_size), path, fmt, columns, field)
