"""Bands (issue 31): every headline figure with the range it takes when what is uncertain is drawn again.

A band of level L (`run.band: 90`) comes from R replications of the run. Replication i draws anew, each source
switchable (`run.band_sources`):

- `workload`: another workload seed (`run.seed` of the replication, which also seeds the router and the
  speculative acceptance draws): the spread a different hour of the same traffic would show;
- `step_time`: the cost model's error, drawn from its measured residuals (`calibrate/residuals.json`, written by
  `python -m calibrate.residuals`): a bias shared by the whole run plus per-step noise by step kind
  (`sim/cost/draws.py`, which both engines call after pricing each step).

Replication i's seeds are a function of (run.seed, i) only, so every variant of a comparison sees the same
workloads and the same draws (common random numbers), and a band is the same bytes in every process.

**Why these R.** The band is [X(k), X(R+1-k)], the k-th smallest and k-th largest of the R replications' values,
with k = floor((R + 1)(1 - L) / 2). For a value drawn like one more replication (the unknown truth, if the
residuals describe the cost model's error) such an interval holds with probability (R + 1 - 2k) / (R + 1) >= L,
whatever the distribution (order statistics of exchangeable draws). R = 19 is the fewest replications for a 90%
band (k = 1: the lowest and highest of 19), and the default for every level up to 90; a level above needs
2 / (1 - L) - 1 (39 for 95%, 199 for 99). `run.band_replications` may ask for another number (more: steadier
edges), never for fewer than the level needs.

The point figure stays the run's own (its seed, no draws); the band does not have to contain it.

**Edges: the band of a long run in three runs** (`run.band_method: edges`; `auto` picks it from EDGE_BATCHES ×
EDGE_MIN_BATCH_REQUESTS requests when `step_time` is a source and `band_replications` is not set). On a long run
the step-time bias dominates the band (±20% on a 100k-request run, against a few percent from the workload and
the per-step noise, benchmarks/results/bands.md), and a figure that grows (or falls) with the bias takes its
L-quantiles at the bias's: for such a figure P(F(b) <= F(b_q)) = P(b <= b_q) = q exactly. So the band is two
runs on the point's requests with the bias at -z and +z bias sigmas (z the standard normal's (1 + L) / 2
quantile, per-step noise on), each edge moved out by the workload's spread: z × the standard deviation of the
figure over EDGE_BATCHES consecutive batches of the point run's requests / sqrt(EDGE_BATCHES) (batch means, which
keep the spread a correlated queue has). A difference B − A: the edge runs' differences, widened by the batch
spread of the per-batch differences (the same requests in both). What it assumes, stated where it is used: a
figure monotone in the bias (a figure that is not gets the range of its two edges, not its extremes), and a
workload spread that adds to the edges linearly (wider than their root-sum-square by at most the batch half-width).

**Threads.** Every run of a band (and the point run beside them) goes to a thread of its own, up to one per CPU:
the compiled core releases the GIL, so on a machine with free cores a band's wall-clock cost is its runs over
the cores (`_in_threads`). Each thread prices with its own copy of the cost model; the results do not depend on
the threads (tested: the same bytes as one run after another).

**Differences.** Two variants with the same run seed and band draw the same replications, so the band of a
difference B − A is the k-th smallest and largest of the R per-replication differences (`difference_bands`,
`servesim compare --band`): what the variants share (the workload, the cost model's bias) cancels, and "A beats B"
is said only where the whole band is on one side of 0. **The planner** holds a candidate to the SLOs at the
band's pessimistic edge (`pessimistic_misses`: the upper edge of each latency at the SLO percentile, the lower
edge of the goodput share), checked only at its fewest replicas (sim/tools/planner.py `confirm_with_band`).
"""

from __future__ import annotations

import copy
import json
import math
import queue
import zlib
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache, partial
from pathlib import Path
from statistics import NormalDist

import numpy as np

from sim.band_curves import curves_of, pointwise_edges  # ribbons: each run's curves; the order-statistic rule
from sim.config.band_level import (  # noqa: F401  (re-exported)
    MAX_REPLICATIONS,
    MIN_REPLICATIONS,
    check_band_size,
    order_index,
    replications_for,
)
from sim.errors import ConfigError
from sim.machine import usable_cpus

RESIDUALS_PATH = Path(__file__).resolve().parents[1] / "calibrate" / "residuals.json"
# `run.band_method: edges` (module docstring): the point run's requests in EDGE_BATCHES batches, each of at least
# EDGE_MIN_BATCH_REQUESTS so that a batch's p99 rests on 10 requests above it; "auto" picks edges from there.
EDGE_BATCHES = 19
EDGE_MIN_BATCH_REQUESTS = 1000
SEED_TAG = 31  # the replications' seed stream: SeedSequence([run.seed, SEED_TAG, i]) (issue 31)
# The headline figures that get a band (`summarize`'s keys; a lean summary holds every one of them).
BAND_METRICS = tuple(f"{m}_{s}" for m in ("ttft_s", "tpot_s", "e2e_s") for s in ("mean", "p50", "p90", "p99")) + (
    "offered_rps", "throughput_rps", "output_tokens_per_s", "total_tokens_per_s", "goodput_rps", "slo_fraction_ok")


def replication_seeds(seed: int, i: int) -> tuple[int, int]:
    """(workload seed, draw seed) of replication i: 32-bit, from (run.seed, SEED_TAG, i) alone."""
    state = np.random.SeedSequence([seed, SEED_TAG, i]).generate_state(2)
    return int(state[0]), int(state[1])


# --- the cost model's measured residuals --------------------------------------------------------------------

@lru_cache(maxsize=4)
def _residuals(path: str) -> dict:
    try:
        return json.loads(Path(path).read_text())["models"]
    except (OSError, json.JSONDecodeError, KeyError) as err:
        raise ConfigError(f"run.band_sources: step_time reads {path}, which cannot be read ({err}); allowed: the "
                          "file `python -m calibrate.residuals` writes") from None


def residual_key(cost_model) -> str:
    """Which residuals describe `cost_model`'s error: the kernel model's inside an engine overhead or speculative
    wrapper (the wrapper's own terms are estimates with no residuals yet: issue 31's source c), and a pipeline's
    stages' model."""
    from sim.cost.calibrated import CalibratedCostModel
    from sim.cost.learned import LearnedRooflineCostModel
    from sim.cost.measured import MeasuredCostModel, MeasuredFallback
    from sim.cost.overhead import EngineOverheadCostModel
    from sim.cost.roofline import FixedCostModel, RooflineCostModel, SpeculativeCostModel
    from sim.cost.steps import StepProfileCostModel
    from sim.cost.pipeline import PipelineCostModel
    if isinstance(cost_model, PipelineCostModel):
        cost_model = cost_model.stage_model
    while isinstance(cost_model, (EngineOverheadCostModel, SpeculativeCostModel)):
        cost_model = cost_model.kernels if isinstance(cost_model, EngineOverheadCostModel) else cost_model.target
    if isinstance(cost_model, MeasuredCostModel):
        return "measured"
    if isinstance(cost_model, LearnedRooflineCostModel):
        return "learned_roofline"
    if isinstance(cost_model, (MeasuredFallback, RooflineCostModel)):
        return "roofline"
    if isinstance(cost_model, StepProfileCostModel):
        return "steps"
    if isinstance(cost_model, CalibratedCostModel):
        return "ops"
    if isinstance(cost_model, FixedCostModel):
        return "fixed"
    return type(cost_model).__name__


def step_time_sigmas(cost_model, path: Path | None = None) -> tuple[str, float, float, float]:
    """(residuals key, bias sigma, prefill sigma, decode sigma) of the cost model in use, from `path` (default
    RESIDUALS_PATH); ConfigError when it has no measured residuals."""
    path = Path(path or RESIDUALS_PATH)
    key = residual_key(cost_model)
    models = _residuals(str(path))
    if key not in models:
        raise ConfigError(f"run.band_sources: step_time needs measured residuals of the cost model in use, and "
                          f"{key!r} has none in {path.name}; allowed: a cost model with residuals ("
                          f"{', '.join(sorted(models))}), or run.band_sources: [workload]; to add residuals, measure "
                          "held-out steps (calibrate steps) and rerun python -m calibrate.residuals")
    m = models[key]
    return key, float(m["bias_sigma"]), float(m["sigma_prefill"]), float(m["sigma_decode"])


# --- the replications ---------------------------------------------------------------------------------------

def simulate_with_band(scenario, workload=None, *, progress=None, cost_model=None, workloads: dict | None = None):
    """`sim.run.simulate`, and with `run.band` set also the band: the run itself (its seed, no draws), then its
    replications; the summary gains "band", and `result.extras["band_values"]` keeps each replication's figures
    ({metric: [R values]}, in replication order) for the band of a difference (`difference_bands`). The entry the
    CLI and the dashboard run a scenario through. `workloads`: see `replicate`."""
    from sim.run import make_cost_model, simulate
    if scenario.run.band is None:
        return simulate(scenario, workload, progress=progress, cost_model=cost_model)
    point = scenario.model_copy(update={"run": scenario.run.model_copy(update={"band": None})})
    if cost_model is None and scenario.hardware.disaggregation is None:
        cost_model = make_cost_model(point)  # built once, shared by the run and its replications
    # first: a band it cannot draw is refused before the run (band_runs checks before it starts one)
    curves: list = []  # ribbons
    band, values, result, batches = band_runs(scenario, cost_model=cost_model, workloads=workloads,
                                              point=(point, workload, progress), curves=curves)
    result.scenario = scenario
    result.summary["band"] = band
    result.extras["band_values"] = values
    result.extras["band_curves"] = curves  # ribbons: each band run's curves (sim/band_curves.py), in run order
    if batches is not None:
        result.extras["band_batches"] = batches
    return result


def band_of(scenario, *, cost_model=None, progress=None, workloads: dict | None = None) -> dict:
    """The band of `scenario.run.band`: {"level": L/100, "replications": R, "sources": [...], metric: [lo, hi],
    ...}. `cost_model`: the point run's (shared by every replication: pricing is a pure function of the step).
    `progress(done, total)` after each replication."""
    return replicate(scenario, cost_model=cost_model, progress=progress, workloads=workloads)[0]


def _band_keys(summary: dict) -> list[str]:
    """The figures a band covers: BAND_METRICS, and the SLO percentile's latencies (`slo_ttft_p95`, ...) where
    the scenario has limits (what the planner's pessimistic edge reads)."""
    slo = [k for k, v in summary.items() if k.startswith(("slo_ttft_p", "slo_tpot_p", "slo_e2e_p"))
           and not isinstance(v, bool)]
    share = ["slo_goodput_share"] if isinstance(summary.get("slo_goodput_share"), float) else []
    return list(BAND_METRICS) + sorted(slo) + share


def certain_miss(slo):
    """A `replicate` stop rule for the planner's check: stop once k replications exceed a latency limit at the
    SLO percentile (the band's upper edge, the k-th largest, is then over it whatever the others give)."""
    q = f"p{slo.percentile:g}"
    keys = [(f"slo_{m}_{q}", getattr(slo, f"{m}_s")) for m in ("ttft", "tpot", "e2e") if getattr(slo, f"{m}_s")]

    def stop(values: dict, k: int) -> bool:
        return any(sum(1 for v in values.get(key, []) if v is not None and v > limit) >= k for key, limit in keys)
    return stop


def pessimistic_misses(band: dict, slo) -> list[str]:
    """What a band misses at its pessimistic edge (the planner's test, issue 31): each latency limit against the
    upper edge of its SLO percentile, `min_goodput_fraction` against the lower edge of the goodput share, and
    every replication must finish its requests (`slo_met` in all R). [] where it meets them all."""
    q = f"p{slo.percentile:g}"
    out = []
    for metric in ("ttft", "tpot", "e2e"):
        limit = getattr(slo, f"{metric}_s")
        if limit is None:
            continue
        edges = band.get(f"slo_{metric}_{q}")
        if edges is None:
            out.append(f"{q} {metric.upper()} has no band")
        elif not edges[1] <= limit:  # NaN too: an edge that cannot be told is not within the limit
            out.append(f"{q} {metric.upper()} upper edge {edges[1]:.4g} s > {limit:g} s")
    if slo.min_goodput_fraction is not None:
        edges = band.get("slo_goodput_share")
        if edges is None or not edges[0] >= slo.min_goodput_fraction:
            lower = "none" if edges is None else f"{edges[0]:.1%}"
            out.append(f"goodput share lower edge {lower} < {slo.min_goodput_fraction:.0%}")
    met, total = band.get("slo_met_replications"), band["replications"]
    if not out and met is not None and met < total:
        out.append(f"SLOs met in {met} of {total} replications")
    return out


def band_method(scenario, num_requests: int) -> str:
    """How `scenario`'s band is drawn (`run.band_method`; "auto" decided by the run's size, see the module
    docstring): "replications" or "edges"."""
    run = scenario.run
    if run.band_method != "auto":
        return run.band_method
    if "step_time" in run.band_sources and run.band_replications is None \
            and num_requests >= EDGE_BATCHES * EDGE_MIN_BATCH_REQUESTS:
        return "edges"
    return "replications"


def replicate(scenario, *, cost_model=None, progress=None, workloads: dict | None = None,
              stop_when=None) -> tuple[dict | None, dict]:
    """(the band, {metric: [each replication's value]}) of `scenario.run.band`. `workloads`: a dict shared by
    the variants of a comparison, in which replication i's workload is generated once and reused by every
    variant whose workload section, seed, request count and context limit are the same (the same requests:
    common random numbers, generated once). `stop_when(values, k)`, asked after each replication, may end them
    early (a check that only needs a verdict, once it is certain): the band is then None."""
    band, values, _, _ = band_runs(scenario, cost_model=cost_model, progress=progress, workloads=workloads,
                                stop_when=stop_when)
    return band, values


def band_runs(scenario, *, cost_model=None, progress=None, workloads: dict | None = None, stop_when=None,
              point=None, curves: list | None = None, figures=None):  # ribbons: `curves` gets each run's curves_of
    """(band, values, the point run's Result or None, the batch figures or None): `replicate`'s work, and the
    point run too when `point` is given ((the scenario without its band, its workload or None, its progress
    callback)). Every run of the band goes to a thread of its own (`_in_threads`), the point run beside them.
    `figures(result) -> {name: value}`: what each replication is read for, instead of its summary's headline
    figures (a benchmark's own quantities: the runs then keep their full summary, and the method is
    replications, whose order statistics need no batch figures)."""
    from sim.cost.draws import draw_pack
    from sim.run import deployment_of, make_cost_model, make_workload, simulate
    run = scenario.run
    level = run.band
    sources = list(run.band_sources)
    disaggregated = scenario.hardware.disaggregation is not None
    if cost_model is None and not disaggregated:
        cost_model = make_cost_model(scenario)
    sigmas = None
    if "step_time" in sources:
        if disaggregated:
            sigmas = ("", 0.0, 0.0, 0.0)  # simulate refuses it, with its own line
        else:
            sigmas = step_time_sigmas(cost_model)
    misfit = engine_misfit(scenario, sources) if not disaggregated else None
    kernel_sigmas = sigmas
    if misfit is not None:  # the engine model's own error: a further shared bias (source engine_model)
        sigmas = sigmas or (residual_key(cost_model), 0.0, 0.0, 0.0)
        sigmas = (sigmas[0], math.hypot(sigmas[1], misfit[0]), sigmas[2], sigmas[3])
    max_len = None if disaggregated else deployment_of(scenario).max_model_len
    priced = None if disaggregated else cost_model

    made: dict = {} if workloads is None else workloads

    def workload_of(rep):
        if disaggregated:
            return make_workload(rep)
        key = (rep.workload.model_dump_json(), rep.run.seed, rep.run.num_requests, rep.run.duration_s, max_len,
               rep.scheduler.too_long)
        if key not in made:
            made[key] = make_workload(rep)
        return made[key]

    plain = scenario.model_copy(update={"run": run.model_copy(update={"band": None})})  # the point run's scenario
    point_job, plain_workload = None, None
    if point is not None:
        point_scenario, plain_workload, point_progress = point
        if plain_workload is None:
            plain_workload = make_workload(point_scenario)
        point_job = partial(_simulate_run, simulate, point_scenario, plain_workload, None, False, False,
                            progress=point_progress)
    method = "replications"
    if sigmas is not None and not disaggregated and figures is None:
        if plain_workload is None:
            plain_workload = make_workload(plain)
        method = band_method(scenario, plain_workload.num_requests)
    spreads = term_spreads(plain, sources)
    drawn = _source_entries(kernel_sigmas, spreads, misfit)
    if method == "edges":
        return _edges(scenario, plain, plain_workload, priced, sigmas, spreads, drawn, point_job, progress, curves)

    R = replications_for(level, run.band_replications)
    k = order_index(level, R)
    jobs = []
    for i in range(R):
        workload_seed, draw_seed = replication_seeds(run.seed, i)
        seed = workload_seed if "workload" in sources else run.seed
        rep = scenario.model_copy(update={"run": run.model_copy(update={"seed": seed, "band": None})})
        draws = draw_pack(draw_seed, *sigmas[1:]) if sigmas is not None else None
        workload = workload_of(rep)
        if spreads:  # the engine's CPU and front-end terms drawn: a cost model of the replication's own
            rep = _with_terms(rep, {t.key: term_z(draw_seed, t.key) for t in spreads})
        jobs.append(partial(_simulate_run, simulate, rep, workload, draws, "band" if figures is None else False,
                            bool(spreads), curves=curves is not None))
    values: dict[str, list] = {}
    slo_met: int | None = 0
    point_result = None
    for i, result in _in_threads(jobs, priced, point_job):
        if i is None:
            point_result = result
            continue
        got = result.summary if figures is None else figures(result)
        if i == 0:
            values = {name: [] for name in (_band_keys(got) if figures is None else got)}
        for name in values:
            values[name].append(got.get(name))
        if curves is not None:  # ribbons
            curves.append(result.extras.pop("curves"))
        if result.summary.get("slo_met") is None:
            slo_met = None  # no SLO limits: nothing to meet
        elif slo_met is not None:
            slo_met += bool(result.summary["slo_met"])
        if progress is not None:
            progress(i + 1, R)
        if stop_when is not None and i + 1 < R and stop_when(values, k):
            return None, values, point_result, None
    band = {"level": level / 100, "method": "replications", "replications": R, "sources": sources, **drawn}
    for name, got in values.items():
        band[name] = edges(got, k)
    band["slo_met_replications"] = slo_met  # of R (None: no limits): a verdict that flips inside the band has 0 < this < R
    return band, values, point_result, None


def _source_entries(kernel_sigmas, spreads, misfit) -> dict:
    """What the band drew, each as measured (not combined): the kernels' residuals, the engine terms' spreads,
    the engine model's misfit."""
    out: dict = {}
    if kernel_sigmas is not None:
        out["step_time_residuals"] = {"cost_model": kernel_sigmas[0], "bias_sigma": kernel_sigmas[1],
                                      "sigma_prefill": kernel_sigmas[2], "sigma_decode": kernel_sigmas[3]}
    if spreads:
        out["engine_terms"] = [{"key": t.key, "point": t.point, "sigma_log": t.sigma_log, "kind": t.kind}
                               for t in spreads]
    if misfit is not None:
        out["engine_model_misfit"] = {"sigma_log": misfit[0], "source": misfit[1]}
    return out


def _simulate_run(simulate, scenario, workload, draws, lean, own_cost_model, cost_model, progress=None, curves=False):
    """One run of a band (or its point run: no draws, full summary, the caller's progress); `lean`: the summary's
    (`simulate`'s lean_summary: "band" for the band's own runs); `own_cost_model`: its scenario's engine terms
    were drawn, so it builds its own. `curves`: its ribbons' curves (`curves_of`) go into extras["curves"], taken
    in the run's own thread, beside the others."""
    result = simulate(scenario, workload, progress=progress, cost_model=None if own_cost_model else cost_model,
                      step_draws=draws, lean_summary=lean)
    if curves:
        result.extras["curves"] = curves_of(result)
    return result


# --- source c: the engine's CPU and front-end terms ------------------------------------------------------------

TERMS_REPLICA = -2  # the key (draw seed, TERMS_REPLICA, crc32 of the term's scenario key) draws a term's z


def term_spreads(scenario, sources) -> list:
    """The engine terms a band draws (sim/config/engines/spread.py `engine_term_spread`): [] unless `engine_terms` is a
    source and the scenario's engine preset put uncertain terms into it."""
    if "engine_terms" not in sources:
        return []
    from sim.config.engines import engine_term_spread
    return engine_term_spread(scenario)


def engine_misfit(scenario, sources) -> tuple[float, str] | None:
    """(sigma_log, source) of the engine preset's model error beyond its terms (sim/config/engines/spread.py
    `engine_model_misfit`), drawn with the step-time bias when `engine_model` is a source; None otherwise."""
    if "engine_model" not in sources:
        return None
    from sim.config.engines import engine_model_misfit
    return engine_model_misfit(scenario)


def term_z(draw_seed: int, key: str) -> float:
    """A replication's standard-normal draw of one engine term: a function of (its draw seed, the term's scenario
    key) only, so every variant of a comparison draws the same z for the same term (common random numbers)."""
    from sim.cost.draws import standard_normal
    return float(standard_normal(draw_seed, TERMS_REPLICA, zlib.crc32(key.encode()) & 0x7FFFFFFF))


def _with_terms(scenario, z: dict):
    from sim.config.engines import with_engine_terms_drawn
    return with_engine_terms_drawn(scenario, z)


def _in_threads(jobs, cost_model, point_job=None):
    """Yield (i, jobs[i](cost model)) in the order of `jobs`, and (None, point_job(cost_model)) first when
    given. The runs are independent (each its own workload, draws and state), so their results do not depend on
    which thread ran them or when: the compiled core releases the GIL (sim/compiled/kernel.py `run`), and up to
    one run per CPU goes at a time. The point run prices with `cost_model` itself (its notes, e.g. points
    outside measured tables, are the caller's); every other thread with its own copy, so no two runs write one
    model's scratch state at once."""
    workers = max(1, min(len(jobs) + (point_job is not None), usable_cpus()))
    if workers == 1 or cost_model is None:
        if point_job is not None:
            yield None, point_job(cost_model)
        for i, job in enumerate(jobs):
            yield i, job(cost_model)
        return
    # The copies are made here, before any run starts (a run may fill its model's caches while it is copied).
    copies: queue.SimpleQueue = queue.SimpleQueue()
    for _ in range(workers):
        copies.put(copy.deepcopy(cost_model))

    def priced(job):
        own = copies.get()
        try:
            return job(own)
        finally:
            copies.put(own)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(priced, job) for job in jobs]
        try:
            if point_job is not None:
                yield None, point_job(cost_model)  # in this thread, beside the pool's
            for i, future in enumerate(futures):
                yield i, future.result()
        finally:
            for future in futures:
                future.cancel()  # a stop rule ended them early: the runs not started are not run


def _edges(scenario, plain, workload, cost_model, sigmas, spreads, drawn, point_job, progress, curves=None):
    """The band as two runs at the edges of the shared error (`run.band_method: edges`, module docstring): the
    cost model's bias at its lower and upper (1 ± L) / 2 quantiles, per-step noise on, the point's requests;
    widened by the workload's spread (batch means of the point run) when `workload` is a source. `sigmas`: the
    bias drawn (the kernels' and the engine model's together); `drawn`: the band's entries naming them."""
    from sim.cost.draws import DRAW_BIAS, draw_pack
    from sim.run import simulate
    run = scenario.run
    sources = list(run.band_sources)
    z = NormalDist().inv_cdf((1 + run.band / 100) / 2)
    _, draw_seed = replication_seeds(run.seed, 0)
    jobs = []
    for sign in (-1.0, 1.0):
        draws = draw_pack(draw_seed, 0.0, sigmas[2], sigmas[3])
        draws[DRAW_BIAS] = sign * z * sigmas[1]
        # the engine terms at the same edge as the bias (slower with slower): comonotone, so the edges are at
        # least as far apart as the sources drawn independently would put them
        edge = _with_terms(plain, {t.key: sign * z for t in spreads}) if spreads else plain
        jobs.append(partial(_simulate_run, simulate, edge, workload, draws, "band", bool(spreads),
                            curves=curves is not None))
    if point_job is None:  # the batch means read the point run's records: a lean one does
        point_job = partial(_simulate_run, simulate, plain, workload, None, "band", False)
    point_result, runs = None, []
    for i, result in _in_threads(jobs, cost_model, point_job):
        if i is None:
            point_result = result
        else:
            runs.append(result)
            if curves is not None:  # ribbons
                curves.append(result.extras.pop("curves"))
            if progress is not None:
                progress(i + 1, len(jobs))
    keys = _band_keys(runs[0].summary)
    values = {name: [r.summary.get(name) for r in runs] for name in keys}
    batches = batch_figures(point_result, keys, scenario.slo) if "workload" in sources else None
    band = {"level": run.band / 100, "method": "edges", "replications": len(runs), "sources": sources, **drawn}
    for name in keys:
        band[name] = widened(values[name], batches[name] if batches else None, z)
    met = [r.summary.get("slo_met") for r in runs]
    band["slo_met_replications"] = None if met[0] is None else sum(bool(m) for m in met)
    return band, values, point_result, batches


def batch_figures(result, keys, slo) -> dict[str, list]:
    """{figure: [its value in each of EDGE_BATCHES batches]}: the point run's requests cut in arrival order into
    EDGE_BATCHES consecutive batches, each summarized as a run of its own (sim/results.py's definitions: the
    requests, their finished ones, the steps ending while the batch arrived, over that span)."""
    from sim.results import (LEAN_LATENCIES, STATUS_CODES, as_requests, as_table, latencies, sent_column, slo_metrics,
                             throughput)
    from sim.table import Table
    requests, steps = (as_requests(result.records[0]), as_table(result.records[1]))
    sent_name = sent_column(requests)
    sent = np.asarray(requests[sent_name], dtype=float)
    order = np.argsort(sent, kind="stable")
    parts = np.array_split(order, EDGE_BATCHES)
    step_end = np.asarray(steps["end_s"], dtype=float) if len(steps) else np.zeros(0)
    finish = np.asarray(requests["finish_s"], dtype=float)
    # Only the columns the batch summaries read (throughput, lean latencies, SLOs): selecting every column of every
    # batch copied the whole records once more (0.3 s of a 1M-request band, after its runs)
    requests = Table({name: requests[name] for name in ("finished", "status", sent_name, "output_tokens",
                                                         "prompt_tokens", *LEAN_LATENCIES)})
    steps = Table({"num_output_tokens": steps["num_output_tokens"]}, len(steps))
    out: dict[str, list] = {name: [] for name in keys}
    for j, idx in enumerate(parts):
        mask = np.zeros(len(sent), dtype=bool)
        mask[idx] = True
        start = float(sent[idx[0]])
        end = float(sent[parts[j + 1][0]]) if j + 1 < len(parts) else float(np.nanmax(finish[idx], initial=start))
        span = max(end - start, 1e-12)
        sub = requests[mask]
        fin = sub[sub["finished"]]
        s = throughput(sub, fin, steps[(step_end >= start) & (step_end < end)], span)
        s.update(latencies(fin, steps, lean=True))
        unfinished = int((sub["status"] == STATUS_CODES["unfinished"]).sum())
        s.update(slo_metrics(sub, fin, slo, span, all_done=unfinished == 0, known=s))
        for name in keys:
            value = s.get(name)
            out[name].append(None if value is None or isinstance(value, bool) else float(value))
    return out


def sampling_halfwidth(batch_values: list | None, z: float) -> float | None:
    """z × the standard deviation of the batch figures / sqrt(batches): the batch-means estimate of a figure's
    spread across workloads (None where a batch lacks it; inf where a batch's is unbounded: its SLO percentile
    falls on a rejected request, `sim.results.percentile_with_refused`)."""
    if batch_values is None or any(v is None or math.isnan(v) for v in batch_values):
        return None
    values = np.asarray(batch_values, dtype=float)
    if np.isinf(values).any():
        return math.inf
    return z * float(values.std(ddof=1)) / math.sqrt(len(values))


def widened(run_values: list, batch_values: list | None, z: float) -> list | None:
    """The edges band of one figure: [the lower, the higher] of the two edge runs, each moved out by the
    workload's spread (`sampling_halfwidth`; 0 without the workload source)."""
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in run_values):
        return None
    lo, hi = min(float(v) for v in run_values), max(float(v) for v in run_values)
    if batch_values is None:
        return [lo, hi]
    h = sampling_halfwidth(batch_values, z)
    return None if h is None else [lo - h, hi + h]


# --- the band of a difference -------------------------------------------------------------------------------

def comparable(a, b) -> str | None:
    """Why two banded results cannot be differenced replication by replication (None: they can): the same
    replications need the same run seed, level, replication count and sources (common random numbers)."""
    band_a, band_b = a.summary.get("band"), b.summary.get("band")
    if not band_a or not band_b or "band_values" not in a.extras or "band_values" not in b.extras:
        return "no band on both"
    for field in ("level", "method", "replications", "sources"):
        if band_a.get(field) != band_b.get(field):
            return f"band {field} differs ({band_a[field]} vs {band_b[field]})"
    if a.scenario.run.seed != b.scenario.run.seed:
        return f"run.seed differs ({a.scenario.run.seed} vs {b.scenario.run.seed})"
    return None


def difference_band(a_values: list, b_values: list, k: int, a_batches: list | None = None,
                    b_batches: list | None = None, z: float | None = None) -> list | None:
    """The band of B − A: the k-th smallest and largest of the R per-replication differences b_i − a_i (each
    pair from the same replication: the same requests and draws), None where a replication lacks the figure.
    An edges band (`a_batches`, `b_batches`: each variant's batch figures on the same requests; `z`): the two
    edge runs' differences, widened by the batch-means spread of the per-batch differences."""
    if len(a_values) != len(b_values):
        return None
    if any(v is None for v in (*a_values, *b_values)):
        return None
    differences = [float(b) - float(a) for a, b in zip(a_values, b_values)]
    if z is None:
        return edges(differences, k)
    batch = None
    if a_batches is not None and b_batches is not None:
        if any(v is None for v in (*a_batches, *b_batches)):
            return None
        batch = [float(b) - float(a) for a, b in zip(a_batches, b_batches)]
    return widened(differences, batch, z)


def _difference(a, b, metric: str) -> list | None:
    """The band of b − a on `metric` for two comparable banded results, by their band's method."""
    band = a.summary["band"]
    av, bv = a.extras["band_values"], b.extras["band_values"]
    if band.get("method") == "edges":
        z = NormalDist().inv_cdf((1 + band["level"]) / 2)
        ab, bb = a.extras.get("band_batches"), b.extras.get("band_batches")
        return difference_band(av[metric], bv[metric], 0, ab.get(metric) if ab else None,
                               bb.get(metric) if bb else None, z)
    k = order_index(a.scenario.run.band, band["replications"])
    return difference_band(av[metric], bv[metric], k)


def reading(key: str, band: list | None, name_a: str, name_b: str) -> str:
    """What a difference band B − A says: who is better on `key` across the whole band, or "within the band"."""
    if band is None:
        return "no band"
    lo, hi = band
    if lo == hi == 0.0:
        return "identical in every replication"
    latency = any(m in key for m in ("ttft", "tpot", "e2e"))
    if hi < 0:
        return f"{name_b} {'faster' if latency else 'lower'} across the band"
    if lo > 0:
        return f"{name_b} {'slower' if latency else 'higher'} across the band"
    return "within the band"


def difference_bands(results, reference: str, keys=None) -> dict:
    """Each other variant against `reference` (a variant name): {"level", "replications", "reference",
    "variants": {name: {metric: {"point": B − A of the point runs, "band": [lo, hi], "reading": ...}}},
    "not_comparable": {name: why}}. `keys`: the figures (default: every figure both bands hold)."""
    by_name = {r.name: r for r in results}
    ref = by_name[reference]
    band = ref.summary["band"]
    out = {"level": band["level"], "method": band.get("method"), "replications": band["replications"],
           "sources": band["sources"],
           "reference": reference, "variants": {}, "not_comparable": {}}
    for r in results:
        if r.name == reference:
            continue
        why = comparable(ref, r)
        if why is not None:
            out["not_comparable"][r.name] = why
            continue
        a_vals, b_vals = ref.extras["band_values"], r.extras["band_values"]
        names = keys if keys is not None else [m for m in a_vals if m in b_vals]
        rows = {}
        for m in names:
            if m not in a_vals or m not in b_vals:
                continue
            d = _difference(ref, r, m)
            pa, pb = ref.summary.get(m), r.summary.get(m)
            point = (float(pb) - float(pa)) if isinstance(pa, (int, float)) and isinstance(pb, (int, float)) \
                and not isinstance(pa, bool) and not isinstance(pb, bool) else None
            rows[m] = {"point": point, "band": d, "reading": reading(m, d, reference, r.name)}
        out["variants"][r.name] = rows
    return out


def pair_differences(results) -> dict:
    """(A, B) -> {metric: [lo, hi]} of B − A, for every ordered pair of comparable banded results: what the
    verdict reads (sim/views/verdict.py `differences`)."""
    out: dict = {}
    for a in results:
        for b in results:
            if a is b or comparable(a, b) is not None:
                continue
            av, bv = a.extras["band_values"], b.extras["band_values"]
            out[(a.name, b.name)] = {m: _difference(a, b, m) for m in av if m in bv}
    return out


def edges(values: list, k: int) -> list | None:
    """[k-th smallest, k-th largest] of the values; None when a replication lacks the figure (or it is NaN). The
    rule is sim/band_curves.py `pointwise_edges`' (the ribbons' too), at one point."""
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in values):
        return None
    lo, hi = pointwise_edges([[float(v)] for v in values], k)
    return [float(lo[0]), float(hi[0])]


__all__ = ["BAND_METRICS", "band_of", "comparable", "difference_band", "difference_bands",
           "certain_miss", "pair_differences", "pessimistic_misses", "reading", "replicate", "simulate_with_band", "check_band_size", "edges", "order_index",
           "replication_seeds", "replications_for", "residual_key", "step_time_sigmas"]
