"""Speculative decoding: the Leviathan et al. (ICML 2023) known answers, ragged acceptance, memory, cost."""

import pytest

from sim.config.deployment import resolve
from sim.config.files import validate_scenario
from sim.run import simulate

GAMMA, C = 4, 0.1
FIXED_DECODE_S = 0.02


def one_long_request(speculation=None, layout="contiguous", output_tokens=20_001, **extra):
    raw = {
        "model": "llama-3.1-8b",
        "workload": {"arrival": {"kind": "constant", "rate_per_s": 1.0},
                     "lengths": {"kind": "fixed", "input_tokens": 16, "output_tokens": output_tokens}},
        "kv_cache": {"layout": layout, "capacity_tokens": 40_000, "reserve": "oracle"},
        "cost_model": {"kind": "fixed", "prefill_s": 0.01, "decode_s": FIXED_DECODE_S},
        "run": {"seed": 0, "num_requests": 1},
        **extra,
    }
    if speculation:
        raw["speculation"] = speculation
    return validate_scenario(raw)


@pytest.mark.parametrize("alpha", [0.5, 0.7, 0.9])
@pytest.mark.parametrize("layout", ["contiguous", "paged"])
def test_batch1_tokens_per_pass_and_speedup_match_the_formula(alpha, layout):
    spec = {"draft_cost_ratio": C, "num_speculative_tokens": GAMMA, "acceptance": {"kind": "fixed", "alpha": alpha}}
    result = simulate(one_long_request(spec, layout))
    baseline = simulate(one_long_request(None, layout))
    decode_steps = result.steps[result.steps["num_decode_seqs"] > 0]
    tokens_per_pass = decode_steps["num_output_tokens"].sum() / len(decode_steps)
    expected_tokens = (1 - alpha ** (GAMMA + 1)) / (1 - alpha)
    assert tokens_per_pass == pytest.approx(expected_tokens, rel=0.02)
    speedup = baseline.summary["tpot_s_mean"] / result.summary["tpot_s_mean"]
    expected_speedup = (1 - alpha ** (GAMMA + 1)) / ((1 - alpha) * (GAMMA * C + 1))
    assert speedup == pytest.approx(expected_speedup, rel=0.02)
    assert result.requests["output_tokens"].iloc[0] == 20_001  # never overshoots the requested length


def test_every_step_yields_between_one_and_gamma_plus_one_tokens():
    spec = {"draft_cost_ratio": C, "num_speculative_tokens": GAMMA, "acceptance": {"kind": "fixed", "alpha": 0.6}}
    steps = simulate(one_long_request(spec, output_tokens=2001)).steps
    decodes = steps[steps["num_decode_seqs"] > 0]["num_output_tokens"]
    assert decodes.min() >= 1 and decodes.max() <= GAMMA + 1
    assert set(decodes.unique()) >= {1, GAMMA + 1}


def many_requests(speculation, rate=20.0, n=300, layout="contiguous", model="llama-3.1-8b"):
    raw = {
        "model": model,
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": rate},
                     "lengths": {"kind": "fixed", "input_tokens": 200, "output_tokens": 200}},
        "kv_cache": {"layout": layout},
        "scheduler": {"max_model_len": 2048},
        "run": {"seed": 4, "num_requests": n},
        "speculation": speculation,
    }
    return validate_scenario(raw)


def test_rollback_to_min_yields_fewer_tokens_than_per_request():
    base = {"draft_cost_ratio": C, "num_speculative_tokens": GAMMA,
            "acceptance": {"kind": "beta", "mean": 0.7, "concentration": 5}}
    ragged = simulate(many_requests({**base, "ragged": "per_request"})).steps
    synced = simulate(many_requests({**base, "ragged": "rollback_to_min"})).steps
    per_seq = lambda st: (st["num_output_tokens"] / st["num_decode_seqs"])[st["num_decode_seqs"] > 1].mean()  # noqa: E731
    assert per_seq(synced) < per_seq(ragged)


def test_sync_overhead_slows_verification():
    base = {"draft_cost_ratio": C, "num_speculative_tokens": GAMMA, "acceptance": {"kind": "fixed", "alpha": 0.7},
            "ragged": "rollback_to_min"}
    plain = simulate(many_requests(base)).summary
    padded = simulate(many_requests({**base, "sync_overhead_fraction": 0.2})).summary
    assert padded["tpot_s_mean"] > plain["tpot_s_mean"]


def test_draft_model_takes_memory_and_time():
    # Llama-2-7B drafts for Llama-2-13B: the same 32,000-token vocabulary.
    draft = {"draft_model": "llama-2-7b", "num_speculative_tokens": 3, "acceptance": {"kind": "fixed", "alpha": 0.8}}
    with_draft = many_requests(draft, model="llama-2-13b")
    without = many_requests(None, model="llama-2-13b")
    assert resolve(with_draft).kv_capacity_tokens < 0.6 * resolve(without).kv_capacity_tokens
    result = simulate(with_draft)
    assert result.summary["num_finished"] == 300
    assert "SpeculativeCostModel" in result.extras["cost_model"]


def test_speculation_helps_at_low_load_and_not_at_high_load():
    spec = {"draft_cost_ratio": 0.05, "num_speculative_tokens": GAMMA, "acceptance": {"kind": "fixed", "alpha": 0.7}}
    low_on, low_off = (simulate(many_requests(s, rate=1.0, n=60)).summary for s in (spec, None))
    high_on, high_off = (simulate(many_requests(s, rate=80.0, n=1600)).summary for s in (spec, None))
    assert low_on["tpot_s_mean"] < 0.7 * low_off["tpot_s_mean"]
    # At large batch the verification pass over γ+1 tokens per sequence is compute-bound: no gain left.
    assert high_on["tpot_s_mean"] > 0.95 * high_off["tpot_s_mean"]
    assert high_on["throughput_rps"] <= high_off["throughput_rps"]
