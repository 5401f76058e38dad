"""The curves a report draws for one run, and their ribbon across a band's replications (issue 31).

A band's replications (`sim/bands.py`) keep their headline figures and, from here, a few hundred floats each of
the curves the report and the dashboard draw (`curves_of`): every latency CDF read at the fixed probabilities
`CDF_PROBS`, and the time series (`SERIES`) in `TIME_BINS` bins; never the records. `ribbon` takes the k-th
smallest and the k-th largest of the replications point by point: the band's rule for a headline figure
(`sim.bands.edges`), applied to each point of a curve. It cannot call `edges` (sim/bands.py calls this module,
and imports point down), so `pointwise_edges` is the same rule over arrays, checked point by point against
`edges` (tests/unit/test_band_curves.py); `edges` could call it with one column.

**The grids are defined here once.** The report's point curves (`sim/views/charts.py: cdf_points`,
`sim/views/report.py`) read the same probabilities, the same bins and the same series functions, so a ribbon's
point i and the run's curve at point i are one figure computed the same way.

**Time bins: each run over its own makespan.** Bin i of a run is the i-th 1/TIME_BINS of [0, its makespan], for
the point run and for every replication alike. That is the rule the report's time series already follow (each
variant over its own makespan), so bin i is one figure defined the same way in every replication, and the band's
order statistics hold for it as for a headline figure; the ribbon is drawn at the point run's bin centres. It
needs nothing the replications do not have: they run before or beside the point run (a band that cannot be drawn
is refused first) and keep no records, so the point run's clock is not known when a replication's curves are taken, and a
fixed bin width would give each replication a different number of bins. What it gives up: where the
replications' makespans differ (a slower draw drains later), bin i is the same share of each run, not the same
clock time; each curve keeps its makespan (`makespan_s`) so a view can say how far apart they are.

Below sim/bands.py (which calls `curves_of` once per replication) and sim/views (which draws `ribbon`): it reads
a Result's columns and imports neither plotting nor Streamlit.
"""

from __future__ import annotations

import numpy as np

from sim.config.band_level import order_index

CDF_POINTS = 240  # probabilities per CDF (and quantiles per drawn curve)
CDF_TAIL = 1e-4  # the densest tail point is p = 1 - CDF_TAIL (then the maximum, p = 1)
TIME_BINS = 300  # time bins per run's time series


def cdf_probabilities(num: int = CDF_POINTS, tail: float = CDF_TAIL) -> np.ndarray:
    """The probabilities a CDF is read at: two thirds evenly over [0, 0.95), the rest log-spaced from 0.95 up to
    1 - `tail`, then 1 (the maximum); 0 is the minimum. Fixed, whatever the number of values, so every run's
    curve is read at the same points."""
    body = np.linspace(0.0, 0.95, num * 2 // 3, endpoint=False)
    upper = 1 - np.geomspace(0.05, tail, num - len(body))
    return np.unique(np.concatenate([body, upper, [1.0]]))


CDF_PROBS = cdf_probabilities()  # the one grid: the drawn curves and every replication's


def cdf_quantiles(values, probs: np.ndarray = CDF_PROBS) -> np.ndarray:
    """The values at `probs` (the empirical CDF's inverse: the smallest value whose share reaches p), NaN
    ignored; all NaN when there is no value."""
    values = np.asarray(values, dtype=float)
    values = values[~np.isnan(values)]
    if not len(values):
        return np.full(len(probs), np.nan)
    return np.quantile(values, probs, method="inverted_cdf")


# --- the time series -----------------------------------------------------------------------------------------

SERIES = ("output tokens/s", "waiting requests (peak)", "sequences per step (mean)")


def time_bins(end_s: float, num: int = TIME_BINS) -> np.ndarray:
    """`num` equal buckets over [0, end_s] (one run's own makespan)."""
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


def makespan(result) -> float:
    """When a run's last step or request ended (1.0 for a run with neither)."""
    ends = [float(result.steps["end_s"].max())] if len(result.steps) else []
    finish = np.asarray(result.request_column("finish_s"), dtype=float)
    finish = finish[np.isfinite(finish)]
    if len(finish):
        ends.append(float(finish.max()))
    return max(ends) if ends else 1.0


def time_series(result, edges: np.ndarray) -> dict[str, np.ndarray]:
    """SERIES of a run in the buckets `edges`: output tokens/s (tokens of the steps ending in a bucket over its
    width), the waiting queue's peak, the duration-weighted mean batch; {} for a run with no step."""
    st = result.steps
    if not len(st):
        return {}
    start, end = st["start_s"].to_numpy(dtype=float), st["end_s"].to_numpy(dtype=float)
    t, dur = (start + end) / 2, st["duration_s"].to_numpy(dtype=float)
    tokens = bucket_sum(end, st["num_output_tokens"].to_numpy(dtype=float), edges) / (edges[1] - edges[0])
    queue = bucket_max(t, st["num_waiting"].to_numpy(dtype=float), edges)
    batch = bucket_mean(t, st["num_seqs"].to_numpy(dtype=float), dur, edges)
    return dict(zip(SERIES, (tokens, queue, batch)))


# --- the latency CDFs ----------------------------------------------------------------------------------------

CDF_METRICS = ("ttft_s", "tpot_s", "e2e_s")  # the report's latency CDFs
WAIT_METRICS = ("queueing_s", "decode_wait_s", "transfer_s")  # a disaggregated run's waits between the pools


def finished_values(result, metric: str) -> np.ndarray | None:
    """`metric` of the finished requests (what a CDF draws); None where the records have no such column."""
    try:
        values = np.asarray(result.request_column(metric), dtype=float)
    except KeyError:
        return None
    return values[np.asarray(result.request_column("finished"), dtype=bool)]


# --- one replication's curves, and the ribbon across them ----------------------------------------------------

def curves_of(result) -> dict:
    """One run's curves, small: {"makespan_s": float, "cdf": {metric: values at CDF_PROBS},
    "series": {SERIES name: TIME_BINS values over its own makespan}} (float32; NaN where a point has no
    value). What `sim.bands.replicate` keeps of each replication."""
    end = makespan(result)
    cdf = {}
    disaggregated = finished_values(result, "transfer_s") is not None
    for metric in CDF_METRICS + (WAIT_METRICS if disaggregated else ()):
        values = finished_values(result, metric)
        if values is not None:
            cdf[metric] = cdf_quantiles(values).astype(np.float32)
    series = {name: a.astype(np.float32) for name, a in time_series(result, time_bins(end)).items()}
    return {"makespan_s": end, "cdf": cdf, "series": series}


def pointwise_edges(arrays, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(k-th smallest, k-th largest) of R equal-length arrays, point by point: `sim.bands.edges`' rule at each
    point, NaN where a replication has no value there (as `edges` gives None)."""
    a = np.vstack([np.asarray(x, dtype=float) for x in arrays])
    R = a.shape[0]
    if not 1 <= k <= (R + 1) // 2:
        raise ValueError(f"k = {k} with {R} curves; allowed: 1 <= k <= {(R + 1) // 2}")
    ordered = np.sort(a, axis=0)
    lo, hi = ordered[k - 1].copy(), ordered[R - k].copy()
    missing = np.isnan(a).any(axis=0)
    lo[missing] = hi[missing] = np.nan
    return lo, hi


def ribbon(curves_list: list[dict], k: int) -> dict:
    """The pointwise band of any list of curves (R replications, or two edge runs with k = 1: their min and max):
    {"replications": R, "k": k, "makespan_s": (lo, hi), "cdf": {metric: (lo, hi)}, "series": {name: (lo, hi)}},
    each edge an array; a curve some run lacks is left out."""
    out = {"replications": len(curves_list), "k": k,
           "makespan_s": tuple(float(e[0]) for e in pointwise_edges([[c["makespan_s"]] for c in curves_list], k))}
    for part in ("cdf", "series"):
        names = [n for n in curves_list[0][part] if all(n in c[part] for c in curves_list)]
        out[part] = {n: pointwise_edges([c[part][n] for c in curves_list], k) for n in names}
    return out


def band_order(result) -> int:
    """k of a banded result's ribbon: the band's own, `order_index` of its level and its R replications; 1 for
    a band drawn from two edge runs (`run.band_method: edges`: their min and max)."""
    band = result.summary["band"]
    if band.get("method") == "edges":
        return 1
    return order_index(round(band["level"] * 100, 9), len(result.extras["band_curves"]))


def ribbon_of(result) -> dict | None:
    """The ribbon of a result run with a band (`result.extras["band_curves"]`, set by
    `sim.bands.simulate_with_band`), with its "label" ("90% band"); None without one."""
    curves = (getattr(result, "extras", None) or {}).get("band_curves")
    band = (result.summary or {}).get("band")
    if not curves or not band:
        return None
    out = ribbon(curves, band_order(result))
    out["label"] = band_label(band)
    return out


def band_label(band: dict) -> str:
    """How a chart names a band (`summary["band"]`): "90% band"."""
    return f"{round(band['level'] * 100, 6):g}% band"


__all__ = ["CDF_METRICS", "CDF_POINTS", "CDF_PROBS", "CDF_TAIL", "SERIES", "TIME_BINS", "WAIT_METRICS",
           "band_label", "band_order", "bucket_max", "bucket_mean", "bucket_sum", "cdf_probabilities", "cdf_quantiles",
           "curves_of", "finished_values", "makespan", "pointwise_edges", "ribbon", "ribbon_of", "time_bins", "time_series"]
