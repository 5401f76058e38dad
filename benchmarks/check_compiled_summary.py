"""Is the fast mode's summary the exact mode's, at bench_engine's scale? (issue 15's 1M goal asks for both.)

For each count: the compiled core with decode runs (the fast mode, bench_engine's default), the compiled core
step by step (`run.fast_decode: false`), and, up to --python-max requests, the SimPy engine step by step
(the reference). Prints, per pair, how many summary keys are identical and the largest relative difference of
the others (only `sim.results.REASSOCIATED_SUM_KEYS`, float sums taken in another order, may differ), plus
wall times. Run:
    .venv/bin/python benchmarks/check_compiled_summary.py [--python-max N] [counts...]
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_engine import scenario  # noqa: E402

from sim.results import REASSOCIATED_SUM_KEYS  # noqa: E402
from sim.run import make_workload, simulate  # noqa: E402


def compare(want: dict, got: dict) -> tuple[int, int, float, list[str]]:
    """(identical keys, differing keys, largest relative difference, differing keys outside REASSOCIATED)."""
    same = differ = 0
    worst = 0.0
    unexpected = []
    for key, a in want.items():
        b = got[key]
        if a == b or (isinstance(a, float) and math.isnan(a) and isinstance(b, float) and math.isnan(b)):
            same += 1
            continue
        differ += 1
        if key not in REASSOCIATED_SUM_KEYS:
            unexpected.append(key)
        elif isinstance(a, float):
            worst = max(worst, abs(b - a) / max(abs(a), 1e-300))
    return same, differ, worst, unexpected


def main(counts: list[int], python_max: int) -> None:
    for n in counts:
        runs = {}
        for label, fast, compiled in (("compiled fast", True, True), ("compiled exact", False, True),
                                      ("python exact", False, False)):
            if not compiled and n > python_max:
                continue
            sc = scenario(n, fast, "roofline", compiled)
            workload = make_workload(sc)
            t0 = time.perf_counter()
            result = simulate(sc, workload)
            runs[label] = result
            print(f"{n:,} {label}: {time.perf_counter() - t0:.1f} s ({result.extras['engine_core']})", flush=True)
        reference = runs.get("python exact", runs["compiled exact"])
        for label, result in runs.items():
            if result is reference:
                continue
            same, differ, worst, unexpected = compare(reference.summary, result.summary)
            ref = "python exact" if "python exact" in runs else "compiled exact"
            print(f"  {label} vs {ref}: {same} keys identical, {differ} differ (largest relative difference "
                  f"{worst:.1e}){'; NOT reassociated sums: ' + ', '.join(unexpected) if unexpected else ''}")


if __name__ == "__main__":
    args = sys.argv[1:]
    python_max = 100_000
    if "--python-max" in args:
        i = args.index("--python-max")
        python_max = int(args[i + 1])
        del args[i:i + 2]
    main([int(x) for x in args] or [100_000, 1_000_000], python_max)
