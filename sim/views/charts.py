"""What keeps every chart readable and every page light, whatever the spread of the variants (issue 32).

- One colour per variant on every chart of a page (`color_map`): the report's, the dashboard's and the plan
  report's; the KV-memory parts are drawn in greys so no colour means two things.
- Latency axes go logarithmic when the variants' plotted values span more than `LOG_SPAN` (a decade):
  `axis_type(values)`.
- Time series are small multiples: one row per variant, each over its own makespan (`time_bins`), so a slow
  variant no longer squeezes the others into the first few per cent of a shared axis.
- Downsampling: a CDF is drawn through `CDF_POINTS` quantiles (`cdf_points`), a time series through at most
  `TIME_BINS` time buckets per variant (`bucket_max` keeps a queue's peaks, `bucket_mean` weights by step
  duration); every array goes to the page as float32 (plotly writes it as base64).
- Plotly once per page: `plotly_script()` is the minified *basic* plotly.js bundle (scatter, bar, pie: all
  these pages draw), vendored from npm's plotly.js-basic-dist-min at the version the plotly package ships,
  inlined once in the page's head; every figure is then written without a bundle of its own (`figure_html`).
  With the full 4.8 MB bundle the quickstart report weighed 5.2 MB; the budget (`PAGE_BUDGET_BYTES`) is
  1.5 MB.
"""

from __future__ import annotations

import html
import math
from functools import lru_cache
from pathlib import Path

import numpy as np
import plotly.graph_objects as go

# One colour per variant, in order, on every chart (report, dashboard, plan report).
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
LOG_SPAN = 10.0  # a latency axis whose values span more than this factor is drawn logarithmic
CDF_POINTS = 240  # quantiles per CDF
TIME_BINS = 300  # time buckets per variant's time series
PAGE_BUDGET_BYTES = 1_500_000  # the quickstart report's budget (tests/integration/test_report_page.py)
PLOTLY_BUNDLE = Path(__file__).with_name("assets") / "plotly-basic.min.js"

# A plain template: plotly's default one writes ~7 kB of settings for trace types these pages never draw
# into every figure.
TEMPLATE = go.layout.Template(layout=dict(
    colorway=COLORS, font=dict(family="system-ui, sans-serif", size=12, color="#2a3f5f"), paper_bgcolor="white",
    plot_bgcolor="#f4f6fa", hovermode="closest",
    xaxis=dict(gridcolor="white", zerolinecolor="white", linecolor="#ccc", automargin=True),
    yaxis=dict(gridcolor="white", zerolinecolor="white", linecolor="#ccc", automargin=True),
    margin=dict(l=60, r=30, t=90, b=50)))


def color_map(names) -> dict[str, str]:
    """Variant name -> its colour, by position: the same variant has the same colour on every chart."""
    return {name: COLORS[i % len(COLORS)] for i, name in enumerate(names)}


def axis_type(arrays, span: float = LOG_SPAN) -> str:
    """"log" when the positive values of these arrays (one per variant) span more than `span`, else "linear"."""
    lo, hi = math.inf, 0.0
    for a in arrays:
        a = np.asarray(a, dtype=float)
        a = a[np.isfinite(a) & (a > 0)]
        if len(a):
            lo, hi = min(lo, float(a.min())), max(hi, float(a.max()))
    return "log" if hi > 0 and lo < math.inf and hi / lo > span else "linear"


def cdf_points(values, num: int = CDF_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of an empirical CDF through `num` quantiles, denser in the tail: (value at p, p). The minimum and
    the maximum are always in."""
    values = np.asarray(values, dtype=float)
    values = np.sort(values[~np.isnan(values)])
    if not len(values):
        return values.astype(np.float32), values.astype(np.float32)
    if len(values) <= num:
        return values.astype(np.float32), (np.arange(1, len(values) + 1) / len(values)).astype(np.float32)
    body = np.linspace(0.0, 0.95, num * 2 // 3, endpoint=False)
    tail = 1 - np.geomspace(0.05, 0.5 / len(values), num - len(body))  # 0.95 .. ~1, log-spaced
    p = np.unique(np.concatenate([body, tail, [1.0]]))
    x = np.quantile(values, p, method="inverted_cdf")
    return x.astype(np.float32), np.maximum(p, 1 / len(values)).astype(np.float32)


def time_bins(end_s: float, num: int = TIME_BINS) -> np.ndarray:
    """`num` equal buckets over [0, end_s] (one variant's own makespan)."""
    return np.linspace(0.0, max(float(end_s), 1e-9), num + 1)


def bucket_sum(t: np.ndarray, weights: np.ndarray, edges: np.ndarray) -> np.ndarray:
    out, _ = np.histogram(t, edges, weights=weights)
    return out


def bucket_mean(t: np.ndarray, values: np.ndarray, durations: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Duration-weighted mean per bucket; a bucket no step starts in keeps the previous value (a long step
    holds its state)."""
    num, _ = np.histogram(t, edges, weights=values * durations)
    den, _ = np.histogram(t, edges, weights=durations)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = num / den
    return _forward_fill(out)


def bucket_max(t: np.ndarray, values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Largest value per bucket (a queue's peaks survive the downsampling); empty buckets hold the previous."""
    idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, len(edges) - 2)
    out = np.full(len(edges) - 1, -np.inf)
    np.maximum.at(out, idx, values.astype(float))
    out[np.isneginf(out)] = np.nan
    return _forward_fill(out)


def _forward_fill(a: np.ndarray) -> np.ndarray:
    ok = ~np.isnan(a)
    if not ok.any():
        return a
    idx = np.where(ok, np.arange(len(a)), 0)
    np.maximum.accumulate(idx, out=idx)
    out = a[idx]
    out[: np.argmax(ok)] = np.nan  # nothing before the first step
    return out


def f32(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float32)


@lru_cache(maxsize=1)
def plotly_script() -> str:
    """The plotly.js bundle to inline once per page, as a <script> element."""
    return f"<script>{PLOTLY_BUNDLE.read_text(encoding='utf-8')}</script>"


def figure_html(fig: go.Figure, div_id: str) -> str:
    """A figure's div and its Plotly.newPlot call, without a bundle (the page has `plotly_script` once)."""
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id,
                       config={"displaylogo": False, "responsive": True})


def colored(name: str, color: str) -> str:
    """A variant name for a subplot title, in its colour."""
    return f'<span style="color:{color}"><b>{html.escape(name)}</b></span>'
