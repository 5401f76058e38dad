"""The attention-kernel what-if against this machine (issue 33): flash / materialized prefill-time ratio, modelled
from the two kernels' memory traffic and this CPU's measured rates, against the ratio measured with torch SDPA.

For each prompt length N, one layer's causal attention of a prompt (no earlier context) runs on this CPU with
torch's math backend (the scores materialized) and its flash-attention-for-CPU backend (the only tiled backend torch
has on a CPU), fp32, few heads to keep it affordable (`calibrate/kernels/attention_backends.py`).

The model prices what each kernel does (sim/model/attention_io.py), op by op, with the roofline's own rule
(`sim.cost.roofline_kernel.op_time`: an op takes its compute time or its memory time, whichever is longer):

- flash (`tiled_score_pairs`, `tiled_attention_accesses`, torch's blocks `torch_cpu_flash_q_block(N)` x 512): the
  score pairs it computes (causal: whole key blocks up to the diagonal) at the rate of a plain matmul of its block
  shapes, 4d FLOPs a pair, plus its softmax over those pairs at the rate of a softmax of one block; K and V re-read
  per query block from the cache or memory;
- materialized (`math_sdpa_pass_bytes`: torch's math SDPA op by op): QK^T and PV at the rate of a plain bmm of the
  same shapes into a buffer already in memory; each pass over the N x N matrices (mask, in-place mask add, softmax,
  `_safe_softmax`'s three) at its own in-cache rate or the memory bandwidth, whichever is slower (the L3 copy rate if
  the pass moves at most the L3's size, else DRAM's); every buffer either kernel allocates at the first-touch rate
  (torch's CPU allocator keeps no cache: with glibc's mmap threshold pinned at its default 128 KiB, which this script
  does, each call maps fresh pages and the OS zeroes them on first write; the page faults counted per call agree).

Every rate is a micro-benchmark run here, in the same rounds as the attention timings (a sample of each per round,
medians over rounds: the machine is shared), never the attention timings themselves; nothing is fitted. The
simulator's roofline (`attention_parts`: 4 score accesses, one matmul rate; here both kernels compute-bound, so
flat) is printed beside it, with the square-matmul rate and DRAM bandwidth measured here.

    taskset -c 1 .venv/bin/python benchmarks/bench_attention.py [--threads 1] [--heads 2] [--head-dim 128] [lengths...]

Prints the machine, the rates and one Markdown row per length (benchmarks/results/attention.md holds the last run).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from calibrate.fidelity.machine import cpuinfo  # noqa: E402
from calibrate.kernels.attention_backends import prefill_call  # noqa: E402
from sim.cost import roofline_kernel as rk  # noqa: E402
from sim.model.attention_io import (  # noqa: E402
    TORCH_CPU_FLASH_KV_BLOCK,
    math_sdpa_pass_bytes,
    tiled_attention_accesses,
    tiled_score_pairs,
    torch_cpu_flash_fresh_bytes,
    torch_cpu_flash_q_block,
)

LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)
GOAL = 0.15  # the goal: modelled ratio within 15% of the measured one at every length
_FP32 = 4
_MIB = 1 << 20
_IN_CACHE_ELEMENTS = 1 << 16  # an elementwise op's in-cache rate: 256 KiB of fp32 in, as much out (L2 is 1 MiB here)
_MATH_OPS = ("scale", "ones", "tril", "where_mask", "add_mask", "softmax", "eq", "all", "where_p")
# glibc's default mmap threshold, pinned: every buffer of 128 KiB or more is mapped fresh (and first touched) on
# each call. Left dynamic, glibc raises it after a free (up to 32 MiB), and whether a kernel's 1-32 MiB buffers are
# first touched depends on what the process freed before: at 1,024 tokens the math backend took 16 or 25 ms.
_MMAP_THRESHOLD = "131072"


def cache_bytes(level: int = 3) -> int:
    """The size of this CPU's cache at `level` (sysfs), the role Dao et al.'s SRAM M plays for the scores."""
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        kind = (index / "type").read_text().strip()
        if (index / "level").read_text().strip() == str(level) and kind != "Instruction":
            size = (index / "size").read_text().strip()
            return int(size[:-1]) * {"K": 1 << 10, "M": 1 << 20}[size[-1]]
    raise RuntimeError(f"no level-{level} cache in sysfs")


def _per_call_s(fn, min_s: float = 2e-3) -> float:
    """Seconds per call of `fn`, timed over back-to-back calls lasting at least `min_s`."""
    calls = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_s:
            return dt / calls
        calls *= 2 if dt > min_s / 8 else 8


def probes(n: int, heads: int, d: int) -> dict:
    """name -> a function returning one sample of a rate (FLOP/s, bytes/s or elements/s; a dict of rates when one
    sample gives several). Each is a micro-benchmark of a device constant or of one op alone at the shapes the two
    kernels run, never the attention itself. The large buffers live only while their sample runs, so that the
    attention calls have the machine's free memory to themselves."""
    g = torch.Generator().manual_seed(0)
    rnd = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    p: dict = {}
    a, b, c = rnd(2048, 2048), rnd(2048, 2048), torch.empty(2048, 2048)
    p["matmul"] = lambda: 2 * 2048**3 / _per_call_s(lambda: torch.mm(a, b, out=c))
    qb, kv = min(torch_cpu_flash_q_block(n), n), min(TORCH_CPU_FLASH_KV_BLOCK, n)
    fq, fk, fs, fv, fo = rnd(qb, d), rnd(d, kv), torch.empty(qb, kv), rnd(kv, d), torch.empty(qb, d)

    def flash_blocks():  # the kernel's two gemms per block: scores = q k^T, out += p v
        torch.mm(fq, fk, out=fs)
        torch.mm(fs, fv, out=fo)
    p["flash_mm"] = lambda: 4 * qb * kv * d / _per_call_s(flash_blocks)
    fsm = rnd(qb, kv)
    block_softmax = lambda: torch.ops.aten._softmax.out(fsm, -1, False, out=fs)  # noqa: E731
    p["flash_softmax"] = lambda: fsm.numel() / _per_call_s(block_softmax)
    q, kt, v, o = rnd(heads, n, d), rnd(heads, d, n), rnd(heads, n, d), torch.empty(heads, n, d)

    def bmms():  # QK^T and PV of the math backend, into a score buffer mapped before the timing
        s = torch.empty(heads, n, n).fill_(0.0)
        flops = 2 * heads * n * n * d
        return {"qk_mm": flops / _per_call_s(lambda: torch.bmm(q, kt, out=s), 0),
                "pv_mm": flops / _per_call_s(lambda: torch.bmm(s, v, out=o), 0)}
    p["bmms"] = bmms
    src, dst = rnd(_MIB), torch.empty(_MIB)  # 4 MiB to 4 MiB: in the L3, out of the L2
    p["cache_copy"] = lambda: 2 * src.numel() * _FP32 / _per_call_s(lambda: dst.copy_(src))

    def dram_copy():  # 512 MiB to 512 MiB: far out of the caches
        big, big_dst = torch.empty(128 * _MIB).fill_(1.0), torch.empty(128 * _MIB).fill_(0.0)
        return 2 * big.numel() * _FP32 / _per_call_s(lambda: big_dst.copy_(big), 0)
    p["dram_copy"] = dram_copy

    def first_touch():  # a new 256 MiB buffer mapped, written once and unmapped, less writing one already mapped
        mapped = torch.empty(64 * _MIB).fill_(0.0)
        t0 = time.perf_counter()
        torch.empty(64 * _MIB).fill_(1.0)
        t1 = time.perf_counter()
        mapped.fill_(1.0)
        t2 = time.perf_counter()
        return 64 * _MIB * _FP32 / max((t1 - t0) - (t2 - t1), 1e-9)
    p["first_touch"] = first_touch
    rows = max(1, _IN_CACHE_ELEMENTS // n)
    x, y = rnd(rows, n) * 8, torch.empty(rows, n)
    mask, bm, bo = torch.zeros(rows, n), torch.ones(rows, n, dtype=torch.bool), torch.empty(rows, n, dtype=torch.bool)
    flags, zero, ninf = torch.zeros(rows, 1, dtype=torch.bool), torch.zeros(()), torch.tensor(float("-inf"))
    ops = {"scale": lambda: torch.mul(x, 0.3, out=y),
           "ones": lambda: torch.ones(rows, n, dtype=torch.bool, out=bo),
           "tril": lambda: torch.tril(bm, out=bo),
           "where_mask": lambda: torch.where(bm, zero, ninf, out=y),
           "add_mask": lambda: x.add_(mask),
           "softmax": lambda: torch.ops.aten._softmax.out(x, -1, False, out=y),
           "eq": lambda: torch.eq(x, ninf, out=bo),
           "all": lambda: torch.all(bm, -1, keepdim=True, out=flags),
           "where_p": lambda: torch.where(flags, zero, y, out=y)}
    for op in _MATH_OPS:
        p[op] = lambda fn=ops[op]: rows * n / _per_call_s(fn)
    return p


def modelled_s(n: int, heads: int, d: int, r: dict, l3_bytes: int) -> tuple[float, float]:
    """(flash, materialized) seconds of one layer's causal prefill attention of N tokens, from the kernels' counts
    (sim/model/attention_io.py) and the rates `r` measured here, each op by the roofline's `op_time`."""
    bw = lambda moved: r["cache_copy"] if moved <= l3_bytes else r["dram_copy"]  # noqa: E731
    qb = torch_cpu_flash_q_block(n)
    pairs = heads * tiled_score_pairs(n, qb, TORCH_CPU_FLASH_KV_BLOCK)
    kv_traffic = heads * tiled_attention_accesses(n, d, qb, TORCH_CPU_FLASH_KV_BLOCK) * _FP32
    flash = (rk.op_time(4.0 * d * pairs, kv_traffic, r["flash_mm"], bw(2 * n * d * _FP32)) + pairs / r["flash_softmax"]
             + torch_cpu_flash_fresh_bytes(n, d, heads, torch.get_num_threads()) / r["first_touch"])
    mat = 0.0
    for op, elements, moved, fresh in math_sdpa_pass_bytes(n, d, heads):
        if op in ("qk", "pv"):
            work, rate = 2.0 * heads * n * n * d, r[f"{op}_mm"]
        elif op == "out":  # written by PV: its traffic and first touch only
            work, rate = 0.0, 1.0
        else:
            work, rate = float(elements), r["scale" if op.startswith("scale_") else op]
        mat += rk.op_time(work, float(moved), rate, bw(moved)) + fresh / r["first_touch"]
    return flash, mat


def roofline_price(flops_per_s: float, bytes_per_s: float, heads: int, head_dim: int, materialized: bool) -> np.ndarray:
    """The simulator's roofline scalars for one layer of `heads` heads (as many KV heads) in fp32, with this CPU's
    square-matmul rate and DRAM bandwidth in place of a GPU's (efficiency 1: they are achieved)."""
    p = np.zeros(rk.NUM_PRICE)
    p[rk.P_FLOPS_PER_S], p[rk.P_BYTES_PER_S] = flops_per_s, bytes_per_s
    p[rk.P_ATTN_FLOPS_PER_PAIR] = 2.0 * heads * (head_dim + head_dim)  # QK^T and PV
    p[rk.P_KV_BYTES_PER_TOKEN_LAYER] = 2 * heads * head_dim * _FP32  # K and V
    p[rk.P_Q_BYTES_PER_TOKEN] = heads * (head_dim + head_dim) * _FP32  # Q read, O written
    if materialized:
        p[rk.P_MATERIALIZED] = 1.0
        p[rk.P_SCORE_BYTES_PER_PAIR] = heads * _FP32  # the math backend keeps fp32 scores
        p[rk.P_SOFTMAX_FLOPS_PER_PAIR] = heads * rk.SOFTMAX_FLOPS_PER_SCORE
    return p


def roofline_prefill_s(p: np.ndarray, tokens: int) -> float:
    chunk = np.array([tokens], dtype=np.int64)
    context = np.zeros(1, dtype=np.int64)
    return rk.attention_parts(p, tokens, chunk, context, 1, 0, 0, 1)[0]


def _load() -> str:
    some = Path("/proc/pressure/cpu").read_text().split()[1] if Path("/proc/pressure/cpu").exists() else "?"
    return f"load {os.getloadavg()[0]:.1f}, cpu pressure {some}"


def measure(n: int, heads: int, d: int, rounds: int) -> tuple[dict, dict, float]:
    """Medians over `rounds` rounds, each taking one sample of every rate and of both kernels: (rates, kernel
    seconds, MiB of pages first touched per materialized call, from the process's minor faults)."""
    p = probes(n, heads, d)
    calls = {k: prefill_call(k, heads=heads, kv_heads=heads, head_dim=d, tokens=n) for k in ("flash", "materialized")}
    samples: dict = {name: [] for name in calls}
    faults = []
    with torch.inference_mode():
        for fn in calls.values():  # warm-up: first-call allocation and dispatch
            fn()
        for _ in range(rounds):
            for name, fn in p.items():
                got = fn()
                for key, rate in (got.items() if isinstance(got, dict) else [(name, got)]):
                    samples.setdefault(key, []).append(rate)
            for name, fn in calls.items():
                f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                t0 = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - t0)
                if name == "materialized":
                    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    med = {k: float(np.median(v)) for k, v in samples.items()}
    fault_mib = float(np.median(faults)) * os.sysconf("SC_PAGE_SIZE") / _MIB
    return {k: v for k, v in med.items() if k not in calls}, {k: med[k] for k in calls}, fault_mib


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lengths", nargs="*", type=int, default=list(LENGTHS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5, help="samples of each rate and kernel per length")
    args = ap.parse_args()
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") != _MMAP_THRESHOLD:  # glibc reads it at start: run again with it
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": _MMAP_THRESHOLD}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    torch.set_num_threads(args.threads)
    h, d = args.heads, args.head_dim
    info = cpuinfo()
    flags = ", ".join(k for k in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile") if info.get(k))
    l2, l3 = cache_bytes(2), cache_bytes(3)
    print(f"machine: {info['cpu_model']} ({flags}), {os.cpu_count()} CPUs, L2 {l2 // 1024} KiB per core, L3 "
          f"{l3 // _MIB} MiB; torch {torch.__version__} on {args.threads} thread(s), cores "
          f"{sorted(os.sched_getaffinity(0))}, Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"one layer, {h} heads x d {d}, fp32, causal, no context; MALLOC_MMAP_THRESHOLD_={_MMAP_THRESHOLD}; "
          f"{_load()}")
    rows, rate_rows = [], []
    for n in args.lengths:
        rounds = args.rounds
        r, t, fault_mib = measure(n, h, d, rounds)
        flash_s, mat_s = modelled_s(n, h, d, r, l3)
        measured, modelled = t["flash"] / t["materialized"], flash_s / mat_s
        roof = (roofline_prefill_s(roofline_price(r["matmul"], r["dram_copy"], h, d, False), n)
                / roofline_prefill_s(roofline_price(r["matmul"], r["dram_copy"], h, d, True), n))
        fresh_mib = sum(f for *_, f in math_sdpa_pass_bytes(n, d, h)) / _MIB
        err = modelled / measured - 1
        rows.append(f"| {n:,} | {t['flash'] * 1e3:.1f} | {flash_s * 1e3:.1f} | {t['materialized'] * 1e3:.1f} | "
                    f"{mat_s * 1e3:.1f} | {measured:.3f} | **{modelled:.3f}** | {err:+.0%} | "
                    f"{'yes' if abs(err) <= GOAL else 'no'} | {roof:.3f} | {fault_mib:.0f} / {fresh_mib:.0f} |")
        rate_rows.append(f"| {n:,} | {r['matmul'] / 1e9:.0f} | {r['flash_mm'] / 1e9:.0f} | {r['qk_mm'] / 1e9:.0f} | "
                         f"{r['pv_mm'] / 1e9:.0f} | {r['flash_softmax'] / 1e9:.2f} | {r['softmax'] / 1e9:.2f} | "
                         + " | ".join(f"{r[op] / 1e9:.2f}" for op in _MATH_OPS if op != "softmax")
                         + f" | {r['cache_copy'] / 1e9:.0f} | {r['dram_copy'] / 1e9:.0f} | "
                         f"{r['first_touch'] / 1e9:.2f} | {rounds} | {_load()} |")
        print(rows[-1], flush=True)
    print("\n| prompt tokens | flash ms measured | flash ms modelled | materialized ms measured | materialized ms "
          "modelled | measured flash/mat | modelled flash/mat | modelled / measured | within 15% | simulator roofline "
          "flash/mat | pages first touched per materialized call, MiB: measured / modelled |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    print("\nRates measured beside each length (medians; GFLOP/s, G elements/s, GB/s):\n")
    print("| tokens | square matmul | flash blocks mm | QK^T bmm | PV bmm | flash block softmax | softmax rows | "
          + " | ".join(op for op in _MATH_OPS if op != "softmax")
          + " | L3 copy | DRAM copy | first touch | rounds | after |")
    print("| --- " * 20 + "|")
    print("\n".join(rate_rows))


if __name__ == "__main__":
    main()
