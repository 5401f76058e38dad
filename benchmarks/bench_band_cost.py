"""What a band costs (issue 31, goal: a 100k- and a 1M-request run with a band within 2x of the run without).

On bench_engine.py's scenario (Llama-3.1-8B, one H100, roofline, compiled core), for N requests, the product's
two band methods (sim/bands.py, `run.band_method`) against the run without a band:

- **edges** (the default from 19,000 requests): two runs with the cost model's bias at its 5% and 95% quantiles
  (per-step noise on, the point's requests), widened by the workload's batch-means spread of the point run;
- **replications**: 19 whole runs, each drawing a workload seed and a step-time draw (bias + per-step noise).

Every run of a band goes to a thread of its own beside the point run (the compiled core releases the GIL), so
the wall-clock cost depends on the free cores: both wall and CPU seconds are printed, with the CPU count. The
widths of the edges band are printed beside the 19 replications' (the reference: its [min, max] of 19 covers
a new draw with probability 90% by construction; its own width is random, its expected range 3.69 bias sigmas
against the edges' 3.29, ratio 0.89).

    .venv/bin/python benchmarks/bench_band_cost.py 100000           # every method, widths compared
    .venv/bin/python benchmarks/bench_band_cost.py 1000000 --edges  # the run and the edges band only
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_engine import scenario  # noqa: E402
from sim.bands import simulate_with_band  # noqa: E402
from sim.run import make_cost_model, make_workload, simulate  # noqa: E402

METRICS = [f"{m}_{s}" for m in ("ttft_s", "tpot_s", "e2e_s") for s in ("mean", "p50", "p99")] + [
    "offered_rps", "throughput_rps"]


def _timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def _banded(sc, method: str):
    return sc.model_copy(update={"run": sc.run.model_copy(update={"band": 90.0, "band_method": method})})


def main(n: int, edges_only: bool) -> None:
    sc = scenario(n)
    simulate(scenario(1000))  # compiles (or loads) the core
    cm, workload = make_cost_model(sc), make_workload(sc)
    methods = ["edges"] if edges_only else ["edges", "replications"]
    rows, bands = [], {}
    point, wall, cpu = _timed(lambda: simulate(sc, workload, cost_model=cm))
    rows.append(("no band", wall, cpu))
    for method in methods:
        result, w, c = _timed(lambda: simulate_with_band(_banded(sc, method), workload, cost_model=cm))
        bands[method] = result.summary["band"]
        rows.append((method, w, c))
    print(f"{n:,} requests, roofline, compiled core, {os.cpu_count()} CPUs (os.cpu_count), "
          f"{len(os.sched_getaffinity(0))} usable:")
    print("| | wall s | cost (wall) | CPU s | cost (CPU) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, w, c in rows:
        print(f"| {name} | {w:.2f} | {w / rows[0][1]:.2f}x | {c:.2f} | {c / rows[0][2]:.2f}x |")
    if edges_only:
        return
    print()
    print("| figure | point | 19 replications | edges (width / 19's) |")
    print("| --- | ---: | --- | --- |")
    full, quick = bands["replications"], bands["edges"]
    for name in METRICS:
        lo, hi = full[name]
        a, b = quick[name]
        ratio = (b - a) / (hi - lo) if hi > lo else float("nan")
        print(f"| {name} | {point.summary[name]:.4g} | [{lo:.4g}, {hi:.4g}] | [{a:.4g}, {b:.4g}] ({ratio:.2f}) |")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(int(args[0]) if args else 100_000, "--edges" in sys.argv)
