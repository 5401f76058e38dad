"""A step plan as the arguments every compiled pricer takes (`roofline_kernel`, `steps_kernel`, `measured_kernel`).

The pricers take a step as numbers and two arrays, not a `StepPlan` (numba cannot read a Python object): the
prefill tokens, each prefill chunk and its context, the chunk count, the decoding sequences, the context they
attend, the sampled rows, the query tokens of each decoding sequence (γ+1 when verifying drafts), the padding
tokens (through the linear layers only: a lockstep rank's, `StepPlan.num_padding_tokens`), the KV tokens swapped
in or out, and the tokens through the routed experts where they are not the step's own (0: the step's own; a
lockstep rank of a mixture of experts: its group's, `StepPlan.num_expert_tokens`).
The compiled core builds the same numbers from its own arrays.
"""

from __future__ import annotations

import numpy as np

from sim.core.step_plan import StepPlan

NO_CHUNKS = np.zeros(0, dtype=np.int64)


def step_args(plan: StepPlan) -> tuple:
    chunks = plan.prefill_chunk_tokens
    if chunks:
        return (sum(chunks), np.array(chunks, dtype=np.int64),
                np.array(plan.prefill_context_tokens, dtype=np.int64), len(chunks), plan.num_decode_seqs,
                plan.decode_context_tokens, plan.num_sampled_seqs, plan.decode_query_tokens, plan.num_padding_tokens,
                plan.swap_in_tokens + plan.swap_out_tokens, plan.num_expert_tokens)
    return (0, NO_CHUNKS, NO_CHUNKS, 0, plan.num_decode_seqs, plan.decode_context_tokens, plan.num_sampled_seqs,
            plan.decode_query_tokens, plan.num_padding_tokens, plan.swap_in_tokens + plan.swap_out_tokens,
            plan.num_expert_tokens)
