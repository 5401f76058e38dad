"""What this process may use of the machine: the sweep's process pool and a band's threads size themselves by it."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, as `taskset` or a container's CPU set gives it), not every
    CPU of the machine."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity outside Linux
        return os.cpu_count() or 1
