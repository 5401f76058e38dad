"""Routers (sim/core/router.py): which replica an arriving request goes to, by hand-counted loads."""

from types import SimpleNamespace

from sim.core.router import make_router


def replica(index: int, waiting: int, running: int):
    return SimpleNamespace(index=index, num_outstanding=waiting + running,
                           scheduler=SimpleNamespace(num_waiting=waiting))


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
