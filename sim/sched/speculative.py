"""Speculative decoding: each step a request drafts γ tokens and the target verifies them in one pass.

Each drafted token is accepted with probability α until the first rejection, then the target adds
one token of its own, so a step yields between 1 and γ+1 tokens (Leviathan et al., ICML 2023). The
expected yield per target pass is (1 − α^(γ+1)) / (1 − α). A tree of drafts (SGLang's EAGLE with topk above 1)
verifies more tokens a request than γ+1 (`num_verified_tokens`) and accepts one path of at most γ: α is then the
acceptance along that path, which the tree raises.

Accepted counts differ per request, so the bulk step clock of `DecodeTracker` does not apply; this
batch keeps its members' counters in numpy arrays (compact, swap-remove) and draws every member's
acceptances in one vectorized call per step. It answers the scheduler through the same interface,
`sim.sched.decode.DecodeBatch`.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from sim.core.request import Request
from sim.kv.base import KVManager

Ragged = Literal["per_request", "rollback_to_min"]
DEFAULT_SPECULATIVE_TOKENS = 4  # γ where a scenario's speculation section does not give it
# The most tokens a draft may propose per step. Drafts propose a handful (vLLM's examples: 5; the dashboard
# offers 1-32), and past 64 more gain nothing: the tokens a step yields, (1 - a^(g+1)) / (1 - a) (Leviathan et
# al. 2023), are within 4% of their limit 1 / (1 - a) at g = 64 even for an acceptance a = 0.95. Each step also
# draws (sequences x g) acceptances and verifies g + 1 tokens per sequence, so 100,000 is a typo that slows a
# run to a crawl.
MAX_SPECULATIVE_TOKENS = 64


def tree_candidate_tokens(gamma: int, width: int) -> int:
    """The most tokens a tree of drafts can verify: its root and every candidate, `width` after the first draft step
    and `width` x `width` after each later one (SGLang's eagle_utils.py organize_draft_results picks the verified ones
    among them); a chain (width 1): γ + 1."""
    return 1 + width + (gamma - 1) * width * width


def tokens_per_verification(alpha: float, gamma: int) -> float:
    """The mean tokens a verification yields, its own token included: (1 − α^(γ+1)) / (1 − α), summed as
    1 + α + ... + α^γ (no cancellation near α = 1, where it is γ + 1)."""
    return float(sum(alpha ** k for k in range(gamma + 1)))


def alpha_for_tokens(tokens: float, gamma: int) -> float:
    """The acceptance α whose γ drafts yield `tokens` a verification on average (what SGLang logs as its accept
    length and vLLM as its mean acceptance length), 1 <= tokens <= γ + 1: the yield rises with α, so bisection."""
    if not 1.0 <= tokens <= gamma + 1:
        raise ValueError(f"{tokens} tokens a verification is outside 1 to {gamma + 1} with {gamma} drafts")
    low, high = 0.0, 1.0
    for _ in range(100):  # to the float's resolution; a fixed count keeps the answer the same everywhere
        mid = (low + high) / 2
        if tokens_per_verification(mid, gamma) < tokens:
            low = mid
        else:
            high = mid
    return (low + high) / 2


class SpeculativeDecodeBatch:
    def __init__(self, *, num_speculative_tokens: int, alpha_sampler, ragged: Ragged, rng: np.random.Generator,
                 kv: KVManager, num_verified_tokens: int | None = None):
        self.gamma = num_speculative_tokens
        # the verification pass: last token + γ drafts, or a tree's chosen nodes (each accepted path at most γ long)
        self.decode_query_tokens = num_speculative_tokens + 1 if num_verified_tokens is None else num_verified_tokens
        self.num_draft_tokens = num_speculative_tokens
        self.alpha_sampler = alpha_sampler  # rng -> acceptance rate of one request
        self.ragged = ragged
        self.rng = rng
        self.kv = kv  # blocks come from here and rejected drafts' tail blocks go back (paged)
        self.block_size = kv.block_size  # None: no blocks to manage
        self.members: dict[int, Request] = {}
        self._slot: dict[int, int] = {}
        cap = 64
        self._rid = np.zeros(cap, dtype=np.int64)
        self._computed = np.zeros(cap, dtype=np.int64)
        self._output = np.zeros(cap, dtype=np.int64)
        self._max_output = np.zeros(cap, dtype=np.int64)
        self._alpha = np.zeros(cap)
        self._blocks = np.zeros(cap, dtype=np.int64)  # KV blocks each member holds (paged)
        self.num_accepted_drafts = 0
        self.num_drafted = 0
        self.clock = 0  # verification steps applied so far

    def __len__(self) -> int:
        return len(self.members)

    @property
    def token_sum(self) -> int:
        return int(self._computed[:len(self.members)].sum())

    def _grow(self) -> None:
        for name in ("_rid", "_computed", "_output", "_max_output", "_alpha", "_blocks"):
            arr = getattr(self, name)
            setattr(self, name, np.concatenate([arr, np.zeros_like(arr)]))

    def add(self, request: Request) -> None:
        n = len(self.members)
        if n == len(self._rid):
            self._grow()
        rid = request.request_id
        self.members[rid] = request
        self._slot[rid] = n
        self._rid[n] = rid
        self._computed[n] = request.num_computed_tokens
        self._output[n] = request.num_output_tokens
        self._max_output[n] = request.max_output_tokens
        self._alpha[n] = self.alpha_sampler(self.rng)
        self._blocks[n] = self.kv.held_slots(rid) // self.block_size if self.block_size else 0

    def sync(self, request: Request) -> None:
        slot = self._slot[request.request_id]
        request.num_computed_tokens = int(self._computed[slot])
        request.num_output_tokens = int(self._output[slot])

    def live_output_tokens(self, request: Request) -> int:
        """A request's output tokens now: a member's from the batch's counters, without syncing it."""
        slot = self._slot.get(request.request_id)
        return request.num_output_tokens if slot is None else int(self._output[slot])

    def remaining_outputs(self, running: dict[int, Request]) -> np.ndarray:
        """The output tokens each running request has still to produce, as int64: the members' from the batch's
        counters in one array operation (every member is running), the others' (prefilling) from their own."""
        n = len(self.members)
        members = self._max_output[:n] - self._output[:n]
        if len(running) == n:
            return members
        slot = self._slot
        others = [request.max_output_tokens - request.num_output_tokens for rid, request in running.items()
                  if rid not in slot]
        return np.concatenate([members, np.array(others, dtype=np.int64)])

    def remove(self, request: Request) -> None:
        self.sync(request)
        rid = request.request_id
        slot = self._slot.pop(rid)
        del self.members[rid]
        last = len(self.members)
        if slot != last:
            moved = int(self._rid[last])
            for arr in (self._rid, self._computed, self._output, self._max_output, self._alpha, self._blocks):
                arr[slot] = arr[last]
            self._slot[moved] = slot

    # --- paged KV: room for the tokens written during verification (γ+1, or a tree's chosen nodes) ----------
    def _new_blocks(self) -> np.ndarray:
        n = len(self.members)
        need = -(-(self._computed[:n] + self.decode_query_tokens) // self.block_size) - self._blocks[:n]
        return np.maximum(need, 0)

    def num_new_blocks_needed(self) -> int:
        return int(self._new_blocks().sum()) if self.block_size and self.members else 0

    def allocate_new_blocks(self) -> None:
        if not self.block_size:
            return
        need = self._new_blocks()
        slots = np.nonzero(need)[0]
        self.kv.append_blocks_each(self._rid[slots].tolist(), need[slots].tolist())
        self._blocks[:len(need)] += need

    # --- one step -------------------------------------------------------------------------------
    def advance(self) -> tuple[list[Request], int]:
        """Apply a verification step; returns (finished requests, tokens generated)."""
        n = len(self.members)
        if not n:
            return [], 0
        self.clock += 1
        accepted_drafts = np.cumprod(self.rng.random((n, self.gamma)) < self._alpha[:n, None], axis=1).sum(axis=1)
        new_tokens = accepted_drafts + 1
        if self.ragged == "rollback_to_min":
            new_tokens[:] = new_tokens.min()
        remaining = self._max_output[:n] - self._output[:n]
        new_tokens = np.minimum(new_tokens, remaining)
        self.num_drafted += n * self.gamma
        self.num_accepted_drafts += int(np.minimum(accepted_drafts, new_tokens - 1).sum())
        self._computed[:n] += new_tokens
        self._output[:n] += new_tokens
        if self.block_size:
            # Rejected drafts' KV slots are released: keep only the blocks the accepted tokens fill.
            excess = self._blocks[:n] - (-(-self._computed[:n] // self.block_size))
            slots = np.nonzero(excess > 0)[0]
            self.kv.release_tail_blocks_each(self._rid[slots].tolist(), excess[slots].tolist())
            self._blocks[:n] -= np.maximum(excess, 0)
        finished = [self.members[int(rid)] for rid in self._rid[:n][self._output[:n] >= self._max_output[:n]]]
        for request in finished:
            self.remove(request)
        return finished, int(new_tokens.sum())
