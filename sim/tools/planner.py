"""Capacity planning: the cheapest deployment that serves a load within its SLOs.

For every candidate (GPU × tensor parallelism × policy variant) the planner finds, by simulation:
the highest rate one replica sustains within the SLOs (binary search on rate, as Vidur-Search does),
then the fewest replicas that meet the SLOs at the target rate. Candidates are ranked by cost per hour.
The top few get the highest rate their deployment sustains and a throughput-latency curve, and the
recommendation is repeated under several seeds to show how much the answer moves.

Each candidate's search is one task for a backend of `sim.tools.sweep` (serial, process pool or Ray); the
searches themselves are plain sequential Python.

Planner speed (issue 15): a search only needs each probe's verdict, so a probe that is certain to miss the
SLOs stops there (`sim.tools.early_verdict`), with a lean summary (`simulate(lean_summary=True)`); each
candidate builds its cost model once; the later phases start from the simulations the search already ran.
None of this changes a verdict. Policies on the same GPU, TP and PP are searched one after the other, each
first trying the rate bracket of the one before (`max_sustainable_rate`'s `neighbour`): where its verdicts
agree at both ends, that is the answer, after two probes; with verdicts monotone in rate it is the answer the
full search gives. So every search gives the same answer as `exhaustive` (no bracket from a neighbour, every
simulation run to its end, from scratch, with the full summary), which stays available (`servesim plan
--exhaustive`) and is what the tests compare against. `cache_dir` (`--cache DIR`) keeps every answer on disk
for the next plan that asks the same simulation (`sim.tools.plan_cache`).
"""

from __future__ import annotations

import copy
import json
import math
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from sim.errors import ConfigError, ServeSimError
from sim.tools.sweep import arrival_rate, cost_figures, run_tasks, set_rate, variant_raw
from sim.workload.arrivals import MAX_RATE_PER_S
from sim.workload.base import MAX_NUM_REQUESTS

# Summary keys kept for every simulation the planner runs (the full summary is large).
KEPT_METRICS = (
    "throughput_rps", "goodput_rps", "output_tokens_per_s", "total_tokens_per_s", "offered_output_tokens_per_s",
    "offered_tokens_per_s", "admitted_output_tokens_per_s", "admitted_tokens_per_s", "sustained_output_tokens_per_s",
    "sustained_tokens_per_s", "slo_fraction_ok",
    "ttft_s_p50", "ttft_s_p90", "ttft_s_p99", "tpot_s_p50", "tpot_s_p90", "tpot_s_p99",
    "e2e_s_p50", "e2e_s_p90", "e2e_s_p99", "num_finished", "num_unfinished", "num_rejected",
    "preemptions", "mean_batch_size", "kv_token_share", "busy_fraction", "slo_goodput_share",
)
CURVE_FRACTIONS = (0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25)  # of a deployment's max sustainable rate
_MAX_RATE_PER_S = MAX_RATE_PER_S  # doubling stops here: a "rate" above it means the SLO never binds
# One replica cannot sustain more than its saturated service rate; the search starts no higher than this many
# times that rate (a margin for the rate measured in a burst), so an absurd target costs seconds, not hours.
CEILING_MARGIN = 4.0
# A target above this many times what max_replicas replicas sustain one by one is out of reach without
# simulating it (pooling lets c replicas beat c times one replica's rate, but not by this much).
POOLING_MARGIN = 2.0
PROBE_REQUESTS = 4000  # at most this many requests measure a replica's saturated rate


@dataclass(frozen=True)
class Candidate:
    gpu: Any  # catalog name, or an inline GPU mapping
    tensor_parallel: int
    policy: str | None  # a variant name; None = the base scenario
    pipeline_parallel: int = 1  # pipeline stages per replica (GPUs per replica = tensor_parallel x this)
    # GPUs of the TP group holding whole experts (hardware.expert_parallel); None: as the scenario (or the policy's
    # variant) says, when the search does not range over it
    expert_parallel: int | None = None

    @property
    def gpu_name(self) -> str:
        return self.gpu if isinstance(self.gpu, str) else str(self.gpu.get("name", "custom-gpu"))

    @property
    def name(self) -> str:
        policy = f" · {self.policy}" if self.policy else ""
        pp = f"xPP{self.pipeline_parallel}" if self.pipeline_parallel > 1 else ""
        ep = f" EP{self.split_experts}" if self.split_experts else ""
        return f"{self.gpu_name} TP{self.tensor_parallel}{ep}{pp}{policy}"

    @property
    def split_experts(self) -> int | None:
        """The EP degree this candidate sets where it gives GPUs whole experts (> 1), else None."""
        return self.expert_parallel if (self.expert_parallel or 1) > 1 else None

    @property
    def gpus_per_replica(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel


@dataclass
class Evaluation:
    """One simulation: a candidate with some replicas at some rate and seed."""

    num_replicas: int
    rate_per_s: float
    seed: int
    slo_met: bool
    metrics: dict  # a run stopped early (`stopped_early_s` set): the metrics of the run as cut off

    @property
    def complete(self) -> bool:
        """Ran to its end (its metrics are the full run's); False: stopped once its miss was certain."""
        return "stopped_early_s" not in self.metrics


@dataclass
class CandidateOutcome:
    candidate: Candidate
    status: str  # feasible | excluded (cannot run) | infeasible (runs, but never within the SLOs)
    reason: str = ""
    max_rate_per_replica: float = math.nan  # highest rate one replica sustains within the SLOs
    failed_rate_per_replica: float = math.nan  # the lowest rate its search saw one replica miss them at
    saturated_rate_per_replica: float = math.nan  # one replica's service rate in a burst (the search's ceiling)
    reachable_rate_per_s: float = math.nan  # infeasible: about the most max_replicas replicas serve
    num_replicas: int | None = None  # fewest replicas meeting the SLOs at the target
    at_target: dict = field(default_factory=dict)  # metrics of that deployment at the target
    costs: dict = field(default_factory=dict)
    evaluations: list[Evaluation] = field(default_factory=list)
    cost_model: str = ""  # which step-time model priced this candidate
    engine: str = ""  # the serving engine its preset names ("vllm 0.11.0"); "" without one
    engine_notes: tuple[str, ...] = ()  # what that preset approximates for this candidate (its GPU, TP, flags)
    # what its cost model approximates for it, as built (sim/cost/labels.py cost_model_notes; the points its runs
    # priced past the measured range are not among them)
    cost_model_notes: tuple[str, ...] = ()
    # With a band (run.band, issue 31): the band at the chosen replicas (at the target), and where the verdict
    # flips inside it, one phrase ("3 replicas meet the SLOs at the point figures, not at the band's pessimistic
    # edge (...); 4 do"); "" where it does not flip.
    band: dict = field(default_factory=dict)
    band_flip: str = ""


@dataclass
class CurveOutcome:
    candidate: Candidate
    num_replicas: int
    max_rate_per_s: float  # highest rate the deployment sustains within the SLOs
    points: list[Evaluation]  # throughput-latency curve
    failed_rate_per_s: float = math.nan  # the lowest rate its search saw the deployment miss them at
    ceiling_rate_per_s: float = math.nan  # the highest rate its search doubles to (`search_ceiling`, `window_ceiling`)


@dataclass
class SeedOutcome:
    seed: int
    min_replicas: int | None  # the answer under this seed (None: more than max_replicas)
    at_recommendation: Evaluation  # the recommended deployment under this seed


@dataclass
class PlanSettings:
    target_rate_per_s: float
    gpus: list
    tensor_parallel: list[int]
    policies: list[str | None]
    max_replicas: int
    rate_tolerance: float
    num_seeds: int
    prices: dict[str, float]
    top_k: int
    base_seed: int
    min_window_s: float
    steady_state_lifetimes: float  # search.steady_state_lifetimes (`steady_window`); 0: min_window_s alone
    prefer_calibrated: bool = True
    shared_cost_model: bool = False  # search.shared_cost_model: one kind of default model for every candidate
    pipeline_parallel: list[int] = field(default_factory=lambda: [1])  # candidate pipeline depths
    expert_parallel: list[int] | None = None  # candidate expert-parallel degrees; None: the scenario's own, as is
    # True: every simulation runs to its end, from scratch, and every search from its own start (the planner
    # before issue 15; the reference the shortcuts are tested against). False: probes stop once they are
    # certain to miss the SLOs, simulations already run are reused, and a search first tries its neighbour's
    # bracket.
    exhaustive: bool = False
    cache_dir: str | None = None  # simulations kept here between runs (`sim.tools.plan_cache`); not when exhaustive
    # run.band (issue 31): a candidate meets the SLOs only at the band's pessimistic edge, checked once its
    # fewest replicas are found (`confirm_with_band`), not at every probe of the searches
    band: float | None = None


@dataclass
class PlanResult:
    settings: PlanSettings
    scenario_yaml: str  # the scenario file as planned (overrides applied)
    slo: dict
    outcomes: list[CandidateOutcome]  # every candidate, feasible ones ranked first
    curves: list[CurveOutcome]
    seeds: list[SeedOutcome]
    versions: dict
    command: str
    # The recommendation's run draws nothing from the seed (sim/run.py seed_draws: a replayed trace with its own
    # lengths, a burst of fixed lengths): every seed would give its answer, so it ran under the base seed alone.
    seeds_draw_nothing: bool = False

    @property
    def feasible(self) -> list[CandidateOutcome]:
        return [o for o in self.outcomes if o.status == "feasible"]

    @property
    def recommendation(self) -> CandidateOutcome | None:
        return self.feasible[0] if self.feasible else None


# ------------------------------------------------------------------------------------ simulation

@dataclass(frozen=True)
class CandidateTask:
    raw: dict  # the candidate's raw scenario (variant merged, GPU and TP set), one replica
    candidate: Candidate
    settings: PlanSettings


def steady_window(evaluation: "Evaluation", lifetimes: float, span_s: float) -> float | None:
    """The longer window of arrivals a simulation that met the SLOs is run again over, or None where it showed the
    steady state: where its arrivals spanned at least `lifetimes` times its requests' p99 E2E (or it missed the
    SLOs, or `lifetimes` is 0). A run whose requests live long against its window ends before the KV cache has
    filled: at 40 req/s of ShareGPT-like requests one H100 running vLLM 0.11.0 met p99 TTFT 2 s over 60 s and
    240 s of arrivals (E2E p99 38 and 77 s) and missed it over 360 s (p99 TTFT 16.6 s), its batch still growing. The
    next window is at least twice the last, so a queue that keeps growing is run until it shows or the run holds
    no more requests."""
    e2e_p99 = evaluation.metrics.get("e2e_s_p99")
    if not lifetimes or not evaluation.slo_met or e2e_p99 is None or not math.isfinite(e2e_p99):
        return None
    needed = lifetimes * e2e_p99
    return max(needed, 2.0 * span_s) if span_s < needed else None


def _arrival_span_s(raw: dict, rate_per_s: float) -> float:
    """About how long a run's arrivals span: its requests at its rate (`_requests_for` sized it so)."""
    return (raw.get("run") or {}).get("num_requests", 0) / rate_per_s if rate_per_s > 0 else math.inf


def _requests_for(raw: dict, num_replicas: int, rate_per_s: float, min_window_s: float) -> dict:
    """How many requests one simulation runs. Each replica sees the scenario's request count on average,
    so tails are as well sampled at 8 replicas as at one, up to the MAX_NUM_REQUESTS a run holds in all (100,000
    a replica at 128 replicas would be refused mid-plan; at the cap each of 1,024 still sees ~9,800); and arrivals
    span at least `min_window_s`: with a fixed count, a high rate is a short burst that a big batch absorbs, and
    the search would call a rate the system cannot keep up with sustainable. Traces replay as they are."""
    raw = copy.deepcopy(raw)
    run = raw.setdefault("run", {})
    arrival_kind = ((raw.get("workload") or {}).get("arrival") or {}).get("kind", "poisson")
    if run.get("num_requests") and arrival_kind != "trace":
        per_replicas = min(int(run["num_requests"]) * num_replicas, MAX_NUM_REQUESTS)
        run["num_requests"] = max(per_replicas, math.ceil(rate_per_s * min_window_s))
    return raw


# Cost models by the scenario parts they depend on, shared by every simulation of a candidate in this process:
# building one reads kernel tables (about 0.1 s for the measured model), and pricing a step is a pure function
# of the step (their caches only remember answers), so one instance prices every run the same as fresh ones.
_COST_MODELS: dict[str, Any] = {}


def _cost_model_key(raw: dict) -> str:
    # No cost model reads the scheduler section (`sim.run.make_cost_model`; tests/integration/test_planner_speed.py
    # checks it): the policy variants of one GPU and TP share one.
    kept = {k: v for k, v in raw.items()
            if k not in ("name", "description", "workload", "run", "slo", "hardware", "scheduler")}
    kept["hardware"] = {k: v for k, v in (raw.get("hardware") or {}).items() if k not in ("num_replicas", "router")}
    return json.dumps(kept, sort_keys=True, default=str)


def plan_cache(settings: PlanSettings):
    """The on-disk cache of simulation answers the settings ask for, or None."""
    if settings.cache_dir is None or settings.exhaustive:
        return None
    from sim.tools.plan_cache import PlanCache
    return PlanCache(settings.cache_dir)


def shared_cost_model(raw: dict, scenario):
    from sim.run import make_cost_model
    key = _cost_model_key(raw)
    if key not in _COST_MODELS:
        if len(_COST_MODELS) >= 64:  # a long-lived process (the dashboard) plans many searches: bound the memory
            _COST_MODELS.clear()
        # A model keeps its compiled pack (and its memos) for all its runs (sim.cost.packed).
        _COST_MODELS[key] = make_cost_model(scenario)
    return _COST_MODELS[key]


class Evaluator:
    """Simulates one candidate at (replicas, rate, seed), remembering every answer.

    `known`: simulations of this candidate already run (by an earlier phase), reused where they answer.
    A call with `verdict_only` needs only `slo_met`: unless the settings are exhaustive, the simulation stops
    as soon as a miss is certain, and its Evaluation says so (`complete` False); a later call that needs the
    metrics runs it again to its end."""

    def __init__(self, raw: dict, settings: PlanSettings, known: list[Evaluation] | tuple = ()):
        self.raw, self.base_seed, self.min_window_s = raw, settings.base_seed, settings.min_window_s
        slo = raw.get("slo") or {}
        # A queue that grows once long requests have filled the KV cache shows in TTFT and E2E. Under TPOT limits
        # alone an overloaded run meets them however long it runs, its E2E growing with its window: each longer
        # window would ask for a longer one still, up to the most requests a run holds.
        queue_bound = slo.get("ttft_s") is not None or slo.get("e2e_s") is not None
        self.lifetimes = settings.steady_state_lifetimes if queue_bound else 0.0
        self.exhaustive = settings.exhaustive
        self.cache = plan_cache(settings)
        self.memo: dict[tuple, Evaluation] = {}
        self.known = {} if self.exhaustive else {self.key(e.num_replicas, e.rate_per_s, e.seed): e for e in known}

    @staticmethod
    def key(num_replicas: int, rate_per_s: float, seed: int) -> tuple:
        return num_replicas, round(rate_per_s, 9), seed

    def scenario_raw(self, num_replicas: int, rate_per_s: float, seed: int | None = None,
                     window_s: float | None = None) -> dict:
        raw = _requests_for(self.raw, num_replicas, rate_per_s, self.min_window_s if window_s is None else window_s)
        raw.setdefault("hardware", {})["num_replicas"] = num_replicas
        set_rate(raw, rate_per_s)
        raw.setdefault("run", {})["seed"] = self.base_seed if seed is None else seed
        return raw

    def __call__(self, num_replicas: int, rate_per_s: float, seed: int | None = None, *,
                 verdict_only: bool = False) -> Evaluation:
        seed = self.base_seed if seed is None else seed
        key = self.key(num_replicas, rate_per_s, seed)
        found = self.memo.get(key) or self.known.get(key)
        if found is not None and (verdict_only or found.complete):
            self.memo.setdefault(key, found)
            return found
        self.memo[key] = self._simulate(num_replicas, rate_per_s, seed, stop_early=verdict_only and not self.exhaustive)
        return self.memo[key]

    def _simulate(self, num_replicas: int, rate_per_s: float, seed: int, stop_early: bool) -> Evaluation:
        """The simulation at (replicas, rate, seed), run again over longer windows while `steady_window` asks."""
        raw, window_s = self.scenario_raw(num_replicas, rate_per_s, seed), self.min_window_s
        while True:
            evaluation = self._simulate_raw(raw, num_replicas, rate_per_s, seed, stop_early)
            evaluation.metrics["window_s"] = window_s  # the arrivals' window asked (`scenario_raw`)
            longer_s = steady_window(evaluation, self.lifetimes, _arrival_span_s(raw, rate_per_s))
            if longer_s is None:
                return evaluation
            longer = self.scenario_raw(num_replicas, rate_per_s, seed, longer_s)
            if longer["run"].get("num_requests", 0) <= raw["run"].get("num_requests", 0):
                return evaluation  # a trace, or a run at the most requests one holds: as long as it gets
            raw, window_s = longer, longer_s

    def _simulate_raw(self, raw: dict, num_replicas: int, rate_per_s: float, seed: int,
                      stop_early: bool) -> Evaluation:
        from sim.config.files import validate_scenario
        from sim.run import make_workload, simulate
        from sim.tools.early_verdict import SLOMissRule
        key = self.cache.key("evaluation", raw, stop_early=stop_early) if self.cache else None
        stored = self.cache.get(key) if self.cache else None
        if stored is not None:
            return Evaluation(num_replicas, rate_per_s, seed, stored["slo_met"], stored["metrics"])
        scenario = validate_scenario(raw)
        if self.exhaustive:
            result = simulate(scenario)
        else:
            workload = make_workload(scenario)
            rule = SLOMissRule(scenario.slo, workload.num_requests) if stop_early else None
            result = simulate(scenario, workload, cost_model=shared_cost_model(raw, scenario),
                              stop_when=rule, lean_summary=True)
        summary = result.summary
        metrics = {k: summary.get(k) for k in KEPT_METRICS if k in summary}
        if summary.get("num_rejected"):  # requests this candidate can never run, at any load: say why
            metrics["reject_reason"] = result.first_reject_reason()
        metrics.update({k: v for k, v in summary.items() if k.startswith("slo_") and k != "slo_met"})
        if summary.get("stopped_early_s") is not None:
            metrics["stopped_early_s"] = summary["stopped_early_s"]
        if self.cache:
            self.cache.put(key, {"slo_met": bool(summary.get("slo_met")), "metrics": metrics})
        return Evaluation(num_replicas, rate_per_s, seed, bool(summary.get("slo_met")), metrics)

    @property
    def evaluations(self) -> list[Evaluation]:
        return list(self.memo.values())


def max_sustainable_rate(passes: Callable[[float], bool], start_rate: float, tolerance: float,
                         floor_rate: float, neighbour: tuple[float, float] | None = None,
                         ceiling_rate: float = _MAX_RATE_PER_S) -> tuple[float, float]:
    """Binary search for the SLO boundary: (highest rate that passed, lowest that failed).

    Brackets by doubling or halving from `start_rate`, then bisects geometrically until
    failed / passed <= 1 + tolerance. Returns (0, lowest tried) when even `floor_rate` fails and
    (inf, inf) when the SLOs hold at any rate up to `ceiling_rate` (at most _MAX_RATE_PER_S).

    `neighbour`: the (passed, failed) answer of this same search (same start, tolerance and floor) for a
    neighbouring candidate, e.g. another policy on the same GPU. When this candidate also passes at the one
    and fails at the other, that bracket is the answer, after two probes instead of the whole search; else
    the search runs as without it. With verdicts monotone in rate (the premise of any binary search) the
    answer is the one the full search gives: every rate that search probes is on the neighbour's path, below
    its passed rate or above its failed one, so it gets the neighbour's verdicts and takes the same path.
    """
    if (neighbour is not None and 0 < neighbour[0] < neighbour[1] < math.inf
            and passes(neighbour[0]) and not passes(neighbour[1])):
        return neighbour
    ok, bad = 0.0, math.inf
    rate = start_rate
    while True:
        if passes(rate):
            ok = rate
            if bad < math.inf:
                break
            if rate >= ceiling_rate:
                return math.inf, math.inf
            rate = min(rate * 2, ceiling_rate)
        else:
            bad = rate
            if ok > 0:
                break
            if rate / 2 < floor_rate:
                return 0.0, rate
            rate /= 2
    while bad / ok > 1 + tolerance:
        mid = math.sqrt(ok * bad)
        if passes(mid):
            ok = mid
        else:
            bad = mid
    return ok, bad


def min_replicas(passes: Callable[[int], bool], first_guess: int, max_replicas: int) -> int | None:
    """Fewest replicas that pass, searching from a guess (SLO attainment grows with replicas)."""
    n = min(max(1, first_guess), max_replicas)
    if passes(n):
        while n > 1 and passes(n - 1):
            n -= 1
        return n
    while n < max_replicas:
        n += 1
        if passes(n):
            return n
    return None


def _describe_failure(ev: Evaluation) -> str:
    parts = []
    for key, value in ev.metrics.items():
        if key.startswith("slo_") and key.endswith("_met") and value is False:
            metric = key[len("slo_"):-len("_met")]
            measured = next((v for k, v in ev.metrics.items() if k.startswith(f"slo_{metric}_p")), None)
            if isinstance(measured, float) and math.isinf(measured):  # sim.results.percentile_with_refused
                parts.append(f"{metric} falls on a rejected request")
            else:
                parts.append(f"{metric} {measured:.3g} s" if isinstance(measured, float) else metric)
    if ev.metrics.get("num_unfinished"):
        parts.append(f"{ev.metrics['num_unfinished']} unfinished")
    if ev.metrics.get("num_rejected"):  # each over every limit (sim.results.slo_metrics), at any load
        reason = ev.metrics.get("reject_reason")
        parts.append(f"{ev.metrics['num_rejected']} rejected" + (f", the first as it {reason}" if reason else ""))
    share = ev.metrics.get("slo_goodput_share")
    if share is not None and not parts:
        parts.append(f"goodput share {share:.3f}")
    return ", ".join(parts) or "SLOs not met"


def saturated_rate(raw: dict, cost_model: Callable[[], Any] | None = None, cache=None) -> float:
    """One replica's service rate when it is never idle: the scenario's requests (not stretched to the
    planner's window) arriving at once, counted while the second and third quarters of them finish
    (the batch is full then; the first quarter pays the start, the last the drain). An estimate,
    used with CEILING_MARGIN as the highest rate worth simulating. `cost_model`: builds the cost model to
    price it with (default: a fresh one); `cache`: a `PlanCache` that may already hold the answer."""
    from sim.config.files import validate_scenario
    from sim.run import simulate
    probe = copy.deepcopy(raw)
    probe.setdefault("hardware", {})["num_replicas"] = 1
    set_rate(probe, _MAX_RATE_PER_S)
    run = probe.setdefault("run", {})
    run.pop("horizon_s", None)
    run.pop("duration_s", None)  # a duration at the probe's rate would be millions of requests
    run["num_requests"] = min(int(run.get("num_requests") or PROBE_REQUESTS), PROBE_REQUESTS)
    key = cache.key("saturated_rate", probe) if cache else None
    stored = cache.get(key) if cache else None
    if stored is not None:
        return stored["rate_per_s"]
    scenario = validate_scenario(probe)
    result = simulate(scenario, cost_model=cost_model(scenario) if cost_model else None, lean_summary=True)
    finish = result.request_column("finish_s")  # (the summary is not read)
    finish = np.sort(finish[~np.isnan(finish)])
    n = len(finish)
    if n < 4 or not finish[3 * n // 4] > finish[n // 4]:
        rate = math.inf
    else:
        rate = (3 * n // 4 - n // 4) / float(finish[3 * n // 4] - finish[n // 4])
    if cache:
        cache.put(key, {"rate_per_s": rate})
    return rate


def _in_turn(group: tuple, run_one: Callable) -> list:
    """`run_one(task, neighbour)` for each task of a group in turn, `neighbour` being the answer before it (None
    for the first, and for every one when the settings are exhaustive)."""
    answers: list = []
    for task in group:
        answers.append(run_one(task, answers[-1] if answers and not task.settings.exhaustive else None))
    return answers


def search_candidates(group: tuple[CandidateTask, ...]) -> list[CandidateOutcome]:
    """Phase 1 for candidates that differ only in their policy (one GPU, TP and PP), one after the other: each
    search starts from the bracket of the one before it (`max_sustainable_rate`'s `neighbour`)."""
    return _in_turn(group, search_candidate)


def search_candidate(task: CandidateTask, neighbour: CandidateOutcome | None = None) -> CandidateOutcome:
    """Phase 1 for one candidate: max rate per replica, then the fewest replicas at the target. `neighbour`: the
    outcome of a candidate with the same GPU, TP and PP, whose rate bracket may settle this one's search."""
    from sim.config.files import validate_scenario
    from sim.run import engine_extras
    try:
        scenario = validate_scenario(copy.deepcopy(task.raw))  # cannot hold the model, bad TP split, ...
        cost = candidate_cost_model_extras(task.raw, scenario)  # a cost model that cannot price it: excluded
    except ServeSimError as err:
        return CandidateOutcome(task.candidate, "excluded", str(err))
    outcome = _search_rates(task, neighbour)
    outcome.cost_model, outcome.cost_model_notes = cost["cost_model_label"], cost["cost_model_notes"]
    engine = engine_extras(scenario)
    outcome.engine, outcome.engine_notes = engine.get("engine", ""), tuple(engine.get("engine_notes", ()))
    return outcome


def _search_rates(task: CandidateTask, neighbour: CandidateOutcome | None) -> CandidateOutcome:
    """`search_candidate` for a candidate that validates."""
    from sim.config.files import validate_scenario
    s, cand = task.settings, task.candidate
    evaluate = Evaluator(task.raw, s)
    try:
        saturated = saturated_rate(task.raw, None if s.exhaustive else lambda sc: shared_cost_model(task.raw, sc),
                                   evaluate.cache)
        if CEILING_MARGIN * POOLING_MARGIN * saturated * s.max_replicas < s.target_rate_per_s:
            # Far out of reach: no search (its simulations would hold millions of requests).
            reach = saturated * s.max_replicas
            return CandidateOutcome(
                cand, "infeasible", f"{s.target_rate_per_s:g} req/s is out of reach: one replica serves about "
                f"{saturated:.3g} req/s when saturated (SLOs aside), so {s.max_replicas} replicas "
                f"(search.max_replicas) serve about {reach:.3g} req/s at most",
                saturated_rate_per_replica=saturated, reachable_rate_per_s=reach, evaluations=evaluate.evaluations)
        start = _search_start(s, saturated)
        ceiling, cap = search_ceiling(start, saturated), window_ceiling(s.min_window_s)
        bracket = None
        near = neighbour.saturated_rate_per_replica if neighbour is not None else math.nan
        if neighbour is not None and start == _search_start(s, near) and below_ceilings(  # the ceilings searched to
                neighbour.max_rate_per_replica, min(ceiling, cap), min(search_ceiling(start, near), cap)):
            # (a neighbour that did not search has NaN rates, which max_sustainable_rate does not take)
            bracket = (neighbour.max_rate_per_replica, neighbour.failed_rate_per_replica)
        ok, bad = capped_search(lambda r: evaluate(1, r, verdict_only=True).slo_met, start,
                                s.rate_tolerance, start / 1024, bracket, ceiling, cap)
        out = CandidateOutcome(cand, "feasible", max_rate_per_replica=ok, failed_rate_per_replica=bad,
                               saturated_rate_per_replica=saturated)
        if math.isfinite(ok) and math.isinf(bad):
            out.reason = at_least_note(ok, "one replica", s.min_window_s)
        if ok == 0.0:
            lowest = min(evaluate.evaluations, key=lambda e: e.rate_per_s)
            lowest = evaluate(1, lowest.rate_per_s)  # its metrics describe the failure: the full run
            out.status = "infeasible"
            out.reason = (f"SLOs not met even at {lowest.rate_per_s:.3g} req/s on one replica "
                          f"({_describe_failure(lowest)})")
        elif POOLING_MARGIN * ok * s.max_replicas < s.target_rate_per_s:
            out.status, out.reachable_rate_per_s = "infeasible", ok * s.max_replicas
            out.reason = (f"{s.target_rate_per_s:g} req/s is out of reach: one replica sustains {ok:.3g} req/s "
                          f"within the SLOs, so {s.max_replicas} replicas (search.max_replicas) reach about "
                          f"{ok * s.max_replicas:.3g} req/s")
        else:
            guess = math.ceil(s.target_rate_per_s / ok) if math.isfinite(ok) else 1
            n = min_replicas(lambda k: evaluate(k, s.target_rate_per_s, verdict_only=True).slo_met, guess,
                             s.max_replicas)
            if n is None:
                last = evaluate(s.max_replicas, s.target_rate_per_s)
                out.status, out.reachable_rate_per_s = "infeasible", ok * s.max_replicas
                out.reason = (f"{s.max_replicas} replicas (search.max_replicas) miss the SLOs at "
                              f"{s.target_rate_per_s:g} req/s ({_describe_failure(last)}); one replica "
                              f"sustains {ok:.3g} req/s")
            else:
                if s.band is not None:
                    n = confirm_with_band(evaluate, n, task.raw, s, out)
                if n is not None:
                    at = evaluate(n, s.target_rate_per_s)
                    out.num_replicas, out.at_target = n, at.metrics
                    scenario_n = validate_scenario(evaluate.scenario_raw(n, s.target_rate_per_s))
                    out.costs = cost_figures(scenario_n, at.metrics | {"slo_met": at.slo_met}, s.prices)
    except ServeSimError as err:
        return CandidateOutcome(cand, "excluded", str(err), evaluations=evaluate.evaluations)
    out.evaluations = evaluate.evaluations
    return out


def confirm_with_band(evaluate: "Evaluator", n: int, raw: dict, s: PlanSettings, out: CandidateOutcome) -> int | None:
    """The fewest replicas, from `n` (the fewest meeting the SLOs at the point figures) up, that meet them at the
    band's pessimistic edge (`sim.bands.pessimistic_misses`); None (and `out` infeasible) where none up to
    max_replicas does. Sets `out.band` and, where the verdict flips inside the band, `out.band_flip`. Only this
    check runs the band's replications: the rate search and the replica search probe the point figures. A
    replica count's replications stop once its edge is certainly over a latency limit (`sim.bands.certain_miss`)."""
    from sim.bands import certain_miss, pessimistic_misses, replicate
    from sim.config.files import validate_scenario
    first_misses: list[str] = []
    meet = f"{n} replica meets" if n == 1 else f"{n} replicas meet"
    for k in range(n, s.max_replicas + 1):
        point = evaluate(k, s.target_rate_per_s, verdict_only=True)
        if k > n and not point.slo_met:
            continue
        # over the window the point check took (`steady_window`), where a queue that grows late shows
        scenario = validate_scenario(evaluate.scenario_raw(k, s.target_rate_per_s,
                                                           window_s=point.metrics.get("window_s")))
        cost_model = None if scenario.hardware.disaggregation is not None else shared_cost_model(raw, scenario)
        band, values = replicate(scenario, cost_model=cost_model, stop_when=certain_miss(scenario.slo))
        misses = pessimistic_misses(band, scenario.slo) if band is not None else _certain_misses(values, scenario)
        if k == n:
            first_misses = misses
        if not misses:
            out.band = band
            if k > n:
                out.band_flip = (f"{meet} the SLOs at the point figures, not at the band's pessimistic edge "
                                 f"({'; '.join(first_misses)}); {k} do")
            return k
    out.status, out.reachable_rate_per_s = "infeasible", math.nan
    out.band_flip = (f"{meet} the SLOs at the point figures, but up to {s.max_replicas} (search.max_replicas) "
                     f"none meets them at the {s.band:g}% band's pessimistic edge ({'; '.join(first_misses)})")
    out.reason = out.band_flip
    return None


def _certain_misses(values: dict, scenario) -> list[str]:
    """The limits replications stopped early (`certain_miss`) are over: the upper edge is at least the k-th
    largest value seen."""
    from sim.bands import order_index, replications_for
    slo, run = scenario.slo, scenario.run
    k = order_index(run.band, replications_for(run.band, run.band_replications))
    q = f"p{slo.percentile:g}"
    out = []
    for m in ("ttft", "tpot", "e2e"):
        limit = getattr(slo, f"{m}_s")
        seen = sorted((v for v in values.get(f"slo_{m}_{q}", []) if v is not None), reverse=True)
        if limit is not None and len(seen) >= k and seen[k - 1] > limit:
            out.append(f"{q} {m.upper()} upper edge ≥ {seen[k - 1]:.4g} s > {limit:g} s")
    return out


def _search_start(s: PlanSettings, saturated_rate_per_replica: float) -> float:
    """Where a candidate's rate search starts: the target itself wherever it is in reach."""
    return min(s.target_rate_per_s, CEILING_MARGIN * saturated_rate_per_replica)


def search_ceiling(start: float, saturated_rate_per_replica: float, num_replicas: int = 1) -> float:
    """The highest rate a search doubles to: CEILING_MARGIN x what the replicas serve saturated (at least `start`).
    Past it a replica's queue only grows, so SLOs that still hold there do not bind (a TPOT-only SLO never does):
    doubling on towards _MAX_RATE_PER_S ran ever longer runs, of millions of requests, for the same answer."""
    if not math.isfinite(saturated_rate_per_replica):
        return _MAX_RATE_PER_S
    return min(_MAX_RATE_PER_S, max(start, CEILING_MARGIN * saturated_rate_per_replica * num_replicas))


def window_ceiling(min_window_s: float) -> float:
    """The highest rate whose run still spans `min_window_s` of arrivals within the MAX_NUM_REQUESTS a run holds
    (`_requests_for`). A search stops there: a run at a higher rate would be refused, and with it the candidate.
    No window asked (0, which the schema allows): no such rate."""
    return MAX_NUM_REQUESTS / min_window_s if min_window_s > 0 else math.inf


def capped_search(passes: Callable[[float], bool], start: float, tolerance: float, floor_rate: float,
                  neighbour: tuple[float, float] | None, ceiling: float, cap: float) -> tuple[float, float]:
    """`max_sustainable_rate` up to `ceiling` or the window's `cap` (`window_ceiling`), the lower. Where the cap
    is the lower and the SLOs still hold there, the answer is that rate with no failure seen (rate, inf): a lower
    bound, not the (inf, inf) of SLOs that hold at any rate, since the replicas were not driven past what they
    serve saturated."""
    ok, bad = max_sustainable_rate(passes, start, tolerance, floor_rate, neighbour, min(ceiling, cap))
    if math.isinf(ok) and cap < ceiling:
        return cap, math.inf
    return ok, bad


def below_ceilings(neighbour_passed: float, ceiling: float, neighbour_ceiling: float) -> bool:
    """Whether a neighbour's bracket may settle a search of the same start (`max_sustainable_rate`'s `neighbour`)
    whose ceiling differs from the neighbour's: where twice the rate it passed is below both ceilings, neither search
    doubled up to its ceiling before the bracket (the doubling stops at the first miss, at most twice a rate that
    passed), so the two take the same path and the bracket is the answer the full search gives."""
    return 2 * neighbour_passed < ceiling and 2 * neighbour_passed < neighbour_ceiling  # (NaN: False)


def at_least_note(rate_per_s: float, who: str, min_window_s: float) -> str:
    """Says that a search's answer is a lower bound: the SLOs held at the window's ceiling (`capped_search`)."""
    return (f"the SLOs held at {rate_per_s:.4g} req/s on {who}, the highest rate whose {min_window_s:g} s of "
            f"arrivals (search.min_window_s) one run holds ({MAX_NUM_REQUESTS:,} requests): its limit is at least "
            "that, higher rates were not simulated")


@dataclass(frozen=True)
class CurveTask:
    raw: dict
    candidate: Candidate
    num_replicas: int
    settings: PlanSettings
    known: tuple = ()  # the candidate's search simulations (Evaluations), reused where they answer
    saturated_rate_per_replica: float = math.nan  # phase 1's estimate (`saturated_rate`), for `search_ceiling`


def curves_for(group: tuple[CurveTask, ...]) -> list[CurveOutcome]:
    """Phase 2 for top candidates with the same GPU, TP, PP and replica count, one after the other: each search
    starts from the bracket of the one before it."""
    return _in_turn(group, curve_for)


def curve_for(task: CurveTask, neighbour: CurveOutcome | None = None) -> CurveOutcome:
    """Phase 2 for a top candidate: its deployment's max sustainable rate and a throughput-latency curve.
    `neighbour`: the curve of a deployment of the same GPU, TP, PP and replica count under another policy."""
    s = task.settings
    evaluate = Evaluator(task.raw, s, task.known)
    n = task.num_replicas
    ceiling, cap = search_ceiling(s.target_rate_per_s, task.saturated_rate_per_replica, n), window_ceiling(
        s.min_window_s)
    bracket = (neighbour.max_rate_per_s, neighbour.failed_rate_per_s) if neighbour is not None and below_ceilings(
        neighbour.max_rate_per_s, min(ceiling, cap), neighbour.ceiling_rate_per_s) else None
    ok, bad = capped_search(lambda r: evaluate(n, r, verdict_only=True).slo_met, s.target_rate_per_s,
                            s.rate_tolerance, s.target_rate_per_s / 1024, bracket, ceiling, cap)
    top = ok if math.isfinite(ok) and ok > 0 else s.target_rate_per_s
    # a point past the window's ceiling would be a run of more requests than one holds
    points = [evaluate(n, top * f) for f in CURVE_FRACTIONS if top * f <= cap]
    return CurveOutcome(task.candidate, n, ok, points, failed_rate_per_s=bad, ceiling_rate_per_s=min(ceiling, cap))


@dataclass(frozen=True)
class SeedTask:
    raw: dict
    num_replicas: int
    seed: int
    settings: PlanSettings
    known: tuple = ()  # the candidate's search simulations (Evaluations), reused where they answer


def repeat_with_seed(task: SeedTask) -> SeedOutcome:
    """Phase 3: the recommendation under another seed, and the replica count that seed would give."""
    s = task.settings
    evaluate = Evaluator(task.raw, s, task.known)
    n = min_replicas(lambda k: evaluate(k, s.target_rate_per_s, task.seed, verdict_only=True).slo_met, task.num_replicas,
                     s.max_replicas)
    return SeedOutcome(task.seed, n, evaluate(task.num_replicas, s.target_rate_per_s, task.seed))


# ---------------------------------------------------------------------------------------- driver

def plan_settings(raw: dict, *, rate: float | None = None, gpus: list | None = None,
                  tensor_parallel: list[int] | None = None, policies: list[str] | None = None,
                  max_replicas: int | None = None, num_seeds: int | None = None,
                  prices: dict[str, float] | None = None,
                  pipeline_parallel: list[int] | None = None, exhaustive: bool = False,
                  cache_dir: str | None = None, expert_parallel: list[int] | None = None,
                  shared_cost_model: bool | None = None) -> PlanSettings:
    """The search space: the scenario's `search:` section, then command-line overrides."""
    from sim.config.files import build_scenario_set
    from sim.config.schema import MAX_GPUS_PER_REPLICA, MAX_PLAN_SEEDS, MAX_REPLICAS, SearchSpec
    # Command-line values, checked as the schema checks the file's (search.*: the same limits).
    for option, values, limit in (("--seeds", [num_seeds], MAX_PLAN_SEEDS), ("--max-replicas", [max_replicas], MAX_REPLICAS),
                                  ("--tp", tensor_parallel, MAX_GPUS_PER_REPLICA),
                                  ("--pp", pipeline_parallel, MAX_GPUS_PER_REPLICA),
                                  ("--ep", expert_parallel, MAX_GPUS_PER_REPLICA)):
        for value in values or []:
            if value is not None and not 1 <= value <= limit:
                raise ConfigError(f"{option}: {value} is not allowed; allowed: 1 to {limit}")
    base = build_scenario_set(copy.deepcopy(raw), resolve=False).base
    search = base.search or SearchSpec()
    from sim.config.engines.presets import preset_keys
    # an engine's data-parallel workers (SGLang's --dp-size above 1) fix the replicas each candidate would size
    if base.hardware.num_replicas != 1 and "hardware.num_replicas" in preset_keys(raw):
        raise ConfigError(f"engine: its flags set hardware.num_replicas ({base.hardware.num_replicas}), which the "
                          "planner sizes itself; allowed: leave the engine's data-parallel flag out (each replica the "
                          "plan counts is then one server)")
    if not base.slo.has_limits():
        raise ConfigError("slo: planning needs at least one limit (slo.ttft_s, slo.tpot_s or slo.e2e_s)")
    variants = list((raw.get("variants") or {}).keys())
    chosen = policies if policies is not None else search.policies
    if chosen is not None:
        unknown = [p for p in chosen if p not in variants]
        if unknown:
            raise ConfigError(f"search.policies: {unknown[0]!r} is not a variant of the scenario; "
                              f"allowed: {', '.join(variants) or '(the file has no variants)'}")
        policy_list: list[str | None] = list(chosen)
    else:
        policy_list = list(variants) or [None]
    gpu_list = gpus if gpus is not None else (
        [g if isinstance(g, str) else g.model_dump(mode="json") for g in search.gpus] if search.gpus
        else [(raw.get("hardware") or {}).get("gpu", base.hardware.gpu)])
    # A name the catalog lacks would only be excluded, and the plan would answer "no candidate": refuse it.
    from sim.model.catalog import get_gpu
    gpus_field = "--gpus" if gpus is not None else "search.gpus" if search.gpus else "hardware.gpu"
    for gpu in gpu_list:
        if isinstance(gpu, str):
            get_gpu(gpu, gpus_field)  # one line naming the unknown name and the catalog's
    tp_list = tensor_parallel if tensor_parallel is not None else (
        search.tensor_parallel or [base.hardware.tensor_parallel])
    pp_list = pipeline_parallel if pipeline_parallel is not None else (
        search.pipeline_parallel or [base.hardware.pipeline_parallel])
    ep_list = expert_parallel if expert_parallel is not None else search.expert_parallel
    target = rate if rate is not None else search.target_rate_per_s
    if target is None:
        target = arrival_rate(raw)  # a trace at its own pace: its recorded mean rate
    if target is None or not target > 0:
        raise ConfigError("search.target_rate_per_s: the workload has no arrival rate to plan for; "
                          "set search.target_rate_per_s or pass --rate")
    window_requests = math.ceil(target * search.min_window_s)
    if window_requests > MAX_NUM_REQUESTS:  # every candidate's runs would be refused, and the plan say "none meets"
        raise ConfigError(f"search.min_window_s: {search.min_window_s:g} s of arrivals at {target:g} req/s are "
                          f"{window_requests:,} requests a run, more than one holds ({MAX_NUM_REQUESTS:,}); allowed: "
                          f"at most {MAX_NUM_REQUESTS / target:g} s at this rate")
    merged_prices = dict(search.prices_per_gpu_hour)
    merged_prices.update(prices or {})
    gpu_names = {g if isinstance(g, str) else str(g.get("name")) for g in gpu_list}
    for name, price in merged_prices.items():
        if name not in gpu_names:
            raise ConfigError(f"--price: {name!r} is not a candidate GPU; allowed: {', '.join(sorted(gpu_names))}")
        # NaN compares false with everything, so a NaN cost would rank first; an infinite one prices nothing.
        if isinstance(price, bool) or not isinstance(price, (int, float)) or not (math.isfinite(price) and price >= 0):
            raise ConfigError(f"--price: {name}={price!r} is not allowed; allowed: a finite number of USD per "
                              "GPU-hour >= 0")
    return PlanSettings(
        target_rate_per_s=float(target), gpus=gpu_list, tensor_parallel=[int(t) for t in tp_list],
        policies=policy_list, max_replicas=max_replicas or search.max_replicas,
        rate_tolerance=search.rate_tolerance, num_seeds=num_seeds or search.num_seeds, prices=merged_prices,
        top_k=search.top_k, base_seed=base.run.seed, min_window_s=search.min_window_s,
        steady_state_lifetimes=search.steady_state_lifetimes,
        prefer_calibrated=search.prefer_calibrated,
        shared_cost_model=search.shared_cost_model if shared_cost_model is None else shared_cost_model,
        pipeline_parallel=[int(pp) for pp in pp_list], exhaustive=exhaustive, cache_dir=cache_dir,
        expert_parallel=[int(ep) for ep in ep_list] if ep_list else None,
        band=base.run.band)


def candidate_raw(raw: dict, cand: Candidate, prefer_calibrated: bool = False) -> dict:
    out = variant_raw(raw, cand.policy)
    out.pop("search", None)
    hw = out.setdefault("hardware", {})
    hw["gpu"] = copy.deepcopy(cand.gpu)
    hw["tensor_parallel"] = cand.tensor_parallel
    if cand.pipeline_parallel > 1 or "pipeline_parallel" in hw:  # PP=1 plans write the scenario as before
        hw["pipeline_parallel"] = cand.pipeline_parallel
    if cand.expert_parallel is not None:
        hw["expert_parallel"] = cand.expert_parallel
    hw["num_replicas"] = 1
    out["name"] = cand.name
    cost = out.get("cost_model")
    if not prefer_calibrated and cost is None:
        out["cost_model"] = {"kind": "roofline"}  # the catalog roofline, as the search asks
    elif prefer_calibrated and cost == {"kind": "roofline"}:
        # A bare roofline gives way to the most accurate model available, chosen as for a scenario that names none
        # (sim/config/cost_choice.py, at validation: the same choice as `run` and `compare` make).
        del out["cost_model"]
    return out


def _share_cost_tiers(raws: dict[str, dict], cands: list[Candidate], across_hardware: bool = False) -> None:
    """The policies of one hardware (GPU, TP, PP, EP) that name no cost model get the same kind of default model,
    as `compare` gives a file's variants (sim/config/cost_choice.py `shared_choice`): a plan must not rank a policy
    priced by a whole-step profile against one priced by kernel tables on the same GPUs. `across_hardware`
    (search.shared_cost_model): every candidate alike, whatever its hardware. A candidate that cannot run (a model
    that does not fit its GPUs) decides nothing."""
    from sim.config.cost_choice import shared_choice, with_shared_choice
    from sim.config.files import validates
    groups: dict[str, list[str]] = {}
    for c in cands:
        groups.setdefault("" if across_hardware else _hardware_key(c), []).append(c.name)
    for names in groups.values():
        shared = shared_choice([raws[n] for n in names], runs=validates) if len(names) > 1 else None
        for name in names:
            with_shared_choice(raws[name], shared)


def candidate_cost_model_label(raw: dict, scenario) -> str:
    """The label every run of this candidate names its cost model by (`sim.run.cost_model_extras`, the one
    definition); a disaggregated candidate's is its decode pool's, as its runs' is."""
    return candidate_cost_model_extras(raw, scenario)["cost_model_label"]


def candidate_cost_model_extras(raw: dict, scenario) -> dict:
    """The cost-model extras of this candidate's runs (`sim.run.cost_model_extras`): its label and its notes as
    built (a disaggregated candidate's: its decode pool's)."""
    from sim.run import cost_model_extras, make_cost_model
    if scenario.hardware.disaggregation is None:
        return cost_model_extras(scenario, shared_cost_model(raw, scenario))
    from sim.config.disaggregation import pool_scenario, resolve_disaggregated
    decode = make_cost_model(pool_scenario(scenario, "decode"), resolve_disaggregated(scenario).decode)
    return cost_model_extras(scenario, decode)


def candidates(settings: PlanSettings) -> list[Candidate]:
    """Every GPU x TP x EP x PP x policy, each EP degree with the TP degrees it divides (expert parallelism splits
    a TP group). A TP degree no EP degree divides is kept with the smallest, so that validation excludes it with
    its reason instead of the candidate vanishing. Without EP degrees to search, each candidate keeps its
    scenario's (or variant's) own."""
    def ep_degrees(tp: int) -> list[int | None]:
        if settings.expert_parallel is None:
            return [None]
        return [ep for ep in settings.expert_parallel if tp % ep == 0] or [min(settings.expert_parallel)]
    return [Candidate(gpu, tp, policy, pp, ep) for gpu in settings.gpus for tp in settings.tensor_parallel
            for ep in ep_degrees(tp) for pp in settings.pipeline_parallel for policy in settings.policies]


def rank(outcomes: list[CandidateOutcome]) -> list[CandidateOutcome]:
    """Feasible first, cheapest per hour, then per million tokens, then lower p99 latency."""
    def key(o: CandidateOutcome):
        if o.status != "feasible":
            return (1 if o.status == "infeasible" else 2, 0.0, 0.0, 0.0, o.candidate.name)
        return (0, o.costs.get("cost_per_hour", math.inf), o.costs.get("cost_per_million_tokens", math.inf),
                o.at_target.get("e2e_s_p99", math.inf), o.candidate.name)
    return sorted(outcomes, key=key)


def _versions() -> dict:
    import importlib.metadata as md

    from sim import __version__
    out = {"servesim": __version__, "python": sys.version.split()[0]}
    for pkg in ("numpy", "pandas", "simpy", "pydantic", "plotly"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


def run_plan(raw: dict, settings: PlanSettings, *, backend: str = "process", workers: int | None = None,
             address: str | None = None, command: str = "",
             progress: Callable[[str, int, int], None] | None = None) -> PlanResult:
    """Search every candidate, rank them, then detail the top ones and the recommendation."""
    def tick(phase: str, done: int, total: int) -> None:
        if progress:
            progress(phase, done, total)

    cands = candidates(settings)
    raws = {c.name: candidate_raw(raw, c, settings.prefer_calibrated) for c in cands}  # (inline GPUs are dicts)
    _share_cost_tiers(raws, cands, settings.shared_cost_model)
    tasks = [CandidateTask(raws[c.name], c, settings) for c in cands]
    outcomes = []
    tick("candidates", 0, len(tasks))
    for _, group_outcomes in run_tasks(_neighbour_groups(tasks, _hardware_of), search_candidates,
                                       backend=backend, workers=workers, address=address):
        outcomes += group_outcomes
        tick("candidates", len(outcomes), len(tasks))
    order = {c.name: i for i, c in enumerate(cands)}
    outcomes = rank(sorted(outcomes, key=lambda o: order[o.candidate.name]))
    feasible = [o for o in outcomes if o.status == "feasible"]

    curve_tasks = [CurveTask(raws[o.candidate.name], o.candidate, o.num_replicas, settings, tuple(o.evaluations),
                             o.saturated_rate_per_replica)
                   for o in feasible[:settings.top_k]]
    seed_tasks, seeds_draw_nothing = [], False
    if feasible:
        best = feasible[0]
        seeds_draw_nothing = not _seed_draws(raws[best.candidate.name], best.num_replicas)
        seed_tasks = [SeedTask(raws[best.candidate.name], best.num_replicas, settings.base_seed + i, settings,
                               tuple(best.evaluations))
                      for i in range(1 if seeds_draw_nothing else settings.num_seeds)]
    curves: list[CurveOutcome] = []
    seeds: list[SeedOutcome] = []
    detail = ([("curves", g) for g in _neighbour_groups(curve_tasks, lambda t: (_hardware_of(t), t.num_replicas))]
              + [("seed", t) for t in seed_tasks])
    total = len(curve_tasks) + len(seed_tasks)
    tick("details", 0, total)
    for (kind, _), result in run_tasks(detail, _run_detail, backend=backend, workers=workers, address=address):
        if kind == "curves":
            curves += result
        else:
            seeds.append(result)
        tick("details", len(curves) + len(seeds), total)
    rank_of = {o.candidate.name: i for i, o in enumerate(outcomes)}
    curves.sort(key=lambda c: rank_of[c.candidate.name])
    seeds.sort(key=lambda s: s.seed)

    from sim.config.files import build_scenario_set
    base = build_scenario_set(copy.deepcopy(raw), resolve=False).base
    import yaml
    return PlanResult(settings, yaml.safe_dump(raw, sort_keys=False), base.slo.model_dump(mode="json"),
                      outcomes, curves, seeds, _versions(), command, seeds_draw_nothing)


def _seed_draws(raw: dict, num_replicas: int) -> tuple[str, ...]:
    """What the seed draws in a candidate's run at `num_replicas` replicas (sim/run.py seed_draws)."""
    from sim.config.files import validate_scenario
    from sim.run import seed_draws
    raw = copy.deepcopy(raw)
    raw.setdefault("hardware", {})["num_replicas"] = num_replicas
    return seed_draws(validate_scenario(raw))


def _run_detail(item: tuple[str, Any]):
    kind, task = item
    return curves_for(task) if kind == "curves" else repeat_with_seed(task)


def _hardware_key(c: Candidate) -> str:
    """What a candidate runs on, policy aside: candidates alike in this are neighbours (`search_candidates`) and
    share a cost-model tier (`_share_cost_tiers`)."""
    return json.dumps([c.gpu, c.tensor_parallel, c.pipeline_parallel, c.expert_parallel], sort_keys=True,
                      default=str)


def _hardware_of(task) -> str:
    return _hardware_key(task.candidate)


def _neighbour_groups(tasks: list, key: Callable) -> list[tuple]:
    """The tasks grouped by `key`, groups in the order of their first task, tasks in their order: one backend
    task each, so a search can start from its neighbour's answer."""
    groups: dict[str, list] = {}
    for task in tasks:
        groups.setdefault(key(task), []).append(task)
    return [tuple(g) for g in groups.values()]

