"""The compiled engine core (sim/compiled, issue 15) against the SimPy engine, over random scenarios in its scope.

Identical means identical here: the request records, the step log, the decode runs' per-step records and every
summary key, compared exactly (no tolerance). The core repeats the engine's decisions and prices each step with
the function the cost model's `step_cost` calls (`sim.cost.compiled_pricing.price_parts`). Each example also
checks that the compiled core really ran (`engine_core`), so a silent fall-back to the Python engine cannot pass
for it.
"""

import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import TRACES

from sim.config.files import validate_scenario
from sim.run import make_cost_model, make_workload, simulate

pytest.importorskip("numba")


def both(spec: dict, workload=None, stop_rule=None):
    """(the SimPy engine's result, the compiled core's result) for one scenario and workload; `stop_rule(scenario,
    workload)` makes a fresh stop rule for each run."""
    results = []
    for compiled in (False, True):
        spec["run"]["compiled_core"] = compiled
        scenario = validate_scenario(spec)
        w = workload if workload is not None else make_workload(scenario)
        rule = stop_rule(scenario, w) if stop_rule is not None else None
        results.append(simulate(scenario, w, stop_when=rule))
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
    # The cost model's repr lists its notes: the points priced outside measured tables, the same in both.
    assert python.extras["cost_model"] == compiled.extras["cost_model"]
    assert list(python.summary) == list(compiled.summary)
    for key, want in python.summary.items():
        got = compiled.summary[key]
        if isinstance(want, float) and math.isnan(want):
            assert isinstance(got, float) and math.isnan(got), key
        else:
            assert got == want and type(got) is type(want), (key, want, got)


def spec_for(*, model="llama-3.1-8b", gpu="h100-sxm", tp=1, arrival=None, lengths=None, num_requests=60,
             horizon=None, capacity=None, block_size=16, chunked=False, max_num_seqs=256, budget=None,
             max_model_len=2048, fast_decode=True, seed=0, cost_model=None, replicas=1,
             router="least_outstanding") -> dict:
    return {
        "model": model,
        "hardware": {"gpu": gpu, "tensor_parallel": tp, "num_replicas": replicas, "router": router},
        "workload": {"arrival": arrival or {"kind": "poisson", "rate_per_s": 10.0},
                     "lengths": lengths or {"kind": "lognormal", "input_mean": 300, "input_sigma": 1.0,
                                            "output_mean": 60, "output_sigma": 1.0}},
        "scheduler": {"batching": "continuous", "chunked_prefill": chunked, "max_num_seqs": max_num_seqs,
                      "max_num_batched_tokens": budget, "max_model_len": max_model_len},
        "kv_cache": {"layout": "paged", "capacity_tokens": capacity, "block_size": block_size},
        "run": {"seed": seed, "num_requests": num_requests, "horizon_s": horizon, "fast_decode": fast_decode},
        "cost_model": cost_model or {"kind": "roofline"},
    }


# Cost models with a compiled form: the roofline, and the shipped whole-step profiles (H100: Llama-3.1-8B on one
# GPU, four engines; Llama-3.1-70B on four, whose all-reduces come from the catalog).
WHOLE_STEP_PROFILES = [{"kind": "calibrated", "engine": e} for e in ("fused", "compiled", "unfused", "fused-paged")]
# The roofline with learned efficiencies (sim/cost/learned_kernel.py), the default for a GPU without tables.
LEARNED = {"kind": "roofline", "efficiencies": "learned"}


# SERVESIM_COMPILED_EXAMPLES=2000 for a longer search (benchmarks/RESULTS.md says how many were run).
@settings(max_examples=int(os.environ.get("SERVESIM_COMPILED_EXAMPLES", "150")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from([("llama-3.1-8b", "h100-sxm", 1), ("llama-3.1-70b", "h100-sxm", 4),
                              ("llama-3.1-8b", "l4", 1), ("qwen2.5-7b", "a100-80gb", 2),
                              ("mixtral-8x7b", "h100-sxm", 2), ("deepseek-v2-lite", "a100-80gb", 1)]),
       whole_steps=st.sampled_from([None] + WHOLE_STEP_PROFILES),
       replicas=st.sampled_from([1, 1, 2, 3]),
       router=st.sampled_from(["least_outstanding", "round_robin", "least_loaded", "fewest_waiting",
                               "least_outstanding_kv"]),
       arrival=st.sampled_from(["poisson", "gamma", "constant", "burst"]), rate=st.floats(0.5, 80.0),
       capacity=st.one_of(st.none(), st.integers(300, 8000)), block_size=st.sampled_from([1, 4, 16, 32]),
       chunked=st.booleans(), budget=st.sampled_from([None, 64, 512, 4096]),
       max_num_seqs=st.sampled_from([1, 3, 16, 256]), horizon=st.one_of(st.none(), st.floats(0.05, 30.0)),
       fast_decode=st.booleans(), max_model_len=st.sampled_from([600, 2048]), seed=st.integers(0, 10_000))
def test_the_compiled_core_gives_the_python_engines_records(model, whole_steps, replicas, router, arrival, rate,
                                                             capacity, block_size, chunked, budget, max_num_seqs,
                                                             horizon, fast_decode, max_model_len, seed):
    name, gpu, tp = model
    # A whole-step profile where one is shipped for this model and GPU count (the 70B has only "fused").
    cost_model = None
    if whole_steps is not None and gpu == "h100-sxm" and name.startswith("llama"):
        cost_model = whole_steps if name == "llama-3.1-8b" else {"kind": "calibrated", "engine": "fused"}
    arrival_spec = {"kind": "burst"} if arrival == "burst" else {"kind": arrival, "rate_per_s": rate}
    if arrival == "gamma":
        arrival_spec["cv"] = 3.0
    if budget is not None and budget < max_num_seqs:
        budget = max_num_seqs
    # Small caches preempt; a short max_model_len (or a budget under a whole prompt) rejects some requests.
    spec = spec_for(model=name, gpu=gpu, tp=tp, arrival=arrival_spec, capacity=capacity, block_size=block_size,
                    chunked=chunked, budget=budget, max_num_seqs=max_num_seqs, horizon=horizon,
                    fast_decode=fast_decode, max_model_len=max_model_len, seed=seed, cost_model=cost_model,
                    replicas=replicas, router=router)
    python, compiled = both(spec)
    assert python.extras["engine_core"] == "python (run.compiled_core is false)"
    # Several replicas may see two events at one time (a step end on each, or one and an arrival), whose
    # order SimPy decides: the Python engine then runs the scenario (equal below all the same).
    assert compiled.extras["engine_core"] == "compiled" or (
        replicas > 1 and "two events at one time" in compiled.extras["engine_core"])
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


def compiled_run_of_300(**kwargs):
    """The buffer tests' run (300 requests, compiled), checked against the SimPy engine's records."""
    spec = spec_for(num_requests=300, arrival={"kind": "poisson", "rate_per_s": 30.0}, max_model_len=600, seed=5)
    spec["run"]["compiled_core"] = True
    scenario = validate_scenario(spec)
    compiled = simulate(scenario, make_workload(scenario), **kwargs)
    assert compiled.extras["engine_core"] == "compiled"
    python, _ = both(spec)
    assert_identical(python, compiled)
    return compiled


def test_output_buffers_that_grow_and_frequent_returns_keep_the_records(monkeypatch):
    # The core's row and decode-run buffers start at 4 rows (and 4 x 4 + max_model_len + 2 run steps) and double
    # as the run fills them; it returns to its caller every 3 rows (a progress report) and is called again.
    from sim.compiled import engine as compiled_engine
    monkeypatch.setattr(compiled_engine, "_MAX_START_ROWS", 4)
    monkeypatch.setattr(compiled_engine, "_ROWS_PER_CALL", 3)
    reports = []
    grown = compiled_run_of_300(progress=lambda now, done: reports.append(done))
    assert len(grown.steps) > 64 and len(grown.decode_runs.step_duration_s) > 4 * 4 + 600 + 2  # grew several times
    assert len(reports) >= len(grown.steps) // 3  # a report at every return


def test_a_start_the_machine_will_not_map_is_halved_and_the_records_are_kept(monkeypatch):
    # While the core maps its start, the machine refuses any mapping over 64 kB (as a strict overcommit policy
    # refuses a large one): the start is halved until it maps, down to its floor; the buffers then double as the
    # run fills them, and the run's records are the SimPy engine's.
    from sim import machine
    from sim.compiled import engine as compiled_engine
    starting, started = [False], []

    def small_while_starting(shape, dtype):
        if starting[0] and np.prod(shape) * np.dtype(dtype).itemsize > 1 << 16:
            raise MemoryError(f"Unable to allocate for an array with shape {shape}")
        return machine.plain_pages(shape, dtype)

    def start(rows, *args):
        starting[0] = True
        try:
            buffers = start_buffers(rows, *args)
        finally:
            starting[0] = False
        started.append((rows, buffers[0].shape[-1]))
        return buffers
    start_buffers = compiled_engine._start_buffers
    monkeypatch.setattr(compiled_engine, "plain_pages", small_while_starting)
    monkeypatch.setattr(compiled_engine, "_start_buffers", start)
    monkeypatch.setattr(compiled_engine, "_MIN_START_ROWS", 64)
    halved = compiled_run_of_300()
    asked, mapped = started[0]  # (`both` runs the core again to compare)
    assert asked == 1024 + 4 * 300 and mapped < asked and len(halved.steps) > mapped  # started smaller, then grew
    # At the floor the machine's refusal stands (here the runs' margin alone is over 64 kB): one MemoryError, as the
    # command line reports it.
    starting[0] = True
    with pytest.raises(MemoryError):
        start_buffers(4096, 19, 4, 1 << 20)


def test_where_the_machine_counts_what_is_mapped_the_start_takes_a_quarter_of_what_is_left(monkeypatch):
    # `ulimit -v` or a strict overcommit policy leaves the process 4 x 500 step rows' worth of mapping: the start
    # takes 500 rows (a quarter), the buffers grow as the run fills them, and the records are the SimPy engine's.
    from sim.compiled import engine as compiled_engine
    from sim.compiled import kernel
    int_rows, float_rows = len(kernel.INT_COLUMNS) + 1, len(kernel.FLOAT_COLUMNS)
    monkeypatch.setattr(compiled_engine, "mappable_bytes", lambda: math.inf)  # Linux's default: nothing counted
    assert compiled_engine._start_rows(300, int_rows, float_rows) == 1024 + 4 * 300
    from sim.workload.base import MAX_NUM_REQUESTS  # the largest run a scenario may ask for starts at its size
    assert compiled_engine._start_rows(MAX_NUM_REQUESTS, int_rows, float_rows) == 1024 + 4 * MAX_NUM_REQUESTS
    row_bytes = 8 * (int_rows + float_rows + 4 * 4)  # each row's int and float columns, its 4 run steps' 4 columns
    monkeypatch.setattr(compiled_engine, "mappable_bytes", lambda: 4 * 500 * row_bytes)
    monkeypatch.setattr(compiled_engine, "_MIN_START_ROWS", 64)
    assert compiled_engine._start_rows(300, int_rows, float_rows) == 500
    limited = compiled_run_of_300()
    assert len(limited.steps) > 500  # grew from there
    monkeypatch.setattr(compiled_engine, "mappable_bytes", lambda: 0.0)  # nothing left: the floor, which may fail
    assert compiled_engine._start_rows(300, int_rows, float_rows) == 64


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
    assert compiled.extras["engine_core"].startswith("python (two events at one time")
    assert_identical(python, compiled)


@pytest.mark.parametrize(("change", "reason"), [
    ({"kv_cache": {"layout": "contiguous"}}, "ContiguousKVManager"),
    ({"hardware": {"num_replicas": 2, "router": "random"}}, "RandomRouter"),
    ({"scheduler": {"batching": "static"}}, "StaticScheduler"),
    ({"cost_model": {"kind": "calibrated", "engine": "ops"}}, "CalibratedCostModel has no compiled form"),
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


def test_the_vidur_side_by_side_scenario_runs_compiled_with_its_whole_step_profile():
    # benchmarks/bench_vidur.py's setting (H100 whole steps, no chunked prefill, 128 sequences, 4,096 tokens a
    # step) on an Azure-like bursty trace with a tight cache: preemptions happen, and the records are the same.
    spec = spec_for(arrival={"kind": "gamma", "rate_per_s": 40.0, "cv": 3.0},
                    lengths={"kind": "preset", "name": "sharegpt"}, num_requests=1500, max_model_len=4096,
                    max_num_seqs=128, budget=4096, capacity=20_000, cost_model={"kind": "calibrated"})
    python, compiled = both(spec)
    assert compiled.extras["engine_core"] == "compiled"
    assert type(make_cost_model(validate_scenario(spec))).__name__ == "StepProfileCostModel"
    assert python.requests["preemptions"].sum() > 0
    assert_identical(python, compiled)


def slo_miss_rule(scenario, workload):
    from sim.tools.early_verdict import SLOMissRule
    return SLOMissRule(scenario.slo, workload.num_requests, check_every_s=0.25)


@settings(max_examples=int(os.environ.get("SERVESIM_COMPILED_EXAMPLES", "150")) // 2, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(rate=st.floats(2.0, 120.0), cost=st.sampled_from(["roofline", "measured", "steps"]),
       replicas=st.sampled_from([1, 2, 3]),
       chunked=st.booleans(), fast_decode=st.booleans(), capacity=st.one_of(st.none(), st.integers(2000, 20_000)),
       ttft_s=st.sampled_from([0.05, 0.3, 2.0]), tpot_s=st.sampled_from([None, 0.02, 0.1]),
       e2e_s=st.sampled_from([None, 5.0]), goodput=st.sampled_from([None, 0.9]),
       horizon=st.one_of(st.none(), st.floats(1.0, 20.0)), seed=st.integers(0, 10_000))
def test_the_planners_stop_rule_stops_the_compiled_core_where_it_stops_the_python_engine(
        rate, cost, replicas, chunked, fast_decode, capacity, ttft_s, tpot_s, e2e_s, goodput, horizon, seed):
    cost_model = {"roofline": None, "measured": {"kind": "measured"}, "steps": {"kind": "calibrated"}}[cost]
    spec = spec_for(arrival={"kind": "gamma", "rate_per_s": rate * replicas, "cv": 2.0}, num_requests=300, chunked=chunked,
                    budget=2048 if chunked else None, fast_decode=fast_decode, capacity=capacity, horizon=horizon,
                    seed=seed, cost_model=cost_model, replicas=replicas)
    spec["slo"] = {"ttft_s": ttft_s, "tpot_s": tpot_s, "e2e_s": e2e_s, "percentile": 90,
                   "min_goodput_fraction": goodput}
    python, compiled = both(spec, stop_rule=slo_miss_rule)
    assert python.extras["engine_core"] == "python (run.compiled_core is false)"
    if compiled.extras["engine_core"] != "compiled":  # only a tie
        assert "two events at one time" in compiled.extras["engine_core"]
    assert_identical(python, compiled)


def test_a_stopped_run_stops_at_the_same_step_in_both_engines():
    # Far over capacity with a tight TTFT: the verdict is certain within seconds of simulated time.
    spec = spec_for(arrival={"kind": "poisson", "rate_per_s": 200.0}, num_requests=3000, chunked=True, budget=2048,
                    lengths={"kind": "preset", "name": "sharegpt"}, max_model_len=4096, cost_model={"kind": "measured"})
    spec["slo"] = {"ttft_s": 0.5, "percentile": 99}
    python, compiled = both(spec, stop_rule=slo_miss_rule)
    assert compiled.extras["engine_core"] == "compiled"
    assert python.summary["stopped_early_s"] is not None and python.summary["slo_met"] is False
    assert (python.requests["status"] == "unfinished").any()
    assert_identical(python, compiled)


def test_points_outside_the_measured_tables_run_compiled_and_are_noted_as_in_the_python_engine():
    # One-token prompts (uniform lengths from 1) put their attention below the H100 tables.
    spec = spec_for(arrival={"kind": "poisson", "rate_per_s": 30.0}, num_requests=400, chunked=True, budget=2048,
                    cost_model={"kind": "measured"}, replicas=2)
    python, compiled = both(spec)
    assert compiled.extras["engine_core"] == "compiled"
    assert "outside measured" in compiled.extras["cost_model"]
    assert_identical(python, compiled)


def test_a_run_handed_back_to_the_python_engine_gets_its_stop_rule_as_it_was(monkeypatch):
    # A note log with no room: the first point outside the tables (a one-token prompt's attention), after the rule
    # was asked a few times, hands the run back. The Python engine reruns the scenario from the start, with the
    # rule's next check and count as they were.
    from sim.cost import measured_kernel
    monkeypatch.setattr(measured_kernel, "NOTE_CAP", 0)
    spec = spec_for(arrival={"kind": "poisson", "rate_per_s": 200.0}, num_requests=3000, chunked=True, budget=2048,
                    cost_model={"kind": "measured"})
    spec["slo"] = {"ttft_s": 0.5, "percentile": 99}
    python, compiled = both(spec, stop_rule=slo_miss_rule)
    assert "note log" in compiled.extras["engine_core"]
    assert python.summary["stopped_early_s"] is not None
    assert_identical(python, compiled)


DEEPSEEK_R1 = {"hf_config": str(Path(__file__).parents[2] / "sim" / "model" / "configs" / "deepseek-r1.json")}


@pytest.mark.parametrize(("model", "gpu", "tp"), [("mixtral-8x7b", "h100-sxm", 2), ("deepseek-v2-lite", "h100-sxm", 1),
                                                  (DEEPSEEK_R1, "h200", 8)])
def test_mixtures_of_experts_and_mla_run_compiled_with_measured_kernels(model, gpu, tp):
    # Priced from the fused-MoE table (Mixtral), the device roofline (DeepSeek-V2-Lite's MLA attention) or vLLM's
    # whole MLA modules (DeepSeek-R1's), each in the one definition.
    spec = spec_for(model=model, gpu=gpu, tp=tp, arrival={"kind": "poisson", "rate_per_s": 30.0}, num_requests=300,
                    chunked=True, budget=2048, capacity=40_000, cost_model={"kind": "measured"})
    python, compiled = both(spec)
    assert compiled.extras["engine_core"] == "compiled"
    assert_identical(python, compiled)


@pytest.mark.parametrize(("model", "tp", "ep", "kind"), [
    ("mixtral-8x7b", 8, 8, "measured"), ("mixtral-8x7b", 8, 8, "roofline"), ("deepseek-v2-lite", 4, 2, "measured")])
def test_expert_parallel_runs_compiled_with_the_same_records(model, tp, ep, kind):
    # One expert per GPU (Mixtral at EP 8: routed, not dense) and the measured expert-parallel fused-MoE rows
    spec = spec_for(model=model, tp=tp, arrival={"kind": "poisson", "rate_per_s": 30.0}, num_requests=300,
                    chunked=True, budget=2048, capacity=40_000, cost_model={"kind": kind})
    spec["hardware"]["expert_parallel"] = ep
    python, compiled = both(spec)
    assert compiled.extras["engine_core"] == "compiled"
    assert_identical(python, compiled)


def test_the_measured_model_without_tables_runs_compiled_as_the_roofline_it_is():
    # No measured tables for the L4: `kind: measured` falls back to the roofline (its repr says why), which the
    # compiled core prices as the roofline.
    spec = spec_for(gpu="l4", num_requests=200, cost_model={"kind": "measured"})
    python, compiled = both(spec)
    assert "measured kernels unavailable" in compiled.extras["cost_model"]
    assert compiled.extras["engine_core"] == "compiled"
    assert_identical(python, compiled)


@pytest.mark.parametrize("cost_model", [
    {"kind": "roofline"},  # no engine overhead: the reads alone
    {"kind": "calibrated", "engine": "fused", "overhead": {"engine": "vllm-eager", "overlap": True}},
    {"kind": "measured", "overhead": {"engine": "vllm-cudagraph"}},
])
def test_weights_read_from_host_memory_run_compiled_with_the_same_records(cost_model):
    """`kv_cache.weights_offload_bytes`: the reads every step pays are the overhead pack's, in both engines."""
    spec = spec_for(arrival={"kind": "poisson", "rate_per_s": 20.0}, num_requests=150, chunked=True, budget=512,
                    cost_model=cost_model)
    spec["kv_cache"]["weights_offload_bytes"] = 3 << 30
    python, compiled = both(spec)
    assert compiled.extras["engine_core"] == "compiled"
    assert "weights read from host memory" in compiled.extras["cost_model"]
    assert_identical(python, compiled)


def test_a_stop_rule_the_core_cannot_ask_runs_in_the_python_engine():
    spec = spec_for(num_requests=20)
    result = simulate(validate_scenario(spec), stop_when=lambda sim: False)
    assert result.extras["engine_core"] == "python (a stop rule without compiled_params)"


@pytest.mark.parametrize("router", ["least_outstanding", "round_robin"])
def test_several_replicas_run_compiled_and_agree(router):
    # The property above lets a run with several replicas go to SimPy on a tie; this one must run compiled.
    spec = spec_for(arrival={"kind": "poisson", "rate_per_s": 60.0}, lengths={"kind": "preset", "name": "sharegpt"},
                    num_requests=800, max_model_len=4096, capacity=30_000, replicas=3, router=router)
    python, compiled = both(spec)
    assert compiled.extras["engine_core"] == "compiled"
    assert set(compiled.steps["replica"]) == {0, 1, 2} and set(compiled.requests["replica"]) == {0, 1, 2}
    assert python.requests["preemptions"].sum() > 0
    assert_identical(python, compiled)


# The engines' scheduling rules (sim/sched/rules.py) and the engine overhead's CPU terms, in both engines.
@settings(max_examples=int(os.environ.get("SERVESIM_COMPILED_EXAMPLES", "150")) // 2, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(mixed=st.booleans(), group_steps=st.sampled_from([1, 1, 3, 8]), whole=st.booleans(),
       graph_sizes=st.sampled_from([None, [1, 2, 4, 8, 16, 32], [3, 7]]),
       ratio=st.sampled_from([None, {"init": 0.7, "min": 0.098, "decay_steps": 600}, {"init": 1.0, "min": 0.5,
                                                                                       "decay_steps": 5}]),
       overhead=st.sampled_from([None, {"engine": "vllm-cudagraph"}, {"engine": "vllm-eager", "per_seq_s": 3e-5},
                                 {"engine": "vllm-cudagraph", "per_step_s": 4e-3, "overlap": True},
                                 {"engine": "vllm-cudagraph", "launch_per_layer_s": 2e-4, "graph_max_seqs": 8},
                                 {"engine": "vllm-eager", "graph_max_seqs": 2, "graph_prefill": True}]),
       whole_steps=st.sampled_from([None, LEARNED] + WHOLE_STEP_PROFILES[:1]), replicas=st.sampled_from([1, 2]),
       rate=st.floats(1.0, 60.0), capacity=st.one_of(st.none(), st.integers(300, 8000)),
       block_size=st.sampled_from([1, 4, 16]), chunked=st.booleans(), budget=st.sampled_from([None, 64, 512, 4096]),
       max_num_seqs=st.sampled_from([3, 16, 256]), horizon=st.one_of(st.none(), st.floats(0.05, 30.0)),
       fast_decode=st.booleans(), seed=st.integers(0, 10_000), context=st.booleans(), first_chunk=st.booleans(),
       context_limit=st.sampled_from([None, None, 300, 1500]), chunk_cap=st.sampled_from([None, None, 48, 300]),
       cap_when_alone=st.booleans(), fair_share=st.booleans())
# Found by this property (11-28): under the context pass a request joins the decodes at the end of a step that decoded
# nothing and so left the clock where it was; preempted before its first decode, the compiled core gave back one
# block more than it held (its first decode's block counted as taken).
@example(mixed=False, group_steps=1, whole=False, graph_sizes=None, ratio=None, overhead=None, whole_steps=None,
         replicas=1, rate=4.0, capacity=362, block_size=1, chunked=False, budget=None, max_num_seqs=3, horizon=None,
         fast_decode=False, seed=14, context=True, first_chunk=False, context_limit=None, chunk_cap=None,
         cap_when_alone=True, fair_share=False)
# vLLM V1's first-chunk admission (to v0.18), under KV pressure: prompts admitted, then preempted by their own chunks.
@example(mixed=True, group_steps=1, whole=False, graph_sizes=None, ratio=None, overhead=None, whole_steps=None,
         replicas=1, rate=40.0, capacity=400, block_size=4, chunked=True, budget=64, max_num_seqs=16, horizon=None,
         fast_decode=True, seed=3, context=False, first_chunk=True, context_limit=None, chunk_cap=None,
         cap_when_alone=True, fair_share=False)
# TurboMind 0.12+'s context limit, below the prompts' lengths, under KV pressure and preemptions
@example(mixed=True, group_steps=1, whole=False, graph_sizes=None, ratio=None, overhead=None, whole_steps=None,
         replicas=1, rate=40.0, capacity=1200, block_size=4, chunked=True, budget=512, max_num_seqs=16, horizon=None,
         fast_decode=True, seed=5, context=False, first_chunk=False, context_limit=300, chunk_cap=None,
         cap_when_alone=True, fair_share=False)
# vLLM V1's --long-prefill-token-threshold, below the budget, with a lone request (0.31+: uncapped) at times
@example(mixed=True, group_steps=1, whole=False, graph_sizes=None, ratio=None, overhead=None, whole_steps=None,
         replicas=1, rate=2.0, capacity=1200, block_size=4, chunked=True, budget=512, max_num_seqs=16, horizon=None,
         fast_decode=True, seed=5, context=False, first_chunk=False, context_limit=None, chunk_cap=48,
         cap_when_alone=False, fair_share=True)
def test_every_scheduling_rule_and_the_engine_overhead_run_compiled_with_the_same_records(
        mixed, group_steps, whole, graph_sizes, ratio, overhead, whole_steps, replicas, rate, capacity, block_size,
        chunked, budget, max_num_seqs, horizon, fast_decode, seed, context, first_chunk, context_limit, chunk_cap,
        cap_when_alone, fair_share):
    if context:  # TurboMind's context pass: unchunked, its decode pass mixed (sim/config/schema.py)
        mixed, chunked = True, False
    if budget is not None and budget < max_num_seqs:  # no engine: vLLM's bound (sim/config/deployment.py)
        budget = max_num_seqs
    first_chunk = first_chunk and chunked  # unchunked, a prompt is admitted whole (sim/config/schema.py)
    cost_model = dict(whole_steps or {"kind": "roofline"})
    if overhead is not None:
        cost_model["overhead"] = overhead
    spec = spec_for(arrival={"kind": "poisson", "rate_per_s": rate}, capacity=capacity, block_size=block_size,
                    chunked=chunked, budget=budget, max_num_seqs=max_num_seqs, horizon=horizon,
                    fast_decode=fast_decode, seed=seed, cost_model=cost_model, replicas=replicas)
    spec["scheduler"].update(mixed_batches=mixed, decode_steps_per_schedule=group_steps,
                             kv_reservation="whole_output" if whole else "on_demand",
                             cuda_graph_batch_sizes=graph_sizes, new_token_ratio=ratio, context_pass=context,
                             admission="first_chunk" if first_chunk else "whole_prompt",
                             prefill_context_tokens=context_limit,
                             max_prefill_chunk_tokens=chunk_cap if chunked else None,  # (it chunks prompts)
                             prefill_chunk_cap_when_alone=cap_when_alone, prefill_chunk_cap_fair_share=fair_share)
    python, compiled = both(spec)
    assert compiled.extras["engine_core"] == "compiled" or (
        replicas > 1 and "two events at one time" in compiled.extras["engine_core"])
    assert_identical(python, compiled)


# Automatic prefix caching (sim/compiled/prefix_cache.py): shared system prompts and multi-turn conversations in
# caches small enough to evict cached blocks and to preempt requests (which then find their own blocks again),
# under the scheduling rules, several replicas (a cache each) and decode runs; and a workload without content ids
# (nothing cached, admissions still counted).
PREFIXES = st.one_of(
    st.none(),
    st.builds(lambda tokens, fraction, prompts: {"kind": "shared_system_prompt", "tokens": tokens,
                                                 "fraction": fraction, "num_prompts": prompts},
              st.integers(1, 700), st.floats(0.1, 1.0), st.integers(1, 4)),
    st.builds(lambda turns, think: {"kind": "multi_turn", "turns_mean": turns, "think_time_s": think},
              st.floats(1.0, 4.0), st.floats(0.0, 3.0)))


@pytest.mark.parametrize("mixed", [False, True])
def test_sglangs_decode_batches_beyond_its_chunk_run_compiled_with_the_same_records(mixed):
    # SGLang's running requests may exceed its chunk (sim/config/engines/base.py decodes_within_budget): its decode
    # batches (apart) hold every running request; mixed, a prompt joins only where the chunk has room beside the
    # running decodes (SGLang's PrefillAdder), so they never outgrow it
    spec = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
            "engine": {"name": "sglang", "version": "0.5.3.post3", "chunked_prefill_size": 256,
                       "max_running_requests": 1024, "enable_mixed_chunk": mixed},
            "workload": {"arrival": {"kind": "burst"}, "lengths": {"kind": "lognormal", "input_mean": 40,
                                                                   "input_sigma": 0.5, "output_mean": 50,
                                                                   "output_sigma": 0.5}},
            "run": {"num_requests": 700, "seed": 1}}
    python, compiled = both(spec)
    assert compiled.extras["engine_core"] == "compiled"
    assert (python.steps["num_decode_seqs"].max() > 256) is not mixed
    assert_identical(python, compiled)


def both_with_prefix_stats(spec: dict):
    """`both(spec)`, and each run's replicas' whole prefix-cache statistics (`PrefixCacheStats`, which the summary
    reports only in part: `reused_blocks` is not in it)."""
    import sim.run
    seen, original = [], sim.run.replica_counters

    def counters(*args):
        out = original(*args)
        seen.append(out.prefix_cache)
        return out
    sim.run.replica_counters = counters
    try:
        results = both(spec)
    finally:
        sim.run.replica_counters = original
    per_run = len(seen) // 2
    return results, (seen[:per_run], seen[per_run:])


@settings(max_examples=int(os.environ.get("SERVESIM_COMPILED_EXAMPLES", "150")) // 2, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(prefix=PREFIXES, capacity=st.one_of(st.none(), st.integers(300, 8000)),
       block_size=st.sampled_from([1, 4, 16, 32]), chunked=st.booleans(), budget=st.sampled_from([None, 64, 512, 4096]),
       max_num_seqs=st.sampled_from([3, 16, 256]),
       mixed=st.booleans(), whole=st.booleans(), context=st.booleans(), first_chunk=st.booleans(),
       ratio=st.sampled_from([None, {"init": 0.7, "min": 0.098, "decay_steps": 600}]),
       whole_steps=st.sampled_from([None, LEARNED] + WHOLE_STEP_PROFILES[:1]), replicas=st.sampled_from([1, 1, 2, 3]),
       router=st.sampled_from(["least_outstanding", "round_robin"]), rate=st.floats(1.0, 60.0),
       horizon=st.one_of(st.none(), st.floats(0.05, 30.0)), fast_decode=st.booleans(), seed=st.integers(0, 10_000),
       context_limit=st.sampled_from([None, None, 300, 1500]), chunk_cap=st.sampled_from([None, None, 48, 300]))
def test_prefix_caching_runs_compiled_with_the_same_records(prefix, capacity, block_size, chunked, budget,
                                                             max_num_seqs, mixed, whole, context, first_chunk, ratio,
                                                             whole_steps, replicas, router, rate, horizon, fast_decode,
                                                             seed, context_limit, chunk_cap):
    if context:  # TurboMind's context pass: unchunked, its decode pass mixed (sim/config/schema.py)
        mixed, chunked = True, False
    if budget is not None and budget < max_num_seqs:  # no engine: vLLM's bound (sim/config/deployment.py)
        budget = max_num_seqs
    first_chunk = first_chunk and chunked
    spec = spec_for(arrival={"kind": "poisson", "rate_per_s": rate}, capacity=capacity, block_size=block_size,
                    chunked=chunked, budget=budget, max_num_seqs=max_num_seqs, horizon=horizon,
                    fast_decode=fast_decode, seed=seed, cost_model=whole_steps, replicas=replicas, router=router,
                    num_requests=80)
    if prefix is not None:
        spec["workload"]["prefix"] = prefix
    spec["kv_cache"]["enable_prefix_caching"] = True
    spec["scheduler"].update(mixed_batches=mixed, kv_reservation="whole_output" if whole else "on_demand",
                             new_token_ratio=ratio, context_pass=context,
                             admission="first_chunk" if first_chunk else "whole_prompt",
                             prefill_context_tokens=context_limit,
                             max_prefill_chunk_tokens=chunk_cap if chunked else None)
    (python, compiled), stats = both_with_prefix_stats(spec)
    assert compiled.extras["engine_core"] == "compiled" or (
        replicas > 1 and "two events at one time" in compiled.extras["engine_core"])
    assert_identical(python, compiled)
    assert stats[0] == stats[1]


def test_prefix_caching_evicts_shares_and_finds_preempted_prompts_alike_in_both_engines():
    # Three 700-token system prompts in a 3,000-token cache: hits, evictions, shared blocks and preemptions all
    # happen, and every count agrees (the summary's prefix-cache keys among them).
    spec = spec_for(capacity=3000, block_size=16, max_model_len=4096, chunked=True, budget=512,
                    arrival={"kind": "poisson", "rate_per_s": 20.0}, num_requests=300, seed=3)
    spec["workload"]["prefix"] = {"kind": "shared_system_prompt", "tokens": 700, "fraction": 0.7, "num_prompts": 3}
    spec["kv_cache"]["enable_prefix_caching"] = True
    (python, compiled), stats = both_with_prefix_stats(spec)
    assert compiled.extras["engine_core"] == "compiled"
    assert stats[0] == stats[1] and stats[0][0].reused_blocks > stats[0][0].hit_blocks > 0
    s = python.summary
    assert s["prefix_cache_hit_rate_tokens"] > 0.3 and s["prefix_cache_evictions"] > 0
    assert python.requests["preemptions"].sum() > 0 and python.steps["kv_shared_slots"].max() > 0
    assert_identical(python, compiled)


def test_prefix_caching_on_prompts_without_content_ids_runs_compiled_and_caches_nothing():
    # ShareGPT-like prompts carry no content ids: no block is ever keyed (the core once read past its arrays here).
    spec = spec_for(capacity=3000, chunked=True, budget=512, arrival={"kind": "poisson", "rate_per_s": 20.0},
                    num_requests=200, seed=1)
    spec["kv_cache"]["enable_prefix_caching"] = True
    (python, compiled), stats = both_with_prefix_stats(spec)
    assert compiled.extras["engine_core"] == "compiled"
    assert stats[0] == stats[1] and stats[0][0].num_queries >= 200 and stats[0][0].hit_blocks == 0
    assert_identical(python, compiled)


def test_mooncake_hash_ids_run_compiled_with_the_same_records():
    # Content ids of 512 tokens (Mooncake's hash_ids) in 16-token blocks: a unit that is a multiple of the block.
    path = TRACES / "mooncake_conversation.jsonl"
    if not path.exists():
        pytest.skip(f"{path} not present")
    spec = spec_for(arrival={"kind": "trace", "path": str(path)}, max_model_len=131072, num_requests=300,
                    capacity=400_000, chunked=True, budget=8192)
    spec["workload"].pop("lengths")
    spec["kv_cache"]["enable_prefix_caching"] = True
    python, compiled = both(spec)
    assert compiled.extras["engine_core"] == "compiled"
    assert python.summary["prefix_cache_hit_rate_tokens"] > 0
    assert_identical(python, compiled)


# Step-time draws (issue 31: bands): a perturbed run scales each priced step by its draw (sim/cost/draws.py), keyed
# on (seed, replica, the replica's step count); both engines count steps alike, a decode run's every step
# included, so the perturbed records must be identical too, and differ from the unperturbed run's.
@settings(max_examples=int(os.environ.get("SERVESIM_COMPILED_EXAMPLES", "150")) // 3, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(whole_steps=st.sampled_from([None] + WHOLE_STEP_PROFILES), replicas=st.sampled_from([1, 2, 3]),
       router=st.sampled_from(["least_outstanding", "round_robin"]), rate=st.floats(0.5, 80.0),
       capacity=st.one_of(st.none(), st.integers(300, 8000)), chunked=st.booleans(),
       horizon=st.one_of(st.none(), st.floats(0.05, 30.0)), fast_decode=st.booleans(),
       seed=st.integers(0, 10_000), draw_seed=st.integers(0, 2**32 - 1),
       bias_sigma=st.sampled_from([0.0, 0.05, 0.3]), sigma_prefill=st.sampled_from([0.0, 0.02, 0.2]),
       sigma_decode=st.sampled_from([0.0, 0.02, 0.2]))
def test_perturbed_runs_are_identical_in_both_engines(whole_steps, replicas, router, rate, capacity, chunked, horizon,
                                                      fast_decode, seed, draw_seed, bias_sigma, sigma_prefill,
                                                      sigma_decode):
    from sim.cost.draws import draw_pack
    spec = spec_for(arrival={"kind": "poisson", "rate_per_s": rate}, capacity=capacity, chunked=chunked,
                    horizon=horizon, fast_decode=fast_decode, seed=seed, cost_model=whole_steps, replicas=replicas,
                    router=router, max_model_len=600)
    draws = draw_pack(draw_seed, bias_sigma, sigma_prefill, sigma_decode)
    results = []
    for compiled in (False, True):
        spec["run"]["compiled_core"] = compiled
        scenario = validate_scenario(spec)
        results.append(simulate(scenario, make_workload(scenario), step_draws=draws))
    python, compiled = results
    assert compiled.extras["engine_core"] == "compiled" or (
        replicas > 1 and "two events at one time" in compiled.extras["engine_core"])
    assert_identical(python, compiled)
    unperturbed = simulate(validate_scenario(spec))
    if len(unperturbed.steps) and (bias_sigma or sigma_prefill):  # (the first step computes a prompt)
        assert not np.array_equal(unperturbed.steps["duration_s"].to_numpy()[:1],
                                  compiled.steps["duration_s"].to_numpy()[:1])


# The learned roofline (sim/cost/learned_kernel.py) in both engines: GPUs without measured tables (the L4, the A10G:
# PCIe all-reduces learned on the L40S), NVLink GPUs, a mixture of experts and MLA, with and without the engine's
# CPU terms (the default cost model's composition for such GPUs, sim/config/cost_choice.py).
@settings(max_examples=int(os.environ.get("SERVESIM_COMPILED_EXAMPLES", "150")) // 3, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from([("llama-3.1-8b", "l4", 1), ("llama-3.1-8b", "l4", 2), ("qwen2.5-7b", "a10g", 1),
                              ("llama-3.1-70b", "h100-sxm", 4), ("mixtral-8x7b", "l40s", 4),
                              ("deepseek-v2-lite", "a100-80gb", 1)]),
       overhead=st.sampled_from([None, {"engine": "vllm-cudagraph"}]), replicas=st.sampled_from([1, 2]),
       rate=st.floats(0.5, 60.0), capacity=st.one_of(st.none(), st.integers(300, 8000)), chunked=st.booleans(),
       budget=st.sampled_from([None, 64, 512, 4096]), max_num_seqs=st.sampled_from([3, 16, 256]),
       horizon=st.one_of(st.none(), st.floats(0.05, 30.0)), fast_decode=st.booleans(), seed=st.integers(0, 10_000))
def test_the_learned_roofline_runs_compiled_with_the_same_records(model, overhead, replicas, rate, capacity, chunked,
                                                                   budget, max_num_seqs, horizon, fast_decode, seed):
    name, gpu, tp = model
    if budget is not None and budget < max_num_seqs:
        budget = max_num_seqs
    cost_model = dict(LEARNED, **({"overhead": overhead} if overhead is not None else {}))
    spec = spec_for(model=name, gpu=gpu, tp=tp, arrival={"kind": "poisson", "rate_per_s": rate}, capacity=capacity,
                    chunked=chunked, budget=budget, max_num_seqs=max_num_seqs, horizon=horizon,
                    fast_decode=fast_decode, seed=seed, cost_model=cost_model, replicas=replicas)
    python, compiled = both(spec)
    assert "LearnedRooflineCostModel" in compiled.extras["cost_model"]
    assert compiled.extras["engine_core"] == "compiled" or (
        replicas > 1 and "two events at one time" in compiled.extras["engine_core"])
    assert_identical(python, compiled)


# A lockstep group's ranks (sim/core/lockstep.py: vLLM 0.8.3-0.13's data-parallel ranks) step together in the core's
# lockstep mode (`kernel._group_event`): every rank's step priced padded to the busiest rank's tokens, dummy forwards
# on idle ranks until the wave's idle check, each router, the scheduling rules and CUDA-graph padding, a stop rule,
# step-time draws keyed on the group's step count, and prefix caching: the same records, summary counts included.
@settings(max_examples=int(os.environ.get("SERVESIM_COMPILED_EXAMPLES", "150")) // 2, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(ranks=st.sampled_from([1, 2, 3, 4]), router=st.sampled_from(["least_loaded", "fewest_waiting",
                                                                    "least_outstanding", "round_robin",
                                                                    "least_outstanding_kv"]),
       pad=st.booleans(), idle_check=st.sampled_from([1, 3, 32]),
       cost=st.sampled_from(["roofline", "measured", "steps", "learned", "overhead"]),
       graph_sizes=st.sampled_from([None, [1, 2, 4, 8, 16, 32], [3, 7]]), mixed=st.booleans(),
       group_steps=st.sampled_from([1, 1, 4]), rate=st.floats(1.0, 120.0),
       lengths=st.sampled_from(["lognormal", "sharegpt"]), capacity=st.one_of(st.none(), st.integers(600, 8000)),
       chunked=st.booleans(), budget=st.sampled_from([None, 64, 512, 4096]), max_num_seqs=st.sampled_from([3, 16, 256]),
       horizon=st.one_of(st.none(), st.floats(0.05, 30.0)), slo=st.sampled_from([None, 0.05, 0.5]),
       draws=st.sampled_from([None, (7, 0.05, 0.2, 0.02)]), prefix=st.booleans(), seed=st.integers(0, 10_000))
# Found 12-06: a request finished inside a group of decode steps, not yet returned, is in flight to the SimPy engine's
# stop rule (`running_requests`), and the core's rule skipped its returning list, so the two stopped apart.
@example(ranks=4, router="round_robin", pad=False, idle_check=1, cost="roofline", graph_sizes=None, mixed=False,
         group_steps=4, rate=83.0, lengths="lognormal", capacity=4688, chunked=True, budget=64, max_num_seqs=256,
         horizon=None, slo=0.05, draws=(7, 0.05, 0.2, 0.02), prefix=True, seed=0)
def test_lockstep_ranks_run_compiled_with_the_same_records(ranks, router, pad, idle_check, cost, graph_sizes, mixed,
                                                           group_steps, rate, lengths, capacity, chunked, budget,
                                                           max_num_seqs, horizon, slo, draws, prefix, seed):
    from sim.cost.draws import draw_pack
    if budget is not None and budget < max_num_seqs:
        budget = max_num_seqs
    cost_model = {"roofline": None, "measured": {"kind": "measured"}, "steps": {"kind": "calibrated"},
                  "learned": LEARNED, "overhead": {"kind": "measured", "overhead": {"engine": "vllm-cudagraph"}}}[cost]
    spec = spec_for(arrival={"kind": "poisson", "rate_per_s": rate}, capacity=capacity, chunked=chunked,
                    budget=budget, max_num_seqs=max_num_seqs, horizon=horizon, seed=seed, cost_model=cost_model,
                    replicas=ranks, router=router, num_requests=120, max_model_len=4096,
                    lengths={"kind": "preset", "name": "sharegpt"} if lengths == "sharegpt" else None)
    spec["hardware"]["lockstep"] = {"pad_tokens": pad, "idle_check_steps": idle_check}
    spec["scheduler"].update(mixed_batches=mixed, decode_steps_per_schedule=group_steps,
                             cuda_graph_batch_sizes=graph_sizes)
    if prefix:
        spec["workload"]["prefix"] = {"kind": "shared_system_prompt", "tokens": 300, "fraction": 0.7, "num_prompts": 2}
        spec["kv_cache"]["enable_prefix_caching"] = True
    if slo is not None:
        spec["slo"] = {"ttft_s": slo, "percentile": 90}
    pack = draw_pack(*draws) if draws is not None else None
    results = []
    for compiled in (False, True):
        spec["run"]["compiled_core"] = compiled
        scenario = validate_scenario(spec)
        workload = make_workload(scenario)
        rule = slo_miss_rule(scenario, workload) if slo is not None else None
        results.append(simulate(scenario, workload, stop_when=rule, step_draws=pack))
    python, compiled = results
    assert python.extras["engine_core"] == "python (run.compiled_core is false)"
    assert compiled.extras["engine_core"] == "compiled" or "two events at one time" in compiled.extras["engine_core"]
    assert_identical(python, compiled)
    assert python.summary["lockstep_steps"] >= len(python.steps) // ranks


def test_a_lockstep_group_runs_compiled_padding_and_dummy_forwards_as_the_python_engine():
    # Three ranks under uneven ShareGPT lengths: steps padded to the busiest rank, idle ranks' dummy forwards.
    spec = spec_for(arrival={"kind": "poisson", "rate_per_s": 30.0}, lengths={"kind": "preset", "name": "sharegpt"},
                    num_requests=400, max_model_len=4096, replicas=3, router="least_loaded",
                    cost_model={"kind": "measured"})
    spec["hardware"]["lockstep"] = {}
    python, compiled = both(spec)
    assert compiled.extras["engine_core"] == "compiled"
    assert python.summary["lockstep_padding_tokens"] > 0 and python.summary["lockstep_dummy_forwards"] > 0
    assert_identical(python, compiled)
