"""Results: the per-request and per-step records and the summary computed from them.

The summary reads the records as `Table`s (numpy columns, `sim.table`); the DataFrames users see
(`Result.requests`, `Result.steps`) are built from the same arrays when first read.

Every summary metric is computed here, one small function per group (counts, throughput, latencies, SLOs,
utilization, Little's law, KV memory, speculation) called from `summarize`; `sim.run.simulate` only
hands over the records and the replicas' counters (`ReplicaCounters`, plain values).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.config.engines.presets import engine_spelling
from sim.core.engine import STATUS_CODES
from sim.errors import ConfigError
from sim.gap_scan import gap_rows
from sim.kv.base import PrefixCacheStats
from sim.machine import plain_pages
from sim.slot_seconds import run_step_products
from sim.table import Table, as_table

PERCENTILES = (50, 90, 99)
_NO_INTS = np.zeros(0, dtype=np.int64)  # an integer argument a compiled pass does not read (numba types it)
_NO_FLOATS = np.zeros(0)  # the same, for floats


# Step-log columns the summary weights by time: the KV memory split (`utilization`) and the memory saved by
# sharing (`kv_memory`).
KV_TIME_WEIGHTED = ("kv_capacity_slots", "kv_token_slots", "kv_reserved_slots", "kv_internal_slots",
                    "kv_external_slots", "kv_shared_slots")


# Summary keys that are float sums over steps: with decode runs (`run.fast_decode`) a run's row sums its steps'
# durations, FLOPs, bytes and KV slot-seconds first and the summary then sums the rows, so these equal the
# step-by-step values to float rounding, not bit for bit (every other key is identical).
REASSOCIATED_SUM_KEYS = frozenset({
    "busy_fraction", "mbu", "mfu", "itl_mean", "kv_token_fraction", "kv_reserved_fraction", "kv_internal_fraction",
    "kv_external_fraction", "kv_token_share", "kv_free_fraction", "kv_fig2_external_fraction",
    "kv_fig2_free_fraction", "kv_shared_bytes_mean"})


def same_up_to_reassociation(a, b, key: str = "") -> bool:
    """Whether two runs' figures agree: equal, NaN equal to NaN (a metric of no requests), recursively through dicts,
    lists and tuples, the REASSOCIATED_SUM_KEYS to float rounding (the planner's shortcuts and decode runs split the
    steps differently)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_up_to_reassociation(a[k], b[k], k) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_up_to_reassociation(x, y, key) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if key in REASSOCIATED_SUM_KEYS and isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12)
    return a == b


@dataclass(frozen=True)
class DecodeRuns:
    """The steps inside the decode runs of a step log (`run.fast_decode`: rows with `num_steps` > 1), run
    after run in row order: what step-by-step simulation would have logged for each, so the summary and
    `expand_steps` weight every step by its own duration and state.

    `step_duration_s`: every step of every run row (a run's row `duration_s` is their sum). `kv`: the KV
    columns of every step of every run but its last (the row itself holds the last step's state);
    `kv_capacity_slots` is not kept: a replica's capacity never changes."""

    step_duration_s: np.ndarray
    kv: dict[str, np.ndarray]

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> DecodeRuns:
        """From `StepLog.run_arrays()`."""
        arrays = dict(arrays)
        return cls(arrays.pop("step_duration_s"), arrays)


@dataclass(frozen=True)
class _RunLayout:
    """Where each run row's steps are: `rows` (positions in the step log), `num_steps`, `first` (index of its
    first step in `DecodeRuns.step_duration_s`), `last` (of its last) and `inner_first` (of its first step
    in `DecodeRuns.kv`)."""

    rows: np.ndarray
    num_steps: np.ndarray
    first: np.ndarray
    last: np.ndarray
    inner_first: np.ndarray


def _run_layout(steps: Table, runs: DecodeRuns | None) -> _RunLayout | None:
    """The run rows of `steps` and where their steps are in `runs`; None when there is nothing to expand
    (no runs recorded, or no row stands for more than one step)."""
    if runs is None or "num_steps" not in steps:
        return None
    counts = np.asarray(steps["num_steps"])
    rows = np.flatnonzero(counts > 1)
    if not len(rows):
        return None
    k = counts[rows]
    first = np.cumsum(k) - k
    inner_first = first - np.arange(len(rows))  # each earlier run keeps one step fewer in `kv`
    num_inner = int(k.sum()) - len(rows)
    if len(runs.step_duration_s) != int(k.sum()) or any(len(col) != num_inner for col in runs.kv.values()):
        raise ValueError(f"decode runs: {len(runs.step_duration_s)} step durations for {int(k.sum())} run steps in "
                         "the step log; pass the DecodeRuns of the same, unfiltered step log")
    return _RunLayout(rows, k, first, first + k - 1, inner_first)


def _run_step_starts_s(steps: Table, runs: DecodeRuns, layout: _RunLayout) -> np.ndarray:
    """Start time of every run step (aligned with `runs.step_duration_s`), each the previous start plus the
    previous step's duration as a float sum, as the simulation clock advanced step by step. Vectorised
    over runs, one pass per step index: runs longest first, so the runs still going are a prefix."""
    order = np.argsort(-layout.num_steps, kind="stable")
    k, first = layout.num_steps[order], layout.first[order]
    clock = _floats(steps, "start_s")[layout.rows][order]
    starts = np.empty(len(runs.step_duration_s))
    num_going = np.searchsorted(-k, -np.arange(int(k[0])), side="left")  # runs with more than i steps
    for i, n in enumerate(num_going):
        at = first[:n] + i
        starts[at] = clock[:n]
        clock[:n] = clock[:n] + runs.step_duration_s[at]
    return starts


def kv_slot_seconds(steps: Table | pd.DataFrame, runs: DecodeRuns | None = None,
                    columns: tuple[str, ...] = KV_TIME_WEIGHTED) -> dict[str, np.ndarray]:
    """Per step row, the time integral of each KV column over its steps (slot-seconds): value x duration for
    a single step; for a decode run, its steps' own durations times their own states, summed step by step
    (with `runs`). Without `runs`, a run's row counts its end-of-run state for its whole duration."""
    steps = as_table(steps)
    durations = _floats(steps, "duration_s")
    layout = _run_layout(steps, runs)
    products = None if layout is None else np.empty(len(runs.step_duration_s) - len(layout.rows))
    out = {}
    for col in columns:
        state = _numbers(steps, col)  # (an int column as it is: the products convert it, exactly, as they go)
        out[col] = state * durations
        if layout is not None:
            end_state = state[layout.rows]
            constant = col not in runs.kv  # the capacity: the run's end state at every step
            run_step_products(runs.step_duration_s, layout.first, layout.num_steps, layout.inner_first,
                              _NO_INTS if constant else runs.kv[col], end_state, constant, products)
            out[col][layout.rows] = (np.add.reduceat(products, layout.inner_first)
                                     + runs.step_duration_s[layout.last] * end_state)
    return out


class Result:
    """What one simulation produced. `requests` and `steps` are the records (DataFrames); `summary` is derived.
    `decode_runs`: the steps inside the step log's decode runs (`run.fast_decode`), None without any.

    `requests` and `steps` may be given as Tables (`requests_table`, `steps_table`): the DataFrames are then
    built from them when first read. A planner reads hundreds of summaries and no frame."""

    def __init__(self, name: str, scenario, requests, steps, summary: dict, extras: dict | None = None,
                 decode_runs: DecodeRuns | None = None):
        self.name, self.scenario, self.summary = name, scenario, summary  # scenario: the validated Scenario
        self._requests, self._steps = requests, steps
        self.extras = extras if extras is not None else {}
        self.decode_runs = decode_runs

    def first_reject_reason(self) -> str:
        """Why the rejected request of the lowest id can never run here; "" when none was rejected. Where the
        scenario names an engine, the scheduler keys the reason names follow as that engine's flags
        (`engine_spelling`); requests.parquet's `reject_reason` keeps the scheduler's words."""
        if isinstance(self._requests, RequestTable):
            reasons = self._requests.reject_reason
            reason = reasons[min(reasons)] if reasons else ""
        else:
            rejected = self.requests.loc[self.requests["status"] == "rejected"].sort_values("request_id")
            reason = str(rejected["reject_reason"].iloc[0]) if len(rejected) else ""
        flags = engine_spelling(reason, self.scenario) if reason and self.scenario is not None else ""
        return f"{reason}; {flags}" if flags else reason

    @property
    def requests(self) -> pd.DataFrame:
        if isinstance(self._requests, Table):
            self._requests = requests_frame_of(self._requests)
        return self._requests

    @property
    def steps(self) -> pd.DataFrame:
        if isinstance(self._steps, Table):
            self._steps = pd.DataFrame(self._steps.columns, copy=False)  # the table's arrays, not a second copy
        return self._steps

    @property
    def records(self) -> tuple:
        """(requests, steps) as stored: Tables, or DataFrames once read as frames; the summary functions take either."""
        return self._requests, self._steps

    def request_column(self, name: str) -> np.ndarray:
        """One column of the request records as an array, without building the DataFrame when it is not yet."""
        if isinstance(self._requests, Table) and name in self._requests:
            return self._requests[name]
        return self.requests[name].to_numpy()

    def __repr__(self) -> str:
        return f"Result({self.name!r}, summary with {len(self.summary)} keys)"


class RequestTable(Table):
    """`requests_table`: the request records' columns (status as its STATUS_CODES code) and the reasons of
    rejected requests by request id, for the DataFrame's `reject_reason` column."""

    __slots__ = ("reject_reason",)

    def __init__(self, columns: dict[str, np.ndarray], reject_reason: dict[int, str]):
        super().__init__(columns)
        self.reject_reason = reject_reason


def requests_table(log) -> RequestTable:
    """The records of the requests that arrived, and their latencies (NaN where a token never came)."""
    ids = np.nonzero(log.status >= 0)[0]
    t = {"request_id": ids}
    for name in _REQUEST_LOG_COLUMNS:
        t[name] = getattr(log, name)[ids]
    t["finished"] = t["status"] == STATUS_CODES["finished"]
    t["ttft_s"] = t["first_token_s"] - t["arrival_s"]
    t["queueing_s"] = t["first_scheduled_s"] - t["arrival_s"]
    t["e2e_s"] = t["finish_s"] - t["arrival_s"]
    gen = t["output_tokens"]
    with np.errstate(invalid="ignore", divide="ignore"):
        t["tpot_s"] = np.where(gen > 1, (t["last_token_s"] - t["first_token_s"]) / (gen - 1), np.nan)
        t["normalized_latency_s"] = np.where(gen > 0, t["e2e_s"] / gen, np.nan)
    return RequestTable(t, log.reject_reason)


_REQUEST_LOG_COLUMNS = ("replica", "arrival_s", "first_scheduled_s", "first_token_s", "last_token_s", "finish_s",
                        "prompt_tokens", "output_tokens", "max_output_tokens", "preemptions", "status")
# STATUS_CODES numbers the statuses 0, 1, 2 in this order: a code is its category's position.
_STATUS_CATEGORIES = sorted(STATUS_CODES, key=STATUS_CODES.get)
assert [STATUS_CODES[name] for name in _STATUS_CATEGORIES] == list(range(len(STATUS_CODES)))


# The front-end's columns (sim/frontend.py), present only when the scenario has a `frontend:` section.
CLIENT_COLUMNS = ("client_send_s", "frontend_process", "client_first_token_s", "client_last_token_s",
                  "frontend_in_s", "frontend_out_first_s", "frontend_out_last_s")
# With the front-end, the latency columns are the client's and the engine's keep these names.
ENGINE_LATENCIES = {"ttft_s": "engine_ttft_s", "tpot_s": "engine_tpot_s", "e2e_s": "engine_e2e_s"}


def with_client_side(table: RequestTable, request_ids: np.ndarray, client: dict[str, np.ndarray]) -> RequestTable:
    """The request records with the front-end's columns: `request_ids` (the workload's numbering of each row:
    the engine numbers requests in the order they reach it) replace the engine's, rows in their order, and
    `client` (aligned with `table`'s rows: client_send_s, frontend_process, client_first_token_s,
    client_last_token_s) is added with the front-end's share of each latency:

    - frontend_in_s: client send -> engine arrival (the benchmark client's own sending where modelled, waiting for
      a process, then the inbound work);
    - frontend_out_first_s / frontend_out_last_s: the engine's first / last token -> the client's.

    The latencies become what the client measures, as `vllm bench serve` does: ttft_s from send to the first
    streamed token, e2e_s from send to the last, tpot_s (last - first) / (tokens - 1) on the client's times,
    normalized_latency_s their e2e_s per token; the engine's own TTFT, TPOT and E2E stay as engine_ttft_s,
    engine_tpot_s and engine_e2e_s. queueing_s stays the engine's queue (arrival -> first scheduled)."""
    request_ids = np.asarray(request_ids, dtype=np.int64)
    if len(request_ids) < 2 or bool((request_ids[1:] > request_ids[:-1]).all()):
        # Already in order (an open loop whose front-end keeps the arrival order, a closed loop): the columns as
        # they are, not a copy each (25 columns of 1M requests: 0.25 s)
        t = dict(table.columns)
        t["request_id"] = request_ids
        t.update({name: np.asarray(column) for name, column in client.items()})
    else:
        order = np.argsort(request_ids, kind="stable")
        t = {name: column[order] for name, column in table.columns.items()}
        t["request_id"] = request_ids[order]
        for name, column in client.items():
            t[name] = np.asarray(column)[order]
    t["frontend_in_s"] = t["arrival_s"] - t["client_send_s"]
    t["frontend_out_first_s"] = t["client_first_token_s"] - t["first_token_s"]
    t["frontend_out_last_s"] = t["client_last_token_s"] - t["last_token_s"]
    for name, engine_name in ENGINE_LATENCIES.items():
        t[engine_name] = t[name]
    t["ttft_s"] = t["client_first_token_s"] - t["client_send_s"]
    t["e2e_s"] = np.where(t["finished"], t["client_last_token_s"] - t["client_send_s"], np.nan)
    gen = t["output_tokens"]
    with np.errstate(invalid="ignore", divide="ignore"):
        t["tpot_s"] = np.where(gen > 1, (t["client_last_token_s"] - t["client_first_token_s"]) / (gen - 1), np.nan)
        t["normalized_latency_s"] = np.where(gen > 0, t["e2e_s"] / gen, np.nan)
    engine_ids = np.asarray(table["request_id"], dtype=np.int64)
    to_workload = dict(zip(engine_ids.tolist(), np.asarray(request_ids).tolist())) if table.reject_reason else {}
    reasons = {to_workload[i]: reason for i, reason in table.reject_reason.items()}
    return RequestTable(t, reasons)


def requests_frame_of(table: RequestTable) -> pd.DataFrame:
    """The requests DataFrame of a `requests_table`: its columns, `status` by name (categorical) and the
    rejected requests' `reject_reason` ("" for the others)."""
    columns = dict(table.columns)
    finished = columns.pop("finished")
    latencies = {name: columns.pop(name) for name in ("ttft_s", "queueing_s", "e2e_s", "tpot_s",
                                                      "normalized_latency_s")}
    columns["status"] = pd.Categorical.from_codes(columns["status"], categories=_STATUS_CATEGORIES)
    columns["finished"] = finished
    ids = columns["request_id"]
    reasons = table.reject_reason
    columns["reject_reason"] = pd.array([reasons.get(int(i), "") for i in ids] if reasons else [""] * len(ids),
                                        dtype="string")
    columns.update(latencies)
    return pd.DataFrame(columns, copy=False)  # the columns are fresh arrays already


def requests_frame(log) -> pd.DataFrame:
    return requests_frame_of(requests_table(log))


def steps_table(step_arrays: dict) -> Table:
    """The step log's columns, each step's end and the free KV memory an allocation can use."""
    t = Table({name: np.asarray(column) for name, column in step_arrays.items()})
    t["end_s"] = t["start_s"] + t["duration_s"]
    if "kv_capacity_slots" in t:
        # Free memory an allocation can use: capacity less token states, reserved, internal and external.
        t["kv_free_slots"] = t["kv_capacity_slots"] - (t["kv_token_slots"] + t["kv_reserved_slots"]
                                                       + t["kv_internal_slots"] + t["kv_external_slots"])
    return t


def steps_frame(step_arrays: dict) -> pd.DataFrame:
    # copy=False: the frame holds the log's arrays as they are (no second copy: 1M requests make ~3M rows).
    return pd.DataFrame(steps_table(step_arrays).columns, copy=False)


def _floats(table: Table, name: str) -> np.ndarray:
    """A column as float64 (the column itself when it is one already)."""
    return np.asarray(table[name], dtype=float)


def _numbers(table: Table, name: str) -> np.ndarray:
    """A column as its ints or floats, without a float copy of an int column (which a product with floats converts
    element by element, to the same values); any other kind as float64."""
    column = np.asarray(table[name])
    return column if column.dtype.kind in "iuf" else column.astype(float)


def expand_steps(steps: pd.DataFrame, runs: DecodeRuns | None = None) -> pd.DataFrame:
    """One row per engine step: each decode run's row (`num_steps` > 1) repeated for its steps. With `runs`
    (`Result.decode_runs`) each step gets its own start, duration and KV state, exactly as step-by-step
    simulation logs them; its tokens, FLOPs and bytes are the run's shared out (tokens exactly: every step
    of a run samples the same ones). Without `runs` (a step log read back from a file) the steps get the
    run's mean step time and the KV columns the run's end state. Rows of single steps are returned as they
    are; a run's steps follow each other, so with several replicas the order is not the step-by-step one."""
    counts = steps["num_steps"].to_numpy()
    if (counts == 1).all():
        return steps.copy()
    out = steps.loc[steps.index.repeat(counts)].reset_index(drop=True)
    k = np.repeat(counts, counts)
    layout = _run_layout(steps, runs)
    if layout is None:
        i = np.arange(len(out)) - np.repeat(np.cumsum(counts) - counts, counts)  # step index within its row
        step_s = out["duration_s"].to_numpy() / k
        out["start_s"] = out["start_s"].to_numpy() + i * step_s
        out["duration_s"] = step_s
    else:
        in_run = np.flatnonzero(k > 1)  # positions of run steps, in the order `runs` keeps them
        inner = np.ones(len(in_run), dtype=bool)
        inner[layout.last] = False
        for col, values in (("start_s", _run_step_starts_s(steps, runs, layout)),
                            ("duration_s", runs.step_duration_s)):
            column = out[col].to_numpy(copy=True)
            column[in_run] = values
            out[col] = column
        for col, values in runs.kv.items():
            column = out[col].to_numpy(copy=True)
            column[in_run[inner]] = values
            out[col] = column
        if "kv_free_slots" in out:
            out["kv_free_slots"] = out["kv_capacity_slots"] - (out["kv_token_slots"] + out["kv_reserved_slots"]
                                                               + out["kv_internal_slots"] + out["kv_external_slots"])
    out["end_s"] = out["start_s"] + out["duration_s"]
    for col in ("num_output_tokens", "flops", "bytes"):
        out[col] = out[col] / k if out[col].dtype.kind == "f" else out[col] // k
    out["num_steps"] = 1
    return out


def _stats(values: np.ndarray, prefix: str) -> dict:
    values = values[~np.isnan(values)]
    out = {f"{prefix}_mean": float(values.mean()) if len(values) else math.nan}
    # One call for every percentile (one partition): each is the number a call of its own gives.
    at = np.percentile(values, PERCENTILES) if len(values) else [math.nan] * len(PERCENTILES)
    for p, value in zip(PERCENTILES, at):
        out[f"{prefix}_p{p}"] = float(value)
    return out


def weighted_percentiles(values: np.ndarray, weights: np.ndarray, qs) -> list[float]:
    """The smallest value of positive weight whose cumulative weight (values in increasing order) reaches q% of
    the total, for each q. Equal values may sort in any order: the value found is the same."""
    if len(values) > BUCKETED_ABOVE and np.issubdtype(weights.dtype, np.integer) and weights.min() >= 0:
        total = int(weights.sum())
        if total == 0:
            return [math.nan for _ in qs]
        if total < 2**53:  # every cumulative weight exact, in any order: the bucketed search finds the sort's values
            return _bucketed_weighted_percentiles(values, weights, qs, total)
    keep = weights > 0
    values, weights = values[keep], weights[keep]
    if not len(values):
        return [math.nan for _ in qs]
    order = np.argsort(values)
    cum = np.cumsum(weights[order])
    ordered = values[order]
    return [float(ordered[np.searchsorted(cum, q / 100.0 * cum[-1], side="left")]) for q in qs]


# Above this many values, weighted_percentiles sorts only the values of the bucket each percentile falls in (of
# PERCENTILE_BUCKETS equal-width buckets between the smallest and the largest value), bucketing that bucket again
# while it holds more: a few passes instead of sorting millions (the inter-token latency of a 1M-request run:
# 5M steps, 0.37 s sorted).
BUCKETED_ABOVE = 1 << 16
PERCENTILE_BUCKETS = 4096


def _bucketed_weighted_percentiles(values: np.ndarray, weights: np.ndarray, qs, total: int) -> list[float]:
    """`weighted_percentiles` without the full sort, for whole-number weights of this `total`. Values of weight 0
    stay in (no copy of millions without them): with every target at least 1, which finds what the target does
    (cumulative weights are whole numbers), a value of weight 0 is never the first to reach one."""
    targets = np.maximum(np.asarray([q / 100.0 * total for q in qs], dtype=np.float64), 1.0)
    return [float(v) for v in _find_weighted(values, weights, targets, 0)]


def _find_weighted(values: np.ndarray, weights: np.ndarray, targets: np.ndarray, below: int) -> np.ndarray:
    """For each target, the first value (in increasing order) at which `below` plus the cumulative weight reaches
    it; `below`: the weight of every value smaller than these."""
    lo, hi = values.min(), values.max()
    with np.errstate(over="ignore"):  # a spread too narrow to bucket (subnormal) gives inf: sorted below
        scale = PERCENTILE_BUCKETS / (hi - lo) if np.isfinite(lo) and np.isfinite(hi) and hi > lo else math.inf
    if len(values) <= BUCKETED_ABOVE or not math.isfinite(scale):
        # few values, all equal (or not finite), or a spread too narrow to bucket: sorted
        order = np.argsort(values)
        within = below + np.cumsum(weights[order])
        at = np.minimum(np.searchsorted(within, targets, side="left"), len(values) - 1)
        return values[order][at]
    # (v - lo) * scale is non-decreasing in v, so the buckets are in the values' order. In ordinary pages
    # (sim.machine.plain_pages): each is 20-40 MB of a 5M-step run's, written once.
    scaled = plain_pages(values.shape, np.float64)
    np.subtract(values, lo, out=scaled)
    scaled *= scale
    bucket = plain_pages(values.shape, np.int32)
    np.copyto(bucket, scaled, casting="unsafe")  # truncated toward zero, as astype does
    del scaled
    np.minimum(bucket, PERCENTILE_BUCKETS - 1, out=bucket)
    cum = below + np.cumsum(np.bincount(bucket, weights=weights, minlength=PERCENTILE_BUCKETS).astype(np.int64))
    # The first bucket whose cumulative weight reaches a target holds its value (an empty bucket never is first:
    # its cumulative weight is its predecessor's).
    which = np.minimum(np.searchsorted(cum, targets, side="left"), PERCENTILE_BUCKETS - 1)
    out = np.empty(len(targets), dtype=values.dtype)
    for b in np.unique(which):
        inside = bucket == b
        mine = which == b
        out[mine] = _find_weighted(values[inside], weights[inside], targets[mine], int(cum[b - 1]) if b else below)
    return out


@dataclass(frozen=True)
class ReplicaCounters:
    """What the summary needs from one replica's scheduler after a run, as plain values (`sim.run` reads them)."""

    kv_capacity_tokens: int  # token states the replica's KV cache holds
    kv_layout: str = "paged"  # "paged" or "contiguous": how the vLLM paper's Fig. 2 counts free memory (utilization)
    prefix_cache: PrefixCacheStats | None = None  # lookups, hits and evictions; None: prefix caching off
    num_drafted: int | None = None  # speculative decoding: draft tokens proposed; None: no speculation
    num_accepted_drafts: int | None = None  # of those, accepted by the target
    num_verifications: int | None = None  # verification passes, one a member a step
    window_freed_blocks: int | None = None  # paged blocks freed as they fell out of the sliding window; None: no window


# The request latencies whose mean and percentiles a summary gives; a lean one (`summarize(lean=True)`) the first three.
LATENCIES = ("ttft_s", "tpot_s", "e2e_s", "queueing_s", "normalized_latency_s")
LEAN_LATENCIES = LATENCIES[:3]


def summarize(requests: Table | pd.DataFrame, steps: Table | pd.DataFrame, *, elapsed_s: float, slo, gpu,
              in_system_area: float, num_generated: int, replicas: list[ReplicaCounters],
              kv_bytes_per_token: int, num_clipped: int = 0, max_model_len: int | None = None,
              window: tuple[float, float] | None = None, decode_runs: DecodeRuns | None = None,
              lean: bool | str = False, frontend: FrontendCounters | None = None) -> dict:
    """Every summary metric of a run, one group at a time (the keys keep this order in every output).

    `requests`, `steps`: the records as Tables (`requests_table`, `steps_table`) or DataFrames.
    `window`: (start_s, end_s) of the steady-state window (`measurement_window`); its metrics come last,
    under `window_` keys, beside the whole-run ones. None: no window keys.
    `decode_runs`: the steps inside the step log's decode runs, so that step-weighted and time-weighted
    metrics count each step as step-by-step simulation does (see `DecodeRuns`).
    `lean`: only what a capacity planner reads of its hundreds of runs: the counts, throughput, the
    percentiles of TTFT, TPOT and E2E (LEAN_LATENCIES), preemptions, the SLO keys, the batch size, the busy
    fraction and the KV token share. Each is the full summary's value (tests/integration/test_lean_summary.py
    compares them); the other keys are left out. `lean="band"`: the same without the batch size, busy fraction
    and KV share, what a band's own runs are read for (sim/bands.py: BAND_METRICS and the SLO keys).
    `frontend`: the front-end's counters, when the run has one (the records then hold its columns,
    `with_client_side`): its keys (`frontend_metrics`) follow the speculation keys, and the latency keys, the
    SLO checks and the offered load are the client's."""
    requests, steps = as_requests(requests), as_table(steps)
    fin = requests[requests["finished"]]
    elapsed = max(elapsed_s, 1e-12)
    s = request_counts(requests, fin, elapsed_s, num_generated)
    s.update(throughput(requests, fin, steps, elapsed))
    s.update(load_and_sustained_rates(requests, steps, decode_runs, s, window))
    s.update(latencies(fin, steps, decode_runs, lean=bool(lean),
                       speculative=any(r.num_drafted is not None for r in replicas)))
    s["preemptions"] = int(requests["preemptions"].sum())
    s.update(slo_metrics(requests, fin, slo, elapsed, all_done=s["num_unfinished"] == 0, known=s if lean else None))
    if lean == "band":
        return s
    s.update(utilization(steps, elapsed, gpu, contiguous=replicas[0].kv_layout == "contiguous", runs=decode_runs,
                         lean=bool(lean)))
    if lean:
        return s
    s.update(littles_law(requests, fin, in_system_area, elapsed))
    s.update(kv_memory(steps, replicas, kv_bytes_per_token, decode_runs))
    s.update(speculation_metrics(replicas))
    if frontend is not None:
        engine_itl = {key: s[key] for key in ITL_KEYS}
        if not frontend.client_gaps_are_engine_steps:
            s.update(client_itl(fin, frontend.tokens_per_chunk))
        s.update(frontend_metrics(fin, frontend, elapsed))
        s.update({f"engine_{key}": value for key, value in engine_itl.items()})
    s.update(limits(steps, num_clipped, max_model_len))
    if window is not None:
        s.update(window_metrics(requests, steps, *window, runs=decode_runs))
    return s


def as_requests(requests: Table | pd.DataFrame) -> Table:
    """Request records as a Table, `status` as its STATUS_CODES code (a DataFrame's holds the names)."""
    return as_table(requests, codes={"status": STATUS_CODES})


def _count_status(requests: Table, status: str) -> int:
    return int((requests["status"] == STATUS_CODES[status]).sum())


WINDOW_LATENCIES = ("ttft_s", "tpot_s", "e2e_s", "queueing_s")


def measurement_window(requests: Table | pd.DataFrame, warmup_s: float, cooldown_s: float,
                       arrivals_end_s: float | None = None) -> tuple[float, float]:
    """The steady-state window [warmup_s, arrivals_end_s - cooldown_s): time 0 is the run's start, and the
    arrivals end at `arrivals_end_s` (run.duration_s) or, without it, at the last arrival. A window of no
    length is the user's error (ConfigError naming run.warmup_s and run.cooldown_s)."""
    if arrivals_end_s is None:
        arrivals_end_s = float(np.max(requests[sent_column(requests)])) if len(requests) else 0.0
    start, end = float(warmup_s), float(arrivals_end_s) - float(cooldown_s)
    if end <= start:
        raise ConfigError(f"run.warmup_s, run.cooldown_s: {warmup_s:g} s and {cooldown_s:g} s leave no measurement "
                          f"window in arrivals that end at {arrivals_end_s:g} s; their sum must be below that")
    return start, end


def window_metrics(requests: Table | pd.DataFrame, steps: Table | pd.DataFrame, start_s: float, end_s: float,
                   runs: DecodeRuns | None = None) -> dict:
    """The steady state only: what happened in [start_s, end_s), without the warm-up and the drain.

    Latencies are those of the finished requests that ARRIVED in the window (a request arriving in it
    and unfinished at the horizon is counted in `window_num_unfinished`, not in the latencies).
    Throughput counts completions IN the window, whenever their request arrived, over the window's
    length: the sustained rate, which equals the arrival rate when the system keeps up (the whole-run
    `throughput_rps` divides by a time that includes the drain). Output tokens are those of the steps
    ending in the window (a decode run's steps each at their own end, with `runs`). A window in which no
    request arrived gets NaN latencies and a `window_note`.
    """
    requests, steps = as_requests(requests), as_table(steps)
    length = end_s - start_s
    arrival = _floats(requests, sent_column(requests))  # with a front-end: when the client sent it
    arrived = requests[(arrival >= start_s) & (arrival < end_s)]
    fin = arrived[arrived["finished"]]
    finish = _floats(requests, "finish_s")
    completed = requests["finished"].astype(bool) & (finish >= start_s) & (finish < end_s)
    s: dict = {"window_start_s": float(start_s), "window_end_s": float(end_s),
               "window_num_arrived": int(len(arrived)), "window_num_finished": int(len(fin)),
               "window_num_unfinished": _count_status(arrived, "unfinished"),
               "window_offered_rps": len(arrived) / length,
               "window_throughput_rps": int(completed.sum()) / length}
    if len(steps):
        s["window_output_tokens_per_s"] = float(_tokens_ending_in(steps, runs, start_s, end_s)) / length
    else:
        s["window_output_tokens_per_s"] = 0.0
    for col in WINDOW_LATENCIES:
        s.update(_stats(_floats(fin, col), f"window_{col}"))
    if not len(arrived):
        s["window_note"] = (f"no request arrived in the window [{start_s:g}, {end_s:g}) s: its latencies are NaN; "
                            "shorten run.warmup_s or run.cooldown_s")
    return s


def _step_ends_and_tokens(steps: Table, runs: DecodeRuns | None) -> tuple[np.ndarray, np.ndarray]:
    """(end time, output tokens) of every engine step: with `runs`, each step of a decode run at its own end with
    its share of the run's tokens (every step of a run samples the same ones); without, a run at the run's end."""
    tokens = np.asarray(steps["num_output_tokens"])
    end = _floats(steps, "end_s")
    layout = _run_layout(steps, runs)
    if layout is None:
        return end, tokens
    single = np.ones(len(steps), dtype=bool)
    single[layout.rows] = False
    step_end = _run_step_starts_s(steps, runs, layout) + runs.step_duration_s
    per_step = np.repeat(tokens[layout.rows] // layout.num_steps, layout.num_steps)
    return np.concatenate([end[single], step_end]), np.concatenate([tokens[single], per_step])


def _tokens_ending_in(steps: Table, runs: DecodeRuns | None, start_s: float, end_s: float) -> int:
    """Output tokens of the steps that end in [start_s, end_s) (`_step_ends_and_tokens`)."""
    end, tokens = _step_ends_and_tokens(steps, runs)
    return int(tokens[(end >= start_s) & (end < end_s)].sum())


def peak_output_tok_s(steps: Table | pd.DataFrame, runs: DecodeRuns | None, origin_s: float) -> float:
    """The most output tokens made in one whole second counted from `origin_s` (the first request sent), as
    `vllm bench serve` reports its peak output token throughput: every token counted in the second bucket
    int(its time - the first start time), the largest bucket. Here a token's time is the end of the engine step
    that made it (`_step_ends_and_tokens`); a front-end's delay on the way out, which shifts the buckets, is not
    added. NaN without steps."""
    end, tokens = _step_ends_and_tokens(as_table(steps), runs)
    keep = np.isfinite(end) & (end >= origin_s)
    if not keep.any():
        return math.nan
    buckets = np.floor(end[keep] - origin_s).astype(np.int64)
    return float(np.bincount(buckets, weights=tokens[keep].astype(float)).max())


def limits(steps: Table | pd.DataFrame, num_clipped: int, max_model_len: int | None) -> dict:
    """What the run's limits did: requests cut to fit max_model_len (they ran shorter than asked) and the
    backlog, the longest queue any replica had (an overload shows here even when every request finishes)."""
    steps = as_table(steps)
    return {
        "num_requests_clipped": int(num_clipped),
        "max_num_waiting": int(steps["num_waiting"].max()) if len(steps) else 0,
        "max_model_len": max_model_len,
    }


def request_counts(requests: Table | pd.DataFrame, fin: Table | pd.DataFrame, elapsed_s: float,
                   num_generated: int) -> dict:
    requests, fin = as_requests(requests), as_requests(fin)
    return {
        "num_requests": int(num_generated),
        "num_arrived": int(len(requests)),
        "num_finished": int(len(fin)),
        "num_unfinished": _count_status(requests, "unfinished"),
        "num_rejected": _count_status(requests, "rejected"),
        "elapsed_s": float(elapsed_s),
    }


def throughput(requests: Table | pd.DataFrame, fin: Table | pd.DataFrame, steps: Table | pd.DataFrame,
               elapsed: float) -> dict:
    """Requests and tokens per second over the run, and the offered arrival rate."""
    requests, fin, steps = as_requests(requests), as_requests(fin), as_table(steps)
    s: dict = {}
    # Finished requests over the whole run, drain included (as vLLM's benchmark_serving counts it): with a
    # finite run it sits below the offered rate even when the system keeps up, so the offered rate is shown too.
    s["throughput_rps"] = len(fin) / elapsed
    arrivals = _floats(requests, sent_column(requests))  # with a front-end: what the client sent
    span = float(arrivals.max() - arrivals.min()) if len(arrivals) > 1 else 0.0
    s["offered_rps"] = (len(arrivals) - 1) / span if span > 0 else math.nan
    # Every sampled token counts (all sequences of a request, and requests still in flight).
    s["output_tokens_per_s"] = float(steps["num_output_tokens"].sum()) / elapsed if len(steps) else 0.0
    s["total_tokens_per_s"] = float(fin["output_tokens"].sum() + fin["prompt_tokens"].sum()) / elapsed
    return s


def good_requests(summary: dict) -> int:
    """How many requests met every SLO limit: `goodput_rps` counts them over the run's `elapsed_s`."""
    return round(summary["goodput_rps"] * summary["elapsed_s"])


def load_and_sustained_rates(requests: Table, steps: Table, runs: DecodeRuns | None, whole_run: dict,
                             window: tuple[float, float] | None = None) -> dict:
    """The tokens a second of the load offered, and those the deployment served in its steady state: what a token's
    cost is priced at (sim/tools/sweep.py cost_figures), since the whole-run rates divide by a time that includes the
    drain, which a finite run's long requests stretch (41-66% of the load in `servesim plan scenarios/engines.yaml`,
    40 req/s of ShareGPT-like requests for 60 s).

    Offered: every arrived request's prompt and output tokens (those it asked for where it did not finish), at the
    offered rate's count over the arrivals' span (`offered_rps`). Admitted: the same less the requests the
    deployment refused (`num_rejected`), which it never serves: what a deployment meeting its SLOs is priced at.
    Sustained: over the steady-state `window` where the run sets one (`measurement_window`), else the second half of
    the arrivals (the first is the warm-up), the output tokens of the steps that ended in it and the prompt tokens
    of the requests whose first token came in it; where the deployment cannot keep up, its capacity. Where it keeps
    up, it is the load less the backlog its warm-up still builds, which a short run with long requests leaves
    sizable.
    Arrivals that span no time (a burst) have neither: the whole-run rates (`whole_run`, `throughput`'s keys)."""
    sent = _floats(requests, sent_column(requests))
    first, last = (float(sent.min()), float(sent.max())) if len(sent) else (0.0, 0.0)
    if last <= first or not len(steps):
        output, total = whole_run["output_tokens_per_s"], whole_run["total_tokens_per_s"]
        return {"offered_output_tokens_per_s": output, "offered_tokens_per_s": total,
                "admitted_output_tokens_per_s": output, "admitted_tokens_per_s": total,
                "sustained_output_tokens_per_s": output, "sustained_tokens_per_s": total}
    asked = np.where(requests["finished"], requests["output_tokens"], requests["max_output_tokens"])
    prompt = np.asarray(requests["prompt_tokens"])
    admitted = np.asarray(requests["status"]) != STATUS_CODES["rejected"]
    per_s = (len(sent) - 1) / len(sent) / (last - first)  # the offered rate's count of arrivals over the span
    start, end = window if window is not None else ((first + last) / 2.0, last)
    length = end - start
    output = _tokens_ending_in(steps, runs, start, end)
    first_token = _floats(requests, "first_token_s")
    prompts = int(prompt[(first_token >= start) & (first_token < end)].sum())
    return {"offered_output_tokens_per_s": float(asked.sum()) * per_s,
            "offered_tokens_per_s": float(asked.sum() + prompt.sum()) * per_s,
            "admitted_output_tokens_per_s": float(asked[admitted].sum()) * per_s,
            "admitted_tokens_per_s": float(asked[admitted].sum() + prompt[admitted].sum()) * per_s,
            "sustained_output_tokens_per_s": output / length, "sustained_tokens_per_s": (output + prompts) / length}


def decode_gaps(steps: Table | pd.DataFrame, runs: DecodeRuns | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The gaps between a request's tokens, as (gap, how many), one for every request each engine step decodes:
    the step's duration plus the time its replica spent, since the request's previous token, on steps the request
    sat out (SGLang's prefill-only batches, vLLM V0's prefill steps). A request that decoded in the replica's
    previous decoding step waited from there; one whose first token came from a step without decodes waited from
    that step on (the latest such steps first, as many as the step decodes). A replica's steps run back to back,
    each from the previous one's end, so the wait is read from their starts: overlapping steps (pipeline stages)
    add none. Not seen: a preempted request's wait in the queue, and a request that joins a decode replica after
    its KV moved (as if it had decoded there). A decode run (`num_steps` > 1) is one row whose steps after the
    first are decode steps back to back: each its own duration with `runs`, else the run's mean."""
    steps = as_table(steps)
    counts = np.asarray(steps["num_steps"], dtype=np.int64) if "num_steps" in steps else np.ones(len(steps), np.int64)
    row_s = _floats(steps, "duration_s")
    decodes = np.asarray(steps["num_decode_seqs"] - steps["num_padding_seqs"], dtype=np.int64)
    first_s = row_s / counts
    layout = _run_layout(steps, runs)
    if layout is None:  # each run's steps its mean
        run_rows = np.flatnonzero(counts > 1)
        run_mean_s, step_s, run_first = first_s[run_rows], _NO_FLOATS, _NO_INTS
    else:  # every row of more than one step is a run, each step its own duration
        run_rows, run_mean_s, step_s, run_first = layout.rows, _NO_FLOATS, runs.step_duration_s, layout.first
        first_s[run_rows] = step_s[run_first]
    runs_of = (counts[run_rows], decodes[run_rows], run_mean_s, step_s, run_first)
    start, tokens = _floats(steps, "start_s"), np.asarray(steps["num_output_tokens"], dtype=np.int64)
    replica = np.asarray(steps["replica"], dtype=np.int64) if "replica" in steps else None
    if replica is not None and len(replica) and replica.min() != replica.max():
        order = np.argsort(replica, kind="stable")  # each replica's rows, in the order they ran
        start, first_s, decodes, tokens, replica = (x[order] for x in (start, first_s, decodes, tokens, replica))
        return gap_rows(start, first_s, decodes, tokens, replica, False, *runs_of)
    # one replica: every row is in it
    return gap_rows(start, first_s, decodes, tokens, _NO_INTS, True, *runs_of)


def latencies(fin: Table | pd.DataFrame, steps: Table | pd.DataFrame, runs: DecodeRuns | None = None, *,
              lean: bool = False, speculative: bool = False) -> dict:
    """Mean and percentiles of the finished requests' latencies, and the engine's inter-token latency. `lean`:
    only LEAN_LATENCIES, no inter-token latency.

    The inter-token latency's percentiles are those of the gaps `decode_gaps` finds in the step log. Its mean is
    exact (`mean_gap_s`): every finished request's last token less its first, summed, over its gaps summed, so a
    gap that spans steps the request sat out (a prefill-only batch, a preemption) counts whole. `speculative`: a
    step streams each request's accepted tokens in one gap, which the records do not count, so the mean is the
    step log's gaps' (`decode_gaps`)."""
    fin, steps = as_requests(fin), as_table(steps)
    s: dict = {}
    for col in LEAN_LATENCIES if lean else LATENCIES:
        s.update(_stats(_floats(fin, col), col))
    if lean:
        return s
    gaps, counts = decode_gaps(steps, runs)
    if speculative:
        s["itl_mean"] = float((gaps * counts).sum() / counts.sum()) if counts.sum() else math.nan
    else:
        s["itl_mean"] = mean_gap_s(fin, "first_token_s", "last_token_s", 1)
    for p, value in zip(PERCENTILES, weighted_percentiles(gaps, counts, PERCENTILES)):
        s[f"itl_p{p}"] = value
    return s


ITL_KEYS = ("itl_mean", *(f"itl_p{p}" for p in PERCENTILES))


def stream_chunks(output_tokens: np.ndarray, tokens_per_chunk: int) -> np.ndarray:
    """The chunks each request's reply streams in: none without an output token; the first token alone, then one
    chunk per `tokens_per_chunk` tokens, the last one what remains: 1 + ceil((tokens - 1) / tokens_per_chunk).
    The one rule for the front-end's work (sim/frontend.py `FrontendCosts.chunk_work_s`) and the client's gaps
    (`client_itl`)."""
    out = np.asarray(output_tokens, dtype=np.int64)
    return np.where(out > 0, 1 + (np.maximum(out, 1) - 1 + tokens_per_chunk - 1) // tokens_per_chunk, 0)


def client_itl(fin: Table | pd.DataFrame, tokens_per_chunk: int) -> dict:
    """The inter-token latency as a streaming benchmark client measures it (`vllm bench serve`,
    `sglang.bench_serving`: one gap per streamed chunk after the first, pooled over every request), from the
    finished requests' client-side first and last chunk times: a request of n output tokens streams
    `stream_chunks` chunks (the first token alone, then `tokens_per_chunk` a chunk), and its gaps add up to its
    last chunk's time less its first's. So the mean is exact: the requests' spans summed over their gaps summed.
    The percentiles take each request's gaps as equal (the front-end's even-spacing assumption, sim/frontend.py):
    the gap-weighted percentiles of span / gaps."""
    gaps, span = _spans_and_gaps(as_requests(fin), "client_first_token_s", "client_last_token_s", tokens_per_chunk)
    if not len(gaps):
        return {key: math.nan for key in ITL_KEYS}
    out = {"itl_mean": _pooled_mean(gaps, span)}
    for p, value in zip(PERCENTILES, weighted_percentiles(span / gaps, gaps, PERCENTILES)):
        out[f"itl_p{p}"] = value
    return out


def _spans_and_gaps(fin: Table, first: str, last: str, tokens_per_chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """Per finished request with a gap: its gaps between chunks (`stream_chunks` less one) and its span, column
    `last` less column `first`."""
    gaps = stream_chunks(np.asarray(fin["output_tokens"], dtype=np.int64), tokens_per_chunk) - 1
    span = _floats(fin, last) - _floats(fin, first)
    has = (gaps > 0) & np.isfinite(span)
    return gaps[has], span[has]


def mean_gap_s(fin: Table | pd.DataFrame, first: str, last: str, tokens_per_chunk: int) -> float:
    """The mean gap between streamed chunks, pooled over every finished request: the spans (`last` less `first`)
    summed over the gaps summed (`_spans_and_gaps`). NaN: no request has a gap."""
    gaps, span = _spans_and_gaps(as_requests(fin), first, last, tokens_per_chunk)
    return _pooled_mean(gaps, span) if len(gaps) else math.nan


def _pooled_mean(gaps: np.ndarray, span: np.ndarray) -> float:
    """The mean gap of requests pooled: their spans summed over their gaps summed."""
    return float(span.sum() / gaps.sum())


def slo_metrics(requests: Table | pd.DataFrame, fin: Table | pd.DataFrame, slo, elapsed: float, *,
                all_done: bool, known: dict | None = None) -> dict:
    """SLOs: goodput counts requests that meet every limit; attainment checks the chosen percentile.

    A rejected request (one the deployment can never run: `SchedulerBase.rejection_reason`) never gets a
    token: it counts above every limit, in the percentiles (`percentile_with_refused`), in the share within
    every limit and in the goodput share. So a deployment that refuses 1 request in 10,000 can meet a p99
    limit, and one that refuses 2% cannot, at any load or number of replicas.
    `all_done`: no request was left unfinished (at a horizon or an early stop; else the SLO is not met).
    `known`: summary keys already computed from the same finished requests (`_stats`'s `{metric}_p{q}`): a
    percentile found there is not computed again (one call per percentile gives the same number), unless
    some request was rejected.
    """
    requests, fin = as_requests(requests), as_requests(fin)
    num_refused = _count_status(requests, "rejected")
    s: dict = {}
    ok = np.ones(len(fin), dtype=bool)
    slo_met = True
    for metric, limit in (("ttft_s", slo.ttft_s), ("tpot_s", slo.tpot_s), ("e2e_s", slo.e2e_s)):
        if limit is None:
            continue
        vals = _floats(fin, metric)
        ok &= ~(vals > limit)  # NaN TPOT (one output token) does not violate a TPOT limit
        finite = vals[~np.isnan(vals)]
        at_p = None if num_refused else (known or {}).get(f"{metric}_p{slo.percentile:g}")
        if at_p is None:
            at_p = percentile_with_refused(finite, num_refused, slo.percentile)
        s[f"slo_{metric[:-2]}_p{slo.percentile:g}"] = at_p
        met = at_p <= limit  # False for NaN: no request finished
        s[f"slo_{metric[:-2]}_met"] = met
        slo_met &= met
    s["goodput_rps"] = float(ok.sum()) / elapsed
    ended = len(ok) + num_refused
    s["slo_fraction_ok"] = float(ok.sum()) / ended if ended else math.nan
    if slo.min_goodput_fraction is not None:
        # Goodput counts every arrival: an unfinished or rejected request did not meet the SLO.
        share = float(ok.sum()) / len(requests) if len(requests) else math.nan
        s["slo_goodput_share"] = share
        slo_met &= bool(len(requests)) and share >= slo.min_goodput_fraction
    s["slo_met"] = bool(slo_met and all_done) if (slo.has_limits() or slo.min_goodput_fraction is not None) else None
    return s


def percentile_with_refused(values: np.ndarray, num_refused: int, percentile: float) -> float:
    """numpy's `percentile` (linear interpolation) of `values` (no NaN) and `num_refused` values above them all:
    rejected requests, whose latencies are unbounded. inf when it reaches one of those (NaN with no value at
    all); over `values` alone when none was refused, the same float as numpy's."""
    if not num_refused:
        return float(np.percentile(values, percentile)) if len(values) else math.nan
    top = float(values.max()) if len(values) else 0.0
    # A stand-in above every value: numpy interpolating towards inf itself gives NaN (inf - inf).
    above = 2 * abs(top) + 1
    at_p = float(np.percentile(np.concatenate([values, np.full(num_refused, above)]), percentile))
    return math.inf if at_p > top else at_p


def utilization(steps: Table | pd.DataFrame, elapsed: float, gpu, *, contiguous: bool = False,
                runs: DecodeRuns | None = None, lean: bool = False) -> dict:
    """Batch size, busy time, the time-weighted split of KV memory, and bandwidth/compute utilization
    (`lean`: the batch size, the busy fraction and the KV token share only).

    The KV split, as shares of the whole capacity, time-weighted: token states + reserved + internal +
    external + free (`kv_free_fraction`: free memory an allocation can use) = 1. External fragmentation
    there is free memory outside the largest hole (contiguous; 0 when paged). Each step weighs its own
    state by its own duration (`kv_slot_seconds`; a decode run's steps too, given `runs`).

    `kv_fig2_*`: the same split normalised as the vLLM paper's Fig. 2 (Kwon et al., SOSP 2023), whose
    categories are token states, reservation, internal fragmentation and "external fragmentation &
    others" and sum to 100% of KV memory. Our reading: for contiguous allocation the paper counts every
    slot not in a request's region as external fragmentation & others, the largest hole included (a
    hole a future request could use is still memory the running batch does not use), so
    `kv_fig2_external_fraction` = external + free and `kv_fig2_free_fraction` = 0; paged blocks have no
    external fragmentation, and a free block is free (`kv_fig2_free_fraction` = `kv_free_fraction`).
    """
    steps = as_table(steps)
    s: dict = {}
    durations = _floats(steps, "duration_s")
    busy = float(durations.sum())
    # A decode run's row stands for its steps.
    counts = np.asarray(steps["num_steps"]) if "num_steps" in steps else np.ones(len(steps), dtype=np.int64)
    s["mean_batch_size"] = float((steps["num_seqs"] * counts).sum() / counts.sum()) if len(steps) else 0.0
    s["busy_fraction"] = busy / elapsed / max(1, len(np.unique(steps["replica"])) if len(steps) else 1)
    if busy > 0:
        # (`lean`: the token share alone, which needs no capacity; KV_TIME_WEIGHTED[0] is the capacity)
        area = kv_slot_seconds(steps, runs, KV_TIME_WEIGHTED[1:5] if lean else KV_TIME_WEIGHTED[:5])
        tok, res, internal, external = (float(area[col].sum()) for col in KV_TIME_WEIGHTED[1:5])
        used = tok + res + internal + external
        if lean:
            s["kv_token_share"] = tok / used if used else math.nan
            return s
        cap = float(area["kv_capacity_slots"].sum())
        s["kv_token_fraction"] = tok / cap
        s["kv_reserved_fraction"] = res / cap
        s["kv_internal_fraction"] = internal / cap
        s["kv_external_fraction"] = external / cap
        s["kv_token_share"] = tok / used if used else math.nan
        free = cap - used
        s["kv_free_fraction"] = free / cap
        s["kv_fig2_external_fraction"] = (external + free) / cap if contiguous else external / cap
        s["kv_fig2_free_fraction"] = 0.0 if contiguous else free / cap
        s["mbu"] = float(steps["bytes"].sum()) / (busy * gpu.hbm_bytes_per_s)
        s["mfu"] = float(steps["flops"].sum()) / (busy * gpu.bf16_flops_per_s)
    return s


def littles_law(requests: Table | pd.DataFrame, fin: Table | pd.DataFrame, in_system_area: float,
                elapsed: float) -> dict:
    """Time-average number in system (accumulated by the engine) vs λ·W from the records."""
    requests = as_requests(requests)
    s = {"mean_in_system": float(in_system_area) / elapsed}
    if len(fin):
        e2e = requests[ENGINE_LATENCIES["e2e_s"] if "client_send_s" in requests else "e2e_s"]  # in the engine
        s["littles_law_lambda_w"] = len(requests) / elapsed * float(
            np.where(requests["finished"], e2e, elapsed - requests["arrival_s"]).mean())
    return s


def kv_memory(steps: Table | pd.DataFrame, replicas: list[ReplicaCounters], kv_bytes_per_token: int,
              runs: DecodeRuns | None = None) -> dict:
    """KV capacity, bytes swapped to host, prefix-cache hit rates and memory saved by sharing."""
    steps = as_table(steps)
    s: dict = {"kv_capacity_tokens": replicas[0].kv_capacity_tokens}
    swapped_tokens = int(steps["swap_in_tokens"].sum() + steps["swap_out_tokens"].sum())
    s["swapped_bytes"] = swapped_tokens * kv_bytes_per_token
    stats = [r.prefix_cache for r in replicas if r.prefix_cache is not None]
    if stats:
        queried = sum(x.queried_tokens for x in stats)
        queried_blocks = sum(x.queried_blocks for x in stats)
        s["prefix_cache_hit_rate_tokens"] = sum(x.hit_tokens for x in stats) / queried if queried else 0.0
        s["prefix_cache_hit_rate_blocks"] = (sum(x.hit_blocks for x in stats) / queried_blocks
                                             if queried_blocks else 0.0)
        s["prefix_cache_evictions"] = sum(x.num_evictions for x in stats)
    freed = [r.window_freed_blocks for r in replicas if r.window_freed_blocks is not None]
    if freed:  # a sliding-window model: blocks that went back to the pool before their request finished
        s["kv_window_freed_blocks"] = int(sum(freed))
    # Memory saved by sharing (prefix hits, forked sequences): time average of token states stored
    # once but used by several sequences.
    shared = kv_slot_seconds(steps, runs, ("kv_shared_slots",))["kv_shared_slots"]
    s["kv_shared_bytes_mean"] = (float(shared.sum() / steps["duration_s"].sum()) * kv_bytes_per_token
                                 if len(steps) else 0.0)
    return s


def sent_column(requests: Table | pd.DataFrame) -> str:
    """The column of when each request was sent: the client's send time with a front-end, else the arrival."""
    return "client_send_s" if "client_send_s" in requests else "arrival_s"


@dataclass(frozen=True)
class FrontendCounters:
    """What the summary needs from a run's front-end (sim/frontend.py), as plain values."""

    num_processes: int  # server processes
    busy_s: float  # inbound and outbound work, summed over the processes (seconds)
    end_s: float  # when its last work ended (after a horizon, when one cut a backlog)
    tokens_per_chunk: int = 1  # output tokens per streamed chunk after the first
    client_gaps_are_engine_steps: bool = True  # FrontendCosts.client_gaps_are_engine_steps


def frontend_metrics(fin: Table | pd.DataFrame, frontend: FrontendCounters, elapsed: float) -> dict:
    """With a front-end: where latencies are measured, the engine's own TTFT, TPOT and E2E (`engine_*`) beside
    the client's headline keys, the front-end's share of them (mean and percentiles over the finished
    requests: `frontend_in_s` send -> engine arrival, `frontend_out_first_s` / `frontend_out_last_s` engine
    first / last token -> client) and its busy share: work / (processes x elapsed), or x the front-end's own end
    when a horizon cut it short (it works on after the horizon). `summarize` adds the engine's per-step ITL
    (`engine_itl_*`) after these: the headline `itl_*` are then the client's gaps between chunks (`client_itl`),
    the same numbers where the client sees every token as the engine made it."""
    fin = as_requests(fin)
    s: dict = {"latency_measured_at": "client", "frontend_num_processes": int(frontend.num_processes),
               "frontend_busy_fraction": frontend.busy_s / (frontend.num_processes * max(elapsed, frontend.end_s))}
    for col in (*ENGINE_LATENCIES.values(), "frontend_in_s", "frontend_out_first_s", "frontend_out_last_s"):
        s.update(_stats(_floats(fin, col), col))
    return s


def speculation_metrics(replicas: list[ReplicaCounters]) -> dict:
    """Share of drafted tokens the target accepted, and the output tokens a verification yielded, its own token
    included (what SGLang logs as its accept length and vLLM as its mean acceptance length, and what an
    `accept_length` acceptance asks for): only when the run speculates."""
    drafting = [r for r in replicas if r.num_drafted is not None]
    if not drafting:
        return {}
    drafted = sum(r.num_drafted for r in drafting)
    accepted = sum(r.num_accepted_drafts for r in drafting)
    verifications = sum(r.num_verifications or 0 for r in drafting)
    return {"draft_acceptance_rate": accepted / drafted if drafted else float("nan"),
            "accept_length_mean": (verifications + accepted) / verifications if verifications else float("nan")}


def disaggregated_requests_frame(log) -> pd.DataFrame:
    """`requests_frame` plus the disaggregated columns (sim/core/disaggregated.py) and the waits they give:
    `decode_wait_s` (prefill end to decode blocks reserved), `transfer_s` (the KV transfer) and
    `decode_join_wait_s` (KV arrived to the decode batch's next step)."""
    df = requests_frame(log)
    ids = df["request_id"].to_numpy()
    for name, column in log.extra_columns().items():
        df[name] = column[ids]
    df["decode_wait_s"] = df["decode_reserved_s"] - df["first_token_s"]
    df["transfer_s"] = df["transfer_end_s"] - df["transfer_start_s"]
    df["decode_join_wait_s"] = df["decode_admit_s"] - df["transfer_end_s"]
    return df


def _mean_p90(values: np.ndarray, prefix: str) -> dict:
    values = values[~np.isnan(values)]
    return {f"{prefix}_mean": float(values.mean()) if len(values) else math.nan,
            f"{prefix}_p90": float(np.percentile(values, 90)) if len(values) else math.nan}


def disaggregation_metrics(requests: pd.DataFrame, steps: pd.DataFrame, elapsed_s: float, *,
                           num_prefill_replicas: int, num_decode_replicas: int, num_gpus: int) -> dict:
    """Per pool: busy share of the time (steps' durations over elapsed x replicas), the waits before each
    pool (queueing before the prefill, waiting for decode blocks), and the KV transfers (time, bytes)."""
    elapsed = max(elapsed_s, 1e-12)
    replica = steps["replica"].to_numpy() if len(steps) else np.empty(0, dtype=np.int64)
    durations = steps["duration_s"].to_numpy(dtype=float) if len(steps) else np.empty(0)
    prefill_busy = float(durations[replica < num_prefill_replicas].sum())
    decode_busy = float(durations[replica >= num_prefill_replicas].sum())
    fin = requests[requests["finished"]]
    s: dict = {"num_prefill_replicas": num_prefill_replicas, "num_decode_replicas": num_decode_replicas,
               "num_gpus": num_gpus,
               "prefill_busy_fraction": prefill_busy / elapsed / num_prefill_replicas,
               "decode_busy_fraction": decode_busy / elapsed / num_decode_replicas}
    s.update(_mean_p90(fin["queueing_s"].to_numpy(dtype=float), "prefill_queueing_s"))
    s.update(_mean_p90(fin["decode_wait_s"].to_numpy(dtype=float), "decode_wait_s"))
    s.update(_mean_p90(fin["transfer_s"].to_numpy(dtype=float), "transfer_s"))
    s["num_transfers"] = int(np.isfinite(requests["transfer_end_s"].to_numpy(dtype=float)).sum())
    s["transfer_bytes_total"] = float(requests["transfer_bytes"].sum())
    s["num_waited_for_decode_blocks"] = int((fin["decode_wait_s"].to_numpy(dtype=float) > 0).sum())
    return s
