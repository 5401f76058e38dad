"""A whole-step profile's price of a step (`sim.cost.steps`), written once with numba.

`sim.cost.steps` fits a table and prices with these functions: its `StepPhysics` (FLOPs and bytes of a step's
parts), `Rates.time` (the device's smooth roofline), `LogRatio` (a fitted ratio), `StepFit` (a step's parts and
time) and `StepProfileCostModel` (plus the all-reduces and swaps) call them, and the compiled engine core
(`sim.compiled`) inlines `step_time` through `sim.cost.compiled_pricing`. The module docstring of
`sim.cost.steps` explains the decomposition.

Packs: `physics` is (scalars `Q_*`, linear-layer rows `L_*`), built by `StepPhysics`; `pack(cost_model)` is
(the physics scalars followed by the model's `S_*`, linear rows, then each fitted ratio's (log x, log ratio)
arrays: token, prefill, decode; an empty ratio means "the step's token ratio").
"""

from __future__ import annotations

import math

import numpy as np

from sim.core.step_plan import linear_tokens
from sim.jit import njit
from sim.cost.roofline_kernel import chunk_pairs, window_context

# Indices into a physics scalars array (`StepPhysics.scalars`).
(Q_HQ, Q_HKV, Q_HEAD_DIM, Q_ELEM_BYTES, Q_NUM_LAYERS, Q_ELEMENTWISE_BYTES, Q_HEAD_IN, Q_HEAD_OUT,
 Q_SLIDING_WINDOW, Q_WINDOW_LAYERS) = range(10)
NUM_PHYSICS = 10
# Columns of a linear-layer row (`StepPhysics.linear`): layers of its group, in and out features per GPU,
# experts, experts each token routes to.
L_LAYERS, L_IN, L_OUT, L_EXPERTS, L_ACTIVE = range(5)
# The cost model's scalars follow the physics' in the pack's first array (one array fewer to pass at every step).
(S_FLOPS_PER_S, S_BYTES_PER_S, S_COMMUNICATION, S_ALLREDUCE_LATENCY_S, S_ALLREDUCE_S_PER_TOKEN,
 S_SWAP_S_PER_TOKEN) = range(NUM_PHYSICS, NUM_PHYSICS + 6)
NUM_SCALARS = NUM_PHYSICS + 6


def pack(cost_model) -> tuple:
    fit, physics = cost_model.fit, cost_model.fit.physics
    s = np.zeros(NUM_SCALARS)
    s[:NUM_PHYSICS] = physics.scalars
    s[S_FLOPS_PER_S], s[S_BYTES_PER_S] = fit.rates.flops_per_s, fit.rates.bytes_per_s
    s[S_COMMUNICATION] = 1.0 if cost_model.communication else 0.0
    s[S_ALLREDUCE_LATENCY_S] = cost_model.gpu.allreduce_latency_s
    s[S_ALLREDUCE_S_PER_TOKEN] = cost_model._allreduce_s_per_token
    s[S_SWAP_S_PER_TOKEN] = cost_model.roofline.swap_s_per_token
    return (s, physics.linear, *fit.ratio_arrays())


def empty() -> tuple:
    """A pack of the same types for pricers of another kind (never read)."""
    z = np.zeros(0)
    return (np.zeros(NUM_SCALARS), np.zeros((0, 5)), z, z, z, z, z, z)


# --- the physics: FLOPs and HBM bytes of a step's parts on one GPU (all layers) ---------------------------
# The helpers take numbers, not the arrays: a call that passes an array takes and drops a reference to it
# (atomic operations) wherever numba counts references (not in the compiled core), which there costs more than the
# arithmetic. The functions
# that take the arrays are inlined where they are called for the same reason.

@njit(cache=True)
def _linear_op(layers, k, m, experts, active, eb, num_tokens):
    """(FLOPs, bytes) of a linear layer of `layers` layers: weights read once (of a mixture of experts, the experts
    some token routes to, in expectation under uniform routing), activations in and out."""
    if active < experts:  # routed experts
        touched = experts * (1.0 - (1.0 - active / experts) ** float(num_tokens))
    else:
        touched = 1.0
    flops = 2.0 * num_tokens * k * m * active
    nbytes = (k * m * touched + num_tokens * active * (k + m)) * eb
    return layers * flops, layers * nbytes


@njit(cache=True)
def _elementwise_op(num_layers, elementwise_bytes, num_tokens):
    """(FLOPs, bytes) of the norms, residual adds, rotary and activation (all layers)."""
    return 0.0, num_layers * num_tokens * elementwise_bytes


@njit(cache=True)
def _head_op(head_in, head_out, eb, rows, which):
    """The LM head GEMM at the sampled rows (which 0), then argmax reading the logits (which 1)."""
    if which == 0:
        return 2.0 * rows * head_in * head_out, (head_in * head_out + rows * (head_in + head_out)) * eb
    return 0.0, rows * head_out * eb


@njit(cache=True)
def _prefill_attention(hq, hkv, d, eb, num_layers, window_layers, window, chunk, context):
    """All layers': `window_layers` of them through the sliding `window` (0: none), the others without it."""
    pairs, kv_tokens = chunk_pairs(chunk, context, window)
    pairs, kv_tokens = window_layers * pairs, window_layers * kv_tokens
    if window_layers < num_layers:
        whole_pairs, whole_tokens = chunk_pairs(chunk, context, 0.0)
        pairs += (num_layers - window_layers) * whole_pairs
        kv_tokens += (num_layers - window_layers) * whole_tokens
    flops = 4.0 * hq * d * pairs
    nbytes = (kv_tokens * 2 * hkv * d + num_layers * 2 * chunk * hq * d) * eb
    return flops, nbytes


@njit(cache=True)
def _decode_attention(hq, hkv, d, eb, num_layers, window_layers, window, batch, context_tokens, query_tokens):
    """All layers': `window_layers` of them through the sliding `window` (0: none), the others without it."""
    read = (window_layers * window_context(context_tokens, batch, window)
            + (num_layers - window_layers) * context_tokens)
    flops = 4.0 * hq * d * query_tokens * read
    nbytes = (read * 2 * hkv * d + num_layers * 2 * batch * query_tokens * hq * d) * eb
    return flops, nbytes


@njit(cache=True)
def prefill_attention(phys, chunk, context):
    """(FLOPs, bytes) of causal attention of a chunk after `context` cached tokens, all layers (a sliding window
    caps the context)."""
    return _prefill_attention(phys[Q_HQ], phys[Q_HKV], phys[Q_HEAD_DIM], phys[Q_ELEM_BYTES], phys[Q_NUM_LAYERS],
                              phys[Q_WINDOW_LAYERS], phys[Q_SLIDING_WINDOW], chunk, context)


@njit(cache=True)
def decode_attention(phys, batch, context_tokens, query_tokens):
    """(FLOPs, bytes) of `batch` sequences, `query_tokens` each, reading `context_tokens` cached tokens in all,
    all layers (a sliding window caps each sequence's context)."""
    return _decode_attention(phys[Q_HQ], phys[Q_HKV], phys[Q_HEAD_DIM], phys[Q_ELEM_BYTES], phys[Q_NUM_LAYERS],
                             phys[Q_WINDOW_LAYERS], phys[Q_SLIDING_WINDOW], batch, context_tokens, query_tokens)


@njit(cache=True)
def body_counts(phys, linear, num_tokens):
    """(FLOPs, bytes) of each linear layer, then of the elementwise ops: one row each."""
    out = np.empty((linear.shape[0] + 1, 2))
    eb = phys[Q_ELEM_BYTES]
    for r in range(linear.shape[0]):
        out[r, 0], out[r, 1] = _linear_op(linear[r, L_LAYERS], linear[r, L_IN], linear[r, L_OUT],
                                          linear[r, L_EXPERTS], linear[r, L_ACTIVE], eb, num_tokens)
    out[linear.shape[0], 0], out[linear.shape[0], 1] = _elementwise_op(phys[Q_NUM_LAYERS],
                                                                       phys[Q_ELEMENTWISE_BYTES], num_tokens)
    return out


@njit(cache=True)
def head_counts(phys, rows):
    """(FLOPs, bytes) of the LM head and argmax at `rows` sampled rows: one row each (none without rows)."""
    out = np.empty((2 if rows > 0 else 0, 2))
    if rows > 0:
        for which in range(2):
            out[which, 0], out[which, 1] = _head_op(phys[Q_HEAD_IN], phys[Q_HEAD_OUT], phys[Q_ELEM_BYTES], rows,
                                                    which)
    return out


# --- the fit's rules: the device's roofline and the fitted ratios -----------------------------------------

@njit(cache=True)
def rate_time(flops, nbytes, flops_per_s, bytes_per_s):
    """An op's time on the device: the 2-norm of its compute and memory times (`sim.cost.steps.Rates` says why)."""
    return math.hypot(flops / flops_per_s, nbytes / bytes_per_s)


@njit(cache=True)
def log_ratio(u, v, x):
    """A ratio known at log x = u, log ratio = v: linear in (log x, log ratio), held past the edges."""
    lx = math.log(x)
    n = u.shape[0]
    if n == 1 or lx <= u[0]:
        return math.exp(v[0])
    if lx >= u[n - 1]:
        return math.exp(v[n - 1])
    i = np.searchsorted(u, lx, side="right") - 1
    w = (lx - u[i]) / (u[i + 1] - u[i])
    return math.exp(v[i] * (1 - w) + v[i + 1] * w)


@njit(cache=True, inline="always")
def body_s(phys, linear, fps, bps, num_tokens, rows):
    """Roofline seconds of the linear layers, elementwise ops and LM head (before the token ratio)."""
    eb = phys[Q_ELEM_BYTES]
    total = 0.0
    for r in range(linear.shape[0]):
        f, b = _linear_op(linear[r, L_LAYERS], linear[r, L_IN], linear[r, L_OUT], linear[r, L_EXPERTS],
                          linear[r, L_ACTIVE], eb, num_tokens)
        total += rate_time(f, b, fps, bps)
    f, b = _elementwise_op(phys[Q_NUM_LAYERS], phys[Q_ELEMENTWISE_BYTES], num_tokens)
    total += rate_time(f, b, fps, bps)
    if rows > 0:
        for which in range(2):
            f, b = _head_op(phys[Q_HEAD_IN], phys[Q_HEAD_OUT], eb, rows, which)
            total += rate_time(f, b, fps, bps)
    return total


@njit(cache=True, inline="always")
def fit_parts(phys, linear, fps, bps, tok_u, tok_v, pf_u, pf_v, dc_u, dc_v, num_prefill_tokens, pf_chunk, pf_ctx,
              num_pf, num_decode_seqs, decode_ctx, num_sampled, query_tokens, pad_tokens):
    """Seconds of each part of a step: (token (body + head) × ρ_T, prefill attention, decode attention); padding
    tokens are in the body, not in attention."""
    t = linear_tokens(num_prefill_tokens, num_decode_seqs, query_tokens, pad_tokens)
    if t == 0:
        return 0.0, 0.0, 0.0
    rho_t = log_ratio(tok_u, tok_v, t)
    rows = num_sampled + num_decode_seqs * (query_tokens - 1)
    token = rho_t * body_s(phys, linear, fps, bps, t, rows)
    hq, hkv, d, eb = phys[Q_HQ], phys[Q_HKV], phys[Q_HEAD_DIM], phys[Q_ELEM_BYTES]
    num_layers, window, window_layers = phys[Q_NUM_LAYERS], phys[Q_SLIDING_WINDOW], phys[Q_WINDOW_LAYERS]
    prefill = 0.0
    for j in range(num_pf):
        chunk = pf_chunk[j]
        if chunk:
            rho = log_ratio(pf_u, pf_v, chunk) if pf_u.shape[0] else rho_t
            f, b = _prefill_attention(hq, hkv, d, eb, num_layers, window_layers, window, chunk, pf_ctx[j])
            prefill += rho * rate_time(f, b, fps, bps)
    decode = 0.0
    if num_decode_seqs:
        rho = log_ratio(dc_u, dc_v, num_decode_seqs) if dc_u.shape[0] else rho_t
        f, b = _decode_attention(hq, hkv, d, eb, num_layers, window_layers, window, num_decode_seqs, decode_ctx,
                                 query_tokens)
        decode = rho * rate_time(f, b, fps, bps)
    return token, prefill, decode


@njit(cache=True, inline="always")
def fit_time(phys, linear, fps, bps, tok_u, tok_v, pf_u, pf_v, dc_u, dc_v, num_prefill_tokens, pf_chunk, pf_ctx,
             num_pf, num_decode_seqs, decode_ctx, num_sampled, query_tokens, pad_tokens):
    """The fit's time of a step: the sum of its parts."""
    token, prefill, decode = fit_parts(phys, linear, fps, bps, tok_u, tok_v, pf_u, pf_v, dc_u, dc_v,
                                       num_prefill_tokens, pf_chunk, pf_ctx, num_pf, num_decode_seqs, decode_ctx,
                                       num_sampled, query_tokens, pad_tokens)
    return token + prefill + decode


# --- the cost model: the fit, plus what one GPU's shard cannot measure ------------------------------------

@njit(cache=True, inline="always")
def allreduce_s(s, num_tokens):
    """Two all-reduces per layer of the step's hidden states (the GPU catalog's interconnect); `s`: a pack's
    scalars."""
    if s[S_COMMUNICATION] == 0.0 or num_tokens == 0:
        return 0.0
    return s[Q_NUM_LAYERS] * 2 * (s[S_ALLREDUCE_LATENCY_S] + num_tokens * s[S_ALLREDUCE_S_PER_TOKEN])


# Inlined into the core (`compiled_pricing.price_parts`) for the same reason as the functions above.
@njit(cache=True, inline="always")
def step_time(params, num_prefill_tokens, pf_chunk, pf_ctx, num_pf, num_decode_seqs, decode_ctx, num_sampled,
              query_tokens, pad_tokens, swap_tokens):
    """The step's time (`sim.cost.step_args` lists the arguments): the fit's, the all-reduces, the swaps."""
    s, linear, tok_u, tok_v, pf_u, pf_v, dc_u, dc_v = params
    time_s = fit_time(s, linear, s[S_FLOPS_PER_S], s[S_BYTES_PER_S], tok_u, tok_v, pf_u, pf_v, dc_u, dc_v,
                      num_prefill_tokens, pf_chunk, pf_ctx, num_pf, num_decode_seqs, decode_ctx, num_sampled,
                      query_tokens, pad_tokens)
    time_s += allreduce_s(s, linear_tokens(num_prefill_tokens, num_decode_seqs, query_tokens, pad_tokens))
    return time_s + swap_tokens * s[S_SWAP_S_PER_TOKEN]
