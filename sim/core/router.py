"""Routers: which replica gets an arriving request. Plain Python."""

from __future__ import annotations

import numpy as np


class Router:
    def choose(self, replicas: list, request) -> object:  # pragma: no cover - interface
        raise NotImplementedError


class RoundRobinRouter(Router):
    def __init__(self):
        self._next = 0

    def __repr__(self) -> str:
        return "RoundRobinRouter()"

    def choose(self, replicas, request):
        replica = replicas[self._next % len(replicas)]
        self._next += 1
        return replica


class LeastOutstandingRouter(Router):
    """The replica with the fewest routed-but-unfinished requests; ties go to the lowest index."""

    def __repr__(self) -> str:
        return "LeastOutstandingRouter()"

    def choose(self, replicas, request):
        return min(replicas, key=lambda r: r.num_outstanding)


class LeastLoadedRouter(Router):
    """The replica with the lowest 4 x waiting + running requests, ties to the lowest index: vLLM's data-parallel
    load balancer (vllm/v1/engine/core_client.py DPLBAsyncMPClient.get_core_engine_for_request, read in 0.10.1-0.14.0,
    0.16.0-0.19.0, 0.25.0 and 0.26.0; 0.27.0 changed it), with the engines' counts current (vLLM's come from the
    coordinator about every 100 ms, each request the API server sends counted as waiting meanwhile)."""

    WAITING_WEIGHT = 4

    def __repr__(self) -> str:
        return "LeastLoadedRouter()"

    def choose(self, replicas, request):
        def load(replica) -> int:
            waiting = replica.scheduler.num_waiting
            return self.WAITING_WEIGHT * waiting + replica.num_outstanding - waiting

        return min(replicas, key=load)


class FewestWaitingRouter(Router):
    """The replica with the fewest waiting requests, then the fewest running, ties to the lowest index: vLLM's
    data-parallel load balancer in 0.9.1-0.10.0 (vllm/v1/engine/core_client.py get_core_engine_for_request: the
    least [waiting, running] pair, lists compared in order; read in the 0.9.1, 0.9.2 and 0.10.0 sdists), with the
    engines' counts current (vLLM's come from the coordinator about every 100 ms)."""

    def __repr__(self) -> str:
        return "FewestWaitingRouter()"

    def choose(self, replicas, request):
        def counts(replica) -> tuple[int, int]:
            waiting = replica.scheduler.num_waiting
            return waiting, replica.num_outstanding - waiting

        return min(replicas, key=counts)


class RandomRouter(Router):
    def __init__(self, seed: int):
        self._rng = np.random.default_rng(np.random.SeedSequence([seed, 11]))

    def __repr__(self) -> str:
        return "RandomRouter()"

    def choose(self, replicas, request):
        return replicas[int(self._rng.integers(len(replicas)))]


def make_router(kind: str, seed: int) -> Router:
    if kind == "round_robin":
        return RoundRobinRouter()
    if kind == "least_outstanding":
        return LeastOutstandingRouter()
    if kind == "least_loaded":
        return LeastLoadedRouter()
    if kind == "fewest_waiting":
        return FewestWaitingRouter()
    if kind == "random":
        return RandomRouter(seed)
    raise ValueError(f"unknown router {kind!r}")
