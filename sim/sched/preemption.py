"""Preemption, as two separate choices: which running request gives up its KV when memory runs out
(the victim policy, here) and what happens to that KV (the mode: recompute, or swap to host memory;
sim/sched/swap_space.py).

Both are configured under `scheduler.preemption` (`victim`, `mode`, `swap_space_bytes`). A victim
policy is a function of the candidates — running requests not yet scheduled in this step, most
recently admitted first, their counters synced — and the KV manager. To add one, write the function,
add it to `VICTIM_POLICIES` (the scenario schema takes its allowed names from there) and test it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

from sim.core.request import Request
from sim.kv.base import KVManager

PreemptionMode = Literal["recompute", "swap"]


def last_admitted(candidates: Iterable[Request], kv: KVManager) -> Request:
    """The most recently admitted (vLLM V1's policy, and the default): the least work done under the
    current admission, and the earlier requests keep their place."""
    return next(iter(candidates))


def fewest_computed_tokens(candidates: Iterable[Request], kv: KVManager) -> Request:
    """The one with the fewest computed tokens: the least to prefill again after a recompute.
    Ties: the most recently admitted."""
    return min(candidates, key=lambda r: r.num_computed_tokens)


def most_kv_blocks(candidates: Iterable[Request], kv: KVManager) -> Request:
    """The one holding the most KV (blocks, or the largest contiguous region): the most memory back
    from one preemption (a shared block counts for each holder). Ties: the most recently admitted."""
    return max(candidates, key=lambda r: kv.held_slots(r.request_id))


VictimPolicy = Callable[[Iterable[Request], KVManager], Request]
VICTIM_POLICIES: dict[str, VictimPolicy] = {
    "last_admitted": last_admitted,
    "fewest_computed_tokens": fewest_computed_tokens,
    "most_kv_blocks": most_kv_blocks,
}

