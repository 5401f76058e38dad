"""Colocated or disaggregated, and with how many prefill and decode replicas: `servesim plan-pools`.

For a GPU budget, every split into a prefill pool and a decode pool that uses the budget (prefill replicas
P >= 1, decode replicas D = (budget - P x TP_prefill) // TP_decode >= 1) is simulated on the same workload,
beside the colocated deployment of budget // TP replicas. The recommendation is the candidate with the
most requests meeting every SLO limit (`good_requests`: all candidates serve the same requests, so this is the
goodput of the load; the summary's goodput_rps divides by a run's time, drain included, which differs between
candidates that serve the load alike); ties go to the lower E2E p90, then to the colocated deployment (the simpler
one) and the fewer prefill replicas. Kept apart from the planner
(sim/tools/planner.py), which searches GPUs, TP and replica counts of colocated deployments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from sim.config.schema import DisaggregationSpec, Scenario
from sim.errors import ConfigError
from sim.results import Result, good_requests
from sim.run import make_workload, simulate
from sim.tools.sweep import cost_figures, scalar_summary

RANKING_KEYS = ("goodput_rps", "slo_fraction_ok", "ttft_s_p90", "tpot_s_p90", "e2e_s_p90", "cost_per_hour")

# The largest GPU budget plan-pools splits. A budget of N GPUs is about N candidates, each a simulation of up to N
# replicas: 128 GPUs took 60 s and 256 took 125 s (scenarios/disaggregated.yaml, one core), so 2,000 would take
# well over half an hour (and its 2,000-replica simulations of a few hundred requests say little). 256 GPUs is
# 32 eight-GPU nodes.
MAX_POOL_SPLIT_GPUS = 256


@dataclass(frozen=True)
class PoolSplitCandidate:
    label: str  # "colocated x4", or "2P+2D"
    num_prefill_replicas: int  # 0 for the colocated deployment
    num_decode_replicas: int  # 0 for the colocated deployment
    num_replicas: int  # colocated replicas; 0 for a split
    num_gpus: int
    summary: dict

    @property
    def disaggregated(self) -> bool:
        return self.num_prefill_replicas > 0


@dataclass(frozen=True)
class PoolSplitPlan:
    total_gpus: int
    candidates: list[PoolSplitCandidate]  # colocated first, then splits by prefill replicas
    best: PoolSplitCandidate
    # the colocated deployment's run and the recommended one's, each named by its label (report.html draws them);
    # the others' records are not kept: a budget of N GPUs is about N runs
    shown: tuple[Result, ...] = ()

    def table(self) -> pd.DataFrame:
        """Every candidate as a row: its label, pools, GPUs and every scalar of its summary (`splits.csv`)."""
        return pd.DataFrame([{"candidate": c.label, "num_prefill_replicas": c.num_prefill_replicas,
                              "num_decode_replicas": c.num_decode_replicas, "num_replicas": c.num_replicas,
                              "num_gpus": c.num_gpus, "recommended": c is self.best, **scalar_summary(c.summary)}
                             for c in self.candidates])

    def recommendation(self) -> str:
        b = self.best
        kind = "disaggregated " if b.disaggregated else ""  # (a colocated label says so: "colocated x4")
        return (f"recommended: {kind}{b.label} on {b.num_gpus} of {self.total_gpus} GPUs "
                f"(goodput {b.summary['goodput_rps']:.4g} req/s, {b.summary['slo_fraction_ok']:.1%} of requests "
                "meeting every SLO)")


def _pool_tp(scenario: Scenario, spec: DisaggregationSpec, pool: str) -> int:
    return getattr(spec, pool).tensor_parallel or scenario.hardware.tensor_parallel


def split_scenarios(scenario: Scenario, total_gpus: int) -> list[tuple[str, int, int, int, int, Scenario]]:
    """(label, prefill replicas, decode replicas, colocated replicas, GPUs, scenario) for every candidate."""
    if total_gpus < 2:
        raise ConfigError(f"--gpus: {total_gpus} leaves no GPU for one of the pools; allowed: 2 or more")
    if total_gpus > MAX_POOL_SPLIT_GPUS:
        raise ConfigError(f"--gpus: {total_gpus} is not allowed; allowed: 2 to {MAX_POOL_SPLIT_GPUS} GPUs "
                          "(MAX_POOL_SPLIT_GPUS: every split is simulated, about one per GPU)")
    _refuse_colocated_only(scenario)
    hw = scenario.hardware
    spec = hw.disaggregation or DisaggregationSpec()
    if scenario.cost_model_choice and hw.disaggregation is None:
        # The default cost model, chosen for a colocated deployment, again for a disaggregated one: every split,
        # the colocated one too, is priced by that (a whole-step profile prices one GPU and TP only).
        raw = scenario.model_dump(mode="json", exclude_none=True)
        raw["hardware"]["disaggregation"] = spec.model_dump(mode="json", exclude_none=True)
        raw["frontend"] = None  # (none, above: without it an engine preset would bring its own again)
        chosen = Scenario.model_validate(raw)
        scenario = scenario.model_copy(update={"cost_model": chosen.cost_model,
                                               "cost_model_choice": chosen.cost_model_choice})
    out = []
    colocated_replicas = total_gpus // hw.tensor_parallel
    if colocated_replicas >= 1:
        sc = scenario.model_copy(update={"hardware": hw.model_copy(
            update={"num_replicas": colocated_replicas, "disaggregation": None})})
        out.append((f"colocated x{colocated_replicas}", 0, 0, colocated_replicas,
                    colocated_replicas * hw.tensor_parallel, sc))
    tp_p, tp_d = _pool_tp(scenario, spec, "prefill"), _pool_tp(scenario, spec, "decode")
    for p in range(1, total_gpus // tp_p + 1):
        d = (total_gpus - p * tp_p) // tp_d
        if d < 1:
            break
        split = spec.model_copy(update={"prefill": spec.prefill.model_copy(update={"num_replicas": p}),
                                        "decode": spec.decode.model_copy(update={"num_replicas": d})})
        sc = scenario.model_copy(update={"hardware": hw.model_copy(update={"disaggregation": split})})
        out.append((f"{p}P+{d}D", p, d, 0, p * tp_p + d * tp_d, sc))
    if len(out) < 2:
        raise ConfigError(f"--gpus: {total_gpus} GPUs fit no prefill/decode split at TP {tp_p}/{tp_d}; "
                          f"allowed: at least {tp_p + tp_d}")
    return out


def _refuse_colocated_only(scenario: Scenario) -> None:
    """A front-end or prefix caching (an engine preset brings both) is not modelled with disaggregation: a scenario
    with either is refused in one line before any split is simulated, naming both and how to leave them out, where
    each split's own check would name a key the user may never have written. Left out, every arrangement, the
    colocated one too, is simulated without them, so the splits are compared alike."""
    from sim.config.engines import colocated_only
    found = [(key, fix) for key, _, fix in colocated_only(scenario.model_dump(mode="json"))]
    if found:
        engine = (f" (engine {scenario.engine.name} {scenario.engine.version}'s preset brings both where the scenario "
                  "gives neither)" if scenario.engine else "")
        raise ConfigError(f"{' and '.join(key for key, _ in found)}: not modelled with a disaggregated deployment yet, "
                          f"which plan-pools weighs the colocated one against{engine}; allowed: "
                          f"{' and '.join(fix for _, fix in found)} (every arrangement simulated without them)")


# `_rank`'s order, in words (report.html says it beside the recommendation)
RANKING_RULE = ("the most requests meeting every SLO (all serve the same requests), then the lower E2E p90, then the "
                "colocated deployment (the simpler one), then the fewer prefill replicas")


def _rank(candidate: PoolSplitCandidate) -> tuple:
    s = candidate.summary
    e2e = s.get("e2e_s_p90", math.nan)
    return (-good_requests(s), e2e if not math.isnan(e2e) else math.inf, candidate.disaggregated,
            candidate.num_prefill_replicas)


def plan_pool_split(scenario: Scenario, total_gpus: int, progress=None) -> PoolSplitPlan:
    """Simulate every candidate of `split_scenarios` on one workload and pick the best (module docstring)."""
    entries = split_scenarios(scenario, total_gpus)
    workload = make_workload(entries[0][-1])
    candidates, colocated, best, best_run = [], None, None, None
    for label, p, d, n, gpus, sc in entries:
        if progress is not None:
            progress(label)
        run = simulate(sc, workload)
        run.name = label
        summary = run.summary
        summary["cost_per_hour"] = cost_figures(sc, summary)["cost_per_hour"]
        candidates.append(PoolSplitCandidate(label, p, d, n, gpus, summary))
        colocated = run if n else colocated
        if best is None or _rank(candidates[-1]) < _rank(best):  # the first of equals, as min() picks
            best, best_run = candidates[-1], run
    shown = tuple(dict.fromkeys(run for run in (colocated, best_run) if run is not None))
    return PoolSplitPlan(total_gpus, candidates, best, shown)
