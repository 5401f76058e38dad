"""Where a preempted request's KV goes (the preemption mode, `scheduler.preemption.mode`): to host memory
while it has room (swap), else nowhere (recompute: its prompt and generated tokens are prefilled again).

The scheduler asks `evict` for every victim and `swap_in` for every admission; `NoSwapSpace` (recompute mode)
answers without bookkeeping. The micro-batch slots of a pipelined replica share one (sim/sched/pipeline.py).
"""

from __future__ import annotations

from sim.core.request import Request


class SwapSpace:
    """Host memory for preempted requests' KV, in tokens. A victim that fits keeps its computed tokens and
    is copied back when it is admitted again; one that does not is recomputed."""

    def __init__(self, capacity_tokens: int):
        self.capacity_tokens = capacity_tokens
        self.free_tokens = capacity_tokens
        self.swapped: dict[int, int] = {}  # request id -> KV tokens held in host memory

    def evict(self, victim: Request) -> int:
        """The victim's KV (its blocks already freed) goes to host memory: the tokens copied, its computed
        tokens kept. Without room, 0: its computed tokens restart at 0, to be recomputed."""
        tokens = victim.num_computed_tokens
        if not 0 < tokens <= self.free_tokens:
            victim.num_computed_tokens = 0
            return 0
        self.swapped[victim.request_id] = tokens
        self.free_tokens -= tokens
        return tokens

    def swap_in(self, request_id: int) -> int:
        """Tokens copied back for a re-admitted request (0 if it was not swapped out)."""
        tokens = self.swapped.pop(request_id, 0)
        self.free_tokens += tokens
        return tokens


class NoSwapSpace:
    """Recompute mode: every victim's KV is dropped and computed again."""

    def __init__(self):
        self.capacity_tokens = 0
        self.free_tokens = 0

    def evict(self, victim: Request) -> int:
        victim.num_computed_tokens = 0  # prompt and generated tokens are prefilled again
        return 0

    def swap_in(self, request_id: int) -> int:
        return 0


def swap_space(capacity_tokens: int) -> SwapSpace | NoSwapSpace:
    """The host space of `capacity_tokens` (0: recompute mode)."""
    return SwapSpace(capacity_tokens) if capacity_tokens else NoSwapSpace()
