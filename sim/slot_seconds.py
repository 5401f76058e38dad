"""The KV slot-seconds of the decode runs' steps (`sim.results.kv_slot_seconds`): their products, compiled.

A million-request run keeps millions of steps inside its decode runs. Written as whole-column numpy operations, each
KV column's integral built a mask, a copy of the steps' durations, a repeat and a product the size of all those
steps. Here the products are written where each run's steps lie, in one pass; `np.add.reduceat` still sums them,
so the sums are numpy's own. Without numba it runs as plain Python (`sim.jit`): the same products, slower.
"""

from __future__ import annotations

from sim.jit import njit


@njit(cache=True)
def run_step_products(step_s, first, num_steps, inner_first, inner_values, end_state, constant, out):
    """Into `out` (one slot for each run's step but its last, run after run): the step's own duration
    (`step_s[first + j]`) times its own state (`inner_values[inner_first + j]`; `constant`: the run's end state
    `end_state` throughout, as a replica's capacity is). `out[inner_first[r]:]` is run r's, as `inner_values`'."""
    for r in range(len(first)):
        for j in range(num_steps[r] - 1):
            state = end_state[r] if constant else inner_values[inner_first[r] + j]
            out[inner_first[r] + j] = step_s[first[r] + j] * state
    return out
