"""The compiled engine core (sim/compiled, issue 15) against the SimPy engine, over random scenarios in its scope.

Identical means identical here: the request records, the step log, the decode runs' per-step records and every
summary key, compared exactly (no tolerance). The core repeats the engine's decisions and the roofline's
floating-point operations in the same order, so nothing is reassociated. Each example also checks that the
compiled core really ran (`engine_core`), so a silent fall-back to the Python engine cannot pass for it.
"""

import math
import os

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.config.files import validate_scenario
from sim.run import make_workload, simulate

pytest.importorskip("numba")


def both(spec: dict, workload=None):
    """(the SimPy engine's result, the compiled core's result) for one scenario and workload."""
    results = []
    for compiled in (False, True):
        spec["run"]["compiled_core"] = compiled
        scenario = validate_scenario(spec)
        results.append(simulate(scenario, workload if workload is not None else make_workload(scenario)))
    return results


def assert_identical(python, compiled):
    pd.testing.assert_frame_equal(python.requests, compiled.requests, check_exact=True)
    pd.testing.assert_frame_equal(python.steps, compiled.steps, check_exact=True)
    assert (python.decode_runs is None) == (compiled.decode_runs is None)
    if python.decode_runs is not None:
        np.testing.assert_array_equal(python.decode_runs.step_duration_s, compiled.decode_runs.step_duration_s)
        assert list(python.decode_runs.kv) == list(compiled.decode_runs.kv)
        for name, values in python.decode_runs.kv.items():
            np.testing.assert_array_equal(values, compiled.decode_runs.kv[name], err_msg=name)
            assert values.dtype == compiled.decode_runs.kv[name].dtype
    assert list(python.summary) == list(compiled.summary)
    for key, want in python.summary.items():
        got = compiled.summary[key]
        if isinstance(want, float) and math.isnan(want):
            assert isinstance(got, float) and math.isnan(got), key
        else:
            assert got == want and type(got) is type(want), (key, want, got)


def spec_for(*, model="llama-3.1-8b", gpu="h100-sxm", tp=1, arrival=None, lengths=None, num_requests=60,
             horizon=None, capacity=None, block_size=16, chunked=False, max_num_seqs=256, budget=None,
             max_model_len=2048, fast_decode=True, seed=0) -> dict:
    return {
        "model": model,
        "hardware": {"gpu": gpu, "tensor_parallel": tp},
        "workload": {"arrival": arrival or {"kind": "poisson", "rate_per_s": 10.0},
                     "lengths": lengths or {"kind": "lognormal", "input_mean": 300, "input_sigma": 1.0,
                                            "output_mean": 60, "output_sigma": 1.0}},
        "scheduler": {"batching": "continuous", "chunked_prefill": chunked, "max_num_seqs": max_num_seqs,
                      "max_num_batched_tokens": budget, "max_model_len": max_model_len},
        "kv_cache": {"layout": "paged", "capacity_tokens": capacity, "block_size": block_size},
        "run": {"seed": seed, "num_requests": num_requests, "horizon_s": horizon, "fast_decode": fast_decode},
    }


# SERVESIM_COMPILED_EXAMPLES=2000 for a longer search (benchmarks/RESULTS.md says how many were run).
@settings(max_examples=int(os.environ.get("SERVESIM_COMPILED_EXAMPLES", "150")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from([("llama-3.1-8b", "h100-sxm", 1), ("llama-3.1-70b", "h100-sxm", 4),
                              ("llama-3.1-8b", "l4", 1), ("qwen2.5-7b", "a100-80gb", 2)]),
       arrival=st.sampled_from(["poisson", "gamma", "constant", "burst"]), rate=st.floats(0.5, 80.0),
       capacity=st.one_of(st.none(), st.integers(300, 8000)), block_size=st.sampled_from([1, 4, 16, 32]),
       chunked=st.booleans(), budget=st.sampled_from([None, 64, 512, 4096]),
       max_num_seqs=st.sampled_from([1, 3, 16, 256]), horizon=st.one_of(st.none(), st.floats(0.05, 30.0)),
       fast_decode=st.booleans(), max_model_len=st.sampled_from([600, 2048]), seed=st.integers(0, 10_000))
def test_the_compiled_core_gives_the_python_engines_records(model, arrival, rate, capacity, block_size, chunked,
                                                             budget, max_num_seqs, horizon, fast_decode,
                                                             max_model_len, seed):
    name, gpu, tp = model
    arrival_spec = {"kind": "burst"} if arrival == "burst" else {"kind": arrival, "rate_per_s": rate}
    if arrival == "gamma":
        arrival_spec["cv"] = 3.0
    if budget is not None and budget < max_num_seqs:
        budget = max_num_seqs
    # Small caches preempt; a short max_model_len (or a budget under a whole prompt) rejects some requests.
    spec = spec_for(model=name, gpu=gpu, tp=tp, arrival=arrival_spec, capacity=capacity, block_size=block_size,
                    chunked=chunked, budget=budget, max_num_seqs=max_num_seqs, horizon=horizon,
                    fast_decode=fast_decode, max_model_len=max_model_len, seed=seed)
    python, compiled = both(spec)
    assert python.extras["engine_core"] == "python (run.compiled_core is false)"
    assert compiled.extras["engine_core"] == "compiled"
    assert_identical(python, compiled)


def test_preemptions_rejections_and_a_horizon_all_happen_and_agree():
    # A cache of 1,000 tokens for prompts of ~300: preemption; unchunked prompts over the 256-token budget are
    # rejected; the horizon cuts the run with requests decoding, prefilling and waiting.
    spec = spec_for(capacity=1000, block_size=16, max_model_len=600, chunked=False, budget=256,
                    arrival={"kind": "poisson", "rate_per_s": 40.0}, num_requests=200, horizon=3.0, seed=3)
    python, compiled = both(spec)
    assert compiled.extras["engine_core"] == "compiled"
    assert python.requests["preemptions"].sum() > 0
    assert set(python.requests["status"]) >= {"finished", "unfinished", "rejected"}
    assert_identical(python, compiled)


def test_an_arrival_exactly_at_a_step_end_goes_to_the_python_engine():
    # SimPy orders simultaneous events by when they were scheduled; the core does not repeat that, so on
    # such a tie it hands the run to the Python engine (the result is then the Python engine's, exactly).
    spec = spec_for(lengths={"kind": "fixed", "input_tokens": 100, "output_tokens": 5}, num_requests=2,
                    arrival={"kind": "constant", "rate_per_s": 1.0})
    scenario = validate_scenario(spec)
    workload = make_workload(scenario)
    first = simulate(scenario, workload)
    assert first.extras["engine_core"] == "compiled"
    step_end = float(first.steps["start_s"].iloc[0] + first.steps["duration_s"].iloc[0])
    workload.arrival_s[1] = step_end  # the second request arrives exactly when the first one's prefill ends
    python, compiled = both(spec, workload)
    assert compiled.extras["engine_core"].startswith("python (an arrival at exactly a step's end")
    assert_identical(python, compiled)


@pytest.mark.parametrize(("change", "reason"), [
    ({"kv_cache": {"layout": "contiguous"}}, "ContiguousKVManager"),
    ({"kv_cache": {"enable_prefix_caching": True}}, "prefix caching"),
    ({"hardware": {"num_replicas": 2}}, "several replicas"),
    ({"scheduler": {"batching": "static"}}, "StaticScheduler"),
    ({"model": "mixtral-8x7b", "hardware": {"tensor_parallel": 2}}, "no compiled form"),
    ({"scheduler": {"preemption": {"victim": "fewest_computed_tokens"}}}, "victim policy"),
])
def test_out_of_scope_runs_say_why_the_python_engine_ran(change, reason):
    spec = spec_for(num_requests=10)
    for key, value in change.items():
        if isinstance(value, dict):
            spec.setdefault(key, {}).update(value)
        else:
            spec[key] = value
    result = simulate(validate_scenario(spec))
    assert result.extras["engine_core"].startswith("python (") and reason in result.extras["engine_core"]


def test_the_bench_engine_scenario_runs_compiled_with_the_same_summary():
    # benchmarks/bench_engine.py's scenario (ShareGPT lengths, H100, 80% load), at 3,000 requests.
    spec = spec_for(arrival={"kind": "poisson", "rate_per_s": 18.0}, lengths={"kind": "preset", "name": "sharegpt"},
                    num_requests=3000, max_model_len=4096)
    python, compiled = both(spec)
    assert compiled.extras["engine_core"] == "compiled"
    assert_identical(python, compiled)
