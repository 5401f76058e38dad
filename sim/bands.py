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

**Differences.** Two variants with the same run seed and band draw the same replications, so the band of a
difference B − A is the k-th smallest and largest of the R per-replication differences (`difference_bands`,
`servesim compare --band`): what the variants share (the workload, the cost model's bias) cancels, and "A beats B"
is said only where the whole band is on one side of 0. **The planner** holds a candidate to the SLOs at the
band's pessimistic edge (`pessimistic_misses`: the upper edge of each latency at the SLO percentile, the lower
edge of the goodput share), checked only at its fewest replicas (sim/tools/planner.py `confirm_with_band`).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

import numpy as np

from sim.config.band_level import (  # noqa: F401  (re-exported)
    MAX_REPLICATIONS,
    MIN_REPLICATIONS,
    check_band_size,
    order_index,
    replications_for,
)
from sim.errors import ConfigError

RESIDUALS_PATH = Path(__file__).resolve().parents[1] / "calibrate" / "residuals.json"
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
    wrapper (the wrapper's own terms are estimates with no residuals yet: issue 31's source c)."""
    from sim.cost.calibrated import CalibratedCostModel
    from sim.cost.learned import LearnedRooflineCostModel
    from sim.cost.measured import MeasuredCostModel, MeasuredFallback
    from sim.cost.overhead import EngineOverheadCostModel
    from sim.cost.roofline import FixedCostModel, RooflineCostModel, SpeculativeCostModel
    from sim.cost.steps import StepProfileCostModel
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
    # first: a band it cannot draw is refused before the run
    band, values = replicate(scenario, cost_model=cost_model, workloads=workloads)
    result = simulate(point, workload, progress=progress, cost_model=cost_model)
    result.scenario = scenario
    result.summary["band"] = band
    result.extras["band_values"] = values
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
        elif edges[1] > limit:
            out.append(f"{q} {metric.upper()} upper edge {edges[1]:.4g} s > {limit:g} s")
    if slo.min_goodput_fraction is not None:
        edges = band.get("slo_goodput_share")
        if edges is None or edges[0] < slo.min_goodput_fraction:
            lower = "none" if edges is None else f"{edges[0]:.1%}"
            out.append(f"goodput share lower edge {lower} < {slo.min_goodput_fraction:.0%}")
    met, total = band.get("slo_met_replications"), band["replications"]
    if not out and met is not None and met < total:
        out.append(f"SLOs met in {met} of {total} replications")
    return out


def replicate(scenario, *, cost_model=None, progress=None, workloads: dict | None = None,
              stop_when=None) -> tuple[dict | None, dict]:
    """(the band, {metric: [each replication's value]}) of `scenario.run.band`. `workloads`: a dict shared by
    the variants of a comparison, in which replication i's workload is generated once and reused by every
    variant whose workload section, seed, request count and context limit are the same (the same requests:
    common random numbers, generated once). `stop_when(values, k)`, asked after each replication, may end them
    early (a check that only needs a verdict, once it is certain): the band is then None."""
    from sim.cost.draws import draw_pack
    from sim.run import deployment_of, make_cost_model, make_workload, simulate
    run = scenario.run
    level = run.band
    sources = list(run.band_sources)
    R = replications_for(level, run.band_replications)
    k = order_index(level, R)
    disaggregated = scenario.hardware.disaggregation is not None
    if cost_model is None and not disaggregated:
        cost_model = make_cost_model(scenario)
    sigmas = None
    if "step_time" in sources:
        if disaggregated:
            sigmas = ("", 0.0, 0.0, 0.0)  # simulate refuses it, with its own line
        else:
            sigmas = step_time_sigmas(cost_model)
    max_len = None if disaggregated else deployment_of(scenario).max_model_len
    values: dict[str, list] = {}
    slo_met: int | None = 0
    for i in range(R):
        workload_seed, draw_seed = replication_seeds(run.seed, i)
        seed = workload_seed if "workload" in sources else run.seed
        rep = scenario.model_copy(update={"run": run.model_copy(update={"seed": seed, "band": None})})
        draws = draw_pack(draw_seed, *sigmas[1:]) if sigmas is not None else None
        if workloads is None or disaggregated:
            workload = make_workload(rep)
        else:
            key = (rep.workload.model_dump_json(), seed, rep.run.num_requests, rep.run.duration_s, max_len)
            if key not in workloads:
                workloads[key] = make_workload(rep)
            workload = workloads[key]
        result = simulate(rep, workload, cost_model=None if disaggregated else cost_model,
                          step_draws=draws, lean_summary=True)
        if i == 0:
            values = {name: [] for name in _band_keys(result.summary)}
        for name in values:
            values[name].append(result.summary.get(name))
        if result.summary.get("slo_met") is None:
            slo_met = None  # no SLO limits: nothing to meet
        elif slo_met is not None:
                slo_met += bool(result.summary["slo_met"])
        if progress is not None:
            progress(i + 1, R)
        if stop_when is not None and i + 1 < R and stop_when(values, k):
            return None, values
    band = {"level": level / 100, "replications": R, "sources": sources}
    if sigmas is not None:
        band["step_time_residuals"] = {"cost_model": sigmas[0], "bias_sigma": sigmas[1],
                                       "sigma_prefill": sigmas[2], "sigma_decode": sigmas[3]}
    for name, got in values.items():
        band[name] = edges(got, k)
    band["slo_met_replications"] = slo_met  # of R (None: no limits): a verdict that flips inside the band has 0 < this < R
    return band, values


# --- the band of a difference -------------------------------------------------------------------------------

def comparable(a, b) -> str | None:
    """Why two banded results cannot be differenced replication by replication (None: they can): the same
    replications need the same run seed, level, replication count and sources (common random numbers)."""
    band_a, band_b = a.summary.get("band"), b.summary.get("band")
    if not band_a or not band_b or "band_values" not in a.extras or "band_values" not in b.extras:
        return "no band on both"
    for field in ("level", "replications", "sources"):
        if band_a[field] != band_b[field]:
            return f"band {field} differs ({band_a[field]} vs {band_b[field]})"
    if a.scenario.run.seed != b.scenario.run.seed:
        return f"run.seed differs ({a.scenario.run.seed} vs {b.scenario.run.seed})"
    return None


def difference_band(a_values: list, b_values: list, k: int) -> list | None:
    """The band of B − A: the k-th smallest and largest of the R per-replication differences b_i − a_i (each
    pair from the same replication: the same requests and draws), None where a replication lacks the figure."""
    if len(a_values) != len(b_values):
        return None
    if any(v is None for v in (*a_values, *b_values)):
        return None
    return edges([float(b) - float(a) for a, b in zip(a_values, b_values)], k)


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
    k = order_index(ref.scenario.run.band, band["replications"])
    out = {"level": band["level"], "replications": band["replications"], "sources": band["sources"],
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
            d = difference_band(a_vals[m], b_vals[m], k)
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
            k = order_index(a.scenario.run.band, a.summary["band"]["replications"])
            av, bv = a.extras["band_values"], b.extras["band_values"]
            out[(a.name, b.name)] = {m: difference_band(av[m], bv[m], k) for m in av if m in bv}
    return out


def edges(values: list, k: int) -> list | None:
    """[k-th smallest, k-th largest] of the values; None when a replication lacks the figure (or it is NaN)."""
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in values):
        return None
    ordered = sorted(float(v) for v in values)
    return [ordered[k - 1], ordered[len(ordered) - k]]


__all__ = ["BAND_METRICS", "band_of", "comparable", "difference_band", "difference_bands",
           "certain_miss", "pair_differences", "pessimistic_misses", "reading", "replicate", "simulate_with_band", "check_band_size", "edges", "order_index",
           "replication_seeds", "replications_for", "residual_key", "step_time_sigmas"]
