"""Timing one kernel call (or one whole step): medians and 20th/80th percentiles.

GPU (`time_cuda_graph`): what a step runs is kernels back to back, with the L2 cache warm with what the
previous kernel wrote, and, under CUDA graphs, without launch gaps. So `calls` back-to-back calls of the
op are captured in ONE CUDA graph (after warm-up on a side stream, as torch's CUDA-graph notes require),
the graph is replayed, each replay is timed with CUDA events, and a call costs replay / calls. Timing
one call at a time with the L2 flushed between repetitions (`triton.testing.do_bench`, the old timer,
kept as `time_cuda_do_bench`) measured launch and flush noise at small shapes (issue 17: an RMSNorm of
one token read 85 µs at the median, 4 µs at the 20th percentile).

Which inputs repeat across the captured calls is the caller's choice (see `ShardBench.cold_copies`):
activations stay the same tensors (in a step the previous kernel just wrote them: warm in L2), while
per-layer weights and KV caches rotate among enough copies to exceed the L2 (in a step each layer reads
its own, cold from HBM).

CPU: `time.perf_counter_ns` around each call, after warm-up, on the threads torch is set to use.
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


def time_cuda_graph(fn: Callable[[], object], *, calls: int = 1, reps: int | None = None, budget_s: float = 0.05,
                    min_reps: int = 5, max_reps: int = 100, warmup: int = 2) -> Timing:
    """`calls` back-to-back calls of fn captured in one CUDA graph; per-call statistics over `reps`
    replays (or as many as fit `budget_s`, clamped to [min_reps, max_reps])."""
    import torch
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture stream: lazy init, autotuning, workspaces
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()  # first replay uploads the graph
    torch.cuda.synchronize()
    if reps is None:
        probe0, probe1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        probe0.record()
        graph.replay()
        probe1.record()
        torch.cuda.synchronize()
        replay_s = max(probe0.elapsed_time(probe1) / 1e3, 1e-7)
        reps = int(min(max_reps, max(min_reps, budget_s / replay_s)))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends):  # queued back to back: the GPU never waits for the host
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    samples = np.array([s.elapsed_time(e) for s, e in zip(starts, ends)]) / 1e3 / calls
    del graph
    p20, median, p80 = np.percentile(samples, [20, 50, 80])
    return Timing(float(median), float(p20), float(p80))


def time_cuda_do_bench(fn: Callable[[], object], budget_s: float) -> Timing:
    """The old GPU timer: one call at a time, L2 flushed before each (kept for comparison)."""
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
