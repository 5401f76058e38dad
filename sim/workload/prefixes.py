"""Shared prompt content for prefix caching: system prompts shared across requests and multi-turn conversations.

Prompt content is described by ids (see sim.core.request.Request): prompt tokens [i*unit, (i+1)*unit)
have content id `prefix_ids[i]`, equal ids meaning equal content. Mooncake traces bring their own
(`hash_ids`, 512 tokens each); synthetic prefixes use 16-token units.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

import numpy as np
from pydantic import Field

from sim.errors import ConfigError
from sim.workload.base import MAX_NUM_REQUESTS, StrictSpec
from sim.workload.lengths import sample_lengths
from sim.workload.traces import MAX_TRACE_TOKENS

# --------------------------------------------------------------------------------------------------
# Shared prefixes


class SharedSystemPrompt(StrictSpec):
    """A `fraction` of the requests start with one of `num_prompts` system prompts (chosen uniformly) of
    `tokens` tokens: their prompt is the system prompt plus the sampled input, clipped to the context.

    Content is shared in 16-token units, so the last `tokens % 16` tokens of a system prompt share a
    unit with the user's text and count as unique (a system prompt under 16 tokens shares nothing).
    """

    kind: Literal["shared_system_prompt"] = "shared_system_prompt"
    tokens: int = Field(gt=0, le=MAX_TRACE_TOKENS, description="system prompt length in tokens")
    fraction: float = Field(gt=0, le=1, description="fraction of requests that start with a system prompt")
    num_prompts: int = Field(1, ge=1, le=MAX_NUM_REQUESTS, description="distinct system prompts")


class MultiTurn(StrictSpec):
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


# --------------------------------------------------------------------------------------------------
# Shared prefixes


def content_units(num_tokens: np.ndarray) -> np.ndarray:
    return -(-num_tokens // SYNTHETIC_PREFIX_UNIT_TOKENS)


def split_by_counts(flat: np.ndarray, counts: np.ndarray) -> list[np.ndarray]:
    """Consecutive pieces of `flat` with the given lengths (views)."""
    ends = np.cumsum(counts).tolist()
    return [flat[a:b] for a, b in zip([0] + ends[:-1], ends)]


def system_prompts(spec: SharedSystemPrompt, seq: np.random.SeedSequence, n: int, max_context: int) -> np.ndarray:
    """Per request the system prompt it starts with, or -1."""
    if spec.tokens >= max_context - 1:
        raise ConfigError(
            f"workload.prefix.tokens: {spec.tokens} leaves no room for a request in the model's context of "
            f"{max_context} tokens; it must be below {max_context - 1}"
        )
    which_rng, choice_rng = (np.random.default_rng(s) for s in seq.spawn(2))
    shared = which_rng.random(n) < spec.fraction
    return np.where(shared, choice_rng.integers(0, spec.num_prompts, n), -1)


# The most content ids (one per SYNTHETIC_PREFIX_UNIT_TOKENS prompt tokens) a run's requests hold: 1 GiB of them as
# int64, about three times that while they are built. A run of more is refused (`check_content_ids`): 5.8 million
# requests of scenarios/prefix_caching.yaml held 21 GB (a 2-vCPU AMD EPYC KVM guest with 23 GB, 12-08), enough for
# the kernel to end the process without a word.
MAX_CONTENT_IDS = 1 << 27


def check_content_ids(units: np.ndarray, by_duration: bool = False, redrawn: bool = False) -> None:
    """Refuse, in one line, a run whose prompts' content ids (`units` a request, in arrival order) pass
    MAX_CONTENT_IDS, naming the most requests whose ids fit (run.num_requests, or run.duration_s where the run's
    duration set its count: `by_duration`): exactly where a shorter run sends the same first requests, about where
    it draws them anew (`redrawn`: a multi-turn workload draws fewer conversations)."""
    total = int(units.sum())
    if total > MAX_CONTENT_IDS:
        most = int(np.searchsorted(np.cumsum(units), MAX_CONTENT_IDS, side="right"))
        field = "run.duration_s" if by_duration else "run.num_requests"
        allowed = (("a run.duration_s whose arrivals number" if by_duration else "run.num_requests")
                   + f" <= {'about ' if redrawn else ''}{most:,}")
        raise ConfigError(f"{field}: {len(units):,} requests whose prompts hold {total:,} content ids "
                          f"(workload.prefix: one per {SYNTHETIC_PREFIX_UNIT_TOKENS} prompt tokens, for prefix "
                          f"sharing) pass the {MAX_CONTENT_IDS:,} a run holds (MAX_CONTENT_IDS); allowed: {allowed}")


def system_prompt_ids(spec: SharedSystemPrompt, system: np.ndarray, inputs: np.ndarray) -> list[np.ndarray]:
    """Ids 0 .. num_prompts*K - 1 for the K whole units of each system prompt, then a fresh id per unit. Built with
    one array of every id and three of the shared ones (the caller's `check_content_ids` bounds them)."""
    per_prompt = spec.tokens // SYNTHETIC_PREFIX_UNIT_TOKENS
    units = content_units(inputs)
    total = int(units.sum())
    starts = np.cumsum(units) - units
    flat = np.arange(spec.num_prompts * per_prompt, spec.num_prompts * per_prompt + total, dtype=np.int64)
    shared = np.where(system >= 0, np.minimum(units, per_prompt), 0)  # each request's units of its system prompt
    num_shared = int(shared.sum())
    if num_shared:
        # the shared units' places in `flat` and their positions in their prompt
        position = np.arange(num_shared, dtype=np.int64) - np.repeat(np.cumsum(shared) - shared, shared)
        with_prompt = shared > 0
        flat[np.repeat(starts[with_prompt], shared[with_prompt]) + position] = (
            np.repeat(system[with_prompt] * per_prompt, shared[with_prompt]) + position)
    return split_by_counts(flat, units)


def fresh_stream(seq: np.random.SeedSequence) -> np.random.SeedSequence:
    return np.random.SeedSequence(seq.entropy, spawn_key=seq.spawn_key, pool_size=seq.pool_size)


def conversation_turns(prefix: MultiTurn, lengths, starts: np.ndarray, lengths_seq, prefix_seq,
                        max_context: int) -> tuple[np.ndarray, ...]:
    """Every turn of the conversations starting at `starts`, conversation-major: (arrival_s, prompt,
    output, conversation index, first id of the conversation's stream, clipped). `clipped` marks a kept
    turn whose prompt or output was cut to fit `max_context` (a later turn that no longer fits ends its
    conversation instead)."""
    n = len(starts)
    turns = np.random.default_rng(prefix_seq).geometric(1.0 / prefix.turns_mean, n)
    conversation = np.repeat(np.arange(n, dtype=np.int64), turns)
    first = np.cumsum(turns) - turns  # index of each conversation's first turn
    turn = np.arange(len(conversation), dtype=np.int64) - np.repeat(first, turns)
    user, output = sample_lengths(lengths, lengths_seq, len(conversation))
    user, output = np.maximum(user, 1).astype(np.int64), np.maximum(output, 1).astype(np.int64)
    # Prompt of turn k: all earlier user messages and outputs, then its own message.
    before = np.cumsum(user + output) - (user + output)
    prompt = before - np.repeat(before[first], turns) + user
    fits = (turn == 0) | (prompt <= max_context - 1)
    # Prompts grow within a conversation, so the turns that fit are a prefix of it.
    arrival_s = np.repeat(starts, turns) + turn * prefix.think_time_s
    wanted_prompt, wanted_output = prompt, output
    prompt = np.minimum(prompt, max_context - 1)
    output = np.minimum(output, max_context - prompt)
    clipped = (wanted_prompt > prompt) | (wanted_output > output)
    # The conversation's id stream: enough units for its longest kept prompt.
    stream = np.zeros(n, np.int64)
    np.maximum.at(stream, conversation[fits], content_units(prompt[fits]))
    first_unit = np.cumsum(stream) - stream
    return (arrival_s[fits], prompt[fits], output[fits], conversation[fits], np.repeat(first_unit, turns)[fits],
            clipped[fits])
