"""The decode runs' step products land where numpy's whole-column expression put them (sim/slot_seconds.py).

The summary's KV split weights each step inside a decode run by its own duration and state. The compiled pass
writes the products in place of a mask, a copy and a repeat over all the runs' steps; `np.add.reduceat` sums them
as before, so the figures stay the same only if every product lands in the same slot."""

import numpy as np
import pytest

from sim.slot_seconds import run_step_products


def _numpy_products(step_s, num_steps, values, end_state, constant):
    """The expression the pass replaced (sim/results.py kv_slot_seconds before 12-06): every step but each run's
    last, times its state (the run's end state throughout for a constant column)."""
    first = np.cumsum(num_steps) - num_steps
    inner = np.ones(len(step_s), dtype=bool)
    inner[first + num_steps - 1] = False
    inner_values = np.repeat(end_state, num_steps - 1) if constant else values
    return step_s[inner] * inner_values, first, first - np.arange(len(num_steps))


@pytest.mark.parametrize("longest", [2, 3, 130, 2_000])
@pytest.mark.parametrize("constant", [False, True])
def test_each_product_lands_where_numpy_put_it(longest, constant):
    rng = np.random.default_rng(longest)
    num_steps = rng.integers(2, longest + 1, 50)
    step_s = rng.random(int(num_steps.sum())) * 0.037
    values = rng.integers(0, 90_000, int((num_steps - 1).sum()))
    end_state = rng.integers(0, 90_000, len(num_steps)).astype(float)
    expected, first, inner_first = _numpy_products(step_s, num_steps, values, end_state, constant)
    got = run_step_products(step_s, first, num_steps, inner_first, np.zeros(0, np.int64) if constant else values,
                            end_state, constant, np.full(len(expected), np.nan))
    assert got.tobytes() == expected.tobytes()
