"""Workloads whose prompts share prefixes: system prompts, multi-turn conversations, Mooncake hash ids."""

import numpy as np
import pytest
from conftest import TRACES
from pydantic import ValidationError

from sim.core.request import Request
from sim.errors import ConfigError
from sim.kv.paged import PagedKVManager
from sim.workload.generate import WorkloadSpec, generate_workload, summarize

UNIT = 16


def spec(prefix, lengths=None, arrival=None) -> WorkloadSpec:
    return WorkloadSpec.model_validate({
        "arrival": arrival or {"kind": "poisson", "rate_per_s": 10},
        "lengths": lengths or {"kind": "lognormal", "input_mean": 300, "input_sigma": 1.0,
                               "output_mean": 100, "output_sigma": 1.0},
        "prefix": prefix,
    })


def generate(s: WorkloadSpec, seed=0, num_requests=20_000, duration_s=None, max_context=4096):
    return generate_workload(s, seed=seed, num_requests=num_requests, duration_s=duration_s, max_context=max_context)


def assert_same(a, b):
    for name in ("arrival_s", "input_tokens", "output_tokens"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert len(a.prefix_ids) == len(b.prefix_ids)
    assert all(np.array_equal(x, y) for x, y in zip(a.prefix_ids, b.prefix_ids))


# --- shared system prompt --------------------------------------------------------------------------

SYSTEM = {"kind": "shared_system_prompt", "tokens": 500, "fraction": 0.3, "num_prompts": 3}


def test_system_prompt_fraction_lengths_and_ids():
    plain = generate(spec(None))
    w = generate(spec(SYSTEM))
    assert w.prefix_unit_tokens == UNIT and plain.prefix_ids is None
    per_prompt = 500 // UNIT  # whole units inside the system prompt: 31 (496 tokens)
    first = np.array([ids[0] for ids in w.prefix_ids])
    shared = first < 3 * per_prompt
    assert shared.mean() == pytest.approx(0.3, abs=0.015)
    # Lengths: the same sampled inputs (the same random stream), plus the system prompt where there is one.
    assert np.array_equal(w.input_tokens[~shared], plain.input_tokens[~shared])
    assert np.array_equal(w.input_tokens[shared], np.minimum(plain.input_tokens[shared] + 500, 4095))
    assert np.array_equal(w.arrival_s, plain.arrival_s)
    assert all(len(ids) == -(-n // UNIT) for ids, n in zip(w.prefix_ids, w.input_tokens))
    # Each shared prompt starts with one of three id runs; everything else is unique.
    starts = {tuple(ids[:per_prompt].tolist()) for ids, s in zip(w.prefix_ids, shared) if s}
    assert starts == {tuple(range(k * per_prompt, (k + 1) * per_prompt)) for k in range(3)}
    rest = np.concatenate([ids[per_prompt:] if s else ids for ids, s in zip(w.prefix_ids, shared)])
    assert len(np.unique(rest)) == len(rest) and rest.min() >= 3 * per_prompt
    assert summarize(w)["prefix_units_reused_fraction"] > 0


def test_system_prompt_hits_in_the_prefix_cache():
    w = generate(spec({"kind": "shared_system_prompt", "tokens": 500, "fraction": 1.0}), num_requests=50)
    kv = PagedKVManager(10_000, 16, enable_prefix_caching=True)
    hits = []
    for i in range(w.num_requests):
        r = Request(i, float(w.arrival_s[i]), int(w.input_tokens[i]), int(w.output_tokens[i]),
                    prefix_ids=w.prefix_ids[i], prefix_unit_tokens=w.prefix_unit_tokens)
        hits.append(kv.get_computed_blocks(r))
        r.num_computed_tokens = hits[-1]
        assert kv.allocate_slots(r, r.num_prompt_tokens - hits[-1]) is not None
        kv.free(r)
    assert hits[0] == 0 and set(hits[1:]) == {496}  # the 31 whole units of the system prompt, 31 blocks


def test_system_prompt_must_leave_room():
    with pytest.raises(ConfigError, match="prefix.tokens"):
        generate(spec({"kind": "shared_system_prompt", "tokens": 4095, "fraction": 0.5}))


@pytest.mark.parametrize("bad", [
    {"kind": "shared_system_prompt", "tokens": 0, "fraction": 0.5},
    {"kind": "shared_system_prompt", "tokens": 10, "fraction": 0.0},
    {"kind": "shared_system_prompt", "tokens": 10, "fraction": 1.5},
    {"kind": "shared_system_prompt", "tokens": 10, "fraction": 0.5, "typo": 1},
    {"kind": "multi_turn", "turns_mean": 0.5, "think_time_s": 1},
    {"kind": "multi_turn", "turns_mean": 2, "think_time_s": -1},
    {"kind": "radix", "tokens": 10},
])
def test_prefix_spec_is_validated(bad):
    with pytest.raises((ValidationError, ConfigError)):
        spec(bad)


def test_multi_turn_needs_synthetic_arrivals():
    with pytest.raises(ConfigError, match="multi_turn"):
        spec({"kind": "multi_turn", "turns_mean": 3, "think_time_s": 5},
             arrival={"kind": "closed_loop", "num_users": 4, "think_time_s": 1})


# --- multi-turn conversations ----------------------------------------------------------------------

TURNS = {"kind": "multi_turn", "turns_mean": 4, "think_time_s": 30.0}


def _conversations(w):
    order = np.lexsort((w.arrival_s, w.conversation_ids))
    groups = np.split(order, np.flatnonzero(np.diff(w.conversation_ids[order])) + 1)
    return [g for g in groups if len(g)]


def test_multi_turn_prompts_extend_the_previous_turn_exactly():
    w = generate(spec(TURNS, lengths={"kind": "fixed", "input_tokens": 10, "output_tokens": 5}), num_requests=5000)
    for g in _conversations(w):
        # Prompt of turn k: k earlier (10-token message + 5-token answer) pairs, then its own message.
        assert w.input_tokens[g].tolist() == [10 + 15 * k for k in range(len(g))]
        assert np.allclose(np.diff(w.arrival_s[g]), 30.0)


def test_multi_turn_ids_are_prefix_equal_and_private_to_the_conversation():
    w = generate(spec(TURNS), num_requests=5000)
    assert w.prefix_unit_tokens == UNIT and w.hash_ids is None
    assert np.all(np.diff(w.arrival_s) >= 0)
    owner = {}
    turns = []
    for g in _conversations(w):
        turns.append(len(g))
        for a, b in zip(g[:-1], g[1:]):
            assert w.input_tokens[b] > w.input_tokens[a] + w.output_tokens[a]  # + a message of >= 1 token
            ids_a, ids_b = w.prefix_ids[a], w.prefix_ids[b]
            assert np.array_equal(ids_b[:len(ids_a)], ids_a)
        for i in g:
            assert len(w.prefix_ids[i]) == -(-int(w.input_tokens[i]) // UNIT)
            for unit_id in w.prefix_ids[i].tolist():
                assert owner.setdefault(unit_id, w.conversation_ids[i]) == w.conversation_ids[i]
    assert 2.5 < np.mean(turns) < 4.5  # conversations still going at the cut have fewer turns so far


def test_multi_turn_counts_duration_and_context():
    w = generate(spec(TURNS), num_requests=3000, duration_s=200.0, max_context=2048)
    assert w.num_requests <= 3000 and np.all(w.arrival_s < 200.0)
    assert np.all(w.input_tokens + w.output_tokens <= 2048) and np.all(w.input_tokens >= 1)
    whole = generate(spec(TURNS), num_requests=None, duration_s=200.0, max_context=2048)
    assert whole.num_requests >= w.num_requests
    n = generate(spec(TURNS), num_requests=700)
    assert n.num_requests == 700


def test_multi_turn_first_requests_are_the_same_for_more_requests():
    small, large = generate(spec(TURNS), num_requests=500), generate(spec(TURNS), num_requests=20_000)
    for name in ("arrival_s", "input_tokens", "output_tokens", "conversation_ids"):
        assert np.array_equal(getattr(small, name), getattr(large, name)[:500])
    assert all(np.array_equal(a, b) for a, b in zip(small.prefix_ids, large.prefix_ids))


@pytest.mark.parametrize("prefix", [SYSTEM, TURNS])
def test_prefix_workloads_are_deterministic_by_seed(prefix):
    a, b, c = generate(spec(prefix), seed=3), generate(spec(prefix), seed=3), generate(spec(prefix), seed=4)
    assert_same(a, b)
    assert not np.array_equal(a.input_tokens, c.input_tokens)


# --- Mooncake trace: hash ids as content ids --------------------------------------------------------

def test_mooncake_hash_ids_are_the_prefix_ids():
    path = TRACES / "mooncake_conversation.jsonl"
    if not path.exists():
        pytest.skip(f"{path} not present")
    s = WorkloadSpec.model_validate({"arrival": {"kind": "trace", "path": str(path)}})
    w = generate_workload(s, seed=0, num_requests=100_000, duration_s=None, max_context=200_000)
    assert w.prefix_unit_tokens == 512 and w.prefix_ids is w.hash_ids
    assert round(100 * summarize(w)["prefix_units_reused_fraction"], 1) == 36.6
    with pytest.raises(ConfigError, match="hash_ids"):
        generate_workload(
            WorkloadSpec.model_validate({"arrival": {"kind": "trace", "path": str(path)}, "prefix": SYSTEM}),
            seed=0, num_requests=10, duration_s=None, max_context=200_000)
