"""What a band costs, and two cheaper designs measured against it (issue 31, goal: a band within 2x of the run).

On bench_engine.py's scenario (Llama-3.1-8B, one H100, roofline, compiled core), for N requests:

- **no band**: the run itself;
- **19 replications** (what `run.band: 90` does today, sim/bands.py `replicate`): 19 full runs, each another
  workload seed and a step-time draw (bias + per-step noise);
- **bias quantiles + batch means** (a prototype, not in the product): two full runs with the step-time bias at
  its two 90% quantiles (±1.645 bias_sigma, per-step noise on), widened by the workload's spread read off the
  point run's own requests (19 batches in arrival order, the spread of a batch figure / sqrt(19)). Exact for a
  figure monotone in the bias when the workload and per-step noise are small beside it (a long run);
- **2x: upper run, lower mirrored** (a prototype): one full run at +1.645 bias_sigma for the upper edge, the lower
  edge mirrored in log space (point² / upper): wider than the true lower edge for a figure whose log is convex
  in the bias (latencies under queueing), so conservative there; not checked against measured runs.

Each band's widths are printed beside the 19-replication band's (the reference: its [min, max] of 19 covers a
new draw with probability 90% by construction). Run pinned to one core after a warm-up:

    taskset -c 1 .venv/bin/python benchmarks/bench_band_cost.py 100000
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_engine import scenario  # noqa: E402
from sim.bands import replicate, step_time_sigmas  # noqa: E402
from sim.cost.draws import DRAW_BIAS, draw_pack  # noqa: E402
from sim.run import make_cost_model, simulate  # noqa: E402

Z90 = 1.6448536269514722  # the standard normal's 95% quantile: a two-sided 90% band
BATCHES = 19
METRICS = [f"{m}_{s}" for m in ("ttft_s", "tpot_s", "e2e_s") for s in ("mean", "p50", "p99")]


def _figure(frame, name: str) -> float:
    metric, stat = name.rsplit("_", 1)
    values = frame[metric].to_numpy(dtype=float)
    values = values[~np.isnan(values)]
    return float(values.mean()) if stat == "mean" else float(np.percentile(values, float(stat[1:])))


def _bias_run(sc, cost_model, bias: float, sigma_prefill: float, sigma_decode: float) -> dict:
    pack = draw_pack(12345, 0.0, sigma_prefill, sigma_decode)
    pack[DRAW_BIAS] = bias
    return simulate(sc, cost_model=cost_model, step_draws=pack, lean_summary=True).summary


def _workload_halfwidth(point) -> dict:
    frame = point.requests.sort_values("arrival_s")
    parts = np.array_split(np.arange(len(frame)), BATCHES)
    out = {}
    for name in METRICS:
        per = np.array([_figure(frame.iloc[idx], name) for idx in parts])
        out[name] = Z90 * per.std(ddof=1) / math.sqrt(BATCHES)
    return out


def main(n: int) -> None:
    sc = scenario(n)
    simulate(scenario(1000))  # compiles (or loads) the core
    cm = make_cost_model(sc)
    _, bias_sigma, sp, sd = step_time_sigmas(cm)
    t = time.perf_counter()
    point = simulate(sc, cost_model=cm)
    t_point = time.perf_counter() - t

    t = time.perf_counter()
    upper = _bias_run(sc, cm, Z90 * bias_sigma, sp, sd)
    t_upper = time.perf_counter() - t
    t = time.perf_counter()
    lower = _bias_run(sc, cm, -Z90 * bias_sigma, sp, sd)
    half = _workload_halfwidth(point)
    t_lower = time.perf_counter() - t

    banded = sc.model_copy(update={"run": sc.run.model_copy(update={"band": 90.0})})
    t = time.perf_counter()
    full, _ = replicate(banded, cost_model=cm)
    t_full = time.perf_counter() - t

    print(f"{n:,} requests, roofline, compiled core; cost as (run + band) / run:")
    print("| design | runs | seconds | cost |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| no band | 1 | {t_point:.2f} | 1.0x |")
    print(f"| 19 replications (today) | 20 | {t_point + t_full:.2f} | {(t_point + t_full) / t_point:.1f}x |")
    print(f"| bias quantiles + batch means | 3 | {t_point + t_upper + t_lower:.2f} | "
          f"{(t_point + t_upper + t_lower) / t_point:.2f}x |")
    print(f"| upper run, lower mirrored | 2 | {t_point + t_upper:.2f} | {(t_point + t_upper) / t_point:.2f}x |")
    print()
    print("| figure | point | 19 replications | bias quantiles + batch means (width / 19's) | upper run, lower "
          "mirrored (width / 19's) |")
    print("| --- | ---: | --- | --- | --- |")
    for name in METRICS:
        lo, hi = full[name]
        a, b = lower[name], upper[name]
        q_lo, q_hi = min(a, b) - half[name], max(a, b) + half[name]
        m_lo, m_hi = point.summary[name] ** 2 / upper[name], upper[name]
        print(f"| {name} | {point.summary[name]:.4g} | [{lo:.4g}, {hi:.4g}] | [{q_lo:.4g}, {q_hi:.4g}] "
              f"({(q_hi - q_lo) / (hi - lo):.2f}) | [{m_lo:.4g}, {m_hi:.4g}] ({(m_hi - m_lo) / (hi - lo):.2f}) |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
