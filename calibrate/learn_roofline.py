"""Learn the roofline's efficiencies from the measured GPUs' kernel tables (issue 12); leave-one-GPU-out error.

    PYTHONPATH=. .venv/bin/python -m calibrate.learn_roofline [--out calibrate/measured/learned_roofline.json]

Every efficiency is ideal time at the GPU catalog's peaks / (measured time − the GPU's launch time), pooled over the training GPUs with
the median per bin (so no GPU's row count dominates). The evaluation prices the 204 step shapes per GPU of
benchmarks/bench_aic.py with (a) the learned roofline fitted WITHOUT that GPU and (b) today's catalog roofline,
against the measured-kernel model (MeasuredCostModel) of that GPU, and prints median / p90 absolute errors. The
training GPUs are TRAINING_GPUS; every other GPU whose tables ship is held out from the fit altogether and evaluated
against the fit on all of them.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pandas as pd

from sim.cost.learned import LEARNED_FORMAT_VERSION
from sim.cost.measured import MEASURED_DIR, load_tables, measured_gpus, nccl_allreduce
from sim.model.catalog import get_gpu
from sim.model.interconnects import NCCL_ALL_REDUCE, interconnect_class

# GEMMs are binned by how compute-bound they are ON THIS GPU, log2(ideal compute time / ideal memory time), not by
# token count: the ridge point differs 3x between the GPUs (A100 153, L40S 419 FLOP/byte), so a token-count bin
# holds memory-bound GEMMs on one GPU and compute-bound ones on another (format_version 1 binned by tokens and
# transferred worse: see benchmarks/RESULTS.md).
R_EDGES = list(range(-10, 7))  # log2 (compute / memory time): ≤1/1024 (batch-1 decode) ... ≥64 (large prefill)
W_EDGES = [0, 20, 22, 24, 26, 28]  # log2 weight elements: <1M, 1-4M, 4-16M, 16-64M, 64-256M, 256M+
ATTN_EDGES = list(range(6, 26, 2))  # log2 (batch × tokens)


def _binned(x: np.ndarray, edges: list[float]) -> np.ndarray:
    return np.clip(np.searchsorted(edges, np.log2(np.maximum(x, 1.0)), side="right") - 1, 0, len(edges) - 1)


def _binned_log2(x: np.ndarray, edges: list[float]) -> np.ndarray:
    """Like _binned, for ratios that may be below 1."""
    return np.clip(np.searchsorted(edges, np.log2(x), side="right") - 1, 0, len(edges) - 1)


def _gpu_frames(gpu: str) -> dict[str, pd.DataFrame]:
    t, spec = load_tables(MEASURED_DIR / gpu), get_gpu(gpu)
    pf, pb = spec.bf16_flops_per_s, spec.hbm_bytes_per_s
    g = t.gemm[t.gemm["dtype"] == "bf16"]
    m, n, k = (g[c].to_numpy(float) for c in ("m", "n", "k"))
    ideal = np.maximum(2 * m * n * k / pf, (n * k + m * (n + k)) * 2 / pb)
    ratio = (2 * m * n * k / pf) / ((n * k + m * (n + k)) * 2 / pb)
    # A kernel costs a launch (the GPU's fastest GEMM, ~2.4 µs on A100/H100, 1.6 µs on L40S) PLUS its work at some
    # efficiency, learned on the time beyond the launch. Folding the launch into the efficiency (format 1) ties a
    # fixed cost to the GPU's peak: it transferred worse in leave-one-GPU-out (benchmarks/RESULTS.md).
    t0 = t.launch_floor_s

    def eff(ideal: np.ndarray, latency_ms: np.ndarray, floor_s: float = t0) -> np.ndarray:
        # Capped at 1: cells no longer than a launch say nothing about the work's efficiency.
        return np.minimum(ideal / np.maximum(latency_ms * 1e-3 - floor_s, 1e-9), 1.0)
    gemm = pd.DataFrame({"rb": _binned_log2(ratio, R_EDGES), "wb": _binned(n * k, W_EDGES),
                         "eff": eff(ideal, g["latency_ms"].to_numpy(float))})
    # An attention kernel's own floor (its fastest measured call: ~10 µs on A100/H100/H200, 7 µs on L40S, four times
    # a GEMM's launch) is a launch too: learned apart, like the GEMMs'. Folded into the efficiency (format 2), the
    # small bins' efficiency was a fixed cost read as a rate (decode 0.0026-0.04 below 1k batch x context tokens),
    # which a model with more KV bytes per token than the tables' (multi-head attention) multiplied.
    c = t.context[t.context["kv_dtype"] == "bf16"]
    ctx_floor = float(c["latency_ms"].min()) * 1e-3
    b, s, hq, hkv, d = (c[x].to_numpy(float) for x in ("batch_size", "isl", "num_heads", "num_kv_heads", "head_dim"))
    ideal = np.maximum(4 * hq * d * b * s * (s + 1) / 2 / pf, b * s * (2 * hkv * d * 2 + 2 * hq * d * 2) / pb)
    ctx = pd.DataFrame({"bin": _binned(b * s, ATTN_EDGES),
                        "eff": eff(ideal, c["latency_ms"].to_numpy(float), ctx_floor)})
    e = t.generation[t.generation["kv_dtype"] == "bf16"]
    gen_floor = float(e["latency_ms"].min()) * 1e-3
    b, x, hq, hkv, d = (e[v].to_numpy(float) for v in ("batch_size", "kv_tokens", "num_heads", "num_kv_heads", "head_dim"))
    ideal = np.maximum(4 * hq * d * b * x / pf, (b * x * 2 * hkv * d * 2 + 2 * b * hq * d * 2) / pb)
    gen = pd.DataFrame({"bin": _binned(b * x, ATTN_EDGES),
                        "eff": eff(ideal, e["latency_ms"].to_numpy(float), gen_floor)})
    ar = t.allreduce[t.allreduce["backend"] == "graph"] if t.allreduce is not None else None
    has_nccl = (MEASURED_DIR / gpu / NCCL_ALL_REDUCE / "meta.json").is_file()
    ar_nccl = nccl_allreduce(MEASURED_DIR / gpu)[0] if has_nccl else None
    return {"gemm": gemm, "ctx": ctx, "gen": gen, "ar": ar, NCCL_ALL_REDUCE: ar_nccl, "spec": spec,
            "min_kernel_s": t0, "ctx_min_s": ctx_floor, "gen_min_s": gen_floor}


def _fit_allreduce(frames: list[dict], key: str = "ar") -> dict:
    """Per interconnect class and GPU count: latency (fastest message) and bus bandwidth as a fraction of the catalog
    link, medians over the class's GPUs. Classes and counts are kept apart because they scale differently: NVLink
    bus bandwidth holds from 2 to 8 GPUs, while PCIe peers share the host's root complex and their bus bandwidth
    falls as GPUs are added (L40S: 19 GB/s at 2 GPUs, 2 GB/s at 8, in the measured table)."""
    by_class: dict[str, dict[int, list[tuple[float, float]]]] = {}
    for f in frames:
        ar = f[key]
        if ar is None or ar.empty:
            continue
        spec = f["spec"]
        for n, a in ar.groupby("num_gpus"):
            busbw = (2 * (n - 1) / n * a["message_elements"] * 2 / (a["latency_ms"] * 1e-3)).max()
            by_class.setdefault(interconnect_class(spec), {}).setdefault(int(n), []).append(
                (float(a["latency_ms"].min()) * 1e-3, float(busbw / spec.interconnect_bytes_per_s)))
    return {cls: {str(n): {"latency_s": float(np.median([v[0] for v in vals])),
                           "bandwidth_fraction": float(np.median([v[1] for v in vals]))}
                  for n, vals in sorted(counts.items())}
            for cls, counts in sorted(by_class.items())}


def fit(gpus: list[str]) -> dict:
    frames = [_gpu_frames(g) for g in gpus]

    def per_gpu_median(key: str, cols: list[str]) -> pd.DataFrame:
        # Median per bin within each GPU, then the median over GPUs: each GPU weighs the same.
        parts = [f[key].groupby(cols)["eff"].median().rename(i) for i, f in enumerate(frames)]
        return pd.concat(parts, axis=1).median(axis=1)

    gm = per_gpu_median("gemm", ["rb", "wb"]).unstack("wb").reindex(index=range(len(R_EDGES)),
                                                                    columns=range(len(W_EDGES)))
    gm = gm.ffill(axis=1).bfill(axis=1).ffill(axis=0).bfill(axis=0)

    def series(key):
        s = per_gpu_median(key, ["bin"]).reindex(range(len(ATTN_EDGES)))
        return s.ffill().bfill()
    ctx, gen = series("ctx"), series("gen")
    allreduce = _fit_allreduce(frames)
    return {
        "format_version": LEARNED_FORMAT_VERSION,
        "source": "median over GPUs of ideal (catalog peak) / measured time, AIConfigurator vLLM tables in "
                  "calibrate/measured/ (python -m calibrate.learn_roofline); allreduce_nccl: their nccl/ tables",
        "fitted_on": list(gpus),
        "min_kernel_s": float(np.median([f["min_kernel_s"] for f in frames])),
        "gemm": {"r_edges": R_EDGES, "w_edges": W_EDGES, "eff": gm.to_numpy(float).round(4).tolist()},
        "prefill_attention": {"edges": ATTN_EDGES, "eff": ctx.to_numpy(float).round(4).tolist(),
                              "min_kernel_s": float(np.median([f["ctx_min_s"] for f in frames]))},
        "decode_attention": {"edges": ATTN_EDGES, "eff": gen.to_numpy(float).round(4).tolist(),
                             "min_kernel_s": float(np.median([f["gen_min_s"] for f in frames]))},
        "elementwise_bytes_efficiency": float(round(gen.iloc[-1], 4)),
        "allreduce": allreduce,
        # NCCL's all-reduce (`hardware.all_reduce: nccl`), learned alike from the GPUs' nccl/ tables
        "allreduce_nccl": _fit_allreduce(frames, NCCL_ALL_REDUCE),
    }


# The GPUs the shipped efficiencies are fitted on: one of each kind of GPU whose tables shipped when it was fitted
# (Ampere, Ada, Hopper twice, Blackwell). The Blackwell parts whose tables came later (B300, GB200, GB300, and the
# RTX PRO 6000, 12-03) share the B200's kernels: in a median over GPUs, three more of them would pull every bin toward
# one architecture, so they are held out instead: a check of the learned roofline on GPUs it never saw.
TRAINING_GPUS = ("a100-80gb", "b200", "h100-sxm", "h200", "l40s")

# Evaluated beside bench_aic's models (all grouped-query): a multi-head one, whose KV bytes per token are 4x those of
# the GQA rows the tables measured, so that a rule which only holds at the tables' head shapes shows.
EXTRA_EVAL_MODELS = ("llama-2-7b",)


def evaluate(learned_by_gpu: dict[str, dict]) -> pd.DataFrame:
    """Per held-out GPU and step shape: measured-model, learned-roofline and catalog-roofline step times."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from bench_aic import DECODE, MIXED, MIXED_ISL, MODELS, PREFILL, TPS, _plan

    from sim.cost.learned import LearnedRooflineCostModel
    from sim.cost.measured import MeasuredCostModel
    from sim.cost.roofline import RooflineCostModel
    from sim.model.catalog import get_model

    rows = []
    shapes = ([("prefill", b, s, 0) for b, s in PREFILL] + [("decode", b, c, 0) for b, c in DECODE]
              + [("mixed", d, MIXED_ISL, ch) for ch, d in MIXED])
    for gpu, learned in learned_by_gpu.items():
        g = get_gpu(gpu)
        for model in [*MODELS, *EXTRA_EVAL_MODELS]:
            m = get_model(model)
            for tp in TPS:
                ref = MeasuredCostModel(m, g, tensor_parallel=tp)
                lr = LearnedRooflineCostModel(m, g, tensor_parallel=tp, learned=learned)
                cat = RooflineCostModel(m, g, tensor_parallel=tp)
                for kind, b, tok, ch in shapes:
                    plan = _plan(kind, b, tok, ch)
                    rows.append({"gpu": gpu, "model": model, "tp": tp, "kind": kind, "batch": b, "tokens": tok,
                                 "chunk": ch, "measured_s": ref.step_time(plan), "learned_s": lr.step_time(plan),
                                 "catalog_s": cat.step_time(plan)})
    df = pd.DataFrame(rows)
    df["learned_err"] = df.learned_s / df.measured_s - 1
    df["catalog_err"] = df.catalog_s / df.measured_s - 1
    return df


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(MEASURED_DIR / "learned_roofline.json"))
    args = ap.parse_args()
    gpus = list(TRAINING_GPUS)
    full = fit(gpus)
    unseen = [g for g in measured_gpus() if g not in gpus]
    loo = {g: fit([x for x in gpus if x != g]) for g in gpus}
    df = evaluate(loo | {g: full for g in unseen})
    print("| held-out GPU | shapes | learned (fit without it): median / p90 abs error | catalog roofline: median / p90 |")
    print("| --- | ---: | ---: | ---: |")
    for gpu, g in df.groupby("gpu", sort=False):
        a, c = g.learned_err.abs(), g.catalog_err.abs()
        print(f"| {gpu}{' (never fitted on)' if gpu in unseen else ''} | {len(g)} | {a.median():.1%} / "
              f"{np.percentile(a, 90):.1%} | {c.median():.1%} / {np.percentile(c, 90):.1%} |")
    for label, part in (("training GPUs, each left out", df[~df.gpu.isin(unseen)]),
                        ("GPUs never fitted on", df[df.gpu.isin(unseen)]), ("all", df)):
        if part.empty:
            continue
        a, c = part.learned_err.abs(), part.catalog_err.abs()
        print(f"| {label} | {len(part)} | {a.median():.1%} / {np.percentile(a, 90):.1%} | "
              f"{c.median():.1%} / {np.percentile(c, 90):.1%} |")
    print("\nBy kind: learned / catalog median abs error")
    for kind, g in df.groupby("kind"):
        print(f"  {kind}: {g.learned_err.abs().median():.1%} / {g.catalog_err.abs().median():.1%}")
    print("By TP: learned / catalog median abs error")
    for tp, g in df.groupby("tp"):
        print(f"  tp{tp}: {g.learned_err.abs().median():.1%} / {g.catalog_err.abs().median():.1%}")
    with open(args.out, "w") as fh:
        json.dump(full, fh, indent=1)
        fh.write("\n")
    print(f"\nlearned efficiencies (all {len(gpus)} GPUs): {args.out}")


if __name__ == "__main__":
    main()
