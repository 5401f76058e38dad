"""Prefix caching through the whole simulator."""

import pytest
from conftest import TRACES

from sim.config.files import validate_scenario
from sim.run import simulate


def system_prompt(enabled: bool, **run):
    return validate_scenario({
        "model": "llama-3.1-8b",
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 4},
                     "lengths": {"kind": "fixed", "input_tokens": 100, "output_tokens": 50},
                     "prefix": {"kind": "shared_system_prompt", "tokens": 1024, "fraction": 0.5}},
        "scheduler": {"max_model_len": 4096},
        "kv_cache": {"enable_prefix_caching": enabled},
        "run": {"seed": 3, "num_requests": 300, **run},
    })


def test_cache_hits_are_exactly_the_prefill_not_computed():
    off, on = simulate(system_prompt(False)), simulate(system_prompt(True))
    assert off.summary["preemptions"] == on.summary["preemptions"] == 0
    saved = off.steps["num_prefill_tokens"].sum() - on.steps["num_prefill_tokens"].sum()
    queried = on.requests["prompt_tokens"].sum()
    assert saved == round(on.summary["prefix_cache_hit_rate_tokens"] * queried)
    # About half the requests carry the 1024-token prompt; all but the first one hit it.
    with_prompt = (on.requests["prompt_tokens"] > 1000).sum()
    assert saved == pytest.approx((with_prompt - 1) * 1024, rel=0.02)
    assert on.summary["ttft_s_mean"] < off.summary["ttft_s_mean"]
    assert on.summary["kv_shared_bytes_mean"] > 0


def test_same_seed_same_results_with_the_cache():
    a, b = simulate(system_prompt(True)), simulate(system_prompt(True))
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps)


def test_mooncake_trace_hits_at_most_the_unbounded_reuse():
    path = TRACES / "mooncake_conversation.jsonl"
    if not path.exists():
        pytest.skip(f"{path} is not available")
    sc = validate_scenario({
        "model": "llama-3.1-8b",
        "hardware": {"gpu": "h200"},
        "workload": {"arrival": {"kind": "trace", "path": str(path), "format": "mooncake",
                                 "target_rate_per_s": 1.0}},
        "scheduler": {"max_model_len": 131072, "chunked_prefill": True},
        "kv_cache": {"enable_prefix_caching": True, "block_size": 16},
        "run": {"seed": 0, "num_requests": 400},
    })
    from sim.run import make_workload
    from sim.workload.generate import summarize
    reuse = summarize(make_workload(sc))["prefix_units_reused_fraction"]  # unbounded cache, these requests
    finite = simulate(sc).summary
    unbounded_sc = sc.model_copy(update={"kv_cache": sc.kv_cache.model_copy(update={"capacity_tokens": 20_000_000})})
    unbounded = simulate(unbounded_sc).summary
    assert unbounded["prefix_cache_evictions"] == 0
    # Block-level hits in the engine match the trace's reuse, less the prompts' never-claimed last blocks.
    assert unbounded["prefix_cache_hit_rate_blocks"] == pytest.approx(reuse, rel=0.05)
    assert finite["prefix_cache_evictions"] > 0
    assert 0 < finite["prefix_cache_hit_rate_blocks"] < unbounded["prefix_cache_hit_rate_blocks"]
