"""Workloads: when requests arrive and how long their prompts and outputs are.

A `WorkloadSpec` (validated from the scenario's `workload:` section) is turned into a `Workload`, plain
arrays, by `generate_workload`. Everything is vectorized: arrival processes are sampled in chunks of
many requests, never one Python iteration per request.

Randomness: one `SeedSequence(seed)` is split into independent child streams for arrivals, input
lengths and output lengths, so changing the arrival process leaves the lengths unchanged, and asking
for more requests (or a longer duration) extends the same workload rather than drawing a new one.
A third child stream draws shared prefixes (`prefix:`), so adding one leaves the other two alone.

Prompt content, for prefix caching, is described by ids (see sim.core.request.Request): prompt tokens
[i*unit, (i+1)*unit) have content id `prefix_ids[i]`, equal ids meaning equal content. Mooncake
traces bring their own (`hash_ids`, 512 tokens each); synthetic prefixes use 16-token units.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal, Union

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, model_validator

from sim.errors import ConfigError
from sim.workload.traces import Trace, TraceColumns, TraceFormat, load_trace


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------------------------------
# Arrival processes


class PoissonArrival(_Spec):
    """Independent requests: exponential inter-arrival gaps (CV 1)."""

    kind: Literal["poisson"] = "poisson"
    rate_per_s: float = Field(gt=0)


class GammaArrival(_Spec):
    """Renewal process with gamma gaps: cv > 1 is burstier than Poisson, cv < 1 more regular."""

    kind: Literal["gamma"] = "gamma"
    rate_per_s: float = Field(gt=0)
    cv: float = Field(gt=0, description="coefficient of variation of the inter-arrival gaps")


class ConstantArrival(_Spec):
    """One request every 1/rate seconds (CV 0)."""

    kind: Literal["constant"] = "constant"
    rate_per_s: float = Field(gt=0)


class ScheduleStep(_Spec):
    duration_s: float = Field(gt=0)
    rate_per_s: float = Field(ge=0)


class ScheduleArrival(_Spec):
    """Poisson arrivals whose rate is piecewise constant: each step holds its rate for its duration.

    With `repeat` the steps cycle forever; without it the last step's rate holds after the schedule
    ends (a last step with rate 0 ends the workload there).
    """

    kind: Literal["schedule"] = "schedule"
    steps: list[ScheduleStep] = Field(min_length=1)
    repeat: bool = True

    @model_validator(mode="after")
    def _some_traffic(self) -> "ScheduleArrival":
        if not any(step.rate_per_s > 0 for step in self.steps):
            raise ValueError("at least one step needs rate_per_s > 0")
        return self


class DiurnalArrival(_Spec):
    """Poisson arrivals with a sinusoidal rate:
    rate(t) = mean_rate_per_s * (1 + amplitude * sin(2 pi (t - phase_s) / period_s)).
    """

    kind: Literal["diurnal"] = "diurnal"
    mean_rate_per_s: float = Field(gt=0)
    amplitude: float = Field(ge=0, lt=1, description="peak deviation as a fraction of the mean rate")
    period_s: float = Field(gt=0)
    phase_s: float = Field(0.0, description="time at which the rate crosses its mean going up")


class ClosedLoopArrival(_Spec):
    """`num_users` users, each sending its next request `think_time_s` after the previous one finishes.

    Arrival times depend on the simulated system, so the engine runs the users; the workload only
    holds the lengths of the requests they will send.
    """

    kind: Literal["closed_loop"] = "closed_loop"
    num_users: int = Field(ge=1)
    think_time_s: float = Field(ge=0)


class TraceArrival(_Spec):
    """Replay the arrival times of a trace file (see sim.workload.traces)."""

    kind: Literal["trace"] = "trace"
    path: str
    format: TraceFormat = "auto"
    columns: TraceColumns | None = None
    time_scale: float = Field(1.0, gt=0, description="multiplies every inter-arrival gap")
    target_rate_per_s: float | None = Field(None, gt=0, description="rescale gaps to this mean rate")

    @model_validator(mode="after")
    def _one_rescaling(self) -> "TraceArrival":
        if self.target_rate_per_s is not None and self.time_scale != 1.0:
            raise ValueError("give time_scale or target_rate_per_s, not both")
        return self


Arrival = Annotated[
    Union[
        PoissonArrival, GammaArrival, ConstantArrival, ScheduleArrival, DiurnalArrival, ClosedLoopArrival, TraceArrival
    ],
    Field(discriminator="kind"),
]


# --------------------------------------------------------------------------------------------------
# Length distributions


class FixedLengths(_Spec):
    kind: Literal["fixed"] = "fixed"
    input_tokens: int = Field(ge=1)
    output_tokens: int = Field(ge=1)


class UniformLengths(_Spec):
    """Integers drawn uniformly from the inclusive ranges."""

    kind: Literal["uniform"] = "uniform"
    input_min: int = Field(ge=1)
    input_max: int = Field(ge=1)
    output_min: int = Field(ge=1)
    output_max: int = Field(ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> "UniformLengths":
        for name in ("input", "output"):
            low, high = getattr(self, f"{name}_min"), getattr(self, f"{name}_max")
            if low > high:
                raise ValueError(f"{name}_min={low} is above {name}_max={high}")
        return self


class LognormalLengths(_Spec):
    """Lognormal lengths given by their mean (tokens) and the sigma of the underlying normal."""

    kind: Literal["lognormal"] = "lognormal"
    input_mean: float = Field(gt=0, description="mean prompt length in tokens")
    input_sigma: float = Field(ge=0, description="sigma of log(prompt length)")
    output_mean: float = Field(gt=0, description="mean output length in tokens")
    output_sigma: float = Field(ge=0, description="sigma of log(output length)")


class EmpiricalLengths(_Spec):
    """(input, output) pairs resampled with replacement from two columns of a CSV/JSONL file."""

    kind: Literal["empirical"] = "empirical"
    path: str
    input_column: str
    output_column: str


class PresetLengths(_Spec):
    """Lengths shaped like a public dataset (see _PRESETS for what is published and what is assumed)."""

    kind: Literal["preset"] = "preset"
    name: Literal["sharegpt", "alpaca"]


class TraceLengths(_Spec):
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
# Shared prefixes


class SharedSystemPrompt(_Spec):
    """A `fraction` of the requests start with one of `num_prompts` system prompts (chosen uniformly) of
    `tokens` tokens: their prompt is the system prompt plus the sampled input, clipped to the context.

    Content is shared in 16-token units, so the last `tokens % 16` tokens of a system prompt share a
    unit with the user's text and count as unique (a system prompt under 16 tokens shares nothing).
    """

    kind: Literal["shared_system_prompt"] = "shared_system_prompt"
    tokens: int = Field(gt=0, description="system prompt length in tokens")
    fraction: float = Field(gt=0, le=1, description="fraction of requests that start with a system prompt")
    num_prompts: int = Field(1, ge=1, description="distinct system prompts")


class MultiTurn(_Spec):
    """Requests are turns of conversations. The arrival process gives the conversations' first turns
    (so requests arrive at about `turns_mean` times its rate); each conversation has a geometric number
    of turns with mean `turns_mean`, and each next turn arrives `think_time_s` after the previous
    turn's ARRIVAL (an open-loop workload cannot know when the answer came back: take think_time_s as
    the response time plus the user's pause). A turn's prompt is the previous prompt, the previous
    output and a new user message (the sampled input length). A conversation ends at the first turn
    whose prompt would no longer fit the context (a first turn is clipped, as any prompt).
    """

    kind: Literal["multi_turn"] = "multi_turn"
    turns_mean: float = Field(ge=1, description="mean turns per conversation (geometric)")
    think_time_s: float = Field(ge=0, description="from one turn's arrival to the next one's")


Prefix = Annotated[Union[SharedSystemPrompt, MultiTurn], Field(discriminator="kind")]

SYNTHETIC_PREFIX_UNIT_TOKENS = 16  # tokens per content id of the synthetic prefixes
MOONCAKE_PREFIX_UNIT_TOKENS = 512  # Mooncake hash_ids: one id per 512-token prompt block (traces README)


class WorkloadSpec(_Spec):
    """The scenario's `workload:` section."""

    arrival: Arrival
    lengths: Lengths | None = Field(None, description="default: the trace's lengths for a trace arrival")
    prefix: Prefix | None = Field(None, description="prompts that share prefixes (prefix caching)")
    samples_per_prompt: int = Field(1, ge=1, description="parallel sampling: n outputs per prompt")
    beam_width: int = Field(1, ge=1, description="beam search: w beams per prompt (re-ranking not modelled)")

    @model_validator(mode="after")
    def _lengths_fit_arrival(self) -> "WorkloadSpec":
        is_trace = isinstance(self.arrival, TraceArrival)
        if self.lengths is None and not is_trace:
            raise ConfigError(
                f"workload.lengths: missing; allowed: fixed, uniform, lognormal, empirical, preset "
                f"(only a trace arrival may leave it out, arrival is {self.arrival.kind!r})"
            )
        if isinstance(self.lengths, TraceLengths) and not is_trace:
            raise ConfigError(
                f"workload.lengths: kind 'trace' needs workload.arrival.kind 'trace', "
                f"but arrival kind is {self.arrival.kind!r}"
            )
        if isinstance(self.prefix, MultiTurn) and isinstance(self.arrival, (TraceArrival, ClosedLoopArrival)):
            raise ConfigError(
                f"workload.prefix: kind 'multi_turn' needs a synthetic arrival process (its arrivals start "
                f"conversations), but arrival kind is {self.arrival.kind!r}"
            )
        return self

    @property
    def resolved_lengths(self) -> Lengths:
        return self.lengths if self.lengths is not None else TraceLengths()


# --------------------------------------------------------------------------------------------------
# The generated workload


@dataclass(frozen=True)
class Workload:
    """Requests as arrays, in arrival order."""

    arrival_s: np.ndarray  # float64 seconds, non-decreasing; empty for a closed loop
    input_tokens: np.ndarray  # int64 prompt length, in [1, max_context - 1]
    output_tokens: np.ndarray  # int64 output length, in [1, max_context - input]
    hash_ids: list[np.ndarray] | None = None  # per request prompt-block ids (trace lengths only)
    closed_loop: ClosedLoopArrival | None = None  # set when the engine must run the users
    # Per request int64 content ids of its prompt, one per prefix_unit_tokens tokens (Request.prefix_ids);
    # None: no content model, nothing is shared.
    prefix_ids: list[np.ndarray] | None = None
    prefix_unit_tokens: int = 0  # tokens per content id (16 synthetic, 512 Mooncake); 0 without ids
    conversation_ids: np.ndarray | None = None  # int64 per request, multi_turn only (numbered by start)

    @property
    def num_requests(self) -> int:
        return len(self.input_tokens)

    def to_frame(self) -> pd.DataFrame:
        frame = pd.DataFrame(
            {
                "arrival_s": self.arrival_s if self.closed_loop is None else np.full(self.num_requests, np.nan),
                "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens,
            }
        )
        frame.index.name = "request_id"
        if self.hash_ids is not None:
            frame["hash_ids"] = pd.Series(self.hash_ids, dtype=object, index=frame.index)
        if self.conversation_ids is not None:
            frame["conversation_id"] = self.conversation_ids
        return frame


def generate_workload(
    spec: WorkloadSpec,
    *,
    seed: int,
    num_requests: int | None,
    duration_s: float | None,
    max_context: int,
) -> Workload:
    """Sample `spec`: exactly `num_requests` requests, or every arrival in [0, duration_s), or both
    (whichever ends first). Lengths are clipped to fit the model's context."""
    if num_requests is None and duration_s is None:
        raise ConfigError("num_requests/duration_s: both missing; give at least one of them")
    if num_requests is not None and num_requests < 1:
        raise ConfigError(f"num_requests: {num_requests} is not allowed; it must be >= 1")
    if duration_s is not None and not duration_s > 0:
        raise ConfigError(f"duration_s: {duration_s} is not allowed; it must be > 0")
    if max_context < 2:
        raise ConfigError(f"max_context: {max_context} is not allowed; it must be >= 2 (one prompt + one output token)")
    arrivals_seq, lengths_seq, prefix_seq = np.random.SeedSequence(seed).spawn(3)
    arrival, lengths = spec.arrival, spec.resolved_lengths
    if isinstance(spec.prefix, MultiTurn):
        return _multi_turn(spec, arrivals_seq, lengths_seq, prefix_seq, num_requests, duration_s, max_context)

    closed_loop, trace, rows = None, None, None
    if isinstance(arrival, ClosedLoopArrival):
        if num_requests is None:
            raise ConfigError(
                "num_requests: missing; a closed_loop arrival needs it (its arrival times depend on the run)"
            )
        closed_loop, arrival_s = arrival, np.empty(0)
        count = num_requests
    elif isinstance(arrival, TraceArrival):
        trace = _cached_trace(arrival.path, arrival.format, arrival.columns, "workload.arrival.path")
        if trace.arrival_s is None:
            raise ConfigError(
                f"workload.arrival.path: '{arrival.path}' has no arrival column; use it as "
                "lengths: {kind: empirical, ...} with a synthetic arrival, or give columns.arrival"
            )
        arrival_s = _replay(trace.arrival_s, arrival, num_requests, duration_s)
        count = rows = len(arrival_s)
    else:
        arrival_s = _synthetic_arrivals(arrival, arrivals_seq, num_requests, duration_s)
        count = len(arrival_s)

    hash_ids = None
    if isinstance(lengths, TraceLengths):
        inputs, outputs = trace.input_tokens[:rows], trace.output_tokens[:rows]
        hash_ids = None if trace.hash_ids is None else trace.hash_ids[:rows]
    else:
        inputs, outputs = _sample_lengths(lengths, lengths_seq, count)
    if hash_ids is not None and spec.prefix is not None:
        raise ConfigError(
            f"workload.prefix: the trace already describes its prompts' content (hash_ids in "
            f"'{arrival.path}'); leave prefix out"
        )
    system = None
    if isinstance(spec.prefix, SharedSystemPrompt):
        system = _system_prompts(spec.prefix, prefix_seq, len(inputs), max_context)
        inputs = inputs + np.where(system >= 0, spec.prefix.tokens, 0)

    # Prompt first, then the output gets what the context has left: a request must fit the model.
    inputs = np.clip(inputs, 1, max_context - 1).astype(np.int64)
    outputs = np.clip(outputs, 1, max_context - inputs).astype(np.int64)
    prefix_ids, unit = None, 0
    if hash_ids is not None:
        prefix_ids, unit = hash_ids, MOONCAKE_PREFIX_UNIT_TOKENS
    elif system is not None:
        prefix_ids, unit = _system_prompt_ids(spec.prefix, system, inputs), SYNTHETIC_PREFIX_UNIT_TOKENS
    return Workload(np.asarray(arrival_s, dtype=np.float64), inputs, outputs, hash_ids, closed_loop,
                    prefix_ids, unit)


# --------------------------------------------------------------------------------------------------
# Shared prefixes


def _units(num_tokens: np.ndarray) -> np.ndarray:
    return -(-num_tokens // SYNTHETIC_PREFIX_UNIT_TOKENS)


def _split(flat: np.ndarray, counts: np.ndarray) -> list[np.ndarray]:
    """Consecutive pieces of `flat` with the given lengths (views)."""
    ends = np.cumsum(counts).tolist()
    return [flat[a:b] for a, b in zip([0] + ends[:-1], ends)]


def _system_prompts(spec: SharedSystemPrompt, seq: np.random.SeedSequence, n: int, max_context: int) -> np.ndarray:
    """Per request the system prompt it starts with, or -1."""
    if spec.tokens >= max_context - 1:
        raise ConfigError(
            f"workload.prefix.tokens: {spec.tokens} leaves no room for a request in the model's context of "
            f"{max_context} tokens; it must be below {max_context - 1}"
        )
    which_rng, choice_rng = (np.random.default_rng(s) for s in seq.spawn(2))
    shared = which_rng.random(n) < spec.fraction
    return np.where(shared, choice_rng.integers(0, spec.num_prompts, n), -1)


def _system_prompt_ids(spec: SharedSystemPrompt, system: np.ndarray, inputs: np.ndarray) -> list[np.ndarray]:
    """Ids 0 .. num_prompts*K - 1 for the K whole units of each system prompt, then a fresh id per unit."""
    per_prompt = spec.tokens // SYNTHETIC_PREFIX_UNIT_TOKENS
    units = _units(inputs)
    total = int(units.sum())
    starts = np.cumsum(units) - units
    position = np.arange(total, dtype=np.int64) - np.repeat(starts, units)  # unit index within its prompt
    flat = spec.num_prompts * per_prompt + np.arange(total, dtype=np.int64)  # unique ids
    shared = position < np.repeat(np.where(system >= 0, per_prompt, 0), units)
    flat[shared] = (np.repeat(system, units) * per_prompt + position)[shared]
    return _split(flat, units)


def _multi_turn(spec: WorkloadSpec, arrivals_seq, lengths_seq, prefix_seq, num_requests: int | None,
                duration_s: float | None, max_context: int) -> Workload:
    """Conversations whose turns extend each other; see MultiTurn.

    Each conversation owns one stream of content ids (16 tokens each) and a turn's prompt takes the
    first ceil(prompt / 16) of them, so every turn's ids start with the previous turn's.
    """
    prefix: MultiTurn = spec.prefix
    # Enough conversations to hold num_requests turns; when the first num_requests turns (by arrival)
    # could include a turn of a conversation not drawn yet, draw more. With a duration only, every
    # conversation that starts within it is drawn.
    num_conversations = None if num_requests is None else int(num_requests / prefix.turns_mean * 1.1) + 16
    while True:
        if num_requests is not None:
            num_conversations = min(num_conversations, num_requests)
        # Samplers spawn child streams from the SeedSequence they get: give each try a fresh copy.
        starts = _synthetic_arrivals(spec.arrival, _fresh(arrivals_seq), num_conversations, duration_s)
        drawn = _conversation_turns(prefix, spec.resolved_lengths, starts, _fresh(lengths_seq), prefix_seq,
                                    max_context)
        arrival_s = drawn[0]
        keep = np.ones(len(arrival_s), bool) if duration_s is None else arrival_s < duration_s
        order = np.flatnonzero(keep)[np.argsort(arrival_s[keep], kind="stable")][:num_requests]
        complete = (num_requests is None or len(starts) < num_conversations or num_conversations >= num_requests
                    or (len(order) == num_requests and arrival_s[order[-1]] <= starts[-1]))
        if complete:
            break
        num_conversations *= 2
    arrival_s, inputs, outputs, conversation, first_unit = (a[order] for a in drawn)
    units = _units(inputs)
    total = int(units.sum())
    flat = np.repeat(first_unit, units) + np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(units) - units, units)
    return Workload(arrival_s, inputs, outputs, None, None, _split(flat, units), SYNTHETIC_PREFIX_UNIT_TOKENS,
                    conversation)


def _fresh(seq: np.random.SeedSequence) -> np.random.SeedSequence:
    return np.random.SeedSequence(seq.entropy, spawn_key=seq.spawn_key, pool_size=seq.pool_size)


def _conversation_turns(prefix: MultiTurn, lengths, starts: np.ndarray, lengths_seq, prefix_seq,
                        max_context: int) -> tuple[np.ndarray, ...]:
    """Every turn of the conversations starting at `starts`, conversation-major: (arrival_s, prompt,
    output, conversation index, first id of the conversation's stream)."""
    n = len(starts)
    turns = np.random.default_rng(prefix_seq).geometric(1.0 / prefix.turns_mean, n)
    conversation = np.repeat(np.arange(n, dtype=np.int64), turns)
    first = np.cumsum(turns) - turns  # index of each conversation's first turn
    turn = np.arange(len(conversation), dtype=np.int64) - np.repeat(first, turns)
    user, output = _sample_lengths(lengths, lengths_seq, len(conversation))
    user, output = np.maximum(user, 1).astype(np.int64), np.maximum(output, 1).astype(np.int64)
    # Prompt of turn k: all earlier user messages and outputs, then its own message.
    before = np.cumsum(user + output) - (user + output)
    prompt = before - np.repeat(before[first], turns) + user
    fits = (turn == 0) | (prompt <= max_context - 1)
    # Prompts grow within a conversation, so the turns that fit are a prefix of it.
    arrival_s = np.repeat(starts, turns) + turn * prefix.think_time_s
    prompt = np.minimum(prompt, max_context - 1)
    output = np.minimum(output, max_context - prompt)
    # The conversation's id stream: enough units for its longest kept prompt.
    stream = np.zeros(n, np.int64)
    np.maximum.at(stream, conversation[fits], _units(prompt[fits]))
    first_unit = np.cumsum(stream) - stream
    return (arrival_s[fits], prompt[fits], output[fits], conversation[fits], np.repeat(first_unit, turns)[fits])


# --------------------------------------------------------------------------------------------------
# Arrival sampling


def _synthetic_arrivals(
    spec: PoissonArrival | GammaArrival | ConstantArrival | ScheduleArrival | DiurnalArrival,
    seq: np.random.SeedSequence,
    num_requests: int | None,
    duration_s: float | None,
) -> np.ndarray:
    """Draw chunks of arrivals until `num_requests` are in hand or the process has passed `duration_s`."""
    expected = num_requests if num_requests is not None else _mean_rate(spec) * duration_s
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


def _mean_rate(spec) -> float:
    if isinstance(spec, ScheduleArrival):
        durations = np.array([s.duration_s for s in spec.steps])
        rates = np.array([s.rate_per_s for s in spec.steps])
        return max(float(durations @ rates / durations.sum()), float(rates.max()) * 0.1)
    if isinstance(spec, DiurnalArrival):
        return spec.mean_rate_per_s * (1 + spec.amplitude)  # thinning draws candidates at the peak rate
    return spec.rate_per_s


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


def _replay(
    arrival_s: np.ndarray, spec: TraceArrival, num_requests: int | None, duration_s: float | None
) -> np.ndarray:
    """The trace's times, rescaled (over the whole trace, before truncation), then cut to the run."""
    if spec.target_rate_per_s is not None:
        span_s = float(arrival_s[-1] - arrival_s[0])
        if len(arrival_s) < 2 or span_s <= 0:
            raise ConfigError(
                f"workload.arrival.target_rate_per_s: '{spec.path}' spans no time, so it has no rate to rescale"
            )
        # Mean rate = 1 / mean gap = (n - 1) / span, the same definition summarize() reports.
        scale = (len(arrival_s) - 1) / (span_s * spec.target_rate_per_s)
    else:
        scale = spec.time_scale
    times = arrival_s * scale
    if duration_s is not None:
        times = times[: np.searchsorted(times, duration_s, side="left")]
    return times[:num_requests]


@lru_cache(maxsize=16)
def _load_cached(key: tuple, path: str, fmt: str, columns: TraceColumns | None, field: str) -> Trace:
    return load_trace(path, fmt, columns, field=field)


def _cached_trace(path: str, fmt: str, columns: TraceColumns | None, field: str) -> Trace:
    """Sweeps generate many workloads from one trace: parse it once (Trace arrays are read-only)."""
    file = Path(path).expanduser()
    try:
        stat = file.stat()
    except OSError:
        return load_trace(path, fmt, columns, field=field)  # raises the one-line "not found" error
    # Keyed on the absolute path and its mtime/size so that an edited file is read again.
    return _load_cached((str(file.resolve()), stat.st_mtime_ns, stat.st_size), path, fmt, columns, field)


# --------------------------------------------------------------------------------------------------
# Length sampling


def _sample_lengths(spec, seq: np.random.SeedSequence, n: int) -> tuple[np.ndarray, np.ndarray]:
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
    return np.rint(rng.lognormal(mu, sigma, n)).astype(np.int64)


def _cached_empirical(spec: EmpiricalLengths) -> Trace:
    columns = TraceColumns(input=spec.input_column, output=spec.output_column)
    return _cached_trace(spec.path, "auto", columns, "workload.lengths.path")


# --------------------------------------------------------------------------------------------------
# Summary


def summarize(workload: Workload | Trace) -> dict:
    """Count, span, mean rate (1 / mean gap), inter-arrival CV (population std / mean), length
    mean/p50/p99 (numpy's default linear interpolation) and, with prompt content ids, the fraction
    of prompt units whose id appeared before; a Trace is accepted too."""
    arrival_s = workload.arrival_s
    closed = getattr(workload, "closed_loop", None) is not None
    summary: dict = {"count": workload.num_requests, "span_s": None, "mean_rate_per_s": None, "interarrival_cv": None}
    for name, values in (("input", workload.input_tokens), ("output", workload.output_tokens)):
        empty = len(values) == 0
        summary[f"{name}_mean"] = None if empty else float(np.mean(values))
        summary[f"{name}_p50"] = None if empty else float(np.percentile(values, 50))
        summary[f"{name}_p99"] = None if empty else float(np.percentile(values, 99))
    ids = getattr(workload, "prefix_ids", None) or workload.hash_ids
    if ids:
        # The Mooncake README's statistic: the fraction of prompt units (ids) that appeared before.
        flat = np.concatenate(ids)
        summary["prefix_units_reused_fraction"] = float(1 - len(np.unique(flat)) / len(flat)) if len(flat) else None
    if closed:
        summary["note"] = "closed loop: arrival times depend on the simulated system, so no rate or CV"
    elif arrival_s is None:
        summary["note"] = "lengths only: no arrival times"
    else:
        summary["note"] = None
        if len(arrival_s):
            summary["span_s"] = float(arrival_s[-1] - arrival_s[0])
        gaps = np.diff(arrival_s)
        if len(gaps) and gaps.mean() > 0:
            summary["mean_rate_per_s"] = float(1.0 / gaps.mean())
            summary["interarrival_cv"] = float(gaps.std() / gaps.mean())
    return summary
