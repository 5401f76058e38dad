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

import itertools
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from sim.config.schema import Scenario
from sim.cost.overhead import TERMS, EngineOverhead, EngineOverheadCostModel, engine_overhead
from sim.errors import ConfigError

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
    return Measurements(kind, files, frames)


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
    o = getattr(scenario.cost_model, "overhead", None)
    if o is None:
        return engine_overhead("none")
    return engine_overhead(o.engine, per_step_s=o.per_step_s, per_seq_s=o.per_seq_s,
                           per_prefill_token_s=o.per_prefill_token_s, launch_per_layer_s=o.launch_per_layer_s)


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

def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares for a few columns: the best least-squares solution over every set of free
    columns whose solution is non-negative (exact; 2^k small solves)."""
    k = a.shape[1]
    best, best_res = np.zeros(k), float(b @ b)
    for r in range(1, k + 1):
        for cols in itertools.combinations(range(k), r):
            sub = a[:, cols]
            x, *_ = np.linalg.lstsq(sub, b, rcond=None)
            if (x < 0).any():
                continue
            res = float(((sub @ x - b) ** 2).sum())
            if res < best_res:
                best_res, best = res, np.zeros(k)
                best[list(cols)] = x
    return best


def fit_steps(m: Measurements, kernels, start: EngineOverhead, num_layers: int) -> tuple[EngineOverhead, dict]:
    from calibrate.fidelity.overhead import step_plan

    steps = pd.concat(m.frames, ignore_index=True)
    plans = [step_plan(r) for r in steps.itertuples()]
    measured = (steps["end_s"] - steps["start_s"]).to_numpy(float)
    kernel_s = np.array([kernels.step_time(p) for p in plans])
    launch = start.launch_per_layer_s * num_layers
    base = np.maximum(kernel_s, launch)
    a = np.array([[1.0, p.num_seqs, p.num_prefill_tokens] for p in plans])
    x = nnls(a, measured - base)
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
