"""sim/machine.py: the memory the compiled core's output buffers take."""

import numpy as np
import pytest

from sim.machine import plain_pages


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
