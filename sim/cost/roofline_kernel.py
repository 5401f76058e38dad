"""The roofline's price of a step, written once: `RooflineCostModel.step_cost` and the compiled engine core
(`sim.compiled`) both call `step_cost` below, through `sim.cost.compiled_pricing.price_parts`.

`pack(model)` turns a model's numbers into arrays (the layout below); `step_cost` prices one step from them. Every
term of the roofline is here: linear layers (mixture-of-experts layers read only the
experts some token routes to), attention (a sliding window caps the context; FlashAttention, or a kernel that
materializes the scores: `attention_parts`), norms and activations, tensor-parallel all-reduces, the LM head, swap
copies, the step overhead.
"""

from __future__ import annotations

import math

import numpy as np

from sim.cost.jit import njit

# Indices into the float64 array `params[0]`.
(P_FLOPS_PER_S, P_BYTES_PER_S, P_OVERHEAD_S, P_ATTN_FLOPS_PER_PAIR, P_KV_BYTES_PER_TOKEN_LAYER, P_Q_BYTES_PER_TOKEN,
 P_HIDDEN, P_FFN_PER_GPU, P_TP, P_LINK_BYTES_PER_S, P_ALLREDUCE_LATENCY_S, P_WEIGHT_BYTES_PER_PARAM,
 P_SLIDING_WINDOW, P_LM_HEAD, P_NUM_LAYERS, P_HOST_LINK_BYTES_PER_S, P_MATERIALIZED, P_SCORE_BYTES_PER_PAIR,
 P_SOFTMAX_FLOPS_PER_PAIR) = range(19)
NUM_PRICE = 19
# Columns of a matmul row (`mm`, `lm_head`): weight params (all experts), params per token, experts, experts each
# token routes to, in features, out features.
M_WEIGHT, M_PER_TOKEN, M_NUM_EXPERTS, M_EXPERTS_PER_TOKEN, M_IN, M_OUT = range(6)
NUM_NUMBERS = 5  # the pack's first arrays hold the model's numbers; the rest are its memos
ACT_BYTES = 2  # activations are bf16/fp16
# A kernel that materializes the scores (Dao et al. 2022, "FlashAttention", arXiv:2205.14135, Algorithm 0, "standard
# attention implementation") moves every element of the score matrix through HBM four times: S = QK^T written, S read
# by the softmax, P = softmax(S) written, P read by PV. (torch's math SDPA, `_scaled_dot_product_attention_math` in
# aten/src/ATen/native/transformers/attention.cpp, does the same: a matmul, an out-of-place softmax, a matmul; a
# causal mask applied in its own pass would add one read and one write more, which this count leaves out.)
SCORE_ACCESSES = 4
# FLOPs per score element of a safe softmax: the row max, the subtraction, exp (counted as one), the row sum and the
# division (Milakov & Gimelshein 2018, "Online normalizer calculation for softmax", arXiv:1805.02867, Algorithm 2).
SOFTMAX_FLOPS_PER_SCORE = 5
# Token counts below this have their matmul terms remembered (the pack's memo arrays): a step's matmuls depend on
# its token count alone, and a run prices thousands of steps over far fewer counts. NaN: not computed yet.
MEMO_TOKENS = 8192


def pack(model) -> tuple:
    """(scalars, layers per group, first matmul row of each group (and the end), matmul rows, LM head row,
    memo of each group's matmuls (time, FLOPs, bytes) by token count, memo of the LM head's by rows)."""
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
    scalars[P_SLIDING_WINDOW] = model.model.sliding_window or 0
    scalars[P_LM_HEAD] = 1.0 if model.include_lm_head else 0.0
    scalars[P_NUM_LAYERS] = model.model.num_layers
    scalars[P_HOST_LINK_BYTES_PER_S] = model.gpu.host_link_bytes_per_s
    if model.attention_kernel == "materialized":  # flash leaves the three at 0: its prices are those of before
        scalars[P_MATERIALIZED] = 1.0
        scalars[P_SCORE_BYTES_PER_PAIR] = model.score_bytes_per_pair
        scalars[P_SOFTMAX_FLOPS_PER_PAIR] = model.softmax_flops_per_pair
    layers = np.array([n for n, _ in model.groups], dtype=np.float64)
    starts = np.cumsum([0] + [len(mms) for _, mms in model.groups]).astype(np.int64)
    rows = [_row(mm) for _, mms in model.groups for mm in mms]
    return (scalars, layers, starts, np.array(rows, dtype=np.float64).reshape(-1, 6),
            np.array(_row(model.lm_head), dtype=np.float64),
            np.full((len(layers), MEMO_TOKENS, 3), np.nan), np.full((MEMO_TOKENS, 3), np.nan))


def _row(mm) -> list[float]:
    return [mm.weight_params, mm.params_per_token, mm.num_experts, mm.experts_per_token, mm.in_features,
            mm.out_features]


@njit(cache=True)
def op_time(f, b, fps, bps):
    """An op's time: compute-bound or memory-bound, whichever is slower."""
    x = f / fps
    y = b / bps
    return y if y > x else x


# The helpers take numbers, not a matmul row: a call that passes an array takes and drops a reference to it
# (atomic operations), which at every step of the compiled core cost more than the arithmetic.
@njit(cache=True)
def linear_flops_bytes(weight_params, params_per_token, experts, experts_per_token, in_features, out_features,
                       num_tokens, wbpp):
    """(FLOPs, bytes) of a matmul at `num_tokens`: 2 FLOPs per parameter per token; the weights read once (of a
    mixture of experts, the experts some token routes to, in expectation under uniform routing) and the
    activations in and out."""
    flops = 2.0 * num_tokens * params_per_token
    if experts > 1:
        frac = experts_per_token / experts
        touched = experts * (1.0 - (1.0 - frac) ** float(num_tokens))
        weight_params = weight_params / experts * touched
    act = num_tokens * experts_per_token * (in_features + out_features) * ACT_BYTES
    return flops, weight_params * wbpp + act


@njit(cache=True, inline="always")
def linear_row(mm, k, num_tokens, wbpp):
    return linear_flops_bytes(mm[k, M_WEIGHT], mm[k, M_PER_TOKEN], mm[k, M_NUM_EXPERTS], mm[k, M_EXPERTS_PER_TOKEN],
                   mm[k, M_IN], mm[k, M_OUT], num_tokens, wbpp)


@njit(cache=True)
def _matmuls(mm, first, end, num_tokens, wbpp, fps, bps):
    """One layer's matmul rows first..end-1 at `num_tokens`: (time, FLOPs, bytes)."""
    layer_s = 0.0
    layer_flops = 0.0
    layer_bytes = 0.0
    for k in range(first, end):
        f, b = linear_row(mm, k, num_tokens, wbpp)
        layer_s += op_time(f, b, fps, bps)
        layer_flops += f
        layer_bytes += b
    return layer_s, layer_flops, layer_bytes


@njit(cache=True, inline="always")
def attention_parts(price, num_prefill_tokens, pf_chunk, pf_ctx, num_pf, num_decode_seqs, decode_ctx, query_tokens):
    """One layer's attention: (time, FLOPs, bytes) of the prefill chunks, then of the decodes.

    FlashAttention (P_MATERIALIZED 0): prefill chunks against their context, causal (the masked half is skipped),
    the KV and the queries read once, each a single op; decodes read their KV. Materialized scores (1): a standard
    kernel computes the whole rectangle, every chunk's rows against every key it attends (context + chunk; the
    causal mask is applied to the scores, not skipped), and moves each score element through HBM SCORE_ACCESSES
    times. It runs as two ops: the two matmuls (QK^T writes S, PV reads P) and the softmax (reads S, writes P). QK^T
    and PV have the same FLOPs and traffic per score element (d multiply-adds, one score element moved), so on one
    side of the ridge point their one op costs what two would. Decodes the same, with N_q = the sequence's query
    tokens (1, or γ+1 when verifying drafts)."""
    fps, bps = price[P_FLOPS_PER_S], price[P_BYTES_PER_S]
    afpp, kvb, qb = price[P_ATTN_FLOPS_PER_PAIR], price[P_KV_BYTES_PER_TOKEN_LAYER], price[P_Q_BYTES_PER_TOKEN]
    window = price[P_SLIDING_WINDOW]
    materialized = price[P_MATERIALIZED] != 0.0
    # Attention: prefill chunks against their context (causal), decodes reading their KV.
    attn_pairs = 0.0
    attn_kv_tokens = 0.0
    scores = 0.0  # materialized: score elements per head of the prefill chunks (rows x keys)
    for j in range(num_pf):
        chunk = pf_chunk[j]
        context = pf_ctx[j]
        if window:
            attn_pairs += chunk * min(context + (chunk + 1) / 2, window)
            attn_kv_tokens += min(context + chunk, window)
            if materialized:  # the keys inside some row's window
                scores += chunk * min(context + chunk, window + chunk)
        else:
            attn_pairs += chunk * (context + (chunk + 1) / 2)
            attn_kv_tokens += context + chunk
            if materialized:
                scores += chunk * (context + chunk)
    if window:
        decode_ctx = min(decode_ctx, num_decode_seqs * window)
    pf_f = attn_pairs * afpp
    pf_b = attn_kv_tokens * kvb + num_prefill_tokens * qb
    # Each of a sequence's query tokens (γ+1 when verifying drafts) attends to its context; the KV is read once.
    dc_f = decode_ctx * query_tokens * afpp
    dc_b = decode_ctx * kvb + num_decode_seqs * query_tokens * qb
    if not materialized:
        return op_time(pf_f, pf_b, fps, bps), pf_f, pf_b, op_time(dc_f, dc_b, fps, bps), dc_f, dc_b
    half_traffic = price[P_SCORE_BYTES_PER_PAIR] * (SCORE_ACCESSES // 2)  # per score element, per op
    sfpp = price[P_SOFTMAX_FLOPS_PER_PAIR]
    pf_f = scores * afpp  # the whole rectangle
    mm_b = pf_b + scores * half_traffic
    sm_f = scores * sfpp
    sm_b = scores * half_traffic
    pf_s = op_time(pf_f, mm_b, fps, bps) + op_time(sm_f, sm_b, fps, bps)
    dc_scores = decode_ctx * query_tokens
    dmm_b = dc_b + dc_scores * half_traffic
    dsm_f = dc_scores * sfpp
    dsm_b = dc_scores * half_traffic
    dc_s = op_time(dc_f, dmm_b, fps, bps) + op_time(dsm_f, dsm_b, fps, bps)
    return pf_s, pf_f + sm_f, mm_b + sm_b, dc_s, dc_f + dsm_f, dmm_b + dsm_b


# Inlined into the core (`compiled_pricing.price_parts`): a call would take and drop a reference to each array
# of the pack it is passed, with atomic operations, at every step.
@njit(cache=True, inline="always")
def step_cost(params, num_prefill_tokens, pf_chunk, pf_ctx, num_pf, num_decode_seqs, decode_ctx, num_sampled,
              query_tokens, swap_tokens):
    """(time_s, FLOPs, bytes) of one step (`sim.cost.step_args` lists the arguments)."""
    price, grp_layers, grp_start, mm, lm_head, mm_memo, head_memo = params
    fps, bps = price[P_FLOPS_PER_S], price[P_BYTES_PER_S]
    num_tokens = num_prefill_tokens + num_decode_seqs * query_tokens
    if num_tokens == 0:
        return price[P_OVERHEAD_S], 0.0, 0.0
    kvb = price[P_KV_BYTES_PER_TOKEN_LAYER]
    pf_s, pf_f, pf_b, dc_s, dc_f, dc_b = attention_parts(price, num_prefill_tokens, pf_chunk, pf_ctx, num_pf,
                                                         num_decode_seqs, decode_ctx, query_tokens)
    # Norms, residual adds, rotary, activation: memory-bound streams over the hidden states.
    elementwise_bytes = num_tokens * (8 * price[P_HIDDEN] + 3 * price[P_FFN_PER_GPU]) * ACT_BYTES
    allreduce_s = 0.0
    tp = price[P_TP]
    if tp > 1:
        message = num_tokens * price[P_HIDDEN] * ACT_BYTES
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
            layer_s += pf_s
            layer_flops += pf_f
            layer_bytes += pf_b
        if dc_f != 0.0 or dc_b != 0.0:
            layer_s += dc_s
            layer_flops += dc_f
            layer_bytes += dc_b
        layer_s += elementwise_bytes / bps + allreduce_s
        layer_bytes += elementwise_bytes
        n_layers = grp_layers[g]
        time_s += n_layers * layer_s
        flops_total += n_layers * layer_flops
        bytes_total += n_layers * layer_bytes
    # The LM head: every sampled row, and each verified draft token of a decoding sequence.
    rows = num_sampled + num_decode_seqs * (query_tokens - 1)
    if rows and price[P_LM_HEAD] != 0.0:
        if rows < MEMO_TOKENS and not math.isnan(head_memo[rows, 0]):
            head_s, f, b = head_memo[rows, 0], head_memo[rows, 1], head_memo[rows, 2]
        else:
            f, b = linear_flops_bytes(lm_head[M_WEIGHT], lm_head[M_PER_TOKEN], lm_head[M_NUM_EXPERTS],
                           lm_head[M_EXPERTS_PER_TOKEN], lm_head[M_IN], lm_head[M_OUT], rows, wbpp)
            head_s = op_time(f, b, fps, bps)
            if rows < MEMO_TOKENS:
                head_memo[rows, 0], head_memo[rows, 1], head_memo[rows, 2] = head_s, f, b
        time_s += head_s
        flops_total += f
        bytes_total += b
    if swap_tokens:
        # Each GPU moves its own shard of the KV over its own host link.
        time_s += swap_tokens * kvb * price[P_NUM_LAYERS] / price[P_HOST_LINK_BYTES_PER_S]
    return time_s + price[P_OVERHEAD_S], flops_total, bytes_total
