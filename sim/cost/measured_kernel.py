"""The measured-kernel model's price of a step (`sim.cost.measured`, AIConfigurator's tables), written once.

`sim.cost.measured` reads the tables and builds its interpolations with these functions (`shape_at`, `curve_at`,
`grid_at`: a kernel's roofline shape, a 1-D curve and a 2-D grid of measured / roofline ratios, interpolated by
`sim.cost.interpolation`), and prices a step with `step_time` through `sim.cost.compiled_pricing.price_parts`,
which the compiled engine core (`sim.compiled`) inlines. `MeasuredCostModel._build_pack` packs the model with
`pack` (the layout below). Every term is here: linear layers (experts: from the fused-MoE table, else expert
GEMMs run as one fused kernel), attention (MLA from its own tables where the engine's have them, else by the device
roofline; DeepSeek sparse attention from the engine's module rows, a step's prefill chunks as one call; a
sliding-window layer from the tables' own window rows where they measured its window, else the full-attention rows
with the window capping the context), norms and activations, all-reduces, the LM head, swap copies, the step
overhead.

A point outside the measured tables is priced with the ratio held at the nearest edge and written to the
pack's note log; the caller reads the log into the model's notes (`MeasuredCostModel.note_compiled_outside`).
Only when the log is full does a price come back NaN, for the caller to read the log and price again (the
compiled core hands the run to the Python engine instead).
"""

from __future__ import annotations

import math

import numpy as np

from sim.core.step_plan import linear_tokens
from sim.cost.interpolation import bracket, log_ratio_1d, log_ratio_2d
from sim.jit import njit
from sim.cost.roofline_kernel import (
    ACT_BYTES,
    EXCHANGE_KINDS,
    chunk_pairs,
    expert_load,
    hybrid_layer_mean,
    expert_exchange_s,
    layer_allreduce_s,
    op_time,
    touched_experts,
)
from sim.model.memory import MXFP4_PARAM_BYTES, NVFP4_PARAM_BYTES

# Indices into the float64 array `params[0]`.
# The attention grids' roofline shapes: prefill's kind and four numbers (P_PF_*), decode's (P_DC_*).
(P_FLOPS_PER_S, P_BYTES_PER_S, P_MIN_KERNEL_S, P_OVERHEAD_S, P_ALLREDUCE, P_AR_LINK_BYTES_PER_S, P_AR_LATENCY_S,
 P_TP, P_HIDDEN, P_PF_KIND, P_PF_A, P_PF_B, P_PF_C, P_PF_D, P_DC_KIND, P_DC_A, P_DC_B, P_DC_C, P_DC_D,
 P_ELEMENTWISE_0, P_ELEMENTWISE_1, P_ELEMENTWISE_2, P_LM_HEAD, P_AR_CURVE, P_SLIDING_WINDOW, P_MLA,
 P_MLA_FLOPS_PER_PAIR, P_MLA_KV_BYTES, P_SWAP_S_PER_TOKEN, P_WINDOW_SHARE, P_WINDOW_GRIDS, P_WPF_KIND, P_WPF_A,
 P_WPF_B, P_WPF_C, P_WPF_D, P_WDC_KIND, P_WDC_A, P_WDC_B, P_WDC_C, P_WDC_D, P_EXCHANGE_RANKS, P_EXCHANGE_KIND,
 P_EXCHANGE_LINK_BYTES_PER_S, P_EXCHANGE_LATENCY_S) = range(45)
NUM_MEASURED_PARAMS = 45
# P_EXCHANGE_*: a lockstep group's ranks (0: no group), how they exchange the tokens around each expert layer, and
# the catalog's link and latency that prices it (`roofline_kernel.expert_exchange_s`).
# P_WINDOW_GRIDS: 1 where a sliding-window layer is priced from the window grids (the tables' rows at the model's
# window: prefill by (batch, prompt tokens), decode by (batch, context)), whose shapes are P_WPF_* and P_WDC_*.
ALLREDUCE_NONE, ALLREDUCE_CURVE, ALLREDUCE_CATALOG = 0, 1, 2
# Columns of a curve row: first grid index, grid length, shape kind, four shape numbers.
C_START, C_LEN, C_KIND, C_A, C_B, C_C, C_D = range(7)
# Columns of a linear-layer row: its curve row, experts, experts each token routes to, 1 where a lockstep rank runs it
# at its group's tokens (`GpuLinear.group_tokens`; a fused-MoE row always: without a group those are its own).
L_CURVE, L_EXPERTS, L_ACTIVE, L_GROUP_TOKENS = range(4)
LINEAR_COLUMNS = 4
# Roofline shapes (`shape_at`), by the numbers (a, b, c, d) they take: a GEMM (n, k, weight bytes) by tokens m;
# an all-reduce (latency, GPUs, bus bytes/s) by elements; the fused MoE layer (experts, experts per token,
# hidden, ffn per GPU) by tokens; prefill attention (query heads, KV heads, head size, KV bytes per element) by
# (batch, prompt tokens); decode attention (the same) by (batch, context); the fused MoE layer in FP8 (weights and
# tensor cores, the same numbers as SHAPE_MOE) by tokens; MLA prefill, run as attention over per-head keys and values
# rebuilt from the latent (heads, query-key head size, value head size, unused) by (batch, prompt tokens); MLA decode,
# run absorbed, every head attending over the shared latent (heads, latent + rotary size read as keys, latent size
# read as values, KV bytes per element) by (batch, context).
SHAPE_GEMM, SHAPE_ALLREDUCE, SHAPE_MOE, SHAPE_PREFILL, SHAPE_DECODE, SHAPE_MOE_FP8, SHAPE_MLA_PREFILL, \
    SHAPE_MLA_DECODE, SHAPE_MOE_MXFP4, SHAPE_MOE_NVFP4, SHAPE_WINDOW_PREFILL, SHAPE_WINDOW_DECODE, \
    SHAPE_DSA_PREFILL, SHAPE_DSA_DECODE = range(14)
# SHAPE_DSA_PREFILL and SHAPE_DSA_DECODE: DeepSeek sparse attention (attention FLOPs a selected query-key pair, the
# top-k keys a query attends, the indexer's FLOPs a pair at the bf16 rate `fps`, the latent's KV bytes a selected
# key) by (batch, prompt tokens) and (batch, context): the attention over at most top-k keys a query as the roofline
# counts them (`chunk_pairs`), the indexer over every causal pair; its 132-byte keys are left out of the bytes (the
# rows carry them).
# SHAPE_WINDOW_PREFILL and SHAPE_WINDOW_DECODE: attention through a sliding window (query heads, window tokens, head
# size, KV bytes a token: keys and values of every KV head) by (batch, prompt tokens) and (batch, context): each
# query's keys capped by the window (`chunk_pairs`), each sequence's KV read at most a window.
# SHAPE_MOE_MXFP4: the fused MoE layer with MXFP4 experts (the same numbers as SHAPE_MOE): MXFP4_PARAM_BYTES a
# weight, products at the bf16 rate `fps` (16-bit activations). SHAPE_MOE_NVFP4: NVFP4 experts, NVFP4_PARAM_BYTES a
# weight, W4A4 products at four times the bf16 rate (the B200 datasheet's FP4 / BF16 ratio).
# Token counts below this have their per-layer terms and LM head remembered (the pack's two memo arrays; -1: not
# computed yet): they depend on the count alone. The layer memo has one more column, SCRATCH, where a larger count's
# terms are worked out each time (the compiled core allocates nothing: sim/compiled/kernel.py `run`).
MEMO_TOKENS = 8192
SCRATCH = MEMO_TOKENS
# The note log (the pack's last two arrays): one row per point priced outside the tables (kind, curve row, x, y),
# a point repeated on consecutive rows written once; and the number of rows written.
NOTE_CAP = 1 << 16
NOTE_CURVE, NOTE_PREFILL, NOTE_DECODE, NOTE_WINDOW_PREFILL, NOTE_WINDOW_DECODE = 0, 1, 2, 3, 4
NUM_NUMBERS = 19  # the pack's first arrays hold the model's numbers; then its memos and note log
LAYER_MEMO = NUM_NUMBERS  # the index of the memo of each group's per-layer token terms


def pack(cost_model) -> tuple[tuple, list]:
    """The pack, and its curves in row order (for the notes' words): (scalars, curves, curve grids (log1p x),
    curve log ratios, layers per group, first linear-layer row of each group (and the end), linear-layer rows (a
    fused-MoE layer is one, priced like a dense layer), prefill grid (ga, gb, r), decode grid (ga, gb, r), the
    sliding-window prefill and decode grids (the same; one-point zeros without them), memo of
    each group's per-layer token terms by token count, memo of the LM head by sampled rows, note log, its
    length)."""
    m = cost_model
    s = np.zeros(NUM_MEASURED_PARAMS)
    s[P_FLOPS_PER_S], s[P_BYTES_PER_S] = m.roof.flops_per_s, m.roof.bytes_per_s
    s[P_MIN_KERNEL_S], s[P_OVERHEAD_S] = m.min_kernel_s, m.step_overhead_s
    s[P_TP], s[P_HIDDEN] = m.tp, m.model.hidden_size
    s[P_ELEMENTWISE_0], s[P_ELEMENTWISE_1], s[P_ELEMENTWISE_2] = m._elementwise_bytes
    s[P_SLIDING_WINDOW] = m.model.sliding_window or 0
    s[P_WINDOW_SHARE] = m.model.window_layer_share
    s[P_SWAP_S_PER_TOKEN] = m.roofline.swap_s_per_token
    windowed = (m._window_prefill, m._window_decode)
    if windowed[0] is not None:
        s[P_WINDOW_GRIDS] = 1.0
        for first, grid in zip((P_WPF_KIND, P_WDC_KIND), windowed):
            s[first] = grid.shape.kind
            s[first + 1:first + 5] = grid.shape.numbers
    if m.mla_by_roofline:
        s[P_MLA], s[P_MLA_FLOPS_PER_PAIR], s[P_MLA_KV_BYTES] = 1.0, m.mla_flops_per_pair, m.mla_kv_bytes
    else:
        for first, grid in ((P_PF_KIND, m._prefill), (P_DC_KIND, m._decode)):
            s[first] = grid.shape.kind
            s[first + 1:first + 5] = grid.shape.numbers
    curves, rows, grids, ratios = [], [], [], []

    def add(curve) -> int:
        shape = curve.shape
        rows.append([sum(len(g) for g in grids), len(curve.grid), shape.kind, *shape.numbers])
        grids.append(curve.grid)
        ratios.append(curve.lr)
        curves.append(curve)
        return len(rows) - 1

    layers, starts, linear = [], [0], []
    for n_layers, mats, is_moe in m._groups:
        layers.append(n_layers)
        linear += [[add(mm.curve), mm.experts, mm.active, float(mm.group_tokens)] for mm in mats]
        if is_moe and m._moe is not None:  # the fused-MoE layer, after the group's other linear layers
            linear.append([add(m._moe), 1, 1, 1.0])
        starts.append(len(linear))
    s[P_LM_HEAD] = add(m._lm_head)
    if m.expert_group is not None:
        s[P_EXCHANGE_RANKS] = m.expert_group.exchange_gpus
        s[P_EXCHANGE_KIND] = EXCHANGE_KINDS[m.expert_group.exchange]
        s[P_EXCHANGE_LINK_BYTES_PER_S] = m.roofline.link_bytes_per_s
        s[P_EXCHANGE_LATENCY_S] = m.gpu.allreduce_latency_s
    if m.tp > 1 and m.communication:
        if m._allreduce is not None:
            s[P_ALLREDUCE] = ALLREDUCE_CURVE
            s[P_AR_CURVE] = add(m._allreduce)
        else:
            s[P_ALLREDUCE] = ALLREDUCE_CATALOG
            s[P_AR_LINK_BYTES_PER_S] = m.roofline.link_bytes_per_s
            s[P_AR_LATENCY_S] = m.gpu.allreduce_latency_s
    grid = []
    for g2 in ((m._prefill, m._decode) if not m.mla_by_roofline else (None, None)) + windowed:
        if g2 is None:  # MLA attention without a table (the device roofline); no window grids
            grid += [np.zeros(1), np.zeros(1), np.zeros((1, 1))]
        else:  # copies: a read-only table array would give the pack another numba type (another core compile)
            grid += [np.array(g2.ga, dtype=np.float64), np.array(g2.gb, dtype=np.float64),
                     np.array(g2.r, dtype=np.float64)]
    packed = (s, np.array(rows, dtype=np.float64).reshape(-1, 7),
              np.concatenate(grids).astype(np.float64), np.concatenate(ratios).astype(np.float64),
              np.array(layers, dtype=np.float64), np.array(starts, dtype=np.int64),
              np.array(linear, dtype=np.float64).reshape(-1, LINEAR_COLUMNS), *grid,
              np.full((len(layers), MEMO_TOKENS + 1), -1.0), np.full(MEMO_TOKENS, -1.0),
              np.zeros((NOTE_CAP, 4)), np.zeros(1, dtype=np.int64))
    return packed, curves


def with_note_log(params: tuple, rows: int) -> tuple:
    """The same pack (its memos shared) with a note log of its own, of `rows` rows."""
    return params[:-2] + (np.zeros((rows, 4)), np.zeros(1, dtype=np.int64))


def empty() -> tuple:
    """A pack of the same types for pricers of another kind (never read)."""
    z, zi, z2 = np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros((0, 0))
    return (np.zeros(NUM_MEASURED_PARAMS), np.zeros((0, 7)), z, z, z, zi, z2.reshape(0, LINEAR_COLUMNS),
            z, z, z2, z, z, z2, z, z, z2, z, z, z2, z2, z, z2, zi)


# --- shapes, curves, grids -------------------------------------------------------------------------------
# The functions that take arrays and run at every step are inlined where they are called: a call that passes an
# array takes and drops a reference to it (atomic operations) wherever numba counts references (the Python cost
# models' calls; not the compiled core), which there costs more than the arithmetic.

@njit(cache=True)
def shape_at(kind, a, b, c, d, fps, bps, x, y):
    """The roofline time a measured time is taken relative to (`SHAPE_*` names the kinds and their numbers)."""
    if kind == SHAPE_GEMM:
        return op_time(2.0 * x * a * b, a * b * c + x * (a + b) * ACT_BYTES, fps, bps)
    if kind == SHAPE_ALLREDUCE:
        return a + 2 * (b - 1) / b * x * 2 / c
    if kind == SHAPE_MOE or kind == SHAPE_MOE_FP8 or kind == SHAPE_MOE_MXFP4 or kind == SHAPE_MOE_NVFP4:
        # bf16: two bytes a weight; FP8: one, at twice the bf16 tensor-core rate `fps` (the datasheets' ratio), so
        # half the FLOPs at `fps`; MXFP4: its bytes, at the bf16 rate; NVFP4: its bytes, at four times the rate
        if kind == SHAPE_MOE:
            weight_bytes, flops_per_weight = 2.0, 2.0
        elif kind == SHAPE_MOE_FP8:
            weight_bytes, flops_per_weight = 1.0, 1.0
        elif kind == SHAPE_MOE_MXFP4:
            weight_bytes, flops_per_weight = MXFP4_PARAM_BYTES, 2.0
        else:
            weight_bytes, flops_per_weight = NVFP4_PARAM_BYTES, 0.5
        weights = 3 * c * d  # one expert's gate, up and down matrices
        return op_time(flops_per_weight * x * b * weights,
                       touched_experts(a, b, x) * weights * weight_bytes + x * b * (2 * c + 3 * d) * 2, fps, bps)
    if kind == SHAPE_PREFILL:
        pairs = x * y * (y + 1) / 2
        return op_time(4.0 * a * c * pairs, x * y * (2 * b * c * d + 2 * a * c * ACT_BYTES), fps, bps)
    if kind == SHAPE_MLA_PREFILL:
        pairs = x * y * (y + 1) / 2
        return op_time(2.0 * a * (b + c) * pairs, x * y * a * 2 * (b + c) * ACT_BYTES, fps, bps)
    if kind == SHAPE_MLA_DECODE:
        return op_time(2.0 * a * (b + c) * x * y, x * y * b * d + x * a * (b + c) * ACT_BYTES, fps, bps)
    if kind == SHAPE_WINDOW_PREFILL:
        pairs, _ = chunk_pairs(y, 0.0, b)
        return op_time(4.0 * a * c * x * pairs, x * y * (d + 2 * a * c * ACT_BYTES), fps, bps)
    if kind == SHAPE_WINDOW_DECODE:
        kv = y if y < b else b
        return op_time(4.0 * a * c * x * kv, x * kv * d + 2 * x * a * c * ACT_BYTES, fps, bps)
    if kind == SHAPE_DSA_PREFILL:
        return op_time(x * dsa_flops(a, b, c, y, 0.0), x * y * d, fps, bps)
    if kind == SHAPE_DSA_DECODE:
        kv = y if y < b else b
        return op_time(x * (a * kv + c * y), x * kv * d, fps, bps)
    return op_time(4.0 * a * c * x * y, x * y * 2 * b * c * d + 2 * x * a * c * ACT_BYTES, fps, bps)


@njit(cache=True, inline="always")
def dsa_flops(per_selected_pair, topk, per_indexed_pair, chunk, context):
    """A prefill chunk's sparse-attention FLOPs (`SHAPE_DSA_PREFILL`'s numbers) after `context` tokens: its top-k
    capped pairs and its indexer's every causal pair (`chunk_pairs`)."""
    return (per_selected_pair * chunk_pairs(chunk, context, topk)[0]
            + per_indexed_pair * chunk_pairs(chunk, context, 0.0)[0])


@njit(cache=True, inline="always")
def curve_at(grid, lr, kind, a, b, c, d, fps, bps, x):
    """A 1-D curve at x (its grid on log1p x): its shape times exp(its log ratio); and whether x lay outside the
    measured points."""
    ratio, outside = log_ratio_1d(grid, lr, math.log1p(x))
    return shape_at(kind, a, b, c, d, fps, bps, x, 0.0) * math.exp(ratio), outside


@njit(cache=True, inline="always")
def grid_at(ga, gb, r, kind, a, b, c, d, fps, bps, x, y):
    """A 2-D grid at (x, y) (its axes on log1p): its shape times exp(its log ratio); and whether (x, y) lay
    outside."""
    ratio, outside = log_ratio_2d(ga, gb, r, math.log1p(x), math.log1p(y))
    return shape_at(kind, a, b, c, d, fps, bps, x, y) * math.exp(ratio), outside


# --- the step, from a pack --------------------------------------------------------------------------------

@njit(cache=True)
def _note(log, count, kind, row, x, y):
    """Write a point priced outside the tables to the note log (not again right after itself). False: the log
    is full."""
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
    """Curve row c at x; a point outside its measured points is noted (NaN: the log is full). (The helpers take
    the pack's arrays one by one: a call passing the whole pack copies it, which cost more than the arithmetic.)"""
    start, n = int(curves[c, C_START]), int(curves[c, C_LEN])
    value, outside = curve_at(grids[start:start + n], ratios[start:start + n], curves[c, C_KIND], curves[c, C_A],
                              curves[c, C_B], curves[c, C_C], curves[c, C_D], s[P_FLOPS_PER_S], s[P_BYTES_PER_S], x)
    if outside and not _note(log, count, NOTE_CURVE, c, x, 0.0):
        return math.nan
    return value


@njit(cache=True)
def _attention_grid(s, ga, gb, r, log, count, kind, x, y):
    """Prefill (kind NOTE_PREFILL), decode (NOTE_DECODE) or a sliding-window layer's (NOTE_WINDOW_*) attention of this
    model at (x, y) from its grid; a point outside the grid is noted (NaN: the log is full)."""
    f = (P_PF_KIND if kind == NOTE_PREFILL else P_DC_KIND if kind == NOTE_DECODE
         else P_WPF_KIND if kind == NOTE_WINDOW_PREFILL else P_WDC_KIND)
    value, outside = grid_at(ga, gb, r, s[f], s[f + 1], s[f + 2], s[f + 3], s[f + 4], s[P_FLOPS_PER_S],
                             s[P_BYTES_PER_S], x, y)
    if outside and not _note(log, count, kind, 0, x, y):
        return math.nan
    return value


@njit(cache=True)
def _max3(a, b, c):
    """The first of the largest of three."""
    m = a
    if b > m:
        m = b
    if c > m:
        m = c
    return m


@njit(cache=True)
def _at_least(x, floor):
    """x, or `floor` unless x is larger."""
    return x if x > floor else floor


@njit(cache=True)
def _mla_attention(s, num_pf, pf_chunk, pf_ctx, num_decode_seqs, decode_ctx, query_tokens):
    """MLA attention without a table of its own: the device roofline, at least one kernel launch per part."""
    fps, bps, per_pair, kv_b = s[P_FLOPS_PER_S], s[P_BYTES_PER_S], s[P_MLA_FLOPS_PER_PAIR], s[P_MLA_KV_BYTES]
    floor = s[P_MIN_KERNEL_S]
    t = 0.0
    for j in range(num_pf):
        chunk, context = pf_chunk[j], pf_ctx[j]
        t += _at_least(op_time(chunk * (context + (chunk + 1) / 2) * per_pair, (context + chunk) * kv_b, fps,
                                 bps), floor)
    if num_decode_seqs:
        t += _at_least(op_time(decode_ctx * query_tokens * per_pair, decode_ctx * kv_b, fps, bps), floor)
    return t


@njit(cache=True, inline="always")
def _attention(s, pf_ga, pf_gb, pf_r, dc_ga, dc_gb, dc_r, wpf_ga, wpf_gb, wpf_r, wdc_ga, wdc_gb, wdc_r, log, count,
               num_pf, pf_chunk, pf_ctx, num_decode_seqs, decode_ctx, query_tokens):
    """One layer's attention (`_layer_attention`; a sliding-window layer's from the window grids where the pack has
    them); a hybrid model's mean layer (`hybrid_layer_mean`). NaN: the note log is full."""
    window, share = s[P_SLIDING_WINDOW], s[P_WINDOW_SHARE]
    if window and s[P_WINDOW_GRIDS] != 0.0:
        attn = _layer_attention(s, wpf_ga, wpf_gb, wpf_r, wdc_ga, wdc_gb, wdc_r, log, count, window, True, num_pf,
                                pf_chunk, pf_ctx, num_decode_seqs, decode_ctx, query_tokens)
    else:
        attn = _layer_attention(s, pf_ga, pf_gb, pf_r, dc_ga, dc_gb, dc_r, log, count, window, False, num_pf,
                                pf_chunk, pf_ctx, num_decode_seqs, decode_ctx, query_tokens)
    if not window or share == 1.0:
        return attn
    whole = _layer_attention(s, pf_ga, pf_gb, pf_r, dc_ga, dc_gb, dc_r, log, count, 0.0, False, num_pf, pf_chunk,
                             pf_ctx, num_decode_seqs, decode_ctx, query_tokens)
    return hybrid_layer_mean(share, attn, whole)


@njit(cache=True, inline="always")
def windowed_chunks(same, chunk, context, window):
    """How `same` prefill chunks longer than the sliding window, each after `context` tokens (at most the window),
    are priced from full-attention rows: (a batch of fresh prompts two windows long, one per window the chunks and
    their context span; that length; the factor on the batch's time: the chunks' windowed pairs (`chunk_pairs`) over
    the batch's causal pairs, i.e. at the batch's time per query-key pair). `_windowed_chunk` prices with it, and
    benchmarks/bench_window_attention.py checks it against AIConfigurator's own sliding-window rows."""
    span = 2.0 * window
    blocks = same * (context + chunk) / window
    pairs, _ = chunk_pairs(chunk, context, window)
    return blocks, span, same * pairs / (blocks * span * (span + 1.0) / 2.0)


@njit(cache=True, inline="always")
def _windowed_chunk(s, pf_ga, pf_gb, pf_r, log, count, same, chunk, context, window):
    """`same` prefill chunks longer than the sliding window (`windowed_chunks`), from the prefill grid (the tables'
    full-attention rows: their sliding-window rows are not imported). NaN: the note log is full."""
    blocks, span, factor = windowed_chunks(same, chunk, context, window)
    return _attention_grid(s, pf_ga, pf_gb, pf_r, log, count, NOTE_PREFILL, blocks, span) * factor


@njit(cache=True, inline="always")
def _same_chunks(j, num_pf, pf_chunk, pf_ctx):
    """How many of the step's prefill chunks share chunk j's (chunk, context), counted at the first of them; 0 at the
    others (the group is priced once, at its first chunk)."""
    chunk, context = pf_chunk[j], pf_ctx[j]
    for q in range(j):
        if pf_chunk[q] == chunk and pf_ctx[q] == context:
            return 0
    same = 1
    for q in range(j + 1, num_pf):
        if pf_chunk[q] == chunk and pf_ctx[q] == context:
            same += 1
    return same


@njit(cache=True, inline="always")
def _layer_attention(s, pf_ga, pf_gb, pf_r, dc_ga, dc_gb, dc_r, log, count, window, window_rows, num_pf, pf_chunk,
                     pf_ctx, num_decode_seqs, decode_ctx, query_tokens):
    """One layer's attention through a sliding `window` (0: none): prefill chunks grouped by (chunk, context) in
    first-seen order (`_same_chunks`), each the largest of its causal share of a fresh prompt (the context it sees, at
    most a window, then the chunk), the chunk alone and one read of its KV; then the decodes at their mean context
    (each query token a row). With `window_rows` the grids are the tables' rows at the window (fresh prompts and
    decodes measured through it: the share is the windowed one, the decodes' context uncapped); without, the
    full-attention rows, the window capping the context, a chunk longer than the window the larger of its windows
    (`_windowed_chunk`) and that read. NaN: the note log is full."""
    pf_kind, dc_kind = (NOTE_WINDOW_PREFILL, NOTE_WINDOW_DECODE) if window_rows else (NOTE_PREFILL, NOTE_DECODE)
    attn = 0.0
    if s[P_PF_KIND] == SHAPE_DSA_PREFILL:  # (no window): one module call for every chunk
        if num_pf:
            attn = _dsa_prefill(s, pf_ga, pf_gb, pf_r, log, count, num_pf, pf_chunk, pf_ctx)
        num_pf = 0
    for j in range(num_pf):
        chunk, context = pf_chunk[j], pf_ctx[j]
        same = _same_chunks(j, num_pf, pf_chunk, pf_ctx)
        if not same:
            continue
        if window:
            context = min(context, window)
        total = context + chunk
        read = _attention_grid(s, dc_ga, dc_gb, dc_r, log, count, dc_kind, same, total)
        if window and not window_rows and chunk > window:
            windows = _windowed_chunk(s, pf_ga, pf_gb, pf_r, log, count, same, chunk, context, window)
            if math.isnan(windows) or math.isnan(read):
                return math.nan
            attn += windows if windows > read else read
            continue
        if window_rows:
            share = chunk_pairs(chunk, context, window)[0] / chunk_pairs(total, 0.0, window)[0]
        else:
            share = chunk * (context + (chunk + 1) / 2) / (total * (total + 1) / 2)
        whole = _attention_grid(s, pf_ga, pf_gb, pf_r, log, count, pf_kind, same, total) * share
        alone = _attention_grid(s, pf_ga, pf_gb, pf_r, log, count, pf_kind, same, chunk)
        if math.isnan(whole) or math.isnan(alone) or math.isnan(read):
            return math.nan  # the largest of three would drop a NaN
        attn += _max3(whole, alone, read)
    if num_decode_seqs:
        mean_ctx = decode_ctx / num_decode_seqs
        if window and not window_rows:
            mean_ctx = min(mean_ctx, window)
        attn += _attention_grid(s, dc_ga, dc_gb, dc_r, log, count, dc_kind, num_decode_seqs * query_tokens,
                                mean_ctx if not 1.0 > mean_ctx else 1.0)
    return attn


@njit(cache=True, inline="always")
def dsa_uniform_batch(a, topk, c, tokens, flops):
    """(prompts, tokens each) of a batch of alike fresh prompts that runs `tokens` tokens and `flops` sparse-attention
    FLOPs (`dsa_flops` of these numbers, c > 0) in one call. A fresh prompt of L tokens costs a * min((L+1)/2, topk)
    + c * (L+1)/2 FLOPs a token, linear in L on each side of the top-k's knee, so the length inverts in closed form.
    Where that length exceeds every token (a chunk far into its context: fewer than one prompt), one prompt whose
    FLOPs match, of more tokens than the chunks: L times its FLOPs a token, a quadratic on each side."""
    per_token = flops / tokens
    if per_token <= (a + c) * topk:  # (a prompt of 2 x topk - 1 tokens sits at the knee)
        length = 2.0 * per_token / (a + c) - 1.0
    else:
        length = 2.0 * (per_token - a * topk) / c - 1.0
    if length <= tokens:
        return tokens / length, length
    if flops <= dsa_flops(a, topk, c, 2.0 * topk - 1.0, 0.0):
        return 1.0, (math.sqrt(1.0 + 8.0 * flops / (a + c)) - 1.0) / 2.0
    b = a * topk + c / 2.0
    return 1.0, (math.sqrt(b * b + 2.0 * c * flops) - b) / c


@njit(cache=True, inline="always")
def _dsa_prefill(s, pf_ga, pf_gb, pf_r, log, count, num_pf, pf_chunk, pf_ctx):
    """A step's prefill chunks through DeepSeek sparse attention: vLLM and SGLang run them in one module call (one
    launch of each kernel over every chunk's tokens), priced as the batch of alike fresh prompts with their tokens
    and FLOPs (`dsa_uniform_batch`); per-chunk calls would each pay the module rows' per-call time. NaN: the note log
    is full."""
    a, topk, c = s[P_PF_A], s[P_PF_B], s[P_PF_C]
    tokens, flops = 0.0, 0.0
    for j in range(num_pf):
        tokens += pf_chunk[j]
        flops += dsa_flops(a, topk, c, pf_chunk[j], pf_ctx[j])
    prompts, length = dsa_uniform_batch(a, topk, c, tokens, flops)
    return _attention_grid(s, pf_ga, pf_gb, pf_r, log, count, NOTE_PREFILL, prompts, length)


@njit(cache=True, inline="always")
def fused_experts_s(one_s, roofline_s, touched, launch_s):
    """`touched` experts' GEMMs in one fused launch: the first as measured (`one_s`), each further one its time above a
    launch (`launch_s`, the table's fastest kernel), never less than its roofline (`roofline_s`)."""
    return one_s + (touched - 1.0) * max(one_s - launch_s, roofline_s)


@njit(cache=True)
def _per_layer_token_s(s, curves, grids, ratios, layers, starts, linear, log, count, memo, column, t, te, prefill):
    """Fill column `column` of `memo` with each group's per-layer terms that depend on the token count alone: the
    elementwise ops, the all-reduces, the linear layers (experts: those some token routes to, in expectation under
    uniform routing, each on its share of the tokens, in one launch; a fused-MoE table's layer is one row). The
    rows marked L_GROUP_TOKENS run `te` tokens: `t`, or a lockstep rank's group's, which such a layer then
    exchanges (`roofline_kernel.expert_exchange_s`; `prefill`: the step prefills). False: the note log is full
    (the column's first row is -1 again: nothing is remembered)."""
    bps, floor_s = s[P_BYTES_PER_S], s[P_MIN_KERNEL_S]
    common = 0.0
    for e in (s[P_ELEMENTWISE_0], s[P_ELEMENTWISE_1], s[P_ELEMENTWISE_2]):
        common += _at_least(t * e / bps, floor_s)
    if s[P_ALLREDUCE] == ALLREDUCE_CURVE:
        common += 2 * _curve(s, curves, grids, ratios, log, count, int(s[P_AR_CURVE]), t * s[P_HIDDEN])
    elif s[P_ALLREDUCE] == ALLREDUCE_CATALOG:
        common += layer_allreduce_s(t, s[P_HIDDEN], s[P_TP], s[P_AR_LATENCY_S], s[P_AR_LINK_BYTES_PER_S])
    exchange_s = expert_exchange_s(te, s[P_HIDDEN], s[P_EXCHANGE_RANKS], s[P_EXCHANGE_KIND],  # (0: no group)
                                   s[P_EXCHANGE_LATENCY_S], s[P_EXCHANGE_LINK_BYTES_PER_S], prefill)
    for g in range(layers.shape[0]):
        layer_s = common
        exchanged = False
        for r in range(starts[g], starts[g + 1]):
            c, experts, active = int(linear[r, L_CURVE]), linear[r, L_EXPERTS], linear[r, L_ACTIVE]
            n = t
            if linear[r, L_GROUP_TOKENS] != 0.0:
                n = te
                if not exchanged:
                    layer_s += exchange_s
                    exchanged = True
            if active < experts:  # routed experts (under expert parallelism a GPU may hold just one)
                # No fused-MoE row of this dtype: the experts some token routes to, priced from their GEMM rows as
                # the engines run them, in one fused kernel (vLLM's fused_moe, SGLang's, TensorRT-LLM's MoE plugin):
                # it launches once, and each further expert adds its GEMM's time above the table's fastest kernel (a
                # launch with next to no work), never less than its roofline. Against the tables' 50,376 measured
                # fused-MoE times this is 1.53x them (median; mean |log error| 0.85), where one launch per expert
                # was 2.25x (1.11) (benchmarks/bench_moe.py, 11-29).
                touched = touched_experts(experts, active, n)
                m = expert_load(experts, active, n)
                one = _curve(s, curves, grids, ratios, log, count, c, m)
                roof = shape_at(curves[c, C_KIND], curves[c, C_A], curves[c, C_B], curves[c, C_C], curves[c, C_D],
                                s[P_FLOPS_PER_S], bps, m, 0.0)
                layer_s += fused_experts_s(one, roof, touched, floor_s)
            else:
                layer_s += _curve(s, curves, grids, ratios, log, count, c, n)
        if math.isnan(layer_s):
            memo[0, column] = -1.0  # readers test the first row: the column is not filled
            return False
        memo[g, column] = layer_s
    return True


# Inlined into `compiled_pricing.price_parts`: a call would pass each array of the pack as several machine words
# (and, where numba counts references, take and drop one for each).
@njit(cache=True, inline="always")
def step_time(params, num_prefill_tokens, pf_chunk, pf_ctx, num_pf, num_decode_seqs, decode_ctx, num_sampled,
              query_tokens, pad_tokens, swap_tokens, expert_tokens):
    """The step's time (`sim.cost.step_args` lists the arguments): per layer its token-count terms and its
    attention, then the LM head, swaps, the step overhead. A lockstep rank's step (`expert_tokens` not 0) runs its
    routed experts at its group's tokens (`_per_layer_token_s`). NaN: the note log is full."""
    (s, curves, grids, ratios, layers, starts, linear, pf_ga, pf_gb, pf_r, dc_ga, dc_gb, dc_r, wpf_ga, wpf_gb, wpf_r,
     wdc_ga, wdc_gb, wdc_r, layer_memo, head_memo, note_log, note_count) = params
    t = linear_tokens(num_prefill_tokens, num_decode_seqs, query_tokens, pad_tokens)  # (padding: no attention)
    if t == 0:
        return s[P_OVERHEAD_S]
    if s[P_MLA] != 0.0:
        attn = _mla_attention(s, num_pf, pf_chunk, pf_ctx, num_decode_seqs, decode_ctx, query_tokens)
    else:
        attn = _attention(s, pf_ga, pf_gb, pf_r, dc_ga, dc_gb, dc_r, wpf_ga, wpf_gb, wpf_r, wdc_ga, wdc_gb, wdc_r,
                          note_log, note_count, num_pf, pf_chunk, pf_ctx, num_decode_seqs, decode_ctx, query_tokens)
    if math.isnan(attn):
        return math.nan
    # (The memo is read element by element: a view of it would take and drop a reference where numba counts them.)
    time_s = 0.0
    if t < MEMO_TOKENS and expert_tokens == 0:  # (the memo holds a step's own tokens through every layer)
        if layer_memo[0, t] == -1.0 and not _per_layer_token_s(s, curves, grids, ratios, layers, starts, linear,
                                                                note_log, note_count, layer_memo, t, t, t, False):
            return math.nan
        for g in range(layers.shape[0]):
            time_s += layers[g] * (layer_memo[g, t] + attn)
    else:
        if not _per_layer_token_s(s, curves, grids, ratios, layers, starts, linear, note_log, note_count,
                                  layer_memo, SCRATCH, t, expert_tokens if expert_tokens else t,
                                  num_prefill_tokens > 0):
            return math.nan
        for g in range(layers.shape[0]):
            time_s += layers[g] * (layer_memo[g, SCRATCH] + attn)
    rows = num_sampled + num_decode_seqs * (query_tokens - 1)
    if rows:
        if rows < MEMO_TOKENS and head_memo[rows] != -1.0:
            head_s = head_memo[rows]
        else:
            head_s = _curve(s, curves, grids, ratios, note_log, note_count, int(s[P_LM_HEAD]), rows)
            if math.isnan(head_s):
                return math.nan
            if rows < MEMO_TOKENS:
                head_memo[rows] = head_s
        time_s += head_s
    time_s += swap_tokens * s[P_SWAP_S_PER_TOKEN]
    return time_s + s[P_OVERHEAD_S]


@njit(cache=True)
def _note_decode_run(ga, gb, note_log, note_count, kind, num_seqs, first_ctx, num_steps, cap):
    """Note the points one decode grid prices over a run of decode-only steps (`note_decode_points`), each step's
    mean context capped at `cap` (0: none). False: the note log is full."""
    out_a = bracket(ga, math.log1p(num_seqs))[2]
    first, last = first_ctx / num_seqs, (first_ctx + (num_steps - 1) * num_seqs) / num_seqs
    if cap:
        first, last = min(first, cap), min(last, cap)
    lo, hi = (first if not 1.0 > first else 1.0), (last if not 1.0 > last else 1.0)
    if not out_a and not bracket(gb, math.log1p(lo))[2] and not bracket(gb, math.log1p(hi))[2]:
        return True  # the mean context only grows: every point lies between two inside the grid
    for j in range(num_steps):
        mean_ctx = (first_ctx + j * num_seqs) / num_seqs
        if cap:
            mean_ctx = min(mean_ctx, cap)
        y = mean_ctx if not 1.0 > mean_ctx else 1.0
        if (out_a or bracket(gb, math.log1p(y))[2]) and not _note(note_log, note_count, kind, 0, num_seqs, y):
            return False
    return True


@njit(cache=True)
def note_decode_points(params, num_seqs, first_ctx, num_steps):
    """Note the decode-attention points of `num_steps` decode-only steps of `num_seqs` sequences whose contexts
    start at `first_ctx` and grow by `num_seqs` a step, as `step_time` of each would note them (their other terms
    depend on the batch size alone and were priced with the run's first step). False: the note log is full."""
    s, dc_ga, dc_gb, wdc_ga, wdc_gb = params[0], params[10], params[11], params[16], params[17]
    note_log, note_count = params[-2], params[-1]
    if s[P_MLA] != 0.0:
        return True  # no table: nothing to note
    window = s[P_SLIDING_WINDOW]
    if not window:
        return _note_decode_run(dc_ga, dc_gb, note_log, note_count, NOTE_DECODE, num_seqs, first_ctx, num_steps, 0.0)
    if s[P_WINDOW_GRIDS] != 0.0:  # the window layers from their own grid, at the whole context
        done = _note_decode_run(wdc_ga, wdc_gb, note_log, note_count, NOTE_WINDOW_DECODE, num_seqs, first_ctx,
                                num_steps, 0.0)
    else:  # from the decode grid, at the context the window caps
        done = _note_decode_run(dc_ga, dc_gb, note_log, note_count, NOTE_DECODE, num_seqs, first_ctx, num_steps,
                                window)
    # A hybrid model's layers without the window read the whole context.
    if done and s[P_WINDOW_SHARE] != 1.0:
        done = _note_decode_run(dc_ga, dc_gb, note_log, note_count, NOTE_DECODE, num_seqs, first_ctx, num_steps, 0.0)
    return done
