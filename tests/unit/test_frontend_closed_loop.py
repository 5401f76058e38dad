"""The front-end inside a closed loop (sim/frontend.py ClosedLoopFrontend, run by sim/core/engine.py's users):
hand-computed answers on one and two users, agreement with the open-loop passes where both apply, the
saturation cap, and the records as the open loop writes them."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from helpers import small_scenario
from sim.config.files import validate_scenario
from sim.frontend import ClosedLoopFrontend, FrontendCosts, inbound, outbound
from sim.results import CLIENT_COLUMNS, ENGINE_LATENCIES
from sim.run import simulate

FE = {"num_processes": 1, "per_request_s": 0.03, "per_prompt_token_s": 4e-5, "per_output_chunk_s": 2e-4}


def closed(users: int, n: int, input_tokens=300, output_tokens=20, think_time_s=0.0) -> dict:
    return {"workload": {"arrival": {"kind": "closed_loop", "num_users": users, "think_time_s": think_time_s},
                         "lengths": {"kind": "fixed", "input_tokens": input_tokens, "output_tokens": output_tokens}},
            "run": {"num_requests": n}}


def run(changes, **sections):
    return simulate(validate_scenario(small_scenario(changes, **sections)))


# --- the in-loop arithmetic, without the engine ---------------------------------------------------------

def request(i, first, last, out):
    return SimpleNamespace(request_id=i, first_token_s=first, last_token_s=last, num_output_tokens=out)


@pytest.mark.parametrize("seed", range(40))
def test_a_request_alone_gets_what_the_open_loop_passes_give(seed):
    # alone on its process, the two paths must agree (the open loop's fluid and the closed loop's use of free time
    # give the same last chunk): both call the same work functions and process rule
    rng = np.random.default_rng(seed)
    costs = FrontendCosts(1, rng.uniform(0, 0.01), rng.uniform(0, 1e-5), rng.uniform(0, 2e-3),
                          rng.choice([0.0, 1e-4]), int(rng.integers(1, 4)))
    prompt, out = int(rng.integers(1, 2000)), int(rng.integers(1, 40))
    send = rng.uniform(0, 1)
    fe = ClosedLoopFrontend(costs, np.array([prompt]))
    r = request(0, np.nan, np.nan, out)
    arrival = fe.send(r, send)
    r.first_token_s = arrival + rng.uniform(0, 0.02)
    r.last_token_s = r.first_token_s + (rng.uniform(0, 0.05) if out > 1 else 0.0)
    received = fe.receive(r, r.last_token_s)
    inb = inbound(np.array([send]), np.array([prompt]), costs)
    ob = outbound(inb, np.array([r.first_token_s]), np.array([r.last_token_s]), np.array([out]), costs)
    assert arrival == pytest.approx(inb.arrival_s[0], abs=1e-15)
    assert fe.client_first_token_s[0] == pytest.approx(ob.client_first_token_s[0], abs=1e-12)
    assert received == pytest.approx(ob.client_last_token_s[0], abs=1e-12)
    assert fe.outbound_work_s[0] == pytest.approx(ob.work_s[0], abs=1e-15)


def test_middle_chunks_use_free_time_and_queue_the_rest_by_hand():
    # 1 ms in, 1 ms a chunk, 5 tokens: chunks 1 + 3 + 1. Sent at 0, in the engine at 1 ms, first token at 2 ms:
    # first chunk out at 3 ms. Last token at 10 ms: 7 ms free since, the 3 ms of middle chunks fit: out at 11 ms.
    costs = FrontendCosts(1, 0.001, 0.0, 0.001)
    fe = ClosedLoopFrontend(costs, np.array([0, 0]))
    r = request(0, np.nan, np.nan, 5)
    assert fe.send(r, 0.0) == pytest.approx(0.001)
    r.first_token_s, r.last_token_s = 0.002, 0.010
    assert fe.receive(r, 0.010) == pytest.approx(0.011, abs=1e-15)
    assert fe.client_first_token_s[0] == pytest.approx(0.003, abs=1e-15)
    # the same with the last token at 4 ms: 1 ms free since the first chunk; 2 ms of middle chunks queue first
    fe = ClosedLoopFrontend(costs, np.array([0]))
    r = request(0, np.nan, np.nan, 5)
    fe.send(r, 0.0)
    r.first_token_s, r.last_token_s = 0.002, 0.004
    assert fe.receive(r, 0.004) == pytest.approx(0.007, abs=1e-15)


def test_a_send_waits_behind_a_queued_chunk():
    # one process: request 0's first chunk (ready at 2 ms, 1 ms of work) is queued before request 1's inbound
    # work sent at 2.5 ms, which therefore starts at 3 ms (first come, first served in the order work is ready)
    costs = FrontendCosts(1, 0.001, 0.0, 0.001)
    fe = ClosedLoopFrontend(costs, np.array([0, 0]))
    a, b = request(0, np.nan, np.nan, 5), request(1, np.nan, np.nan, 5)
    fe.send(a, 0.0)
    a.first_token_s = 0.002
    assert fe.send(b, 0.0025) == pytest.approx(0.004, abs=1e-15)
    assert fe.start_s[1] == pytest.approx(0.003, abs=1e-15)


# --- through the engine ---------------------------------------------------------------------------------

def test_one_user_one_process_ttft_by_hand():
    off, on = run(closed(1, 6)), run(closed(1, 6), frontend=FE)
    req = on.requests
    inbound_s = 0.03 + 300 * 4e-5
    # each request alone in the engine: its engine TTFT is the one without a front-end
    np.testing.assert_allclose(req["engine_ttft_s"], off.requests["ttft_s"], rtol=1e-12)
    np.testing.assert_allclose(req["ttft_s"], inbound_s + req["engine_ttft_s"] + 2e-4, rtol=0, atol=1e-12)
    np.testing.assert_allclose(req["frontend_in_s"], inbound_s, rtol=0, atol=1e-12)
    np.testing.assert_allclose(req["frontend_out_last_s"], 2e-4, rtol=0, atol=1e-12)
    # the next request is sent when the client has the whole reply (no think time)
    np.testing.assert_array_equal(req["client_send_s"].to_numpy()[1:], req["client_last_token_s"].to_numpy()[:-1])
    np.testing.assert_allclose(req["tpot_s"], off.requests["tpot_s"], rtol=1e-9)
    assert on.summary["elapsed_s"] == req["client_last_token_s"].max()


@pytest.mark.parametrize("num_processes, waits", [(1, [1, 2]), (2, [1, 1])])
def test_two_users_queue_on_one_process(num_processes, waits):
    # both users send at 0: on one process the second waits for the first's inbound work
    on = run(closed(2, 2), frontend={**FE, "num_processes": num_processes})
    w = 0.03 + 300 * 4e-5
    req = on.requests.sort_values("request_id")
    assert req["client_send_s"].tolist() == [0.0, 0.0]
    np.testing.assert_allclose(req["frontend_in_s"], np.array(waits) * w, rtol=0, atol=1e-12)
    assert sorted(req["frontend_process"].tolist()) == list(range(num_processes)) * (2 // num_processes)


def test_zero_costs_change_nothing():
    off = run(closed(4, 40, input_tokens=200, output_tokens=30))
    on = run(closed(4, 40, input_tokens=200, output_tokens=30),
             frontend={"num_processes": 2, "per_request_s": 0, "per_prompt_token_s": 0, "per_output_chunk_s": 0})
    pd.testing.assert_frame_equal(off.requests, on.requests[list(off.requests.columns)], check_exact=True)
    pd.testing.assert_frame_equal(off.steps, on.steps, check_exact=True)


@pytest.mark.parametrize("num_processes", [1, 2])
def test_a_saturated_front_end_caps_the_closed_loop_rate(num_processes):
    # 64 users; each request costs the front-end 10 ms in and 4 x 1 ms out (the engine far faster): the rate is
    # num_processes / 14 ms at most, and close to it (the middle chunks' work is not lost when no time is free)
    r = run(closed(64, 600, input_tokens=64, output_tokens=4),
            frontend={"num_processes": num_processes, "per_request_s": 0.01, "per_prompt_token_s": 0,
                      "per_output_chunk_s": 0.001})
    cap = num_processes / 0.014
    assert r.summary["num_finished"] == 600
    assert r.summary["throughput_rps"] <= cap * (1 + 1e-9)
    assert r.summary["throughput_rps"] == pytest.approx(cap, rel=0.03)
    assert r.summary["frontend_busy_fraction"] == pytest.approx(1.0, rel=0.03)


def test_records_and_summary_as_in_the_open_loop():
    changes = closed(8, 120, input_tokens=500, output_tokens=40, think_time_s=0.05)
    on = run(changes, frontend={**FE, "num_processes": 2, "tokens_per_chunk": 4})
    open_loop = run({"workload": {"arrival": {"kind": "poisson", "rate_per_s": 20}}, "run": {"num_requests": 50}},
                    frontend=FE)
    assert list(on.requests.columns) == list(open_loop.requests.columns)
    assert set(CLIENT_COLUMNS) | set(ENGINE_LATENCIES.values()) <= set(on.requests.columns)
    frontend_keys = {k for k in open_loop.summary if k.startswith(("frontend_", "engine_"))}
    assert frontend_keys <= set(on.summary) and on.summary["latency_measured_at"] == "client"
    req = on.requests
    assert req["request_id"].tolist() == list(range(120))
    assert (req["arrival_s"] >= req["client_send_s"]).all()
    assert (req["client_first_token_s"] >= req["first_token_s"]).all()
    assert (req["client_last_token_s"] >= req["last_token_s"]).all()
    assert (req["ttft_s"] > req["engine_ttft_s"]).all() and (req["e2e_s"] > req["engine_e2e_s"]).all()
    assert 0 < on.summary["frontend_busy_fraction"] <= 1


def test_a_horizon_cuts_the_loop_cleanly():
    r = run(closed(8, 400, input_tokens=500, output_tokens=200), frontend=FE, run={"horizon_s": 1.0})
    assert r.summary["num_finished"] < 400
    assert 0 < r.summary["frontend_busy_fraction"] <= 1
    fin = r.requests[r.requests["finished"]]
    assert np.isfinite(fin["client_last_token_s"]).all()


def test_deterministic():
    changes = closed(8, 120, input_tokens=500, output_tokens=40, think_time_s=0.05)
    a, b = (run(changes, frontend={**FE, "num_processes": 2}) for _ in range(2))
    assert a.requests.to_csv().encode() == b.requests.to_csv().encode()
    assert json.dumps(a.summary, sort_keys=True, default=str) == json.dumps(b.summary, sort_keys=True, default=str)
