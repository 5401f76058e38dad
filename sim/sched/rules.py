"""What differs between engines' schedulers, as data (`SchedulingRule`) and small decisions over counts.

`ContinuousScheduler` is vLLM V1's policy; an engine preset (sim/config/engines/) gives it another engine's rule
by setting these fields (the scenario's `scheduler:` section names each, and the preset fills them):

| field | vLLM V1 (default) | vLLM V0 | SGLang | TensorRT-LLM | LMDeploy TurboMind 0.1 |
| --- | --- | --- | --- | --- | --- |
| `mixed_batches` | True: decodes and prefill chunks share a step | False without chunked prefill | False (mixed chunks off) | True | True |
| `decode_steps_per_schedule` | 1 | `--num-scheduler-steps` (any step opens a group; a request finished inside it returns at its end) | 1 | 1 | 1 |
| `whole_output_reservation` | False: blocks on demand, preemption | False | False | True (GUARANTEED_NO_EVICT) | False |
| `whole_prompt_admission` | True (vLLM's own to 0.18: False, not the preset's) | True | True | True | True |
| `cuda_graph_batch_sizes` | () | () | () | padded decode batches when given | () |
| `new_token_ratio` | None | None | SGLang's admission reserve | None | None |
| `context_pass` | False | False | False | False | True: a prompt's context decode is its own pass (`context_pass_chunk`) |
| `prefill_context_tokens` | 0 | 0 | 0 | 0 | 0 (0.12+: session_len, `context_fits`) |
| `max_prefill_chunk_tokens` | 0 (`--long-prefill-token-threshold`, 0.8.3+) | 0 | 0 | 0 | 0 |
| `prefill_chunk_cap_when_alone` | True (False from 0.31.0) | True | True | True | True |
| `prefill_chunk_cap_fair_share` | False (`--long-prefill-token-threshold-adaptive`, 0.31+) | False | False | False | False |

Each decision is a numba function here (the design in docs/design.md: one definition, called by the SimPy engine's
scheduler and inside the compiled core's loop, which runs every rule).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.jit import njit

# SGLang's output-length clip when it estimates a running request's future KV (python/sglang/srt/managers/
# schedule_policy.py, CLIP_MAX_NEW_TOKENS, read at sgl-project/sglang@00550cd; default 4096 via
# SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION).
SGLANG_CLIP_MAX_NEW_TOKENS = 4096


@dataclass(frozen=True)
class NewTokenRatio:
    """SGLang's admission reserve: a waiting request is admitted only while the free KV tokens exceed what the
    running requests are expected to still write, min(remaining output, clip) x ratio each, plus the new request's
    prompt and whole remaining output, clipped (`ratio_admits`). The ratio starts at `init`, falls by (init - min) /
    decay_steps per decode step, and returns to `init` when a request is retracted (preempted). Source:
    python/sglang/srt/managers/scheduler.py (init_new_token_ratio = SGLANG_INIT_NEW_TOKEN_RATIO x
    schedule_conservativeness, min_new_token_ratio = min(SGLANG_INIT_NEW_TOKEN_RATIO x
    SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR, 1), new_token_ratio_decay = (init - min) /
    SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS) and schedule_policy.py PrefillAdder (rem_total_tokens), sglang 0.5.x; the
    same rule in 0.3.0 (managers/tp_worker.py, policy_scheduler.py, global_config.py: init 0.7, min 0.1, decay 0.001
    a decode step). The three values are sim/config/engines/sglang.py's (SGLANG_*), from which the sglang preset and the
    scenario's defaults (`scheduler.new_token_ratio`) fill these fields."""

    init: float
    min: float
    decay_steps: int


@dataclass(frozen=True)
class SchedulingRule:
    """The fields of the table in this module's docstring (defaults: vLLM V1)."""

    mixed_batches: bool = True
    decode_steps_per_schedule: int = 1
    whole_output_reservation: bool = False
    cuda_graph_batch_sizes: tuple[int, ...] = ()
    new_token_ratio: NewTokenRatio | None = None
    # TurboMind 0.1 (LMDeploy v0.1.0a1, src/turbomind/models/llama/LlamaBatch.cc InternalThreadEntry: Initialize,
    # ContextDecode, then Generate): an iteration that admits prompts first runs their "context decode", every
    # prompt token but the last, as passes of their own (a prefill-only step: the decodes wait), then one decode
    # pass over every active sequence, in which each new prompt's last token computes its first output token (a
    # mixed step of the decodes and those one-token chunks; no prompt is admitted in it).
    context_pass: bool = False
    # Chunked prefill: a waiting prompt starts only when blocks for all of it are free (vLLM V1 from v0.19.0,
    # SchedulerConfig.scheduler_reserve_full_isl), or when those of the chunk it computes this step are (False: vLLM
    # V1 to v0.18, vllm/v1/core/sched/scheduler.py: `allocate_slots(request, num_new_tokens, ...)` for the chunk
    # alone, read at v0.11.0): its later chunks then take blocks as they come, preempting the last admitted.
    whole_prompt_admission: bool = True
    # LMDeploy TurboMind 0.12+ (src/turbomind/models/llama/context_token_resource.h, read at v0.16.0; the same check
    # as `temp_len` in SequenceManager.cc at v0.12.0-v0.14.0): the prompts that compute more than one token in a
    # step, and those it starts or resumes, hold at most this many tokens of context together, each counted whole
    # (`context_fits`); 0: no such limit.
    prefill_context_tokens: int = 0
    # vLLM V1 from 0.8.3 (vllm/v1/core/sched/scheduler.py, `long_prefill_token_threshold`, read in the sdists of
    # 0.8.0-0.8.5, 0.9.0, 0.10.0, 0.11.0, 0.14.0, 0.20.0, 0.21.0, 0.24.0, 0.26.0 and 0.28.0-0.34.0): a prompt, running
    # or admitted, computes at most this many tokens in a step (0: up to the token budget); from 0.31.0 only while
    # more than one request is running or waiting ("When it is the only request there is nobody to starve"):
    # `prefill_chunk_cap_when_alone` False; and with --long-prefill-token-threshold-adaptive (0.31.0 on) the cap is
    # floored at a fair share of the budget, max_num_batched_tokens // the requests running or waiting:
    # `prefill_chunk_cap_fair_share`. `step_prefill_chunk_cap` and `prefill_chunk_limit` apply them.
    max_prefill_chunk_tokens: int = 0
    prefill_chunk_cap_when_alone: bool = True
    prefill_chunk_cap_fair_share: bool = False

    @property
    def is_default(self) -> bool:
        return self == SchedulingRule()

    @property
    def prefill_only_steps(self) -> bool:
        """A step may hold prefill chunks alone, the decodes waiting (no mixed batches, or a context pass): a
        waiting prompt may then take the next step whatever the token budget, and such a step advances no decode."""
        return not self.mixed_batches or self.context_pass

    def describe(self) -> str:
        parts = []
        if not self.mixed_batches:
            parts.append("prefill-only or decode-only steps")
        if self.decode_steps_per_schedule > 1:
            parts.append(f"{self.decode_steps_per_schedule} decode steps per schedule")
        if self.whole_output_reservation:
            parts.append("whole output reserved at admission")
        if self.cuda_graph_batch_sizes:
            parts.append(f"decode batches padded to {len(self.cuda_graph_batch_sizes)} CUDA-graph sizes")
        if self.new_token_ratio is not None:
            parts.append(f"new-token ratio {self.new_token_ratio.init:g}->{self.new_token_ratio.min:g}")
        if self.context_pass:
            parts.append("a context-decode pass in each iteration that admits prompts")
        if not self.whole_prompt_admission:
            parts.append("a chunked prompt admitted when its first chunk's blocks are free")
        if self.prefill_context_tokens:
            parts.append(f"the prompts prefilling in a step hold at most {self.prefill_context_tokens} tokens of "
                         "context")
        if self.max_prefill_chunk_tokens:
            alone = "" if self.prefill_chunk_cap_when_alone else " while another request runs or waits"
            share = ", or its fair share of the budget" if self.prefill_chunk_cap_fair_share else ""
            parts.append(f"a prompt computes at most {self.max_prefill_chunk_tokens} tokens a step{share}{alone}")
        return ", ".join(parts) or "vLLM V1"

    def graph_sizes(self) -> np.ndarray:
        return np.asarray(sorted(self.cuda_graph_batch_sizes), dtype=np.int64)


@njit(cache=True)
def padded_batch(sorted_sizes, num_seqs):
    """The batch a decode step of `num_seqs` sequences runs as: the smallest captured CUDA-graph size that holds
    it, or `num_seqs` itself beyond the largest (run without a graph)."""
    for size in sorted_sizes:
        if size >= num_seqs:
            return size
    return num_seqs


@njit(cache=True)
def step_prefill_chunk_cap(cap, cap_when_alone, fair_share, num_requests, max_num_batched_tokens):
    """The most tokens one prompt computes in this step (0: no cap), from the rule's `max_prefill_chunk_tokens`
    (`cap`), `prefill_chunk_cap_when_alone` and `prefill_chunk_cap_fair_share`, and `num_requests`, those running or
    waiting as the step is scheduled."""
    if cap <= 0 or (not cap_when_alone and num_requests <= 1):
        return 0
    if fair_share and num_requests > 0 and max_num_batched_tokens // num_requests > cap:
        return max_num_batched_tokens // num_requests
    return cap


@njit(cache=True)
def prefill_chunk_limit(budget, step_cap):
    """The most tokens one prompt computes now: the step's token budget left, or `step_cap`
    (`step_prefill_chunk_cap`, 0: none) where smaller."""
    if 0 < step_cap < budget:
        return step_cap
    return budget


@njit(cache=True)
def context_pass_chunk(remaining_tokens):
    """The tokens a request admitted under `context_pass` computes in the context pass: all it has left but the
    last, which its decode pass computes (TurboMind 0.1 LlamaBatch.cc ContextDecode: `h_input_length_buf_[i] =
    missing - 1`, "skip last input token (will process with decoder later)"). A request with one token left has
    no context decode there; here it computes that token in the context pass (an approximation for 1-token
    prompts only)."""
    return remaining_tokens - 1 if remaining_tokens > 1 else remaining_tokens


@njit(cache=True)
def context_charge(context_tokens, chunk_tokens, starts):
    """The context a prompt charges against `prefill_context_tokens` in a step: all its tokens (prompt and output
    so far) when it computes more than one or starts (or resumes) in this step, else none (TurboMind's
    ContextTokenResource TempLen: `input_len > 1 || !s.is_active`)."""
    return context_tokens if chunk_tokens > 1 or starts else 0


@njit(cache=True)
def context_fits(used_tokens, charge_tokens, limit_tokens):
    """Whether one more prompt's context charge fits beside the step's others under `prefill_context_tokens` (0:
    no limit). A prompt that is the step's first always fits: TurboMind's session_len, the limit, already bounds
    any one sequence, and a request above it would otherwise wait forever."""
    return limit_tokens <= 0 or used_tokens == 0 or used_tokens + charge_tokens <= limit_tokens


@njit(cache=True)
def group_steps_left_after(left, num_steps, group_steps):
    """Decode steps left in the current group after `num_steps` more decode-only steps, the group having `left`
    (vLLM V0 multi-step: a decode-only step at a group's end opens the next group of `group_steps`, so a run of
    decode steps keeps the groups' phase)."""
    if num_steps <= left:
        return left - num_steps
    return group_steps - 1 - (num_steps - left - 1) % group_steps


@njit(cache=True)
def reservation_fits(reserved_blocks, need_blocks, total_blocks):
    """GUARANTEED_NO_EVICT (TensorRT-LLM, cpp/tensorrt_llm/batch_manager/capacitySchedule.cpp): a request starts
    only if the blocks of its whole sequence, prompt and output, fit beside every running request's whole
    sequence, so no running request ever waits for a block."""
    return reserved_blocks + need_blocks <= total_blocks


@njit(cache=True)
def new_token_ratio(init, minimum, decay_steps, steps_since_reset):
    """SGLang's ratio after `steps_since_reset` decode steps without a retraction."""
    ratio = init - (init - minimum) / decay_steps * steps_since_reset
    return ratio if ratio > minimum else minimum


@njit(cache=True, inline="always")
def clipped_output(output_tokens, clip):
    """The output tokens SGLang's admission counts for one request: its remaining output, at most `clip`
    (CLIP_MAX_NEW_TOKENS_ESTIMATION, SGLANG_CLIP_MAX_NEW_TOKENS here)."""
    return output_tokens if output_tokens < clip else clip


@njit(cache=True)
def clipped_outputs_sum(remaining_output_tokens, clip):
    """`clipped_output` of each request's remaining output tokens (an int64 array), summed: the running requests'
    future tokens SGLang's admission reserves."""
    total = 0
    for tokens in remaining_output_tokens:
        total += clipped_output(tokens, clip)
    return total


@njit(cache=True)
def running_future_bound(num_running, most_output_tokens, clip):
    """An upper bound on `clipped_outputs_sum` over `num_running` requests none of which may write more than
    `most_output_tokens`: `ratio_admits` with it admitting means `ratio_admits` with the sum admits too (it only
    falls as the running tokens rise, and rounding keeps that order), so a core may count the sum only when the bound
    refuses."""
    return float(num_running * clipped_output(most_output_tokens, clip))


@njit(cache=True)
def ratio_admits(free_tokens, running_remaining_tokens, admitted_tokens, prompt_tokens, output_tokens, ratio, clip):
    """SGLang's PrefillAdder.add_one_req check for one more request: the free KV tokens, less the running requests'
    expected future tokens (`running_remaining_tokens`, each already clipped, times the ratio) and what this step
    admitted before it beyond the KV it already took (`admitted_tokens`: `ratio_admitted_tokens`), must exceed its
    prompt plus its whole remaining output, clipped (`total_tokens >= rem_total_tokens` refuses it). The ratio
    discounts only the running requests, never the one being admitted (sglang 0.3.0 policy_scheduler.py and 0.5.5
    schedule_policy.py alike)."""
    return free_tokens - running_remaining_tokens * ratio - admitted_tokens > prompt_tokens + clipped_output(
        output_tokens, clip)


@njit(cache=True)
def ratio_admitted_tokens(prompt_tokens, chunk_tokens, output_tokens, clip):
    """What an admitted request adds to SGLang's offset beyond the KV its chunk took from the free pool: its whole
    remaining output, clipped, when its prompt is computed whole in this step; nothing when its prompt was cut to a
    chunk (`_prefill_one_req(prefix_len, trunc_len, 0)`: the output is counted when the last chunk is added)."""
    if chunk_tokens < prompt_tokens:
        return 0.0
    return float(clipped_output(output_tokens, clip))
