"""The machine a fidelity run measured on, and the cores it may use.

Plain standard library: read by the recorder (in `.venv-fidelity`) and the comparison (in `.venv`).
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

from sim.errors import ConfigError

FLAGS = ("amx_bf16", "amx_tile", "avx512f", "avx512_bf16", "avx512_vnni", "avx2")


def cpuinfo(text: str | None = None) -> dict:
    """Model name and the flags that decide which bf16 kernels a CPU runs (AMX, AVX512-BF16)."""
    if text is None:
        try:
            text = Path("/proc/cpuinfo").read_text()
        except OSError:
            text = ""
    model, flags = platform.processor() or platform.machine(), set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and value.strip():
            model = value.strip()
        elif key == "flags" and not flags:
            flags = set(value.split())
    return {"cpu_model": model, **{f: f in flags for f in FLAGS}}


def allowed_cores() -> list[int]:
    """The cores this process may run on (taskset, cgroups), not 0..n-1 of the machine."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def pick_cores(threads: int, cores: list[int] | None = None) -> list[int]:
    """The first `threads` of the allowed cores; refuses more threads than allowed cores."""
    cores = allowed_cores() if cores is None else sorted(cores)
    if threads > len(cores):
        raise ConfigError(f"--threads: {threads} is not allowed; this process may use {len(cores)} core(s) "
                          f"({','.join(map(str, cores))}); allowed: 1-{len(cores)}")
    return cores[:threads]


def machine_info(threads: int | None = None, cores: list[int] | None = None) -> dict:
    """What every report records about the machine: CPU model, flags, CPUs, allowed cores, threads used."""
    info = {**cpuinfo(), "cpus": os.cpu_count(), "allowed_cores": allowed_cores(), "platform": platform.platform()}
    if threads is not None:
        info["threads"] = threads
        info["cores"] = cores
    return info
