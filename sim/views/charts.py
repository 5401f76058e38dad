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
- Bands (issue 31): a banded run's curves get a ribbon behind them (`ribbon_traces`, its variant's colour at
  `BAND_ALPHA`; one legend entry, `band_legend`), its bars error bars (`error_bars`); the ribbon's points are
  computed in `sim/band_curves.py`, on the same grids as the curves.
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

from sim.band_curves import (  # noqa: F401  (the grids and the bucket functions, defined once there; re-exported)
    CDF_POINTS,
    CDF_PROBS,
    TIME_BINS,
    bucket_max,
    bucket_mean,
    bucket_sum,
    cdf_probabilities,
    cdf_quantiles,
    time_bins,
)

# One colour per variant, in order, on every chart (report, dashboard, plan report).
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
LOG_SPAN = 10.0  # a latency axis whose values span more than this factor is drawn logarithmic
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
    """(x, y) of an empirical CDF: every value when there are at most `num`, else the values at the one
    probability grid (`sim.band_curves.CDF_PROBS`, denser in the tail; a band's ribbon is read at the same
    points): (value at p, p). The minimum and the maximum are always in."""
    values = np.asarray(values, dtype=float)
    values = np.sort(values[~np.isnan(values)])
    if not len(values):
        return values.astype(np.float32), values.astype(np.float32)
    if len(values) <= num:
        return values.astype(np.float32), (np.arange(1, len(values) + 1) / len(values)).astype(np.float32)
    p = CDF_PROBS if num == CDF_POINTS else cdf_probabilities(num)
    x = cdf_quantiles(values, p)
    return x.astype(np.float32), np.maximum(p, 1 / len(values)).astype(np.float32)


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


# --- bands (issue 31): ribbons behind curves, error bars on bars ----------------------------------------------

BAND_ALPHA = 0.2  # a ribbon's fill: its variant's colour at this opacity


def translucent(color: str, alpha: float = BAND_ALPHA) -> str:
    """"#rrggbb" as "rgba(r,g,b,alpha)"."""
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha:g})"


def ribbon_traces(at, lo, hi, color: str, *, label: str, name: str, across: str = "y",
                  hover: str = "%{y:.4g}") -> list[go.Scatter]:
    """The two traces of a band's ribbon, to add in this order, one after the other on one panel and before the
    curves they sit behind: the lower edge, then the upper edge filled to it (plotly's "tonexty").
    `across="y"`: the edges are y values at the x positions `at` (a time series); `across="x"`: x values at the
    y positions `at` (a CDF, p on y). Both edges hover with their value (`hover`, a plotly template). In the
    legend group `label` ("90% band"), shown once by `band_legend`. The one ribbon drawing: the report's figures
    use it, and the dashboard draws the report's figures."""
    at = f32(at)
    out = []
    for edge, values in (("lower", lo), ("upper", hi)):
        xy = {"x": at, "y": f32(values)} if across == "y" else {"x": f32(values), "y": at}
        out.append(go.Scatter(
            **xy, mode="lines", line=dict(width=0, color=color), name=label, legendgroup=label, showlegend=False,
            fill="tonexty" if edge == "upper" else "none", fillcolor=translucent(color),
            hovertemplate=f"{edge} edge of the {html.escape(label)}: {hover}<extra>{html.escape(name)}</extra>"))
    return out


def band_legend(label: str) -> go.Scatter:
    """A legend entry for every ribbon of `label` (a grey swatch; clicking it hides them all)."""
    return go.Scatter(x=[None], y=[None], mode="lines", fill="toself", fillcolor=translucent("#555555", 0.3),
                      line=dict(width=0), name=label, legendgroup=label, showlegend=True, hoverinfo="skip")


def error_bars(points, bands) -> dict | None:
    """plotly `error_y` for bars at `points` with bands [lo, hi] (None where a bar has none): asymmetric, hi −
    point up and point − lo down, each at least 0 (a band need not contain its point: the hover gives the band's
    own edges). None when no bar has a band."""
    if all(b is None for b in bands):
        return None
    up = [max(0.0, b[1] - p) if b is not None and p is not None else None for p, b in zip(points, bands)]
    down = [max(0.0, p - b[0]) if b is not None and p is not None else None for p, b in zip(points, bands)]
    return dict(type="data", symmetric=False, array=up, arrayminus=down, color="#333333", thickness=1.5, width=6)
