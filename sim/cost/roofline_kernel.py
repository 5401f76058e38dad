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

from sim.core.step_plan import linear_tokens
from sim.jit import njit
from sim.model.attention_io import MATH_SDPA_MATMULS, MATH_SDPA_PASSES

# Indices into the float64 array `params[0]`.
(P_FLOPS_PER_S, P_BYTES_PER_S, P_OVERHEAD_S, P_ATTN_FLOPS_PER_PAIR, P_KV_BYTES_PER_TOKEN_LAYER, P_Q_BYTES_PER_TOKEN,
 P_HIDDEN, P_FFN_PER_GPU, P_TP, P_LINK_BYTES_PER_S, P_ALLREDUCE_LATENCY_S,
 P_SLIDING_WINDOW, P_LM_HEAD, P_NUM_LAYERS, P_SWAP_S_PER_TOKEN, P_MATERIALIZED, P_SCORE_BYTES_PER_PAIR,
 P_CACHE_BYTES, P_CACHE_BYTES_PER_S, P_FIRST_TOUCH_BYTES_PER_S, P_FLASH_KEY_BLOCK, P_FRESH_PER_PAIR, P_FRESH_PER_QUERY,
 P_FRESH_PER_KEY, P_FLASH_FRESH_PER_QUERY, P_WINDOW_SHARE, P_SCORE_FLOPS_PER_S, P_EXCHANGE_RANKS, P_EXCHANGE_KIND,
 P_SPARSE_TOPK, P_INDEX_FLOPS_PER_PAIR, P_INDEX_BYTES_PER_TOKEN_LAYER, P_INDEX_Q_BYTES_PER_TOKEN, P_INDEX_FLOPS_PER_S,
 P_NUM_PASSES, P_PASSES) = range(36)
# P_SPARSE_TOPK: DeepSeek sparse attention's keys per query (0: dense); its indexer scores every earlier token:
# P_INDEX_* (`indexer_parts`), P_KV_BYTES_PER_TOKEN_LAYER being the attention's own KV (the latent) without its keys.
# P_EXCHANGE_RANKS: a lockstep group's ranks, which exchange the tokens around each expert layer (`ExpertGroup`), 0:
# no group; P_EXCHANGE_KIND: how (EXCHANGE_*, `expert_exchange_s`).
EXCHANGE_GATHER_SCATTER, EXCHANGE_BROADCAST_ALL_REDUCE, EXCHANGE_DP_ATTENTION = 0, 1, 2
EXCHANGE_KINDS = {"all_gather_reduce_scatter": EXCHANGE_GATHER_SCATTER,
                  "broadcast_all_reduce": EXCHANGE_BROADCAST_ALL_REDUCE, "dp_attention": EXCHANGE_DP_ATTENTION}
# The materialized kernel's passes other than its matmuls (`attention_io.math_sdpa_terms`), from P_PASSES on, a row
# of PASS_COLUMNS each: the unit it runs over (U_PAIR: a query row against a key, U_QUERY, U_KEY: a token), bytes
# per unit, FLOPs per unit, and the device's own seconds per unit for it (`GPUSpec.pass_s_per_element`; 0: none).
U_PAIR, U_QUERY, U_KEY = range(3)
PASS_COLUMNS = 4
MAX_PASSES = len(MATH_SDPA_PASSES) - len(MATH_SDPA_MATMULS)  # every pass a dtype can run, less the matmuls
NUM_PRICE = P_PASSES + PASS_COLUMNS * MAX_PASSES
# Columns of a matmul row (`mm`, `lm_head`): weight params (all experts), params per token, experts, experts each
# token routes to, in features, out features, bytes read per weight param (`sim.model.memory.param_bytes`: the
# matrix's own dtype, which under one scheme differs from matrix to matrix), 1 where it runs a lockstep group's tokens
# (`GpuLinear.group_tokens`: the routed experts, and under SGLang's data-parallel attention the dense MLPs too).
M_WEIGHT, M_PER_TOKEN, M_NUM_EXPERTS, M_EXPERTS_PER_TOKEN, M_IN, M_OUT, M_BYTES_PER_PARAM, M_GROUP_TOKENS = range(8)
MATMUL_COLUMNS = M_GROUP_TOKENS + 1
NUM_NUMBERS = 5  # the pack's first arrays hold the model's numbers; the rest are its memos
ACT_BYTES = 2  # activations are bf16/fp16
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
    scalars[P_SLIDING_WINDOW] = model.model.sliding_window or 0
    scalars[P_WINDOW_SHARE] = model.model.window_layer_share
    scalars[P_SPARSE_TOPK] = model.model.index_topk
    scalars[P_INDEX_FLOPS_PER_PAIR] = model.index_flops_per_pair
    scalars[P_INDEX_BYTES_PER_TOKEN_LAYER] = model.model.index_key_bytes
    scalars[P_INDEX_Q_BYTES_PER_TOKEN] = model.index_q_bytes_per_token
    scalars[P_INDEX_FLOPS_PER_S] = model.index_flops_per_s
    if model.expert_group is not None:
        scalars[P_EXCHANGE_RANKS] = model.expert_group.exchange_gpus
        scalars[P_EXCHANGE_KIND] = EXCHANGE_KINDS[model.expert_group.exchange]
    scalars[P_LM_HEAD] = 1.0 if model.include_lm_head else 0.0
    scalars[P_NUM_LAYERS] = model.model.num_layers
    scalars[P_SWAP_S_PER_TOKEN] = model.swap_s_per_token
    # The device's optional attention terms (`GPUSpec`): 0 where absent, and then flash prices as it always did.
    gpu = model.gpu
    scalars[P_CACHE_BYTES] = gpu.cache_bytes or 0
    scalars[P_CACHE_BYTES_PER_S] = gpu.cache_bytes_per_s or 0
    scalars[P_FIRST_TOUCH_BYTES_PER_S] = gpu.first_touch_bytes_per_s or 0
    scalars[P_FLASH_KEY_BLOCK] = gpu.flash_key_block or 0
    scalars[P_FLASH_FRESH_PER_QUERY] = model.flash_fresh_bytes_per_query
    if model.attention_kernel == "materialized":
        scalars[P_MATERIALIZED] = 1.0
        scalars[P_SCORE_BYTES_PER_PAIR] = model.score_bytes_per_pair
        scalars[P_SCORE_FLOPS_PER_S] = model.score_flops_per_s
        scalars[P_FRESH_PER_PAIR], scalars[P_FRESH_PER_QUERY], scalars[P_FRESH_PER_KEY] = model.fresh_bytes
        scalars[P_NUM_PASSES] = len(model.materialized_passes)
        for k, row in enumerate(model.materialized_passes):
            scalars[P_PASSES + PASS_COLUMNS * k:P_PASSES + PASS_COLUMNS * (k + 1)] = row
    layers = np.array([n for n, _ in model.groups], dtype=np.float64)
    starts = np.cumsum([0] + [len(mms) for _, mms in model.groups]).astype(np.int64)
    rows = [_row(mm) for _, mms in model.groups for mm in mms]
    return (scalars, layers, starts, np.array(rows, dtype=np.float64).reshape(-1, MATMUL_COLUMNS),
            np.array(_row(model.lm_head), dtype=np.float64),
            np.full((len(layers), MEMO_TOKENS, 3), np.nan), np.full((MEMO_TOKENS, 3), np.nan))


def _row(mm) -> list[float]:
    return [mm.weight_params, mm.params_per_token, mm.num_experts, mm.experts_per_token, mm.in_features,
            mm.out_features, mm.bytes_per_param, float(mm.group_tokens)]


@njit(cache=True)
def op_time(f, b, fps, bps):
    """An op's time: compute-bound or memory-bound, whichever is slower."""
    x = f / fps
    y = b / bps
    return y if y > x else x


@njit(cache=True, inline="always")
def touched_experts(experts, experts_per_token, num_tokens):
    """The experts some of `num_tokens` tokens route to, in expectation under uniform routing (each token picks
    `experts_per_token` of `experts`): every cost model's mixture-of-experts layer reads these experts' weights."""
    return experts * (1.0 - (1.0 - experts_per_token / experts) ** float(num_tokens))


@njit(cache=True, inline="always")
def expert_load(experts, experts_per_token, num_tokens):
    """The tokens each touched expert gets, in expectation under uniform routing (num_tokens x top-k / the touched
    experts; 1 at one token): the batch a fused mixture-of-experts kernel runs each touched expert's GEMM at."""
    return num_tokens * experts_per_token / touched_experts(experts, experts_per_token, num_tokens)


# The helpers take numbers, not a matmul row: a call that passes an array takes and drops a reference to it
# (atomic operations) wherever numba counts references (the Python cost models' calls; the compiled core counts
# none, sim/compiled/kernel.py `run`), which there cost more than the arithmetic.
@njit(cache=True)
def linear_flops_bytes(weight_params, params_per_token, experts, experts_per_token, in_features, out_features,
                       num_tokens, wbpp):
    """(FLOPs, bytes) of a matmul at `num_tokens`: 2 FLOPs per parameter per token; the weights read once (of a
    mixture of experts, the experts some token routes to, in expectation under uniform routing) and the
    activations in and out."""
    flops = 2.0 * num_tokens * params_per_token
    if experts_per_token < experts:  # routed experts (under expert parallelism a GPU may hold just one)
        weight_params = weight_params / experts * touched_experts(experts, experts_per_token, num_tokens)
    act = num_tokens * experts_per_token * (in_features + out_features) * ACT_BYTES
    return flops, weight_params * wbpp + act


@njit(cache=True, inline="always")
def linear_row(mm, k, num_tokens):
    return linear_flops_bytes(mm[k, M_WEIGHT], mm[k, M_PER_TOKEN], mm[k, M_NUM_EXPERTS], mm[k, M_EXPERTS_PER_TOKEN],
                              mm[k, M_IN], mm[k, M_OUT], num_tokens, mm[k, M_BYTES_PER_PARAM])


@njit(cache=True, inline="always")
def lm_head_flops_bytes(lm_head, rows):
    return linear_flops_bytes(lm_head[M_WEIGHT], lm_head[M_PER_TOKEN], lm_head[M_NUM_EXPERTS],
                              lm_head[M_EXPERTS_PER_TOKEN], lm_head[M_IN], lm_head[M_OUT], rows,
                              lm_head[M_BYTES_PER_PARAM])


@njit(cache=True)
def _matmuls(mm, first, end, num_tokens, expert_tokens, fps, bps):
    """One layer's matmul rows first..end-1 at `num_tokens`, those of a lockstep group (M_GROUP_TOKENS) at
    `expert_tokens` where that is not 0 (a lockstep rank's group: `step_cost`): (time, FLOPs, bytes)."""
    layer_s = 0.0
    layer_flops = 0.0
    layer_bytes = 0.0
    for k in range(first, end):
        f, b = linear_row(mm, k, expert_tokens if expert_tokens and mm[k, M_GROUP_TOKENS] != 0.0 else num_tokens)
        layer_s += op_time(f, b, fps, bps)
        layer_flops += f
        layer_bytes += b
    return layer_s, layer_flops, layer_bytes


@njit(cache=True)
def _runs_group_tokens(mm, first, end):
    """Whether a layer has a matmul at its group's tokens, which the ranks then exchange around it."""
    for k in range(first, end):
        if mm[k, M_GROUP_TOKENS] != 0.0:
            return True
    return False


@njit(cache=True)
def tiled_causal_pairs(chunk, context, key_block):
    """Score pairs a tiled flash kernel computes for `chunk` query rows after `context` earlier tokens, causal, in
    blocks of `key_block` keys: each row computes every key block up to the one holding its own key, that one whole
    (its masked part too), up to the chunk's last key. (torch's CPU kernel: its query blocks nest in its key blocks,
    so this is `attention_io.tiled_score_pairs`'s count.)"""
    end = context + chunk
    pairs = 0.0
    j = int(context // key_block)
    while j * key_block < end:
        first = max(context, j * key_block)
        last = min(end, (j + 1) * key_block)
        pairs += (last - first) * last
        j += 1
    return pairs


@njit(cache=True, inline="always")
def _bandwidth(nbytes, bps, cache_bytes, cache_bps):
    """An op's bandwidth: the cache's if the device has one and the op moves at most its size, else memory's."""
    return cache_bps if cache_bytes > 0.0 and nbytes <= cache_bytes else bps


@njit(cache=True)
def materialized_parts(price, pairs, queries, keys, mm_f, io_b):
    """(time, FLOPs, bytes) of the materialized kernel (`attention_io.MATH_SDPA_PASSES`, packed by
    `attention_io.math_sdpa_terms`) over `pairs` (query row, key) pairs of `queries` query tokens against `keys` key
    tokens: its two matmuls as one op (FLOPs `mm_f`, the Q, K, V and O traffic `io_b`, S written and P read), then
    each other pass as an op, every op at the device's fp32 rate (the kernel computes in fp32 whatever its inputs);
    an op moving at most the device's cache runs at the cache's bandwidth. A pass the device
    gives its own time per element (a CPU core's vector work, measured with the data in cache) pays it on top: one
    core does not hide that work behind its memory traffic (benchmarks/results/attention.md, "Each pass's own work").
    Then the first touch of every new buffer, where the device pays one (time only: the page zeroing is not counted
    in bytes)."""
    fps, bps = price[P_SCORE_FLOPS_PER_S], price[P_BYTES_PER_S]
    cache, cache_bps = price[P_CACHE_BYTES], price[P_CACHE_BYTES_PER_S]
    mm_b = io_b + pairs * price[P_SCORE_BYTES_PER_PAIR]
    time_s = op_time(mm_f, mm_b, fps, _bandwidth(mm_b, bps, cache, cache_bps))
    flops = mm_f
    nbytes = mm_b
    for k in range(int(price[P_NUM_PASSES])):
        row = P_PASSES + PASS_COLUMNS * k
        unit = price[row]
        units = pairs if unit == U_PAIR else (queries if unit == U_QUERY else keys)
        b = units * price[row + 1]
        f = units * price[row + 2]
        time_s += op_time(f, b, fps, _bandwidth(b, bps, cache, cache_bps)) + units * price[row + 3]
        flops += f
        nbytes += b
    first_touch = price[P_FIRST_TOUCH_BYTES_PER_S]
    if first_touch > 0.0:
        time_s += (pairs * price[P_FRESH_PER_PAIR] + queries * price[P_FRESH_PER_QUERY]
                   + keys * price[P_FRESH_PER_KEY]) / first_touch
    return time_s, flops, nbytes


@njit(cache=True, inline="always")
def chunk_pairs(chunk, context, window):
    """A prefill chunk's causal attention against its context: (query-key pairs, KV tokens read), each row's keys
    capped by a sliding window (0: none)."""
    if window:
        return chunk * min(context + (chunk + 1) / 2, window), min(context + chunk, window)
    return chunk * (context + (chunk + 1) / 2), context + chunk


@njit(cache=True, inline="always")
def window_context(decode_ctx, num_decode_seqs, window):
    """The context tokens the decodes read, each sequence's capped by a sliding window (0: none)."""
    if window:
        return min(decode_ctx, num_decode_seqs * window)
    return decode_ctx


@njit(cache=True, inline="always")
def layer_elementwise_bytes(num_tokens, hidden, ffn_per_gpu):
    """Bytes a layer's norms, residual adds, rotary and activation move: memory-bound streams over the hidden
    states."""
    return num_tokens * (8 * hidden + 3 * ffn_per_gpu) * ACT_BYTES


@njit(cache=True, inline="always")
def layer_allreduce_s(num_tokens, hidden, tp, latency_s, link_bytes_per_s):
    """A layer's two tensor-parallel all-reduces of the hidden states (0 at TP 1): each a latency plus a ring's
    2 (tp - 1) / tp of the message over the link."""
    if tp > 1:
        message = num_tokens * hidden * ACT_BYTES
        return 2 * (latency_s + 2.0 * (tp - 1) / tp * message / link_bytes_per_s)
    return 0.0


@njit(cache=True)
def expert_exchange_s(expert_tokens, hidden, ranks, kind, latency_s, link_bytes_per_s, prefill):
    """A lockstep group's exchange around one mixture-of-experts layer, over its `ranks` (one GPU each; the other
    tensor-parallel positions exchange alongside): every rank's hidden states gathered (the message: the group's
    `expert_tokens` tokens), and the experts' outputs summed back to each rank. EXCHANGE_GATHER_SCATTER: an
    all-gather and a reduce-scatter, each a latency plus a ring's (r - 1) / r of the message over the link (vLLM's
    AgRsAll2AllManager, its default from 0.11.0). EXCHANGE_BROADCAST_ALL_REDUCE: each rank broadcasts its tokens in
    turn (a latency each, every token crossing the link once), then an all-reduce of the whole message (a latency
    and 2 (r - 1) / r of it; vLLM's naive dispatch and combine before). EXCHANGE_DP_ATTENTION (SGLang's, over every
    GPU of the group; layers/dp_attention.py and layers/communicator.py, read in 0.5.3 and 0.5.9): in a step without
    a prefill (`prefill` false) an all-gather and a reduce-scatter of the padded tokens (DpPaddingMode MAX_LEN), in
    one with a prefill two all-reduces of the unpadded ones (SUM_LEN: the gather by all-reduce, the MLP's output
    all-reduced), each 2 (r - 1) / r of the message and a latency: the all-gather pair's time at twice the message.
    It is priced by the rank's own step, and a group's step lasts its slowest rank's, a prefilling one wherever one
    prefills. 0 without a group."""
    if ranks <= 1:
        return 0.0
    message = expert_tokens * hidden * ACT_BYTES
    if kind == EXCHANGE_DP_ATTENTION and prefill:
        message *= 2.0
    share_s = (ranks - 1) / ranks * message / link_bytes_per_s
    if kind == EXCHANGE_BROADCAST_ALL_REDUCE:
        return ranks * latency_s + message / link_bytes_per_s + latency_s + 2 * share_s
    return 2 * (latency_s + share_s)


@njit(cache=True, inline="always")
def hybrid_layer_mean(share, windowed, whole):
    """A hybrid model's mean layer of some attention term: `share` of the layers attend through the sliding window
    (`windowed`), the rest to the whole context (`whole`). Each layer's attention is its own kernels, so the layers'
    sum is this share-weighted sum; every cost model prices a hybrid layer by it."""
    return share * windowed + (1.0 - share) * whole


@njit(cache=True, inline="always")
def attention_parts(price, num_prefill_tokens, pf_chunk, pf_ctx, num_pf, num_decode_seqs, decode_ctx, query_tokens):
    """One layer's attention: (time, FLOPs, bytes) of the prefill chunks, then of the decodes (`layer_attention`); a
    hybrid model's mean layer (`hybrid_layer_mean`). Under DeepSeek sparse attention every layer's attends at most
    its top-k keys a query, as a window caps it, and its indexer scores every earlier token (`indexer_parts`). As
    for a window, the decodes' cap applies to their summed context (at most top-k a sequence: more than the sum of
    each one's where contexts straddle top-k), and a chunk reads at most top-k keys' KV, where the rows' picks together
    may reach further back: approximations, said here."""
    window, share = attention_window(price)
    a = layer_attention(price, window, num_prefill_tokens, pf_chunk, pf_ctx, num_pf, num_decode_seqs, decode_ctx,
                        query_tokens)
    if price[P_SPARSE_TOPK] > 0.0:
        i = indexer_parts(price, num_prefill_tokens, pf_chunk, pf_ctx, num_pf, num_decode_seqs, decode_ctx,
                          query_tokens)
        return a[0] + i[0], a[1] + i[1], a[2] + i[2], a[3] + i[3], a[4] + i[4], a[5] + i[5]
    if not window or share == 1.0:
        return a
    b = layer_attention(price, 0.0, num_prefill_tokens, pf_chunk, pf_ctx, num_pf, num_decode_seqs, decode_ctx,
                        query_tokens)
    return (hybrid_layer_mean(share, a[0], b[0]), hybrid_layer_mean(share, a[1], b[1]),
            hybrid_layer_mean(share, a[2], b[2]), hybrid_layer_mean(share, a[3], b[3]),
            hybrid_layer_mean(share, a[4], b[4]), hybrid_layer_mean(share, a[5], b[5]))


@njit(cache=True, inline="always")
def attention_window(price):
    """(the most keys a query attends, 0: every earlier one; the share of layers so capped): DeepSeek sparse
    attention's top-k on every layer, else the sliding window's. Every cost model that prices sparse attention reads
    it here."""
    if price[P_SPARSE_TOPK] > 0.0:
        return price[P_SPARSE_TOPK], 1.0
    return price[P_SLIDING_WINDOW], price[P_WINDOW_SHARE]


@njit(cache=True, inline="always")
def indexer_parts(price, num_prefill_tokens, pf_chunk, pf_ctx, num_pf, num_decode_seqs, decode_ctx, query_tokens):
    """DeepSeek sparse attention's indexer in one layer: (time, FLOPs, bytes) of the prefill chunks, then of the
    decodes. Every query token scores every key up to its own (causal, uncapped), P_INDEX_FLOPS_PER_PAIR a pair at
    the FP8 rate, reading each key's indexer entry once and its own query and weights."""
    pairs = 0.0
    keys = 0.0
    for j in range(num_pf):
        pair, kv = chunk_pairs(pf_chunk[j], pf_ctx[j], 0.0)
        pairs += pair
        keys += kv
    fpp, kb, qb, fps = (price[P_INDEX_FLOPS_PER_PAIR], price[P_INDEX_BYTES_PER_TOKEN_LAYER],
                        price[P_INDEX_Q_BYTES_PER_TOKEN], price[P_INDEX_FLOPS_PER_S])
    pf_f, pf_b = pairs * fpp, keys * kb + num_prefill_tokens * qb
    dc_f, dc_b = decode_ctx * query_tokens * fpp, decode_ctx * kb + num_decode_seqs * query_tokens * qb
    bps = price[P_BYTES_PER_S]
    return op_time(pf_f, pf_b, fps, bps), pf_f, pf_b, op_time(dc_f, dc_b, fps, bps), dc_f, dc_b


@njit(cache=True, inline="always")
def layer_attention(price, window, num_prefill_tokens, pf_chunk, pf_ctx, num_pf, num_decode_seqs, decode_ctx,
                    query_tokens):
    """One layer's attention through a sliding `window` (0: none): (time, FLOPs, bytes) of the prefill chunks, then
    of the decodes.

    FlashAttention (P_MATERIALIZED 0): prefill chunks against their context, causal (the masked half is skipped;
    on a device with a flash key block, each row's whole diagonal block is computed: `tiled_causal_pairs`; not
    under a sliding window), the KV and the queries read once, each a single op; decodes read their KV; on a device
    that pays a first touch, the output is a new buffer. Materialized scores (1): torch's math SDPA
    (`materialized_parts`) computes the whole rectangle, every chunk's rows against every key it attends (context +
    chunk; the causal mask is applied to the scores, not skipped). Decodes the same, with N_q = the sequence's query
    tokens (1, or γ+1 when verifying drafts), through the same passes (a mask included)."""
    fps, bps = price[P_FLOPS_PER_S], price[P_BYTES_PER_S]
    afpp, kvb, qb = price[P_ATTN_FLOPS_PER_PAIR], price[P_KV_BYTES_PER_TOKEN_LAYER], price[P_Q_BYTES_PER_TOKEN]
    materialized = price[P_MATERIALIZED] != 0.0
    key_block = price[P_FLASH_KEY_BLOCK]
    # Attention: prefill chunks against their context (causal), decodes reading their KV.
    attn_pairs = 0.0
    attn_kv_tokens = 0.0
    scores = 0.0  # materialized: score elements per head of the prefill chunks (rows x keys)
    for j in range(num_pf):
        chunk = pf_chunk[j]
        context = pf_ctx[j]
        pairs, kv_tokens = chunk_pairs(chunk, context, window)
        if key_block > 0.0 and not window:
            pairs = tiled_causal_pairs(chunk, context, key_block)
        attn_pairs += pairs
        attn_kv_tokens += kv_tokens
        if materialized:  # every key some row attends (under a window, the keys inside some row's window)
            scores += chunk * (min(context + chunk, window + chunk) if window else context + chunk)
    decode_ctx = window_context(decode_ctx, num_decode_seqs, window)
    pf_f = attn_pairs * afpp
    pf_b = attn_kv_tokens * kvb + num_prefill_tokens * qb
    # Each of a sequence's query tokens (γ+1 when verifying drafts) attends to its context; the KV is read once.
    dc_f = decode_ctx * query_tokens * afpp
    dc_b = decode_ctx * kvb + num_decode_seqs * query_tokens * qb
    if not materialized:
        pf_s = op_time(pf_f, pf_b, fps, bps)
        dc_s = op_time(dc_f, dc_b, fps, bps)
        first_touch = price[P_FIRST_TOUCH_BYTES_PER_S]
        if first_touch > 0.0:
            pf_s += num_prefill_tokens * price[P_FLASH_FRESH_PER_QUERY] / first_touch
            dc_s += num_decode_seqs * query_tokens * price[P_FLASH_FRESH_PER_QUERY] / first_touch
        return pf_s, pf_f, pf_b, dc_s, dc_f, dc_b
    pf_s, pf_f, pf_b = materialized_parts(price, scores, num_prefill_tokens, attn_kv_tokens, scores * afpp, pf_b)
    dc_s, dc_f, dc_b = materialized_parts(price, decode_ctx * query_tokens, num_decode_seqs * query_tokens,
                                          decode_ctx, dc_f, dc_b)
    return pf_s, pf_f, pf_b, dc_s, dc_f, dc_b


# Inlined into `compiled_pricing.price_parts`: a call would pass each array of the pack as several machine words
# (and, where numba counts references, take and drop one for each).
@njit(cache=True, inline="always")
def step_cost(params, num_prefill_tokens, pf_chunk, pf_ctx, num_pf, num_decode_seqs, decode_ctx, num_sampled,
              query_tokens, pad_tokens, swap_tokens, expert_tokens):
    """(time_s, FLOPs, bytes) of one step (`sim.cost.step_args` lists the arguments). A lockstep rank's step
    (`expert_tokens` not 0) runs its routed experts at its group's tokens, and exchanges them around each
    mixture-of-experts layer (`expert_exchange_s`)."""
    price, grp_layers, grp_start, mm, lm_head, mm_memo, head_memo = params
    fps, bps = price[P_FLOPS_PER_S], price[P_BYTES_PER_S]
    num_tokens = linear_tokens(num_prefill_tokens, num_decode_seqs, query_tokens, pad_tokens)  # padding: no attention
    if num_tokens == 0:
        return price[P_OVERHEAD_S], 0.0, 0.0
    pf_s, pf_f, pf_b, dc_s, dc_f, dc_b = attention_parts(price, num_prefill_tokens, pf_chunk, pf_ctx, num_pf,
                                                         num_decode_seqs, decode_ctx, query_tokens)
    elementwise_bytes = layer_elementwise_bytes(num_tokens, price[P_HIDDEN], price[P_FFN_PER_GPU])
    allreduce_s = layer_allreduce_s(num_tokens, price[P_HIDDEN], price[P_TP], price[P_ALLREDUCE_LATENCY_S],
                                    price[P_LINK_BYTES_PER_S])
    time_s = 0.0
    flops_total = 0.0
    bytes_total = 0.0
    exchange_s = 0.0
    if expert_tokens:
        exchange_s = expert_exchange_s(expert_tokens, price[P_HIDDEN], price[P_EXCHANGE_RANKS],
                                       price[P_EXCHANGE_KIND], price[P_ALLREDUCE_LATENCY_S],
                                       price[P_LINK_BYTES_PER_S], num_prefill_tokens > 0)
    for g in range(grp_layers.shape[0]):
        if expert_tokens:  # (the memo holds a step's own tokens through every matmul)
            layer_s, layer_flops, layer_bytes = _matmuls(mm, grp_start[g], grp_start[g + 1], num_tokens,
                                                         expert_tokens, fps, bps)
            if _runs_group_tokens(mm, grp_start[g], grp_start[g + 1]):
                layer_s += exchange_s
        elif num_tokens < MEMO_TOKENS and not math.isnan(mm_memo[g, num_tokens, 0]):
            layer_s, layer_flops, layer_bytes = (mm_memo[g, num_tokens, 0], mm_memo[g, num_tokens, 1],
                                                 mm_memo[g, num_tokens, 2])
        else:
            layer_s, layer_flops, layer_bytes = _matmuls(mm, grp_start[g], grp_start[g + 1], num_tokens, 0, fps,
                                                         bps)
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
            f, b = lm_head_flops_bytes(lm_head, rows)
            head_s = op_time(f, b, fps, bps)
            if rows < MEMO_TOKENS:
                head_memo[rows, 0], head_memo[rows, 1], head_memo[rows, 2] = head_s, f, b
        time_s += head_s
        flops_total += f
        bytes_total += b
    time_s += swap_tokens * price[P_SWAP_S_PER_TOKEN]
    return time_s + price[P_OVERHEAD_S], flops_total, bytes_total
