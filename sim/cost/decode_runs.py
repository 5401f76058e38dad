"""Runs of decode-only steps for any cost model (issue 15, `run.fast_decode`).

A run is `num_steps` consecutive steps of `num_seqs` single-token decodes, every one sampled, the first
attending `context_tokens` KV tokens in all (new ones included), each next one `num_seqs` more. Cost
models with a closed form (`decode_step_costs`) compute what does not depend on the context once and
repeat only the context-dependent floating-point operations, in `step_cost`'s order, so their costs are
bit-identical to pricing each step alone; the rest are priced step by step.
"""

from __future__ import annotations

from sim.core.step_plan import StepPlan


def plain_decode_plan(num_seqs: int, context_tokens: int) -> StepPlan:
    """The step a decode run repeats: `num_seqs` single-token decodes attending `context_tokens` in all."""
    return StepPlan(num_decode_seqs=num_seqs, decode_context_tokens=context_tokens, num_sampled_seqs=num_seqs)


def decode_step_costs(cost_model, num_seqs: int, context_tokens: int, num_steps: int) -> list:
    """`cost_model`'s closed form where it has one, else `step_cost` of each step of the run."""
    fast = getattr(cost_model, "decode_step_costs", None)
    if fast is not None:
        return fast(num_seqs, context_tokens, num_steps)
    return [cost_model.step_cost(plain_decode_plan(num_seqs, context_tokens + k * num_seqs)) for k in range(num_steps)]
