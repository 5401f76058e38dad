"""Simulator speed: wall time to simulate 10k, 100k and 1M requests.

Continuous batching + paged KV, Llama-3.1-8B on one H100, ShareGPT-like lengths, Poisson arrivals at
about 80% of the sustainable rate (with the roofline). Run:
    .venv/bin/python benchmarks/bench_engine.py [--exact] [--python] [--cost-model KIND] [--engine NAME:VERSION]
        [--replicas N] [--lockstep] [counts...]
--cost-model: roofline (default), measured, calibrated (the shipped H100 whole-step profile), or learned.
--python: the SimPy engine even where the compiled core (sim/compiled, numba) could run it (run.compiled_core).
--engine: an engine preset (sim/config/engines/, e.g. sglang:0.5.3.post3): its scheduling rule, CPU terms and
front-end (the fitted latency, where its version has one), over the same workload and cost model.
--replicas: N replicas of it behind the least-outstanding router, at N times the rate.
--lockstep: those replicas step as one lockstep group's data-parallel ranks (hardware.lockstep's defaults: padded,
the idle check every 32 steps; sim/core/lockstep.py), in exact steps as the group runs them.
The compiled core's first call in a fresh checkout compiles it (~10 s, cached under __pycache__ after): one
warm-up run of 1,000 requests comes first and is not reported.
Prints one Markdown row per count (paste into benchmarks/RESULTS.md).
"""

from __future__ import annotations

import os
import platform
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibrate.fidelity.machine import cpuinfo  # noqa: E402
from sim.config.files import validate_scenario  # noqa: E402
from sim.run import make_workload, simulate  # noqa: E402

RATE_PER_S = 18.0  # ~80% of the ~22 req/s this configuration sustains (see scenarios/quickstart.yaml)


COST_MODELS = {"roofline": {"kind": "roofline"}, "measured": {"kind": "measured"},
               "calibrated": {"kind": "calibrated"}, "learned": {"kind": "roofline", "efficiencies": "learned"}}


def scenario(num_requests: int, fast_decode: bool = True, cost_model: str = "roofline", compiled: bool = True,
             engine: str | None = None, replicas: int = 1, lockstep: bool = False):
    raw = {
        "name": f"bench-{num_requests}",
        "model": "llama-3.1-8b",
        "hardware": {"gpu": "h100-sxm"} | ({"num_replicas": replicas, "router": "least_outstanding"} if replicas > 1
                                           else {}),
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": RATE_PER_S * replicas},
                     "lengths": {"kind": "preset", "name": "sharegpt"}},
        "scheduler": {"batching": "continuous", "max_num_seqs": 256, "max_model_len": 4096},
        "kv_cache": {"layout": "paged", "block_size": 16},
        "cost_model": COST_MODELS[cost_model],
        "run": {"seed": 0, "num_requests": num_requests, "fast_decode": fast_decode, "compiled_core": compiled},
    }
    if lockstep:
        raw["hardware"]["lockstep"] = {}
    if engine:  # the preset's values under the scenario's own: max_num_seqs 256 and block 16 stay as above
        name, _, version = engine.partition(":")
        raw["engine"] = {"name": name, "version": version}
    return validate_scenario(raw)


def peak_rss_mib() -> float:
    """The process's peak resident set so far (Linux reports ru_maxrss in KiB): counts run in increasing
    order, so each row's value is that run's peak."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(counts: list[int], fast_decode: bool = True, cost_model: str = "roofline", compiled: bool = True,
         engine: str | None = None, replicas: int = 1, lockstep: bool = False) -> None:
    print(f"# {cpuinfo()['cpu_model']}, {os.cpu_count()} hardware threads, Python {platform.python_version()}, "
          f"cost model {cost_model}, {'fast decode runs' if fast_decode else 'exact steps'}"
          + (f", engine {engine}" if engine else "") + (f", {replicas} replicas" if replicas > 1 else "")
          + (", stepping in lockstep" if lockstep else ""))
    warm = simulate(scenario(1000, fast_decode, cost_model, compiled, engine, replicas, lockstep))  # compiles the core
    print(f"# engine: {warm.extras['engine_core']}")
    print("| requests | generate (s) | simulate (s) | steps | simulated req/s of wall time | sim time (s) "
          "| peak RSS (MiB) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in counts:
        sc = scenario(n, fast_decode, cost_model, compiled, engine, replicas, lockstep)
        t0 = time.perf_counter()
        workload = make_workload(sc)
        t1 = time.perf_counter()
        result = simulate(sc, workload)
        t2 = time.perf_counter()
        print(f"| {n:,} | {t1 - t0:.2f} | {t2 - t1:.1f} | {len(result.steps):,} | {n / (t2 - t1):,.0f} "
              f"| {result.summary['elapsed_s']:,.0f} | {peak_rss_mib():,.0f} |", flush=True)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a not in ("--exact", "--python", "--lockstep")]  # --exact: fast_decode false
    cost = "roofline"
    if "--cost-model" in args:
        i = args.index("--cost-model")
        cost = args[i + 1] if i + 1 < len(args) else ""
        if cost not in COST_MODELS:
            sys.exit(f"--cost-model: {cost!r} is not allowed; allowed: {', '.join(COST_MODELS)}")
        del args[i:i + 2]
    engine = None
    if "--engine" in args:
        i = args.index("--engine")
        engine = args[i + 1] if i + 1 < len(args) else ""
        del args[i:i + 2]
    replicas = 1
    if "--replicas" in args:
        i = args.index("--replicas")
        replicas = int(args[i + 1]) if i + 1 < len(args) and args[i + 1].isdigit() else 0
        if replicas < 1:
            sys.exit("--replicas: allowed: a whole number >= 1")
        del args[i:i + 2]
    main([int(x) for x in args] or [10_000, 100_000, 1_000_000], fast_decode="--exact" not in sys.argv, cost_model=cost,
         compiled="--python" not in sys.argv, engine=engine, replicas=replicas, lockstep="--lockstep" in sys.argv)
