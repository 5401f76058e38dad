"""How far a preset's CPU terms and front-end can be trusted (issue 31, source c): the spread the bands draw
them from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import sim.config.engines.fitted as fitted
from sim.config.engines.base import dotted_version, parse_version
from sim.config.engines.engine_work import (QUEUEING_FRONTEND_TERMS, RATIOS_TO_V0110, measured_work,
                                            work_keys)
from sim.config.engines.fitted import nearest_fits, why_borrowed
from sim.config.engines.presets import PRESETS


# Every uncertain number a preset writes into a scenario is drawn log-normally, value x exp(sigma_log x z) with z
# standard normal (a time is positive; "x 2" and "/ 2" weigh the same): a fitted term with its fit's sigma
# (engine_terms.json, benchmarks/published_suite.py SPREAD_METHOD), an estimate with the sigma of the range stated
# below. sim/bands.py draws z; `with_engine_terms_drawn` sets the drawn values.

Z90 = 1.6448536269514722  # the standard normal's 95th percentile: a 90% range is value x/÷ exp(Z90 x sigma_log)
_OVERHEAD_TERMS = ("per_step_s", "per_seq_s", "per_prefill_token_s", "launch_per_layer_s")
_FIELDS = {**{t: f"cost_model.overhead.{t}" for t in _OVERHEAD_TERMS}, "latency_s": "frontend.latency_s",
           **{t: f"frontend.{t}" for t in QUEUEING_FRONTEND_TERMS}}


def _sigma_of_factor(factor: float) -> float:
    """The log-normal sigma whose 90% range is value x/÷ factor."""
    return math.log(factor) / Z90


# The presets' numbers that are estimates, not fits, each with its stated 90% range (value x/÷ the factor) and why.
# One place: `engine_term_spread` reads only this.
ESTIMATE_RANGES: dict[str, tuple[float, str]] = {
    "per_seq_s": (3.0, "ServeSim's estimate for vLLM V1 (sim/cost/overhead.py: 10 us per scheduled sequence), which "
                  "no preset fits (a per-sequence term fitted on the suite's one or two runs absorbed the kernels' "
                  "error at large batches, benchmarks/published_suite.py CPU_TERMS); no published number gives it, "
                  "and vLLM V1's scheduler alone measured 8-15 us on one CPU (benchmarks/bench_vllm_engine_core.py, "
                  "the worker's share not measured): 3.3-30 us, a factor of 3 either way"),
    "launch_per_layer_s": (2.0, "--enforce-eager's kernel launches, an estimate (sim/cost/overhead.py: ~12 kernels a "
                           "layer at ~5 us each): 2.5-10 us a kernel, a factor of 2 either way"),
    "per_step_s": (3.0, "the engine has no fitted CPU term: vLLM's estimate (sim/cost/overhead.py 0.5 ms); the "
                   "terms fitted on 8B runs span 0.67-2.4 ms (engine_terms.json): a factor of 3 either way"),
    "per_request_s": (2.0, "an engine's HTTP front-end work per request (API_SERVER_WORK, vLLM's and SGLang's; "
                      "TEMPLATE_PARSES: its intake, vLLM's chat-template parse), measured on one CPU (the development "
                      "machine's AMD EPYC guest, where a burst's intake at 16 prompt tokens ran 0.9-2.3 ms a request "
                      "over 15 bursts, once 5.2, and the template parse's median over rounds up to 1.9x its "
                      "minimum), for one tokenizer and one template: another host's CPU and another model's, a factor "
                      "of 2 either way"),
    "per_prompt_token_s": (2.0, "an engine's HTTP front-end work per prompt token (API_SERVER_WORK): tokenization "
                           "and the logged token ids, measured on one CPU for Llama 3's tokenizer: another host, "
                           "another tokenizer and other text, a factor of 2 either way"),
    "per_output_chunk_s": (2.0, "an engine's HTTP front-end work per streamed token of a loaded server "
                           "(API_SERVER_WORK, vLLM's and SGLang's, their tokens merged into fewer chunks), measured on "
                           "one CPU: another host's, a factor of 2 either way; not the cost of a chunk a token, which "
                           "a server that keeps up pays (vLLM V1 106-136 us, SGLang 82-121 us) and the model, which "
                           "does not merge, leaves out"),
}
# A term taken from another version's fit (the version has none of its own): the fit's sigma and, in quadrature, how
# far one engine's terms move between versions: TensorRT-LLM's fits at 0.14.0 and 1.2.0rc1 (both terms inside
# their bounds, 8B models on an H100: the one like-for-like pair in engine_terms.json) differ by 2.19x per step
# (1.08 against 2.36 ms) and 5.22x in the front-end (5.6 against 29.3 ms), taken as each term's 90% factor.
OTHER_VERSION_FACTORS = {"per_step_s": 2.19, "latency_s": 5.22}
# Front-end work measured on another release of the same server kind (`lent_api_server_work`): the widest ratio
# between two releases measured in turn (vLLM 0.8.4's, 0.9.2's, 0.13.0's and 0.19.0's to 0.11.0's, term by term:
# 0.8.4's per streamed token, 1 / 0.48 = 2.06), taken as the 90% factor, in quadrature with the estimate's own
OTHER_RELEASE_WORK_FACTOR = max(max(r, 1 / r) for ratios in RATIOS_TO_V0110.values() for r in ratios.values())


@dataclass(frozen=True)
class TermSpread:
    """One uncertain number an engine preset put into a scenario: drawn as point x exp(sigma_log x z)."""

    key: str  # the scenario key it sets, dotted: cost_model.overhead.per_step_s, frontend.latency_s, ...
    point: float  # its value in the scenario (seconds), returned exactly at z = 0
    sigma_log: float  # log-normal sigma of the value
    kind: str  # "fitted" (the fit's own spread), "other version" (a fit of another version) or "estimate"
    source: str  # where the value and its sigma come from
    upper_s: float | None  # a draw above this is clamped to it (None: never clamped) ...
    clamp_reason: str  # ... because of this

    def range90(self) -> tuple[float, float]:
        """The 90% range of the draws (clamped like them)."""
        return self.drawn(-Z90), self.drawn(Z90)

    def drawn(self, z: float) -> float:
        """The value at standard-normal draw z (the point itself at z = 0)."""
        if z == 0:
            return self.point
        value = self.point * math.exp(self.sigma_log * z)
        return min(value, self.upper_s) if self.upper_s is not None else value


def engine_model_misfit(scenario) -> tuple[float, str] | None:
    """(sigma_log, where it comes from) of what an engine preset's model misses beyond its terms' spread: the
    preset's log errors on its own fit runs after fitting (engine_terms.json `fit_error`), pooled over the engine's
    fitted versions that have more residuals than fitted terms, as the unbiased residual sigma
    sqrt(sum n_i rms_i^2 / sum (n_i - p_i)) (a version alone has 1-4 degrees of freedom). It is the scheduling,
    front-end and kernel behaviour that engine's preset lacks, which no term can absorb; sim/bands.py draws it as
    a further step-time bias. Per engine, because the presets differ: one engine's poor fit says nothing about
    another's rule. An engine without such a version takes every engine's pool, and says so. None without an engine
    preset or without fits."""
    if getattr(scenario, "engine", None) is None or scenario.engine.name not in PRESETS:
        return None
    fits = fitted.fitted_table().get("engines", {})
    whose = f"the {scenario.engine.name} preset's"
    sigma, dof, versions = _pooled_misfit({scenario.engine.name: fits.get(scenario.engine.name, {})})
    if not dof:
        whose = "every preset's (none of its own has residuals to spare)"
        sigma, dof, versions = _pooled_misfit(fits)
    if not dof:
        return None
    return sigma, (f"{whose} misfit on its fit runs, pooled over {versions} fitted versions ({dof} degrees of "
                   "freedom; sim/config/engine_terms.json)")


def _pooled_misfit(fits: dict) -> tuple[float, int, int]:
    """(unbiased residual sigma, degrees of freedom, versions) pooled over these engines' fitted versions that have
    more residuals than fitted terms; (0, 0, 0) without any."""
    squares, dof, versions = 0.0, 0, 0
    for entries in fits.values():
        for entry in entries.values():
            error, fitted = entry.get("fit_error"), len(entry.get("terms", {}))
            if error and error["residuals"] > fitted:
                squares += error["rms_log"] ** 2 * error["residuals"]
                dof += error["residuals"] - fitted
                versions += 1
    return (math.sqrt(squares / dof) if dof else 0.0), dof, versions


def engine_term_spread(scenario) -> list[TermSpread]:
    """The uncertain numbers the scenario's engine preset put into it (a validated `Scenario`), in a fixed order:
    the fitted CPU term and front-end latency with their fit's sigma (engine_terms.json), widened for a version
    that borrows another's fit (OTHER_VERSION_FACTORS), and the CPU estimates in effect (ESTIMATE_RANGES); then the
    benchmark client's measured costs (`bench_client_spread`, with or without a preset). [] without either.

    What a preset writes that is not drawn, and why:
    - a term the scenario sets to another value than the preset's: the user's value is theirs (only a value the
      preset wrote, equal to it, is drawn);
    - frontend.per_prompt_token_s, per_output_chunk_s and per_request_s (but for the engine versions whose front-end
      work was measured, API_SERVER_WORK and TEMPLATE_PARSES, drawn with ESTIMATE_RANGES' spread): 0 by
      construction, the preset's front-end is one delay that does not queue (latency_s: vLLM's TTFT is 59 ms at
      concurrency 1 and 64 ms at 2, not the ~110 ms a serial per-request cost would give,
      benchmarks/published_suite.py CPU_TERMS); its spread is latency_s's;
    - cost_model.overhead.per_prefill_token_s and any other estimate at 0 (sim/cost/overhead.py): a per-token CPU
      cost the published runs cannot separate from the kernels' prefill time; a log-normal draw of 0 is 0;
    - frontend.num_processes, the scheduler and KV defaults: the engine's own defaults read from its source at a
      named version (a default read at another version is a preset note): settings, not estimates."""
    return _preset_term_spread(scenario) + bench_client_spread(scenario)


def bench_client_spread(scenario) -> list[TermSpread]:
    """The benchmark client's costs (`frontend.client`) where it names its `tool` and keeps that tool's measured row
    for the scenario's endpoint (sim/config/bench_clients.py), each drawn x/÷ `BENCH_CLIENT_RANGE`; numbers of the
    user's own (given without a tool, or over its row) are theirs: not drawn."""
    client = scenario.frontend.client if scenario.frontend is not None else None
    if client is None or client.tool is None:
        return []
    from sim.config.bench_clients import BENCH_CLIENT_RANGE, bench_client
    row = bench_client(client.tool, scenario.workload.endpoint)
    measured = (client.per_request_s, client.per_event_s)
    if row is None or (row.per_request_s, row.per_event_s) != measured:
        return []
    factor, why = BENCH_CLIENT_RANGE
    return [TermSpread(f"frontend.client.{term}", float(value), _sigma_of_factor(factor), "estimate", why, None, "")
            for term, value in zip(("per_request_s", "per_event_s"), measured) if value > 0]


def _preset_term_spread(scenario) -> list[TermSpread]:
    """`engine_term_spread`'s numbers from the engine preset."""
    engine = scenario.engine
    if engine is None or engine.name not in PRESETS:
        return []
    version = parse_version(engine.version)
    if version is None:
        return []
    table = fitted.fitted_table()
    bounds = table.get("uncertainty", {}).get("bounds_s", {})
    nearest = nearest_fits(engine.name, engine.version)
    overhead = getattr(scenario.cost_model, "overhead", None)
    present: dict[str, float | None] = {}
    if overhead is not None:
        present.update({t: getattr(overhead, t) for t in _OVERHEAD_TERMS})
    if scenario.frontend is not None:
        present["latency_s"] = scenario.frontend.latency_s
    out: list[TermSpread] = []
    for term in ("per_step_s", "latency_s"):
        fit = nearest.get(term)
        if term not in present or fit is None or present[term] != fit.value:
            continue  # absent, or the user's own value
        sigmas = table["engines"][engine.name][fit.version].get("sigma_log", {})
        if term not in sigmas:
            continue  # a fit with no spread (written before the spreads were): nothing stated, nothing drawn
        where = f"{engine.name} {fit.version}'s fit (sim/config/engine_terms.json)"
        sigma, kind, source = sigmas[term], "fitted", f"{where}: the fit's spread"
        if fit.borrowed:
            extra = _sigma_of_factor(OTHER_VERSION_FACTORS[term])
            sigma, kind = math.hypot(sigma, extra), "other version"
            source += (f", and x/÷ {OTHER_VERSION_FACTORS[term]:g} for {engine.name} {engine.version}, "
                       f"{why_borrowed(engine.name, engine.version, (term,))} "
                       "(sim/config/engines/spread.py OTHER_VERSION_FACTORS)")
        out.append(_spread(term, fit.value, sigma, kind, source, bounds))
    work, lent = _scenario_frontend_work(scenario, version, table)
    for term in QUEUEING_FRONTEND_TERMS:
        point = work.get(term)
        if point and getattr(scenario.frontend, term) == point:  # the preset's, not the user's own
            factor, why = ESTIMATE_RANGES[term]
            sigma = _sigma_of_factor(factor)
            if lent is not None:
                sigma = math.hypot(sigma, _sigma_of_factor(OTHER_RELEASE_WORK_FACTOR))
                why += (f", and x/÷ {OTHER_RELEASE_WORK_FACTOR:.2f} for {engine.name} {engine.version}, which takes "
                        f"{lent}'s (sim/config/engines/spread.py OTHER_RELEASE_WORK_FACTOR)")
            out.append(_spread(term, point, sigma, "estimate", why, bounds))
    if overhead is not None and overhead.engine in ("vllm-cudagraph", "vllm-eager"):
        from sim.cost.overhead import ENGINE_DEFAULTS
        defaults = ENGINE_DEFAULTS[overhead.engine]
        eager_launch_s = ENGINE_DEFAULTS["vllm-eager"].launch_per_layer_s
        for term in ("per_step_s", "per_seq_s", "launch_per_layer_s"):
            point = getattr(defaults, term)
            if term == "launch_per_layer_s" and present.get(term) == eager_launch_s:
                point = eager_launch_s  # the eager estimate a preset wrote (SGLang's steps outside its CUDA graphs)
            elif present.get(term) is not None or point <= 0:
                continue  # set (fitted above, or the user's), or a zero that has no spread (see the docstring)
            factor, why = ESTIMATE_RANGES[term]
            out.append(_spread(term, point, _sigma_of_factor(factor), "estimate", why, bounds))
    return out


def _scenario_frontend_work(scenario, version: tuple[int, ...], fits: dict) -> tuple[dict[str, float], str | None]:
    """The front-end work that queues a validated scenario's engine preset prices (`measured_work`, by the fits
    `fits`), or {}; and the release whose measured work it is where that is another's (`lent_api_server_work`), else
    None."""
    if scenario.frontend is None:
        return {}, None
    from sim.model.catalog import resolve_model
    model_type = resolve_model(scenario.model).model_type
    # which server the preset priced: its release's, or V0's where a vLLM 0.8-0.10 setup fell back to V0
    intake, parse = measured_work(scenario.engine.name, scenario.engine.version, model_type,
                                  scenario.workload.endpoint, fits, scenario.engine.v0_fallback)
    lent = None if intake is None or intake.covers(version) else dotted_version(intake.since)
    return work_keys(intake, parse), lent


def _spread(term: str, point: float, sigma: float, kind: str, source: str, bounds: dict) -> TermSpread:
    upper = bounds.get(term)
    reason = (f"{term} above {upper:g} s is beyond the published suite's fit range (calibrate/engine_fit.py "
              "FIT_BOUNDS_S): a value no fit could return" if upper is not None else "")
    return TermSpread(_FIELDS[term], float(point), float(sigma), kind, source, upper, reason)


def with_engine_terms_drawn(scenario, z: dict[str, float]):
    """The scenario with each uncertain term (`engine_term_spread`) at its value for the standard-normal draw
    z[key] (a `model_copy`: nothing else changes). A term missing from z, or at z = 0, keeps its value exactly;
    a z for a key this scenario has no spread for is ignored (every variant of a comparison can take the same
    draws)."""
    updates: dict[str, dict[str, float]] = {"cost_model.overhead": {}, "frontend": {}, "frontend.client": {}}
    for spread in engine_term_spread(scenario):
        zk = float(z.get(spread.key, 0.0))
        if zk == 0.0:
            continue
        section, term = spread.key.rsplit(".", 1)
        updates[section][term] = spread.drawn(zk)
    update: dict[str, Any] = {}
    if updates["cost_model.overhead"]:
        cost_model = scenario.cost_model
        update["cost_model"] = cost_model.model_copy(
            update={"overhead": cost_model.overhead.model_copy(update=updates["cost_model.overhead"])})
    frontend_update: dict[str, Any] = dict(updates["frontend"])
    if updates["frontend.client"]:
        frontend_update["client"] = scenario.frontend.client.model_copy(update=updates["frontend.client"])
    if frontend_update:
        update["frontend"] = scenario.frontend.model_copy(update=frontend_update)
    return scenario.model_copy(update=update) if update else scenario
