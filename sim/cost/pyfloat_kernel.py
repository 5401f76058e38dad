"""CPython's own float operations, compiled with numba, where numba's or libm's differ in the last bit.

The compiled engine core (`sim.compiled`) must price a step to the same bit as the Python cost models
do. Most of their arithmetic is plain IEEE operations that numba repeats exactly, and `math.log`/`math.exp`
call the same libm in both. Two do not:

- `math.hypot`: CPython computes it with its own `vector_norm` (Modules/mathmodule.c: power-of-two scaling,
  Dekker's exact squaring, a differential correction), not libm's `hypot`. numba calls libm, which differs
  in the last bit for about 0.5% of arguments. `hypot` below is `vector_norm` for two coordinates, in the
  form CPython 3.11 builds it (Dekker's product, no fused multiply-add).
- `sum()` of floats: a plain left-to-right sum up to CPython 3.11; 3.12 made it compensated (Neumaier).

So these are exact only for the CPython they were written after: `EXACT_HERE` says whether the running
interpreter is one, and the cost models offer a compiled form only where it is (tests check both
functions against the interpreter's on millions of random arguments).
"""

from __future__ import annotations

import math
import sys

from numba import njit

from sim.cost import numba_cache  # noqa: F401  (drops stale numba caches before anything loads)

EXACT_HERE = sys.version_info[:2] == (3, 11)
_DBL_MIN = 2.2250738585072014e-308


@njit(cache=True)
def _split(x):
    t = x * 134217729.0  # Veltkamp's constant, 2**27 + 1
    hi = t - (t - x)
    return hi, x - hi


@njit(cache=True)
def _mul(x, y):
    """Dekker's exact product: hi + lo == x * y."""
    xh, xl = _split(x)
    yh, yl = _split(y)
    p = xh * yh
    q = xh * yl + xl * yh
    z = p + q
    return z, p - z + q + xl * yl


@njit(cache=True)
def _norm2(x0, x1, largest):
    _, max_e = math.frexp(largest)
    if max_e < -1023:  # subnormal: lift both to normals first, as vector_norm does
        return _DBL_MIN * _norm2(x0 / _DBL_MIN, x1 / _DBL_MIN, largest / _DBL_MIN)
    scale = math.ldexp(1.0, -max_e)
    csum = 1.0
    frac1 = 0.0
    frac2 = 0.0
    for v in (x0, x1):
        x = v * scale
        hi, lo = _mul(x, x)
        s = csum + hi
        frac2 += (csum - s) + hi
        frac1 += lo
        csum = s
    h = math.sqrt(csum - 1.0 + (frac1 + frac2))
    hi, lo = _mul(-h, h)
    s = csum + hi
    frac2 += (csum - s) + hi
    frac1 += lo
    csum = s
    x = csum - 1.0 + (frac1 + frac2)
    h += x / (2.0 * h)
    return h / scale


@njit(cache=True)
def hypot(a, b):
    """`math.hypot(a, b)` of CPython 3.11, to the bit."""
    x0 = abs(a)
    x1 = abs(b)
    if math.isnan(x0) or math.isnan(x1):
        if math.isinf(x0) or math.isinf(x1):
            return math.inf
        return math.nan
    largest = x1 if x1 > x0 else x0
    if math.isinf(largest):
        return largest
    if largest == 0.0:
        return largest
    return _norm2(x0, x1, largest)
