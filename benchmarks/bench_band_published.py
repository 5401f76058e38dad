"""Does the 90% band hold the published measurement? (issue 31, item 4: coverage on whole measured runs)

For every held-out published run (benchmarks/published/, the held-out protocol of benchmarks/published_suite.py:
each engine version's CPU and front-end terms fitted on its FIT_RUNS only), the run is simulated with a band
(`run.band: 90`, replications: a published run is short) over each set of sources, and each quoted figure
(throughput, TTFT, TPOT/ITL: published_suite.measure, the same quantities the suite's error table compares) is
checked against its band. Printed per engine, per kind of cost model, and per cost model with its engine terms: how
many figures the band holds, and the median half-width (half the band over the point figure). Goal (issue 31): 80-95%
for each cost model.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_band_published.py [--engine vllm] [--sources step_time,engine_terms]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import published_suite as ps  # noqa: E402

SOURCE_SETS = {"step_time": ["step_time"], "step_time+engine_terms": ["step_time", "engine_terms"],
               "all but engine_model": ["workload", "step_time", "engine_terms"],
               "all": ["workload", "step_time", "engine_terms", "engine_model"]}


def band_of_case(case, fitted: dict, sources: list[str]):
    """(cost model label, {metric group: (measured, point, [lo, hi])}) of one held-out case; None: not simulated."""
    from sim.bands import band_runs
    from sim.config.files import validate_scenario
    from sim.errors import ConfigError
    try:
        raw = ps.scenario(case, ps.COST_MODELS[ps.DEFAULT_COST_MODEL], fitted)
        raw["run"].update({"band": 90, "band_sources": sources, "band_method": "replications"})
        spec = validate_scenario(raw)
    except (ps.NotSimulated, ConfigError):
        return None

    def figures(result) -> dict:
        got = ps.measure(result, case.workload.requests)
        return {m.group: got[m.sim] for m in case.metrics}
    try:
        band, values, point, _ = band_runs(spec, figures=figures, point=(
            spec.model_copy(update={"run": spec.run.model_copy(update={"band": None})}), None, None))
    except ConfigError:
        return None
    point_figures = figures(point)
    out = {m.group: (m.measured, point_figures[m.group], band[m.group]) for m in case.metrics
           if band.get(m.group) is not None}
    return point.extras.get("cost_model_label", ""), out


LATER_GROUPS = ("tpot_median", "peak")  # metric groups the suite compares since 12-01: out of the default table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", choices=["vllm", "sglang", "trtllm", "lmdeploy"])
    ap.add_argument("--sources", default="all", choices=list(SOURCE_SETS))
    ap.add_argument("--all-groups", action="store_true", help="also the median TPOT and the peak output rate (compared "
                    "since 12-01; left out by default, so that coverage stays comparable with the history's)")
    args = ap.parse_args(argv)
    suite = ps.load_suite()
    cases = ps.select(suite.cases, engine=args.engine)
    t0 = time.perf_counter()
    _, fitted = ps.run_suite([c for c in cases if ps.role(c) == "fit"], fit_pool=suite.cases)
    held = [c for c in cases if ps.role(c) == "held-out"]
    rows = []
    for case in held:
        got = band_of_case(case, fitted.get(case.key, {}), SOURCE_SETS[args.sources])
        if got is None:
            continue
        label, figures = got
        for group, (measured, point, (lo, hi)) in figures.items():
            if args.all_groups or group not in LATER_GROUPS:
                rows.append((case.engine.key, label, case.name, group, measured, point, lo, hi))
    print(f"{len(held)} held-out runs, {len(rows)} figures with a band, sources {SOURCE_SETS[args.sources]}, "
          f"{time.perf_counter() - t0:.0f} s")
    print("\n| engine / cost model | figures | band holds | median half-width | measured below / above |")
    print("| --- | ---: | ---: | ---: | ---: |")
    groups = defaultdict(list)
    for row in rows:
        groups[("engine", row[0])].append(row)
    for row in rows:  # the kind of cost model (roofline, learned roofline, measured, calibrated: the label's start)
        groups[("cost model kind", row[1].split(" + ")[0].split(" (")[0])].append(row)
    for row in rows:  # each cost model with the engine terms it ran with: one or a few runs each
        groups[("cost model", row[1])].append(row)
    groups[("all", "")] = rows
    for (kind, name), members in groups.items():
        holds = sum(lo <= m <= hi for *_, m, _, lo, hi in members)
        below = sum(m < lo for *_, m, _, lo, hi in members)
        half = statistics.median((hi - lo) / 2 / abs(p) for *_, p, lo, hi in members if p)
        print(f"| {kind}: {name} | {len(members)} | {holds / len(members):.0%} | {half:.0%} | {below} / "
              f"{len(members) - holds - below} |")
    print("\n| case | metric | measured | point | band | holds |")
    print("| --- | --- | ---: | ---: | --- | --- |")
    for engine, label, name, group, m, p, lo, hi in rows:
        print(f"| {name} | {group} | {m:.4g} | {p:.4g} | [{lo:.4g}, {hi:.4g}] | {'yes' if lo <= m <= hi else 'no'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
