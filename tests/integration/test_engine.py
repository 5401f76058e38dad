"""The event model end to end: queueing theory, Little's law, determinism, horizons, routers."""

import json

import numpy as np
import pandas as pd
import pytest

from sim.config.deployment import resolve
from sim.config.files import build_scenario_set, validate_scenario
from sim.run import make_workload, simulate


def scenario(**sections):
    raw = {
        "model": "llama-3.1-8b",
        "hardware": {"gpu": "h100-sxm"},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 5.0},
                     "lengths": {"kind": "fixed", "input_tokens": 128, "output_tokens": 4}},
        "run": {"seed": 1, "num_requests": 200},
    }
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return validate_scenario(raw)


def service_time_alone(sc) -> float:
    """Time one request takes through an empty system: the deterministic service time."""
    alone = sc.model_copy(update={"run": sc.run.model_copy(update={"num_requests": 1})})
    r = simulate(alone).requests.iloc[0]
    return float(r.finish_s - r.arrival_s)


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_static_batch_of_one_is_md1(rho):
    base = scenario(scheduler={"batching": "static", "max_batch_size": 1},
                    workload={"lengths": {"kind": "fixed", "input_tokens": 256, "output_tokens": 2}})
    service_s = service_time_alone(base)
    mu = 1.0 / service_s
    sc = base.model_copy(update={
        "workload": base.workload.model_copy(update={"arrival": base.workload.arrival.model_copy(
            update={"rate_per_s": rho * mu})}),
        "run": base.run.model_copy(update={"num_requests": 60_000, "seed": 3}),
    })
    result = simulate(sc)
    req = result.requests
    assert (req["status"] == "finished").all()
    # Deterministic service: every request is in service for exactly the same time.
    in_service = (req["finish_s"] - req["first_scheduled_s"]).to_numpy()
    assert np.allclose(in_service, service_s, rtol=1e-9)
    expected_wait = rho / (2 * mu * (1 - rho))  # Pollaczek-Khinchine for M/D/1
    assert req["queueing_s"].mean() == pytest.approx(expected_wait, rel=0.05)
    # Little's law: time-average number in system (integrated by the engine) = λ W (from records).
    s = result.summary
    assert s["mean_in_system"] == pytest.approx(s["littles_law_lambda_w"], rel=1e-6)
    assert s["mean_in_system"] == pytest.approx(rho * mu * (expected_wait + service_s), rel=0.05)


def test_littles_law_continuous_with_preemption_and_replicas():
    sc = scenario(hardware={"num_replicas": 2, "router": "least_outstanding"},
                  workload={"arrival": {"kind": "gamma", "rate_per_s": 40, "cv": 3.0},
                            "lengths": {"kind": "lognormal", "input_mean": 400, "input_sigma": 0.8,
                                        "output_mean": 200, "output_sigma": 0.8}},
                  kv_cache={"capacity_tokens": 12_000}, run={"seed": 2, "num_requests": 1500})
    s = simulate(sc).summary
    assert s["num_finished"] == 1500
    assert s["preemptions"] > 0  # the small cache forces recompute preemption
    assert s["mean_in_system"] == pytest.approx(s["littles_law_lambda_w"], rel=1e-6)


def test_same_seed_same_results_different_seed_different():
    sc = scenario(hardware={"num_replicas": 2, "router": "random"},
                  workload={"lengths": {"kind": "preset", "name": "sharegpt"}})
    a, b = simulate(sc), simulate(sc)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    assert json.dumps(a.summary, sort_keys=True) == json.dumps(b.summary, sort_keys=True)
    other = sc.model_copy(update={"run": sc.run.model_copy(update={"seed": 99})})
    assert not simulate(other).requests["arrival_s"].equals(a.requests["arrival_s"])


def test_overload_ends_at_the_horizon_with_a_growing_queue():
    sc = scenario(workload={"arrival": {"kind": "poisson", "rate_per_s": 400.0},
                            "lengths": {"kind": "fixed", "input_tokens": 1000, "output_tokens": 300}},
                  run={"seed": 0, "num_requests": None, "duration_s": 20.0})
    result = simulate(sc)
    req, steps = result.requests, result.steps
    assert result.summary["num_unfinished"] > 0
    assert set(req["status"].unique()) <= {"finished", "unfinished"}
    assert steps["end_s"].max() <= 20.0 + steps["duration_s"].max()
    first = steps.loc[steps["start_s"] < 5.0, "num_waiting"].mean()
    last = steps.loc[steps["start_s"] > 15.0, "num_waiting"].mean()
    assert last > 2 * first > 0
    unfinished = req[req["status"] == "unfinished"]
    assert unfinished["finish_s"].isna().all() and (unfinished["arrival_s"] < 20.0).all()


def test_request_larger_than_the_cache_is_rejected_with_a_reason():
    sc = scenario(workload={"lengths": {"kind": "uniform", "input_min": 10, "input_max": 3000,
                                        "output_min": 1, "output_max": 50}},
                  kv_cache={"capacity_tokens": 2048}, run={"seed": 0, "num_requests": 100})
    req = simulate(sc).requests
    rejected = req[req["status"] == "rejected"]
    assert len(rejected) > 0
    assert ((rejected["prompt_tokens"] + rejected["max_output_tokens"] - 1) > 2048).all()
    assert rejected["reject_reason"].str.contains("2048").all()
    ok = req[req["status"] != "rejected"]
    assert (ok["status"] == "finished").all()


def test_round_robin_splits_evenly_and_least_outstanding_balances():
    sc = scenario(hardware={"num_replicas": 3}, run={"seed": 0, "num_requests": 300})
    counts = simulate(sc).requests["replica"].value_counts()
    assert sorted(counts.tolist()) == [100, 100, 100]
    lor = scenario(hardware={"num_replicas": 3, "router": "least_outstanding"},
                   workload={"arrival": {"kind": "poisson", "rate_per_s": 60.0}},
                   run={"seed": 0, "num_requests": 300})
    counts = simulate(lor).requests["replica"].value_counts()
    assert counts.min() > 60


def test_closed_loop_never_exceeds_its_users():
    sc = scenario(workload={"arrival": {"kind": "closed_loop", "num_users": 4, "think_time_s": 0.5}},
                  run={"seed": 0, "num_requests": 80})
    result = simulate(sc)
    assert result.summary["num_finished"] == 80
    assert result.steps["num_seqs"].max() <= 4
    assert result.summary["mean_in_system"] <= 4


def test_every_request_is_accounted_for_across_policies():
    for layout, batching, chunked in [("paged", "continuous", False), ("paged", "continuous", True),
                                      ("contiguous", "continuous", False), ("contiguous", "static", False),
                                      ("paged", "static", False)]:
        sc = scenario(scheduler={"batching": batching, "chunked_prefill": chunked, "max_num_seqs": 32,
                                 "max_num_batched_tokens": 2048 if chunked else None},
                      kv_cache={"layout": layout, "capacity_tokens": 20_000, "reserve": "pow2"},
                      workload={"arrival": {"kind": "poisson", "rate_per_s": 30.0},
                                "lengths": {"kind": "lognormal", "input_mean": 300, "input_sigma": 1.0,
                                            "output_mean": 150, "output_sigma": 1.0}},
                      run={"seed": 5, "num_requests": 400, "horizon_s": 15.0})
        result = simulate(sc)
        req, steps = result.requests, result.steps
        assert len(req) == (make_workload(sc).arrival_s < 15.0).sum()
        assert req["status"].isin(["finished", "unfinished", "rejected"]).all()
        used = steps[["kv_token_slots", "kv_reserved_slots", "kv_internal_slots"]].sum(axis=1)
        assert (used <= steps["kv_capacity_slots"]).all()
        assert (steps["kv_token_slots"] >= 0).all() and (steps["kv_reserved_slots"] >= 0).all()
        fin = req[req["status"] == "finished"]
        assert (fin["output_tokens"] == fin["max_output_tokens"]).all()
        assert (fin["first_token_s"] >= fin["first_scheduled_s"]).all()
        assert (fin["first_scheduled_s"] >= fin["arrival_s"]).all()
        assert (fin["finish_s"] >= fin["last_token_s"]).all()


def test_quickstart_policies_behave_as_published():
    """Paged continuous batching beats static, and wastes almost no KV memory (vLLM paper, Fig. 2)."""
    scenario_set = build_scenario_set(
        __import__("yaml").safe_load(open("scenarios/quickstart.yaml")), overrides=["run.num_requests=1500"])
    results = {name: simulate(sc) for name, sc in scenario_set.items()
               if name in ("static+contiguous", "continuous+contiguous(max_len)", "continuous+paged")}
    static, contiguous, paged = (results[k].summary for k in
                                 ("static+contiguous", "continuous+contiguous(max_len)", "continuous+paged"))
    assert paged["throughput_rps"] > static["throughput_rps"]
    assert paged["e2e_s_p50"] <= static["e2e_s_p50"]
    assert paged["kv_token_share"] > 0.9
    assert contiguous["kv_token_share"] < 0.5
    assert paged["kv_external_fraction"] == 0 and contiguous["kv_external_fraction"] > 0


def test_unchunked_long_prompts_are_not_blocked_behind_decodes():
    """With the default budget a full-length prompt fits beside a full decode batch, so near-max prompts
    do not wait for the running batch to drain (a head-of-line stall the default once caused)."""
    sc = scenario(scheduler={"max_model_len": 1024},
                  workload={"arrival": {"kind": "poisson", "rate_per_s": 10.0},
                            "lengths": {"kind": "lognormal", "input_mean": 300, "input_sigma": 1.5,
                                        "output_mean": 200, "output_sigma": 0.5}},
                  run={"seed": 0, "num_requests": 300})
    assert resolve(sc).max_num_batched_tokens == 1024 + sc.scheduler.max_num_seqs
    result = simulate(sc)
    step_p99 = result.steps["duration_s"].quantile(0.99)
    assert result.requests["queueing_s"].max() < 5 * step_p99
