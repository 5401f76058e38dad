"""ServeSim's measured-kernel and roofline step times beside NVIDIA AIConfigurator's own estimator (issue 12).

Two phases, because aiconfigurator-core lives in its own venv (the project never needs it):

    /work/aic-venv/bin/python benchmarks/bench_aic.py aic --out benchmarks/aic_steps.csv
    PYTHONPATH=. .venv/bin/python benchmarks/bench_aic.py compare --steps benchmarks/aic_steps.csv

Phase 1 asks `EngineHandle.compile(<HF model>, <system>, "vllm", tp_size=TP)` for 17 step shapes per
(model, TP): prefill (batch × prompt, empty cache), decode (batch × context) and mixed (a prefill chunk
beside decodes); 3 models × TP 1, 2, 4, 8 = 204 shapes per GPU. Phase 2 prices the same shapes with
MeasuredCostModel and RooflineCostModel and prints median / p90 absolute differences per GPU (relative
to AIConfigurator) plus the largest differences.
"""

from __future__ import annotations

import argparse
import csv
import sys

GPUS = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "a100-80gb": "a100_sxm", "l40s": "l40s"}
MODELS = {"llama-3.1-8b": "meta-llama/Meta-Llama-3.1-8B", "llama-3.1-70b": "meta-llama/Meta-Llama-3.1-70B",
          "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1"}
TPS = (1, 2, 4, 8)
PREFILL = [(1, 128), (1, 512), (1, 2048), (1, 8192), (4, 1024)]  # (batch, prompt tokens)
DECODE = [(b, c) for c in (512, 4096) for b in (1, 8, 64, 256)]  # (batch, context)
MIXED = [(512, 16), (512, 64), (2048, 16), (2048, 64)]  # (prefill chunk tokens, decodes); prompt 2048, output 128
MIXED_ISL, MIXED_OSL = 2048, 128


def phase_aic(out: str) -> None:
    import logging
    logging.disable(logging.WARNING)
    import os
    import shutil
    import tempfile

    import aiconfigurator_core
    from aiconfigurator_core.sdk.engine import EngineHandle
    # Models AIConfigurator does not resolve offline by name: a folder holding its shipped config.json.
    local = tempfile.mkdtemp()
    cfg = os.path.join(os.path.dirname(aiconfigurator_core.__file__), "model_configs",
                       "mistralai--Mixtral-8x7B-v0.1_config.json")
    os.makedirs(os.path.join(local, "mixtral"))
    shutil.copy(cfg, os.path.join(local, "mixtral", "config.json"))
    paths = {**MODELS, "mixtral-8x7b": os.path.join(local, "mixtral")}
    rows = []
    for gpu, system in GPUS.items():
        for model in MODELS:
            for tp in TPS:
                moe = {"moe_tp_size": tp} if model == "mixtral-8x7b" else {}
                h = EngineHandle.compile(paths[model], system, "vllm", tp_size=tp, **moe)
                for b, s in PREFILL:
                    rows.append((gpu, model, tp, "prefill", b, s, 0, h.predict_prefill_latency(b, s)))
                for b, c in DECODE:
                    # osl 2: one decode step at context c (+1, the new token).
                    rows.append((gpu, model, tp, "decode", b, c, 0, h.decode_step_latency(b, c, 2)))
                for chunk, dec in MIXED:
                    rows.append((gpu, model, tp, "mixed", dec, MIXED_ISL, chunk,
                                 h.mixed_step_latency(chunk, dec, MIXED_ISL, MIXED_OSL)))
                print(gpu, model, tp, file=sys.stderr)
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["gpu", "model", "tp", "kind", "batch", "tokens", "chunk", "aic_ms"])
        w.writerows(rows)


def _plan(kind: str, batch: int, tokens: int, chunk: int):
    from sim.core.step_plan import StepPlan
    if kind == "prefill":
        return StepPlan(prefill_request_ids=list(range(batch)), prefill_chunk_tokens=[tokens] * batch,
                        prefill_context_tokens=[0] * batch, num_sampled_seqs=batch)
    if kind == "decode":
        return StepPlan(num_decode_seqs=batch, decode_context_tokens=batch * (tokens + 1), num_sampled_seqs=batch)
    # Mixed: a chunk of a 2048-token prompt at its mean context, decodes at prompt + half the output.
    return StepPlan(prefill_request_ids=[0], prefill_chunk_tokens=[chunk],
                    prefill_context_tokens=[(tokens - chunk) // 2], num_decode_seqs=batch,
                    decode_context_tokens=batch * (tokens + MIXED_OSL // 2), num_sampled_seqs=batch + 1)


def phase_compare(steps: str) -> None:
    import numpy as np
    import pandas as pd

    from sim.cost.measured import MeasuredCostModel
    from sim.cost.roofline import RooflineCostModel
    from sim.model.catalog import get_gpu, get_model
    df = pd.read_csv(steps)
    measured, roof = [], []
    models: dict = {}
    for r in df.itertuples():
        key = (r.gpu, r.model, r.tp)
        if key not in models:
            m, g = get_model(r.model), get_gpu(r.gpu)
            models[key] = (MeasuredCostModel(m, g, tensor_parallel=r.tp), RooflineCostModel(m, g, tensor_parallel=r.tp))
        plan = _plan(r.kind, r.batch, r.tokens, r.chunk)
        measured.append(models[key][0].step_time(plan) * 1e3)
        roof.append(models[key][1].step_time(plan) * 1e3)
    df["measured_ms"], df["roofline_ms"] = measured, roof
    df["measured_diff"] = df.measured_ms / df.aic_ms - 1
    df["roofline_diff"] = df.roofline_ms / df.aic_ms - 1
    print("| GPU | shapes | measured: median / p90 abs diff | roofline: median / p90 abs diff |")
    print("| --- | ---: | ---: | ---: |")
    for gpu, g in df.groupby("gpu", sort=False):
        m, r = g.measured_diff.abs(), g.roofline_diff.abs()
        print(f"| {gpu} | {len(g)} | {m.median():.1%} / {np.percentile(m, 90):.1%} | "
              f"{r.median():.1%} / {np.percentile(r, 90):.1%} |")
    print("\nBy kind (all GPUs): measured median / p90 abs diff")
    for kind, g in df.groupby("kind"):
        m = g.measured_diff.abs()
        print(f"  {kind}: {m.median():.1%} / {np.percentile(m, 90):.1%}  (roofline {g.roofline_diff.abs().median():.1%})")
    print("\nBy TP (all GPUs): measured / roofline median abs diff")
    for tp, g in df.groupby("tp"):
        print(f"  tp{tp}: {g.measured_diff.abs().median():.1%} / {g.roofline_diff.abs().median():.1%}")
    print("\nLargest measured differences:")
    top = df.reindex(df.measured_diff.abs().sort_values(ascending=False).index).head(12)
    print(top[["gpu", "model", "tp", "kind", "batch", "tokens", "chunk", "aic_ms", "measured_ms", "roofline_ms",
               "measured_diff"]].to_string(index=False, float_format=lambda x: f"{x:.3f}"))


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="phase", required=True)
    a = sub.add_parser("aic")
    a.add_argument("--out", default="benchmarks/aic_steps.csv")
    c = sub.add_parser("compare")
    c.add_argument("--steps", default="benchmarks/aic_steps.csv")
    args = ap.parse_args()
    if args.phase == "aic":
        phase_aic(args.out)
    else:
        phase_compare(args.steps)


if __name__ == "__main__":
    main()
