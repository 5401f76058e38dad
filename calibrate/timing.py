"""Timing one kernel call: medians and 20th/80th percentiles.

GPU: `triton.testing.do_bench`, which times with CUDA events and flushes the L2 cache before each
repetition. CPU: `time.perf_counter_ns` around each call, after warm-up, on the threads torch is
set to use.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

_MIN_REPS = 5
_MAX_REPS = 200


@dataclass(frozen=True)
class Timing:
    median_s: float
    p20_s: float
    p80_s: float


def time_cpu(fn: Callable[[], object], budget_s: float) -> Timing:
    start = time.perf_counter_ns()
    fn()  # warm-up: first-call allocation and dispatch
    first_s = (time.perf_counter_ns() - start) / 1e9
    if first_s < budget_s / 4:
        fn()
    reps = int(min(_MAX_REPS, max(_MIN_REPS, budget_s / max(first_s, 1e-7))))
    samples = np.empty(reps)
    for i in range(reps):
        t0 = time.perf_counter_ns()
        fn()
        samples[i] = time.perf_counter_ns() - t0
    p20, median, p80 = np.percentile(samples / 1e9, [20, 50, 80])
    return Timing(float(median), float(p20), float(p80))


def time_cuda(fn: Callable[[], object], budget_s: float) -> Timing:
    from triton.testing import do_bench
    median, p20, p80 = do_bench(fn, warmup=max(5, int(budget_s * 250)), rep=max(20, int(budget_s * 1000)),
                                quantiles=[0.5, 0.2, 0.8])
    return Timing(median / 1e3, p20 / 1e3, p80 / 1e3)


def time_wall(fn: Callable[[], object], budget_s: float, sync: Callable[[], None]) -> Timing:
    """Host-side work (the engine loop) timed by the wall clock, synchronizing the device each call."""
    def call():
        fn()
        sync()
    return time_cpu(call, budget_s)
