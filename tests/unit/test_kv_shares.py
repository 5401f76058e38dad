"""The KV split as shares of the whole capacity, free memory included (the vLLM paper's Fig. 2 normalisation)."""

import pandas as pd
import pytest
from helpers import make_request

from sim.kv.contiguous import ContiguousKVManager
from sim.kv.paged import PagedKVManager
from sim.results import steps_frame, utilization


def _fill(kv, lengths):
    out = []
    for n in lengths:
        r = make_request(prompt=n, output=1)
        assert kv.allocate_slots(r, n) is not None
        r.num_computed_tokens = n
        out.append(r)
    return out


def test_published_example_shares_sum_to_one_with_free_memory():
    # The vLLM paper's example (2000, 100, 500, 1500 tokens): paged with 16-token blocks in 1000 blocks.
    kv = PagedKVManager(num_blocks=1000, block_size=16)
    _fill(kv, [2000, 100, 500, 1500])
    shares = kv.usage(num_token_slots=4100).shares()
    assert shares == pytest.approx({"token": 4100 / 16000, "reserved": 0.0, "internal": 28 / 16000,
                                    "external": 0.0, "free": (16000 - 4128) / 16000})
    # Contiguous max_len fills the cache exactly: nothing free under either normalisation.
    kv = ContiguousKVManager(capacity_slots=4 * 2048, reserve="max_len", max_len=2048)
    _fill(kv, [2000, 100, 500, 1500])
    for fig2 in (False, True):
        shares = kv.usage(num_token_slots=4100).shares(holes_are_fragments=fig2)
        assert shares == pytest.approx({"token": 4100 / 8192, "reserved": 0.0, "internal": 4092 / 8192,
                                        "external": 0.0, "free": 0.0})


def test_contiguous_holes_are_external_fragmentation_as_fig2_counts_them():
    kv = ContiguousKVManager(capacity_slots=100, reserve="oracle", max_len=100)
    a, b, c = _fill(kv, [30, 30, 30])
    kv.free(b)  # holes: 30 at 30 and 10 at 90
    usage = kv.usage(num_token_slots=60)
    assert usage.usable_free_slots == 30
    assert usage.shares() == pytest.approx({"token": 0.6, "reserved": 0.0, "internal": 0.0,
                                            "external": 0.1, "free": 0.3})
    assert usage.shares(holes_are_fragments=True) == pytest.approx({"token": 0.6, "reserved": 0.0, "internal": 0.0,
                                                                    "external": 0.4, "free": 0.0})


def _steps(**kv):
    base = {"replica": [0, 0], "start_s": [0.0, 1.0], "duration_s": [1.0, 3.0], "num_seqs": [1, 1],
            "bytes": [1.0, 1.0], "flops": [1.0, 1.0], "kv_capacity_slots": [100, 100]}
    return steps_frame(base | kv)


class _GPU:
    hbm_bytes_per_s = bf16_flops_per_s = 1.0


def test_summary_shares_are_time_weighted_and_sum_to_one():
    steps = _steps(kv_token_slots=[60, 20], kv_reserved_slots=[0, 10], kv_internal_slots=[10, 0],
                   kv_external_slots=[10, 0])
    assert list(steps["kv_free_slots"]) == [20, 70]
    for contiguous in (False, True):
        s = utilization(steps, 4.0, _GPU(), contiguous=contiguous)
        parts = ("kv_token_fraction", "kv_reserved_fraction", "kv_internal_fraction")
        assert sum(s[k] for k in parts) + s["kv_external_fraction"] + s["kv_free_fraction"] == pytest.approx(1)
        assert sum(s[k] for k in parts) + s["kv_fig2_external_fraction"] + s["kv_fig2_free_fraction"] == pytest.approx(1)
        assert s["kv_free_fraction"] == pytest.approx((20 * 1 + 70 * 3) / 400)
    assert utilization(steps, 4.0, _GPU(), contiguous=True)["kv_fig2_external_fraction"] == pytest.approx(
        (10 + 20 + 70 * 3) / 400)
    paged = utilization(steps, 4.0, _GPU())
    assert paged["kv_fig2_free_fraction"] == paged["kv_free_fraction"]
    assert paged["kv_fig2_external_fraction"] == paged["kv_external_fraction"]


def test_unchanged_fields_keep_their_meaning():
    s = utilization(_steps(kv_token_slots=[50, 50], kv_reserved_slots=[0, 0], kv_internal_slots=[0, 0],
                           kv_external_slots=[25, 25]), 4.0, _GPU(), contiguous=True)
    assert s["kv_external_fraction"] == 0.25 and s["kv_token_share"] == pytest.approx(50 / 75)
    pd.testing.assert_series_equal(pd.Series([s["kv_free_fraction"]]), pd.Series([0.25]))
