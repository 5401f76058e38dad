"""A request as the scheduler sees it: token counters that catch up with each other, and a status."""

from __future__ import annotations

import enum
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    REJECTED = "rejected"


class Request:
    """One inference request.

    `num_computed_tokens` catches up with `num_tokens` (prompt plus sampled output); there is no
    separate prefill phase. When they meet, the step samples one token. While a request decodes
    steadily its counters are advanced in bulk by the scheduler's decode tracker (see sim/decode.py),
    so they may lag until the tracker syncs them.
    """

    __slots__ = (
        "request_id", "arrival_s", "num_prompt_tokens", "max_output_tokens", "num_output_tokens",
        "num_computed_tokens", "num_preemptions", "status", "replica", "first_scheduled_s",
        "first_token_s", "last_token_s", "finish_s", "reject_reason", "decode_anchor", "prefix_ids",
        "prefix_unit_tokens", "parent_id",
    )

    def __init__(self, request_id: int, arrival_s: float, num_prompt_tokens: int, max_output_tokens: int, *,
                 prefix_ids: np.ndarray | None = None, prefix_unit_tokens: int = 0, parent_id: int = -1):
        self.request_id = request_id
        self.parent_id = parent_id  # >= 0: an extra sequence (parallel sample or beam) of that request
        self.arrival_s = arrival_s
        self.num_prompt_tokens = num_prompt_tokens
        self.max_output_tokens = max_output_tokens
        self.num_output_tokens = 0
        self.num_computed_tokens = 0
        self.num_preemptions = 0
        self.status = RequestStatus.WAITING
        self.replica = -1
        self.first_scheduled_s = math.nan
        self.first_token_s = math.nan
        self.last_token_s = math.nan
        self.finish_s = math.nan
        self.reject_reason = ""
        self.decode_anchor = -1  # decode-tracker clock at which the counters were last exact; -1: not tracked
        # Prompt content, for prefix caching: prompt tokens [i*unit, (i+1)*unit) have content id
        # prefix_ids[i] (int64); equal id sequences up to a point = equal prompts up to there. The last id
        # may cover a partial unit. Tokens not covered by ids, and generated tokens, are unique to the request.
        self.prefix_ids = prefix_ids
        self.prefix_unit_tokens = prefix_unit_tokens  # tokens per id (Mooncake: 512); 0 without ids

    @property
    def num_tokens(self) -> int:
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def num_final_kv_tokens(self) -> int:
        """KV slots the request holds when it finishes: the last sampled token is never fed back."""
        return self.num_prompt_tokens + self.max_output_tokens - 1

    def __repr__(self) -> str:
        return (f"Request({self.request_id}, prompt={self.num_prompt_tokens}, "
                f"out={self.num_output_tokens}/{self.max_output_tokens}, "
                f"computed={self.num_computed_tokens}, {self.status.value})")
