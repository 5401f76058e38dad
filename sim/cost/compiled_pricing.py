"""One entry point to price a step with whichever cost model has a compiled form, for both engines.

`price_parts(kind, roofline, steps, measured, <the step>)` gives (time_s, FLOPs, bytes) as the model's `step_cost`
does: the FLOPs and bytes are the roofline's counts (every cost model reports those), the time is the model's
(`roofline_kernel`, `steps_kernel` or `measured_kernel`); the learned roofline (`learned_kernel`, kind
`KIND_LEARNED`) gives all three, its FLOPs and bytes summed its own way. The cost models' `step_cost` call it (with
None for the packs they do not have, which numba prunes); the compiled engine core (`sim.compiled`) inlines it,
with the pack `pricer(...)` builds: a tuple of one fixed numba type whatever the model, so the core compiles once.
The learned roofline's pack has the type of a whole-step profile's (`learned_kernel` says why) and travels in the
`steps` slot: no model has both.
A NaN time means the model cannot price that step until the caller has read the measured kernels' note log of
points outside their tables (`sim.cost.measured_kernel`).
"""

from __future__ import annotations

import numpy as np

from sim.cost import learned_kernel, measured_kernel, roofline_kernel, steps_kernel
from sim.jit import njit

KIND_ROOFLINE, KIND_STEPS, KIND_MEASURED, KIND_LEARNED = 0, 1, 2, 3
# How many leading arrays of each pack hold the model's numbers (the rest are memos and the note log). The `steps`
# slot's pack, a whole-step profile's or a learned roofline's, is numbers only.
_NUMBERS = (roofline_kernel.NUM_NUMBERS, len(steps_kernel.empty()), measured_kernel.NUM_NUMBERS)


def pricer(roofline_params: tuple, steps_params: tuple | None = None, measured_params: tuple | None = None,
           overhead_terms: np.ndarray | None = None, learned_params: tuple | None = None) -> tuple:
    """(kind, the roofline's pack, the whole-step profile's pack or the learned roofline's, the measured kernels'
    pack, the engine overhead's terms); the packs a kind does not use are empty ones of the same types, and no
    overhead is an empty array (the core adds it with `sim.cost.overhead.with_overhead` after `price_parts`)."""
    if steps_params is not None and learned_params is not None:
        raise ValueError("a pricer has a whole-step profile or learned efficiencies, not both (one slot)")
    kind = (KIND_STEPS if steps_params is not None else KIND_MEASURED if measured_params is not None
            else KIND_LEARNED if learned_params is not None else KIND_ROOFLINE)
    table = steps_params if steps_params is not None else learned_params
    return (kind, roofline_params, table if table is not None else steps_kernel.empty(),
            measured_params if measured_params is not None else measured_kernel.empty(),
            overhead_terms if overhead_terms is not None else np.zeros(0))


def same_prices(a: tuple, b: tuple) -> bool:
    """Two `pricer` packs price alike: the same kind and the same numbers (their memos may differ)."""
    if a[0] != b[0] or not np.array_equal(a[4], b[4]):
        return False
    return all(np.array_equal(x, y) for part_a, part_b, n in zip(a[1:4], b[1:4], _NUMBERS)
               for x, y in zip(part_a[:n], part_b[:n]))


# Inlined into the core with the pricers' `step_cost` / `step_time`: the core unpacks the pack once per call and
# passes its parts (taking a nested tuple apart at every step, and passing it, cost more than the pricing when the
# core still counted references; their helpers stay calls: inlining those too gave nothing and doubled the compile
# time).
@njit(cache=True, inline="always")
def price_parts(kind, roof, steps, measured, num_prefill_tokens, pf_chunk, pf_ctx, num_pf, num_decode_seqs,
                decode_ctx, num_sampled, query_tokens, pad_tokens, swap_tokens, expert_tokens):
    # `expert_tokens` (a lockstep rank's group through its experts: `sim.cost.step_args`) reaches the roofline and
    # the measured kernels only: a whole-step profile or a learned roofline cannot price a step's experts apart, so
    # the configuration refuses them for such a group (sim/config/deployment.py).
    if steps is not None:
        if kind == KIND_LEARNED:  # `steps` holds the learned pack; the roofline pack, the model's numbers
            return learned_kernel.step_cost(roof, steps, num_prefill_tokens, pf_chunk, pf_ctx, num_pf,
                                            num_decode_seqs, decode_ctx, num_sampled, query_tokens, pad_tokens,
                                            swap_tokens)
    time_s, flops, nbytes = roofline_kernel.step_cost(roof, num_prefill_tokens, pf_chunk, pf_ctx, num_pf,
                                                      num_decode_seqs, decode_ctx, num_sampled, query_tokens,
                                                      pad_tokens, swap_tokens, expert_tokens)
    if steps is not None:
        if kind == KIND_STEPS:
            time_s = steps_kernel.step_time(steps, num_prefill_tokens, pf_chunk, pf_ctx, num_pf, num_decode_seqs,
                                            decode_ctx, num_sampled, query_tokens, pad_tokens, swap_tokens)
    if measured is not None:
        if kind == KIND_MEASURED:  # NaN: its note log is full
            time_s = measured_kernel.step_time(measured, num_prefill_tokens, pf_chunk, pf_ctx, num_pf,
                                               num_decode_seqs, decode_ctx, num_sampled, query_tokens, pad_tokens,
                                               swap_tokens, expert_tokens)
    return time_s, flops, nbytes


@njit(cache=True)
def decode_run(kind, roof, steps, measured, num_seqs, context_tokens, num_steps):
    """(time_s, FLOPs, bytes) of `num_steps` decode-only steps of `num_seqs` single-token decodes, one row each:
    the first attending `context_tokens`, each next one `num_seqs` more (`sim.core.step_plan.decode_step_costs`).
    Fewer rows where a step cannot be priced before the caller reads the note log (see the module docstring)."""
    out = np.empty((num_steps, 3))
    no_chunks = np.zeros(0, dtype=np.int64)
    ctx = context_tokens
    for k in range(num_steps):
        time_s, flops, nbytes = price_parts(kind, roof, steps, measured, 0, no_chunks, no_chunks, 0, num_seqs, ctx,
                                            num_seqs, 1, 0, 0, 0)
        if time_s != time_s:  # NaN
            return out[:k]
        out[k, 0], out[k, 1], out[k, 2] = time_s, flops, nbytes
        ctx += num_seqs
    return out


@njit(cache=True, inline="always")  # the core calls it at every decode run: a call costs more than its kind test
def note_unpriced_decode_steps(kind, measured, num_seqs, first_ctx, num_steps):
    """A decode run's steps the core did not price, though the Python engine prices a run's whole limit up front
    (`decode_step_costs`): what pricing them would note (the measured kernels' points outside their tables; no
    other pricer notes anything). `kind` and `measured`: the pack's kind and measured part. False: the note log
    is full."""
    if kind != KIND_MEASURED or num_steps <= 0:
        return True
    return measured_kernel.note_decode_points(measured, num_seqs, first_ctx, num_steps)
