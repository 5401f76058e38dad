"""Contiguous placement policies: first fit, best fit and buddy blocks, at known addresses."""

import pytest
from helpers import make_request
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config.files import validate_scenario
from sim.errors import ConfigError
from sim.kv.contiguous import ContiguousKVManager


def _place(kv, n):
    """Allocate a request whose final KV is exactly n tokens; returns (request, (start, size)) or (request, None)."""
    r = make_request(prompt=n, output=1)
    got = kv.allocate_slots(r, n)
    return r, (got[0] if got else None)


def _three_then_free_first(placement, capacity=100):
    kv = ContiguousKVManager(capacity, "oracle", capacity, placement)
    a, _ = _place(kv, 30)
    _place(kv, 20)
    _place(kv, 30)
    kv.free(a)
    return kv


@pytest.mark.parametrize("placement, address", [("first_fit", 0), ("best_fit", 80)])
def test_first_fit_takes_the_lowest_hole_and_best_fit_the_smallest(placement, address):
    # Regions [0,30) [30,50) [50,80), the first freed: holes of 30 at 0 and 20 at 80.
    kv = _three_then_free_first(placement)
    assert kv.hole_starts == [0, 80] and kv.hole_sizes == [30, 20]
    _, region = _place(kv, 15)
    assert region == (address, 15)


def test_best_fit_breaks_ties_by_address():
    kv = ContiguousKVManager(100, "oracle", 100, "best_fit")
    regions = [_place(kv, n) for n in (10, 10, 10, 10)]
    kv.free(regions[0][0])
    kv.free(regions[2][0])  # holes of 10 at 0 and at 20, and 60 at the end
    assert _place(kv, 10)[1] == (0, 10)


def test_buddy_rounds_to_powers_of_two_and_splits_the_smallest_block():
    kv = ContiguousKVManager(128, "oracle", 128, "buddy")
    assert [_place(kv, n)[1] for n in (30, 20, 30, 15)] == [(0, 32), (32, 32), (64, 32), (96, 16)]
    assert kv.buddy_free == {128: [], 64: [], 32: [], 16: [112]}
    usage = kv.usage(num_token_slots=0)
    # Rounding up is internal fragmentation: 2 + 12 + 2 + 1 slots allocated that will never be filled.
    assert usage.internal_slots == 17 and usage.reserved_slots == 95


def test_buddy_merges_freed_buddies_and_not_neighbours_of_another_parent():
    kv = ContiguousKVManager(128, "oracle", 128, "buddy")
    reqs = [_place(kv, 32)[0] for _ in range(4)]  # [0,32) [32,64) [64,96) [96,128)
    kv.free(reqs[1])
    kv.free(reqs[2])  # free neighbours at 32 and 64, but buddies of 0 and 96: no merge
    assert kv.buddy_free[32] == [32, 64] and kv.largest_hole() == 32
    assert kv.usage(num_token_slots=64).external_slots == 32  # 64 free, at most 32 usable at once
    kv.free(reqs[0])
    assert kv.buddy_free[64] == [0] and kv.buddy_free[32] == [64]
    kv.free(reqs[3])
    assert kv.buddy_free[128] == [0] and not kv.buddy_free[64] and not kv.buddy_free[32]


def test_buddy_cuts_a_capacity_that_is_not_a_power_of_two_into_top_blocks():
    kv = ContiguousKVManager(12, "oracle", 12, "buddy")
    assert kv.top_blocks == [(0, 8), (8, 4)]
    assert kv.can_ever_fit(8) and not kv.can_ever_fit(9)
    assert [_place(kv, n)[1] for n in (3, 4, 2)] == [(8, 4), (0, 4), (4, 2)]


def test_external_fragmentation_differs_between_policies_on_the_same_sequence():
    external = {}
    for placement in ("first_fit", "best_fit"):
        kv = _three_then_free_first(placement)
        _place(kv, 15)
        external[placement] = kv.usage(num_token_slots=95).external_slots
    # first fit: holes 15 (at 15) and 20 (at 80), largest 20 -> 15 fragmented; best fit: holes 30 and 5 -> 5.
    assert external == {"first_fit": 15, "best_fit": 5}


@settings(max_examples=150, deadline=None)
@given(capacity=st.integers(1, 300),
       ops=st.lists(st.tuples(st.booleans(), st.integers(1, 80), st.integers(0, 1000)), max_size=60))
def test_buddy_never_overlaps_and_coalesces_back_when_everything_is_freed(capacity, ops):
    kv = ContiguousKVManager(capacity, "oracle", 1000, "buddy")
    initial = {size: list(starts) for size, starts in kv.buddy_free.items()}
    live = []
    for allocate, n, pick in ops:
        if allocate or not live:
            r, region = _place(kv, n)
            if region is not None:
                start, size = region
                assert size & (size - 1) == 0 and size >= n and start % size == 0
                live.append(r)
        else:
            kv.free(live.pop(pick % len(live)))
        spans = sorted(kv.regions.values()) + sorted((s, b) for b, starts in kv.buddy_free.items() for s in starts)
        spans.sort()
        # Allocated regions and free blocks tile the address space exactly: no overlap, nothing lost.
        assert sum(size for _, size in spans) == capacity
        assert all(a + sa <= b for (a, sa), (b, _) in zip(spans, spans[1:]))
        assert kv.usage(0).free_slots == sum(b * len(s) for b, s in kv.buddy_free.items())
    for r in live:
        kv.free(r)
    assert {b: s for b, s in kv.buddy_free.items() if s} == {b: s for b, s in initial.items() if s}


def _contiguous_scenario(**kv_cache):
    return validate_scenario({
        "model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 20.0},
                     "lengths": {"kind": "fixed", "input_tokens": 300, "output_tokens": 50}},
        "kv_cache": kv_cache, "run": {"seed": 0, "num_requests": 60}})


def test_placement_is_refused_for_the_paged_layout_in_one_line():
    with pytest.raises(ConfigError) as err:
        _contiguous_scenario(layout="paged", placement="buddy")
    message = str(err.value)
    assert "placement" in message and "buddy" in message and "contiguous" in message and "\n" not in message.strip()
    with pytest.raises(ConfigError, match="first_fit"):
        _contiguous_scenario(layout="contiguous", placement="worst_fit")


@pytest.mark.parametrize("placement", ["first_fit", "best_fit", "buddy"])
def test_every_placement_runs_a_scenario_to_the_end(placement):
    from sim.run import make_scheduler, simulate
    sc = _contiguous_scenario(layout="contiguous", reserve="oracle", placement=placement)
    assert make_scheduler(sc).kv.placement == placement
    r = simulate(sc)
    assert r.summary["num_finished"] == 60
