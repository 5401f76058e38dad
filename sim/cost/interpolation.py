"""Measured times between measured points, written once: the log of measured / roofline, interpolated linearly
on log axes between the measured points and held at the nearest one past them.

Both table-driven cost models read their tables through these functions: the measured kernels
(`sim.cost.measured_kernel`, inlined into the compiled engine core) and the per-op calibrated profiles
(`sim.cost.calibrated`). The caller takes the log of its axis (log1p: a context may be 0 tokens) and multiplies
the ratio back onto its roofline shape.
"""

from __future__ import annotations

import numpy as np

from sim.jit import njit


@njit(cache=True)
def bracket(grid, u):
    """Index i and weight w so that u ≈ grid[i]·(1-w) + grid[i+1]·w, clamped; and whether u was outside."""
    n = grid.shape[0]
    if n == 1:
        return 0, 0.0, abs(u - grid[0]) > 1e-12
    if u <= grid[0]:
        return 0, 0.0, u < grid[0] - 1e-12
    if u >= grid[n - 1]:
        return n - 2, 1.0, u > grid[n - 1] + 1e-12
    i = np.searchsorted(grid, u, side="right") - 1
    return i, (u - grid[i]) / (grid[i + 1] - grid[i]), False


# The two below run at every priced step: inlined where they are called, since a call that passes an array takes
# and drops a reference to it (atomic operations) wherever numba counts references (the Python cost models' calls;
# not the compiled core), which there costs more than the arithmetic.
@njit(cache=True, inline="always")
def log_ratio_1d(grid, lr, u):
    """The log ratio at u along one axis (`lr` at the points `grid`); and whether u lay outside them."""
    i, w, outside = bracket(grid, u)
    return (lr[i] if w == 0.0 else lr[i] * (1 - w) + lr[i + 1] * w), outside


@njit(cache=True, inline="always")
def log_ratio_2d(ga, gb, r, u, v):
    """The log ratio at (u, v), bilinear over the grid `r` on the axes `ga` × `gb`; and whether (u, v) lay
    outside it."""
    i, wa, out_a = bracket(ga, u)
    j, wb, out_b = bracket(gb, v)
    i1 = min(i + 1, r.shape[0] - 1)
    j1 = min(j + 1, r.shape[1] - 1)
    lr = (r[i, j] * (1 - wb) + r[i, j1] * wb) * (1 - wa) + (r[i1, j] * (1 - wb) + r[i1, j1] * wb) * wa
    return lr, out_a or out_b
