"""One entry point for the compiled engine core to price a step with whichever cost model has a compiled form.

A cost model's `compiled_params()` returns `pricer(...)`: a tuple of one fixed numba type whatever the model,
so the core compiles once. `price_step` gives (time_s, FLOPs, bytes) as the model's `step_cost` does: the
FLOPs and bytes are always the roofline's counts (every cost model reports those), the time is the model's.
A NaN time means the model cannot price that step here the way its Python form would (the measured kernels'
note log of points outside their tables is full, `sim.cost.measured_kernel`): the core then runs the scenario in
the Python engine.
"""

from __future__ import annotations

from numba import njit

# (numba_cache: drops stale numba caches before anything loads)
from sim.cost import measured_kernel, numba_cache, roofline_kernel, steps_kernel  # noqa: F401

KIND_ROOFLINE, KIND_STEPS, KIND_MEASURED = 0, 1, 2


def reused_pack(model, build) -> tuple:
    """`build()` (a fresh pack), or, for a model with `reuse_compiled_pack` set, the pack built on the first call,
    kept on the model (`RooflineCostModel.reuse_compiled_pack`)."""
    if not model.reuse_compiled_pack:
        return build()
    if model.__dict__.get("_compiled_pack") is None:
        model._compiled_pack = build()
    return model._compiled_pack


def pricer(roofline_params: tuple, steps_params: tuple | None = None, measured_params: tuple | None = None) -> tuple:
    """(kind, the roofline's pack, the whole-step profile's pack, the measured kernels' pack); the packs a kind
    does not use are empty ones of the same types."""
    kind = KIND_STEPS if steps_params is not None else KIND_MEASURED if measured_params is not None else KIND_ROOFLINE
    return (kind, roofline_params, steps_params if steps_params is not None else steps_kernel.empty(),
            measured_params if measured_params is not None else measured_kernel.empty())


@njit(cache=True)
def price_step(price, num_prefill_tokens, pf_chunk, pf_ctx, num_pf, num_decode_seqs, decode_ctx, num_sampled):
    kind, roof, steps, measured = price
    return price_parts(kind, roof, steps, measured, num_prefill_tokens, pf_chunk, pf_ctx, num_pf, num_decode_seqs,
                       decode_ctx, num_sampled)


# The core unpacks the pack once per call and prices with its parts: taking a nested tuple apart takes and drops a
# reference to each of its 31 arrays (atomic operations), which at every step cost more than the pricing. Inlined
# into the core, with the pricers' `step_cost` / `step_time`: a call would pass the parts as arguments, with the
# same reference counting (their helpers stay calls: inlining those too gave nothing and doubled the compile time).
@njit(cache=True, inline="always")
def price_parts(kind, roof, steps, measured, num_prefill_tokens, pf_chunk, pf_ctx, num_pf, num_decode_seqs,
                decode_ctx, num_sampled):
    time_s, flops, nbytes = roofline_kernel.step_cost(roof, num_prefill_tokens, pf_chunk, pf_ctx, num_pf,
                                                      num_decode_seqs, decode_ctx, num_sampled)
    if kind == KIND_STEPS:
        time_s = steps_kernel.step_time(steps, num_prefill_tokens, pf_chunk, pf_ctx, num_pf, num_decode_seqs,
                                        decode_ctx, num_sampled)
    elif kind == KIND_MEASURED:  # NaN: its note log is full (the core hands the run back)
        time_s = measured_kernel.step_time(measured, num_prefill_tokens, pf_chunk, pf_ctx, num_pf,
                                           num_decode_seqs, decode_ctx, num_sampled)
    return time_s, flops, nbytes


@njit(cache=True)
def note_unpriced_decode_steps(kind, measured, num_seqs, first_ctx, num_steps):
    """A decode run's steps the core did not price, though the Python engine prices a run's whole limit up front
    (`decode_step_costs`): what pricing them would note (the measured kernels' points outside their tables; no
    other pricer notes anything). `kind` and `measured`: the pack's kind and measured part. False: the note log
    is full."""
    if kind != KIND_MEASURED or num_steps <= 0:
        return True
    return measured_kernel.note_decode_points(measured, num_seqs, first_ctx, num_steps)
