"""A run as a Chrome trace-event timeline (JSON) that Perfetto (ui.perfetto.dev) and chrome://tracing open.

Layout, per replica (one process each, `pid = replica + 1`; pid 0 holds requests never routed):
- thread 1 "engine steps": every step a complete event ("X") with its tokens, batch and KV use as args;
  an instant event ("i") where a step preempted requests;
- thread 2 "requests": every request a nestable async span ("b"/"e", id = request id) from arrival to
  finish, holding its phases: queued (arrival -> first scheduled), prefill (first scheduled -> first
  token) and decode (first token -> finish). A request that was preempted says how often in its args
  and in its category ("request,preempted"): the per-request records keep the count, not the times, and
  the steps that preempted show as instants on the engine track. In a disaggregated run the request is on
  its prefill replica's track, and between prefill and decode come "wait for decode blocks", "wait for
  link" (each only when it happened) and "transfer" (the KV cache crossing to the decode replica). With a
  front-end (`frontend:`) the span starts when the client sent the request, with "front-end in" (waiting for a
  front-end process, then HTTP, template and tokenization) before "queued", and ends when the client received
  the last chunk, with "front-end out" (the last chunk's wait and work) after "decode"; the chunks streamed
  during "decode" are not drawn one by one, and ttft_s / e2e_s in its args are the client's;
- counters ("C"): waiting requests at each step's start, KV slots in use after each step.

Times are microseconds from the start of the simulation (`ts`), rounded to the nanosecond. A request
still in flight at the end of the run ends at the run's last event; a rejected one where it was rejected.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from sim.atomic_files import GENERATOR_TAG, write_output_file
from sim.errors import ConfigError
from sim.views.output_paths import check_output_file

ENGINE_TID, REQUESTS_TID = 1, 2
# A pipelined replica has several micro-batches in flight: steps that overlap go on extra engine tracks
# (lane k > 0 is thread EXTRA_LANE_TID + k), so every track's slices stay disjoint.
EXTRA_LANE_TID = 100
_US = 1e6


def _us(t_s: float) -> float:
    return round(float(t_s) * _US, 3)


def parse_window(text: str, option: str = "--timeline-window") -> tuple[float, float]:
    """'START:END' in seconds (either side may be empty: open) -> (start_s, end_s)."""
    start, sep, end = str(text).partition(":")
    try:
        if not sep:
            raise ValueError
        lo = float(start) if start.strip() else 0.0
        hi = float(end) if end.strip() else math.inf
    except ValueError:
        raise ConfigError(f"{option}: {text!r} is not START:END in seconds; allowed: e.g. 10:20, 10: or :20") from None
    if not (math.isfinite(lo) and lo >= 0 and not math.isnan(hi) and hi > lo):
        raise ConfigError(f"{option}: {text!r} is not allowed; allowed: 0 <= START < END (seconds)")
    return lo, hi


def check_timeline_path(path: str | Path, option: str = "--timeline") -> None:
    """Before simulating: a file can be written at `path` (the same check as every other output file)."""
    check_output_file(path, option)


def sample_requests(requests: pd.DataFrame, max_requests: int | None) -> pd.DataFrame:
    """At most `max_requests` rows, evenly spaced over the rows in arrival order (deterministic)."""
    if max_requests is None or len(requests) <= max_requests:
        return requests
    ordered = requests.sort_values(["arrival_s", "request_id"], kind="stable")
    picks = np.unique(np.round(np.linspace(0, len(ordered) - 1, max_requests)).astype(np.int64))
    return ordered.iloc[picks]


def _run_end_s(requests: pd.DataFrame, steps: pd.DataFrame) -> float:
    ends = [0.0]
    if len(steps):
        ends.append(float(steps["end_s"].max()))
    for col in ("arrival_s", "finish_s", "client_last_token_s"):
        if len(requests) and col in requests.columns:
            vals = requests[col].to_numpy(dtype=float)
            vals = vals[np.isfinite(vals)]
            if len(vals):
                ends.append(float(vals.max()))
    return max(ends)


def _metadata(pids: list[int], lanes: dict[int, int] | None = None) -> list[dict]:
    events = []
    for pid in pids:
        name = f"replica {pid - 1}" if pid > 0 else "not routed"
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": ENGINE_TID, "args": {"name": "engine steps"}})
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": REQUESTS_TID, "args": {"name": "requests"}})
        for lane in range(1, (lanes or {}).get(pid, 1)):
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": EXTRA_LANE_TID + lane,
                           "args": {"name": f"engine steps (micro-batch lane {lane})"}})
    return events


def _step_lanes(steps: pd.DataFrame) -> tuple[list[int], dict[int, int]]:
    """Each step's engine track: the first lane of its replica free at its start (first fit in start order),
    and the number of lanes per pid. Without overlapping steps every step is on lane 0."""
    lane_of = [0] * len(steps)
    ends: dict[int, list[float]] = {}
    if not len(steps):
        return lane_of, {}
    order = np.argsort(steps["start_s"].to_numpy(), kind="stable")
    replica, start, end = (steps[c].to_numpy() for c in ("replica", "start_s", "end_s"))
    for i in order:
        lanes = ends.setdefault(int(replica[i]) + 1, [])
        # 1 ns of slack: a decode run's summed duration may end a rounding error after the next step starts.
        lane = next((k for k, e in enumerate(lanes) if e <= start[i] + 1e-9), len(lanes))
        if lane == len(lanes):
            lanes.append(end[i])
        else:
            lanes[lane] = end[i]
        lane_of[i] = lane
    return lane_of, {pid: len(lanes) for pid, lanes in ends.items()}


def _step_events(steps: pd.DataFrame, lane_of: list[int]) -> list[dict]:
    events = []
    for s, lane in zip(steps.itertuples(index=False), lane_of):
        pid = int(s.replica) + 1
        tid = EXTRA_LANE_TID + lane if lane else ENGINE_TID
        used = int(s.kv_token_slots + s.kv_reserved_slots + s.kv_internal_slots + s.kv_external_slots)
        capacity = int(s.kv_capacity_slots)
        kind = ("prefill+decode" if s.num_prefill_tokens and s.num_decode_seqs
                else "prefill" if s.num_prefill_tokens else "decode")
        start, end = _us(s.start_s), _us(s.start_s + s.duration_s)
        events.append({
            "ph": "X", "name": kind, "cat": "step", "pid": pid, "tid": tid, "ts": start, "dur": round(end - start, 3),
            "args": {"num_seqs": int(s.num_seqs), "num_prefill_tokens": int(s.num_prefill_tokens),
                     "num_decode_seqs": int(s.num_decode_seqs), "num_output_tokens": int(s.num_output_tokens),
                     "num_waiting": int(s.num_waiting), "num_preempted": int(s.num_preempted),
                     "kv_used_slots": used, "kv_capacity_slots": capacity,
                     "kv_used_fraction": round(used / capacity, 6) if capacity else None,
                     "swap_in_tokens": int(s.swap_in_tokens), "swap_out_tokens": int(s.swap_out_tokens)},
        })
        if s.num_preempted:
            events.append({"ph": "i", "name": "preempted", "cat": "preemption", "s": "t", "pid": pid, "tid": tid,
                           "ts": end, "args": {"num_preempted": int(s.num_preempted)}})
        events.append({"ph": "C", "name": "waiting requests", "pid": pid, "tid": 0, "ts": start,
                       "args": {"waiting": int(s.num_waiting)}})
        events.append({"ph": "C", "name": "KV slots used", "pid": pid, "tid": 0, "ts": end,
                       "args": {"tokens": int(s.kv_token_slots), "reserved": int(s.kv_reserved_slots),
                                "fragmented": int(s.kv_internal_slots + s.kv_external_slots)}})
    return events


def _finite(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


# Disaggregated runs (sim/core/disaggregated.py): between prefill and decode, on the request's prefill replica's
# track, the wait for decode blocks, the wait for the prefill replica's link, and the KV transfer.
DISAGGREGATED_PHASES = ["wait for decode blocks", "wait for link", "transfer"]
WAIT_PHASES = frozenset(DISAGGREGATED_PHASES[:2])


def _request_events(requests: pd.DataFrame, run_end_s: float) -> list[dict]:
    events = []
    disaggregated = "transfer_start_s" in requests.columns
    frontend = "client_send_s" in requests.columns
    keys = ("ttft_s", "e2e_s", "queueing_s") + (("engine_ttft_s", "engine_e2e_s", "frontend_in_s",
                                                  "frontend_out_first_s", "frontend_out_last_s") if frontend else ())
    for r in requests.itertuples(index=False):
        rid = int(r.request_id)
        pid = int(r.replica) + 1 if int(r.replica) >= 0 else 0
        status = str(r.status)
        if _finite(r.finish_s):
            end_s = float(r.finish_s)
        else:  # still in flight at the end of the run; a rejection without a time ends where it arrived
            end_s = float(r.arrival_s) if status == "rejected" else run_end_s
        preempted = int(r.preemptions)
        cat = "request,preempted" if preempted else "request"
        base = {"cat": cat, "id": rid, "pid": pid, "tid": REQUESTS_TID}
        args = {"request_id": rid, "status": status, "prompt_tokens": int(r.prompt_tokens),
                "output_tokens": int(r.output_tokens), "preemptions": preempted}
        for key in keys:
            value = getattr(r, key)
            args[key] = float(value) if _finite(value) else None
        if status == "rejected" and getattr(r, "reject_reason", ""):
            args["reject_reason"] = str(r.reject_reason)
        name = f"request {rid}"
        start_s = float(r.client_send_s) if frontend else float(r.arrival_s)
        events.append({**base, "ph": "b", "name": name, "ts": _us(start_s), "args": args})
        names, times = ["queued", "prefill", "decode"], [r.first_scheduled_s, r.first_token_s, r.finish_s]
        if disaggregated and (_finite(r.decode_reserved_s) or (_finite(r.first_token_s) and not _finite(r.finish_s))):
            names[2:2] = DISAGGREGATED_PHASES
            times[2:2] = [r.decode_reserved_s, r.transfer_start_s, r.transfer_end_s]
        if frontend:
            names.insert(0, "front-end in")
            times.insert(0, r.arrival_s)
            if _finite(r.finish_s) and _finite(r.client_last_token_s):
                names.append("front-end out")
                times.append(r.client_last_token_s)
                end_s = max(end_s, float(r.client_last_token_s))
        marks = [start_s] + [float(x) if _finite(x) else None for x in times]
        for i, phase in enumerate(names):
            start = marks[i]
            if start is None:
                break
            stop = marks[i + 1] if marks[i + 1] is not None else end_s
            if phase not in WAIT_PHASES or stop > start:  # a wait that did not happen is left out
                events.append({**base, "ph": "b", "name": phase, "ts": _us(start)})
                events.append({**base, "ph": "e", "name": phase, "ts": _us(stop)})
            if marks[i + 1] is None:
                break
        events.append({**base, "ph": "e", "name": name, "ts": _us(end_s)})
    return events


def timeline_events(requests: pd.DataFrame, steps: pd.DataFrame, window: tuple[float, float] | None = None,
                    max_requests: int | None = None) -> list[dict]:
    """The trace events of one run: steps and requests that overlap `window` (seconds; None: all), at most
    `max_requests` of those requests (evenly spaced in arrival order); sorted by time, metadata first."""
    run_end_s = _run_end_s(requests, steps)
    lo, hi = window if window is not None else (0.0, math.inf)
    if len(steps):
        steps = steps[(steps["end_s"] >= lo) & (steps["start_s"] <= hi)]
    if len(requests):
        frontend = "client_send_s" in requests.columns  # a request's span: from the client's send to its receipt
        ends = requests["finish_s"]
        if frontend:
            ends = ends.where(ends.isna(), requests["client_last_token_s"])
        ends = ends.fillna(run_end_s)
        requests = requests[(requests["client_send_s" if frontend else "arrival_s"] <= hi) & (ends >= lo)]
    requests = sample_requests(requests, max_requests)
    lane_of, lanes = _step_lanes(steps)
    body = _step_events(steps, lane_of) + _request_events(requests, run_end_s)
    body.sort(key=lambda e: e["ts"])  # stable: a request's b/e pairs keep their order at equal times
    pids = sorted({int(e["pid"]) for e in body})
    return _metadata(pids, lanes) + body


def write_timeline(result, path: str | Path, window: tuple[float, float] | None = None,
                   max_requests: int | None = None) -> dict:
    """Write `result`'s timeline to `path` atomically; returns {bytes, steps, requests} written."""
    events = timeline_events(result.requests, result.steps, window, max_requests)
    doc = {"otherData": {"generator": GENERATOR_TAG, "run": str(result.name),
                         "window_s": None if window is None else [window[0], None if math.isinf(window[1]) else window[1]],
                         "max_requests": max_requests},
           "traceEvents": events, "displayTimeUnit": "ms"}
    text = json.dumps(doc, separators=(",", ":"), allow_nan=False)
    write_output_file(path, text, "--timeline")
    return {"bytes": len(text.encode()), "steps": sum(1 for e in events if e["ph"] == "X"),
            "requests": sum(1 for e in events if e["ph"] == "b" and e["name"].startswith("request "))}


def check_timeline_options(path: str | Path | None, window_text: str | None,
                           max_requests: int | None) -> tuple[float, float] | None:
    """The CLI's --timeline options, checked before any simulating; returns the window (None: all)."""
    if path is None:
        for option, value in (("--timeline-window", window_text), ("--timeline-max-requests", max_requests)):
            if value is not None:
                raise ConfigError(f"{option}: {value!r} needs --timeline PATH (the file to write the timeline to)")
        return None
    if max_requests is not None and (isinstance(max_requests, bool) or max_requests < 1):
        raise ConfigError(f"--timeline-max-requests: {max_requests!r} is not allowed; allowed: an integer >= 1")
    window = None if window_text is None else parse_window(window_text)
    check_timeline_path(path)
    return window
