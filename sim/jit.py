"""The decorator the arithmetic both engines share is written under: numba's `njit`, or, without numba, none.

Each cost model's step price is written once, as numba functions (`roofline_kernel`, `steps_kernel`,
`measured_kernel`), and so are the scheduling rules (`sim.sched.rules`), the KV admission test
(`sim.kv.admission`) and the front-end's passes (`sim.frontend`): both engines call them, the SimPy engine from
Python, the compiled core (`sim.compiled`) inlined into its loop. It sits below every layer that uses it. Without
numba (it is the `fast` extra) the same functions run as plain Python: the same arithmetic, slower, and no compiled
core. `NUMBA_DISABLE_JIT=1` does the same with numba installed, to step through a price in a debugger.
"""

from __future__ import annotations

from sim import numba_cache  # noqa: F401  (drops stale numba caches before anything compiles or loads)

try:
    from numba import njit
    HAVE_NUMBA = True
except ImportError:  # the `fast` extra is not installed
    HAVE_NUMBA = False

    def njit(*args, **_options):
        """`numba.njit` as a no-op: used bare or with options, it gives the function back."""
        if len(args) == 1 and callable(args[0]):
            return args[0]
        return lambda function: function

__all__ = ["HAVE_NUMBA", "njit"]
