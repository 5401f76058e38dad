"""The decode runs' KV integrals sum as numpy's `np.add.reduceat` does, to the bit (sim/slot_seconds.py).

The summary's KV split sums each run's per-step products. The compiled pass replaced numpy's reduceat, so the
figures a user saw before stay the same only if the additions come in the same order: numpy's pairwise order,
which differs from a plain loop and from `np.sum` above 8 values (the last adds in blocks of 8,192)."""

import numpy as np
import pytest

from sim.slot_seconds import pairwise_sum, run_slot_seconds


def _reduceat_reference(step_s, num_steps, values, end_state, constant):
    """The numpy expression the pass replaced (sim/results.py kv_slot_seconds before 12-06)."""
    first = np.cumsum(num_steps) - num_steps
    last = first + num_steps - 1
    inner = np.ones(len(step_s), dtype=bool)
    inner[last] = False
    inner_first = first - np.arange(len(num_steps))
    inner_values = np.repeat(end_state, num_steps - 1) if constant else values
    return np.add.reduceat(step_s[inner] * inner_values, inner_first) + step_s[last] * end_state, first, inner_first


@pytest.mark.parametrize("longest", [3, 9, 130, 600, 20_000])
@pytest.mark.parametrize("constant", [False, True])
def test_each_run_sums_in_numpys_order(longest, constant):
    rng = np.random.default_rng(longest)
    num_steps = rng.integers(2, longest + 1, 50)
    step_s = rng.random(int(num_steps.sum())) * 0.037
    values = rng.integers(0, 90_000, int((num_steps - 1).sum()))
    end_state = rng.integers(0, 90_000, len(num_steps)).astype(float)
    expected, first, inner_first = _reduceat_reference(step_s, num_steps, values, end_state, constant)
    got = run_slot_seconds(step_s, first, num_steps, inner_first, np.zeros(0, np.int64) if constant else values,
                           end_state, constant)
    assert got.tobytes() == expected.tobytes()


def test_the_pairwise_order_is_not_a_plain_loop():
    # Known answer from numpy itself: over 10,000 values the pairwise sum and a left-to-right loop differ in the
    # last bits, and pairwise_sum gives numpy's (so a loop in its place would fail the test above).
    a = np.random.default_rng(1).random(10_000) * 1e-3
    loop = 0.0
    for x in a[1:]:
        loop += x
    numpy_sum = np.add.reduceat(a, [0])[0]
    assert a[0] + pairwise_sum(a, 1, len(a) - 1) == numpy_sum
    assert a[0] + loop != numpy_sum
