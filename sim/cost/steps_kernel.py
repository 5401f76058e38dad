"""`StepProfileCostModel.step_cost`'s time compiled with numba, for the compiled engine core (`sim.compiled`).

`StepProfileCostModel.compiled_params()` packs a fitted whole-step profile with `pack`; `step_time` repeats
`StepFit.time_s` plus the all-reduce and swap terms, operation by operation, so its times are bit-identical
(tests/unit/test_steps_kernel.py). `math.hypot` and float `sum()` are CPython's own (`sim.cost.pyfloat_kernel`).
Covered: dense layers (no MoE), no sliding window, plans without drafts, padding or swaps.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from sim.cost import numba_cache  # noqa: F401  (drops stale numba caches before anything loads)
from sim.cost.pyfloat_kernel import hypot

# Indices into the float64 array `params[0]`.
(P_FLOPS_PER_S, P_BYTES_PER_S, P_HQ, P_HKV, P_HEAD_DIM, P_ELEM_BYTES, P_NUM_LAYERS, P_ELEMENTWISE_BYTES,
 P_HEAD_IN, P_HEAD_OUT, P_COMMUNICATION, P_ALLREDUCE_LATENCY_S, P_ALLREDUCE_S_PER_TOKEN, P_SWAP_S_PER_TOKEN) = range(14)
NUM_STEPS_PARAMS = 14
# Columns of a linear-layer row: layers of its group, in features, out features, experts each token uses.
L_LAYERS, L_IN, L_OUT, L_ACTIVE = range(4)


def pack(cost_model) -> tuple:
    """(scalars, linear layers, token ratio (log x, log ratio), prefill ratio, decode ratio); an empty ratio
    means "the step's token ratio", as in `StepFit.parts`."""
    fit, physics = cost_model.fit, cost_model.fit.physics
    s = np.zeros(NUM_STEPS_PARAMS)
    s[P_FLOPS_PER_S], s[P_BYTES_PER_S] = fit.rates.flops_per_s, fit.rates.bytes_per_s
    s[P_HQ], s[P_HKV], s[P_HEAD_DIM], s[P_ELEM_BYTES] = physics.hq, physics.hkv, physics.d, physics.eb
    s[P_NUM_LAYERS], s[P_ELEMENTWISE_BYTES] = physics.num_layers, physics.elementwise_bytes
    s[P_HEAD_IN], s[P_HEAD_OUT] = physics.head_in, physics.head_out
    s[P_COMMUNICATION] = 1.0 if cost_model.communication else 0.0
    s[P_ALLREDUCE_LATENCY_S] = cost_model.gpu.allreduce_latency_s
    s[P_ALLREDUCE_S_PER_TOKEN] = cost_model._allreduce_s_per_token
    s[P_SWAP_S_PER_TOKEN] = cost_model._swap_s_per_token
    linear = np.array([[n, k, m, active] for n, mats in physics.groups for k, m, _, active in mats],
                      dtype=np.float64).reshape(-1, 4)
    ratios = [(np.array(r.u, dtype=np.float64), np.array(r.v, dtype=np.float64))
              for r in (fit.token_ratio, fit.prefill_ratio, fit.decode_ratio)]
    return (s, linear, ratios[0][0], ratios[0][1], ratios[1][0], ratios[1][1], ratios[2][0], ratios[2][1])


def empty() -> tuple:
    """A pack of the same types for pricers of another kind (never read)."""
    z = np.zeros(0)
    return (np.zeros(NUM_STEPS_PARAMS), np.zeros((0, 4)), z, z, z, z, z, z)


@njit(cache=True)
def _ratio(u, v, x):
    """`LogRatio.__call__`: linear in (log x, log ratio), held past the edges."""
    lx = math.log(x)
    n = u.shape[0]
    if n == 1 or lx <= u[0]:
        return math.exp(v[0])
    if lx >= u[n - 1]:
        return math.exp(v[n - 1])
    i = np.searchsorted(u, lx, side="right") - 1
    w = (lx - u[i]) / (u[i + 1] - u[i])
    return math.exp(v[i] * (1 - w) + v[i + 1] * w)


# Inlined into the core (`compiled_pricing.price_parts`): a call would take and drop a reference to each array
# of the pack it is passed, with atomic operations, at every step.
@njit(cache=True, inline="always")
def step_time(params, num_prefill_tokens, pf_chunk, pf_ctx, num_pf, num_decode_seqs, decode_ctx, num_sampled):
    """`StepProfileCostModel.step_cost(plan).time_s` for a plan of single-token decodes without swaps."""
    s, linear, tok_u, tok_v, pf_u, pf_v, dc_u, dc_v = params
    fps, bps = s[P_FLOPS_PER_S], s[P_BYTES_PER_S]
    t = num_prefill_tokens + num_decode_seqs
    if t == 0:
        return 0.0  # parts() are three zeros; no all-reduce; no swaps
    hq, hkv, d, eb, num_layers = s[P_HQ], s[P_HKV], s[P_HEAD_DIM], s[P_ELEM_BYTES], s[P_NUM_LAYERS]
    rho_t = _ratio(tok_u, tok_v, t)
    # StepFit.body_s: sum() over the ops of StepPhysics.body(t) + head(rows), each Rates.time. Every count
    # below is an integer below 2**53, exact in float64 as in Python's ints.
    body = 0.0
    for r in range(linear.shape[0]):
        n, k, m, active = linear[r, L_LAYERS], linear[r, L_IN], linear[r, L_OUT], linear[r, L_ACTIVE]
        flops = 2.0 * t * k * m * active
        nbytes = (k * m * 1.0 + t * active * (k + m)) * eb
        body += hypot(n * flops / fps, n * nbytes / bps)
    body += hypot(0.0 / fps, num_layers * t * s[P_ELEMENTWISE_BYTES] / bps)
    rows = num_sampled
    if rows > 0:
        k, m = s[P_HEAD_IN], s[P_HEAD_OUT]
        body += hypot(2.0 * rows * k * m / fps, (k * m + rows * (k + m)) * eb / bps)
        body += hypot(0.0 / fps, rows * m * eb / bps)
    token = rho_t * body
    prefill = 0.0
    for j in range(num_pf):
        chunk = pf_chunk[j]
        if chunk:
            context = pf_ctx[j]
            rho = _ratio(pf_u, pf_v, chunk) if pf_u.shape[0] else rho_t
            pairs = chunk * (context + (chunk + 1) / 2)
            flops = 4.0 * hq * d * pairs
            nbytes = ((context + chunk) * 2 * hkv * d + 2 * chunk * hq * d) * eb
            prefill += rho * hypot(num_layers * flops / fps, num_layers * nbytes / bps)
    decode = 0.0
    if num_decode_seqs:
        b = num_decode_seqs
        rho = _ratio(dc_u, dc_v, b) if dc_u.shape[0] else rho_t
        flops = 4.0 * hq * d * 1 * decode_ctx
        nbytes = (decode_ctx * 2 * hkv * d + 2 * b * 1 * hq * d) * eb
        decode = rho * hypot(num_layers * flops / fps, num_layers * nbytes / bps)
    time_s = token + prefill + decode  # sum([token, prefill, decode]) on CPython 3.11: left to right
    if s[P_COMMUNICATION] != 0.0:
        time_s += num_layers * 2 * (s[P_ALLREDUCE_LATENCY_S] + t * s[P_ALLREDUCE_S_PER_TOKEN])
    else:
        time_s += 0.0
    return time_s + 0.0  # (swap_in + swap_out) * per token: 0.0 without swaps
