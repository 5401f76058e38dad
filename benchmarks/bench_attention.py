"""The attention-kernel what-if against this machine (issue 33): flash / materialized prefill-time ratio, modelled
by the roofline and measured with torch SDPA.

For each prompt length, one layer's causal attention of a prompt (no earlier context) is timed twice on this CPU:
torch's math backend (the scores materialized) and its flash-attention-for-CPU backend (the only tiled backend
torch has on a CPU), fp32, few heads to keep it affordable (`calibrate/kernels/attention_backends.py`). The modelled
ratio is the roofline's own attention arithmetic (`sim.cost.roofline_kernel.attention_parts`, the function every
cost model and the compiled core call) with this CPU's rates in place of a GPU's: its fp32 matmul rate (a square
matmul, the usual roofline ceiling) and its copy bandwidth, both measured here first. Nothing is fitted to the
attention timings.

    .venv/bin/python benchmarks/bench_attention.py [--threads 2] [--heads 2] [--head-dim 128] [lengths...]

Prints the machine and one Markdown row per length (benchmarks/results/attention.md holds the last run).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from calibrate.fidelity.machine import cpuinfo  # noqa: E402
from calibrate.kernels.attention_backends import time_prefill  # noqa: E402
from calibrate.timing import time_cpu  # noqa: E402
from sim.cost import roofline_kernel as rk  # noqa: E402

LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)
GOAL = 0.15  # the goal: modelled ratio within 15% of the measured one at every length
_FP32 = 4


def matmul_flops_per_s(n: int = 2048) -> float:
    """This CPU's fp32 matmul rate on torch's threads: an n x n x n product, 2n³ FLOPs."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    out = torch.empty(n, n)
    t = time_cpu(lambda: torch.mm(a, b, out=out), 2.0).median_s
    return 2.0 * n**3 / t


def copy_bytes_per_s(nbytes: int = 1 << 29) -> float:
    """This CPU's memory bandwidth: a copy of `nbytes` (read once, written once), far larger than its caches."""
    src = torch.randn(nbytes // _FP32)
    dst = torch.empty_like(src)
    t = time_cpu(lambda: dst.copy_(src), 2.0).median_s
    return 2.0 * nbytes / t


def price(flops_per_s: float, bytes_per_s: float, heads: int, head_dim: int, materialized: bool) -> np.ndarray:
    """The roofline's scalars for one layer of `heads` heads (as many KV heads) in fp32 on this CPU: the fields
    `RooflineCostModel` fills from a GPU, here from the rates measured above (efficiency 1: they are achieved)."""
    p = np.zeros(rk.NUM_PRICE)
    p[rk.P_FLOPS_PER_S], p[rk.P_BYTES_PER_S] = flops_per_s, bytes_per_s
    p[rk.P_ATTN_FLOPS_PER_PAIR] = 2.0 * heads * (head_dim + head_dim)  # QK^T and PV
    p[rk.P_KV_BYTES_PER_TOKEN_LAYER] = 2 * heads * head_dim * _FP32  # K and V
    p[rk.P_Q_BYTES_PER_TOKEN] = heads * (head_dim + head_dim) * _FP32  # Q read, O written
    if materialized:
        p[rk.P_MATERIALIZED] = 1.0
        p[rk.P_SCORE_BYTES_PER_PAIR] = heads * _FP32  # the math backend keeps fp32 scores for fp32 inputs
        p[rk.P_SOFTMAX_FLOPS_PER_PAIR] = heads * rk.SOFTMAX_FLOPS_PER_SCORE
    return p


def modelled_prefill_s(p: np.ndarray, tokens: int) -> float:
    chunk = np.array([tokens], dtype=np.int64)
    context = np.zeros(1, dtype=np.int64)
    return rk.attention_parts(p, tokens, chunk, context, 1, 0, 0, 1)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lengths", nargs="*", type=int, default=list(LENGTHS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--budget-s", type=float, default=2.0, help="timing budget per point (at least 5 calls)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    info = cpuinfo()
    flags = ", ".join(k for k in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile") if info.get(k))
    fps, bps = matmul_flops_per_s(), copy_bytes_per_s()
    print(f"machine: {info['cpu_model']} ({flags}), {os.cpu_count()} CPUs, torch {torch.__version__} on "
          f"{args.threads} threads, {platform.python_version()}, {time.strftime('%Y-%m-%d')}")
    print(f"measured rates: fp32 matmul {fps / 1e9:.1f} GFLOP/s, copy {bps / 1e9:.1f} GB/s (ridge "
          f"{fps / bps:.1f} FLOP/byte); one layer, {args.heads} heads x d {args.head_dim}, fp32, causal, no context")
    print("\n| prompt tokens | flash ms | materialized ms | measured flash/mat | modelled flash/mat | "
          "modelled / measured | within 15% |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    flash_p = price(fps, bps, args.heads, args.head_dim, False)
    mat_p = price(fps, bps, args.heads, args.head_dim, True)
    for n in args.lengths:
        kw = dict(heads=args.heads, kv_heads=args.heads, head_dim=args.head_dim, tokens=n, budget_s=args.budget_s)
        t_flash = time_prefill("flash", **kw).median_s
        t_mat = time_prefill("materialized", **kw).median_s
        measured = t_flash / t_mat
        modelled = modelled_prefill_s(flash_p, n) / modelled_prefill_s(mat_p, n)
        err = modelled / measured - 1
        print(f"| {n:,} | {t_flash * 1e3:.2f} | {t_mat * 1e3:.2f} | {measured:.3f} | {modelled:.3f} | "
              f"{err:+.0%} | {'yes' if abs(err) <= GOAL else 'no'} |", flush=True)


if __name__ == "__main__":
    main()
