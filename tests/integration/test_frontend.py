"""The API front-end (`frontend:`, sim/frontend.py) through `simulate`, the CLI, the timeline and the report."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml

from helpers import small_scenario
from sim.config.files import validate_scenario
from sim.results import CLIENT_COLUMNS, ENGINE_LATENCIES
from sim.run import make_workload, simulate
from sim.views.cli import main
from sim.views.report import render_report
from sim.views.timeline import timeline_events

FRONTEND = {"num_processes": 3, "per_request_s": 0.02, "per_prompt_token_s": 5e-5, "per_output_chunk_s": 5e-4}


def run(changes: dict | None = None, **sections):
    return simulate(validate_scenario(small_scenario(changes, **sections)))


def assert_same_summary(want: dict, got: dict, keys=None):
    for key in keys if keys is not None else want:
        a, b = want[key], got[key]
        if isinstance(a, float) and math.isnan(a):
            assert isinstance(b, float) and math.isnan(b), key
        else:
            assert a == b, (key, a, b)


LOADED = {"workload": {"arrival": {"kind": "poisson", "rate_per_s": 40},
                       "lengths": {"kind": "uniform", "input_min": 10, "input_max": 800, "output_min": 1,
                                   "output_max": 60}},
          "run": {"num_requests": 300}}


def test_compiled_core_and_simpy_engine_give_identical_records():
    results = []
    for compiled in (False, True):
        results.append(run(LOADED, frontend=FRONTEND, run={"compiled_core": compiled}))
    python, compiled = results
    assert python.extras["engine_core"].startswith("python") and compiled.extras["engine_core"] == "compiled"
    pd.testing.assert_frame_equal(python.requests, compiled.requests, check_exact=True)
    pd.testing.assert_frame_equal(python.steps, compiled.steps, check_exact=True)
    assert list(python.summary) == list(compiled.summary)
    assert_same_summary(python.summary, compiled.summary)
    # the front-end reordered requests (3 processes, prompts of different lengths): the engine saw another order
    arrival = python.requests["arrival_s"].to_numpy()
    assert (np.diff(arrival) < 0).any()


def test_processor_sharing_hands_a_burst_over_together_and_both_engines_agree():
    """A burst of 40 requests with 0.05 s of inbound work each on one shared process: every request reaches the
    engine at 40 x 0.05 = 2 s (first come, first served: 0.05, 0.1, ... 2 s); the records of the compiled core
    and the SimPy engine are identical."""
    burst = {"workload": {"arrival": {"kind": "burst"},
                          "lengths": {"kind": "fixed", "input_tokens": 64, "output_tokens": 8}},
             "run": {"num_requests": 40}}
    fe = {"num_processes": 1, "per_request_s": 0.05, "per_prompt_token_s": 0.0, "per_output_chunk_s": 1e-4,
          "discipline": "processor_sharing"}
    python, compiled = (run(burst, frontend=fe, run={"num_requests": 40, "compiled_core": c}) for c in (False, True))
    r = python.requests
    np.testing.assert_allclose(r["arrival_s"], 2.0, rtol=1e-12)
    np.testing.assert_allclose(r["frontend_in_s"], 2.0, rtol=1e-12)
    assert (r["client_first_token_s"] >= r["first_token_s"]).all()
    pd.testing.assert_frame_equal(python.requests, compiled.requests, check_exact=True)
    fifo = run(burst, frontend=fe | {"discipline": "fifo"}).requests
    np.testing.assert_allclose(np.sort(fifo["arrival_s"]), 0.05 * np.arange(1, 41), rtol=1e-12)
    assert python.summary["ttft_s_p50"] > float(np.median(fifo["ttft_s"]))  # shared: every request waits ~2 s


def test_records_keep_the_workload_request_ids():
    scenario = validate_scenario(small_scenario(LOADED, frontend=FRONTEND))
    workload = make_workload(scenario)
    r = simulate(scenario, workload)
    ids = r.requests["request_id"].to_numpy()
    assert ids.tolist() == list(range(len(ids)))
    np.testing.assert_array_equal(r.requests["client_send_s"].to_numpy(), workload.arrival_s[ids])
    np.testing.assert_array_equal(r.requests["prompt_tokens"].to_numpy(), workload.input_tokens[ids])
    np.testing.assert_array_equal(r.requests["max_output_tokens"].to_numpy(), workload.output_tokens[ids])
    req = r.requests
    assert (req["arrival_s"] >= req["client_send_s"]).all()
    fin = req[req["finished"]]
    assert (fin["client_first_token_s"] >= fin["first_token_s"]).all()
    assert (fin["client_last_token_s"] >= fin["last_token_s"]).all()
    assert (fin["ttft_s"] >= fin["engine_ttft_s"]).all() and (fin["e2e_s"] >= fin["engine_e2e_s"]).all()


def test_zero_costs_change_nothing():
    off = run(LOADED)
    on = run(LOADED, frontend={"num_processes": 2, "per_request_s": 0, "per_prompt_token_s": 0,
                               "per_output_chunk_s": 0})
    pd.testing.assert_frame_equal(off.requests, on.requests[list(off.requests.columns)], check_exact=True)
    pd.testing.assert_frame_equal(off.steps, on.steps, check_exact=True)
    assert_same_summary(off.summary, on.summary)
    for client, engine in (("client_send_s", "arrival_s"), ("client_first_token_s", "first_token_s"),
                           ("client_last_token_s", "last_token_s")):
        pd.testing.assert_series_equal(on.requests[client], on.requests[engine], check_names=False)
    assert on.summary["frontend_busy_fraction"] == 0.0
    assert set(CLIENT_COLUMNS) | set(ENGINE_LATENCIES.values()) <= set(on.requests.columns)
    assert not set(CLIENT_COLUMNS) & set(off.requests.columns)  # off: the records as they were


def test_concurrency_one_adds_the_front_end_work_to_ttft():
    # one request every 2 s, each alone in the system: TTFT grows by exactly the inbound work and one chunk
    sparse = {"workload": {"arrival": {"kind": "constant", "rate_per_s": 0.5},
                           "lengths": {"kind": "fixed", "input_tokens": 300, "output_tokens": 20}},
              "run": {"num_requests": 8}}
    fe = {"per_request_s": 0.03, "per_prompt_token_s": 4e-5, "per_output_chunk_s": 2e-4}
    off, on = run(sparse), run(sparse, frontend=fe)
    added = 0.03 + 300 * 4e-5 + 2e-4
    req = on.requests
    np.testing.assert_allclose(req["ttft_s"] - req["engine_ttft_s"], added, rtol=0, atol=1e-12)
    np.testing.assert_allclose(req["engine_ttft_s"], off.requests["ttft_s"], rtol=1e-9)
    np.testing.assert_allclose(req["frontend_in_s"], 0.03 + 300 * 4e-5, rtol=0, atol=1e-12)
    np.testing.assert_allclose(req["frontend_out_last_s"], 2e-4, rtol=0, atol=1e-12)
    np.testing.assert_allclose(req["tpot_s"], off.requests["tpot_s"], rtol=1e-9)  # one chunk delay at each end
    assert on.summary["ttft_s_p50"] == pytest.approx(off.summary["ttft_s_p50"] + added, rel=1e-9)
    assert on.summary["engine_ttft_s_p50"] == pytest.approx(off.summary["ttft_s_p50"], rel=1e-9)
    assert on.summary["latency_measured_at"] == "client"


CLIENT = {"per_request_s": 0.0015, "per_event_s": 1e-4}


def test_a_benchmark_client_adds_its_send_and_one_event_to_a_request_alone():
    # one request every 2 s, each alone: the client's sending delays the server by its per-request work, and reading
    # the first and the last chunk adds one event's work to each; the gaps between them stay the same
    sparse = {"workload": {"arrival": {"kind": "constant", "rate_per_s": 0.5},
                           "lengths": {"kind": "fixed", "input_tokens": 300, "output_tokens": 20}},
              "run": {"num_requests": 8}}
    fe = {"per_request_s": 0.03, "per_prompt_token_s": 4e-5, "per_output_chunk_s": 2e-4}
    server, client = run(sparse, frontend=fe), run(sparse, frontend=fe | {"client": CLIENT})
    a, b = server.requests, client.requests
    np.testing.assert_allclose(b["ttft_s"] - a["ttft_s"], 0.0015 + 1e-4, rtol=0, atol=1e-9)
    np.testing.assert_allclose(b["e2e_s"] - a["e2e_s"], 0.0015 + 1e-4, rtol=0, atol=1e-9)
    np.testing.assert_allclose(b["tpot_s"], a["tpot_s"], rtol=1e-9)
    np.testing.assert_allclose(b["frontend_in_s"], 0.0015 + 0.03 + 300 * 4e-5, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(b["client_send_s"], a["client_send_s"])  # TTFT still counts from the send
    np.testing.assert_allclose(b["engine_ttft_s"], a["engine_ttft_s"], rtol=1e-9)
    assert "client 0.0015 s/request + 0.0001 s/event, event_loop" in client.extras["frontend"]


def test_a_named_client_takes_its_measured_row_on_the_scenarios_endpoint_under_the_scenarios_own_numbers():
    from sim.config.bench_clients import bench_client
    from sim.config.schema import Scenario
    fe = {"num_processes": 1, "per_request_s": 0.001, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0}
    for endpoint in ("completions", "chat"):
        row = bench_client("vllm bench serve", endpoint)
        s = Scenario.model_validate(small_scenario(frontend=fe | {"client": {"tool": "vllm bench serve"}},
                                                   workload={"endpoint": endpoint}))
        c = s.frontend.client
        assert (c.tool, c.per_request_s, c.per_event_s, c.discipline) == (
            "vllm bench serve", row.per_request_s, row.per_event_s, row.discipline)
        assert Scenario.model_validate(s.model_dump(mode="json")) == s  # a dumped scenario reads back equal
    own = Scenario.model_validate(small_scenario(frontend=fe | {"client": {"tool": "sglang.bench_serving",
                                                                           "per_event_s": 5e-5,
                                                                           "discipline": "fifo"}}))
    row = bench_client("sglang.bench_serving", "completions")
    assert (own.frontend.client.per_request_s, own.frontend.client.per_event_s, own.frontend.client.discipline) == (
        row.per_request_s, 5e-5, "fifo")


def test_a_named_client_not_measured_on_the_scenarios_endpoint_exits_2_with_one_line(tmp_path, capsys):
    path = _bad_scenario_file(tmp_path, {"client": {"tool": "sglang.bench_serving"}},
                              workload={"endpoint": "chat"})
    line = _one_error_line(["run", path, "-q", "--out", str(tmp_path / "o")], capsys)
    for needle in ("frontend.client.tool", "'sglang.bench_serving'", "'completions'", "not 'chat'"):
        assert needle in line, (needle, line)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("discipline", ["event_loop", "fifo"])
def test_a_burst_leaves_the_client_as_its_discipline_says_and_both_engines_agree(discipline):
    # 40 requests at once, 0.01 s of the client's work each, a server that does no work: shared (event_loop), all
    # reach the engine at 40 x 0.01 = 0.4 s; first come, first served at 0.01, 0.02, ... 0.4 s
    burst = {"workload": {"arrival": {"kind": "burst"},
                          "lengths": {"kind": "fixed", "input_tokens": 64, "output_tokens": 8}},
             "run": {"num_requests": 40}}
    fe = {"num_processes": 1, "per_request_s": 0.0, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0,
          "client": {"per_request_s": 0.01, "per_event_s": 2e-4, "discipline": discipline}}
    python, compiled = (run(burst, frontend=fe, run={"num_requests": 40, "compiled_core": c}) for c in (False, True))
    r = python.requests
    want = np.full(40, 0.4) if discipline == "event_loop" else 0.01 * np.arange(1, 41)
    np.testing.assert_allclose(np.sort(r["arrival_s"]), want, rtol=1e-12)
    assert (r["client_first_token_s"] >= r["first_token_s"] + 2e-4 * (1 - 1e-12)).all()
    pd.testing.assert_frame_equal(python.requests, compiled.requests, check_exact=True)


def test_a_saturated_client_caps_what_it_reads():
    # 200 requests of 50 tokens at once; the client spends 1 ms an event, the engine and the server far less: the
    # client reads its 10,000 events one after another after sending the requests (2 s), so the last one is read
    # at 2 s + 10 s at the earliest, and, the client never idle once the first token is out, close to it
    burst = {"workload": {"arrival": {"kind": "burst"},
                          "lengths": {"kind": "fixed", "input_tokens": 64, "output_tokens": 50}},
             "run": {"num_requests": 200}}
    fe = {"num_processes": 1, "per_request_s": 0.0, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0,
          "client": {"per_request_s": 0.01, "per_event_s": 1e-3}}
    r = run(burst, frontend=fe)
    work = 200 * 0.01 + 200 * 50 * 1e-3
    last = r.requests["client_last_token_s"].max()
    assert last >= work * (1 - 1e-12)
    assert last == pytest.approx(work + r.requests["first_token_s"].min() - 2.0, rel=0.02)
    assert r.summary["elapsed_s"] == pytest.approx(last, rel=1e-12)
    assert r.summary["tpot_s_p50"] > 5 * r.summary["engine_tpot_s_p50"]  # the client's queue shows in its TPOT


@pytest.mark.parametrize("num_processes, num_replicas", [(1, 1), (2, 1), (1, 2), (2, 3)])
def test_a_saturated_front_end_caps_the_client_rate(num_processes, num_replicas):
    # 400 requests at once; each costs the front-end 10 ms in and 4 x 1 ms out: the clients receive complete
    # replies at num_processes / 14 ms at most per replica (each replica a server with its own front-end), and (the
    # engine being far faster) close to it
    burst = {"workload": {"arrival": {"kind": "burst"},
                          "lengths": {"kind": "fixed", "input_tokens": 64, "output_tokens": 4}},
             "hardware": {"num_replicas": num_replicas}, "run": {"num_requests": 400}}
    r = run(burst, frontend={"num_processes": num_processes, "per_request_s": 0.01, "per_prompt_token_s": 0,
                             "per_output_chunk_s": 0.001})
    cap = num_processes * num_replicas / 0.014
    assert r.summary["frontend_num_processes"] == num_processes * num_replicas
    assert r.summary["num_finished"] == 400
    assert r.summary["throughput_rps"] <= cap * (1 + 1e-9)
    assert r.summary["throughput_rps"] == pytest.approx(cap, rel=0.02)
    assert r.summary["elapsed_s"] == pytest.approx(r.requests["client_last_token_s"].max(), rel=1e-12)
    assert r.summary["frontend_busy_fraction"] == pytest.approx(1.0, rel=0.02)


def test_deterministic():
    a, b = run(LOADED, frontend=FRONTEND), run(LOADED, frontend=FRONTEND)
    assert a.requests.to_csv().encode() == b.requests.to_csv().encode()
    assert json.dumps(a.summary, sort_keys=True, default=str) == json.dumps(b.summary, sort_keys=True, default=str)


def test_slo_is_checked_on_what_the_client_sees():
    sparse = {"workload": {"arrival": {"kind": "constant", "rate_per_s": 0.5},
                           "lengths": {"kind": "fixed", "input_tokens": 300, "output_tokens": 20}},
              "run": {"num_requests": 8}}
    off = run(sparse)
    limit = off.summary["ttft_s_p99"] + 0.01  # met by the engine; not once the front-end adds 42 ms
    slo = {"ttft_s": limit}
    assert run(sparse, slo=slo).summary["slo_met"] is True
    on = run(sparse, slo=slo, frontend={"per_request_s": 0.03, "per_prompt_token_s": 4e-5, "per_output_chunk_s": 2e-4})
    assert on.summary["slo_met"] is False and on.summary["slo_ttft_p99"] == on.summary["ttft_s_p99"]


def test_prefix_caching_and_replicas_follow_their_requests():
    # the engine's reordering must carry each request's prompt content with it (prefix ids) to the SimPy engine
    changes = small_scenario(LOADED, workload={"prefix": {"kind": "shared_system_prompt", "tokens": 256,
                                                          "fraction": 0.8, "num_prompts": 2}},
                             kv_cache={"enable_prefix_caching": True}, hardware={"num_replicas": 2})
    scenario = validate_scenario({**changes, "frontend": FRONTEND})
    workload = make_workload(scenario)
    r = simulate(scenario, workload)
    ids = r.requests["request_id"].to_numpy()
    np.testing.assert_array_equal(r.requests["prompt_tokens"].to_numpy(), workload.input_tokens[ids])
    assert r.summary["prefix_cache_hit_rate_tokens"] > 0


def test_timeline_shows_the_front_end_spans():
    r = run(LOADED, frontend=FRONTEND)
    events = timeline_events(r.requests, r.steps, max_requests=5)
    names = {e["name"] for e in events if e.get("tid") == 2 and e["ph"] == "b"}
    assert {"front-end in", "front-end out", "queued", "prefill", "decode"} <= names
    first = r.requests.sort_values("arrival_s").iloc[0]
    spans = [e for e in events if e.get("id") == int(first.request_id) and e["ph"] in "be"]
    assert spans[0]["ts"] == round(first.client_send_s * 1e6, 3)  # the request's span starts at the client's send
    args = spans[0]["args"]
    assert args["ttft_s"] == pytest.approx(first.ttft_s) and args["engine_ttft_s"] == pytest.approx(first.engine_ttft_s)
    json.dumps(events, allow_nan=False)


def test_report_and_cli_show_the_front_end(tmp_path, capsys):
    r, off = run(LOADED, frontend=FRONTEND), run(LOADED)
    html = render_report([r, off], "front-end")
    assert "front-end busy share" in html and "engine TTFT p99 (s)" in html
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(small_scenario(LOADED, frontend=FRONTEND)))
    main(["run", str(path), "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert "front-end in: send to engine mean (s)" in out and "TTFT, TPOT, E2E measured at" in out


BAD = [
    ({"num_processes": 0}, ["frontend.num_processes", "0", ">= 1"]),
    ({"num_processes": 5000}, ["frontend.num_processes", "5000", "<= 1024"]),
    ({"per_request_s": -0.001}, ["frontend.per_request_s", "-0.001", ">= 0"]),
    ({"per_prompt_token_s": ".nan"}, ["frontend.per_prompt_token_s", "nan"]),
    ({"per_output_chunk_s": "fast"}, ["frontend.per_output_chunk_s", "fast", "a number"]),
    ({"tokens_per_chunk": 0}, ["frontend.tokens_per_chunk", "0", ">= 1"]),
    ({"per_output_chunk_s": None}, ["frontend.per_output_chunk_s"]),
    ({"num_procs": 2}, ["frontend.num_procs", "unknown key", "num_processes"]),
    ({"discipline": "lifo"}, ["frontend.discipline", "lifo", "fifo", "processor_sharing", "event_loop"]),
    ({"client": {"per_request_s": 0.001, "per_event_s": -1e-5}}, ["frontend.client.per_event_s", "-1e-05", ">= 0"]),
    ({"client": {"per_request_s": 0.001}}, ["frontend.client.per_event_s"]),
    ({"client": {"per_request_s": 0.001, "per_event_s": 0, "threads": 2}}, ["frontend.client.threads", "unknown key"]),
    ({"client": {"tool": "genai-perf"}}, ["frontend.client.tool", "'genai-perf'", "allowed", "'vllm bench serve'"]),
]


def _bad_scenario_file(tmp_path, frontend_changes: dict | None = None, **sections) -> str:
    fe = {"num_processes": 1, "per_request_s": 0.001, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0}
    for key, value in (frontend_changes or {}).items():
        if value is None:
            fe.pop(key)
        else:
            fe[key] = value
    text = yaml.safe_dump(small_scenario(frontend=fe, **sections)).replace("'.nan'", ".nan")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    return str(path)


def _one_error_line(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    captured = capsys.readouterr()
    assert exit_info.value.code == 2, captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in captured.err, captured.err
    return lines[0]


@pytest.mark.parametrize("changes, needles", BAD, ids=[next(iter(c)) + str(i) for i, (c, _) in enumerate(BAD)])
def test_bad_values_exit_2_with_one_line(tmp_path, capsys, changes, needles):
    line = _one_error_line(["run", _bad_scenario_file(tmp_path, changes), "-q", "--out", str(tmp_path / "o")],
                           capsys)
    for needle in needles:
        assert needle in line, (needle, line)


@pytest.mark.parametrize("frontend_changes, sections, needles", [
    ({}, {"hardware": {"disaggregation": {}}}, ["frontend", "hardware.disaggregation", "allowed: a colocated"]),
    ({"discipline": "processor_sharing"},
     {"workload": {"arrival": {"kind": "closed_loop", "num_users": 4, "think_time_s": 0.0}}},
     ["frontend.discipline", "'processor_sharing'", "open arrivals only", "closed_loop: fifo"]),
    ({"discipline": "event_loop"},
     {"workload": {"arrival": {"kind": "closed_loop", "num_users": 4, "think_time_s": 0.0}}},
     ["frontend.discipline", "'event_loop'", "open arrivals only", "closed_loop: fifo"]),
    ({"client": CLIENT}, {"workload": {"arrival": {"kind": "closed_loop", "num_users": 4, "think_time_s": 0.0}}},
     ["frontend.client", "open arrivals only", "closed_loop: null"]),
])
def test_outside_the_model_exit_2_with_one_line(tmp_path, capsys, frontend_changes, sections, needles):
    line = _one_error_line(["run", _bad_scenario_file(tmp_path, frontend_changes, **sections), "-q", "--out",
                            str(tmp_path / "o")], capsys)
    for needle in needles:
        assert needle in line, (needle, line)
