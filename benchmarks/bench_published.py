"""ServeSim against published end-to-end vLLM measurements (issue 12).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_published.py [--cases benchmarks/published/vllm_e2e.yaml]

Each case of the data file (a real `vllm bench serve` run, numbers quoted from its source) is simulated as the
page describes it: the model's config.json, the GPU, TP 1, vLLM V1's default scheduler for that GPU (chunked
prefill, max_num_batched_tokens / max_num_seqs), all prompts at once (burst) or `--max-concurrency` users
(closed loop, no think time), fixed lengths at the quoted means. Four cost models price it:

- roofline: today's default, catalog efficiencies and its fixed 3 ms step overhead;
- measured kernels: AIConfigurator's vLLM kernel tables (MeasuredCostModel), no engine overhead;
- measured + overhead: the same kernels plus the `vllm-cudagraph` engine-overhead defaults (sim/cost/overhead.py);
- learned roofline + overhead: the roofline with efficiencies learned from the measured GPUs, plus the same terms;
- measured + fitted per_step: the measured kernels plus the overhead terms with per_step_s fitted to ONE number, the
  concurrency-1 case's mean TPOT minus its kernel time (the other cases are held out).

It prints, per case, the measured and simulated benchmark duration (first request sent to last finished), mean
TTFT and mean TPOT with the simulation's error, and a step breakdown of the lowest-concurrency case: kernel time
of one decode step against the measured TPOT, and how much of the gap each overhead term takes.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
CASES = HERE / "published" / "vllm_e2e.yaml"

# vLLM's OpenAI-server defaults (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults): >= 70 GiB and not A100.
VLLM_V1_DEFAULTS = {
    "h100-sxm": {"max_num_batched_tokens": 8192, "max_num_seqs": 1024},
    "h200": {"max_num_batched_tokens": 8192, "max_num_seqs": 1024},
    "a100-80gb": {"max_num_batched_tokens": 2048, "max_num_seqs": 256},
}
COST_MODELS = {
    "roofline": {"kind": "roofline"},
    "measured kernels": {"kind": "measured", "on_missing": "error"},
    "measured + overhead": {"kind": "measured", "on_missing": "error", "overhead": {"engine": "vllm-cudagraph"}},
    "learned roofline + overhead": {"kind": "roofline", "efficiencies": "learned",
                                    "overhead": {"engine": "vllm-cudagraph"}},
}
METRICS = (("benchmark_duration_s", "duration"), ("mean_ttft_ms", "TTFT"), ("mean_tpot_ms", "TPOT"))


def scenario(case: dict, cost_model: dict) -> dict:
    q = case["quoted"]
    n = case["num_prompts"]
    arrival = ({"kind": "closed_loop", "num_users": case["concurrency"], "think_time_s": 0.0}
               if case.get("concurrency") else {"kind": "burst"})
    return {
        "name": case["name"],
        "model": {"hf_config": str(CASES.parent / case["model"])},
        "hardware": {"gpu": case["gpu"], "tensor_parallel": 1},
        "workload": {"arrival": arrival,
                     # the quoted totals over the requests: means where requests stopped early at EOS
                     "lengths": {"kind": "fixed", "input_tokens": round(q["total_input_tokens"] / n),
                                 "output_tokens": round(q["total_generated_tokens"] / n)}},
        "scheduler": {"batching": "continuous", "chunked_prefill": True, "max_model_len": 40960,
                      **VLLM_V1_DEFAULTS[case["gpu"]]},
        "kv_cache": {"layout": "paged", "block_size": 16, "gpu_memory_utilization": 0.9},
        "cost_model": cost_model,
        "run": {"seed": 0, "num_requests": n},
    }


def simulated(case: dict, cost_model: dict) -> dict:
    from sim.config.files import validate_scenario
    from sim.run import simulate
    result = simulate(validate_scenario(scenario(case, cost_model)))
    r = result.requests
    return {"benchmark_duration_s": float(r["finish_s"].max()), "mean_ttft_ms": float(r["ttft_s"].mean()) * 1e3,
            "mean_tpot_ms": float(np.nanmean(r["tpot_s"])) * 1e3, "label": result.extras["cost_model_label"],
            "kv_capacity_tokens": result.summary.get("kv_capacity_tokens"),
            "preemptions": result.summary.get("preemptions")}


def decode_kernels_s(case: dict) -> tuple[float, int]:
    """Kernel time of one decode step of `concurrency` sequences at the case's mean context (mid-generation)."""
    from sim.config.files import validate_scenario
    from sim.core.step_plan import StepPlan
    from sim.run import make_cost_model
    q, c, n = case["quoted"], case["concurrency"], case["num_prompts"]
    context = round(q["total_input_tokens"] / n + q["total_generated_tokens"] / n / 2)
    plan = StepPlan(num_decode_seqs=c, decode_context_tokens=c * context, num_sampled_seqs=c)
    cost = make_cost_model(validate_scenario(scenario(case, COST_MODELS["measured kernels"])))
    return cost.step_time(plan), context


def fitted_per_step_s(case: dict) -> float:
    """per_step_s that closes one case's TPOT gap: measured TPOT - decode kernels - the default per-sequence term."""
    from sim.cost.overhead import engine_overhead
    kernels_s, _ = decode_kernels_s(case)
    return case["quoted"]["mean_tpot_ms"] * 1e-3 - kernels_s - engine_overhead("vllm-cudagraph").per_seq_s * case["concurrency"]


def decode_breakdown(case: dict) -> list[str]:
    """One decode step of `concurrency` sequences at the case's mean context, kernels vs the measured TPOT."""
    from sim.cost.overhead import engine_overhead
    q, c = case["quoted"], case["concurrency"]
    kernels_s, context = decode_kernels_s(case)
    terms = engine_overhead("vllm-cudagraph")
    tpot_s = q["mean_tpot_ms"] * 1e-3
    per_step, per_seq = terms.per_step_s, terms.per_seq_s * c
    gap = tpot_s - kernels_s
    return [(f"{case['name']}: decode step of {c} x {context} context tokens: measured kernels "
             f"{kernels_s * 1e3:.2f} ms; measured TPOT {tpot_s * 1e3:.2f} ms; gap {gap * 1e3:.2f} ms "
             f"({gap / tpot_s:.0%} of the TPOT); vllm-cudagraph overhead terms: per_step {per_step * 1e3:.2f} ms + "
             f"per_seq {per_seq * 1e3:.3f} ms = {(per_step + per_seq) * 1e3:.2f} ms "
             f"({(per_step + per_seq) / gap:.0%} of the gap)")]


def err(sim: float, real: float) -> str:
    return "-" if math.isnan(sim) else f"{sim / real - 1:+.0%}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=str(CASES))
    ap.add_argument("--only", help="run only cases whose name contains this")
    args = ap.parse_args()
    data = yaml.safe_load(Path(args.cases).read_text())
    cases = [c for c in data["cases"] if not args.only or args.only in c["name"]]
    # One number fitted on the concurrency-1 case; every other case is held out from it.
    fit_on = min((c for c in data["cases"] if c.get("concurrency")), key=lambda c: c["concurrency"])
    per_step_s = fitted_per_step_s(fit_on)
    COST_MODELS["measured + fitted per_step"] = {
        "kind": "measured", "on_missing": "error",
        "overhead": {"engine": "vllm-cudagraph", "per_step_s": round(per_step_s, 6)}}
    print(f"per_step_s fitted on {fit_on['name']!r} (mean TPOT - decode kernels - per_seq): {per_step_s * 1e3:.3f} ms")
    rows = []
    for case in cases:
        q = case["quoted"]
        sims = {name: simulated(case, spec) for name, spec in COST_MODELS.items()}
        rows.append((case, sims))
        print(f"\n{case['name']} ({case['gpu']}, vLLM {case['vllm_version']}; {data['sources'][case['source']]})")
        print(f"  KV capacity {sims['measured kernels']['kv_capacity_tokens']:,} tokens, preemptions "
              + ", ".join(f"{k}: {v['preemptions']}" for k, v in sims.items()))
        for key, label in METRICS:
            cells = ", ".join(f"{name} {s[key]:,.4g} ({err(s[key], q[key])})" for name, s in sims.items())
            print(f"  {label}: measured {q[key]:,.4g}; {cells}")
    print("\n| case | metric | vLLM (quoted) | " + " | ".join(COST_MODELS) + " |")
    print("| --- | --- | ---: | " + " | ".join("---:" for _ in COST_MODELS) + " |")
    for case, sims in rows:
        q = case["quoted"]
        for key, label in METRICS:
            unit = "s" if key.endswith("_s") else "ms"
            print(f"| {case['name']} | {label} ({unit}) | {q[key]:,.4g} | "
                  + " | ".join(f"{s[key]:,.4g} ({err(s[key], q[key])})" for s in sims.values()) + " |")
    groups = {"low concurrency (closed loop)": [r for r in rows if r[0].get("concurrency")],
              "all prompts at once (burst)": [r for r in rows if not r[0].get("concurrency")]}
    for group, members in groups.items():
        if not members:
            continue
        print(f"\nMedian absolute error, {group}, {len(members)} cases:")
        for key, label in METRICS:
            parts = []
            for name in COST_MODELS:
                e = [abs(s[name][key] / c["quoted"][key] - 1) for c, s in members]
                parts.append(f"{name} {np.median(e):.0%}")
            print(f"  {label}: " + ", ".join(parts))
    print()
    for case in cases:
        if case.get("concurrency"):
            print("\n".join(decode_breakdown(case)))


if __name__ == "__main__":
    main()
