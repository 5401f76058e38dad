"""Routers: which replica gets an arriving request. Plain Python over one choice rule.

The rule is written once, in `choose_replica` (numba): the Python routers hand it the replicas' counts, and the
compiled core inlines it over its own (sim/compiled/kernel.py `_admit_arrivals_at`), so both engines make the same
choice by the same arithmetic. The random router draws from its own stream and is the SimPy engine's alone.
"""

from __future__ import annotations

import functools

import numpy as np

from sim.jit import njit

# The rules `choose_replica` knows (the compiled core's cfg[C_ROUTER] holds one).
ROUND_ROBIN, LEAST_OUTSTANDING, LEAST_LOADED, FEWEST_WAITING, LEAST_OUTSTANDING_KV = range(5)
# vLLM's data-parallel load balancers (vllm/v1/engine/core_client.py DPLBAsyncMPClient.get_core_engine_for_request):
LOADED_WAITING_WEIGHT = 4  # 0.10.1-0.26.x: 4 x waiting + running
KV_WAITING_WEIGHT = 6.0  # 0.27.0 on: + 6 x waiting x max(0, KV usage - KV_PRESSURE_FROM)
KV_PRESSURE_FROM = 0.5


@njit(cache=True)
def kv_usage(free_blocks, num_blocks):
    """The fraction of a replica's KV blocks in use, as vLLM's block pool reports it (`BlockPool.get_usage`:
    1 - free / blocks, free counting cached blocks nobody holds); 0 without blocks (contiguous KV)."""
    if num_blocks <= 0:
        return 0.0
    return 1.0 - free_blocks / num_blocks


@njit(cache=True)
def choose_replica(kind, start, counts, waiting, outstanding, free_blocks, num_blocks):
    """The index of the replica an arriving request goes to, by rule `kind`, from each replica's row of `counts`:
    its requests waiting (column `waiting`) and outstanding (column `outstanding`: routed and unfinished, the
    waiting included), and its free KV blocks (column `free_blocks`) of `num_blocks`. `start` counts the arrivals
    routed before this one. (The compiled core hands it its per-replica state array and that array's columns.)

    - ROUND_ROBIN: the replicas in turn (`start` modulo their number);
    - LEAST_OUTSTANDING: the fewest outstanding;
    - LEAST_LOADED: the lowest 4 x waiting + running (vLLM 0.10.1-0.26.x);
    - FEWEST_WAITING: the fewest waiting, then the fewest running (vLLM 0.9.1-0.10.0: lists compared in order);
    - LEAST_OUTSTANDING_KV: the lowest outstanding + 6 x waiting x (KV usage - 0.5) above half-full KV, the scan
      starting one replica further for every arrival (vLLM 0.27.0 on, read in its sdist: the greater of the
      client's in-flight count and the engine's published waiting + running, which with counts current is the
      outstanding; `eng_start_index` rotating so that ties do not favour one engine).

    The others scan from the first replica. Ties go to the first replica scanned."""
    n = counts.shape[0]
    if kind == ROUND_ROBIN:
        return start % n
    first = start % n if kind == LEAST_OUTSTANDING_KV else 0
    best, best_score, best_then = first, 0.0, 0
    for i in range(n):
        q = (first + i) % n
        num_waiting, num_outstanding = counts[q, waiting], counts[q, outstanding]
        then = 0  # compared where the scores tie
        if kind == LEAST_OUTSTANDING:
            score = float(num_outstanding)
        elif kind == LEAST_LOADED:
            score = float(LOADED_WAITING_WEIGHT * num_waiting + num_outstanding - num_waiting)
        elif kind == FEWEST_WAITING:
            score, then = float(num_waiting), num_outstanding - num_waiting
        else:
            score = float(num_outstanding)
            if num_waiting > 0:
                pressure = max(0.0, kv_usage(counts[q, free_blocks], num_blocks) - KV_PRESSURE_FROM)
                score += num_waiting * KV_WAITING_WEIGHT * pressure
        if i == 0 or score < best_score or (score == best_score and then < best_then):
            best, best_score, best_then = q, score, then
    return best


class Router:
    def choose(self, replicas: list, request) -> object:  # pragma: no cover - interface
        raise NotImplementedError


class CountingRouter(Router):
    """A router of `choose_replica`'s: `KIND`, which each rule's subclass names, is its code there (the compiled
    core's too); none here, so that a rule that forgot its own fails at once rather than dealing in turn."""

    KIND: int

    def __init__(self):
        self._next = 0  # arrivals routed so far (`choose_replica`'s `start`)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def choose(self, replicas, request):
        start = self._next
        self._next += 1
        if len(replicas) == 1:  # every rule's only choice
            return replicas[0]
        num_blocks = getattr(replicas[0].scheduler.kv, "num_blocks", 0)  # the replicas' KV pools are alike
        return replicas[choose_replica(self.KIND, start, self.counts(replicas), 0, 1, 2, num_blocks)]

    @staticmethod
    def counts(replicas) -> np.ndarray:
        """`choose_replica`'s counts of `replicas`: a row each, its waiting, outstanding and free KV blocks."""
        return np.array([(r.scheduler.num_waiting, r.num_outstanding, r.scheduler.kv.num_free_blocks)
                         for r in replicas], dtype=np.int64)


class RoundRobinRouter(CountingRouter):
    """The replicas in turn."""

    KIND = ROUND_ROBIN

    @staticmethod
    def counts(replicas) -> np.ndarray:  # none read: as many rows as replicas
        return _no_counts(len(replicas))


@functools.cache
def _no_counts(num_replicas: int) -> np.ndarray:
    return np.zeros((num_replicas, 3), dtype=np.int64)


class LeastOutstandingRouter(CountingRouter):
    """The replica with the fewest routed-but-unfinished requests; ties go to the lowest index."""

    KIND = LEAST_OUTSTANDING


class LeastLoadedRouter(CountingRouter):
    """The replica with the lowest 4 x waiting + running requests, ties to the lowest index: vLLM's data-parallel
    load balancer (vllm/v1/engine/core_client.py DPLBAsyncMPClient.get_core_engine_for_request; the score read in
    0.10.1-0.14.0, 0.16.0-0.19.0, 0.25.0 and 0.26.0, 0.27.0 changed it; the ties as read to 0.19.0: 0.25.0's scan
    start moves one engine a request, not modelled here), with the engines' counts current (vLLM's come from the
    coordinator about every 100 ms, each request the API server sends counted as waiting meanwhile)."""

    KIND = LEAST_LOADED


class FewestWaitingRouter(CountingRouter):
    """The replica with the fewest waiting requests, then the fewest running, ties to the lowest index: vLLM's
    data-parallel load balancer in 0.9.1-0.10.0 (vllm/v1/engine/core_client.py get_core_engine_for_request: the
    least [waiting, running] pair, lists compared in order; read in the 0.9.1, 0.9.2 and 0.10.0 sdists), with the
    engines' counts current (vLLM's come from the coordinator about every 100 ms)."""

    KIND = FEWEST_WAITING


class LeastOutstandingKVRouter(CountingRouter):
    """vLLM's data-parallel load balancer from 0.27.0 (`choose_replica`'s LEAST_OUTSTANDING_KV): the fewest
    outstanding requests plus a waiting request's penalty under KV pressure, ties to the next replica in turn; with
    the engines' counts current (vLLM's are published before and after each step) and one scan start for all the
    API servers (each of vLLM's starts at its own index)."""

    KIND = LEAST_OUTSTANDING_KV


class RandomRouter(Router):
    def __init__(self, seed: int):
        self._rng = np.random.default_rng(np.random.SeedSequence([seed, 11]))

    def __repr__(self) -> str:
        return "RandomRouter()"

    def choose(self, replicas, request):
        return replicas[int(self._rng.integers(len(replicas)))]


ROUTERS = {"round_robin": RoundRobinRouter, "least_outstanding": LeastOutstandingRouter,
           "least_loaded": LeastLoadedRouter, "fewest_waiting": FewestWaitingRouter,
           "least_outstanding_kv": LeastOutstandingKVRouter}


def make_router(kind: str, seed: int) -> Router:
    if kind == "random":
        return RandomRouter(seed)
    if kind in ROUTERS:
        return ROUTERS[kind]()
    raise ValueError(f"unknown router {kind!r}")
