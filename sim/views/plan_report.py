"""What `servesim plan` writes: tables (CSV), a Markdown summary and a self-contained HTML report."""

from __future__ import annotations

import html
import math
import statistics

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import yaml
from plotly.subplots import make_subplots

from sim.tools.planner import PlanResult
from sim.tools.pool_split import RANKING_KEYS, RANKING_RULE, PoolSplitPlan
from sim.views.charts import COLORS, TEMPLATE, figure_html, plotly_script
from sim.views.report import (STYLE, engine_notes_section_html, format_metric, format_value, note_groups,
                              notes_section_html, render_report)
from sim.views.verdict import plan_verdict

_LIMITS = (("ttft", "ttft_s", "TTFT"), ("tpot", "tpot_s", "TPOT"), ("e2e", "e2e_s", "E2E"))


def _pct(slo: dict) -> str:
    return f"p{slo.get('percentile', 99):g}"


def _metric_at(metrics: dict, slo: dict, metric: str) -> float:
    """The SLO percentile of a latency metric (the summary stores p50/p90/p99 and the SLO's own)."""
    value = metrics.get(f"slo_{metric}_p{slo.get('percentile', 99):g}")
    if value is None:
        value = metrics.get(f"{metric}_s_p99")
    return float(value) if value is not None else math.nan


def candidates_frame(result: PlanResult) -> pd.DataFrame:
    """One row per candidate, ranked: feasible ones first, cheapest first."""
    slo = result.slo
    rows = []
    refusing = any(o.at_target and o.at_target.get("num_rejected") for o in result.outcomes)
    for rank, o in enumerate(result.outcomes, start=1):
        c = o.candidate
        row = {
            "rank": rank if o.status == "feasible" else None, "candidate": c.name, "gpu": c.gpu_name,
            "tensor_parallel": c.tensor_parallel,
            # only where the plan searched over it: a plan without EP degrees writes the columns it always did
            **({"expert_parallel": c.expert_parallel} if result.settings.expert_parallel else {}),
            "policy": c.policy or "",
            # only where a candidate names a serving engine: a plan without one writes the columns it always did
            **({"engine": o.engine} if any(x.engine for x in result.outcomes) else {}),
            "cost_model": o.cost_model,
            "status": o.status, "reason": o.reason,
            "num_replicas": o.num_replicas, "num_gpus": o.costs.get("num_gpus"),
            "cost_per_hour": o.costs.get("cost_per_hour"),
            "cost_per_million_tokens": o.costs.get("cost_per_million_tokens"),
            "cost_per_million_output_tokens": o.costs.get("cost_per_million_output_tokens"),
            "max_rate_per_replica": o.max_rate_per_replica,
            "reachable_rate_per_s": o.reachable_rate_per_s,  # infeasible: about the most max_replicas serve
        }
        for metric, _, _ in _LIMITS:
            row[f"{metric}_{_pct(slo)}_s"] = _metric_at(o.at_target, slo, metric) if o.at_target else math.nan
        # the load's goodput: the target's requests a second within every limit (a feasible candidate finished
        # them all), not the summary's goodput_rps, whose time includes the drain (about half the target at 40 req/s
        # of ShareGPT-like requests for 60 s)
        row["goodput_rps"] = (result.settings.target_rate_per_s * o.at_target["slo_fraction_ok"] if o.at_target
                              else None)
        if refusing:  # only where a candidate refuses requests: a plan without any writes the columns it always did
            row["num_rejected"] = o.at_target.get("num_rejected", 0) if o.at_target else None
            row["reject_reason"] = o.at_target.get("reject_reason", "") if o.at_target else ""
        if _band_level(result) is not None:
            row.update(_band_columns(o, slo))
        row["num_simulations"] = len(o.evaluations)
        rows.append(row)
    return pd.DataFrame(rows)


def _band_level(result: PlanResult) -> float | None:
    return getattr(result.settings, "band", None)


def _band_columns(o, slo: dict) -> dict:
    """A planned candidate's band (issue 31): where its verdict flips inside the band, how many replications met
    the SLOs, and the band's edges of each SLO figure at its chosen replicas (the sweep's `_lo` / `_hi`)."""
    band = o.band or {}
    row = {"band_flip": o.band_flip, "band_slo_met_replications": band.get("slo_met_replications"),
           "band_replications": band.get("replications")}
    for metric, key, _ in _LIMITS:
        if slo.get(key) is None:
            continue
        edges = band.get(f"slo_{metric}_{_pct(slo)}")
        row[f"{metric}_{_pct(slo)}_s_lo"], row[f"{metric}_{_pct(slo)}_s_hi"] = edges or (math.nan, math.nan)
    if slo.get("min_goodput_fraction") is not None:
        edges = band.get("slo_goodput_share")
        row["slo_goodput_share_lo"], row["slo_goodput_share_hi"] = edges or (math.nan, math.nan)
    return row


def band_frame(result: PlanResult) -> pd.DataFrame:
    """The candidates a band was run for or whose verdict flips inside it: the replicas chosen at the band's
    pessimistic edge, the edges of each SLO figure there, and the flip (empty frame without a band)."""
    level = _band_level(result)
    if level is None:
        return pd.DataFrame()
    slo, rows = result.slo, []
    for o in result.outcomes:
        if not o.band and not o.band_flip:
            continue
        row = {"candidate": o.candidate.name, "status": o.status, "num_replicas": o.num_replicas}
        band = o.band or {}
        for metric, key, label in _LIMITS:
            edges = band.get(f"slo_{metric}_{_pct(slo)}")
            if slo.get(key) is not None:
                row[f"{_pct(slo)} {label} band (s)"] = (f"[{format_value(edges[0])}, {format_value(edges[1])}]"
                                                       if edges else "-")
        met, total = band.get("slo_met_replications"), band.get("replications")
        row["SLOs met in"] = f"{met} of {total}" if met is not None and total else "-"
        row["verdict flips inside the band"] = o.band_flip or "no"
        rows.append(row)
    return pd.DataFrame(rows)


def band_text(result: PlanResult) -> str:
    """One paragraph: the band's level and which candidates' verdicts flip inside it."""
    level = _band_level(result)
    flips = [o for o in result.outcomes if o.band_flip]
    head = (f"Each candidate is held to the SLOs at the {level:g}% band's pessimistic edge (the upper edge of each "
            "latency at the SLO percentile, the lower edge of the goodput share), checked at its fewest replicas.")
    if not flips:
        return head + " No candidate's verdict flips inside the band."
    return head + f" The verdict flips inside the band for {len(flips)} of {len(result.outcomes)} candidates: " + \
        "; ".join(f"{o.candidate.name}: {o.band_flip}" for o in flips) + "."


def evaluations_frame(result: PlanResult) -> pd.DataFrame:
    """Every simulation the planner ran, for anyone who wants to check its search."""
    rows = []
    for o in result.outcomes:
        for e in o.evaluations:
            rows.append({"phase": "search", "candidate": o.candidate.name, "num_replicas": e.num_replicas,
                         "rate_per_s": e.rate_per_s, "seed": e.seed, "slo_met": e.slo_met, **e.metrics})
    for c in result.curves:
        for e in c.points:
            rows.append({"phase": "curve", "candidate": c.candidate.name, "num_replicas": e.num_replicas,
                         "rate_per_s": e.rate_per_s, "seed": e.seed, "slo_met": e.slo_met, **e.metrics})
    rec = result.recommendation
    for s in result.seeds:
        e = s.at_recommendation
        rows.append({"phase": "seed", "candidate": rec.candidate.name if rec else "", "num_replicas": e.num_replicas,
                     "rate_per_s": e.rate_per_s, "seed": e.seed, "slo_met": e.slo_met, **e.metrics})
    return pd.DataFrame(rows)


def slo_margins(result: PlanResult) -> list[dict]:
    """How far the recommendation sits inside each limit at the target, and its rate headroom."""
    rec = result.recommendation
    if rec is None:
        return []
    out = []
    for metric, key, label in _LIMITS:
        limit = result.slo.get(key)
        if limit is None:
            continue
        measured = _metric_at(rec.at_target, result.slo, metric)
        out.append({"limit": f"{_pct(result.slo)} {label} ≤ {limit:g} s", "measured_s": measured,
                    "margin": 1 - measured / limit if limit else math.nan})
    curve = next((c for c in result.curves if c.candidate == rec.candidate), None)
    if curve is not None and math.isfinite(curve.max_rate_per_s):
        # no failure seen: the search stopped at the highest rate one run holds (planner.capped_search)
        label = "rate headroom (at least)" if math.isinf(curve.failed_rate_per_s) else "rate headroom"
        out.append({"limit": label, "measured_s": curve.max_rate_per_s,
                    "margin": curve.max_rate_per_s / result.settings.target_rate_per_s - 1})
    return out


def seed_summary(result: PlanResult) -> dict:
    """The spread of the answer over seeds: replica counts, SLO attainment and latency percentiles."""
    if not result.seeds:
        return {}
    replicas = [s.min_replicas for s in result.seeds]
    out = {"num_seeds": len(result.seeds), "seeds_meeting_slo": sum(s.at_recommendation.slo_met for s in result.seeds),
           "min_replicas": [r for r in replicas], "replicas_low": min((r for r in replicas if r), default=None),
           "replicas_high": None if None in replicas else max(replicas)}
    for metric, key, _ in _LIMITS:
        if result.slo.get(key) is None:
            continue
        vals = [_metric_at(s.at_recommendation.metrics, result.slo, metric) for s in result.seeds]
        vals = [v for v in vals if not math.isnan(v)]
        if vals:
            out[f"{metric}_mean"] = statistics.fmean(vals)
            out[f"{metric}_stdev"] = statistics.stdev(vals) if len(vals) > 1 else 0.0
            out[f"{metric}_min"], out[f"{metric}_max"] = min(vals), max(vals)
    return out


def _money(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"${x:,.2f}"


def recommendation_text(result: PlanResult) -> str:
    s, rec = result.settings, result.recommendation
    if rec is None:
        text = (f"No candidate meets the SLOs at {s.target_rate_per_s:g} req/s with at most {s.max_replicas} "
                "replicas; see the excluded and infeasible candidates below.")
        reach = [(o.reachable_rate_per_s, o.candidate.name) for o in result.outcomes
                 if math.isfinite(o.reachable_rate_per_s) and o.reachable_rate_per_s > 0]
        if reach:
            rate, name = max(reach)
            text += f" The most any reaches is about {rate:.3g} req/s ({s.max_replicas} × {name})."
        return text
    c = rec.candidate
    limits = ", ".join(f"{_pct(result.slo)} {label} ≤ {result.slo[key]:g} s" for _, key, label in _LIMITS
                       if result.slo.get(key) is not None)
    text = (f"{rec.num_replicas} × {c.gpu_name} at TP {c.tensor_parallel}"
            f"{f' x PP {c.pipeline_parallel}' if c.pipeline_parallel > 1 else ''}"
            f"{f' (EP {c.split_experts})' if c.split_experts else ''}"
            f"{' with policy ' + c.policy if c.policy else ''} ({rec.costs['num_gpus']} GPUs): "
            f"{_money(rec.costs['cost_per_hour'])} per hour, {_money(rec.costs['cost_per_million_tokens'])} per "
            f"million tokens, serving {s.target_rate_per_s:g} req/s within {limits}.")
    others = [o for o in result.feasible[1:]]
    if others:
        nxt = others[0]
        text += (f" It is the cheapest of {len(result.feasible)} configurations that meet the SLOs; the next, "
                 f"{nxt.num_replicas} × {nxt.candidate.name}, costs {_money(nxt.costs['cost_per_hour'])} per hour.")
    else:
        text += " It is the only configuration that meets the SLOs."
    at = rec.at_target or {}
    if at.get("num_rejected"):  # within the SLOs' allowance, but no number of replicas serves them
        simulated = sum(at.get(k) or 0 for k in ("num_finished", "num_unfinished", "num_rejected"))
        text += (f" It refuses {at['num_rejected']:,} of the {simulated:,} requests simulated at the target, as it "
                 "would at any number of replicas (each counts over every limit): the first "
                 f"{at.get('reject_reason')}.")
    return text


# ----------------------------------------------------------------------------------------- charts

def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of points no other point beats on both cost and latency (lower is better)."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1]))
    front, best = [], math.inf
    for i in order:
        if points[i][1] < best:
            front.append(i)
            best = points[i][1]
    return front


def _pareto_figure(result: PlanResult) -> go.Figure:
    """Every deployment simulated at the target that met the SLOs: cost per hour against p99 latency."""
    metric = "e2e" if result.slo.get("e2e_s") is not None else ("ttft" if result.slo.get("ttft_s") else "tpot")
    label = dict((m, lab) for m, _, lab in _LIMITS)[metric]
    xs, ys, names = [], [], []
    target = result.settings.target_rate_per_s
    for o in result.outcomes:
        if o.status != "feasible":
            continue
        price = o.costs["cost_per_hour"] / o.costs["num_gpus"]
        for e in o.evaluations:
            if e.slo_met and math.isclose(e.rate_per_s, target, rel_tol=1e-9):
                xs.append(price * e.num_replicas * o.candidate.gpus_per_replica)
                ys.append(_metric_at(e.metrics, result.slo, metric))
                names.append(f"{e.num_replicas} × {o.candidate.name}")
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", text=names, name="meets SLOs",
                             hovertemplate="%{text}<br>$%{x:.2f}/h<br>%{y:.3g} s<extra></extra>"))
    front = pareto_front(list(zip(xs, ys)))
    fig.add_trace(go.Scatter(x=[xs[i] for i in front], y=[ys[i] for i in front], mode="lines+markers",
                             text=[names[i] for i in front], name="Pareto front", line=dict(color="#d62728")))
    fig.update_layout(title=f"Cost against {_pct(result.slo)} {label} at {target:g} req/s",
                      xaxis_title="USD per hour", yaxis_title=f"{_pct(result.slo)} {label} (s)", height=420,
                      template=TEMPLATE)
    return fig


def _curves_figure(result: PlanResult) -> go.Figure:
    shown = [(m, key, lab) for m, key, lab in _LIMITS if result.slo.get(key) is not None]
    fig = make_subplots(rows=1, cols=len(shown), subplot_titles=[f"{_pct(result.slo)} {lab} (s)" for _, _, lab in shown])
    for i, curve in enumerate(result.curves):
        color = COLORS[i % len(COLORS)]
        name = f"{curve.num_replicas} × {curve.candidate.name}"
        for col, (metric, _, _) in enumerate(shown, start=1):
            # Against the offered rate: a finite run's completions per second include its drain, which
            # would squash every curve to the left.
            fig.add_trace(go.Scatter(x=[p.rate_per_s for p in curve.points],
                                     y=[_metric_at(p.metrics, result.slo, metric) for p in curve.points],
                                     mode="lines+markers", name=name, legendgroup=name, showlegend=col == 1,
                                     text=[f"SLOs {'met' if p.slo_met else 'missed'}" for p in curve.points],
                                     line=dict(color=color)), row=1, col=col)
    for col, (_, key, _) in enumerate(shown, start=1):
        fig.add_hline(y=result.slo[key], line_dash="dash", line_color="grey", row=1, col=col)
        fig.add_vline(x=result.settings.target_rate_per_s, line_dash="dot", line_color="#2ca02c", row=1, col=col)
        fig.update_xaxes(title_text="offered load (req/s)", row=1, col=col)
    fig.update_layout(title="Load against latency for the top candidates (dashed: the SLO limit; dotted: the target)",
                      height=420, template=TEMPLATE)
    return fig


def _seed_figure(result: PlanResult) -> go.Figure:
    shown = [(m, key, lab) for m, key, lab in _LIMITS if result.slo.get(key) is not None]
    fig = go.Figure()
    for i, (metric, key, label) in enumerate(shown):
        # Every seed a point (a handful: a box would hide them), the mean a bar across.
        vals = [_metric_at(s.at_recommendation.metrics, result.slo, metric) / result.slo[key] for s in result.seeds]
        name = f"{_pct(result.slo)} {label}"
        color = COLORS[i % len(COLORS)]
        fig.add_trace(go.Scatter(x=[name] * len(vals), y=vals, mode="markers", name=name,
                                 marker=dict(color=color, size=9, opacity=0.75),
                                 text=[f"seed {s.seed}" for s in result.seeds]))
        finite = [v for v in vals if not math.isnan(v)]
        if finite:
            fig.add_trace(go.Scatter(x=[name], y=[statistics.fmean(finite)], mode="markers", showlegend=False,
                                     name=f"{name} mean", marker=dict(color=color, symbol="line-ew-open", size=30,
                                                                      line=dict(width=2))))
    fig.add_hline(y=1.0, line_dash="dash", line_color="#d62728")
    fig.update_layout(title="The recommendation under different seeds (share of each limit; above 1 misses it)",
                      yaxis_title="measured / limit", height=380, template=TEMPLATE)
    return fig


# ---------------------------------------------------------------------------------------- writers

def _table_html(frame: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    body = []
    for row in frame.itertuples(index=False):
        cells = "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row)
        body.append(f"<tr>{cells}</tr>")
    return f'<div class="table-wrap"><table class="t"><tr>{head}</tr>{"".join(body)}</table></div>'


def _cell(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, (float, np.floating)):
        return format_value(float(value))
    return format_value(value) if not isinstance(value, str) else value


def _display_candidates(result: PlanResult) -> pd.DataFrame:
    df = candidates_frame(result)
    keep = ["rank", "candidate", "status", "num_replicas", "num_gpus", "cost_per_hour", "cost_per_million_tokens",
            "max_rate_per_replica", "cost_model"] + [c for c in df.columns if c.endswith("_s") and c.startswith(("ttft", "tpot", "e2e"))]
    keep.append("num_rejected")  # where a candidate refuses requests (`candidates_frame`)
    return df[[c for c in keep if c in df.columns]]


def _margins_frame(result: PlanResult) -> pd.DataFrame:
    rows = slo_margins(result)
    return pd.DataFrame([{"limit": r["limit"], "measured": r["measured_s"],
                          "margin": f"{r['margin']:+.0%}" if not math.isnan(r["margin"]) else "-"} for r in rows])


def _seeds_frame(result: PlanResult) -> pd.DataFrame:
    rows = []
    for s in result.seeds:
        e = s.at_recommendation
        row = {"seed": s.seed, "SLOs met": e.slo_met,
               "fewest replicas under this seed": s.min_replicas if s.min_replicas else f"> {result.settings.max_replicas}"}
        for metric, key, label in _LIMITS:
            if result.slo.get(key) is not None:
                row[f"{_pct(result.slo)} {label} (s)"] = _metric_at(e.metrics, result.slo, metric)
        rows.append(row)
    return pd.DataFrame(rows)


SEEDS_DRAW_NOTHING = ("Not repeated over seeds: the recommended deployment's run draws nothing from the seed (its "
                      "arrivals and lengths are fixed, as a replayed trace with its own lengths is, and nothing else "
                      "is drawn), so every seed gives this answer; it ran under the base seed alone.")


def _spread_text(result: PlanResult) -> str:
    spread = seed_summary(result)
    if not spread:
        return "No configuration met the SLOs, so there is nothing to repeat."
    if result.seeds_draw_nothing:
        return SEEDS_DRAW_NOTHING
    n = spread["num_seeds"]
    lo, hi = spread["replicas_low"], spread["replicas_high"]
    rec = result.recommendation
    moves = ("the replica count does not move" if lo == hi == rec.num_replicas else
             f"the fewest replicas ranges from {lo} to {hi if hi is not None else f'more than {result.settings.max_replicas}'}")
    parts = [f"Repeated with {n} seeds: the recommended deployment met the SLOs under "
             f"{spread['seeds_meeting_slo']} of {n}, and {moves}."]
    for metric, key, label in _LIMITS:
        if f"{metric}_mean" in spread:
            parts.append(f"{_pct(result.slo)} {label}: {spread[f'{metric}_mean']:.3g} s ± {spread[f'{metric}_stdev']:.2g} "
                         f"(range {spread[f'{metric}_min']:.3g}–{spread[f'{metric}_max']:.3g}) against {result.slo[key]:g} s.")
    caveat = band_caveat(result)
    return " ".join(parts + ([caveat] if caveat else []))


def band_caveat(result: PlanResult) -> str:
    """Under a band, what the seed spread counts: the point figures' replicas, not the band's (issue 31)."""
    if result.settings.band is None or result.recommendation is None:
        return ""
    return (f"These counts are the point figures'; the recommendation's {result.recommendation.num_replicas} "
            f"replicas meet the SLOs at the {result.settings.band:g}% band's pessimistic edge.")


def _excluded_frame(result: PlanResult) -> pd.DataFrame:
    return pd.DataFrame([{"candidate": o.candidate.name, "status": o.status, "reason": o.reason}
                         for o in result.outcomes if o.status != "feasible"])


def _settings_text(result: PlanResult) -> str:
    s = result.settings
    gpus = ", ".join(g if isinstance(g, str) else str(g.get("name")) for g in s.gpus)
    ep = f"expert parallelism {s.expert_parallel}; " if s.expert_parallel else ""
    arrival = ((yaml.safe_load(result.scenario_yaml) or {}).get("workload") or {}).get("arrival") or {}
    window = ("each simulation replays the trace's requests, its gaps rescaled to the rate tried (a trace is not "
              "lengthened to search.min_window_s)" if arrival.get("kind") == "trace" else
              f"each simulation spans at least {s.min_window_s:g} s of arrivals")
    return (f"Target {s.target_rate_per_s:g} req/s; GPUs {gpus}; tensor parallelism {s.tensor_parallel}; {ep}"
            f"policies {', '.join(p or 'base' for p in s.policies)}; at most {s.max_replicas} replicas; "
            f"rate search to within {s.rate_tolerance:.0%}; {window}; base seed {s.base_seed}; prices "
            f"{s.prices or 'from the catalog'}.")


def engine_groups(result: PlanResult) -> list[tuple[str, list[str], tuple[str, ...]]]:
    """What each candidate's engine preset approximates, once per engine and set of notes (`note_groups`):
    a preset's notes can differ by GPU and TP (the defaults it derives for them)."""
    return note_groups((o.candidate.name, o.engine, o.engine_notes) for o in result.outcomes if o.engine)


def cost_model_groups(result: PlanResult) -> list[tuple[str, list[str], tuple[str, ...]]]:
    """What each candidate's cost model approximates as built (`CandidateOutcome.cost_model_notes`), once per cost
    model and set of notes; the candidates whose model notes nothing are left out."""
    return note_groups((o.candidate.name, o.cost_model, o.cost_model_notes) for o in result.outcomes
                       if o.cost_model_notes)


def _engine_notes_markdown(result: PlanResult) -> list[str]:
    out = []
    for title, groups in (("What the engine preset approximates", engine_groups(result)),
                          ("What the cost model approximates", cost_model_groups(result))):
        lines = []
        for of, names, notes in groups:
            lines += [f"### {of}: {', '.join(names)}", ""] + [f"- {n}" for n in notes] + [""]
        out += [f"## {title}", ""] + lines if lines else []
    return out


def render_markdown(result: PlanResult) -> str:
    verdict = plan_verdict(result)
    lines = ["# ServeSim capacity plan", "", "## Verdict", ""]
    lines += [verdict.headline, ""] + ([verdict.decision, ""] if verdict.decision else [])
    lines += [f"- {name}: {text}" for name, text in verdict.why] + ([""] if verdict.why else [])
    lines += [x for x in (verdict.priced_by, verdict.rule) if x] + [""]
    lines += ["## Recommendation", "", recommendation_text(result), ""]
    lines += ["## Candidates", "", _markdown_table(_display_candidates(result)), ""]
    excluded = _excluded_frame(result)
    if len(excluded):
        lines += ["## Excluded and infeasible", "", _markdown_table(excluded), ""]
    margins = _margins_frame(result)
    if len(margins):
        lines += ["## SLO margin of the recommendation", "", _markdown_table(margins), ""]
    if _band_level(result) is not None:
        lines += ["## Verdict flips inside the band", "", band_text(result), ""]
        banded = band_frame(result)
        if len(banded):
            lines += [_markdown_table(banded), ""]
    lines += ["## Uncertainty over seeds", "", _spread_text(result), ""]
    seeds = _seeds_frame(result)
    if len(seeds):
        lines += [_markdown_table(seeds), ""]
    lines += _engine_notes_markdown(result)
    lines += ["## Reproduce", "", _settings_text(result), "", f"    {result.command}", "",
              "Versions: " + ", ".join(f"{k} {v}" for k, v in result.versions.items()), ""]
    return "\n".join(lines)


def _markdown_table(frame: pd.DataFrame) -> str:
    head = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    sep = "| " + " | ".join("---" for _ in frame.columns) + " |"
    rows = ["| " + " | ".join(_cell(v).replace("|", "\\|") for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, sep, *rows])


def render_html(result: PlanResult) -> str:
    figs = []
    if result.feasible:
        figs.append(("pareto", "Cost against latency", _pareto_figure(result)))
    if result.curves:
        figs.append(("curves", "Throughput against latency", _curves_figure(result)))
    if result.seeds:
        figs.append(("seeds-chart", "Spread over seeds", _seed_figure(result)))
    # plotly.js once, in the head; every chart without a bundle of its own (sim/views/charts.py).
    charts = "".join(f'<section id="{key}"><h2>{html.escape(title)}</h2>' + figure_html(fig, f"plot-{key}")
                     + "</section>" for key, title, fig in figs)
    excluded = _excluded_frame(result)
    margins = _margins_frame(result)
    seeds = _seeds_frame(result)
    banded = band_frame(result)
    band_section = ("" if _band_level(result) is None else
                    f'<section id="band"><h2>Verdict flips inside the band</h2><p>{html.escape(band_text(result))}</p>'
                    f'{_table_html(banded) if len(banded) else ""}</section>')
    versions = ", ".join(f"{html.escape(k)} {html.escape(str(v))}" for k, v in result.versions.items())
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><meta name="generator" content="servesim"><title>ServeSim capacity plan</title>
<style>{STYLE}
body{{max-width:1400px}} table.t{{border-collapse:collapse;margin:1em 0;font-size:13px}}
table.t td,table.t th{{border:1px solid #d8dce3;padding:3px 7px;text-align:right}} .rec{{font-size:1.05em;
background:#f6f8fb;border-left:4px solid #1f77b4;padding:.6em 1em}}</style>{plotly_script()}
</head><body><h1>ServeSim capacity plan</h1>
{plan_verdict(result).html()}
<section id="recommendation"><h2>Recommendation</h2><p class="rec">{html.escape(recommendation_text(result))}</p></section>
<section id="candidates"><h2>Candidates, cheapest first</h2>{_table_html(_display_candidates(result))}</section>
<section id="excluded"><h2>Excluded and infeasible</h2>{_table_html(excluded) if len(excluded) else '<p>None: every candidate can meet the SLOs.</p>'}</section>
<section id="margin"><h2>SLO margin of the recommendation</h2>{_table_html(margins) if len(margins) else '<p>-</p>'}</section>
{band_section}
<section id="uncertainty"><h2>Uncertainty over seeds</h2><p>{html.escape(_spread_text(result))}</p>{_table_html(seeds) if len(seeds) else ''}</section>
{charts}
{engine_notes_section_html(engine_groups(result))}
{notes_section_html("cost-model-notes", "What the cost model approximates", cost_model_groups(result))}
<section id="reproduce"><h2>Reproduce</h2><p>{html.escape(_settings_text(result))}</p>
<pre>{html.escape(result.command)}</pre><p>Versions: {versions}</p>
<h3>Scenario</h3><pre>{html.escape(result.scenario_yaml)}</pre></section>
</body></html>"""


def write_plan_outputs(result: PlanResult, out_dir, report_path=None, report_inside=None) -> None:
    """All outputs in one folder, built under a temporary name and renamed; the HTML optionally elsewhere too
    (`report_path`), or under another name inside the folder (`report_inside`, relative to it)."""
    from pathlib import Path

    from sim.atomic_files import atomic_dir, write_json, write_output_file
    page = render_html(result)
    with atomic_dir(out_dir) as tmp:
        (tmp / "report.html").write_text(page)
        (tmp / "plan.md").write_text(render_markdown(result))
        candidates_frame(result).to_csv(tmp / "candidates.csv", index=False)
        evaluations_frame(result).to_csv(tmp / "simulations.csv", index=False)
        (tmp / "scenario.yaml").write_text(result.scenario_yaml)
        if report_inside is not None:
            (tmp / report_inside).parent.mkdir(parents=True, exist_ok=True)
            (tmp / report_inside).write_text(page)
        rec = result.recommendation
        write_json(tmp / "plan.json", {
            "recommendation": None if rec is None else {
                "candidate": rec.candidate.name, "num_replicas": rec.num_replicas, **rec.costs,
                "max_rate_per_replica": rec.max_rate_per_replica},
            "target_rate_per_s": result.settings.target_rate_per_s, "slo": result.slo,
            "seed_spread": seed_summary(result), "seeds_draw_nothing": result.seeds_draw_nothing,
            "versions": result.versions, "command": result.command})
    if report_path is not None:
        write_output_file(Path(report_path), page, "--report")


# ---------------------------------------------------------------------------------------- plan-pools

POOL_SPLIT_COLUMNS = ("candidate", "GPUs") + RANKING_KEYS


def pool_split_rows(plan: PoolSplitPlan) -> list[list[str]]:
    """Every split as the CLI's table and report.html show it (`POOL_SPLIT_COLUMNS`)."""
    return [[c.label, str(c.num_gpus), *[format_metric(k, c.summary.get(k)) for k in RANKING_KEYS]]
            for c in plan.candidates]


def pool_split_report(plan: PoolSplitPlan, title: str, scenario_yaml: str) -> str:
    """plan-pools' report.html: its recommendation and every split's figures in place of a comparison's verdict (the
    splits are ranked by their own rule), then the report page of the colocated deployment's run and the
    recommended one's."""
    esc = html.escape
    table = pd.DataFrame(pool_split_rows(plan), columns=list(POOL_SPLIT_COLUMNS))
    table.insert(1, "recommended", ["yes" if c is plan.best else "" for c in plan.candidates])
    shown = " and ".join(run.name for run in plan.shown)
    verdict = (f'<section id="verdict" class="verdict" data-winner="{esc(plan.best.label)}"><h2>Recommendation</h2>'
               f'<p class="headline">{esc(plan.recommendation())}</p>'
               f'<p class="rule">Every split of the {plan.total_gpus} GPUs ran the same requests, ranked by '
               f'{esc(RANKING_RULE)}. The summary and charts below are of {esc(shown)}.</p></section>'
               f'<section id="splits"><h2>Every split</h2>{_table_html(table)}</section>')
    return render_report(list(plan.shown), title, scenario_yaml, verdict_html=verdict)
