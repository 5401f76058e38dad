"""The KV slot-seconds of the decode runs' steps (`sim.results.kv_slot_seconds`), compiled.

A million-request run keeps millions of steps inside its decode runs. Written as whole-column numpy operations, each
KV column's integral built a mask, a copy of the steps' durations, a repeat and a product the size of all those
steps. Here each run is summed where its steps lie. The sums are numpy's to the bit:
`pairwise_sum` is the summation `np.add.reduceat` runs over each run's products (numpy's C `pairwise_sum`, unrolled
by eight in blocks of 128, halved above), so the summary's figures did not move. Without numba it runs as plain
Python (`sim.jit`): the same sums, slower.
"""

from __future__ import annotations

import numpy as np

from sim.jit import njit

_BLOCK = 128  # numpy's PW_BLOCKSIZE


@njit(cache=True)
def _block_sum(a, lo, n):
    """numpy's pairwise sum of at most 128 values: below 8 one by one from -0.0, else in eight accumulators."""
    if n < 8:
        res = -0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    while i < n - n % 8:
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@njit(cache=True)
def pairwise_sum(a, lo, n):
    """The sum of a[lo:lo + n] in numpy's pairwise order (its C `pairwise_sum`, which `np.add.reduceat` runs over a
    segment after its first element): up to 128 values `_block_sum`, above the two halves' sums added, the first
    half a multiple of 8. The halving is walked with a stack, not by recursion, which numba cannot cache when
    another compiled function calls it."""
    if n <= _BLOCK:
        return _block_sum(a, lo, n)
    depth = 64  # a half holds at most n / 2 + 8 values: fewer than 60 levels for any int64 count
    frame_lo, frame_n = np.empty(depth, np.int64), np.empty(depth, np.int64)
    frame_stage, sums = np.zeros(depth, np.int64), np.empty(depth)
    top, num_sums = 0, 0
    frame_lo[0], frame_n[0], frame_stage[0] = lo, n, 0
    while top >= 0:
        at, count = frame_lo[top], frame_n[top]
        if count <= _BLOCK:
            sums[num_sums] = _block_sum(a, at, count)
            num_sums += 1
            top -= 1
            continue
        half = count // 2
        half -= half % 8
        stage = frame_stage[top]
        frame_stage[top] = stage + 1
        if stage == 0:  # the first half
            top += 1
            frame_lo[top], frame_n[top], frame_stage[top] = at, half, 0
        elif stage == 1:  # then the second
            top += 1
            frame_lo[top], frame_n[top], frame_stage[top] = at + half, count - half, 0
        else:  # both summed: their sum takes their place
            sums[num_sums - 2] = sums[num_sums - 2] + sums[num_sums - 1]
            num_sums -= 1
            top -= 1
    return sums[0]


@njit(cache=True)
def run_slot_seconds(step_s, first, num_steps, inner_first, inner_values, end_state, constant):
    """Each decode run's time integral of one KV column: its steps but the last, each its own duration
    (`step_s[first + j]`) times its own state (`inner_values[inner_first + j]`; `constant`: the run's end state
    throughout, as a replica's capacity is), summed as `np.add.reduceat` sums them, plus its last step's duration
    times its end state (`end_state`, which the run's row holds)."""
    out = np.empty(len(first))
    products = np.empty(max(1, int(num_steps.max()) if len(num_steps) else 1))
    for r in range(len(first)):
        m = num_steps[r] - 1
        for j in range(m):
            products[j] = step_s[first[r] + j] * (end_state[r] if constant else inner_values[inner_first[r] + j])
        total = products[0]
        if m > 1:
            total += pairwise_sum(products, 1, m - 1)
        out[r] = total + step_s[first[r] + m] * end_state[r]
    return out
