"""What one engine step does, as the scheduler decided it, and what the cost model prices."""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.jit import njit


@njit(cache=True, inline="always")
def linear_tokens(num_prefill_tokens, num_decode_seqs, query_tokens, num_padding_tokens):
    """Tokens through the model's linear layers in a step: the prefill chunks', each decoding sequence's query
    tokens (γ+1 when verifying drafts; CUDA-graph padding sequences among them) and a lockstep rank's padding tokens
    (which attend nothing). The one definition: `StepPlan.num_tokens` and every compiled pricer call it."""
    return num_prefill_tokens + num_decode_seqs * query_tokens + num_padding_tokens


# The SimPy engine's steps call the plain function: from Python, numba's dispatcher costs ~4x the sum it wraps
_linear_tokens_python = getattr(linear_tokens, "py_func", linear_tokens)


@dataclass(slots=True)
class StepPlan:
    """One engine iteration.

    Prefill (and recompute) chunks are listed per request; decodes are counted in bulk, because a
    batch of hundreds of decoding requests each computing one token is what makes a per-request
    list the simulator's hot loop.
    """

    prefill_request_ids: list[int] = field(default_factory=list)  # requests computing prompt/recompute tokens
    prefill_chunk_tokens: list[int] = field(default_factory=list)  # tokens each of them computes this step
    prefill_context_tokens: list[int] = field(default_factory=list)  # tokens already in its KV before the chunk
    num_decode_seqs: int = 0  # decoding sequences (one token each, or a speculative verification), padding included
    decode_context_tokens: int = 0  # KV tokens those decodes attend to, their new tokens included
    decode_query_tokens: int = 1  # tokens each decoding sequence computes: 1, or γ+1 when verifying drafts
    num_draft_tokens: int = 0  # γ: draft-model decode steps each decoding sequence runs before verification
    swap_out_tokens: int = 0  # KV tokens copied GPU -> host for preempted requests (swap preemption)
    swap_in_tokens: int = 0  # KV tokens copied host -> GPU for resumed requests
    # Padding sequences, in num_decode_seqs: static batching's finished sequences that still occupy a slot and
    # compute, or a decode batch's CUDA-graph padding (scheduler.cuda_graph_batch_sizes: each attends one token)
    num_padding_seqs: int = 0
    # A lockstep rank's padding to its group's most tokens (sim/core/lockstep.py): tokens through the linear layers
    # and elementwise ops (and their all-reduces) only, as vLLM runs them: no attention, no sampled row
    num_padding_tokens: int = 0
    # The tokens through the routed experts where they are not the step's own (0: the step's own): a lockstep rank
    # of a mixture of experts runs its whole group's tokens through the experts it holds (sim/core/lockstep.py)
    num_expert_tokens: int = 0
    num_sampled_seqs: int = 0  # sequences that sample a token at the end of the step (LM head rows)
    new_request_ids: list[int] = field(default_factory=list)  # admitted this step (first time or after preemption)
    preempted_request_ids: list[int] = field(default_factory=list)  # preempted to make room this step

    @property
    def num_prefill_tokens(self) -> int:
        return sum(self.prefill_chunk_tokens)

    @property
    def num_tokens(self) -> int:
        """Tokens through the model's linear layers this step."""
        return _linear_tokens_python(self.num_prefill_tokens, self.num_decode_seqs, self.decode_query_tokens,
                                     self.num_padding_tokens)

    @property
    def num_seqs(self) -> int:
        return len(self.prefill_request_ids) + self.num_decode_seqs


@dataclass(slots=True)
class StepOutcome:
    """What applying a step changed."""

    finished: list = field(default_factory=list)  # Requests that left the engine
    num_output_tokens: int = 0  # real tokens sampled (padding excluded)


# --- runs of decode-only steps (issue 15, `run.fast_decode`) ------------------------------------------------
# A run is `num_steps` consecutive steps of `num_seqs` single-token decodes, every one sampled, the first
# attending `context_tokens` KV tokens in all (new ones included), each next one `num_seqs` more. Cost models
# with a closed form (`decode_step_costs`) compute what does not depend on the context once and repeat only
# the context-dependent floating-point operations, in `step_cost`'s order, so their costs are bit-identical to
# pricing each step alone; the rest are priced step by step. Here, beside the plan, because both the engine
# and the cost-model wrappers price runs, and cost models already import this module.

def plain_decode_plan(num_seqs: int, context_tokens: int) -> StepPlan:
    """The step a decode run repeats: `num_seqs` single-token decodes attending `context_tokens` in all."""
    return StepPlan(num_decode_seqs=num_seqs, decode_context_tokens=context_tokens, num_sampled_seqs=num_seqs)


def decode_step_costs(cost_model, num_seqs: int, context_tokens: int, num_steps: int) -> list:
    """`cost_model`'s closed form where it has one, else `step_cost` of each step of the run."""
    fast = getattr(cost_model, "decode_step_costs", None)
    if fast is not None:
        return fast(num_seqs, context_tokens, num_steps)
    return [cost_model.step_cost(plain_decode_plan(num_seqs, context_tokens + k * num_seqs)) for k in range(num_steps)]
