"""What this process may use of the machine: the sweep's process pool and a band's threads size themselves by it;
the compiled core's output buffers take their memory in ordinary pages, as much at the start as the machine lets a
process map."""

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


def _proc_text(path: str) -> str | None:
    """A /proc file's text; None where there is none (not Linux)."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _kib(text: str | None, key: str) -> int | None:
    """`key:   123 kB` from /proc/self/status or /proc/meminfo, in KiB."""
    for line in (text or "").splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return None


def mappable_bytes() -> float:
    """How much more this process may map before the OS refuses: its address-space limit (`ulimit -v`, RLIMIT_AS,
    as batch schedulers set it) less what it maps now, and, where Linux charges every mapped page at once
    (vm.overcommit_memory 2), its commit limit less what is committed. inf where neither applies: by default Linux
    backs a mapping only as it is written, so mapping more than a run writes costs nothing."""
    room = math.inf
    try:
        import resource
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            room = soft - 1024 * (_kib(_proc_text("/proc/self/status"), "VmSize") or 0)
    except (ImportError, AttributeError, OSError, ValueError):
        pass
    if (_proc_text("/proc/sys/vm/overcommit_memory") or "").strip() == "2":
        meminfo = _proc_text("/proc/meminfo")
        limit, committed = _kib(meminfo, "CommitLimit"), _kib(meminfo, "Committed_AS")
        if limit is not None and committed is not None:
            room = min(room, 1024 * (limit - committed))
    return max(float(room), 0.0)


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
