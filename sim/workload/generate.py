"""Workloads: a `WorkloadSpec` (the scenario's `workload:` section) turned into a `Workload`, plain arrays.

Randomness: one `SeedSequence(seed)` is split into independent child streams for arrivals, input
lengths and output lengths, so changing the arrival process leaves the lengths unchanged, and asking
for more requests (or a longer duration) extends the same workload rather than drawing a new one.
A third child stream draws shared prefixes (`prefix:`), so adding one leaves the other two alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from sim.errors import ConfigError
from sim.workload.arrivals import (
    Arrival,
    BurstArrival,
    ClosedLoopArrival,
    ScheduleArrival,
    TraceArrival,
    cached_trace,
    expected_arrivals,
    replay_arrivals,
    synthetic_arrivals,
)
from sim.workload.base import MAX_NUM_REQUESTS, StrictSpec
from sim.workload.lengths import Lengths, TraceLengths, sample_lengths
from sim.workload.prefixes import (
    MOONCAKE_PREFIX_UNIT_TOKENS,
    SYNTHETIC_PREFIX_UNIT_TOKENS,
    MultiTurn,
    Prefix,
    SharedSystemPrompt,
    check_content_ids,
    content_units,
    conversation_turns,
    fresh_stream,
    split_by_counts,
    system_prompt_ids,
    system_prompts,
)
from sim.workload.traces import MAX_TRACE_TOKENS, Trace

# What becomes of a request longer than the model's context (scheduler.too_long; `generate_workload`)
TOO_LONG_RULES = ("clip", "refuse", "clip_output")


class ChatTemplate(StrictSpec):
    """The tokens the server's chat template adds to every prompt on the chat endpoint (sim/model/chat_templates.py:
    each model's, counted with its tokenizer). The engine prefills them; the client's counts leave them out."""

    lead_tokens: int = Field(ge=0, le=MAX_TRACE_TOKENS, description=(
        "before the user's message, the same for every request: shared as a prefix where the engine caches "
        "prefixes (kv_cache.enable_prefix_caching) and the workload has no prefix of its own"))
    trail_tokens: int = Field(ge=0, le=MAX_TRACE_TOKENS, description="after it: the generation prompt")

    @property
    def tokens(self) -> int:
        return self.lead_tokens + self.trail_tokens


class WorkloadSpec(StrictSpec):
    """The scenario's `workload:` section."""

    arrival: Arrival
    lengths: Lengths | None = Field(None, description="default: the trace's lengths for a trace arrival")
    prefix: Prefix | None = Field(None, description="prompts that share prefixes (prefix caching)")
    samples_per_prompt: int = Field(1, ge=1, description="parallel sampling: n outputs per prompt")
    beam_width: int = Field(1, ge=1, description="beam search: w beams per prompt (re-ranking not modelled)")
    endpoint: Literal["completions", "chat"] = Field("completions", description=(
        "the OpenAI endpoint the clients call: completions (a prompt as text; `vllm bench serve`'s default backend) "
        "or chat (messages the API server renders through the model's chat template; an engine preset prices the "
        "template work its version does per request, sim/config/engines/engine_work.py measured_work)"))
    chat_template: ChatTemplate | None = Field(None, description=(
        "endpoint chat: the tokens the model's chat template adds to each prompt (the engine's prompt is the sampled "
        "one plus these); absent: the model's own where counted (sim/model/chat_templates.py), else none; not added "
        "to multi_turn conversations"))

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
        if self.chat_template is not None and self.endpoint != "chat":
            raise ConfigError(f"workload.chat_template: not allowed with workload.endpoint {self.endpoint!r}; "
                              "allowed: with endpoint 'chat' only (a completions prompt is sent as it is)")
        if self.chat_template is not None and isinstance(self.prefix, MultiTurn):
            raise ConfigError("workload.chat_template: not allowed with workload.prefix.kind 'multi_turn' (a "
                              "conversation's turns are not rendered one by one); allowed: null")
        if isinstance(self.prefix, MultiTurn) and isinstance(self.arrival, (TraceArrival, ClosedLoopArrival)):
            raise ConfigError(
                f"workload.prefix: kind 'multi_turn' needs a synthetic arrival process (its arrivals start "
                f"conversations), but arrival kind is {self.arrival.kind!r}"
            )
        return self

    @property
    def resolved_lengths(self) -> Lengths:
        return self.lengths if self.lengths is not None else TraceLengths()


def endpoint_of(workload) -> str:
    """The endpoint a `workload:` section asks for, raw (a mapping, before validation) or a WorkloadSpec: its own,
    else WorkloadSpec's default."""
    value = workload.get("endpoint") if isinstance(workload, dict) else getattr(workload, "endpoint", None)
    return value or WorkloadSpec.model_fields["endpoint"].default


def check_run_size(spec: WorkloadSpec, num_requests: int | None, duration_s: float | None) -> None:
    """Refuse, before anything is sampled, a run of more than MAX_NUM_REQUESTS requests: a count above it, or,
    with a duration and no count, an expected count (rate x duration, x turns per conversation) above it. A
    trace replays at most its own rows; a closed loop and a burst need a count."""
    if num_requests is not None:
        if num_requests > MAX_NUM_REQUESTS:
            raise ConfigError(f"run.num_requests: {num_requests} is not allowed; allowed: at most "
                              f"{MAX_NUM_REQUESTS:,} requests per run (MAX_NUM_REQUESTS)")
        return
    arrival = spec.arrival
    if duration_s is None or isinstance(arrival, (TraceArrival, ClosedLoopArrival, BurstArrival)):
        return
    per_arrival = spec.prefix.turns_mean if isinstance(spec.prefix, MultiTurn) else 1.0
    expected = expected_arrivals(arrival, duration_s) * per_arrival
    if expected > MAX_NUM_REQUESTS:
        scheduled = isinstance(arrival, ScheduleArrival)
        load = "the schedule's rates" if scheduled else f"{arrival.mean_rate_per_s:g} req/s"
        turns = f" x {per_arrival:g} turns per conversation" if per_arrival != 1 else ""
        shorter = ("a shorter duration_s" if scheduled else
                   f"duration_s <= {MAX_NUM_REQUESTS / (arrival.mean_rate_per_s * per_arrival):.4g} s at this load")
        about = f"about {expected:.3g}" if math.isfinite(expected) else "over 1e+308"
        raise ConfigError(
            f"run.duration_s: {duration_s:g} s at {load}{turns} is {about} requests, more than the "
            f"limit of {MAX_NUM_REQUESTS:,} per run (MAX_NUM_REQUESTS); allowed: {shorter}, or a "
            f"run.num_requests <= {MAX_NUM_REQUESTS:,}")


# --------------------------------------------------------------------------------------------------
# The generated workload


@dataclass(frozen=True)
class Workload:
    """Requests as arrays, in arrival order."""

    arrival_s: np.ndarray  # float64 seconds, non-decreasing; empty for a closed loop
    input_tokens: np.ndarray  # int64 prompt length >= 1; clipped: in [1, max_context - 1]
    output_tokens: np.ndarray  # int64 output length >= 1; clipped: in [1, max_context - input]
    hash_ids: list[np.ndarray] | None = None  # per request prompt-block ids (trace lengths only)
    closed_loop: ClosedLoopArrival | None = None  # set when the engine must run the users
    # Per request int64 content ids of its prompt, one per prefix_unit_tokens tokens (Request.prefix_ids);
    # None: no content model, nothing is shared.
    prefix_ids: list[np.ndarray] | None = None
    prefix_unit_tokens: int = 0  # tokens per content id (16 synthetic, 512 Mooncake); 0 without ids
    conversation_ids: np.ndarray | None = None  # int64 per request, multi_turn only (numbered by start)
    num_clipped: int = 0  # requests whose sampled prompt or output was cut to fit max_context
    chat_template_tokens: int = 0  # of each input_tokens, the chat template's (workload.chat_template)

    @property
    def sent_tokens(self) -> np.ndarray:
        """Each prompt as the client sent it, without the chat template's tokens: what an API front-end's measured
        work per prompt token was measured on (the template's own work is in its work per request)."""
        if not self.chat_template_tokens:
            return self.input_tokens
        return np.maximum(self.input_tokens - self.chat_template_tokens, 0)

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
    too_long: str = "clip",
) -> Workload:
    """Sample `spec`: exactly `num_requests` requests, or every arrival in [0, duration_s), or both
    (whichever ends first); a trace with neither, every row. A request longer than the model's context
    (`too_long`, scheduler.too_long's `TOO_LONG_RULES`): clipped to fit, left as asked for the deployment to
    refuse ("refuse"), or its output clipped to what its prompt leaves, a prompt of the whole context or more left
    for the deployment to refuse ("clip_output"). A multi-turn conversation's turns are clipped under every rule."""
    if num_requests is None and duration_s is None and not isinstance(spec.arrival, TraceArrival):
        raise ConfigError("num_requests/duration_s: both missing; give at least one of them")
    if num_requests is not None and num_requests < 1:
        raise ConfigError(f"num_requests: {num_requests} is not allowed; it must be >= 1")
    if duration_s is not None and not duration_s > 0:
        raise ConfigError(f"duration_s: {duration_s} is not allowed; it must be > 0")
    if max_context < 2:
        raise ConfigError(f"max_context: {max_context} is not allowed; it must be >= 2 (one prompt + one output token)")
    check_run_size(spec, num_requests, duration_s)  # a scenario was checked already; a sweep's new rate was not
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
        trace = cached_trace(arrival.path, arrival.format, arrival.columns, "workload.arrival.path")
        arrival_s = replay_arrivals(arrival.recorded_arrival_s(), arrival, num_requests, duration_s)
        count = rows = len(arrival_s)
        if count > MAX_NUM_REQUESTS:  # (a count above it was refused with the scenario)
            within = f" within run.duration_s {duration_s:g} s" if duration_s is not None else ""
            raise ConfigError(f"workload.arrival.path: '{arrival.path}' replays {count:,} requests{within}, more than "
                              f"the limit of {MAX_NUM_REQUESTS:,} per run (MAX_NUM_REQUESTS); allowed: "
                              f"run.num_requests <= {MAX_NUM_REQUESTS:,}, or a shorter run.duration_s")
    else:
        arrival_s = synthetic_arrivals(arrival, arrivals_seq, num_requests, duration_s)
        count = len(arrival_s)

    hash_ids = None
    if isinstance(lengths, TraceLengths):
        inputs, outputs = trace.input_tokens[:rows], trace.output_tokens[:rows]
        hash_ids = None if trace.hash_ids is None else trace.hash_ids[:rows]
    else:
        inputs, outputs = sample_lengths(lengths, lengths_seq, count)
    if hash_ids is not None and spec.prefix is not None:
        raise ConfigError(
            f"workload.prefix: the trace already describes its prompts' content (hash_ids in "
            f"'{arrival.path}'); leave prefix out"
        )
    system = None
    if isinstance(spec.prefix, SharedSystemPrompt):
        system = system_prompts(spec.prefix, prefix_seq, len(inputs), max_context)
        inputs = inputs + np.where(system >= 0, spec.prefix.tokens, 0)
    template_lead = None  # the chat template's lead as one system prompt every request starts with
    template = spec.chat_template
    if template is not None and template.tokens:
        if spec.prefix is None and hash_ids is None and template.lead_tokens >= SYNTHETIC_PREFIX_UNIT_TOKENS:
            template_lead = SharedSystemPrompt(tokens=template.lead_tokens, fraction=1.0)
        inputs = inputs + template.tokens

    # Prompt first, then the output gets what the context has left: a request must fit the model.
    wanted_inputs, wanted_outputs = inputs, outputs
    if too_long == "clip":
        inputs = np.clip(inputs, 1, max_context - 1).astype(np.int64)
        outputs = np.clip(outputs, 1, max_context - inputs).astype(np.int64)
    else:  # what does not fit is the deployment's to refuse (its admission: prompt + output > max_model_len)
        inputs, outputs = np.maximum(inputs, 1).astype(np.int64), np.maximum(outputs, 1).astype(np.int64)
        if too_long == "clip_output":
            outputs = np.where(inputs < max_context, np.minimum(outputs, max_context - inputs), outputs)
    num_clipped = int(np.count_nonzero((wanted_inputs > inputs) | (wanted_outputs > outputs)))
    prefix_ids, unit = None, 0
    # A prompt's content ids for no more of it than the context holds: a longer one is refused before any is read,
    # and ids for all of it (one per 16 tokens) would hold memory in proportion to its asked length
    run_tokens = np.minimum(inputs, max_context)
    if hash_ids is None and (system is not None or template_lead is not None):
        check_content_ids(content_units(run_tokens), by_duration=num_requests is None)
    if hash_ids is not None:
        prefix_ids, unit = hash_ids, MOONCAKE_PREFIX_UNIT_TOKENS
    elif system is not None:
        prefix_ids, unit = system_prompt_ids(spec.prefix, system, run_tokens), SYNTHETIC_PREFIX_UNIT_TOKENS
    elif template_lead is not None:
        every = np.zeros(len(inputs), dtype=np.int64)
        prefix_ids, unit = system_prompt_ids(template_lead, every, run_tokens), SYNTHETIC_PREFIX_UNIT_TOKENS
    return Workload(np.asarray(arrival_s, dtype=np.float64), inputs, outputs, hash_ids, closed_loop,
                    prefix_ids, unit, num_clipped=num_clipped,
                    chat_template_tokens=template.tokens if template is not None else 0)


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
        starts = synthetic_arrivals(spec.arrival, fresh_stream(arrivals_seq), num_conversations, duration_s)
        drawn = conversation_turns(prefix, spec.resolved_lengths, starts, fresh_stream(lengths_seq), prefix_seq,
                                    max_context)
        arrival_s = drawn[0]
        keep = np.ones(len(arrival_s), bool) if duration_s is None else arrival_s < duration_s
        order = np.flatnonzero(keep)[np.argsort(arrival_s[keep], kind="stable")][:num_requests]
        complete = (num_requests is None or len(starts) < num_conversations or num_conversations >= num_requests
                    or (len(order) == num_requests and arrival_s[order[-1]] <= starts[-1]))
        if complete:
            break
        num_conversations *= 2
    arrival_s, inputs, outputs, conversation, first_unit, clipped = (a[order] for a in drawn)
    units = content_units(inputs)
    check_content_ids(units, by_duration=num_requests is None, redrawn=True)
    total = int(units.sum())
    flat = np.repeat(first_unit, units) + np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(units) - units, units)
    return Workload(arrival_s, inputs, outputs, None, None, split_by_counts(flat, units), SYNTHETIC_PREFIX_UNIT_TOKENS,
                    conversation, num_clipped=int(np.count_nonzero(clipped)))


# --------------------------------------------------------------------------------------------------
# Summary


def summarize(workload: Workload | Trace) -> dict:
    """Count, span, mean rate (1 / mean gap), inter-arrival CV (population std / mean), length
    mean/p50/p99 (numpy's default linear interpolation) and, with prompt content ids, the fraction
    of prompt units whose id appeared before; a Trace is accepted too."""
    arrival_s = workload.arrival_s
    closed = getattr(workload, "closed_loop", None) is not None
    summary: dict = {"count": workload.num_requests, "span_s": None, "mean_rate_per_s": None, "interarrival_cv": None}
    if isinstance(workload, Workload):
        summary["num_clipped"] = workload.num_clipped  # cut to fit max_model_len: not the lengths asked for
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
