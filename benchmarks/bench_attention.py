"""The attention-kernel what-if against this machine (issue 33): flash / materialized prefill-time ratio as the
simulator prices it for this CPU, against the ratio measured with torch SDPA.

For each prompt length N, one layer's causal attention of a prompt (no earlier context) runs on this CPU with
torch's math backend (the scores materialized) and its flash-attention-for-CPU backend (the only tiled backend torch
has on a CPU), fp32, few heads to keep it affordable (`calibrate/kernels/attention_backends.py`).

The modelled ratio is the simulator's own price (`sim.cost.roofline_kernel.attention_parts`, through
`RooflineCostModel` of a one-layer model of this shape) on a device description of this CPU (`GPUSpec`):

- its matmul rate (a square fp32 `torch.mm`), its memory bandwidth (a 512 MiB copy), its last-level cache (the
  largest copy footprint that still runs near a 4 MiB copy's bandwidth, at most the L3 sysfs names:
  `reached_cache_bytes`; its bandwidth the 4 MiB copy's), the rate at which it first touches new memory (page
  faults: torch's CPU allocator keeps no cache, and with glibc's mmap threshold pinned at its default 128 KiB,
  which this script does, each call maps fresh pages; the page faults counted per call agree with the model's new
  buffers), and each elementwise pass's own work per element (the pass alone on operands in the L2,
  `pass_probes`: on one core the select, compare and softmax passes are compute-bound, and that work adds to their
  memory time), all micro-benchmarks of device constants, never the attention timings; nothing is fitted;
- torch's CPU flash kernel's key block (512, `attention_io.TORCH_CPU_FLASH_KV_BLOCK`, from its source).

The materialized kernel's passes are `attention_io.MATH_SDPA_PASSES` (what the simulator prices on every device); the
flash kernel is the roofline's one fused op over the pairs it computes. Each rate is sampled in the same rounds as
the attention timings (a sample of each per round, medians over rounds: the machine is shared). Beside it, the same
pricing without the CPU's terms (no cache, no first touch, no key block: what a catalog GPU gets).

    taskset -c 1 .venv/bin/python benchmarks/bench_attention.py [--threads 1] [--heads 2] [--head-dim 128] [lengths...]

On a GPU (`--device cuda`): bf16, 8 heads × d 128 (a TP-4 shard's query heads of an 8B model, one KV head per query
head: the math backend would repeat grouped KV heads, a pass the model does not have), each kernel one CUDA graph
replayed (`time_prefill`); the device constants are a bf16 and an fp32 8192³ matrix product (the materialized
kernel computes in fp32: `GPUSpec.fp32_flops_per_s`) and a 2 GiB copy by a kernel, measured beside each length,
and the time per kernel of a run of tiny ones in one graph (a launch's fixed cost: recorded, not priced yet).
Two prices: the simulator's roofline on a device of those measured rates (efficiencies 1), and on the catalog GPU
named by `--gpu` as every simulation prices it. `--csv` writes the rows; `--reprice` prices a written CSV's rows again
with today's simulator, on any machine (a stored run without the fp32 rate takes the catalog's peak for it).

    python3 benchmarks/bench_attention.py --device cuda --gpu h200 [--csv rows.csv]
    .venv/bin/python benchmarks/bench_attention.py --reprice benchmarks/results/attention_h200_flash_vs_materialized.csv
    (another shape's CSV: add --heads 32 --head-dim 128; --copy-tb-s 4.30 prices with another memory rate)

Prints the machine, the rates and one Markdown row per length (benchmarks/results/attention.md holds the last run).
"""

from __future__ import annotations

import argparse
import math
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
from sim.cost.roofline import RooflineCostModel  # noqa: E402
from sim.model.attention_io import ELEMENTWISE_PASSES, TORCH_CPU_FLASH_KV_BLOCK, math_sdpa_passes  # noqa: E402
from sim.model.specs import GPUSpec, ModelSpec  # noqa: E402

LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)
GOAL = 0.15  # the goal: modelled ratio within 15% of the measured one at every length
_FP32 = 4
_MIB = 1 << 20
# glibc's default mmap threshold, pinned: every buffer of 128 KiB or more is mapped fresh (and first touched) on
# each call. Left dynamic, glibc raises it after a free (up to 32 MiB), and whether a kernel's 1-32 MiB buffers are
# first touched depends on what the process freed before: at 1,024 tokens the math backend took 16 or 25 ms.
_MMAP_THRESHOLD = "131072"


def cache_bytes(level: int = 3) -> int:
    """The size of this CPU's cache at `level` (sysfs)."""
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        kind = (index / "type").read_text().strip()
        if (index / "level").read_text().strip() == str(level) and kind != "Instruction":
            size = (index / "size").read_text().strip()
            return int(size[:-1]) * {"K": 1 << 10, "M": 1 << 20}[size[-1]]
    raise RuntimeError(f"no level-{level} cache in sysfs")


# Copy sizes (MiB per buffer) swept for the cache one core reaches: a copy's footprint is twice its size.
CACHE_SWEEP_MIB = (2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256)


def reached_cache_bytes(in_cache_bps: float, dram_bps: float, l3_bytes: int) -> int:
    """The cache this core reaches, measured: the largest copy footprint (source and destination) whose bandwidth
    is still nearer, on a log scale, to the in-cache copy's than to the DRAM copy's, at most sysfs's L3. sysfs names
    the host's last-level cache (on a shared guest, 480 MiB for 2 vCPUs), not what one core of a shared host gets
    of it: on 11-29's Intel guest a copy ran at 27-29 GB/s up to a 64 MiB footprint and at 13-14 beyond 128 MiB."""
    threshold = (in_cache_bps * dram_bps) ** 0.5
    g = torch.Generator().manual_seed(0)
    reached = 0
    for mib in CACHE_SWEEP_MIB:
        footprint = 2 * mib * _MIB
        if footprint > l3_bytes:
            break
        src, dst = torch.randn(mib * _MIB // _FP32, generator=g), torch.empty(mib * _MIB // _FP32).fill_(0.0)
        bps = max(footprint / _per_call_s(lambda: dst.copy_(src), 0.02) for _ in range(3))  # best of 3
        del src, dst
        if bps < threshold:
            break
        reached = footprint
    return reached


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


def probes() -> dict:
    """name -> a function returning one sample of a device constant (FLOP/s or bytes/s). The large buffers live only
    while their sample runs, so that the attention calls have the machine's free memory to themselves."""
    g = torch.Generator().manual_seed(0)
    p: dict = {}
    a, b, c = torch.randn(2048, 2048, generator=g), torch.randn(2048, 2048, generator=g), torch.empty(2048, 2048)
    p["matmul"] = lambda: 2 * 2048**3 / _per_call_s(lambda: torch.mm(a, b, out=c))
    src, dst = torch.randn(_MIB, generator=g), torch.empty(_MIB)  # 4 MiB to 4 MiB: in the L3, out of the L2
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
    p.update({f"pass {op}": fn for op, fn in pass_probes().items()})
    return p


# Each elementwise pass of the math backend (attention_io.MATH_SDPA_PASSES, fp32 inputs) run alone on operands that
# stay in this core's L2 (131,072 elements: 512 KiB of fp32), into buffers allocated beforehand, as torch 2.13's
# `_scaled_dot_product_attention_math` calls it (torch.profiler: the op and its operands' shapes): its own work per
# element, which a CPU core pays on top of moving the data (`GPUSpec.pass_s_per_element`). The memory traffic and the
# first touch of the full-size pass are priced from the other constants.
_PROBE_HEADS, _PROBE_ROWS, _PROBE_KEYS = 2, 128, 512  # scores: heads x rows x keys; the mask: (heads x rows) x keys
# The elementwise passes the math backend runs on fp32 inputs, in ELEMENTWISE_PASSES' order: the ones probed
FP32_PASSES = [op for op in ELEMENTWISE_PASSES if op in {row[0] for row in math_sdpa_passes(_FP32)}]


def pass_probes() -> dict:
    """op -> a function returning one sample of that pass's seconds per element, its operands in cache."""
    g = torch.Generator().manual_seed(0)
    h, r, k, d = _PROBE_HEADS, _PROBE_ROWS, _PROBE_KEYS, 128
    q = torch.randn(1, h, k, d, generator=g)  # 131,072 elements, as many as the scores
    key_t = torch.randn(1, h, k, d, generator=g).transpose(-2, -1)  # K^T: scaled as a transposed view
    qs, ks = torch.empty_like(q), torch.empty(1, h, d, k)
    scale = torch.scalar_tensor(d ** -0.25)
    mask, low = torch.empty(h * r, k, dtype=torch.bool), torch.empty(h * r, k, dtype=torch.bool)
    mask_f = torch.empty(h * r, k)
    zero, neg_inf = torch.scalar_tensor(0.0), torch.scalar_tensor(-math.inf)
    scores, probs = torch.randn(1, h, r, k, generator=g), torch.empty(1, h, r, k)
    row_mask = torch.tril(torch.ones(r, k, dtype=torch.bool), diagonal=k - r)  # the last rows of a causal prompt
    score_mask = torch.where(row_mask, zero, neg_inf)
    is_neg_inf, all_rows = torch.empty(1, h, r, k, dtype=torch.bool), torch.empty(1, h, r, 1, dtype=torch.bool)
    calls = {
        "scale_q": (lambda: torch.mul(q, scale, out=qs), q.numel()),
        "scale_k": (lambda: torch.mul(key_t, scale, out=ks), q.numel()),
        "ones": (lambda: torch.ones(h * r, k, dtype=torch.bool, out=mask), mask.numel()),
        "tril": (lambda: torch.tril(mask, out=low), mask.numel()),
        "where_mask": (lambda: torch.where(low, zero, neg_inf, out=mask_f), mask.numel()),
        "add_mask": (lambda: scores.add_(score_mask), scores.numel()),
        "softmax": (lambda: torch.ops.aten._softmax.out(scores, -1, False, out=probs), scores.numel()),
        "eq": (lambda: torch.isneginf(scores, out=is_neg_inf), scores.numel()),  # torch 2.13's _safe_softmax
        "all": (lambda: torch.all(is_neg_inf, dim=-1, keepdim=True, out=all_rows), scores.numel()),
        "where_p": (lambda: torch.where(all_rows, zero, probs, out=probs), scores.numel()),
    }
    assert set(calls) == set(FP32_PASSES)
    return {op: (lambda fn=fn, n=n: _per_call_s(fn) / n) for op, (fn, n) in calls.items()}


def this_cpu(r: dict, l3_bytes: int, terms: bool = True, own_work: bool = True) -> GPUSpec:
    """This CPU as the simulator's device, from the rates `r` measured here (efficiencies 1: they are achieved).
    `terms` False: without its cache, first touch, flash key block and the passes' own work, as a catalog GPU is
    priced; `own_work` False: without the passes' own work alone."""
    extra = dict(first_touch_bytes_per_s=r["first_touch"], flash_key_block=TORCH_CPU_FLASH_KV_BLOCK) if terms else {}
    if terms and l3_bytes:
        extra.update(cache_bytes=l3_bytes, cache_bytes_per_s=r["cache_copy"])
    if terms and own_work:
        extra.update(pass_s_per_element={op: r[f"pass {op}"] for op in ELEMENTWISE_PASSES if f"pass {op}" in r})
    # One measured matmul rate, fp32: the benchmark's inputs are fp32, so both kernels compute in it.
    return GPUSpec(name="this-cpu", bf16_flops_per_s=r["matmul"], fp32_flops_per_s=r["matmul"],
                   hbm_bytes=os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), hbm_bytes_per_s=r["dram_copy"],
                   interconnect_bytes_per_s=1e9, host_link_bytes_per_s=1e9, price_per_hour=0, compute_efficiency=1,
                   memory_efficiency=1, step_overhead_s=0, **extra)


def _cost(device: GPUSpec, heads: int, d: int, n: int, kernel: str, dtype: str = "fp32") -> RooflineCostModel:
    """The simulator's roofline for one layer of `heads` heads x d in `dtype` on `device`."""
    model = ModelSpec(name=f"bench-{heads}x{d}", num_layers=1, hidden_size=heads * d, num_attention_heads=heads,
                      num_kv_heads=heads, head_dim=d, ffn_size=1, vocab_size=1, max_context=max(n, 1), attention="mha")
    return RooflineCostModel(model, device, kv_dtype=dtype, attention_dtype=dtype, attention_kernel=kernel)


def simulated_s(device: GPUSpec, heads: int, d: int, n: int, kernel: str, dtype: str = "fp32") -> float:
    """The simulator's price of one layer's causal prefill attention of N tokens (no context) on `device`."""
    chunk, context = np.array([n], dtype=np.int64), np.zeros(1, dtype=np.int64)
    return rk.attention_parts(_cost(device, heads, d, n, kernel, dtype)._pack()[0], n, chunk, context, 1, 0, 0, 1)[0]


def simulated_fresh_bytes(device: GPUSpec, heads: int, d: int, n: int) -> float:
    """The bytes the simulator's materialized kernel first-touches for that prefill (its pack's per-pair, per-query
    and per-key terms: N x N pairs, N queries, N keys)."""
    per_pair, per_query, per_key = _cost(device, heads, d, n, "materialized").fresh_bytes
    return n * n * per_pair + n * per_query + n * per_key


def _load() -> str:
    some = Path("/proc/pressure/cpu").read_text().split()[1] if Path("/proc/pressure/cpu").exists() else "?"
    return f"load {os.getloadavg()[0]:.1f}, cpu pressure {some}"


def measure(n: int, heads: int, d: int, rounds: int) -> tuple[dict, dict, float]:
    """Medians over `rounds` rounds, each taking one sample of every device constant and of both kernels: (rates,
    kernel seconds, MiB of pages first touched per materialized call, from the process's minor faults)."""
    p = probes()
    calls = {k: prefill_call(k, heads=heads, kv_heads=heads, head_dim=d, tokens=n) for k in ("flash", "materialized")}
    samples: dict = {name: [] for name in (*p, *calls)}
    faults = []
    with torch.inference_mode():
        for fn in calls.values():  # warm-up: first-call allocation and dispatch
            fn()
        for _ in range(rounds):
            for name, fn in p.items():
                samples[name].append(fn())
            for name, fn in calls.items():
                f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                t0 = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - t0)
                if name == "materialized":
                    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    med = {k: float(np.median(v)) for k, v in samples.items()}
    fault_mib = float(np.median(faults)) * os.sysconf("SC_PAGE_SIZE") / _MIB
    return {k: med[k] for k in p}, {k: med[k] for k in calls}, fault_mib


# --- on a GPU ------------------------------------------------------------------------------------------

GPU_HEADS = 8


KERNEL_RUN = 100


def gpu_rates(device: str) -> dict:
    """A bf16 and an fp32 8192³ matrix product (FLOP/s; fp32 as torch runs it by default, TF32 not allowed: what the
    materialized kernel's fp32 matmuls reach), a 2 GiB copy by a kernel (bytes read + written per second) and
    the time per kernel of a run of tiny ones, each as one CUDA graph replayed (eagerly timed on a CPU: a dry run of
    this code)."""
    from calibrate.timing import time_cpu, time_cuda_graph
    timer = (lambda fn: time_cuda_graph(fn, budget_s=0.3)) if device == "cuda" else (lambda fn: time_cpu(fn, 0.05))
    size = 8192 if device == "cuda" else 256
    rates = {}
    for key, dtype in (("matmul", torch.bfloat16), ("matmul_fp32", torch.float32)):
        a = torch.randn(size, size, device=device, dtype=dtype)
        b, c = torch.randn_like(a), torch.empty_like(a)
        rates[key] = 2 * size ** 3 / timer(lambda: torch.mm(a, b, out=c)).median_s
    elements = (1 << 30) if device == "cuda" else (1 << 22)  # bf16: 2 GiB on a GPU
    src, dst = torch.empty(elements, device=device, dtype=torch.bfloat16).fill_(1.0), torch.empty(
        elements, device=device, dtype=torch.bfloat16)
    # The copy as a kernel (a multiply by one), the bandwidth the attention kernels' passes meet. A 2 GiB `copy_`
    # captured in a CUDA graph is a memcpy node: on the H200 of 12-04 it ran at 2.77 TB/s, where this kernel, and
    # the same copy_ run eagerly or at 512 MiB, reached 4.2-4.3 (results/attention.md).
    rates["copy"] = 2 * 2 * elements / timer(lambda: torch.mul(src, 1.0, out=dst)).median_s
    # Seconds per kernel of a run of tiny ones (a one-element add, KERNEL_RUN of them in one graph): the fixed cost
    # of a launch inside a CUDA graph, which no rate above has. Recorded beside the rows; no price uses it yet.
    one = torch.zeros(1, device=device)
    rates["kernel_s"] = timer(lambda: [one.add_(1.0) for _ in range(KERNEL_RUN)]).median_s / KERNEL_RUN
    return rates  # its buffers go with it; the caller empties the CUDA cache


CSV_COLUMNS = ("tokens,flash_s,materialized_s,measured_ratio,simulated_ratio_measured_rates,simulated_ratio_catalog,"
               "flash_sim_s,materialized_sim_s,flash_catalog_s,materialized_catalog_s,matmul_flops_per_s,"
               "copy_bytes_per_s,fp32_matmul_flops_per_s,kernel_s")


def gpu_row(n: int, t: dict, r: dict, catalog: GPUSpec, h: int, d: int) -> tuple[str, list]:
    """One length's Markdown row and CSV values: the measured kernel times `t` against the simulator's prices on a
    device of the measured rates `r` (efficiencies 1; the fp32 rate, where `r` lacks it, the catalog's peak) and on
    the catalog GPU."""
    fp32 = r.get("matmul_fp32") or catalog.fp32_flops_per_s
    rated = catalog.model_copy(update=dict(name="measured-rates", bf16_flops_per_s=r["matmul"], fp32_flops_per_s=fp32,
                                           hbm_bytes_per_s=r["copy"], compute_efficiency=1, memory_efficiency=1))
    sim = {k: simulated_s(rated, h, d, n, k, "bf16") for k in t}
    cat = {k: simulated_s(catalog, h, d, n, k, "bf16") for k in t}
    measured = t["flash"] / t["materialized"]
    modelled, by_catalog = sim["flash"] / sim["materialized"], cat["flash"] / cat["materialized"]
    err = modelled / measured - 1
    fp32_text = (f"{r['matmul_fp32'] / 1e12:.1f}" if r.get("matmul_fp32") else
                 f"({fp32 / 1e12:.0f}: catalog)" if fp32 else "(none: the bf16 rate)")
    row = (f"| {n:,} | {t['flash'] * 1e3:.3f} | {sim['flash'] * 1e3:.3f} | {cat['flash'] * 1e3:.3f} | "
           f"{t['materialized'] * 1e3:.3f} | {sim['materialized'] * 1e3:.3f} | {cat['materialized'] * 1e3:.3f} | "
           f"{measured:.3f} | **{modelled:.3f}** | {err:+.1%} | {'yes' if abs(err) <= GOAL else 'no'} | "
           f"{by_catalog:.3f} ({by_catalog / measured - 1:+.1%}) | {r['matmul'] / 1e12:.0f} | {fp32_text} | "
           f"{r['copy'] / 1e12:.2f} |")
    values = [n, t["flash"], t["materialized"], measured, modelled, by_catalog, sim["flash"], sim["materialized"],
              cat["flash"], cat["materialized"], r["matmul"], r["copy"], r.get("matmul_fp32", ""),
              r.get("kernel_s", "")]
    return row, values


def print_table(columns: list[str], rows: list[str]) -> None:
    """A Markdown table: its header, the separator and the rows (each already a `| ... |` line)."""
    print("| " + " | ".join(columns) + " |")
    print("| --- " * len(columns) + "|")
    print("\n".join(rows))


GPU_COLUMNS = ["prompt tokens", "flash ms measured", "flash ms simulated (measured rates)",
               "flash ms simulated (catalog)", "materialized ms measured", "materialized ms simulated (measured rates)",
               "materialized ms simulated (catalog)", "measured flash/mat", "simulated flash/mat",
               "simulated / measured", "within 15%", "catalog flash/mat (vs measured)", "bf16 matmul TFLOP/s",
               "fp32 matmul TFLOP/s", "copy TB/s"]


def print_gpu_table(rows: list[str]) -> None:
    print()
    print_table(GPU_COLUMNS, rows)


def reprice(args) -> None:
    """The rows of a stored `--csv` (a GPU run's kernel times and device constants) priced again by today's
    simulator: a change to the model re-checked without a GPU. Nothing is measured here."""
    import pandas as pd
    from sim.model.catalog import get_gpu
    catalog = get_gpu(args.gpu, "--gpu")
    try:
        stored = pd.read_csv(args.reprice)
    except (OSError, ValueError) as e:
        print(f"--reprice: '{args.reprice}' is not a readable CSV ({e}); allowed: a file bench_attention.py --csv "
              f"wrote", file=sys.stderr)
        sys.exit(2)
    needed = {"tokens", "flash_s", "materialized_s", "matmul_flops_per_s", "copy_bytes_per_s"}
    if not needed <= set(stored.columns):
        print(f"--reprice: '{args.reprice}' lacks columns {sorted(needed - set(stored.columns))}; allowed: a file "
              f"bench_attention.py --csv wrote", file=sys.stderr)
        sys.exit(2)
    h, d = args.heads or GPU_HEADS, args.head_dim
    copy = f"; the copy rate {args.copy_tb_s} TB/s (--copy-tb-s), not the stored one" if args.copy_tb_s else ""
    print(f"re-priced: {args.reprice} ({len(stored)} rows, kernels and constants as measured there{copy}); one layer, "
          f"{h} heads x d {d} (MHA), bf16, causal, no context; catalog GPU {catalog.name}; "
          f"{time.strftime('%Y-%m-%d %H:%M')} UTC")
    rows = []
    for rec in stored.itertuples():
        fp32 = getattr(rec, "fp32_matmul_flops_per_s", None)
        copy_rate = args.copy_tb_s * 1e12 if args.copy_tb_s else rec.copy_bytes_per_s
        r = {"matmul": rec.matmul_flops_per_s, "copy": copy_rate}
        if fp32 is not None and pd.notna(fp32):  # a run before the column, or a blank cell: the catalog's
            r["matmul_fp32"] = float(fp32)
        rows.append(gpu_row(int(rec.tokens), {"flash": rec.flash_s, "materialized": rec.materialized_s}, r, catalog,
                            h, d)[0])
    print_gpu_table(rows)


def gpu_main(args) -> None:
    from calibrate.kernels.attention_backends import describe, time_prefill
    from sim.model.catalog import get_gpu
    device, h, d = args.device, args.heads or GPU_HEADS, args.head_dim
    if args.csv and Path(args.csv).exists():  # checked before the long work; never overwritten
        print(f"--csv: '{args.csv}' exists; allowed: a path that does not exist yet", file=sys.stderr)
        sys.exit(2)
    catalog = get_gpu(args.gpu, "--gpu")
    name = torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu"
    from calibrate.cli import device_info
    cuda = (f"cuda {torch.version.cuda}, driver {device_info(torch, device)['driver']}" if device == "cuda"
            else "no CUDA (a dry run)")
    print(f"machine: {name}, {cuda}, torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M')} UTC; one layer, "
          f"{h} heads x d {d} (MHA), bf16, causal, no context; flash: {describe('flash', device)}; materialized: "
          f"{describe('materialized', device)}; TF32 matmuls allowed: {torch.backends.cuda.matmul.allow_tf32}; "
          f"catalog GPU {catalog.name}")
    rows, csv = [], [CSV_COLUMNS]
    for n in args.lengths:
        r = gpu_rates(device)
        if device == "cuda":
            torch.cuda.empty_cache()
        t = {k: time_prefill(k, heads=h, kv_heads=h, head_dim=d, tokens=n, dtype=torch.bfloat16, device=device,
                             budget_s=0.5).median_s for k in ("flash", "materialized")}
        if device == "cuda":
            torch.cuda.empty_cache()
        row, values = gpu_row(n, t, r, catalog, h, d)
        rows.append(row)
        csv.append(",".join(str(v) for v in values))
        print(row, flush=True)
    print_gpu_table(rows)
    if args.csv:
        with open(args.csv, "x") as f:  # "x": a file that appeared meanwhile is not overwritten either
            f.write("\n".join(csv) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lengths", nargs="*", type=int, default=list(LENGTHS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--heads", type=int, default=0, help="query heads (default: 2 on a CPU, 8 on a GPU)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="cuda: the GPU mode (bf16, CUDA graphs)")
    ap.add_argument("--gpu", default="h200", help="--device cuda: the catalog GPU the simulation prices by default")
    ap.add_argument("--gpu-dry-run", action="store_true", help="the GPU mode's code on this CPU, tiny sizes")
    ap.add_argument("--csv", default="", help="--device cuda: write the rows here")
    ap.add_argument("--reprice", default="", help="a CSV --csv wrote: price its measured rows again (no GPU needed)")
    ap.add_argument("--copy-tb-s", type=float, default=0.0,
                    help="--reprice: price with this memory rate (TB/s) in place of the stored copy constant")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5, help="samples of each rate and kernel per length")
    args = ap.parse_args()
    if args.copy_tb_s and not (args.reprice and args.copy_tb_s > 0):
        print(f"--copy-tb-s: {args.copy_tb_s} {'without --reprice' if not args.reprice else 'is not positive'}; "
              f"allowed: a positive TB/s with --reprice (a run measures its own copy rate)", file=sys.stderr)
        sys.exit(2)
    if args.reprice:
        return reprice(args)
    if args.device == "cuda" or args.gpu_dry_run:
        return gpu_main(args)
    args.heads = args.heads or 2
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
    rows, rate_rows, pass_rows = [], [], []
    for n in args.lengths:
        r, t, fault_mib = measure(n, h, d, args.rounds)
        reached = reached_cache_bytes(r["cache_copy"], r["dram_copy"], l3)
        cpu, bare, sysfs = this_cpu(r, reached), this_cpu(r, l3, terms=False), this_cpu(r, l3)
        flash_s, mat_s = simulated_s(cpu, h, d, n, "flash"), simulated_s(cpu, h, d, n, "materialized")
        measured, modelled = t["flash"] / t["materialized"], flash_s / mat_s
        without = simulated_s(bare, h, d, n, "flash") / simulated_s(bare, h, d, n, "materialized")
        with_sysfs = simulated_s(sysfs, h, d, n, "flash") / simulated_s(sysfs, h, d, n, "materialized")
        no_own = this_cpu(r, reached, own_work=False)
        without_own = simulated_s(no_own, h, d, n, "flash") / simulated_s(no_own, h, d, n, "materialized")
        fresh_mib = simulated_fresh_bytes(cpu, h, d, n) / _MIB
        err = modelled / measured - 1
        rows.append(f"| {n:,} | {t['flash'] * 1e3:.1f} | {flash_s * 1e3:.1f} | {t['materialized'] * 1e3:.1f} | "
                    f"{mat_s * 1e3:.1f} | {measured:.3f} | **{modelled:.3f}** | {err:+.1%} | "
                    f"{'yes' if abs(err) <= GOAL else 'no'} | {with_sysfs / measured - 1:+.1%} | "
                    f"{without_own / measured - 1:+.1%} | {without:.3f} | {fault_mib:.0f} / {fresh_mib:.0f} |")
        pass_rows.append(f"| {n:,} | " + " | ".join(f"{r[f'pass {op}'] * 1e9:.3f}" for op in FP32_PASSES) + " |")
        rate_rows.append(f"| {n:,} | {r['matmul'] / 1e9:.0f} | {r['cache_copy'] / 1e9:.0f} | "
                         f"{r['dram_copy'] / 1e9:.0f} | {r['first_touch'] / 1e9:.2f} | {reached // _MIB} | "
                         f"{args.rounds} | {_load()} |")
        print(rows[-1], flush=True)
    print()
    print_table(["prompt tokens", "flash ms measured", "flash ms simulated", "materialized ms measured",
                 "materialized ms simulated", "measured flash/mat", "simulated flash/mat", "simulated / measured",
                 "within 15%", "simulated / measured with sysfs's L3 as the cache",
                 "simulated / measured without the passes' own work", "simulated without the CPU's terms",
                 "pages first touched per materialized call, MiB: measured / modelled"], rows)
    print("\nDevice constants measured beside each length (medians; GFLOP/s, GB/s):\n")
    print_table(["tokens", "matmul", "L3 copy", "DRAM copy", "first touch", "cache reached, MiB", "rounds", "after"],
                rate_rows)
    print("\nEach pass's own work, ns per element, its operands in cache (medians, measured beside each length):\n")
    print_table(["tokens", *FP32_PASSES], pass_rows)


if __name__ == "__main__":
    main()
