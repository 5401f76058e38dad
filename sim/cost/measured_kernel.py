"""`MeasuredCostModel.step_cost`'s time compiled with numba, for the compiled engine core (`sim.compiled`).

`MeasuredCostModel.compiled_params()` packs the model's interpolation tables with `pack`; `step_time` repeats
`step_cost`'s time operation by operation (`Curve`, `Grid2D`, `_attention_s`, `_per_layer_token_s`), so it is
bit-identical (tests/unit/test_measured_kernel.py). A point outside the measured tables is priced as the Python
model prices it (the ratio held at the nearest edge) and written to the pack's note log; after the run,
`MeasuredCostModel.note_compiled_outside` lists each such point in the model's notes, as pricing it in Python
does. Only when that log is full does a price come back NaN (the core then hands the run to the Python engine).
Covered: dense layers (no MoE), no MLA, no sliding window, plans without drafts, padding or swaps.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from sim.cost import numba_cache  # noqa: F401  (drops stale numba caches before anything loads)

# Indices into the float64 array `params[0]`.
(P_FLOPS_PER_S, P_BYTES_PER_S, P_MIN_KERNEL_S, P_OVERHEAD_S, P_ALLREDUCE, P_AR_LINK_BYTES_PER_S, P_AR_LATENCY_S,
 P_TP, P_HIDDEN, P_HQ, P_HKV, P_HEAD_DIM, P_KV_BYTES, P_ELEMENTWISE_0, P_ELEMENTWISE_1, P_ELEMENTWISE_2,
 P_LM_HEAD, P_AR_CURVE) = range(18)
NUM_MEASURED_PARAMS = 18
ALLREDUCE_NONE, ALLREDUCE_CURVE, ALLREDUCE_CATALOG = 0, 1, 2
# Columns of a curve row: first grid index, grid length, shape kind, three shape numbers.
C_START, C_LEN, C_KIND, C_A, C_B, C_C = range(6)
SHAPE_GEMM, SHAPE_ALLREDUCE = 0, 1  # (n, k, weight bytes) | (latency, GPUs, bus bytes/s)
_ACT_BYTES = 2  # as sim.cost.measured
# Token counts below this have their per-layer terms and LM head remembered (the pack's two memo arrays; -1: not
# computed yet): they depend on the count alone, as `MeasuredCostModel._per_layer_token_s` caches them.
MEMO_TOKENS = 8192
# The note log (`pack`'s last two arrays): one row per point priced outside the tables (kind, curve row, x, y),
# a point repeated on consecutive rows written once; and the number of rows written.
NOTE_CAP = 1 << 16
NOTE_CURVE, NOTE_PREFILL, NOTE_DECODE = 0, 1, 2


def pack(cost_model) -> tuple:
    """(scalars, curves, curve grids (log1p x), curve log ratios, layers per group, first linear-layer row of each
    group (and the end), the curve of each linear layer, prefill grid (ga, gb, r), decode grid (ga, gb, r), memo of
    each group's per-layer token terms by token count, memo of the LM head by sampled rows, note log, its length).
    Curve rows are numbered in `curves_in_pack_order`'s order."""
    m = cost_model
    s = np.zeros(NUM_MEASURED_PARAMS)
    s[P_FLOPS_PER_S], s[P_BYTES_PER_S] = m.roof.flops_per_s, m.roof.bytes_per_s
    s[P_MIN_KERNEL_S], s[P_OVERHEAD_S] = m.min_kernel_s, m.step_overhead_s
    s[P_TP], s[P_HIDDEN] = m.tp, m.model.hidden_size
    s[P_HQ], s[P_HKV], s[P_HEAD_DIM], s[P_KV_BYTES] = m.attention_shape
    s[P_ELEMENTWISE_0], s[P_ELEMENTWISE_1], s[P_ELEMENTWISE_2] = m._elementwise_bytes
    curves, grids, ratios = [], [], []

    def add(curve, kind: int, a: float, b: float, c: float) -> int:
        curves.append([sum(len(g) for g in grids), len(curve.grid), kind, a, b, c])
        grids.append(curve.grid)
        ratios.append(curve.lr)
        return len(curves) - 1

    def add_gemm(curve) -> int:
        return add(curve, SHAPE_GEMM, *curve.shape_numbers)

    layers, starts, linear = [], [0], []
    for n_layers, mats, _ in m._groups:
        layers.append(n_layers)
        linear += [add_gemm(mm.curve) for mm in mats]
        starts.append(len(linear))
    s[P_LM_HEAD] = add_gemm(m._lm_head)
    if m.tp > 1 and m.communication:
        if m._allreduce is not None:
            s[P_ALLREDUCE] = ALLREDUCE_CURVE
            s[P_AR_CURVE] = add(m._allreduce, SHAPE_ALLREDUCE, *m._allreduce.shape_numbers)
        else:
            s[P_ALLREDUCE] = ALLREDUCE_CATALOG
            s[P_AR_LINK_BYTES_PER_S] = m.gpu.interconnect_bytes_per_s * m.gpu.interconnect_efficiency
            s[P_AR_LATENCY_S] = m.gpu.allreduce_latency_s
    grid = []
    for g2 in (m._prefill, m._decode):
        grid += [np.array(g2.ga, dtype=np.float64), np.array(g2.gb, dtype=np.float64),
                 np.array(g2.r, dtype=np.float64).reshape(len(g2.ga), len(g2.gb))]
    return (s, np.array(curves, dtype=np.float64).reshape(-1, 6),
            np.array([v for g in grids for v in g], dtype=np.float64),
            np.array([v for r in ratios for v in r], dtype=np.float64),
            np.array(layers, dtype=np.float64), np.array(starts, dtype=np.int64), np.array(linear, dtype=np.int64),
            *grid, np.full((len(layers), MEMO_TOKENS), -1.0), np.full(MEMO_TOKENS, -1.0),
            np.zeros((NOTE_CAP, 4)), np.zeros(1, dtype=np.int64))


def clear_notes(params: tuple) -> None:
    """Empty a pack's note log (a run's log is read after it, `MeasuredCostModel.note_compiled_outside`)."""
    params[-1][0] = 0


def curves_in_pack_order(cost_model) -> list:
    """The model's curves in the order `pack` numbers them: each group's linear layers, the LM head, then the
    all-reduce's curve where it has one."""
    m = cost_model
    out = [mm.curve for _, mats, _ in m._groups for mm in mats] + [m._lm_head]
    if m.tp > 1 and m.communication and m._allreduce is not None:
        out.append(m._allreduce)
    return out


def empty() -> tuple:
    """A pack of the same types for pricers of another kind (never read)."""
    z, zi, z2 = np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros((0, 0))
    return (np.zeros(NUM_MEASURED_PARAMS), np.zeros((0, 6)), z, z, z, zi, zi, z, z, z2, z, z, z2, z2, z, z2, zi)


@njit(cache=True)
def _bracket(grid, u):
    """`sim.cost.measured._bracket`: (i, w, outside)."""
    n = grid.shape[0]
    if n == 1:
        return 0, 0.0, abs(u - grid[0]) > 1e-12
    if u <= grid[0]:
        return 0, 0.0, u < grid[0] - 1e-12
    if u >= grid[n - 1]:
        return n - 2, 1.0, u > grid[n - 1] + 1e-12
    i = np.searchsorted(grid, u, side="right") - 1
    return i, (u - grid[i]) / (grid[i + 1] - grid[i]), False


@njit(cache=True)
def _roof(flops, nbytes, fps, bps):
    x = flops / fps
    y = nbytes / bps
    return y if y > x else x  # DeviceRoofline.time: Python's max(x, y)


@njit(cache=True)
def _note(log, count, kind, row, x, y):
    """Write a point priced outside the tables to the note log (not again right after itself). False: the log
    is full (the caller returns NaN and the run goes to the Python engine)."""
    k = count[0]
    if k > 0 and log[k - 1, 0] == kind and log[k - 1, 1] == row and log[k - 1, 2] == x and log[k - 1, 3] == y:
        return True
    if k >= log.shape[0]:
        return False
    log[k, 0], log[k, 1], log[k, 2], log[k, 3] = kind, row, x, y
    count[0] = k + 1
    return True


@njit(cache=True)
def _curve(s, curves, grids, ratios, log, count, c, x):
    """`Curve.__call__` of curve row c at x; a point outside its measured points is noted. (The helpers take the
    pack's arrays one by one: a call passing the whole pack copies it, which cost more than the arithmetic.)"""
    start, n = int(curves[c, C_START]), int(curves[c, C_LEN])
    grid, lr = grids[start:start + n], ratios[start:start + n]
    i, w, outside = _bracket(grid, math.log1p(x))
    if outside and not _note(log, count, NOTE_CURVE, c, x, 0.0):
        return math.nan
    ratio = lr[i] if w == 0.0 else lr[i] * (1 - w) + lr[i + 1] * w
    a, b, cc = curves[c, C_A], curves[c, C_B], curves[c, C_C]
    if curves[c, C_KIND] == SHAPE_GEMM:
        shape = _roof(2.0 * x * a * b, a * b * cc + x * (a + b) * _ACT_BYTES, s[P_FLOPS_PER_S], s[P_BYTES_PER_S])
    else:
        shape = a + 2 * (b - 1) / b * x * 2 / cc
    return shape * math.exp(ratio)


@njit(cache=True)
def _grid2(ga, gb, r, log, count, kind, x, y):
    """`Grid2D.__call__`'s log ratio at (x, y) (the caller multiplies by its shape); a point outside the grid is
    noted."""
    i, wa, out_a = _bracket(ga, math.log1p(x))
    j, wb, out_b = _bracket(gb, math.log1p(y))
    if (out_a or out_b) and not _note(log, count, kind, 0, x, y):
        return math.nan
    i1 = min(i + 1, r.shape[0] - 1)
    j1 = min(j + 1, r.shape[1] - 1)
    return (r[i, j] * (1 - wb) + r[i, j1] * wb) * (1 - wa) + (r[i1, j] * (1 - wb) + r[i1, j1] * wb) * wa


@njit(cache=True)
def _prefill(s, ga, gb, r, log, count, b, total):
    hq, hkv, d, kvb = s[P_HQ], s[P_HKV], s[P_HEAD_DIM], s[P_KV_BYTES]
    pairs = b * total * (total + 1) / 2
    shape = _roof(4.0 * hq * d * pairs, b * total * (2 * hkv * d * kvb + 2 * hq * d * _ACT_BYTES),
                  s[P_FLOPS_PER_S], s[P_BYTES_PER_S])
    return shape * math.exp(_grid2(ga, gb, r, log, count, NOTE_PREFILL, b, total))


@njit(cache=True)
def _decode(s, ga, gb, r, log, count, b, x):
    hq, hkv, d, kvb = s[P_HQ], s[P_HKV], s[P_HEAD_DIM], s[P_KV_BYTES]
    shape = _roof(4.0 * hq * d * b * x, b * x * 2 * hkv * d * kvb + 2 * b * hq * d * _ACT_BYTES,
                  s[P_FLOPS_PER_S], s[P_BYTES_PER_S])
    return shape * math.exp(_grid2(ga, gb, r, log, count, NOTE_DECODE, b, x))


@njit(cache=True)
def note_decode_points(params, num_seqs, first_ctx, num_steps):
    """Note the decode-attention points of `num_steps` decode-only steps of `num_seqs` sequences whose contexts
    start at `first_ctx` and grow by `num_seqs` a step, as `step_time` of each would note them (their other terms
    depend on the batch size alone and were priced with the run's first step). False: the note log is full."""
    s, dc_ga, dc_gb, note_log, note_count = params[0], params[10], params[11], params[15], params[16]
    out_a = _bracket(dc_ga, math.log1p(num_seqs))[2]
    first, last = first_ctx / num_seqs, (first_ctx + (num_steps - 1) * num_seqs) / num_seqs
    lo, hi = (first if not 1.0 > first else 1.0), (last if not 1.0 > last else 1.0)
    if not out_a and not _bracket(dc_gb, math.log1p(lo))[2] and not _bracket(dc_gb, math.log1p(hi))[2]:
        return True  # the mean context only grows: every point lies between two inside the grid
    for j in range(num_steps):
        mean_ctx = (first_ctx + j * num_seqs) / num_seqs
        y = mean_ctx if not 1.0 > mean_ctx else 1.0
        if (out_a or _bracket(dc_gb, math.log1p(y))[2]) and not _note(note_log, note_count, NOTE_DECODE, 0,
                                                                       num_seqs, y):
            return False
    return True


@njit(cache=True)
def _max3(a, b, c):
    """Python's max(a, b, c): the first of the largest."""
    m = a
    if b > m:
        m = b
    if c > m:
        m = c
    return m


# Inlined into the core (`compiled_pricing.price_parts`): a call would take and drop a reference to each array
# of the pack it is passed, with atomic operations, at every step.
@njit(cache=True, inline="always")
def step_time(params, num_prefill_tokens, pf_chunk, pf_ctx, num_pf, num_decode_seqs, decode_ctx, num_sampled):
    """`MeasuredCostModel.step_cost(plan).time_s` for a plan of single-token decodes without swaps; NaN when a
    point lies outside the measured tables (the Python model would add a note)."""
    (s, curves, grids, ratios, layers, starts, linear, pf_ga, pf_gb, pf_r, dc_ga, dc_gb, dc_r, layer_memo,
     head_memo, note_log, note_count) = params
    t = num_prefill_tokens + num_decode_seqs
    if t == 0:
        return s[P_OVERHEAD_S]
    # _attention_s: prefill chunks grouped by (chunk, context) in first-seen order (Counter), then the decodes.
    attn = 0.0
    for j in range(num_pf):
        chunk, context = pf_chunk[j], pf_ctx[j]
        seen = False
        for q in range(j):
            if pf_chunk[q] == chunk and pf_ctx[q] == context:
                seen = True
                break
        if seen:
            continue
        count = 1
        for q in range(j + 1, num_pf):
            if pf_chunk[q] == chunk and pf_ctx[q] == context:
                count += 1
        total = context + chunk
        share = chunk * (context + (chunk + 1) / 2) / (total * (total + 1) / 2)
        whole = _prefill(s, pf_ga, pf_gb, pf_r, note_log, note_count, count, total) * share
        alone = _prefill(s, pf_ga, pf_gb, pf_r, note_log, note_count, count, chunk)
        read = _decode(s, dc_ga, dc_gb, dc_r, note_log, note_count, count, total)
        if math.isnan(whole) or math.isnan(alone) or math.isnan(read):
            return math.nan  # max() below would drop a NaN
        attn += _max3(whole, alone, read)
    if num_decode_seqs:
        mean_ctx = decode_ctx / num_decode_seqs
        attn += _decode(s, dc_ga, dc_gb, dc_r, note_log, note_count, num_decode_seqs * 1,
                        mean_ctx if not 1.0 > mean_ctx else 1.0)
    if t < MEMO_TOKENS and layer_memo[0, t] != -1.0:
        time_s = 0.0
        for g in range(layers.shape[0]):
            time_s += layers[g] * (layer_memo[g, t] + attn)
    else:
        # _per_layer_token_s: the elementwise ops (a sum() of three), the all-reduces, then each linear layer.
        bps, floor_s = s[P_BYTES_PER_S], s[P_MIN_KERNEL_S]
        common = 0.0
        for e in (s[P_ELEMENTWISE_0], s[P_ELEMENTWISE_1], s[P_ELEMENTWISE_2]):
            x = t * e / bps
            common += x if x > floor_s else floor_s
        if s[P_ALLREDUCE] == ALLREDUCE_CURVE:
            common += 2 * _curve(s, curves, grids, ratios, note_log, note_count, int(s[P_AR_CURVE]), t * s[P_HIDDEN])
        elif s[P_ALLREDUCE] == ALLREDUCE_CATALOG:
            tp = s[P_TP]
            message = t * s[P_HIDDEN] * _ACT_BYTES
            common += 2 * (s[P_AR_LATENCY_S] + 2 * (tp - 1) / tp * message / s[P_AR_LINK_BYTES_PER_S])
        time_s = 0.0
        for g in range(layers.shape[0]):
            layer_s = common
            for r in range(starts[g], starts[g + 1]):
                layer_s += _curve(s, curves, grids, ratios, note_log, note_count, linear[r], t)
            if t < MEMO_TOKENS:
                layer_memo[g, t] = layer_s
            time_s += layers[g] * (layer_s + attn)
    if num_sampled:
        if num_sampled < MEMO_TOKENS and head_memo[num_sampled] != -1.0:
            time_s += head_memo[num_sampled]
        else:
            head_s = _curve(s, curves, grids, ratios, note_log, note_count, int(s[P_LM_HEAD]), num_sampled)
            if num_sampled < MEMO_TOKENS:
                head_memo[num_sampled] = head_s
            time_s += head_s
    time_s += 0.0  # (swap_in + swap_out) * per token: none
    return time_s + s[P_OVERHEAD_S]
