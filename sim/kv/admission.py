"""Whether a waiting request may start this step: the KV admission test, written once for both engines.

`PagedKVManager.admit` (the SimPy engine) and the compiled core's `_schedule_prefills` call it with the numbers
each has at hand; the block allocation that follows is each engine's own.
"""

from __future__ import annotations

from sim.jit import njit


@njit(cache=True)
def admission_fits(chunked, whole_prompt, chunk_tokens, step_tokens, rest_blocks, free_blocks):
    """Whether a request may start with `chunk_tokens` computed this step (the budget's cut of the `step_tokens`
    the scheduling rule wants from it this step), before the chunk's own blocks are allocated.

    Unchunked, the chunk must be all of `step_tokens`: a prompt is never split. Chunked with whole-prompt admission
    (vLLM V1's `scheduler_reserve_full_isl`, from v0.19.0), the blocks of all its remaining tokens (`rest_blocks`,
    cache hits counted as blocks to allocate) must be free now, so chunked prefills cannot over-admit and then
    preempt each other; without it (vLLM V1 to v0.18, `scheduler.admission: first_chunk`), only the chunk's
    allocation decides."""
    if not chunked:
        return chunk_tokens == step_tokens
    return not whole_prompt or rest_blocks <= free_blocks
