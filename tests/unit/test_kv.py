"""KV managers at the policy level: the vLLM paper's fragmentation example, first-fit holes, block tables."""

import pytest
from helpers import make_request

from sim.kv.contiguous import ContiguousKVManager
from sim.kv.paged import PagedKVManager


def _fill(kv, lengths):
    requests = []
    for n in lengths:
        # A request whose final KV holds exactly n tokens: prompt n, one output token.
        r = make_request(prompt=n, output=1)
        assert kv.allocate_slots(r, n) is not None
        r.num_computed_tokens = n
        requests.append(r)
    return requests


def test_published_example_contiguous_max_len():
    kv = ContiguousKVManager(capacity_slots=4 * 2048, reserve="max_len", max_len=2048)
    _fill(kv, [2000, 100, 500, 1500])
    usage = kv.usage(num_token_slots=4100)
    assert usage.allocated_slots == 8192
    assert usage.allocated_slots - usage.token_slots == 4092
    assert usage.internal_slots == 4092 and usage.reserved_slots == 0


def test_published_example_paged_16():
    kv = PagedKVManager(num_blocks=1000, block_size=16)
    _fill(kv, [2000, 100, 500, 1500])
    usage = kv.usage(num_token_slots=4100)
    assert kv.num_blocks - kv.num_free_blocks == 258
    assert usage.allocated_slots == 4128
    assert usage.allocated_slots - usage.token_slots == 28


def test_contiguous_reservation_rules():
    r = make_request(prompt=1000, output=200)  # final KV: 1199 tokens
    assert ContiguousKVManager(10_000, "max_len", 4096).region_size(r) == 4096
    assert ContiguousKVManager(10_000, "pow2", 4096).region_size(r) == 2048
    assert ContiguousKVManager(10_000, "oracle", 4096).region_size(r) == 1199
    # pow2 never exceeds max_len, never undershoots the real need, and is at most twice it.
    for n in range(1, 5000, 37):
        size = ContiguousKVManager(10_000, "pow2", 4096).region_size(make_request(n, 1))
        assert n <= size <= max(2 * n, n) and (size <= 4096 or size == n)


def test_contiguous_first_fit_leaves_holes_and_coalesces():
    kv = ContiguousKVManager(capacity_slots=100, reserve="oracle", max_len=100)
    a, b, c = make_request(30, 1), make_request(30, 1), make_request(30, 1)
    assert kv.allocate_slots(a, 30) == [(0, 30)]
    assert kv.allocate_slots(b, 30) == [(30, 30)]
    assert kv.allocate_slots(c, 30) == [(60, 30)]
    kv.free(b)
    # 40 slots are free (a hole of 30 and 10 at the end) but no 35-slot region exists.
    big = make_request(35, 1)
    assert kv.allocate_slots(big, 35) is None
    usage = kv.usage(num_token_slots=60)
    assert usage.free_slots == 40 and usage.external_slots == 10
    small = make_request(20, 1)
    assert kv.allocate_slots(small, 20) == [(30, 20)]  # first fit: the hole, not the tail
    kv.free(a)
    kv.free(small)
    kv.free(c)
    assert kv.hole_starts == [0] and kv.hole_sizes == [100]
    assert kv.usage(0).free_slots == 100 and kv.usage(0).external_slots == 0


def test_paged_blocks_on_demand_and_free_list():
    kv = PagedKVManager(num_blocks=4, block_size=4)
    r = make_request(5, 10)
    assert kv.allocate_slots(r, 5) == [0, 1]
    r.num_computed_tokens = 5
    assert kv.allocate_slots(r, 3) == []  # 8 tokens still fit two blocks
    assert kv.allocate_slots(r, 4) == [2]
    other = make_request(8, 1)
    assert kv.allocate_slots(other, 8) is None  # needs 2 blocks, 1 free: nothing allocated
    assert kv.num_free_blocks == 1
    kv.free(r)
    assert kv.num_free_blocks == 4
    assert kv.allocate_slots(other, 8) == [3, 0]


@pytest.mark.parametrize("reserve", ["max_len", "pow2", "oracle"])
def test_contiguous_reservations_never_exceed_the_cache(reserve):
    kv = ContiguousKVManager(capacity_slots=1000, reserve=reserve, max_len=2048)
    assert kv.can_ever_fit(1001) is False and kv.can_ever_fit(1000) is True
    # A 900-token request under pow2 would round to 1024 and never be placed: the cache bounds it.
    r = make_request(900, 1)
    assert 900 <= kv.region_size(r) <= 1000
    assert kv.allocate_slots(r, 900) is not None
