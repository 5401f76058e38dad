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

def simulate_with_band(scenario, workload=None, *, progress=None, cost_model=None):
    """`sim.run.simulate`, and with `run.band` set also the band: the run itself (its seed, no draws), then its
    replications; the summary gains "band". The entry the CLI and the dashboard run a scenario through."""
    from sim.run import make_cost_model, simulate
    if scenario.run.band is None:
        return simulate(scenario, workload, progress=progress, cost_model=cost_model)
    point = scenario.model_copy(update={"run": scenario.run.model_copy(update={"band": None})})
    if cost_model is None and scenario.hardware.disaggregation is None:
        cost_model = make_cost_model(point)  # built once, shared by the run and its replications
    band = band_of(scenario, cost_model=cost_model)  # first: a band it cannot draw is refused before the run
    result = simulate(point, workload, progress=progress, cost_model=cost_model)
    result.scenario = scenario
    result.summary["band"] = band
    return result


def band_of(scenario, *, cost_model=None, progress=None) -> dict:
    """The band of `scenario.run.band`: {"level": L/100, "replications": R, "sources": [...], metric: [lo, hi],
    ...}. `cost_model`: the point run's (shared by every replication: pricing is a pure function of the step).
    `progress(done, total)` after each replication."""
    from sim.cost.draws import draw_pack
    from sim.run import make_cost_model, make_workload, simulate
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
    values = {name: [] for name in BAND_METRICS}
    slo_met = 0
    for i in range(R):
        workload_seed, draw_seed = replication_seeds(run.seed, i)
        seed = workload_seed if "workload" in sources else run.seed
        rep = scenario.model_copy(update={"run": run.model_copy(update={"seed": seed, "band": None})})
        draws = draw_pack(draw_seed, *sigmas[1:]) if sigmas is not None else None
        result = simulate(rep, make_workload(rep), cost_model=None if disaggregated else cost_model,
                          step_draws=draws, lean_summary=True)
        for name in BAND_METRICS:
            values[name].append(result.summary.get(name))
        slo_met += bool(result.summary.get("slo_met"))
        if progress is not None:
            progress(i + 1, R)
    band = {"level": level / 100, "replications": R, "sources": sources}
    if sigmas is not None:
        band["step_time_residuals"] = {"cost_model": sigmas[0], "bias_sigma": sigmas[1],
                                       "sigma_prefill": sigmas[2], "sigma_decode": sigmas[3]}
    for name, got in values.items():
        band[name] = edges(got, k)
    band["slo_met_replications"] = slo_met  # of R: a verdict that flips inside the band has 0 < this < R
    return band


def edges(values: list, k: int) -> list | None:
    """[k-th smallest, k-th largest] of the values; None when a replication lacks the figure (or it is NaN)."""
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in values):
        return None
    ordered = sorted(float(v) for v in values)
    return [ordered[k - 1], ordered[len(ordered) - k]]


__all__ = ["BAND_METRICS", "band_of", "simulate_with_band", "check_band_size", "edges", "order_index", "replication_seeds",
           "replications_for", "residual_key", "step_time_sigmas"]
