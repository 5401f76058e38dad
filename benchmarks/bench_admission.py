"""vLLM V1's admission before v0.19 on the published vLLM bursts: the preset's whole-prompt stand-in, the engine's
own first-chunk rule (`scheduler.admission: first_chunk`), and that rule with the prefix cache vLLM keeps by
default, every prompt given content ids of its own (16-token units, none shared) so that a preempted request claims
back its cached blocks.

Each run is simulated as `bench_published.py` simulates it (its scenario and the shipped engine terms); nothing is
fitted here. Prints simulated / measured - 1 per quoted figure, and the preemptions.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_admission.py [run name ...]

History: benchmarks/results/published-e2e.md ("vLLM V1's first-chunk admission").
"""

from __future__ import annotations

import dataclasses
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import published_suite as ps  # noqa: E402

from calibrate.fidelity.machine import cpuinfo  # noqa: E402
from sim.config.files import validate_scenario  # noqa: E402
from sim.run import make_workload, simulate  # noqa: E402

RUNS = ("qwen3-14b h100 32k burst", "qwen3-235b-a22b-h100 vllm fp8 tp4 mnbt16384 32k burst",
        "qwen3-14b h100 2k burst", "qwen3-14b h100 4k burst", "qwen3-14b-h100 vllm sharegpt")
VARIANTS = ("whole_prompt", "first_chunk", "first_chunk + own prefix cache")
UNIT_TOKENS = 16  # tokens per content id of a prompt's own ids


def own_content(workload):
    """The workload with every prompt's own content ids: no two prompts share a block, a preempted one its own."""
    ids = [np.arange(-(-int(n) // UNIT_TOKENS), dtype=np.int64) + (i + 1) * 10_000_000
           for i, n in enumerate(workload.input_tokens)]
    return dataclasses.replace(workload, prefix_ids=ids, prefix_unit_tokens=UNIT_TOKENS)


def run(case, variant: str) -> tuple[dict, int, str]:
    raw = ps.scenario(case, ps.COST_MODELS[ps.DEFAULT_COST_MODEL])
    if variant != "whole_prompt":
        raw.setdefault("scheduler", {})["admission"] = "first_chunk"
    cached = variant.endswith("cache")
    if cached:
        raw.setdefault("kv_cache", {})["enable_prefix_caching"] = True
    spec = validate_scenario(raw)
    workload = make_workload(spec)
    result = simulate(spec, own_content(workload) if cached else workload)
    sim = ps.measure(result, case.workload.requests)
    errors = {m.group: sim[m.sim] / m.measured - 1 for m in case.metrics}
    return errors, int(result.summary.get("preemptions", 0)), result.extras.get("engine_core", "")


def main(names: list[str]) -> None:
    cpu = cpuinfo()
    flags = ", ".join(k for k, v in cpu.items() if k != "cpu_model" and v)
    print(f"Machine: {cpu['cpu_model']} ({flags}), {os.cpu_count()} CPUs, Python {platform.python_version()}")
    cases = {c.name: c for c in ps.load_suite().cases}
    print("| run | admission | throughput | TTFT | TPOT | preemptions | engine |")
    print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
    t0 = time.perf_counter()
    for name in names or RUNS:
        for variant in VARIANTS:
            errors, preemptions, core = run(cases[name], variant)
            cells = " | ".join(f"{errors[g]:+.0%}" if g in errors else "-" for g in ("throughput", "ttft", "tpot_itl"))
            print(f"| {name} | {variant} | {cells} | {preemptions} | {core.split(' (')[0]} |")
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
