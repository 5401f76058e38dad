"""A lead for issue 33, read off stored GPU rows (nothing measured here): does torch's FlashAttention-2 take the time
its tiles over the GPU's multiprocessors say?

torch's flash SDPA on an H200 (sm_90) runs FlashAttention-2's forward kernel with 128-query tiles and 64-key tiles at
head dim 128, 128-key tiles at 64 (`Flash_fwd_kernel_traits<Headdim, 128, 64, 4>` off sm_8x, `<64, 128, 128, 4>`:
FlashAttention-2's flash_fwd_launch_template.h as public copies of it have them; torch 2.11's own copy under
aten/src/ATen/native/transformers/cuda/flash_attn/ was not read); one thread block per (query tile, head),
launched query tile fastest, each walking its key tiles up to the causal diagonal. The model: `slots` blocks run at
once (132 multiprocessors x blocks per multiprocessor), each block a key tile at a time at one rate; blocks start in
launch order on the first free slot; a call costs a fixed time plus the last block's end. Its two numbers (the fixed
time, the rate) are fitted on the shapes other than the issue's (32 x d128, 16 x d64, 64 x d128, 12-04) and the
issue's 8 x d128 rows are held out.

    .venv/bin/python benchmarks/bench_attention_fa2_tiles.py
"""

from __future__ import annotations

import heapq
import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

RESULTS = Path(__file__).resolve().parent / "results"
MULTIPROCESSORS = 132  # an H200 (torch.cuda.get_device_properties: 132 on the 10-28 machine, KINDS.md)
QUERY_TILE = 128
KEY_TILE = {128: 64, 64: 128}  # head dim -> key tile, sm_90
SHAPES = {"h8_d128": (8, 128), "h32_d128": (32, 128), "h16_d64": (16, 64), "h64_d128": (64, 128)}
HELD_OUT = "h8_d128"


def last_block_end_tiles(heads: int, head_dim: int, tokens: int, slots: int) -> float:
    """When the last block of a causal prefill ends, in key tiles of one slot, blocks started in launch order."""
    query_tiles = math.ceil(tokens / QUERY_TILE)
    work = [math.ceil(min(tokens, (i + 1) * QUERY_TILE) / KEY_TILE[head_dim]) for i in range(query_tiles)]
    free = [0.0] * min(slots, heads * query_tiles)
    end = 0.0
    for _ in range(heads):
        for tiles in work:
            done = heapq.heappop(free) + tiles
            end = max(end, done)
            heapq.heappush(free, done)
    return end


def tile_flops(head_dim: int) -> int:
    """One query tile against one key tile: QK^T and PV, 2 FLOPs a multiply-add each."""
    return 4 * QUERY_TILE * KEY_TILE[head_dim] * head_dim


def predicted_s(fixed_us: float, tflops_per_slot: float, rows, slots: int) -> np.ndarray:
    return np.array([fixed_us * 1e-6 + last_block_end_tiles(h, d, n, slots) * tile_flops(d) / (tflops_per_slot * 1e12)
                     for _, h, d, n, _ in rows])


def main() -> None:
    rows = []
    for name, (h, d) in SHAPES.items():
        for r in pd.read_csv(RESULTS / f"attention_h200_1204_{name}.csv").itertuples():
            rows.append((name, h, d, int(r.tokens), r.flash_s))
    fit = [r for r in rows if r[0] != HELD_OUT]
    held = [r for r in rows if r[0] == HELD_OUT]
    measured_fit, measured_held = np.array([r[4] for r in fit]), np.array([r[4] for r in held])
    print("| blocks per multiprocessor | fixed µs | TFLOP/s a block (all slots) | fitted rows: median / max |err| | "
          + " | ".join(f"8 x d128 {r[3]:,}" for r in held) + " |")
    print("| --- " * (4 + len(held)) + "|")
    for per_sm in (1, 2, 3):
        slots = MULTIPROCESSORS * per_sm
        res = least_squares(lambda p: predicted_s(p[0], p[1], fit, slots) / measured_fit - 1, x0=[8.0, 2.0],
                            bounds=([0.0, 0.1], [50.0, 20.0]))
        fit_err = np.abs(predicted_s(*res.x, fit, slots) / measured_fit - 1)
        held_err = predicted_s(*res.x, held, slots) / measured_held - 1
        print(f"| {per_sm} | {res.x[0]:.2f} | {res.x[1]:.2f} ({res.x[1] * slots:.0f}) | {np.median(fit_err):.1%} / "
              f"{fit_err.max():.1%} | " + " | ".join(f"{e:+.0%}" for e in held_err) + " |")


if __name__ == "__main__":
    main()
