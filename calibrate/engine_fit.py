"""Fit the engine-overhead terms (sim/cost/overhead.py) to what a user measured on their own engine.

`python -m calibrate fit-engine MEASUREMENTS --scenario S.yaml --out O.yaml`. MEASUREMENTS is a CSV file or a
folder holding one (repeat-*/ folders are read together):

- `steps.csv` (one row per engine step: start_s, end_s and what it computed, as calibrate/fidelity records):
  each step's measured time minus the scenario's kernel price is the overhead; the terms are linear in the
  step's counts (1, sequences, prefill tokens), so they are fitted by **non-negative least squares** — exact,
  no re-simulation, and no term can come out negative (a negative CPU cost would mean the kernel model is too
  slow, which the report then shows as a remainder the terms cannot explain). The eager launch term overlaps the
  kernels and is not linear; it is kept at the scenario's value.
- `requests.csv` (per request: arrival, first-token and finish times, prompt and output tokens): the steps are
  not seen, so each term is found by a **1-D search per term by re-simulating** the recorded requests
  (golden-section search on each of per_step_s, per_seq_s, per_prefill_token_s in turn, twice round),
  minimising the squared log errors of the TTFT, TPOT and E2E means.

The error before (the scenario as given) and after (kernels + fitted terms) is reported on the measurements
themselves; `--holdout` adds runs that were not used to fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from calibrate.bench_results import FIELD, ClientCounts, replayed_outputs
from sim.config.schema import MAX_NUM_SEQS, SHARED_DISCIPLINES, Scenario
from sim.cost.overhead import TERMS, EngineOverhead, EngineOverheadCostModel, engine_overhead
from sim.cost.profile_meta import first_bad_cell
from sim.errors import ConfigError
from sim.model.specs import MAX_MODEL_DIM
from sim.workload.lengths import sharegpt_bench_lengths
from sim.workload.traces import MAX_TRACE_TIME_S

REQUEST_COLUMNS = ("arrival_s", "first_token_s", "finish_s", "prompt_tokens", "output_tokens")
STEP_COLUMNS = ("start_s", "end_s", "prefill_chunk_tokens", "prefill_context_tokens", "num_decode_seqs",
                "decode_context_tokens", "num_sampled_seqs")
METRICS = ("ttft_mean_s", "tpot_mean_s", "e2e_mean_s")
_SEARCH_HI = {"per_step_s": 0.05, "per_seq_s": 2e-3, "per_prefill_token_s": 2e-4}  # search ranges (s)


@dataclass(frozen=True)
class Measurements:
    kind: str  # "steps" or "requests"
    paths: list[Path]  # the CSV files read
    frames: list[pd.DataFrame]  # one per file (repeats of one schedule for requests)


def read_measurements(path: str | Path, field: str = "MEASUREMENTS") -> Measurements:
    p = Path(path).expanduser()
    if p.is_dir():
        dirs = sorted(d for d in p.glob("repeat-*") if d.is_dir()) or [p]
        for name in ("steps.csv", "requests.csv"):
            files = [d / name for d in dirs if (d / name).is_file()]
            if files and len(files) == len(dirs):
                return _read(files, field)
        raise ConfigError(f"{field}: '{p}' holds no steps.csv or requests.csv; allowed: a folder of either "
                          "(or repeat-*/ folders of them), or one such CSV file")
    if not p.is_file():
        raise ConfigError(f"{field}: '{path}' does not exist; allowed: a steps.csv or requests.csv file or folder")
    return _read([p], field)


def _read(files: list[Path], field: str) -> Measurements:
    frames = []
    for f in files:
        try:
            frames.append(pd.read_csv(f, dtype={"prefill_chunk_tokens": str, "prefill_context_tokens": str}))
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
            raise ConfigError(f"{field}: '{f}' is not a readable CSV ({type(err).__name__})") from None
    cols = set(frames[0].columns)
    if set(STEP_COLUMNS) <= cols:
        kind, need = "steps", STEP_COLUMNS
    elif set(REQUEST_COLUMNS) <= cols:
        kind, need = "requests", REQUEST_COLUMNS
    else:
        raise ConfigError(f"{field}: '{files[0]}' has columns {sorted(cols)}; allowed: steps.csv "
                          f"({', '.join(STEP_COLUMNS)}) or requests.csv ({', '.join(REQUEST_COLUMNS)})")
    for f, frame in zip(files, frames):
        missing = [c for c in need if c not in frame.columns]
        if missing or frame.empty:
            raise ConfigError(f"{field}: '{f}' lacks {missing or 'rows'}; allowed: {', '.join(need)}")
        numeric = [c for c in need if c not in ("prefill_chunk_tokens", "prefill_context_tokens")]
        if frame[numeric].isna().any().any():
            raise ConfigError(f"{field}: '{f}' has empty cells in {', '.join(numeric)}; allowed: complete rows")
        _check_values(frame, kind, f"{field}: '{f}'")
    return Measurements(kind, files, frames)


# What a measured cell may hold: (lowest, highest, whole number). Times are seconds on one clock (the trace reader's
# bound, sim/workload/traces.py); counts are bounded as the schema bounds them, so that no sum or product the pricing
# forms leaves int64 (a decode's context tokens: every sequence at the longest context).
_TIME = (-MAX_TRACE_TIME_S, MAX_TRACE_TIME_S, False)
_CELLS = {"arrival_s": _TIME, "first_token_s": _TIME, "finish_s": _TIME, "start_s": _TIME, "end_s": _TIME,
          "prompt_tokens": (1, MAX_MODEL_DIM, True), "output_tokens": (1, MAX_MODEL_DIM, True),
          "num_decode_seqs": (0, MAX_NUM_SEQS, True), "num_sampled_seqs": (0, MAX_NUM_SEQS, True),
          "decode_context_tokens": (0, MAX_NUM_SEQS * MAX_MODEL_DIM, True)}
# Per step, the space-separated tokens of each prompt chunk and the context before it
_LISTED = {"prefill_chunk_tokens": 1, "prefill_context_tokens": 0}
# Each later moment of a request or step at or after the earlier one, on the engine's clock
_ORDER = {"requests": (("arrival_s", "first_token_s"), ("first_token_s", "finish_s")), "steps": (("start_s", "end_s"),)}


def _check_values(frame: pd.DataFrame, kind: str, where: str) -> None:
    """Refuse, in one line naming the line, column and value, a cell that is not what its tool writes: a number
    out of its column's range (`_CELLS`), a moment before the one it follows, a prompt chunk list that does not
    pair with its contexts. The numeric columns are left as numbers."""
    for col, (lo, hi, whole) in _CELLS.items():
        if col not in frame.columns:
            continue
        bad = first_bad_cell(frame[col], lo, hi, whole)
        if bad is not None:
            allowed = f"a whole number from {lo:,} to {hi:,}" if whole else f"a number of seconds from {lo:g} to {hi:g}"
            raise ConfigError(f"{where} line {bad[0] + 2}: {col} {bad[1]} is not allowed; allowed: {allowed}")
        values = pd.to_numeric(frame[col]).to_numpy(float)
        frame[col] = values.astype(np.int64) if whole else values
    for earlier, later in _ORDER[kind]:
        behind = frame[later].to_numpy() < frame[earlier].to_numpy()
        if behind.any():
            i = int(np.argmax(behind))
            raise ConfigError(f"{where} line {i + 2}: {later} {frame[later].iloc[i]:g} is before {earlier} "
                              f"{frame[earlier].iloc[i]:g}; allowed: {later} >= {earlier} (one clock)")
    if kind == "steps":
        for i, (chunks, contexts) in enumerate(zip(frame["prefill_chunk_tokens"], frame["prefill_context_tokens"])):
            lists = [_token_list(cell, _LISTED[col], f"{where} line {i + 2}: {col}")
                     for col, cell in (("prefill_chunk_tokens", chunks), ("prefill_context_tokens", contexts))]
            if len(lists[0]) != len(lists[1]):
                shown = [" ".join(map(str, cells)) for cells in lists]
                raise ConfigError(f"{where} line {i + 2}: prefill_chunk_tokens {shown[0]!r} and prefill_context_tokens "
                                  f"{shown[1]!r} differ in length; allowed: one context for each chunk")


def _token_list(cell, lowest: int, where: str) -> list[int]:
    """A cell as the step reader parses it (`token_counts`), each a whole number from `lowest` to MAX_MODEL_DIM."""
    from calibrate.fidelity.overhead import token_counts
    try:
        counts = token_counts(cell)
    except ValueError:
        counts = None
    if counts is None or not all(lowest <= c <= MAX_MODEL_DIM for c in counts):
        raise ConfigError(f"{where} {str(cell)!r} is not allowed; allowed: space-separated whole numbers from "
                          f"{lowest} to {MAX_MODEL_DIM:,}")
    return counts


# --- the scenario's kernels and the simulated requests -------------------------------------------------

def kernel_scenario(scenario: Scenario) -> Scenario:
    """The scenario's cost model without any engine overhead (the roofline's fixed step overhead 0 too)."""
    spec = scenario.cost_model
    update = {}
    if getattr(spec, "overhead", None) is not None:
        update["overhead"] = None
    if spec.kind == "roofline":
        update["step_overhead_s"] = 0.0
    if spec.kind == "fixed":
        raise ConfigError("--scenario: cost_model kind 'fixed' has no kernels to add an overhead to; "
                          "allowed: roofline, calibrated, measured")
    return scenario.model_copy(update={"cost_model": spec.model_copy(update=update)}) if update else scenario


def starting_terms(scenario: Scenario) -> EngineOverhead:
    """The terms the scenario's cost model already has (sim.run.overhead_of), or none."""
    from sim.run import overhead_of
    o = getattr(scenario.cost_model, "overhead", None)
    return engine_overhead("none") if o is None else overhead_of(o)


def request_metrics(frame: pd.DataFrame) -> dict[str, float]:
    """TTFT, TPOT and E2E means (TPOT over requests with more than one output token)."""
    arrival, first, finish = (frame[c].to_numpy(float) for c in ("arrival_s", "first_token_s", "finish_s"))
    out = frame["output_tokens"].to_numpy(float)
    multi = out > 1
    return {"ttft_mean_s": float((first - arrival).mean()),
            "tpot_mean_s": float(((finish - first)[multi] / (out[multi] - 1)).mean()) if multi.any() else math.nan,
            "e2e_mean_s": float((finish - arrival).mean())}


def real_metrics(frames: list[pd.DataFrame]) -> dict[str, float]:
    """Median over repeats of each metric."""
    per = [request_metrics(f) for f in frames]
    return {k: float(np.median([m[k] for m in per])) for k in METRICS}


def simulate_requests(scenario: Scenario, frame: pd.DataFrame, cost) -> dict[str, float]:
    from sim.run import simulate
    from sim.workload.generate import Workload

    frame = frame.sort_values("arrival_s", kind="stable")
    arrival = frame["arrival_s"].to_numpy(float)
    workload = Workload(arrival_s=arrival - arrival.min(), input_tokens=frame["prompt_tokens"].to_numpy(np.int64),
                        output_tokens=frame["output_tokens"].to_numpy(np.int64))
    sc = scenario.model_copy(update={"run": scenario.run.model_copy(
        update={"num_requests": len(frame), "duration_s": None, "horizon_s": None})})
    result = simulate(sc, workload, cost_model=cost)
    r = result.requests
    if not r["finished"].all():
        raise ConfigError(f"--scenario: ServeSim left {int((~r['finished']).sum())} of {len(r)} recorded requests "
                          "unfinished or rejected; check the scenario's scheduler and KV settings")
    sim = pd.DataFrame({"arrival_s": r["arrival_s"], "first_token_s": r["first_token_s"],
                        "finish_s": r["finish_s"], "output_tokens": r["output_tokens"]})
    return request_metrics(sim)


def errors(simulated: dict[str, float], real: dict[str, float]) -> dict[str, float]:
    """(simulated - real) / real per metric."""
    return {k: (simulated[k] - real[k]) / real[k] for k in METRICS}


# --- fits ---------------------------------------------------------------------------------------------

def fit_steps(m: Measurements, kernels, start: EngineOverhead, num_layers: int) -> tuple[EngineOverhead, dict]:
    from calibrate.fidelity.overhead import step_plan

    steps = pd.concat(m.frames, ignore_index=True)
    plans = [step_plan(r) for r in steps.itertuples()]
    measured = (steps["end_s"] - steps["start_s"]).to_numpy(float)
    kernel_s = np.array([kernels.step_time(p) for p in plans])
    launch = start.launch_per_layer_s * num_layers
    base = np.maximum(kernel_s, launch)
    a = np.array([[1.0, p.num_seqs, p.num_prefill_tokens] for p in plans])
    x = nnls(a, measured - base)[0]
    fitted = replace(start, engine="fitted", per_step_s=float(x[0]), per_seq_s=float(x[1]),
                     per_prefill_token_s=float(x[2]),
                     source=f"fit-engine: NNLS on {len(plans)} steps of {', '.join(str(p) for p in m.paths)}")
    before = np.array([start.step_time(k, p, num_layers) for k, p in zip(kernel_s, plans)])
    after = np.array([fitted.step_time(k, p, num_layers) for k, p in zip(kernel_s, plans)])
    info = {"method": "nnls", "num_steps": len(plans),
            "step_error_before": _step_errors(before, measured), "step_error_after": _step_errors(after, measured),
            "kernel_over_measured_steps": int((kernel_s > measured).sum())}
    return fitted, info


def _step_errors(priced: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    rel = priced / measured - 1
    return {"median_abs": float(np.median(np.abs(rel))), "mean": float(rel.mean()),
            "total": float(priced.sum() / measured.sum() - 1)}


def _golden(f, lo: float, hi: float, iters: int = 14) -> float:
    """Golden-section search for the term in [lo, hi] that minimises `f`; `lo` where it does as well. Not scipy's
    bounded `minimize_scalar` (Brent's): on these re-simulated objectives, which ripple as requests reorder, its
    parabolic steps settled in a worse basin (tried on `fit-engine` of the CPU vLLM calibration run's requests:
    squared log error of the three means about 8e-4 against golden-section's 5e-5)."""
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    x = (a + b) / 2
    return lo if f(lo) <= f(x) else x  # 0 is a candidate: a term the data does not need stays off


def fit_requests(m: Measurements, scenario: Scenario, kernels, start: EngineOverhead,
                 num_layers: int, rounds: int = 2) -> tuple[EngineOverhead, dict]:
    real = real_metrics(m.frames)
    frame = m.frames[0]
    evals = 0

    def loss(terms: EngineOverhead) -> float:
        nonlocal evals
        evals += 1
        sim = simulate_requests(scenario, frame, EngineOverheadCostModel(kernels, terms, num_layers))
        return sum(math.log(sim[k] / real[k]) ** 2 for k in METRICS if real[k] > 0 and sim[k] > 0)

    cur = replace(start, engine="fitted")
    for _ in range(rounds):
        for term in ("per_step_s", "per_seq_s", "per_prefill_token_s"):
            best = _golden(lambda v, t=term: loss(replace(cur, **{t: v})), 0.0, _SEARCH_HI[term])
            cur = replace(cur, **{term: best})
    cur = replace(cur, source=f"fit-engine: 1-D golden-section search per term, re-simulating "
                              f"{len(frame)} requests of {', '.join(str(p) for p in m.paths)}")
    return cur, {"method": "search", "simulations": evals, "objective": "sum of squared log errors of "
                 + ", ".join(METRICS)}


@dataclass(frozen=True)
class EngineFit:
    terms: EngineOverhead
    info: dict  # method and its diagnostics
    evaluations: list[dict]  # per evaluated run: which, used_in_fit, real, before, after (metrics and errors)


def fit_engine(measurements: str | Path, scenario: Scenario, holdout: list[str | Path] = ()) -> EngineFit:
    from sim.config.deployment import resolve
    from sim.run import make_cost_model

    m = read_measurements(measurements)
    given_cost = make_cost_model(scenario)
    ks = kernel_scenario(scenario)
    kernels = make_cost_model(ks)
    num_layers = resolve(scenario).model.num_layers
    start = starting_terms(scenario)
    if m.kind == "steps":
        terms, info = fit_steps(m, kernels, start, num_layers)
    else:
        terms, info = fit_requests(m, ks, kernels, start, num_layers)
    fitted_cost = EngineOverheadCostModel(kernels, terms, num_layers)
    runs: list[tuple[str, bool, list[pd.DataFrame]]] = []
    fit_requests_frames = _requests_beside(m)
    if fit_requests_frames:
        runs.append((str(measurements), True, fit_requests_frames))
    for h in holdout:
        hm = read_measurements(h, "--holdout")
        if hm.kind != "requests":
            hm = Measurements("requests", hm.paths, _requests_beside(hm))
        runs.append((str(h), False, hm.frames))
    evaluations = []
    for name, used, frames in runs:
        real = real_metrics(frames)
        before = simulate_requests(scenario, frames[0], given_cost)
        after = simulate_requests(scenario, frames[0], fitted_cost)
        evaluations.append({"run": name, "used_in_fit": used, "repeats": len(frames), "real": real,
                            "before": before, "after": after,
                            "error_before": errors(before, real), "error_after": errors(after, real)})
    info = info | {"measurements": [str(p) for p in m.paths], "kind": m.kind, "kernels": repr(kernels),
                   "given": repr(given_cost)}
    return EngineFit(terms, info, evaluations)


def _requests_beside(m: Measurements) -> list[pd.DataFrame]:
    """requests.csv of the same runs (beside each steps.csv), for the request-level error; [] if absent."""
    if m.kind == "requests":
        return m.frames
    files = [p.parent / "requests.csv" for p in m.paths]
    return [pd.read_csv(f) for f in files] if all(f.is_file() for f in files) else []


def fitted_scenario_yaml(scenario: Scenario, fit: EngineFit) -> str:
    import yaml

    data = scenario.model_dump(mode="json", exclude_none=True)
    cm = data["cost_model"]
    cm.pop("overhead", None)
    if cm["kind"] == "roofline":
        cm["step_overhead_s"] = 0.0
    cm["overhead"] = {"engine": "none", **{t: float(getattr(fit.terms, t)) for t in TERMS}}
    header = (f"# {fit.terms.source}\n# method: {fit.info['method']}; terms in seconds; "
              f"fitted on {', '.join(fit.info['measurements'])} only\n")
    return header + yaml.safe_dump(data, sort_keys=False)


def report_text(fit: EngineFit) -> str:
    lines = [f"fitted ({fit.info['method']}): " + ", ".join(f"{t} {getattr(fit.terms, t) * 1e6:.2f} us" for t in TERMS)]
    if "step_error_before" in fit.info:
        b, a = fit.info["step_error_before"], fit.info["step_error_after"]
        lines.append(f"steps: median abs error {b['median_abs']:.1%} -> {a['median_abs']:.1%}, "
                     f"total time {b['total']:+.1%} -> {a['total']:+.1%} ({fit.info['num_steps']} steps; "
                     f"{fit.info['kernel_over_measured_steps']} priced above their measured time by kernels alone)")
    lines.append("| run | used in fit | TTFT mean before / after | TPOT mean before / after | E2E mean before / after |")
    lines.append("| --- | --- | ---: | ---: | ---: |")
    for e in fit.evaluations:
        cells = " | ".join(f"{e['error_before'][k]:+.1%} / {e['error_after'][k]:+.1%}" for k in METRICS)
        lines.append(f"| {e['run']} | {'yes' if e['used_in_fit'] else 'no (held out)'} | {cells} |")
    return "\n".join(lines) + "\n"


# --- published benchmark results (`fit-engine --bench`) ----------------------------------------------------------
# Each result is a load point (a closed loop at its concurrency, Poisson at its rate) with client-side means. The
# engine's CPU terms (per_step_s, per_seq_s) and the front-end's (per_request_s, per_output_chunk_s) are fitted by
# re-simulating the fit points: Gauss-Newton on the relative errors of their means, each step a non-negative least
# squares (`nnls`) on finite differences, so a handful of simulations suffice (the means are close to linear in the
# terms until a queue builds). Every other point is held out and reported on its own line.

BENCH_TERMS = ("per_step_s", "per_seq_s", "per_request_s", "per_output_chunk_s")
# Each fitted term's upper bound and finite-difference step (seconds): this fit's and the published suite's
# (benchmarks/published_suite.py fit_preset), which fits `latency_s` too.
FIT_BOUNDS_S = {"per_step_s": 0.05, "per_seq_s": 2e-3, "per_request_s": 1.0, "per_output_chunk_s": 0.01,
                "latency_s": 1.0}
FIT_STEPS_S = {"per_step_s": 2e-4, "per_seq_s": 1e-5, "per_request_s": 5e-3, "per_output_chunk_s": 1e-4,
               "latency_s": 5e-3}
# The residual of a simulated value that is not positive (nothing finished, NaN): far outside any fit.
_MISS = 5.0


def log_error(simulated: float, measured: float) -> float:
    """log(simulated / measured): symmetric (half and double weigh the same); _MISS when nothing was simulated."""
    return math.log(simulated / measured) if simulated > 0 and math.isfinite(simulated) else _MISS
# Requests simulated per point: the measured run's count up to this (enough for means; a small run is simulated
# whole, with its ramp-up and drain as measured).
MAX_POINT_REQUESTS = 400
_SIM_METRICS = {"ttft_mean_s": "ttft_s_mean", "tpot_mean_s": "tpot_s_mean", "itl_mean_s": "itl_mean",
                "request_throughput_per_s": "throughput_rps", "output_throughput_tok_per_s": "output_tokens_per_s"}
_METRIC_LABELS = {"ttft_mean_s": "TTFT mean", "tpot_mean_s": "TPOT mean", "itl_mean_s": "ITL mean",
                  "request_throughput_per_s": "req/s", "output_throughput_tok_per_s": "output tok/s"}


def _fit_metrics(point) -> list[str]:
    """The metrics a fit point contributes: TTFT, TPOT (else ITL) and request throughput (else output's)."""
    m = point.metrics
    keys = [k for k in ("ttft_mean_s",) if k in m]
    keys += ["tpot_mean_s"] if "tpot_mean_s" in m else (["itl_mean_s"] if "itl_mean_s" in m else [])
    keys += (["request_throughput_per_s"] if "request_throughput_per_s" in m
             else (["output_throughput_tok_per_s"] if "output_throughput_tok_per_s" in m else []))
    return keys


class _PointSimulator:
    """Simulates the bench points on the scenario with given terms (the scenario's kernels, the fitted overhead,
    its front-end with the fitted costs)."""

    def __init__(self, scenario: Scenario):
        from sim.config.deployment import resolve
        from sim.run import make_cost_model

        self.scenario = scenario
        self.kernels = make_cost_model(kernel_scenario(scenario))
        deployment = resolve(scenario)
        self.num_layers = deployment.model.num_layers
        self.max_model_len = deployment.max_model_len
        self.start_overhead = starting_terms(scenario)
        fe = scenario.frontend
        self.frontend_base = ({"num_processes": 1, "per_request_s": 0.0, "per_prompt_token_s": 0.0,
                               "per_output_chunk_s": 0.0, "per_output_token_s": 0.0, "tokens_per_chunk": 1}
                              if fe is None else fe.model_dump(mode="json"))
        self.simulations = 0
        self._workloads: dict[int, tuple[dict, object]] = {}

    def start(self) -> dict[str, float]:
        return {"per_step_s": self.start_overhead.per_step_s, "per_seq_s": self.start_overhead.per_seq_s,
                "per_request_s": float(self.frontend_base["per_request_s"]),
                "per_output_chunk_s": float(self.frontend_base["per_output_chunk_s"])}

    @staticmethod
    def _frontend(d: dict, frontend: dict) -> dict:
        """The front-end a point runs with: a closed loop's processes serve first come, first served, the one
        discipline modelled there (a scenario of open arrivals may share its requests: a vLLM preset's
        chat-template parse), and without the scenario's benchmark client (`frontend.client`, modelled for open
        arrivals only: a closed loop's client work goes into the fitted terms)."""
        if d["workload"]["arrival"]["kind"] != "closed_loop":
            return frontend
        frontend = {k: v for k, v in frontend.items() if k != "client"}
        if frontend.get("discipline") in SHARED_DISCIPLINES:
            return frontend | {"discipline": "fifo"}
        return frontend

    def _point_dict(self, point) -> dict:
        d = self.scenario.model_dump(mode="json", exclude_none=True)
        d.pop("variants", None)
        if point.concurrency is not None:
            arrival = {"kind": "closed_loop", "num_users": point.users, "think_time_s": 0.0}
        elif math.isfinite(point.rate_per_s):
            arrival = {"kind": "poisson", "rate_per_s": point.rate_per_s}
        else:
            arrival = {"kind": "burst"}
        n = min(point.num_requests or MAX_POINT_REQUESTS, MAX_POINT_REQUESTS)
        if point.input_lens is not None:  # the measured requests, in their order (repeated to the run's count)
            lengths = {"kind": "listed", "input_tokens": list(point.input_lens[:n]),
                       "output_tokens": replayed_outputs(point.output_lens[:n])}
        elif point.dataset == "sharegpt":
            # Token totals only: the requests drawn as the clients draw ShareGPT (fixed lengths would finish a
            # burst all at once, where the sample's longest outputs run on alone)
            lengths = sharegpt_bench_lengths(point.mean_input_tokens, point.mean_output_tokens)
        else:
            lengths = {"kind": "fixed", "input_tokens": max(1, round(point.mean_input_tokens)),
                       "output_tokens": max(1, round(point.mean_output_tokens))}
        d["workload"] = {"arrival": arrival, "lengths": lengths, "endpoint": self.scenario.workload.endpoint}
        if d.get("frontend"):
            d["frontend"] = self._frontend(d, d["frontend"])
        run = {k: v for k, v in d.get("run", {}).items() if k not in ("duration_s", "horizon_s", "warmup_s", "cooldown_s")}
        d["run"] = run | {"num_requests": max(n, point.users or 1)}
        return d

    def _workload(self, index: int, point):
        if index not in self._workloads:
            from sim.config.files import validate_scenario
            from sim.run import make_workload

            d = self._point_dict(point)
            self._check_measured_lengths(point, d["workload"]["lengths"])
            workload = make_workload(validate_scenario(d))
            client = None
            if point.input_lens is not None:  # counted over the requests the workload lists (the first ones)
                listed = len(d["workload"]["lengths"]["input_tokens"])
                zero = None if point.zero_ttft is None else point.zero_ttft[:listed]
                client = ClientCounts.of(point.output_lens[:listed], zero, workload.num_requests)
            self._workloads[index] = (d, workload, client)
        return self._workloads[index]

    def _check_measured_lengths(self, point, lengths: dict) -> None:
        """Refuse measured requests longer than the scenario's context: the deployment measured held them, so the
        scenario is not that deployment (the workload would cut them to fit and the fit would price other requests)."""
        if lengths["kind"] == "listed":
            totals = [i + o for i, o in zip(lengths["input_tokens"], lengths["output_tokens"])]
        elif lengths["kind"] == "fixed":
            totals = [lengths["input_tokens"] + lengths["output_tokens"]]
        else:  # drawn to the result's means: a draw cut to fit is said in the fit's notes (`clipped`)
            totals = [round(lengths["input_mean"] + lengths["output_mean"])]
        longer = sum(t > self.max_model_len for t in totals)
        if longer:
            what = (f"{longer} of its requests (prompt + output up to {max(totals):,} tokens) exceed"
                    if lengths["kind"] == "listed" else
                    f"its mean request (prompt + output {max(totals):,} tokens) exceeds")
            raise ConfigError(f"{FIELD}: '{point.source}' ({point.label}): {what} the scenario's max_model_len "
                              f"{self.max_model_len:,}; allowed: a result whose requests fit the scenario's context "
                              "(set scheduler.max_model_len as the deployment measured had it)")

    def clipped(self, index: int, point) -> int:
        """How many of the point's simulated requests the workload cut to fit the scenario's context."""
        return int(self._workload(index, point)[1].num_clipped)

    def metrics(self, index: int, point, terms: dict[str, float]) -> dict[str, float]:
        from sim.config.files import validate_scenario
        from sim.run import simulate

        d, workload, client = self._workload(index, point)
        d = d | {"frontend": self._frontend(d, self.frontend_base | {"per_request_s": terms["per_request_s"],
                                                                    "per_output_chunk_s": terms["per_output_chunk_s"]})}
        overhead = replace(self.start_overhead, engine="fitted", per_step_s=terms["per_step_s"],
                           per_seq_s=terms["per_seq_s"])
        self.simulations += 1
        result = simulate(validate_scenario(d), workload,
                          cost_model=EngineOverheadCostModel(self.kernels, overhead, self.num_layers))
        got = {k: float(result.summary.get(v, math.nan)) for k, v in _SIM_METRICS.items()}
        if client is not None:  # as the client counted: zeros in its TTFT mean, only the tokens it saw
            ttft = client.ttft_s(result.requests)
            if len(ttft):
                got["ttft_mean_s"] = float(ttft.mean())
            got["output_throughput_tok_per_s"] *= client.output_share(result.requests)
        return got

    def overhead(self, terms: dict[str, float]) -> EngineOverhead:
        return replace(self.start_overhead, engine="fitted", per_step_s=terms["per_step_s"], per_seq_s=terms["per_seq_s"])


@dataclass(frozen=True)
class BenchFit:
    terms: dict[str, float]  # BENCH_TERMS, fitted
    at_bound: dict[str, str]  # term -> which bound it stopped at
    not_identified: list[str]  # terms the fit points do not move: kept at the scenario's value
    overhead: EngineOverhead
    frontend: dict  # the fitted `frontend:` section
    fit_labels: list[str]
    evaluations: list[dict]  # per point: label, source, tool, used_in_fit, metrics {name: (measured, simulated)}
    simulations: int
    sources: list[str]
    notes: list[str]
    not_pinned: dict[str, float] = field(default_factory=dict)  # term -> its 90% factor (kept as fitted, said)


def _select_fit_points(points, fit_on: list[str]) -> list[int]:
    labels = [p.label for p in points]
    if fit_on:
        chosen = []
        for name in fit_on:
            for part in str(name).split(","):
                part = part.strip()
                if part not in labels:
                    raise ConfigError(f"--fit-on: {part!r} is not a point of the results; allowed: "
                                      f"{', '.join(dict.fromkeys(labels))}")
                chosen += [i for i, label in enumerate(labels) if label == part and i not in chosen]
        return chosen
    # default: the lowest and the highest load (concurrency, else rate)
    def load(p):
        return p.concurrency if p.concurrency is not None else p.rate_per_s
    order = sorted(range(len(points)), key=lambda i: (load(points[i]), i))
    return sorted({order[0], order[-1]})


# What `fit-engine --dataset` accepts: the datasets whose client-side sampling ServeSim can draw.
BENCH_DATASETS = ("sharegpt",)


def fit_bench(bench_files: list[str | Path], scenario: Scenario, fit_on: list[str] = (), iterations: int = 6,
              dataset: str | None = None) -> BenchFit:
    """`dataset`: the dataset every result's client sampled (BENCH_DATASETS), where the results do not say."""
    from calibrate.bench_results import check_model, read_bench

    if dataset is not None and dataset not in BENCH_DATASETS:
        raise ConfigError(f"--dataset: {dataset!r} is not allowed; allowed: {', '.join(BENCH_DATASETS)} (omit it for "
                          "every request at the result's mean lengths)")
    points = [p for f in bench_files for p in read_bench(f)]
    if dataset is not None:
        points = [replace(p, dataset=dataset) for p in points]
    for p in points:
        check_model(p, scenario.model if isinstance(scenario.model, str) else getattr(scenario.model, "name", ""),
                    scenario.quantization.weights)
    if scenario.hardware.disaggregation is not None:
        raise ConfigError("--scenario: hardware.disaggregation is not allowed with --bench (no front-end there); "
                          "allowed: a colocated deployment")
    fit_idx = _select_fit_points(points, list(fit_on))
    notes = [f"{p.label} ({p.source}): max_concurrency {p.concurrency} with request rate {p.rate_per_s:g}/s: simulated "
             "as a closed loop at the concurrency (the rate limit is not modelled)"
             for p in points if p.concurrency is not None and math.isfinite(p.rate_per_s)]
    notes += [f"{p.label} ({p.source}): max_concurrency {p.concurrency} above the {p.users} requests it sent: "
              "simulated with as many in flight, the most the client could have" for p in points
              if p.users != p.concurrency]
    notes += [f"{p.label} ({p.source}): {note}" for p in points for note in p.notes]
    sim = _PointSimulator(scenario)
    notes += [f"{p.label} ({p.source}): {n} of the requests drawn to its means cut to the scenario's max_model_len "
              f"{sim.max_model_len:,}" for i, p in enumerate(points) if (n := sim.clipped(i, p))]
    scale, hi = term_limits(BENCH_TERMS)

    def residuals(theta: np.ndarray) -> np.ndarray:
        """Log errors of the fit points' metrics (symmetric: half and double weigh the same)."""
        terms = dict(zip(BENCH_TERMS, theta.tolist()))
        out = []
        for i in fit_idx:
            got = sim.metrics(i, points[i], terms)
            out += [log_error(got[k], points[i].metrics[k]) for k in _fit_metrics(points[i])]
        return np.nan_to_num(np.array(out), nan=_MISS)

    theta, free = fit_terms(residuals, _initial_terms(sim, points, fit_idx, residuals), scale, hi, iterations)
    terms = dict(zip(BENCH_TERMS, theta.tolist()))
    bounded = at_bounds(theta, free, hi)
    at_bound = {t: ("lower bound 0" if theta[k] <= 0.0 else f"upper bound {hi[k]:g} s")
                for k, t in enumerate(BENCH_TERMS) if bounded[k]}
    not_identified = [t for k, t in enumerate(BENCH_TERMS) if not free[k]]
    # How well the fit points pin each term, by the published suite's rule (`not_pinned`: a 90% range reaching past
    # the fit bound, the metrics known no better than the kernel model's run-level error). An engine preset never
    # uses such a term, for it stands for every deployment of the version; a user's own fit is of their deployment,
    # so the term is kept as fitted and said.
    from sim.config.engines import Z90
    spread = fit_spread(residuals, theta, free & ~bounded, run_level_noise(scenario)[1])
    unpinned = {t: float(math.exp(Z90 * spread["sigma_log"][k])) for k, t in enumerate(BENCH_TERMS)
                if spread["sigma_log"][k] is not None and not_pinned(theta[k], spread["sigma_log"][k], hi[k])}
    evaluations = []
    for i, p in enumerate(points):
        got = sim.metrics(i, p, terms)
        evaluations.append({"label": p.label, "source": p.source, "tool": p.tool, "used_in_fit": i in fit_idx,
                            "metrics": {k: (v, got[k]) for k, v in p.metrics.items()}})
    frontend = sim.frontend_base | {"per_request_s": terms["per_request_s"],
                                    "per_output_chunk_s": terms["per_output_chunk_s"]}
    return BenchFit(terms, at_bound, not_identified, sim.overhead(terms), frontend, [points[i].label for i in fit_idx],
                    evaluations, sim.simulations, [str(f) for f in bench_files], notes, unpinned)


def run_level_noise(scenario: Scenario) -> tuple[str | None, float]:
    """(residuals key, sigma): the log error a fit metric is known to at best, the measured run-level bias sigma of
    the scenario's kernel model (calibrate/residuals.json, sim/bands.py `step_time_sigmas`); (None, 0.0) where it
    has none. Used by `fit_bench` and the published suite's preset fit alike."""
    from sim.bands import step_time_sigmas
    from sim.run import make_cost_model
    try:
        key, bias, _, _ = step_time_sigmas(make_cost_model(scenario))
    except ConfigError:
        return None, 0.0
    return key, float(bias)


def term_limits(names) -> tuple[np.ndarray, np.ndarray]:
    """(finite-difference scale, upper bound) of each named term: FIT_STEPS_S and FIT_BOUNDS_S, as `fit_terms`
    takes them."""
    return np.array([FIT_STEPS_S[n] for n in names]), np.array([FIT_BOUNDS_S[n] for n in names])


def not_pinned(value: float, sigma_log: float, upper: float) -> bool:
    """Whether a fitted term's 90% range (value x/÷ exp(Z90 x sigma_log), `fit_spread`) reaches past its fit bound
    `upper`: its runs would then agree about as well with any value up to the bound, so the fit did not pin it. Such
    a term is said and never used, as one at a bound is."""
    from sim.config.engines import Z90
    return value * math.exp(Z90 * sigma_log) > upper


def at_bounds(theta: np.ndarray, free: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The fitted terms `fit_terms` left at a bound (0 or `hi`): not pinned by the fit, so said and never used."""
    return free & ((theta <= 0.0) | (theta >= hi))


# Levenberg-Marquardt damping tried, in turn, when no fraction of a Gauss-Newton step lowers the misfit: a simulated
# run's metrics are not linear in the terms (a TTFT is log(prefill + latency)), and a finite-difference Jacobian of a
# discrete-event run is noisy, so a full step can point far off where a damped one, nearer the gradient, still descends.
FIT_DAMPING = (1e-2, 1e-1, 1.0, 10.0, 100.0)


def fit_terms(residuals, theta: np.ndarray, scale: np.ndarray, hi: np.ndarray,
              iterations: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Newton on `residuals(theta)` (log errors), each step a non-negative least squares on finite differences
    with backtracking, then, where no fraction of it descends, Levenberg-Marquardt steps of growing damping
    (FIT_DAMPING), the terms kept in [0, hi]; the best point evaluated inside the bounds, finite-difference probes
    included, is the fit.
    (theta, free: the terms the residuals move; the others are not identified and stay at their start). Shared by
    `fit_bench` and the published suite's preset fit.
    Not scipy's `least_squares`: its bounded methods keep every iterate strictly inside the bounds, so a term the runs
    push to 0 or to its bound comes out just inside it, and `at_bounds` could no longer tell that the fit did not pin
    it (tried: on tests/unit/test_fit_terms.py's runs that want a front-end past its 1 s bound it stops at 0.99996 s).
    Each step's non-negative least squares is scipy's `nnls`."""
    r0 = residuals(theta)
    free = np.ones(len(theta), bool)
    best_theta, best_r = theta, r0

    def evaluated(point: np.ndarray) -> np.ndarray:
        nonlocal best_theta, best_r
        r = residuals(point)
        inside = bool(np.all(point >= 0.0) and np.all(point <= hi))  # a probe may step past a bound: never the fit
        if inside and float(r @ r) < float(best_r @ best_r):
            best_theta, best_r = point, r
        return r

    for it in range(iterations):
        # finite differences: a step of 10% of the term, at least its scale (the means move smoothly)
        h = np.maximum(0.1 * theta, scale)
        jac = np.zeros((len(r0), len(theta)))
        for k in np.flatnonzero(free):
            step = np.zeros(len(theta))
            step[k] = h[k]
            jac[:, k] = (evaluated(theta + step) - r0) / h[k] * scale[k]  # per `scale` of the term
        if it == 0:
            free = np.abs(jac).max(axis=0) > 1e-6  # a term the fit points do not move is not identified
            jac[:, ~free] = 0.0
        if not free.any():
            break
        j = jac[:, free]
        x = nnls(j, j @ (theta[free] / scale[free]) - r0)[0]
        target = theta.copy()
        target[free] = np.minimum(x * scale[free], hi[free])
        # backtracking: the linear step may overshoot where a queue forms
        proposals = [theta + fraction * (target - theta) for fraction in (1.0, 0.5, 0.25, 0.125)]
        normal, gradient = j.T @ j, j.T @ r0
        for damping in FIT_DAMPING:
            shift = np.linalg.solve(normal + damping * np.diag(np.maximum(np.diag(normal), 1e-12)), -gradient)
            proposal = theta.copy()
            proposal[free] = np.clip(theta[free] + shift * scale[free], 0.0, hi[free])
            proposals.append(proposal)
        accepted = False
        for proposal in proposals:
            r1 = evaluated(proposal)
            if float(r1 @ r1) < float(r0 @ r0):
                accepted = True
                break
        if not accepted:
            break
        converged = bool(np.all(np.abs(proposal - theta) <= 0.01 * np.maximum(theta, scale)))
        theta, r0 = proposal, r1
        if converged:
            break
    return best_theta, free


# How well a fit pins its terms (issue 31, source c): the spread of the least-squares estimate, linearized at the
# optimum (Gauss-Newton: the quadratic approximation of the log errors' profile likelihood), in log-term space,
# u = ln(theta), so that it is a log-normal sigma (a term is a positive time; "x 1.3" and "/ 1.3" weigh the same, as
# the log errors do). The fit is unweighted least squares, so under per-residual noise sigma_i its spread is the
# sandwich
#     Cov(u) = (J^T J)^-1 J^T diag(sigma_i^2) J (J^T J)^-1,   J = d r / d u (central differences, theta x e^(+-0.1)),
#     sigma_i = max(noise, |r_i|):
# a fit metric is known no better than `noise` (the caller's: for the published suite, the measured run-level bias of
# the kernel model that priced the fit runs, the error the CPU terms absorb; calibrate/residuals.json), nor better
# than the fit matched it. A run the terms hardly move (J ~ 0: a throughput run whose misfit is the kernels') adds
# its misfit with little weight, as it should; a pooled residual variance would let it widen every term. A term at a
# bound, or one the residuals do not move, is held where it is (not drawn; the others' spread is conditional on it).
SPREAD_LOG_STEP = 0.1


def fit_spread(residuals, theta: np.ndarray, interior: np.ndarray, noise: float) -> dict:
    """Each fitted term's log-normal sigma (above). `residuals(theta)`: the fit's log errors; `theta`: the fit's
    optimum; `interior`: the terms fitted strictly inside their bounds (the others are held); `noise`: the log
    error a fit metric is known to at best. Returns {"sigma_log": [per term: sigma, or None where held or not
    identified], "rms": the fit's root-mean-square log error, "n": residuals, "p": terms spread}."""
    theta = np.asarray(theta, float)
    r0 = np.asarray(residuals(theta), float)
    idx = [k for k in np.flatnonzero(interior) if theta[k] > 0.0]
    sigma: list[float | None] = [None] * len(theta)
    out = {"sigma_log": sigma, "rms": float(np.sqrt(np.mean(r0 ** 2))) if len(r0) else 0.0, "n": len(r0),
           "p": len(idx)}
    if not idx:
        return out
    jac = np.zeros((len(r0), len(idx)))
    for j, k in enumerate(idx):
        up, down = theta.copy(), theta.copy()
        up[k] *= math.exp(SPREAD_LOG_STEP)
        down[k] *= math.exp(-SPREAD_LOG_STEP)
        jac[:, j] = (np.asarray(residuals(up), float) - np.asarray(residuals(down), float)) / (2 * SPREAD_LOG_STEP)
    gram = jac.T @ jac
    if not ((np.abs(jac).max(axis=0) > 1e-9).all() and np.linalg.cond(gram) < 1e12):
        return out  # a term the residuals do not move, or two they cannot tell apart: not identified
    bread = np.linalg.inv(gram)
    var = np.maximum(noise, np.abs(r0)) ** 2
    cov = bread @ (jac.T * var) @ jac @ bread
    for j, k in enumerate(idx):
        sigma[k] = float(math.sqrt(max(cov[j, j], 0.0)))
    return out


def _initial_terms(sim: _PointSimulator, points, fit_idx: list[int], residuals) -> np.ndarray:
    """A starting point near the answer, from the lowest-load fit point simulated with the scenario's terms: what
    its TPOT lacks is CPU time per step (one sequence: per_step_s and per_seq_s, split 9:1 as the engine defaults
    are, sim/cost/overhead.py); what its TTFT lacks beyond that, the front-end's per-request work."""
    start = sim.start()
    theta = np.array([start[t] for t in BENCH_TERMS])
    lo = fit_idx[0]
    p = points[lo]
    got = sim.metrics(lo, p, start)
    tpot_key = "tpot_mean_s" if "tpot_mean_s" in p.metrics else ("itl_mean_s" if "itl_mean_s" in p.metrics else None)
    per_step = max(0.0, p.metrics[tpot_key] - got[tpot_key]) if tpot_key else 0.0
    theta[0] += 0.9 * per_step / max(1, p.users or 1)
    theta[1] += 0.1 * per_step / max(1, p.users or 1)
    if "ttft_mean_s" in p.metrics:
        theta[2] += max(0.0, p.metrics["ttft_mean_s"] - got["ttft_mean_s"] - per_step)
    return np.minimum(theta, [FIT_BOUNDS_S[t] for t in BENCH_TERMS])


def bench_scenario_yaml(scenario: Scenario, fit: BenchFit) -> str:
    import yaml

    data = scenario.model_dump(mode="json", exclude_none=True)
    cm = data["cost_model"]
    cm.pop("overhead", None)
    if cm["kind"] == "roofline":
        cm["step_overhead_s"] = 0.0  # the fitted per_step_s replaces it
    cm["overhead"] = {"engine": "none", **{t: float(getattr(fit.overhead, t)) for t in TERMS}}
    data["frontend"] = {k: (float(v) if isinstance(v, float) else v) for k, v in fit.frontend.items()}
    held_out = [e["label"] for e in fit.evaluations if not e["used_in_fit"]]
    header = (f"# fit-engine --bench: cost_model.overhead per_step_s, per_seq_s and frontend per_request_s, "
              f"per_output_chunk_s fitted to {', '.join(fit.sources)}\n"
              f"# fit points: {', '.join(fit.fit_labels)}; held out: {', '.join(held_out) or 'none'}; terms in seconds"
              + (f"; at a bound: {', '.join(f'{t} ({b})' for t, b in fit.at_bound.items())}" if fit.at_bound else "")
              + (f"; not identified (kept): {', '.join(fit.not_identified)}" if fit.not_identified else "")
              + (f"; not pinned (kept as fitted): {', '.join(fit.not_pinned)}" if fit.not_pinned else "") + "\n")
    return header + yaml.safe_dump(data, sort_keys=False)


def _term_text(term: str, value: float) -> str:
    return f"{value * 1e3:.3f} ms" if term == "per_request_s" else f"{value * 1e6:.2f} us"


def bench_report_text(fit: BenchFit) -> str:
    lines = [f"fitted on {', '.join(fit.fit_labels)} ({len(fit.fit_labels)} of {len(fit.evaluations)} points; "
             f"{fit.simulations} simulations of at most {MAX_POINT_REQUESTS} requests a point):"]
    for t in BENCH_TERMS:
        where = "front-end" if t in ("per_request_s", "per_output_chunk_s") else "engine"
        flag = (f"  AT {fit.at_bound[t].upper()}" if t in fit.at_bound else
                "  NOT IDENTIFIED by the fit points: kept at the scenario's value" if t in fit.not_identified else
                f"  NOT PINNED: its 90% range, x/÷ {fit.not_pinned[t]:.3g}, reaches past its bound (kept as fitted; "
                "an engine preset would not use it)" if t in fit.not_pinned else "")
        lines.append(f"  {t:<20} {_term_text(t, fit.terms[t]):>12}  ({where}){flag}")
    lines.append("error = (simulated - measured) / measured")
    lines.append("| point | source | set | metric | measured | simulated | error |")
    lines.append("| --- | --- | --- | --- | ---: | ---: | ---: |")
    sets = {"in-sample (fit)": [], "held out": []}
    for e in fit.evaluations:
        which = "in-sample (fit)" if e["used_in_fit"] else "held out"
        for k, (real, got) in e["metrics"].items():
            err = got / real - 1 if real else math.nan
            sets[which].append(abs(err))
            ms = k in ("ttft_mean_s", "tpot_mean_s", "itl_mean_s")
            fmt = (lambda v: f"{v * 1e3:.2f} ms") if ms else (lambda v: f"{v:.2f}")
            lines.append(f"| {e['label']} | {Path(e['source']).name} | {which} | {_METRIC_LABELS[k]} | {fmt(real)} | "
                         f"{fmt(got)} | {err:+.1%} |")
    for which, errs in sets.items():
        if errs:
            lines.append(f"{which}: mean |error| {np.mean(errs):.1%}, max {np.max(errs):.1%} over {len(errs)} "
                         "point-metrics")
        else:
            lines.append(f"{which}: no points")
    lines += [f"note: {n}" for n in fit.notes]
    return "\n".join(lines) + "\n"
