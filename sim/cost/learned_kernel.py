"""The learned roofline's price of a step (`sim.cost.learned`), written once: `LearnedRooflineCostModel.step_cost`
and the compiled engine core (`sim.compiled`) both call `step_cost` below, through
`sim.cost.compiled_pricing.price_parts` (kind `KIND_LEARNED`).

Each kernel's time is a launch (`min_kernel_s`; attention's own, per kind) plus its ideal time at the catalog's peaks
divided by an efficiency learned from the measured GPUs (the tables of calibrate/measured/learned_roofline.json;
`sim.cost.learned` says how): GEMMs by (log2 compute time / memory time, log2 weight elements), prefill attention by
log2(batch × prompt tokens), decode attention by log2(batch × context), the elementwise ops at one byte efficiency,
and the all-reduces at a learned latency and bandwidth. The model's numbers (attention FLOPs and bytes per pair, the
linear layers' rows, the LM head's row, layers per group, the step overhead) are its roofline pack's
(`roofline_kernel.pack`), and the roofline's terms are `roofline_kernel`'s functions: the linear layers' FLOPs and
bytes (`linear_flops_bytes`), a prefill chunk's pairs and KV tokens and the decodes' context under a sliding window
(`chunk_pairs`, `window_context`), the elementwise bytes (`layer_elementwise_bytes`) and the all-reduces
(`layer_allreduce_s`, at the learned latency and bandwidth). Its FLOPs and bytes are its own sums (the attention's
first, then each linear layer's; the LM head's are not counted), as the Python model always reported.

`pack(model, roofline)` builds the learned tables' pack. It has the very numba type of a whole-step profile's pack
(`steps_kernel.pack`: scalars, a 2-D table, three (x, y) curves), so it travels in the same slot of the compiled
core's price tuple (`compiled_pricing.pricer`: a learned roofline has no whole-step profile) and the core compiles
once for every cost model. A linear layer's weight elements never change, so its column of the GEMM table is read
once, here: the 2-D table holds each linear layer's efficiency by compute/memory bin.
"""

from __future__ import annotations

import math

import numpy as np

from sim.cost.roofline_kernel import (
    M_NUM_EXPERTS,
    M_WEIGHT,
    P_ATTN_FLOPS_PER_PAIR,
    P_FFN_PER_GPU,
    P_HIDDEN,
    P_KV_BYTES_PER_TOKEN_LAYER,
    P_NUM_LAYERS,
    P_OVERHEAD_S,
    P_Q_BYTES_PER_TOKEN,
    P_SWAP_S_PER_TOKEN,
    P_SPARSE_TOPK,
    P_TP,
    attention_window,
    chunk_pairs,
    hybrid_layer_mean,
    indexer_parts,
    layer_allreduce_s,
    layer_elementwise_bytes,
    linear_row,
    lm_head_flops_bytes,
    op_time,
    window_context,
)
from sim.core.step_plan import linear_tokens
from sim.jit import njit

# Indices into the pack's scalars (its first array).
(K_PEAK_FLOPS, K_PEAK_BYTES, K_MIN_KERNEL_S, K_ELEMENTWISE_BYTES_PER_S, K_AR_LATENCY_S, K_AR_BYTES_PER_S,
 K_PREFILL_MIN_S, K_DECODE_MIN_S) = range(8)
NUM_SCALARS = 8


def pack(model, roofline: tuple) -> tuple:
    """(scalars `K_*`, the GEMM efficiency of each linear layer of the roofline pack's rows by compute/memory bin,
    the bins' lower edges (log2 compute time / memory time), the LM head's efficiency by the same bins, prefill
    attention's edges and efficiencies, decode attention's edges and efficiencies). `model`: a
    `LearnedRooflineCostModel`; `roofline`: its roofline pack."""
    learned = model.learned
    s = np.zeros(NUM_SCALARS)
    s[K_PEAK_FLOPS], s[K_PEAK_BYTES], s[K_MIN_KERNEL_S] = model.peak_flops, model.peak_bytes, model.min_kernel_s
    s[K_ELEMENTWISE_BYTES_PER_S] = model.peak_bytes * learned["elementwise_bytes_efficiency"]
    s[K_AR_LATENCY_S], s[K_AR_BYTES_PER_S] = model.ar_latency_s, model.ar_bw
    s[K_PREFILL_MIN_S], s[K_DECODE_MIN_S] = model.prefill_min_s, model.decode_min_s

    def floats(values) -> np.ndarray:
        return np.array(values, dtype=np.float64)

    gemm = learned["gemm"]
    w_edges, eff = floats(gemm["w_edges"]), [floats(row) for row in gemm["eff"]]
    mm, lm_head = roofline[3], roofline[4]
    # A layer's weight elements: per expert (an expert's GEMM); the LM head's, whole.
    weights = [mm[k, M_WEIGHT] / mm[k, M_NUM_EXPERTS] for k in range(mm.shape[0])]
    table = np.array([[by_size(w_edges, row, w) for row in eff] for w in weights], dtype=np.float64)
    head = np.array([by_size(w_edges, row, lm_head[M_WEIGHT]) for row in eff], dtype=np.float64)
    return (s, table.reshape(len(weights), len(eff)), floats(gemm["r_edges"]), head,
            floats(learned["prefill_attention"]["edges"]), floats(learned["prefill_attention"]["eff"]),
            floats(learned["decode_attention"]["edges"]), floats(learned["decode_attention"]["eff"]))


@njit(cache=True, inline="always")
def _bin(edges, x, num_values):
    """The bin of `edges` (lower edges) holding x, held to 0..num_values-1 (bisect_right - 1)."""
    i = np.searchsorted(edges, x, side="right") - 1
    if i > num_values - 1:
        i = num_values - 1
    if i < 0:
        i = 0
    return i


@njit(cache=True, inline="always")
def by_size(edges, values, x):
    """The value of the bin of `edges` holding log2(x) (bins by their lower edges; held at the ends): a table read
    by size, in `pack` and at every step."""
    return values[_bin(edges, math.log2(max(x, 1.0)), values.shape[0])]


@njit(cache=True, inline="always")
def _gemm_s(eff_by_bin, r_edges, flops, nbytes, peak_flops, peak_bytes, min_kernel_s):
    """A GEMM's kernel time: a launch plus its ideal time over the efficiency of its compute/memory bin."""
    ratio = (flops / peak_flops) / (nbytes / peak_bytes)
    eff = eff_by_bin[_bin(r_edges, math.log2(ratio), eff_by_bin.shape[0])]
    return min_kernel_s + op_time(flops, nbytes, peak_flops, peak_bytes) / eff


@njit(cache=True, inline="always")
def _attention(price, s, pf_edges, pf_eff, dc_edges, dc_eff, window, pf_chunk, pf_ctx, num_pf, num_decode_seqs,
               decode_ctx, query_tokens):
    """One layer's attention through a sliding `window` (0: none): (seconds, FLOPs, bytes)."""
    peak_flops, peak_bytes = s[K_PEAK_FLOPS], s[K_PEAK_BYTES]
    kvb, afpp, q_bytes = price[P_KV_BYTES_PER_TOKEN_LAYER], price[P_ATTN_FLOPS_PER_PAIR], price[P_Q_BYTES_PER_TOKEN]
    attn_s = 0.0
    flops = 0.0
    nbytes = 0.0
    for j in range(num_pf):
        chunk = pf_chunk[j]
        context = pf_ctx[j]
        pairs, kv_tokens = chunk_pairs(chunk, context, window)
        f = pairs * afpp
        b = kv_tokens * kvb + chunk * q_bytes
        eff = by_size(pf_edges, pf_eff, chunk * (context + chunk))
        attn_s += s[K_PREFILL_MIN_S] + op_time(f, b, peak_flops, peak_bytes) / eff
        flops += f
        nbytes += b
    if num_decode_seqs:
        ctx = window_context(decode_ctx * 1.0, num_decode_seqs, window)
        f = ctx * query_tokens * afpp
        b = ctx * kvb + num_decode_seqs * query_tokens * q_bytes
        eff = by_size(dc_edges, dc_eff, ctx)
        attn_s += s[K_DECODE_MIN_S] + op_time(f, b, peak_flops, peak_bytes) / eff
        flops += f
        nbytes += b
    return attn_s, flops, nbytes


# Inlined into `compiled_pricing.price_parts`: a call would pass each array of the packs as several machine words
# (and, where numba counts references, take and drop one for each).
@njit(cache=True, inline="always")
def step_cost(roof, table, num_prefill_tokens, pf_chunk, pf_ctx, num_pf, num_decode_seqs, decode_ctx, num_sampled,
              query_tokens, pad_tokens, swap_tokens):
    """(time_s, FLOPs, bytes) of one step (`sim.cost.step_args` lists the arguments). `roof`: the model's roofline
    pack; `table`: its learned pack (`pack`)."""
    price, grp_layers, grp_start, mm, lm_head = roof[0], roof[1], roof[2], roof[3], roof[4]
    s, gemm_eff, r_edges, head_eff = table[0], table[1], table[2], table[3]
    pf_edges, pf_eff, dc_edges, dc_eff = table[4], table[5], table[6], table[7]
    n = linear_tokens(num_prefill_tokens, num_decode_seqs, query_tokens, pad_tokens)  # (padding: no attention)
    if n == 0:
        return price[P_OVERHEAD_S], 0.0, 0.0
    peak_flops, peak_bytes, min_kernel_s = s[K_PEAK_FLOPS], s[K_PEAK_BYTES], s[K_MIN_KERNEL_S]
    window, share = attention_window(price)
    model_layers = price[P_NUM_LAYERS]
    time_s = 0.0
    # Attention, one kernel per prefill chunk (causal, against its context) and one for the decodes; every layer (a
    # hybrid model's mean layer: `hybrid_layer_mean`).
    attn_s, f, b = _attention(price, s, pf_edges, pf_eff, dc_edges, dc_eff, window, pf_chunk, pf_ctx, num_pf,
                              num_decode_seqs, decode_ctx, query_tokens)
    if window and share != 1.0:
        whole_s, whole_f, whole_b = _attention(price, s, pf_edges, pf_eff, dc_edges, dc_eff, 0.0, pf_chunk, pf_ctx,
                                               num_pf, num_decode_seqs, decode_ctx, query_tokens)
        attn_s = hybrid_layer_mean(share, attn_s, whole_s)
        f = hybrid_layer_mean(share, f, whole_f)
        b = hybrid_layer_mean(share, b, whole_b)
    if price[P_SPARSE_TOPK] > 0.0:  # DeepSeek sparse attention's indexer: at the roofline's peaks (none fitted to it)
        i = indexer_parts(price, num_prefill_tokens, pf_chunk, pf_ctx, num_pf, num_decode_seqs, decode_ctx,
                          query_tokens)
        attn_s += i[0] + i[3]
        f += i[1] + i[4]
        b += i[2] + i[5]
    flops_total = f * model_layers
    bytes_total = b * model_layers
    # Per layer: the elementwise kernels (norms, residual adds, rotary, activation) and two all-reduces under TP.
    elem_b = layer_elementwise_bytes(n, price[P_HIDDEN], price[P_FFN_PER_GPU])
    launches_s = 3 * min_kernel_s
    elem_s = elem_b / s[K_ELEMENTWISE_BYTES_PER_S]
    if not elem_s > launches_s:
        elem_s = launches_s
    ar_s = layer_allreduce_s(n, price[P_HIDDEN], price[P_TP], s[K_AR_LATENCY_S], s[K_AR_BYTES_PER_S])
    for g in range(grp_layers.shape[0]):
        num_layers = grp_layers[g]
        layer_s = attn_s + elem_s + ar_s
        for k in range(grp_start[g], grp_start[g + 1]):
            f, b = linear_row(mm, k, n)
            layer_s += _gemm_s(gemm_eff[k], r_edges, f, b, peak_flops, peak_bytes, min_kernel_s)
            flops_total += num_layers * f
            bytes_total += num_layers * b
        time_s += num_layers * layer_s
    # The LM head: every sampled row, and each verified draft token of a decoding sequence (its time only).
    rows = num_sampled + num_decode_seqs * (query_tokens - 1)
    if rows:
        f, b = lm_head_flops_bytes(lm_head, rows)
        time_s += _gemm_s(head_eff, r_edges, f, b, peak_flops, peak_bytes, min_kernel_s)
    time_s += swap_tokens * price[P_SWAP_S_PER_TOKEN]
    return time_s + price[P_OVERHEAD_S], flops_total, bytes_total
