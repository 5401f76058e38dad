"""Routers (sim/core/router.py): which replica an arriving request goes to, by hand-counted loads."""

from types import SimpleNamespace

import numpy as np
import pytest

from sim.core.router import LEAST_OUTSTANDING_KV, choose_replica, kv_usage, make_router


def replica(index: int, waiting: int, running: int, free_blocks: int = 100, num_blocks: int = 100):
    return SimpleNamespace(index=index, num_outstanding=waiting + running,
                           scheduler=SimpleNamespace(num_waiting=waiting,
                                                     kv=SimpleNamespace(num_free_blocks=free_blocks,
                                                                        num_blocks=num_blocks)))


def choices(kind: str, replicas: list, arrivals: int) -> list[int]:
    router = make_router(kind, 0)
    return [router.choose(replicas, None).index for _ in range(arrivals)]


def test_least_loaded_weighs_a_waiting_request_as_four_running_ones():
    # vLLM's score to 0.26, 4 x waiting + running: 4 for one waiting, 3 for three running
    replicas = [replica(0, 1, 0), replica(1, 0, 3)]
    assert make_router("least_loaded", 0).choose(replicas, None).index == 1
    assert make_router("least_outstanding", 0).choose(replicas, None).index == 0  # 1 outstanding against 3


def test_least_loaded_ties_go_to_the_lowest_index():
    replicas = [replica(0, 0, 4), replica(1, 1, 0), replica(2, 0, 4)]
    assert make_router("least_loaded", 0).choose(replicas, None).index == 0


def test_fewest_waiting_compares_waiting_first_then_running():
    # vLLM 0.9.1-0.10.0: the least [waiting, running] pair: one waiting loses to none waiting and five running
    replicas = [replica(0, 1, 0), replica(1, 0, 5), replica(2, 0, 3)]
    assert make_router("fewest_waiting", 0).choose(replicas, None).index == 2
    assert make_router("least_loaded", 0).choose(replicas, None).index == 2  # 4, 5, 3
    replicas = [replica(0, 1, 0), replica(1, 0, 5)]
    assert make_router("fewest_waiting", 0).choose(replicas, None).index == 1  # least_loaded: 4 < 5, the first
    assert make_router("least_loaded", 0).choose(replicas, None).index == 0


def test_fewest_waiting_ties_go_to_the_lowest_index():
    replicas = [replica(0, 1, 2), replica(1, 0, 2), replica(2, 0, 2)]
    assert make_router("fewest_waiting", 0).choose(replicas, None).index == 1


def test_round_robin_deals_in_turn_whatever_the_loads():
    replicas = [replica(0, 9, 9), replica(1, 0, 0), replica(2, 3, 0)]
    assert choices("round_robin", replicas, 7) == [0, 1, 2, 0, 1, 2, 0]


def test_kv_usage_is_the_share_of_blocks_not_free():
    assert kv_usage(25, 100) == 0.75
    assert kv_usage(100, 100) == 0.0
    assert kv_usage(0, 0) == 0.0  # contiguous KV: no blocks, no pressure


def test_least_outstanding_kv_rotates_its_ties_where_least_outstanding_keeps_the_first():
    # vLLM 0.27.0: equal scores go to the first engine of a scan that starts one engine further each request
    replicas = [replica(0, 0, 2), replica(1, 0, 2), replica(2, 0, 2)]
    assert choices("least_outstanding_kv", replicas, 5) == [0, 1, 2, 0, 1]
    assert choices("least_outstanding", replicas, 5) == [0, 0, 0, 0, 0]
    # a lower score wins from wherever the scan starts
    replicas = [replica(0, 0, 3), replica(1, 0, 1), replica(2, 0, 2)]
    assert choices("least_outstanding_kv", replicas, 3) == [1, 1, 1]


def test_least_outstanding_kv_penalises_waiting_requests_by_kv_usage_above_half():
    # by hand: replica 0 has 3 outstanding (2 waiting) at KV usage 0.9: 3 + 2 x 6 x 0.4 = 7.8; replica 1 has 6
    # running at usage 0.95 (no waiting, no penalty): 6; replica 2 has 5 outstanding (1 waiting) at usage 0.75:
    # 5 + 6 x 0.25 = 6.5
    replicas = [replica(0, 2, 1, free_blocks=10), replica(1, 0, 6, free_blocks=5), replica(2, 1, 4, free_blocks=25)]
    assert choices("least_outstanding_kv", replicas, 3) == [1, 1, 1]
    assert choices("least_outstanding", replicas, 1) == [0]
    # at half-full KV or below the waiting cost nothing: the fewest outstanding wins, as least_outstanding's choice
    replicas = [replica(0, 2, 1, free_blocks=50), replica(1, 0, 6, free_blocks=5), replica(2, 1, 4, free_blocks=80)]
    assert choices("least_outstanding_kv", replicas, 3) == [0, 0, 0]


@pytest.mark.parametrize("kind", ["round_robin", "least_outstanding", "least_loaded", "fewest_waiting",
                                  "least_outstanding_kv"])
def test_one_replica_takes_every_request_and_the_turn_still_counts(kind):
    router = make_router(kind, 0)
    only = [replica(0, 5, 5, free_blocks=0)]
    assert all(router.choose(only, None) is only[0] for _ in range(3))
    assert router._next == 3  # the compiled core counts every arrival routed too


def test_the_rule_reads_the_columns_it_is_told_as_the_compiled_core_hands_them():
    # the core passes its per-replica state array and that array's columns: the same choice as from the routers'
    counts = np.array([[1, 5, 10], [0, 2, 90], [3, 3, 0]], dtype=np.int64)  # waiting, outstanding, free blocks
    state = np.zeros((3, 9), dtype=np.int64)
    state[:, [7, 2, 4]] = counts
    assert choose_replica(LEAST_OUTSTANDING_KV, 2, state, 7, 2, 4, 100) == 1  # scores 7.4, 2, 12 (below)
    assert choose_replica(LEAST_OUTSTANDING_KV, 2, counts, 0, 1, 2, 100) == 1  # 5 + 6 x 0.4, 2, 3 + 3 x 6 x 0.5


def test_an_unknown_router_is_refused():
    with pytest.raises(ValueError, match="unknown router 'closest'"):
        make_router("closest", 0)
