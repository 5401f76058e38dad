"""sim/machine.py: the memory the compiled core's output buffers take, and how much the machine lets it map."""

import numpy as np
import pytest

from sim import machine
from sim.machine import mappable_bytes, plain_pages


@pytest.mark.parametrize(("shape", "dtype"), [((3, 5), np.int64), ((7,), np.float64), ((0,), np.float64),
                                              ((2, 0), np.int64)])
def test_plain_pages_are_a_writable_zeroed_array_of_the_shape_and_dtype(shape, dtype):
    a = plain_pages(shape, dtype)
    assert a.shape == shape and a.dtype == dtype and a.flags.writeable and a.flags.c_contiguous
    assert (a == 0).all()  # an anonymous mapping reads as zeros until written
    a[...] = 3
    assert (a == 3).all()


def test_each_call_maps_memory_of_its_own():
    a, b = plain_pages((4,), np.int64), plain_pages((4,), np.int64)
    a[:] = 1
    assert (b == 0).all() and not np.shares_memory(a, b)


def test_views_keep_the_mapping_alive_after_the_array_is_gone():
    view = plain_pages((2, 1000), np.float64)[1, :10]
    view[:] = 2.5
    import gc
    gc.collect()
    assert (view == 2.5).all()


def _proc(files: dict):
    return lambda path: files.get(path)


def test_nothing_bounds_what_is_mapped_by_default(monkeypatch):
    import resource
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    monkeypatch.setattr(machine, "_proc_text", _proc({"/proc/sys/vm/overcommit_memory": "0\n"}))
    assert mappable_bytes() == float("inf")


def test_an_address_space_limit_leaves_it_less_what_is_mapped(monkeypatch):
    import resource
    monkeypatch.setattr(resource, "getrlimit", lambda which: (8 << 30, resource.RLIM_INFINITY))
    monkeypatch.setattr(machine, "_proc_text", _proc({"/proc/self/status": "Name:\tpython\nVmSize:\t  1048576 kB\n",
                                                      "/proc/sys/vm/overcommit_memory": "1\n"}))
    assert mappable_bytes() == float((8 << 30) - (1 << 30))


def test_a_strict_commit_limit_leaves_it_what_is_not_committed(monkeypatch):
    import resource
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    meminfo = "MemTotal:       16000000 kB\nCommitLimit:    12000000 kB\nCommitted_AS:   11000000 kB\n"
    monkeypatch.setattr(machine, "_proc_text", _proc({"/proc/sys/vm/overcommit_memory": "2\n",
                                                      "/proc/meminfo": meminfo}))
    assert mappable_bytes() == 1024.0 * 1_000_000
    # Both: the smaller; and never below nothing.
    monkeypatch.setattr(resource, "getrlimit", lambda which: (512 << 20, resource.RLIM_INFINITY))
    assert mappable_bytes() == float(512 << 20)
    monkeypatch.setattr(machine, "_proc_text", _proc({"/proc/sys/vm/overcommit_memory": "2\n", "/proc/meminfo":
                                                      "CommitLimit: 1 kB\nCommitted_AS: 9 kB\n"}))
    assert mappable_bytes() == 0.0
