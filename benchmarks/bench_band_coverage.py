"""How often a 90% step-time band holds the measured step, on GPU tables held out of the residuals (issue 31).

A band's step-time source perturbs every priced step by exp(bias + sigma_kind × z) (sim/cost/draws.py), the sigmas
from calibrate/residuals.json. Per step, the 90% band of that draw is priced × exp(±1.6449 × sqrt(bias_sigma² +
sigma_kind²)). This holds each GPU table out in turn: the sigmas are pooled from every OTHER table
(calibrate/residuals.py's `table_errors`, the same errors the shipped file pools), and the held-out table's rows are
checked against the band. Reported per cost model: the fraction of held-out steps inside (goal: 80-95% for a 90%
band), the median half-width of the band (relative to the priced step), and the same for the per-step noise alone
and the bias alone, to show why the band draws both (noise alone is the too-narrow band of issue 31).

For a whole-step profile the held-out tables are the other machine's (../shared/gpu): its own table's rows are
fitted, and their leave-one-out errors are the noise, pooled from every profile.

    .venv/bin/python benchmarks/bench_band_coverage.py [--shared ../shared/gpu]

This checks the step-time draw itself; a whole run's band against measured runs (the published suite's held-out
runs) is benchmarks/bench_band_published.py.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from calibrate.fidelity.machine import cpuinfo  # noqa: E402
from calibrate.residuals import pooled, table_errors  # noqa: E402

Z90 = 1.6448536269514722  # the standard normal's 95th percentile: a central 90% band


def coverage(tables: list[tuple]) -> dict:
    """Hold each table that carries a bias out in turn; pool the rest; check its rows. Per variant of the draw
    (both, noise only, bias only): (inside, steps, half-widths %)."""
    out = {name: {"inside": 0, "steps": 0, "half": [], "tables": []} for name in ("both", "noise", "bias")}
    for i, (label, e, prefill, is_bias, _) in enumerate(tables):
        if not is_bias:
            continue
        rest = pooled([t for j, t in enumerate(tables) if j != i]).summary("", [])
        b, sp, sd = rest["bias_sigma"], rest["sigma_prefill"], rest["sigma_decode"]
        sigma_noise = np.where(prefill, sp, sd)
        for name, sigma in (("both", np.sqrt(b ** 2 + sigma_noise ** 2)), ("noise", sigma_noise),
                            ("bias", np.full(len(e), b))):
            inside = np.abs(e) <= Z90 * sigma
            half = 100 * (np.exp(Z90 * sigma) - np.exp(-Z90 * sigma)) / 2
            out[name]["inside"] += int(inside.sum())
            out[name]["steps"] += len(e)
            out[name]["half"] += half.tolist()
            out[name]["tables"].append((label, float(inside.mean())))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "gpu")
    args = parser.parse_args()
    t0 = time.perf_counter()
    errors = table_errors(args.shared)
    errors.pop("_excluded")
    print(f"benchmark CPU: {cpuinfo()['cpu_model']}, {platform.python_implementation()} {platform.python_version()}; "
          f"tables measured on the H100/H200 named in calibrate/profiles/README.md and ../shared/gpu/README.md\n")
    print("| cost model | held-out tables | held-out steps | 90% band holds (bias + noise) | median half-width "
          "| noise alone: holds / half-width | bias alone: holds / half-width | worst table (bias + noise) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for kind, tables in errors.items():
        cov = coverage(tables)
        both, noise, bias = cov["both"], cov["noise"], cov["bias"]
        if not both["steps"]:
            continue
        worst = min(both["tables"], key=lambda t: t[1])

        def cell(c):
            return f"{100 * c['inside'] / c['steps']:.1f}% / {np.median(c['half']):.1f}%"
        print(f"| {kind} | {len(both['tables'])} | {both['steps']} | **{100 * both['inside'] / both['steps']:.1f}%** | "
              f"{np.median(both['half']):.1f}% | {cell(noise)} | {cell(bias)} | {worst[0]}: {100 * worst[1]:.0f}% |")
    print(f"\n(wall time {time.perf_counter() - t0:.1f} s; half-width: half the band's width over the priced step)")


if __name__ == "__main__":
    main()
