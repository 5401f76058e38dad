"""Planner speed (issue 15): `scenarios/capacity_plan.yaml` planned exhaustively and with the shortcuts.

Runs the plan in this process, one core (serial backend), in the order given (default: exhaustive, then fast),
and prints one Markdown row per mode: wall and CPU seconds, simulations, engine steps, the recommendation,
and whether every candidate's best rate, replica count and metrics at the target equal the first mode's.
Run:  .venv/bin/python benchmarks/bench_planner.py [exhaustive] [fast]
Steps are the work measure that does not depend on what else shares the machine; wall time does.
"""

from __future__ import annotations

import copy
import os
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sim.run  # noqa: E402
from calibrate.fidelity.machine import cpuinfo  # noqa: E402
from sim.results import same_up_to_reassociation  # noqa: E402
from sim.tools.planner import plan_settings, run_plan  # noqa: E402

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "capacity_plan.yaml"


def count_steps() -> dict:
    """Counts simulations and engine steps (a decode run's steps each count) as they finish: every simulation the
    planner runs goes through `sim.run.simulate`, in the compiled core or the SimPy engine."""
    counter = {"simulations": 0, "steps": 0}
    simulate = sim.run.simulate

    def counted(*args, **kwargs):
        result = simulate(*args, **kwargs)
        counter["simulations"] += 1
        counter["steps"] += int(result.steps["num_steps"].sum()) if len(result.steps) else 0
        return result
    sim.run.simulate = counted
    return counter


def main(modes: list[str]) -> None:
    raw = yaml.safe_load(SCENARIO.read_text())
    counter = count_steps()
    print(f"machine: {cpuinfo()['cpu_model']}, {os.cpu_count()} threads, load average {os.getloadavg()[0]:.1f}")
    print("| mode | wall (s) | CPU (s) | simulations | engine steps | recommendation | same as first |")
    print("| --- | ---: | ---: | ---: | ---: | --- | --- |")
    first = None
    for mode in modes:
        counter.update(simulations=0, steps=0)
        wall, cpu = time.perf_counter(), time.process_time()
        result = run_plan(copy.deepcopy(raw), plan_settings(raw, exhaustive=mode == "exhaustive"), backend="serial")
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        answer = [(o.candidate.name, o.status, o.max_rate_per_replica, o.num_replicas, o.at_target, o.costs)
                  for o in result.outcomes]
        first = first or answer
        agree = same_up_to_reassociation(answer, first)
        rec = result.recommendation
        print(f"| {mode} | {wall:.1f} | {cpu:.1f} | {counter['simulations']} | {counter['steps']:,} | "
              f"{rec.num_replicas} × {rec.candidate.name} | {'yes' if agree else 'NO'} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["exhaustive", "fast"])
