"""`servesim run --timeline`: Chrome trace-event JSON that Perfetto and chrome://tracing open.

The file is checked against the trace-event format (required fields per event type, µs timestamps,
monotone tracks, every async begin closed by its end in order), and one request's events give back its
TTFT and E2E from result.requests."""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from helpers import SUBPROCESS_TIMEOUT_S
from sim.config.files import validate_scenario
from sim.errors import ConfigError
from sim.run import simulate
from sim.views.timeline import (
    check_timeline_options,
    parse_window,
    timeline_events,
    write_timeline,
)

REPO = Path(__file__).resolve().parents[2]

RAW = {
    "name": "tl",
    "model": "llama-3.1-8b",
    "hardware": {"gpu": "h100-sxm", "num_replicas": 2},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 40},
                 "lengths": {"kind": "lognormal", "input_mean": 300, "input_sigma": 0.8,
                             "output_mean": 120, "output_sigma": 0.8}},
    "scheduler": {"max_model_len": 2048, "max_num_seqs": 64},
    # A small KV cache: requests get preempted; a horizon: some are still in flight at the end.
    "kv_cache": {"capacity_tokens": 6000},
    "run": {"seed": 3, "num_requests": 160, "horizon_s": 3.0},
}


@pytest.fixture(scope="module")
def result():
    return simulate(validate_scenario(RAW))


def _no_nan(text: str):
    raise AssertionError(f"{text} is not JSON")


def check_trace(doc: dict) -> dict:
    """Assert `doc` is a valid trace-event file; returns the async events grouped per request id."""
    assert set(doc) >= {"traceEvents"} and isinstance(doc["traceEvents"], list)
    events = doc["traceEvents"]
    required = {"X": {"ph", "ts", "pid", "tid", "name", "dur"}, "b": {"ph", "ts", "pid", "tid", "name", "cat", "id"},
                "e": {"ph", "ts", "pid", "tid", "name", "cat", "id"}, "i": {"ph", "ts", "pid", "tid", "name", "s"},
                "C": {"ph", "ts", "pid", "tid", "name", "args"}, "M": {"ph", "pid", "name", "args"}}
    steps, counters, spans = defaultdict(list), defaultdict(list), defaultdict(list)
    last_ts = -math.inf
    seen_body = False
    for e in events:
        assert e["ph"] in required, e
        assert required[e["ph"]] <= set(e), (e, required[e["ph"]] - set(e))
        assert isinstance(e["pid"], int) and isinstance(e["name"], str)
        if e["ph"] == "M":
            assert not seen_body, "metadata comes first"
            assert e["name"] in ("process_name", "process_sort_index", "thread_name")
            continue
        seen_body = True
        assert isinstance(e["tid"], int)
        ts = e["ts"]
        assert isinstance(ts, (int, float)) and math.isfinite(ts) and ts >= 0
        assert ts >= last_ts, "events are in time order"
        last_ts = ts
        if e["ph"] == "X":
            assert e["dur"] >= 0
            steps[(e["pid"], e["tid"])].append((ts, e["dur"]))
        elif e["ph"] == "C":
            assert e["args"] and all(isinstance(v, (int, float)) for v in e["args"].values())
            counters[(e["pid"], e["name"])].append(ts)
        elif e["ph"] == "i":
            assert e["s"] in ("g", "p", "t")
        else:
            spans[(e["pid"], e["cat"], e["id"])].append(e)
    for track in steps.values():  # one engine: its steps never overlap (1 ns of rounding allowed)
        for (t0, d0), (t1, _) in itertools.pairwise(track):
            assert t0 + d0 <= t1 + 1e-3
    for track in counters.values():
        assert track == sorted(track)
    for key, track in spans.items():
        stack = []
        for e in track:
            if e["ph"] == "b":
                stack.append(e)
            else:
                assert stack and stack[-1]["name"] == e["name"], (key, e)
                assert e["ts"] >= stack.pop()["ts"]
        assert not stack, f"{key}: {[e['name'] for e in stack]} never end"
    return {key[2]: track for key, track in spans.items()}


def test_the_timeline_is_a_valid_trace_with_every_request_and_step(result, tmp_path):
    path = tmp_path / "sub" / "timeline.json"
    written = write_timeline(result, path)
    text = path.read_text()
    doc = json.loads(text, parse_constant=_no_nan)
    spans = check_trace(doc)
    assert written["bytes"] == len(text.encode())
    assert written["steps"] == len(result.steps) and written["requests"] == len(result.requests)
    assert set(spans) == set(result.requests["request_id"])
    events = doc["traceEvents"]
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {"replica 0", "replica 1"}
    # The run has what the timeline must show: preemptions and requests cut off by the horizon.
    assert result.summary["preemptions"] > 0 and result.summary["num_unfinished"] > 0
    instants = [e for e in events if e["ph"] == "i"]
    assert sum(e["args"]["num_preempted"] for e in instants) == result.steps["num_preempted"].sum()
    preempted = result.requests[result.requests["preemptions"] > 0]
    for rid, n in zip(preempted["request_id"], preempted["preemptions"]):
        begin = spans[rid][0]
        assert begin["cat"] == "request,preempted" and begin["args"]["preemptions"] == n
    counter_names = {e["name"] for e in events if e["ph"] == "C"}
    assert counter_names == {"waiting requests", "KV slots used"}
    step = next(e for e in events if e["ph"] == "X")
    row = result.steps.iloc[0]
    assert step["args"]["num_prefill_tokens"] == row["num_prefill_tokens"]
    assert step["args"]["kv_capacity_slots"] == row["kv_capacity_slots"]
    assert step["dur"] == pytest.approx(row["duration_s"] * 1e6, abs=1e-3)


def test_one_request_gives_back_its_ttft_and_e2e(result):
    spans = check_trace({"traceEvents": timeline_events(result.requests, result.steps)})
    finished = result.requests[result.requests["finished"]]
    assert len(finished) > 10
    for row in finished.itertuples():
        track = spans[row.request_id]
        begin = track[0]
        assert begin["ph"] == "b" and begin["name"] == f"request {row.request_id}"
        first_token = next(e["ts"] for e in track if e["ph"] == "e" and e["name"] == "prefill")
        end = track[-1]
        assert end["ph"] == "e" and end["name"] == begin["name"]
        assert (first_token - begin["ts"]) / 1e6 == pytest.approx(row.ttft_s, abs=1e-6)
        assert (end["ts"] - begin["ts"]) / 1e6 == pytest.approx(row.e2e_s, abs=1e-6)
        assert [e["name"] for e in track if e["ph"] == "b"][1:] == ["queued", "prefill", "decode"]


def test_unfinished_requests_end_at_the_end_of_the_run(result):
    spans = check_trace({"traceEvents": timeline_events(result.requests, result.steps)})
    end_us = max(result.steps["end_s"].max(), result.requests["arrival_s"].max()) * 1e6
    unfinished = result.requests[result.requests["status"] == "unfinished"]
    for rid in unfinished["request_id"]:
        assert spans[rid][-1]["ts"] == pytest.approx(end_us, abs=1e-3)


def test_window_and_sample_are_deterministic_and_bounded(result):
    lo, hi = 1.0, 2.0
    events = timeline_events(result.requests, result.steps, (lo, hi), max_requests=7)
    assert events == timeline_events(result.requests, result.steps, (lo, hi), max_requests=7)
    spans = check_trace({"traceEvents": events})
    assert len(spans) == 7
    for e in events:
        if e["ph"] == "X":
            assert e["ts"] + e["dur"] >= lo * 1e6 - 1e-3 and e["ts"] <= hi * 1e6 + 1e-3
    in_window = result.requests[(result.requests["arrival_s"] <= hi)
                                & (result.requests["finish_s"].fillna(math.inf) >= lo)]
    assert set(spans) < set(in_window["request_id"])
    # Evenly spaced in arrival order: the first and the last of the window are in the sample.
    ordered = in_window.sort_values(["arrival_s", "request_id"])["request_id"]
    assert {ordered.iloc[0], ordered.iloc[-1]} <= set(spans)
    x_steps = [e for e in events if e["ph"] == "X"]
    assert 0 < len(x_steps) < len(result.steps)


@pytest.mark.parametrize(("text", "expected"), [("1:2", (1.0, 2.0)), ("3:", (3.0, math.inf)), (":4.5", (0.0, 4.5))])
def test_parse_window(text, expected):
    assert parse_window(text) == expected


@pytest.mark.parametrize("text", ["", "5", "a:b", "2:1", "1:1", "-1:3", "nan:1", "1:nan", "inf:"])
def test_bad_window_is_one_line(text):
    with pytest.raises(ConfigError) as err:
        parse_window(text)
    message = str(err.value)
    assert message.startswith("--timeline-window: ") and repr(text) in message and "\n" not in message


def test_options_are_checked_before_simulating(tmp_path):
    with pytest.raises(ConfigError, match="--timeline-max-requests: 0 is not allowed"):
        check_timeline_options(tmp_path / "t.json", None, 0)
    with pytest.raises(ConfigError, match="needs --timeline PATH"):
        check_timeline_options(None, "1:2", None)
    with pytest.raises(ConfigError, match="is a folder"):
        check_timeline_options(tmp_path, None, None)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="which is a file"):
        check_timeline_options(blocker / "t.json", None, None)
    assert check_timeline_options(tmp_path / "new" / "t.json", "1:", 5) == (1.0, math.inf)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "40", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "sim.views.cli", *args], check=False, cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)


def test_cli_writes_the_timeline_and_says_its_size(tmp_path):
    raw = {**RAW, "run": {"seed": 0, "num_requests": 30}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    ok = _cli("run", "s.yaml", "-q", "--timeline", "out/t.json", "--timeline-max-requests", "10", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    size = (tmp_path / "out" / "t.json").stat().st_size
    assert f"Timeline written to out/t.json ({size / 1e6:,.2f} MB" in ok.stdout
    assert len(check_trace(json.loads((tmp_path / "out" / "t.json").read_text()))) == 10
    (tmp_path / "blocker").write_text("x")
    bad = _cli("run", "s.yaml", "-q", "--timeline", "blocker/t.json", cwd=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.startswith("error: --timeline: 'blocker/t.json'") and len(bad.stderr.splitlines()) == 1
    assert "Summary" not in bad.stdout  # refused before simulating
