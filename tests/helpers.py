"""Small builders for unit tests of schedulers and KV managers (no event loop)."""

from __future__ import annotations

import itertools

from sim.core.request import Request

_ids = itertools.count()


def make_request(prompt: int, output: int, arrival_s: float = 0.0, request_id: int | None = None) -> Request:
    return Request(next(_ids) if request_id is None else request_id, arrival_s, prompt, output)
