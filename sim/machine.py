"""What this process may use of the machine: the sweep's process pool and a band's threads size themselves by it;
the compiled core's output buffers take their memory in ordinary pages."""

from __future__ import annotations

import errno
import math
import mmap
import os

import numpy as np


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, as `taskset` or a container's CPU set gives it), not every
    CPU of the machine."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity outside Linux
        return os.cpu_count() or 1


def plain_pages(shape: tuple[int, ...], dtype) -> np.ndarray:
    """A zeroed array in memory of its own, mapped in ordinary pages, that the OS backs only as it is written.

    numpy asks Linux for transparent huge pages on every array of 4 MB or more. Where the kernel then compacts
    memory to find each huge page (`defrag` set to `madvise`, the usual default) and on virtual machines, the first
    write to such an array is slow: 408 MB took 1.02 s with huge pages and 0.16 s without, on the development
    machine (KVM guest, Intel Xeon, 2 vCPUs; 11-28), which is most of what writing a million-request run's step
    rows cost. This mapping gets no such advice, and pages it never writes cost nothing, so a buffer may be sized
    generously."""
    count = math.prod(shape)
    itemsize = np.dtype(dtype).itemsize
    try:
        buffer = mmap.mmap(-1, max(count * itemsize, 1))  # anonymous, private, zero-filled on first touch
    except OSError as err:
        if err.errno != errno.ENOMEM:
            raise
        # as numpy says it, so that the command line's one line for a run too large for the machine catches it
        raise MemoryError(f"Unable to allocate {count * itemsize:,} bytes for an array with shape {shape} and data "
                          f"type {np.dtype(dtype)}") from None
    return np.frombuffer(buffer, dtype=dtype, count=count).reshape(shape)
