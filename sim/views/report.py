"""Self-contained HTML reports (plotly, its JavaScript inlined once) for one or several results."""

from __future__ import annotations

import html
import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sim.results import Result

# One colour per variant, in order, on every chart (report, dashboard sweep, plan report).
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
_KV_PARTS = [("kv_token_slots", "token states", "#2ca02c"), ("kv_reserved_slots", "reserved", "#1f77b4"),
             ("kv_internal_slots", "internal fragmentation", "#ff7f0e"),
             ("kv_external_slots", "external fragmentation", "#d62728")]
_NUM_BINS = 200

SUMMARY_ROWS = [  # (summary key, label): the CLI table, the report and the dashboard show these rows
    ("offered_rps", "offered load (req/s)"), ("throughput_rps", "throughput incl. drain (req/s)"),
    ("output_tokens_per_s", "output tokens/s"), ("goodput_rps", "goodput (req/s)"),
    ("slo_fraction_ok", "requests meeting every SLO"),
    ("ttft_s_p50", "TTFT p50 (s)"), ("ttft_s_p90", "TTFT p90 (s)"), ("ttft_s_p99", "TTFT p99 (s)"),
    ("tpot_s_p50", "TPOT p50 (s)"), ("tpot_s_p90", "TPOT p90 (s)"), ("tpot_s_p99", "TPOT p99 (s)"),
    ("itl_p99", "ITL p99 (s)"),
    ("e2e_s_p50", "E2E p50 (s)"), ("e2e_s_p90", "E2E p90 (s)"), ("e2e_s_p99", "E2E p99 (s)"),
    ("queueing_s_mean", "queueing mean (s)"), ("normalized_latency_s_mean", "normalized latency (s/token)"),
    ("mean_batch_size", "mean batch size"),
    ("kv_token_share", "KV token-state share"), ("kv_external_fraction", "KV external fragmentation"),
    ("kv_fig2_external_fraction", "KV external frag. & others (vLLM Fig. 2)"),
    ("preemptions", "preemptions"), ("num_finished", "finished"), ("num_unfinished", "unfinished"),
    ("num_rejected", "rejected"), ("max_num_waiting", "largest queue (requests)"),
    ("num_requests_clipped", "clipped to max_model_len"), ("mbu", "memory-bandwidth utilization"), ("mfu", "FLOP utilization"),
    ("prefix_cache_hit_rate_tokens", "prefix-cache hit rate (tokens)"),
    ("kv_shared_bytes_mean", "KV bytes saved by sharing (mean)"),
    ("kv_window_freed_blocks", "KV blocks freed by the sliding window"),
    ("draft_acceptance_rate", "drafted tokens accepted"), ("swapped_bytes", "swapped bytes"),
]

# The steady-state window (run.warmup_s / run.cooldown_s): shown only when a result has one, each row beside
# its whole-run counterpart, and every row of both labelled with which it is.
WINDOW_ROWS = [
    ("window_offered_rps", "offered_rps", "offered load (req/s)"),
    ("window_throughput_rps", "throughput_rps", "throughput, completions in window (req/s)"),
    ("window_output_tokens_per_s", "output_tokens_per_s", "output tokens/s"),
    ("window_ttft_s_p50", "ttft_s_p50", "TTFT p50 (s)"), ("window_ttft_s_p90", "ttft_s_p90", "TTFT p90 (s)"),
    ("window_ttft_s_p99", "ttft_s_p99", "TTFT p99 (s)"),
    ("window_tpot_s_p50", "tpot_s_p50", "TPOT p50 (s)"), ("window_tpot_s_p90", "tpot_s_p90", "TPOT p90 (s)"),
    ("window_tpot_s_p99", "tpot_s_p99", "TPOT p99 (s)"),
    ("window_e2e_s_p50", "e2e_s_p50", "E2E p50 (s)"), ("window_e2e_s_p90", "e2e_s_p90", "E2E p90 (s)"),
    ("window_e2e_s_p99", "e2e_s_p99", "E2E p99 (s)"),
    ("window_queueing_s_mean", "queueing_s_mean", "queueing mean (s)"),
    ("window_num_arrived", "num_finished", "arrived"),
]
WHOLE_RUN, IN_WINDOW = "whole run: ", "window: "


# Disaggregated prefill/decode (hardware.disaggregation): shown only when a result has it; a colocated
# result beside it shows "-" there.
DISAGGREGATION_ROWS = [
    ("num_gpus", "disaggregated: GPUs in both pools"),
    ("num_prefill_replicas", "disaggregated: prefill replicas"), ("num_decode_replicas", "disaggregated: decode replicas"),
    ("prefill_busy_fraction", "prefill pool busy share"), ("decode_busy_fraction", "decode pool busy share"),
    ("prefill_queueing_s_mean", "wait before prefill mean (s)"),
    ("decode_wait_s_mean", "wait for decode blocks mean (s)"), ("decode_wait_s_p90", "wait for decode blocks p90 (s)"),
    ("transfer_s_mean", "KV transfer mean (s)"), ("transfer_s_p90", "KV transfer p90 (s)"),
    ("num_waited_for_decode_blocks", "requests that waited for decode blocks"),
]


def summary_rows(results) -> list[tuple[str, str]]:
    """(key, label) rows for these results: SUMMARY_ROWS, and when any result has a steady-state window,
    its rows inserted after their whole-run counterparts, each side labelled "whole run:" or "window:";
    DISAGGREGATION_ROWS last when any result is disaggregated."""
    extra = DISAGGREGATION_ROWS if any("num_prefill_replicas" in r.summary for r in results) else []
    return _window_rows(results) + extra


def _window_rows(results) -> list[tuple[str, str]]:
    if not any("window_start_s" in r.summary for r in results):
        return SUMMARY_ROWS
    after: dict[str, list[tuple[str, str]]] = {}
    for key, beside, label in WINDOW_ROWS:
        after.setdefault(beside, []).append((key, IN_WINDOW + label))
    rows = [("window_start_s", "window start (s)"), ("window_end_s", "window end (s)")]
    for key, label in SUMMARY_ROWS:
        extra = after.get(key, [])
        rows.append((key, WHOLE_RUN + label if extra else label))
        rows.extend(extra)
    return rows


COST_MODEL_LABEL = "cost model"  # the row every summary table adds: which cost model priced the run


def cost_model_labels(results) -> list[str]:
    """Per result, which cost model priced it (Result.extras, set by sim.run.simulate); '-' where unknown."""
    return [str(r.extras.get("cost_model_label", "-")) for r in results]


PERCENT_KEYS = frozenset({"slo_fraction_ok"})  # fractions of requests: shown as percentages, not bare 0.6625


def format_metric(key: str, value) -> str:
    """A summary value as every view shows it: fractions of requests as percentages, the rest by format_value."""
    if key in PERCENT_KEYS and isinstance(value, (float, int, np.floating)) and not isinstance(value, bool):
        return "-" if math.isnan(value) else f"{float(value) * 100:.4g}%"
    return format_value(value)


def format_value(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value)


def _binned(steps, column: str, edges: np.ndarray) -> np.ndarray:
    """Duration-weighted mean of a step column in each time bin."""
    mid = (steps["start_s"] + steps["end_s"]).to_numpy() / 2
    dur = steps["duration_s"].to_numpy()
    vals = steps[column].to_numpy(dtype=float)
    num, _ = np.histogram(mid, edges, weights=vals * dur)
    den, _ = np.histogram(mid, edges, weights=dur)
    with np.errstate(invalid="ignore"):
        return num / den


def _cdf(values: np.ndarray, max_points: int = 400) -> tuple[np.ndarray, np.ndarray]:
    values = np.sort(values[~np.isnan(values)])
    if not len(values):
        return values, values
    idx = np.unique(np.linspace(0, len(values) - 1, min(max_points, len(values))).astype(int))
    return values[idx], (idx + 1) / len(values)


def figures(results: list[Result]) -> list[tuple[str, go.Figure]]:
    figs = []
    lat = make_subplots(rows=1, cols=3, subplot_titles=("TTFT (s)", "TPOT (s)", "end-to-end latency (s)"))
    for i, r in enumerate(results):
        fin = r.requests[r.requests["finished"]]
        for col, metric in enumerate(("ttft_s", "tpot_s", "e2e_s"), start=1):
            x, y = _cdf(fin[metric].to_numpy(dtype=float))
            lat.add_trace(go.Scatter(x=x, y=y, name=r.name, legendgroup=r.name, showlegend=col == 1,
                                     line=dict(color=COLORS[i % len(COLORS)])), row=1, col=col)
    lat.update_yaxes(title_text="fraction of requests", row=1, col=1)
    lat.update_layout(title="Latency CDFs", height=380)
    figs.append(("latency", lat))

    end = max(float(r.steps["end_s"].max()) if len(r.steps) else 1.0 for r in results)
    edges = np.linspace(0, max(end, 1e-9), _NUM_BINS + 1)
    centers = (edges[:-1] + edges[1:]) / 2
    width = edges[1] - edges[0]
    ts = make_subplots(rows=3, cols=1, shared_xaxes=True,
                       subplot_titles=("throughput (output tokens/s)", "queue length (waiting requests)",
                                       "batch size (sequences per step)"))
    for i, r in enumerate(results):
        color = COLORS[i % len(COLORS)]
        st = r.steps
        if not len(st):
            continue
        tokens, _ = np.histogram(st["end_s"].to_numpy(), edges, weights=st["num_output_tokens"].to_numpy())
        ts.add_trace(go.Scatter(x=centers, y=tokens / width, name=r.name, legendgroup=r.name,
                                line=dict(color=color)), row=1, col=1)
        ts.add_trace(go.Scatter(x=centers, y=_binned(st, "num_waiting", edges), name=r.name,
                                legendgroup=r.name, showlegend=False, line=dict(color=color)), row=2, col=1)
        ts.add_trace(go.Scatter(x=centers, y=_binned(st, "num_seqs", edges), name=r.name,
                                legendgroup=r.name, showlegend=False, line=dict(color=color)), row=3, col=1)
    ts.update_xaxes(title_text="simulated time (s)", row=3, col=1)
    ts.update_layout(title="Over time", height=700)
    figs.append(("timeseries", ts))

    kv = make_subplots(rows=len(results), cols=1, shared_xaxes=True, subplot_titles=[r.name for r in results])
    for i, r in enumerate(results, start=1):
        st = r.steps
        if not len(st):
            continue
        cap = float(st["kv_capacity_slots"].iloc[0])
        for column, label, color in _KV_PARTS:
            kv.add_trace(go.Scatter(x=centers, y=_binned(st, column, edges) / cap, name=label, legendgroup=label,
                                    showlegend=i == 1, stackgroup=f"kv{i}", line=dict(width=0.5, color=color)),
                         row=i, col=1)
        kv.update_yaxes(title_text="share of KV memory", range=[0, 1], row=i, col=1)
    kv.update_layout(title="KV-cache memory split over time", height=max(300, 220 * len(results)))
    figs.append(("kv", kv))
    split = [(i, r) for i, r in enumerate(results) if "transfer_s" in r.requests.columns]
    if split:
        figs.append(("disaggregation", _disaggregation_figure(split)))
    return figs


def _disaggregation_figure(split: list[tuple[int, Result]]) -> go.Figure:
    """Disaggregated results: CDFs of the waits between the pools, over the finished requests that moved KV."""
    phases = (("queueing_s", "wait before prefill (s)"), ("decode_wait_s", "wait for decode blocks (s)"),
              ("transfer_s", "KV transfer (s)"))
    fig = make_subplots(rows=1, cols=3, subplot_titles=[label for _, label in phases])
    for i, r in split:
        fin = r.requests[r.requests["finished"]]
        for col, (metric, _) in enumerate(phases, start=1):
            x, y = _cdf(fin[metric].to_numpy(dtype=float))
            fig.add_trace(go.Scatter(x=x, y=y, name=r.name, legendgroup=r.name, showlegend=col == 1,
                                     line={"color": COLORS[i % len(COLORS)]}), row=1, col=col)
    fig.update_yaxes(title_text="fraction of requests", row=1, col=1)
    fig.update_layout(title="Disaggregated prefill/decode: waits between the pools", height=380)
    return fig


def summary_table_html(results: list[Result]) -> str:
    head = "".join(f"<th>{html.escape(r.name)}</th>" for r in results)
    rows = []
    for key, label in summary_rows(results):
        cells = "".join(f"<td>{format_metric(key, r.summary.get(key))}</td>" for r in results)
        rows.append(f"<tr><th>{html.escape(label)}</th>{cells}</tr>")
    cells = "".join(f"<td>{html.escape(label)}</td>" for label in cost_model_labels(results))
    rows.append(f"<tr><th>{COST_MODEL_LABEL}</th>{cells}</tr>")
    return f'<table class="summary"><tr><th>metric</th>{head}</tr>{"".join(rows)}</table>'


def render_report(results: list[Result], title: str, scenario_yaml: str = "") -> str:
    parts = []
    for n, (name, fig) in enumerate(figures(results)):
        # A fixed div id (plotly draws a random one): the same run writes the same bytes.
        parts.append(f'<section id="{name}">' + fig.to_html(full_html=False, include_plotlyjs=(n == 0),
                                                               div_id=f"plot-{name}") + "</section>")
    from sim import __version__
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><meta name="generator" content="servesim"><title>{html.escape(title)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;}} table.summary{{border-collapse:collapse}}
table.summary td,table.summary th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}
pre{{background:#f6f6f6;padding:1em;overflow:auto}}</style></head>
<body><h1>{html.escape(title)}</h1>
<p>ServeSim {__version__}. Each column is one variant run on the same generated workload.</p>
<section id="summary"><h2>Summary</h2>{summary_table_html(results)}</section>
{''.join(parts)}
<section id="scenario"><h2>Scenario</h2><pre>{html.escape(scenario_yaml)}</pre></section>
</body></html>"""
