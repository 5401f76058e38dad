"""`RooflineCostModel.step_cost` compiled with numba, for the compiled engine core (`sim.compiled`).

`RooflineCostModel.compiled_params()` packs a model's numbers into `params` (the layout below, through
`sim.cost.compiled_pricing`, whose `price_step` calls this function). It repeats `step_cost`'s floating-point operations in the same order, so its
times are bit-identical (tests/unit/test_roofline_kernel.py). Plans without drafts, padding or swaps,
dense layers only (no MoE), no sliding window, LM head included: `compiled_params` says None otherwise.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from sim.cost import numba_cache  # noqa: F401  (drops stale numba caches before anything loads)

# Indices into the float64 array `params[0]`.
(P_FLOPS_PER_S, P_BYTES_PER_S, P_OVERHEAD_S, P_ATTN_FLOPS_PER_PAIR, P_KV_BYTES_PER_TOKEN_LAYER, P_Q_BYTES_PER_TOKEN,
 P_HIDDEN, P_FFN_PER_GPU, P_TP, P_LINK_BYTES_PER_S, P_ALLREDUCE_LATENCY_S, P_WEIGHT_BYTES_PER_PARAM) = range(12)
NUM_PRICE = 12
# Columns of a matmul row (`mm`, `lm_head`): weight params, params per token, experts per token, in, out.
M_WEIGHT, M_PER_TOKEN, M_EXPERTS_PER_TOKEN, M_IN, M_OUT = range(5)
_ACT_BYTES = 2  # as sim.cost.roofline
# Token counts below this have their matmul terms remembered (the pack's memo arrays): a step's matmuls depend on
# its token count alone, and a run prices thousands of steps over far fewer counts. NaN: not computed yet.
MEMO_TOKENS = 8192


def pack(model) -> tuple:
    """(scalars, layers per group, first matmul row of each group (and the end), matmul rows, LM head row,
    memo of each group's matmul (time, FLOPs, bytes) by token count, memo of the LM head's by sampled rows)."""
    scalars = np.zeros(NUM_PRICE)
    scalars[P_FLOPS_PER_S], scalars[P_BYTES_PER_S] = model.flops_per_s, model.bytes_per_s
    scalars[P_OVERHEAD_S] = model.step_overhead_s
    scalars[P_ATTN_FLOPS_PER_PAIR] = model.attn_flops_per_pair
    scalars[P_KV_BYTES_PER_TOKEN_LAYER] = model.kv_bytes_per_token_layer
    scalars[P_Q_BYTES_PER_TOKEN] = model.q_bytes_per_token
    scalars[P_HIDDEN], scalars[P_FFN_PER_GPU], scalars[P_TP] = model.hidden, model.ffn_per_gpu, model.tp
    scalars[P_LINK_BYTES_PER_S] = model.link_bytes_per_s
    scalars[P_ALLREDUCE_LATENCY_S] = model.gpu.allreduce_latency_s
    scalars[P_WEIGHT_BYTES_PER_PARAM] = model.weight_bytes_per_param
    layers = np.array([n for n, _ in model.groups], dtype=np.float64)
    starts = np.cumsum([0] + [len(mms) for _, mms in model.groups]).astype(np.int64)
    rows = [_row(mm) for _, mms in model.groups for mm in mms]
    return (scalars, layers, starts, np.array(rows, dtype=np.float64).reshape(-1, 5), np.array(_row(model.lm_head)),
            np.full((len(layers), MEMO_TOKENS, 3), np.nan), np.full((MEMO_TOKENS, 3), np.nan))


def _row(mm) -> list[float]:
    return [mm.weight_params, mm.params_per_token, mm.experts_per_token, mm.in_features, mm.out_features]


@njit(cache=True)
def _op(f, b, fps, bps):
    x = f / fps
    y = b / bps
    return y if y > x else x  # Python's max(x, y): the first unless the second is larger


@njit(cache=True)
def _matmuls(mm, first, end, num_tokens, wbpp, fps, bps):
    """One layer's matmul rows first..end-1 at `num_tokens`: (time, FLOPs, bytes), each a sum from 0.0 in row
    order, as `step_cost` starts a layer."""
    layer_s = 0.0
    layer_flops = 0.0
    layer_bytes = 0.0
    for k in range(first, end):
        f = 2.0 * num_tokens * mm[k, M_PER_TOKEN]
        act = num_tokens * mm[k, M_EXPERTS_PER_TOKEN] * (mm[k, M_IN] + mm[k, M_OUT]) * _ACT_BYTES
        b = mm[k, M_WEIGHT] * wbpp + act
        layer_s += _op(f, b, fps, bps)
        layer_flops += f
        layer_bytes += b
    return layer_s, layer_flops, layer_bytes


# Inlined into the core (`compiled_pricing.price_parts`): a call would take and drop a reference to each array
# of the pack it is passed, with atomic operations, at every step.
@njit(cache=True, inline="always")
def step_cost(params, num_prefill_tokens, pf_chunk, pf_ctx, num_pf,
              num_decode_seqs, decode_ctx, num_sampled):
    """`RooflineCostModel.step_cost` of a plan without drafts, padding, swaps or MoE layers, the same
    operations in the same order: (time_s, flops, bytes)."""
    price, grp_layers, grp_start, mm, lm_head, mm_memo, head_memo = params
    fps, bps = price[P_FLOPS_PER_S], price[P_BYTES_PER_S]
    num_tokens = num_prefill_tokens + num_decode_seqs
    if num_tokens == 0:
        return price[P_OVERHEAD_S], 0.0, 0.0
    afpp, kvb, qb = price[P_ATTN_FLOPS_PER_PAIR], price[P_KV_BYTES_PER_TOKEN_LAYER], price[P_Q_BYTES_PER_TOKEN]
    attn_pairs = 0.0
    attn_kv_tokens = 0.0
    for j in range(num_pf):
        chunk = pf_chunk[j]
        context = pf_ctx[j]
        attn_pairs += chunk * (context + (chunk + 1) / 2)
        attn_kv_tokens += context + chunk
    pf_f = attn_pairs * afpp
    pf_b = attn_kv_tokens * kvb + num_prefill_tokens * qb
    dc_f = decode_ctx * afpp
    dc_b = decode_ctx * kvb + num_decode_seqs * qb
    elementwise_bytes = num_tokens * (8 * price[P_HIDDEN] + 3 * price[P_FFN_PER_GPU]) * _ACT_BYTES
    allreduce_s = 0.0
    tp = price[P_TP]
    if tp > 1:
        message = num_tokens * price[P_HIDDEN] * _ACT_BYTES
        ring = 2.0 * (tp - 1) / tp * message / price[P_LINK_BYTES_PER_S]
        allreduce_s = 2 * (price[P_ALLREDUCE_LATENCY_S] + ring)
    wbpp = price[P_WEIGHT_BYTES_PER_PARAM]
    time_s = 0.0
    flops_total = 0.0
    bytes_total = 0.0
    for g in range(grp_layers.shape[0]):
        if num_tokens < MEMO_TOKENS and not math.isnan(mm_memo[g, num_tokens, 0]):
            layer_s, layer_flops, layer_bytes = (mm_memo[g, num_tokens, 0], mm_memo[g, num_tokens, 1],
                                                 mm_memo[g, num_tokens, 2])
        else:
            layer_s, layer_flops, layer_bytes = _matmuls(mm, grp_start[g], grp_start[g + 1], num_tokens, wbpp,
                                                         fps, bps)
            if num_tokens < MEMO_TOKENS:
                mm_memo[g, num_tokens, 0], mm_memo[g, num_tokens, 1] = layer_s, layer_flops
                mm_memo[g, num_tokens, 2] = layer_bytes
        if pf_f != 0.0 or pf_b != 0.0:
            layer_s += _op(pf_f, pf_b, fps, bps)
            layer_flops += pf_f
            layer_bytes += pf_b
        if dc_f != 0.0 or dc_b != 0.0:
            layer_s += _op(dc_f, dc_b, fps, bps)
            layer_flops += dc_f
            layer_bytes += dc_b
        layer_s += elementwise_bytes / bps + allreduce_s
        layer_bytes += elementwise_bytes
        n_layers = grp_layers[g]
        time_s += n_layers * layer_s
        flops_total += n_layers * layer_flops
        bytes_total += n_layers * layer_bytes
    if num_sampled:
        if num_sampled < MEMO_TOKENS and not math.isnan(head_memo[num_sampled, 0]):
            head_s, f, b = head_memo[num_sampled, 0], head_memo[num_sampled, 1], head_memo[num_sampled, 2]
        else:
            f = 2.0 * num_sampled * lm_head[M_PER_TOKEN]
            act = num_sampled * lm_head[M_EXPERTS_PER_TOKEN] * (lm_head[M_IN] + lm_head[M_OUT]) * _ACT_BYTES
            b = lm_head[M_WEIGHT] * wbpp + act
            head_s = _op(f, b, fps, bps)
            if num_sampled < MEMO_TOKENS:
                head_memo[num_sampled, 0], head_memo[num_sampled, 1], head_memo[num_sampled, 2] = head_s, f, b
        time_s += head_s
        flops_total += f
        bytes_total += b
    return time_s + price[P_OVERHEAD_S], flops_total, bytes_total


