"""The scenario schema: every section of a scenario file as a strict pydantic model.

Unknown keys are errors everywhere: a typo must never be silently ignored. What follows from a
validated scenario and the catalogs (KV capacity, token budget, profile) is `sim.config.deployment`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from sim.config.engines import (
    SGLANG_INIT_NEW_TOKEN_RATIO,
    SGLANG_MIN_NEW_TOKEN_RATIO,
    SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR,
    SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS,
)
from sim.config.words import allowed_words, annotation_members, model_class, shown
from sim.errors import ConfigError
from sim.model.catalog import get_model, kernels_as_problem
from sim.model.hf_config import read_model_ref
from sim.model.interconnects import ALL_REDUCES, CUSTOM_ALL_REDUCE, INTERCONNECTS
from sim.model.memory import (FP8_COMPUTE_DEFAULT, LOGIT_BYTES, MOE_KERNELS, WEIGHT_DTYPES, WINDOW_MEMORY,
                              WINDOW_POOL_RATIO)
from sim.model.specs import EXCHANGES, MAX_MODEL_DIM, GPUSpec, ModelSpec
from sim.sched.preemption import VICTIM_POLICIES
from sim.sched.speculative import (DEFAULT_SPECULATIVE_TOKENS, MAX_SPECULATIVE_TOKENS, alpha_for_tokens,
                                   tree_candidate_tokens)
from sim.workload.arrivals import MAX_RATE_PER_S
from sim.workload.generate import MAX_NUM_REQUESTS, TOO_LONG_RULES, WorkloadSpec, check_run_size

VictimName = Literal[tuple(VICTIM_POLICIES)]  # the names in sim.sched.preemption


def _walk(dotted: str):
    """(key, the section models that may hold it, its field or None) along a dotted scenario key, from the
    Scenario down; it stops after the first key that no model there has."""
    annotation: Any = Scenario
    for key in dotted.split("."):
        models = [m for m in map(model_class, annotation_members(annotation)) if m is not None]
        field = next((m.model_fields[key] for m in models if key in m.model_fields), None)
        yield key, models, field
        if field is None:
            return
        annotation = field.annotation


def scenario_key_problem(dotted: str) -> str | None:
    """One line when the dotted scenario key (a --grid axis) is not a key of the schema, or None when it is, or may be:
    below a free-form value (a mapping, an engine's flags) or a field whose raw value a validator reads first (model:
    {hf_config: ...}) anything goes, and the whole scenario's validation says the rest."""
    path: list[str] = []
    for key, models, field in _walk(dotted):
        if not models or any(m.model_config.get("extra") != "forbid" for m in models):
            return None
        if any(key in d.info.fields and d.info.mode == "before"
               for m in models for d in m.__pydantic_decorators__.field_validators.values()):
            return None
        path.append(key)
        if field is None:
            allowed = list(dict.fromkeys(k for m in models for k in m.model_fields))
            return f"{'.'.join(path)}: unknown key; allowed: {', '.join(allowed)}"
    return None


def field_value_problem(target: str, value: Any, shown_as: str) -> str | None:
    """One line when `value` is not allowed in the scenario field `target` (dotted: "scheduler.max_num_seqs"), naming
    the field as `shown_as` (the key the user wrote: the engine flag that sets it), or None when it is allowed. Only
    the field's own type and bounds are checked; what involves other fields is the whole scenario's validation."""
    *_, (_, _, field) = _walk(target)
    if field is None:
        return None
    try:
        TypeAdapter(Annotated[field.annotation, field]).validate_python(value)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        allowed = allowed_words(first, field.annotation)
        return (f"{shown_as}: {shown(value)} is not allowed; allowed: {allowed}" if allowed
                else f"{shown_as}: {shown(value)} is invalid: {first['msg']}")
    return None


class ConfigDeprecationWarning(FutureWarning):
    """A scenario key still accepted under its old name (shown by default, unlike DeprecationWarning)."""


def literal_choices(model: type[BaseModel], field: str) -> tuple:
    """The values a Literal field allows, in the schema's order: `literal_choices(KVCacheSpec, "layout")`.

    Forms offer exactly these, so a value added to the schema reaches every choice list.
    """
    values = tuple(v for member in annotation_members(model.model_fields[field].annotation) if get_origin(member) is Literal
                   for v in get_args(member))
    if not values:
        raise TypeError(f"{model.__name__}.{field} is not a Literal field")
    return values


def union_kinds(union: Any) -> tuple[str, ...]:
    """The `kind` of each member of a discriminated union (`workload.arrival`, `workload.lengths`...)."""
    return tuple(literal_choices(member, "kind")[0] for member in annotation_members(union))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # inf and nan are never a setting


class LinkSpec(_Strict):
    """An interconnect not in the catalog (sim/model/interconnects.py)."""

    bandwidth_bytes_per_s: float = Field(gt=0, description="per GPU, per direction")
    latency_s: float = Field(0.0, ge=0, description="fixed start-up time of one transfer")


# The most replicas (or GPUs per replica) a deployment may name: each replica is an engine process with its own
# scheduler and KV pool in the simulator, and no serving deployment that one planner sizes comes near 1,024
# replicas of a model (a huge number here would only exhaust memory building them).
MAX_REPLICAS = 1024
MAX_GPUS_PER_REPLICA = 1024
# Seeds a plan repeats its recommendation with: each is a full simulation of the chosen deployment; a spread
# over 100 seeds is as precise as a capacity plan needs, and more only makes the plan slower.
MAX_PLAN_SEEDS = 100


def _inline_kernels_as(gpu):
    """An inline GPU's `kernels_as` must name a catalog GPU (a name is checked where it is resolved)."""
    problem = kernels_as_problem(gpu) if isinstance(gpu, GPUSpec) else None
    if problem:
        raise ValueError(problem)
    return gpu


class PoolSpec(_Strict):
    """One pool of a disaggregated deployment; an absent field takes the top-level hardware value."""

    gpu: str | GPUSpec | None = Field(None, description="catalog GPU name or inline GPU; default: hardware.gpu")
    _gpu_kernels_as = field_validator("gpu")(_inline_kernels_as)
    tensor_parallel: int | None = Field(None, ge=1, le=MAX_GPUS_PER_REPLICA, description="default: hardware.tensor_parallel")
    expert_parallel: int | None = Field(None, ge=1, le=MAX_GPUS_PER_REPLICA,
                                        description="default: hardware.expert_parallel")
    num_replicas: int | None = Field(None, ge=1, le=MAX_REPLICAS, description="default: hardware.num_replicas")
    kv_capacity_tokens: int | None = Field(None, ge=1, description="pin this pool's KV capacity per replica "
                                           "(tokens); default: kv_cache.capacity_tokens, else the memory arithmetic")


class DisaggregationSpec(_Strict):
    """Prefill and decode on separate pools (DistServe, Splitwise): a request prefills on a prefill replica,
    its KV cache crosses `link` to a decode replica, and it decodes there (sim/core/disaggregated.py)."""

    prefill: PoolSpec = PoolSpec()
    decode: PoolSpec = PoolSpec()
    link: str | LinkSpec = Field("nvlink4", description="catalog interconnect (nvlink3, nvlink4, pcie-gen4, "
                                 "pcie-gen5, infiniband-hdr, infiniband-ndr, ethernet-100g, ethernet-400g) or "
                                 "{bandwidth_bytes_per_s, latency_s}")
    overlap: Literal["none", "layerwise"] = Field(
        "none", description="none: the KV is sent after the prefill ends; layerwise: each layer's KV is sent as it "
        "is computed, so mostly the last layer's share is left after the prefill")

    @field_validator("link")
    @classmethod
    def _known_link(cls, link):
        if isinstance(link, str) and link.lower().replace("_", "-") not in INTERCONNECTS:
            raise ValueError(f"unknown interconnect {link!r}; allowed: {', '.join(INTERCONNECTS)} "
                             "or {bandwidth_bytes_per_s: ..., latency_s: ...}")
        return link


class LockstepSpec(_Strict):
    """The replicas as one engine's data-parallel ranks that step together (vLLM's DPEngineCoreProc,
    sim/core/lockstep.py): each step lasts as long as the slowest rank's, and a rank with nothing to run runs a
    dummy forward while any rank has work."""

    pad_tokens: bool = Field(True, description="every rank runs the busiest rank's token count (vLLM pads the "
                             "ranks alike unless it runs eager; the padding through the linear layers only, no "
                             "attention); false: each rank its own")
    pad_prefill_steps: bool = Field(True, description="with pad_tokens, a step where some rank prefills is padded too "
                                    "(vLLM); false: only steps of decodes alone are (SGLang's data-parallel "
                                    "attention from 0.5.3: a step with a prefill runs its ranks unpadded)")
    idle_check_steps: int = Field(32, ge=1, le=1 << 20, description="steps between the ranks' checks for "
                                  "unfinished requests anywhere; idle ranks run dummy forwards until a check finds "
                                  "none (vLLM: 32 from 0.9.2, 24 in 0.8.5-0.9.1, 16 before)")
    expert_exchange: Literal[EXCHANGES] = Field(
        "all_gather_reduce_scatter", description="a mixture of experts, whose experts the ranks spread over all their "
        "GPUs: how the ranks exchange each expert layer's tokens (each rank's GPU with its peers): "
        "all_gather_reduce_scatter (vLLM's default from 0.11.0), broadcast_all_reduce (vLLM's naive dispatch "
        "before: each rank broadcasts its tokens in turn, the outputs all-reduced), dp_attention (SGLang's "
        "data-parallel attention: every layer's MLP, dense layers and shared experts too, runs the gathered "
        "tokens over all the group's GPUs; an all-gather and a reduce-scatter over them in a decode step, two "
        "all-reduces in a step with a prefill)")


class HardwareSpec(_Strict):
    gpu: str | GPUSpec = Field("h100-sxm", description="catalog GPU name, or an inline GPU definition")
    _gpu_kernels_as = field_validator("gpu")(_inline_kernels_as)
    tensor_parallel: int = Field(1, ge=1, le=MAX_GPUS_PER_REPLICA, description="GPUs per replica sharing each layer")
    pipeline_parallel: int = Field(1, ge=1, le=MAX_GPUS_PER_REPLICA, description="pipeline stages per replica, each a tensor-parallel group "
                                   "holding consecutive layers (GPUs per replica = tensor_parallel x pipeline_parallel)")
    expert_parallel: int = Field(1, ge=1, le=MAX_GPUS_PER_REPLICA, description="GPUs of each tensor-parallel group "
                                 "holding whole routed experts (a mixture of experts), each expert split over the "
                                 "other tensor_parallel / expert_parallel GPUs; 1: every expert split over all of "
                                 "them. The engines' expert parallelism without data-parallel attention; with "
                                 "lockstep, GPUs of the whole group (num_replicas x tensor_parallel)")
    all_reduce: Literal[ALL_REDUCES] = Field(
        CUSTOM_ALL_REDUCE, description="how each tensor-parallel group all-reduces: custom (the engine's own kernel "
        "over NVLink peer memory, vLLM's, SGLang's and TensorRT-LLM's default) or nccl (NCCL's collectives: LMDeploy's "
        "TurboMind, --disable-custom-all-reduce). The measured tables and the learned roofline price each from its "
        "own measurements; the catalog roofline and whole-step profiles price both alike")
    num_replicas: int = Field(1, ge=1, le=MAX_REPLICAS)
    router: Literal["round_robin", "least_outstanding", "least_loaded", "fewest_waiting", "least_outstanding_kv",
                    "random"] = Field(
        "round_robin", description="which replica an arriving request goes to: round_robin (in turn), "
        "least_outstanding (fewest routed and unfinished), least_loaded (lowest 4 x waiting + running: vLLM's "
        "data-parallel load balancer's score 0.10.1-0.26, ties to the lowest index), fewest_waiting (fewest "
        "waiting, then fewest running: vLLM's 0.9.1-0.10.0), least_outstanding_kv (fewest routed and unfinished "
        "plus 6 x waiting x the KV usage above half, ties to the next replica in turn: vLLM's from 0.27.0), random")
    lockstep: LockstepSpec | None = Field(
        None, description="the replicas step together as one engine's data-parallel ranks (a mixture of experts: "
        "its routed experts spread over every rank's GPUs, each expert layer running the group's tokens; "
        "hardware.expert_parallel of those GPUs holding whole experts); absent: independent")
    disaggregation: DisaggregationSpec | None = Field(
        None, description="separate prefill and decode pools joined by a link; absent = colocated")

    @model_validator(mode="after")
    def _lockstep_alone(self) -> "HardwareSpec":
        # A lockstep group steps whole replicas together (sim/core/lockstep.py); a pipelined replica's micro-batches
        # and a disaggregated pool's replicas step on their own.
        if self.lockstep is not None and self.pipeline_parallel > 1:
            raise ValueError(f"lockstep: not modelled with pipeline_parallel {self.pipeline_parallel}; allowed: "
                             "pipeline_parallel 1, or no lockstep")
        if self.lockstep is not None and self.disaggregation is not None:
            raise ValueError("lockstep: not modelled with disaggregation; allowed: no lockstep, or no "
                             "disaggregation")
        return self


class PreemptionSpec(_Strict):
    """continuous: what happens when a running request needs KV memory and none is free."""

    mode: Literal["recompute", "swap"] = Field(
        "recompute", description="recompute: free the victim's KV and prefill it again; swap: move it to host "
        "memory over the GPU's host link and back (recompute when swap space is full)")
    victim: VictimName = Field(
        "last_admitted", description="which running request is preempted: last_admitted (vLLM), "
        "fewest_computed_tokens (least to recompute), most_kv_blocks (most memory back)")
    swap_space_bytes: int = Field(4 << 30, ge=0, description="swap: host memory per GPU for swapped KV (vLLM: 4 GiB)")


# The most decode steps one schedule may run (vLLM's --num-scheduler-steps; its docs and benchmarks use up to 64)
# and the most CUDA-graph sizes a list may hold (TensorRT-LLM captures tens; more is a typo or a generated list).
MAX_DECODE_STEPS_PER_SCHEDULE = 1024
MAX_CUDA_GRAPH_SIZES = 4096


class NewTokenRatioSpec(_Strict):
    """SGLang's admission reserve (sim/sched/rules.py NewTokenRatio names the source)."""

    init: float = Field(SGLANG_INIT_NEW_TOKEN_RATIO, gt=0, le=1, description="the ratio after a retraction (SGLang: "
                        f"{SGLANG_INIT_NEW_TOKEN_RATIO:g} x schedule_conservativeness)")
    min: float = Field(SGLANG_MIN_NEW_TOKEN_RATIO, gt=0, le=1, description="the floor it decays to (SGLang: init "
                       f"{SGLANG_INIT_NEW_TOKEN_RATIO:g} x {SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR:g})")
    decay_steps: int = Field(SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS, ge=1, le=1 << 30, description="decode steps from "
                             f"init to min (SGLang: {SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS})")

    @model_validator(mode="after")
    def _ordered(self) -> "NewTokenRatioSpec":
        if self.min > self.init:
            raise ValueError(f"min: {self.min:g} is above init {self.init:g}; allowed: min <= init")
        return self


# The most sequences a step may hold: the schedulers keep arrays of this size (an engine runs at most thousands).
MAX_NUM_SEQS = 1 << 20
# The most tokens a per-step token limit may name: the compiled engine core keeps these limits as int64.
MAX_TOKEN_LIMIT = (1 << 63) - 1
# The most tokens a KV block may hold: the decode tracker keeps a set per position in a block (sim/sched/decode.py),
# so a block of 10^12 tokens hung the run; engines' blocks are 1 to a few hundred tokens.
MAX_BLOCK_TOKENS = 1 << 16


class SchedulerSpec(_Strict):
    batching: Literal["continuous", "static"] = "continuous"
    max_num_seqs: int = Field(256, ge=1, le=MAX_NUM_SEQS, description="continuous: most sequences in one step")
    max_num_batched_tokens: int | None = Field(
        None, ge=1, le=MAX_TOKEN_LIMIT, description="continuous: token budget per step; default 2048 with chunked "
        "prefill, else max_model_len + max_num_seqs (a full-length prompt always fits beside a full decode batch)")
    chunked_prefill: bool = Field(False, description="continuous: split prompts to fill the token budget")
    max_model_len: int | None = Field(None, ge=1, le=MAX_MODEL_DIM, description="default: the model's max_context")
    fit_max_model_len: bool = Field(False, description="max_model_len (as above) cut to the longest one request of "
                                    "which the KV cache holds (vLLM 0.14+'s --max-model-len auto)")
    max_batch_size: int = Field(8, ge=1, le=MAX_NUM_SEQS, description="static: requests per batch")
    batch_timeout_s: float = Field(0.0, ge=0, description="static: wait this long for a full batch")
    preemption: PreemptionSpec = PreemptionSpec()
    # The engine's rule (sim/sched/rules.py; an engine preset sets them, defaults: vLLM V1).
    mixed_batches: bool = Field(True, description="continuous: decodes and prefill chunks share a step (vLLM V1); "
                                "false: a step is prefill-only whenever a prefill can run, else decode-only (SGLang, "
                                "vLLM V0 without chunked prefill)")
    decode_steps_per_schedule: int = Field(1, ge=1, le=MAX_DECODE_STEPS_PER_SCHEDULE, description=(
        "continuous: decode steps run as one group that no new prompt joins (vLLM V0 --num-scheduler-steps), and a "
        "request whose last token comes inside the group returns at its end; with mixed_batches a step's prefills "
        "open a group too (0.6.3+ with chunked prefill)"))
    kv_reservation: Literal["on_demand", "whole_output"] = Field(
        "on_demand", description="continuous, paged: on_demand takes blocks as tokens come and preempts when none "
        "is free (vLLM, SGLang); whole_output admits a request only when its whole sequence's blocks are free beside "
        "every running request's, so nothing is preempted (TensorRT-LLM GUARANTEED_NO_EVICT)")
    cuda_graph_batch_sizes: list[Annotated[int, Field(ge=1, le=MAX_NUM_SEQS)]] | None = Field(
        None, max_length=MAX_CUDA_GRAPH_SIZES, description="continuous: a decode-only step runs as the smallest "
        "listed batch that holds it, padded (TensorRT-LLM cuda_graph_config with enable_padding); absent: as scheduled")
    new_token_ratio: NewTokenRatioSpec | None = Field(None, description="continuous, paged: SGLang's admission "
                                                      "reserve for the running requests' future tokens; absent: none")
    admission: Literal["whole_prompt", "first_chunk"] = Field(
        "whole_prompt", description="continuous, paged, chunked: a waiting prompt starts when the blocks of all of "
        "it are free (vLLM V1 from 0.19, scheduler_reserve_full_isl), or when those of the chunk it computes this "
        "step are, its later chunks preempting the last admitted when blocks run out (vLLM V1 to 0.18)")
    too_long: Literal[TOO_LONG_RULES] = Field(
        "clip", description="a request whose prompt and asked output together pass max_model_len: clip cuts it to fit "
        "as it is generated (the prompt to max_model_len - 1, then the output to what is left); refuse sends it as "
        "asked and the deployment refuses it on arrival (status rejected), as vLLM's OpenAI server to 0.31 answers it "
        "with HTTP 400; clip_output cuts its output to what the prompt leaves and refuses a prompt of max_model_len "
        "or more (vLLM from 0.32). A multi-turn conversation's turns are clipped under every rule")
    context_pass: bool = Field(False, description="continuous, unchunked, mixed: a step that admits prompts "
                               "computes all their tokens but the last alone (prefill-only), and the next step runs "
                               "every decode with those last tokens (LMDeploy TurboMind 0.1's context decode)")
    prefill_context_tokens: int | None = Field(None, ge=1, le=MAX_TOKEN_LIMIT, description=(
        "continuous: the prompts that compute more than one token in a step, and those the step starts or resumes, "
        "hold at most this many tokens of context together, each counted whole (prompt and output so far); the "
        "step's first always runs (LMDeploy TurboMind 0.12+'s max_context_token_num: session_len); absent: no limit"))
    max_prefill_chunk_tokens: int | None = Field(None, ge=1, le=MAX_TOKEN_LIMIT, description=(
        "continuous, chunked: a prompt computes at most this many tokens in a step, however much of the token budget "
        "is left (vLLM V1's --long-prefill-token-threshold, 0.8.3+); absent: up to the budget"))
    prefill_chunk_cap_when_alone: bool = Field(True, description=(
        "continuous: max_prefill_chunk_tokens holds also when the prompt's request is the only one running or "
        "waiting (vLLM to 0.30); false: only beside others (0.31+)"))
    prefill_chunk_cap_fair_share: bool = Field(False, description=(
        "continuous: max_prefill_chunk_tokens is floored at max_num_batched_tokens divided by the requests running or "
        "waiting (vLLM 0.31+'s --long-prefill-token-threshold-adaptive)"))

    @model_validator(mode="after")
    def _consistent(self) -> "SchedulerSpec":
        if self.batching == "static" and self.chunked_prefill:
            raise ValueError("chunked_prefill needs batching 'continuous'")
        if self.batching == "static" and not self.rule().is_default:
            raise ValueError("mixed_batches, decode_steps_per_schedule, kv_reservation, cuda_graph_batch_sizes, "
                             "new_token_ratio, context_pass, admission, prefill_context_tokens and "
                             "max_prefill_chunk_tokens need batching 'continuous'")
        if self.max_prefill_chunk_tokens is not None and not self.chunked_prefill:
            raise ValueError("max_prefill_chunk_tokens needs chunked_prefill true (it splits prompts into chunks)")
        if self.admission == "first_chunk" and not self.chunked_prefill:
            raise ValueError("admission 'first_chunk' needs chunked_prefill true (unchunked, a prompt is admitted "
                             "whole or not at all)")
        if self.context_pass and (self.chunked_prefill or not self.mixed_batches):
            raise ValueError("context_pass needs chunked_prefill false and mixed_batches true (its decode pass "
                             "mixes the decodes with the prompts' last tokens)")
        return self

    def rule(self):
        """The scheduling rule these fields give (sim/sched/rules.py)."""
        from sim.sched.rules import NewTokenRatio, SchedulingRule
        ratio = self.new_token_ratio
        return SchedulingRule(
            mixed_batches=self.mixed_batches, decode_steps_per_schedule=self.decode_steps_per_schedule,
            whole_output_reservation=self.kv_reservation == "whole_output",
            cuda_graph_batch_sizes=tuple(sorted(set(self.cuda_graph_batch_sizes or ()))),
            new_token_ratio=None if ratio is None else NewTokenRatio(ratio.init, ratio.min, ratio.decay_steps),
            context_pass=self.context_pass, whole_prompt_admission=self.admission == "whole_prompt",
            prefill_context_tokens=self.prefill_context_tokens or 0,
            max_prefill_chunk_tokens=self.max_prefill_chunk_tokens or 0,
            prefill_chunk_cap_when_alone=self.prefill_chunk_cap_when_alone or not self.max_prefill_chunk_tokens,
            prefill_chunk_cap_fair_share=self.prefill_chunk_cap_fair_share and bool(self.max_prefill_chunk_tokens))


class TransientMarginSpec(_Strict):
    """Memory an engine that sizes its KV cache after warmup keeps free of the whole device beside its peak
    activations: the larger of `floor_bytes` and `fraction` x the peak (vLLM 0.34's extensible KV cache: its preset
    sets them, sim/config/engines/vllm.py VLLM_EXTENSIBLE_KV_MARGIN)."""

    floor_bytes: int = Field(ge=0, le=1 << 40, description="bytes kept free at least")
    fraction: float = Field(ge=0, le=16, description="and at least this fraction of the peak activations")


class KVCacheSpec(_Strict):
    layout: Literal["paged", "contiguous"] = "paged"
    block_size: int = Field(16, ge=1, le=MAX_BLOCK_TOKENS, description="paged: tokens per block")
    reserve: Literal["max_len", "pow2", "oracle"] = Field("max_len", description="contiguous: region size rule")
    placement: Literal["first_fit", "best_fit", "buddy"] | None = Field(
        None, description="contiguous: where a region goes (default first_fit): lowest hole that fits, smallest "
        "hole that fits, or power-of-two buddy blocks")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="fraction of HBM the engine may use")
    reserve_bytes: int = Field(0, ge=0, description="extra bytes per GPU kept free")
    weights_offload_bytes: int | None = Field(None, ge=0, description=(
        "bytes of each GPU's decoder-layer weights kept in host memory (pinned) instead, as vLLM's --cpu-offload-gb "
        "moves them (whole parameters from the first layer on, until at least this many: "
        "sim/model/memory.py offloaded_weight_bytes): the KV cache gets their room, and every forward pass reads them "
        "over the host link (PCIe), which each step pays (sim/cost/overhead.py weights_stream_s); absent or 0: none"))
    sampler_bytes_per_logit: float = Field(LOGIT_BYTES, gt=0, le=64, description=(
        "bytes per sampled row and vocabulary entry the engine's memory profile holds at its sampler's peak (its "
        f"copies of the logits), taken from the KV budget for max_num_seqs rows; default {LOGIT_BYTES:g}: one fp32 "
        "copy. The vLLM preset sets its own (sim/config/engines/vllm.py VLLM_SAMPLER_BYTES_PER_LOGIT)"))
    profile_activations: bool = Field(True, description=(
        "the KV budget is what gpu_memory_utilization leaves after the weights and the largest step's peak "
        "activations, as an engine that profiles a forward pass before sizing its cache has it (vLLM, TensorRT-LLM); "
        "false: after the weights alone, the activations living in the memory outside the fraction, as SGLang's "
        "mem_fraction_static has it (its preset sets false)"))
    transient_margin: TransientMarginSpec | None = Field(
        None, description="the usable memory is at most the device less this margin (an engine that sizes its cache "
        "from the memory free after warmup, as vLLM 0.34 does with gpu_memory_utilization 1); absent: none")
    capacity_tokens: int | None = Field(None, ge=1, description="override the computed KV capacity (tokens)")
    free_memory_fraction: float | None = Field(
        None, gt=0, le=1, description="the KV cache takes this fraction of the memory left after the weights and "
        "activations at gpu_memory_utilization 1 (TensorRT-LLM's free_gpu_memory_fraction); absent: "
        "gpu_memory_utilization decides")
    enable_prefix_caching: bool = Field(False, description="paged: reuse cached blocks of shared prompt prefixes "
                                        "(hash-chained blocks, reference counts, LRU eviction)")
    window_memory: Literal[WINDOW_MEMORY] = Field(
        "shared_pool", description="a hybrid model's sliding layers (gpt-oss, Gemma 2/3): each request's last window "
        "in the one pool (vLLM's hybrid KV cache manager), a pool of their own of window_pool_ratio tokens per token "
        "slot (SGLang's SWA pool), or every token, as the other layers' (SGLang's disable_hybrid_swa_memory)")
    window_pool_ratio: float = Field(WINDOW_POOL_RATIO, gt=0, le=16, description="own_pool: the sliding layers' "
                                     "tokens per token slot of the others (SGLang's --swa-full-tokens-ratio)")
    preemption: Literal["recompute", "swap"] | None = Field(
        None, description="deprecated: use scheduler.preemption.mode")
    swap_space_bytes: int | None = Field(None, ge=0, description="deprecated: use scheduler.preemption.swap_space_bytes")

    @field_validator("placement")
    @classmethod
    def _placement_is_contiguous(cls, placement, info):
        layout = info.data.get("layout")
        if placement is not None and layout != "contiguous":
            raise ValueError(f"placement is for contiguous regions; the {layout} layout has fixed-size blocks "
                             "(remove placement, or set layout: contiguous)")
        return placement


# The largest tile an expert padding may round to: well above any MoE kernel's (vLLM's: 64 to 256).
MAX_EXPERT_PADDING = 4096


class ExpertPaddingSpec(_Strict):
    """How the engine's MoE kernel stores each routed expert: the hidden size and each GPU's share of the intermediate
    size rounded up to these multiples (vLLM's `mxfp4_round_up_hidden_size_and_intermediate_size`). It counts in the
    memory the weights take; the cost models price the checkpoint's shapes."""

    hidden: int = Field(ge=1, le=MAX_EXPERT_PADDING, description="multiple the hidden size is rounded up to")
    intermediate: int = Field(ge=1, le=MAX_EXPERT_PADDING, description="multiple each GPU's share of an expert's "
                              "intermediate size is rounded up to")


class QuantizationSpec(_Strict):
    weights: Literal[WEIGHT_DTYPES] = Field(
        "bf16", description="how the weights are stored (mxfp4: a mixture of experts' routed experts in MXFP4, the "
        "rest 16-bit, as gpt-oss's checkpoints; nvfp4: every linear layer but the LM head and the router in NVFP4, "
        "run as W4A4 products on FP4 tensor cores, Blackwell's); absent: a `model: {hf_config}` checkpoint's own "
        "quantization_config (sim/config/checkpoint.py, with its block scales and fp8 activations), else bf16")
    kv_cache: Literal["bf16", "fp16", "fp8", "int8"] = "bf16"
    fp8_compute: bool = Field(FP8_COMPUTE_DEFAULT, description="matrix products run at the GPU's fp8 rate")
    expert_padding: ExpertPaddingSpec | None = Field(None, description="routed experts stored padded to the MoE "
                                                     "kernel's tiles (an engine preset sets it where its kernel pads: "
                                                     "vLLM's Marlin MXFP4); absent: the checkpoint's shapes")
    moe_kernel: Literal[MOE_KERNELS] | None = Field(
        None, description="the routed experts' kernel where an engine preset knows it is not the measured tables' main "
        "one (vLLM's Marlin for MXFP4 experts: the tables' Marlin rows price them); absent: the tables' main kernel")
    fp8_block_scales: bool = Field(False, description="fp8 weights scaled per 128 x 128 block (a checkpoint whose "
                                   "config.json quantization_config has weight_block_size [128, 128]: DeepSeek-V3/R1, "
                                   "Qwen's -FP8 releases), run by block-scaled GEMM and MoE kernels; the measured "
                                   "tables price them from their fp8_block rows where usable (else the per-tensor "
                                   "rows, noted); false: per-tensor scales")

    @model_validator(mode="after")
    def _block_scales_are_fp8(self) -> "QuantizationSpec":
        if self.fp8_block_scales and self.weights != "fp8":
            raise ValueError(f"fp8_block_scales: true with weights {self.weights!r}; allowed: weights 'fp8', or "
                             "fp8_block_scales false")
        if self.fp8_compute and self.weights == "mxfp4":
            raise ValueError("fp8_compute: true with weights 'mxfp4' (whose experts' products run in 16 bits here, "
                             "its attention's in bf16); allowed: fp8_compute false")
        if self.fp8_compute and self.weights == "nvfp4":
            raise ValueError("fp8_compute: true with weights 'nvfp4' (whose products run in FP4); allowed: "
                             "fp8_compute false")
        if self.moe_kernel is not None and self.weights != "mxfp4":
            raise ValueError(f"moe_kernel: {self.moe_kernel!r} with weights {self.weights!r} (the tables keep Marlin's "
                             "rows of MXFP4 experts only); allowed: weights 'mxfp4', or moe_kernel null")
        return self


class OverheadSpec(_Strict):
    """The engine's time outside its kernels (sim/cost/overhead.py): an engine's default terms, any term overridden."""

    engine: Literal["vllm-cudagraph", "vllm-eager", "none"] = Field(
        "vllm-cudagraph", description="whose default terms (estimates; sim/cost/overhead.py names their sources)")
    per_step_s: float | None = Field(None, ge=0, description="CPU time once per step (schedule, inputs, outputs)")
    per_seq_s: float | None = Field(None, ge=0, description="CPU time per scheduled sequence")
    per_prefill_token_s: float | None = Field(None, ge=0, description="CPU time per prompt token scheduled")
    launch_per_layer_s: float | None = Field(None, ge=0, description="eager: kernel-launch time per layer "
                                             "(overlaps the kernels)")
    graph_max_seqs: int | None = Field(None, ge=0, description="decode-only steps of at most this many sequences "
                                       "replay a CUDA graph and pay no launch term (SGLang's --cuda-graph-max-bs); "
                                       "default 0: every step pays it")
    graph_prefill: bool | None = Field(None, description="steps with prompt tokens replay CUDA graphs too and pay no "
                                       "launch term (SGLang's prefill graphs, 0.5.10 on); default false")
    overlap: bool | None = Field(None, description="the CPU terms run while the GPU runs the previous step (SGLang's "
                                 "overlap scheduler, vLLM's async scheduling): a step takes the longer of the two; "
                                 "default: the engine's (false for vLLM's estimates)")
    fitted_for: str | None = Field(None, max_length=200, description=(
        "the engine version(s) whose fit gave these terms, named in the cost model's label and repr (the engine "
        "presets set it, e.g. 'SGLang 0.5.5.post1', or the version a preset borrows from); prices nothing. Absent: "
        "the engine's defaults or your own numbers"))


class AttentionSpec(_Strict):
    """Which attention kernel the engine runs (sim/model/attention_io.py): FlashAttention (Dao et al. 2022) never
    writes the score matrix to HBM; a materialized ("standard", eager) kernel writes S = QK^T and P = softmax(S)
    and reads them back, and holds them in memory while a layer runs. And whether the model's sliding window is
    served (`sliding_window`)."""

    kernel: Literal["flash", "materialized"] = Field(
        "flash", description="flash: tiled, scores never in HBM (vLLM's default); materialized: the score and "
        "probability matrices are written and read back (torch's math SDPA, an eager engine), priced by the roofline "
        "and their memory reserved out of the KV budget")
    backend: Literal["triton"] | None = Field(
        None, description="the engine's attention backend where it is not the one the measured tables ran: triton "
        "(vLLM's Triton backend, which vLLM 0.10+ run for gpt-oss's attention sinks on sm_80+ GPUs but sm_90 and "
        "sm_100 (every sm_10x from 0.13), and 0.11.x for an fp8 KV cache: the vLLM preset sets it), priced from "
        "FlashAttention-2's context rows times the Triton / FA2 ratio measured where both were "
        "(calibrate/measured/vllm_triton_prefill.json); null: the tables' own kernel")

    sliding_window: bool = Field(
        True, description="false: a model's sliding-window layers attend to, and keep, every token, as its other "
        "layers do (vLLM's --disable-sliding-window, which the vLLM preset sets); true: as the model's config has them")

    @model_validator(mode="after")
    def _backend_is_tiled(self):
        if self.backend is not None and self.kernel != "flash":
            raise ValueError(f"backend: {self.backend!r} with kernel {self.kernel!r} (a backend's kernel is tiled); "
                             "allowed: kernel 'flash', or backend null")
        return self


class RooflineSpec(_Strict):
    kind: Literal["roofline"] = "roofline"
    compute_efficiency: float | None = Field(None, gt=0, le=1, description="default: the GPU's")
    memory_efficiency: float | None = Field(None, gt=0, le=1, description="default: the GPU's")
    step_overhead_s: float | None = Field(None, ge=0, description="default: the GPU's; 0 when overhead is given")
    efficiencies: Literal["catalog", "learned"] = Field(
        "catalog", description="catalog: the GPU's fixed efficiencies; learned: fitted to the measured GPUs' "
        "kernel tables (calibrate/measured/learned_roofline.json)")
    overhead: OverheadSpec | None = Field(None, description="engine time outside the kernels; absent = the fixed "
                                          "step_overhead_s")


class FixedCostSpec(_Strict):
    kind: Literal["fixed"]
    prefill_s: float = Field(gt=0)
    decode_s: float = Field(gt=0)


class CalibratedCostSpec(_Strict):
    """Measured kernel times (`python -m calibrate run`); see sim/calibrated.py."""

    kind: Literal["calibrated"]
    profile: str | None = Field(None, description="profile folder; relative paths are relative to the scenario file")
    profile_device: str | None = Field(
        None, description="without profile: the shipped calibrate/profiles/<profile_device>/<model>/tp<N>/ "
        "(default: hardware.gpu, or at tensor_parallel 1 the part it is the same silicon as, its kernels_as: "
        "sim/cost/calibrated.py profile_gpu)")
    engine: str | None = Field(
        None, description="which shipped profile: a whole-step engine under tp<N>/steps/<engine>/ (fused, compiled, "
        "unfused, ...) or 'ops' for per-op kernels; default: the first shipped of fused, compiled, unfused, ops")
    overhead: OverheadSpec | None = Field(None, description="engine time outside the profile's steps; absent = none")


class MeasuredCostSpec(_Strict):
    """Kernels measured on real GPUs (NVIDIA AIConfigurator's vLLM, SGLang or TensorRT-LLM tables); see
    sim/cost/measured.py."""

    kind: Literal["measured"]
    gpu_data: str | None = Field(None, description="which GPU's tables under calibrate/measured/ (default: hardware.gpu's, "
                                 "or those of the part it is the same silicon as: the catalog's kernels_as)")
    tables: Literal["vllm", "sglang", "trtllm"] = Field(
        "vllm", description="which engine's measured kernels (AIConfigurator's tables of that framework)")
    engine: Literal["vllm-cudagraph", "vllm-eager"] = Field(
        "vllm-cudagraph", description="which measured all-reduce: under CUDA graphs or eager")
    step_overhead_s: float = Field(0.0, ge=0, description="engine CPU time added to every step")
    on_missing: Literal["roofline", "error"] = Field(
        "roofline", description="a GPU without measured tables: the roofline (its repr says why) or an error")
    unmeasured_dtype: Literal["error", "roofline"] = Field(
        "error", description="a quantization the tables were not measured in: an error, or (asked for) the whole "
        "step priced by the roofline, whose repr says why; never priced from the bf16 rows")
    overhead: OverheadSpec | None = Field(None, description="engine time outside the kernels (added to "
                                          "step_overhead_s); absent = none")
    moe_routing: Literal["auto", "balanced", "power_law_1.01", "power_law_1.2"] = Field(
        "auto", description="a mixture of experts: which measured routing prices the fused-MoE kernels, balanced "
        "(tokens spread evenly over the experts) or skewed by a power law of this exponent (the busiest GPU's "
        "time); auto: AIConfigurator's estimator's own choice, 1.01 for DeepSeek-family (MLA) models, 1.2 for "
        "the others")


class FixedAcceptance(_Strict):
    kind: Literal["fixed"] = "fixed"
    alpha: float = Field(ge=0, le=1, description="probability that each drafted token is accepted")


class BetaAcceptance(_Strict):
    """Acceptance differs between prompts: each request draws its own α from a Beta distribution."""

    kind: Literal["beta"]
    mean: float = Field(gt=0, lt=1)
    concentration: float = Field(10.0, gt=0, description="a + b of the Beta; larger = less spread")


class AcceptLength(_Strict):
    """The mean tokens a verification yields, its own token included, as the engine logs it (SGLang's accept length,
    vLLM's mean acceptance length): taken as the fixed α whose γ drafts yield it (`alpha_for_tokens`)."""

    kind: Literal["accept_length"]
    tokens_per_step: float = Field(ge=1, description="mean tokens a verification step yields a request, from 1 to "
                                   "γ + 1")


MAX_DRAFT_TREE_WIDTH = 64  # SGLang's --speculative-eagle-topk: its docs' trees branch 1 to 10 ways


class SpeculationSpec(_Strict):
    draft_model: str | ModelSpec | None = Field(
        None, description="catalog name, inline architecture, or {hf_config: path/to/config.json}")
    draft_cost_ratio: float | None = Field(None, gt=0, description="c = draft step time / target step time")
    num_speculative_tokens: int = Field(DEFAULT_SPECULATIVE_TOKENS, ge=1, le=MAX_SPECULATIVE_TOKENS,
                                        description=f"γ: tokens drafted per step, at most {MAX_SPECULATIVE_TOKENS}")
    draft_tree_width: int = Field(
        1, ge=1, le=MAX_DRAFT_TREE_WIDTH, description="drafts each draft step after the first proposes a request, "
        "a tree's branching (SGLang's --speculative-eagle-topk); 1: one chain")
    num_verified_tokens: int | None = Field(
        None, ge=2, description="tokens the target verifies a request a step: γ + 1 for a chain (the default); for a "
        "tree, the nodes chosen from its drafts (SGLang's --speculative-num-draft-tokens), γ + 1 or more")
    acceptance: FixedAcceptance | BetaAcceptance | AcceptLength = Field(FixedAcceptance(alpha=0.7),
                                                                        discriminator="kind")
    ragged: Literal["per_request", "rollback_to_min"] = Field(
        "per_request", description="per_request: each request keeps its own accepted tokens (vLLM); "
        "rollback_to_min: the whole batch advances by its minimum")
    sync_overhead_fraction: float = Field(0.0, ge=0, description="extra verification time for padded schemes")

    @field_validator("draft_model", mode="before")
    @classmethod
    def _read_hf_draft(cls, value):
        return read_model_ref(value, "speculation.draft_model")

    @model_validator(mode="after")
    def _one_draft(self) -> "SpeculationSpec":
        if (self.draft_model is None) == (self.draft_cost_ratio is None):
            raise ValueError("give exactly one of draft_model and draft_cost_ratio")
        return self

    @model_validator(mode="after")
    def _verified_tokens(self) -> "SpeculationSpec":
        """A chain verifies its γ drafts and one token more; a tree at least as many and at most as many as its
        drafts hold (`tree_candidate_tokens`)."""
        verified, gamma, width = self.num_verified_tokens, self.num_speculative_tokens, self.draft_tree_width
        if verified is None:
            return self
        most = tree_candidate_tokens(gamma, width)  # γ + 1 for a chain
        if not gamma + 1 <= verified <= most:
            allowed = f"{most}, or leave it out" if most == gamma + 1 else f"{gamma + 1} to {most}"
            raise ConfigError(f"speculation.num_verified_tokens: {verified} is not allowed with {gamma} draft steps "
                              f"of width {width}; allowed: {allowed}")
        return self

    @model_validator(mode="after")
    def _accept_length_fits(self) -> "SpeculationSpec":
        """An accept length counts the verification's own token and at most γ drafts."""
        acceptance, gamma = self.acceptance, self.num_speculative_tokens
        if acceptance.kind == "accept_length" and acceptance.tokens_per_step > gamma + 1:
            raise ConfigError(f"speculation.acceptance.tokens_per_step: {acceptance.tokens_per_step:g} is more than "
                              f"{gamma} drafts and the verification's own token yield; allowed: 1 to {gamma + 1}")
        return self

    def alpha(self) -> float | None:
        """The fixed acceptance α (an accept length's, solved for γ); None for a per-request Beta."""
        acceptance = self.acceptance
        if acceptance.kind == "fixed":
            return acceptance.alpha
        if acceptance.kind == "accept_length":
            return alpha_for_tokens(acceptance.tokens_per_step, self.num_speculative_tokens)
        return None

    def verified_tokens(self) -> int:
        """Tokens the target verifies a request a step."""
        return self.num_speculative_tokens + 1 if self.num_verified_tokens is None else self.num_verified_tokens

    def draft_spec(self) -> ModelSpec | None:
        if self.draft_model is None or isinstance(self.draft_model, ModelSpec):
            return self.draft_model
        return get_model(self.draft_model, "speculation.draft_model")


# The metrics the verdict ranks variants by once the SLOs are met (sim/views/verdict.py), in its default order.
VERDICT_METRICS = ("goodput", "ttft", "tpot", "e2e", "throughput")


class SLOSpec(_Strict):
    ttft_s: float | None = Field(None, gt=0)
    tpot_s: float | None = Field(None, gt=0)
    e2e_s: float | None = Field(None, gt=0)
    percentile: float = Field(99.0, gt=0, le=100, description="the percentile each limit applies to")
    min_goodput_fraction: float | None = Field(
        None, gt=0, le=1, description="also require this share of requests to meet every limit (goodput SLO)")
    rank_by: list[Literal[VERDICT_METRICS]] | None = Field(  # type: ignore[valid-type]
        None, min_length=1, description="the verdict's deciding metrics after meeting the SLOs, in this order "
        "(latencies at the SLO percentile); those not named follow in the default order: goodput, ttft, tpot, e2e, "
        "throughput. One order for every variant; run and compare only (the planner ranks by cost)")

    @field_validator("rank_by")
    @classmethod
    def _each_metric_once(cls, rank_by):
        if rank_by is not None:
            repeated = sorted({m for m in rank_by if rank_by.count(m) > 1})
            if repeated:
                raise ValueError(f"{', '.join(repeated)} named more than once; allowed: each of "
                                 f"{', '.join(VERDICT_METRICS)} at most once")
        return rank_by

    def has_limits(self) -> bool:
        return any(x is not None for x in (self.ttft_s, self.tpot_s, self.e2e_s))


class SearchSpec(_Strict):
    """The planner's search space (`servesim plan`); run and compare ignore it."""

    gpus: list[str | GPUSpec] | None = Field(None, description="candidate GPUs; default: hardware.gpu")
    tensor_parallel: list[Annotated[int, Field(ge=1, le=MAX_GPUS_PER_REPLICA)]] | None = Field(
        None, description="candidate TP degrees; default: hardware.tensor_parallel")
    pipeline_parallel: list[Annotated[int, Field(ge=1, le=MAX_GPUS_PER_REPLICA)]] | None = Field(
        None, description="candidate pipeline depths, each tried with every TP degree; default: hardware.pipeline_parallel")
    expert_parallel: list[Annotated[int, Field(ge=1, le=MAX_GPUS_PER_REPLICA)]] | None = Field(
        None, description="candidate expert-parallel degrees (a mixture-of-experts model), each tried with every TP "
        "degree it divides; default: hardware.expert_parallel")
    policies: list[str] | None = Field(None, description="variant names to try; default: every variant")
    target_rate_per_s: float | None = Field(None, gt=0, le=MAX_RATE_PER_S,
                                             description="the load to serve; default: the workload's rate")
    max_replicas: int = Field(16, ge=1, le=MAX_REPLICAS, description="largest deployment considered per candidate")
    min_window_s: float = Field(
        60.0, ge=0, description="each simulation spans at least this many seconds of arrivals, so an overload "
        "shows as a growing queue instead of a burst the system absorbs")
    steady_state_lifetimes: float = Field(
        4.0, ge=0, le=100, description="a simulation that meets the SLOs is run again, longer, until its arrivals "
        "span at least this many times its requests' p99 E2E, so a queue that grows only once long requests have "
        "filled the KV cache shows (sim/tools/planner.py steady_window; 4 took scenarios/engines.yaml's H100 answer "
        "from one replica to two: docs/planning.md); 0: min_window_s alone, in about half the time (RESULTS.md)")
    rate_tolerance: float = Field(0.02, gt=0, lt=1, description="binary search stops when hi/lo <= 1 + this")
    num_seeds: int = Field(5, ge=1, le=MAX_PLAN_SEEDS, description="seeds the recommendation is repeated with "
                           "(uncertainty)")
    prices_per_gpu_hour: dict[str, float] = Field(default_factory=dict, description="USD per GPU-hour overrides")
    top_k: int = Field(3, ge=1, description="candidates that get a throughput-latency curve")
    prefer_calibrated: bool = Field(
        True, description="true: a candidate whose scenario names no cost model (or a bare roofline) is priced by the "
        "most accurate one available, as `run` would price it (sim/config/cost_choice.py: a shipped whole-step "
        "profile, else measured kernels, else the learned roofline); false: by the catalog roofline")
    shared_cost_model: bool = Field(
        False, description="true: every candidate that names no cost model is priced by the best kind of model all "
        "of them can have (sim/config/cost_choice.py shared_choice), so the ranking compares them on one kind; false: "
        "each hardware (GPU, TP, PP, EP) by the most accurate available for it, its policies alike")

    @model_validator(mode="after")
    def _positive(self) -> "SearchSpec":
        for tp in self.tensor_parallel or []:
            if tp < 1:
                raise ValueError(f"tensor_parallel values must be >= 1, got {tp}")
        for gpu, price in self.prices_per_gpu_hour.items():
            if price < 0:
                raise ValueError(f"prices_per_gpu_hour.{gpu} must be >= 0, got {price}")
        return self


# The most front-end processes a scenario may ask for: more than any one host has cores (a two-socket AMD EPYC
# 9965 host has 2 x 192), so a larger number is a typo (vLLM starts one API server process per --api-server-count).
MAX_FRONTEND_PROCESSES = 1024
# More tokens than any model's context (so any output is one chunk after its first token); it keeps the chunk
# arithmetic in 64-bit integers.
MAX_TOKENS_PER_CHUNK = 1 << 30


# the front-end disciplines that share a process among the requests in it (sim/frontend.py `inbound`)
SHARED_DISCIPLINES = ("processor_sharing", "event_loop")


class BenchClientSpec(_Strict):
    """The benchmark client that sends the requests and times the replies, as one process (`vllm bench serve`: one
    asyncio process, vllm/benchmarks/serve.py): its own work per request sent and per streamed event read queues on
    it, and the client-side times are when it gets round to each event (sim/frontend.py, "The benchmark client").
    Open arrivals only. The costs depend on the tool, its version and the host CPU (benchmarks/bench_serve_client.py
    measures a tool's; `tool` takes its measured row, sim/config/bench_clients.py)."""

    tool: str | None = Field(None, description=(
        "a measured benchmark tool, as sim/config/bench_clients.py names it (e.g. 'vllm bench serve'): its measured "
        "costs on workload.endpoint where per_request_s, per_event_s or discipline is not given"))
    per_request_s: float = Field(ge=0, description="work per request sent: the HTTP request, its connection, the "
                                 "reply's end")
    per_event_s: float = Field(ge=0, description="work per streamed chunk read: one server-sent event parsed and "
                               "timestamped")
    discipline: Literal["fifo", "processor_sharing", "event_loop"] = Field("event_loop", description=(
        "how the client's process serves the requests it sends, as frontend.discipline; default event_loop: an "
        "asyncio client takes each request's steps in turn"))


class FrontendSpec(_Strict):
    """The API front-end between the client and the engine (sim/frontend.py): `num_processes` server processes per
    replica that take each request in (HTTP, chat template, tokenization) and stream its output back
    (detokenization, one event per chunk). Absent: no front-end, the engine's own times are the client's. The costs
    have no defaults: they depend on the engine, its version and the host CPU (the engine presets supply them)."""

    num_processes: int = Field(1, ge=1, le=MAX_FRONTEND_PROCESSES, description=(
        "server processes per replica (each replica is a server with its own front-end), each doing one piece of "
        "work at a time; default 1: vLLM's single API server (`vllm serve` without --api-server-count, "
        f"vllm/entrypoints/cli/serve.py); at most {MAX_FRONTEND_PROCESSES}"))
    replicas_per_server: int = Field(1, ge=1, le=MAX_REPLICAS, description=(
        "engine replicas behind each server, sharing its front-end processes: an engine's data-parallel workers "
        "(SGLang's --dp-size, whose one TokenizerManager feeds them all); the run has num_processes x num_replicas / "
        "replicas_per_server processes, so hardware.num_replicas must be a multiple of it"))
    per_request_s: float = Field(ge=0, description="inbound work once per request: HTTP, parsing, the chat template")
    per_prompt_token_s: float = Field(ge=0, description="inbound work per prompt token: tokenization")
    per_output_chunk_s: float = Field(ge=0, description="outbound work per streamed chunk: one server-sent event")
    per_output_token_s: float = Field(0.0, ge=0, description="outbound work per output token: detokenization "
                                      "(0: counted in per_output_chunk_s, as with one token per chunk)")
    latency_s: float = Field(0.0, ge=0, description="once per request, occupying no process: the network and the "
                             "server's event-loop awaits, added to the client's times (a delay that does not queue, "
                             "unlike per_request_s)")
    tokens_per_chunk: int = Field(1, ge=1, le=MAX_TOKENS_PER_CHUNK, description=(
        "output tokens per streamed chunk after the first (the first token goes alone); default 1: vLLM streams "
        "each step's new token as it comes (vllm/entrypoints/openai/serving_chat.py); the vLLM preset with "
        "num_scheduler_steps N (V0) sets N, one chunk per multi-step run; SGLang's and vLLM's (0.11.1+) their "
        "stream_interval. The summary's itl_* are then the client's gaps between chunks, engine_itl_* the engine's "
        "between tokens"))
    discipline: Literal["fifo", "processor_sharing", "event_loop"] = Field("fifo", description=(
        "how a process serves the requests it has taken in: fifo, one at a time in the order sent; "
        "processor_sharing, all at once at equal shares (a burst of n equal requests reaches the engine together "
        "after n x their work; a shorter request overtakes a longer one); event_loop, shared as processor_sharing "
        "but none leaving before a request sent earlier, as an asyncio server takes each request's steps in turn "
        "(a long prompt's tokenization is one step, not shared). The sharing ones for open arrivals only "
        "(sim/frontend.py)"))
    client: BenchClientSpec | None = Field(None, description=(
        "the benchmark client's own work (one process; open arrivals only); absent: a client that takes no time, the "
        "front-end's chunks being the client's times"))


class RunSpec(_Strict):
    seed: int = Field(0, ge=0)
    num_requests: int | None = Field(None, ge=1, le=MAX_NUM_REQUESTS,
                                     description=f"at most {MAX_NUM_REQUESTS:,} (sim.workload.generate."
                                     "MAX_NUM_REQUESTS); with neither it nor duration_s, a trace arrival replays the "
                                     "whole trace")
    duration_s: float | None = Field(None, gt=0, description="arrival window; also the horizon unless horizon_s")
    horizon_s: float | None = Field(None, gt=0, description="stop here; requests in flight are unfinished")
    warmup_s: float = Field(0.0, ge=0, description="steady-state window: leave out the first warmup_s seconds "
                            "(window_* summary keys; 0 with cooldown_s 0: no window)")
    cooldown_s: float = Field(0.0, ge=0, description="steady-state window: end it cooldown_s seconds before the "
                              "arrivals end (duration_s, else the last arrival)")
    fast_decode: bool = Field(True, description="take runs of decode-only steps between events in one move "
                              "(a run is one step record with num_steps; per-request records and the summary "
                              "are those of step-by-step simulation, float sums to rounding; false: step by step)")
    compiled_core: bool = Field(True, description="run scenarios in the compiled core's scope (replicas "
                                "behind round-robin/least-outstanding routing, continuous batching, paged KV "
                                "with or without prefix caching, roofline, whole-step or "
                                "measured kernels) through it (numba, the `fast` "
                                "extra): identical records, ~35x faster at bench_engine's load; false: always the SimPy engine")
    # Bands (issue 31, sim/bands.py): every summary figure with the range it takes across replications.
    band: float | None = Field(None, gt=0, lt=100, description="a band of this level (percent, e.g. 90) on every "
                               "headline figure, from replications of the run (sim/bands.py); absent: none")
    band_sources: list[Literal["workload", "step_time", "engine_terms", "engine_model"]] = Field(
        ["workload", "step_time", "engine_terms", "engine_model"], min_length=1, description="what a replication "
        "draws anew: `workload` (another workload seed, the same for every variant of a comparison), `step_time` "
        "(the cost model's error, drawn from its measured residuals, calibrate/residuals.json), `engine_terms` (an "
        "engine preset's CPU and front-end terms, from their fit's spread or their stated range, "
        "sim/config/engines/spread.py engine_term_spread, and a measured benchmark client's costs: nothing without "
        "either) "
        "and `engine_model` (an engine preset's misfit on its fit runs, engine_model_misfit: a further shared bias; "
        "nothing without a preset)")
    band_replications: int | None = Field(None, ge=2, le=199, description="replications behind a band; default: "
                                          "the fewest whose outermost runs bound the level (19 for 90%, 39 for 95%)")
    band_method: Literal["auto", "replications", "edges"] = Field(
        "auto", description="how a band is drawn (sim/bands.py): `replications` (R whole runs, each drawing every "
        "source anew), `edges` (two runs with the cost model's bias at the band's quantiles, widened by the "
        "workload's batch-means spread: needs step_time among band_sources), `auto` (edges for a run long enough "
        "for its batch means, sim/bands.py EDGE_BATCHES × EDGE_MIN_BATCH_REQUESTS requests, with step_time among "
        "the sources and no band_replications; else replications)")

    @model_validator(mode="after")
    def _bounded(self) -> "RunSpec":
        if self.duration_s is not None and self.has_window() and self.warmup_s + self.cooldown_s >= self.duration_s:
            raise ValueError(f"warmup_s + cooldown_s: {self.warmup_s:g} + {self.cooldown_s:g} s leave no measurement "
                             f"window in duration_s {self.duration_s:g} s; their sum must be below duration_s")
        if self.band is not None:
            from sim.config.band_level import check_band_size
            check_band_size(self.band, self.band_replications)  # ValueError: too few replications for the level
        if self.band_method == "edges" and "step_time" not in self.band_sources:
            raise ValueError(f"band_method: edges needs step_time among band_sources (got {self.band_sources}); "
                             "allowed: band_method replications, or add step_time")
        if self.band_method == "edges" and self.band_replications is not None:
            raise ValueError(f"band_replications: {self.band_replications} applies to band_method replications, "
                             "not edges (two runs); allowed: leave it out, or band_method: replications")
        if len(set(self.band_sources)) != len(self.band_sources):
            raise ValueError(f"band_sources: {self.band_sources} names a source twice; allowed: each of workload, "
                             "step_time, engine_terms, engine_model at most once")
        return self

    def has_window(self) -> bool:
        """A steady-state window is asked for (warmup or cooldown set)."""
        return self.warmup_s > 0 or self.cooldown_s > 0


class EngineSpec(BaseModel):
    """The engine a scenario names (sim/config/engines/): its preset already wrote its values into the other
    sections, under the scenario's own, before validation; its flags were checked there."""

    model_config = ConfigDict(extra="allow", frozen=True)
    name: str
    version: str
    _notes: tuple[str, ...] = PrivateAttr(())
    _set_by: dict[str, str] = PrivateAttr(default_factory=dict)
    _v0_fallback: bool = PrivateAttr(False)

    @classmethod
    def applied(cls, raw: dict, notes: list[str], set_by: dict[str, str], v0_fallback: bool) -> "EngineSpec":
        """The engine section of a raw scenario its preset was just applied to (`AppliedPreset`), keeping the
        preset's notes, which flag set which key and whether vLLM fell back to V0."""
        spec = cls.model_validate(raw)
        spec._notes, spec._set_by, spec._v0_fallback = tuple(notes), dict(set_by), v0_fallback
        return spec

    @property
    def v0_fallback(self) -> bool:
        """A vLLM 0.8-0.10 setup that V1 hands to V0, so that the preset priced V0's API server (sim/config/engines/
        vllm.py `_vllm_v0_fallback`), kept from the scenario's validation."""
        return self._v0_fallback

    @property
    def set_by(self) -> dict[str, str]:
        """{scenario key an engine flag set: the flag as the user wrote it} (`apply_engine_preset`),
        kept from the scenario's validation, so that an error about such a key names the flag (`as_flag_error`)."""
        return dict(self._set_by)

    @property
    def notes(self) -> list[str]:
        """What the preset approximates (sim/config/engines/presets.py `apply_engine_preset`), kept from the scenario's
        validation, where the preset ran; not part of the dumped scenario."""
        return list(self._notes)


class Scenario(_Strict):
    name: str = "scenario"
    description: str = ""
    model: str | ModelSpec = Field(
        "llama-3.1-8b", description="catalog model name, an inline architecture, or {hf_config: path/to/config.json} "
        "(read into an inline architecture)")
    hardware: HardwareSpec = HardwareSpec()
    workload: WorkloadSpec
    scheduler: SchedulerSpec = SchedulerSpec()
    kv_cache: KVCacheSpec = KVCacheSpec()
    quantization: QuantizationSpec = QuantizationSpec()
    cost_model: RooflineSpec | FixedCostSpec | CalibratedCostSpec | MeasuredCostSpec = Field(
        RooflineSpec(), discriminator="kind", description="how a step is priced; absent: the most accurate model "
        "available for the GPU, model, TP, engine and dtype (sim/config/cost_choice.py, named in cost_model_choice)")
    speculation: SpeculationSpec | None = Field(None, description="speculative decoding; absent = off")
    slo: SLOSpec = SLOSpec()
    run: RunSpec = RunSpec(num_requests=1000)
    search: SearchSpec | None = Field(None, description="the planner's search space (servesim plan)")
    frontend: FrontendSpec | None = Field(None, description="the API front-end between client and engine; absent = "
                                          "none (latencies are the engine's)")
    engine: EngineSpec | None = Field(None, description="the serving engine, {name: vllm|sglang|trtllm, version, "
                                      "<its flags>}: its preset derives the scheduler, KV and CPU-term defaults "
                                      "(sim/config/engines/); any scenario key overrides them; absent: vLLM V1's "
                                      "scheduling and ServeSim's defaults")

    cost_model_choice: str | None = Field(None, description="set by ServeSim when the scenario names no cost_model: "
                                          "which model it chose and why (sim/config/cost_choice.py)")

    @model_validator(mode="before")
    @classmethod
    def _whole_trace_by_default(cls, data: Any) -> Any:
        """A file without a run section replays a trace whole (a run that sets neither count nor duration does);
        any other arrival gets the default run's 1000 requests."""
        if isinstance(data, dict) and data.get("run") is None:
            arrival = (data.get("workload") or {}).get("arrival") if isinstance(data.get("workload"), dict) else None
            if isinstance(arrival, dict) and arrival.get("kind") == "trace":
                data = {**data, "run": {}}
        return data

    @model_validator(mode="before")
    @classmethod
    def _engine_and_cost_defaults(cls, data: Any) -> Any:
        """The engine preset's values under the scenario's own, then the best available cost model where the
        scenario names none: both on the raw scenario, so every way in gets the same."""
        if not isinstance(data, dict):
            return data
        from sim.config.checkpoint import checkpoint_defaults
        if data.get("engine") is not None:
            from sim.config.engines import model_from_command
            data = model_from_command(data)  # the model a launch command serves, where the scenario names none
        data = checkpoint_defaults(data)  # a quantized checkpoint's dtype, seen by the preset and the choice below
        overhead, notes, preset = None, None, None
        if data.get("engine") is not None:
            from sim.config.engines import apply_engine_preset
            preset = apply_engine_preset(data, field_value_problem)
            data, overhead, notes = preset.raw, preset.overhead, preset.notes
        from sim.config.bench_clients import measured_client_defaults
        data = measured_client_defaults(data)
        from sim.config.chat_template import chat_template_defaults
        data, template_note = chat_template_defaults(data)
        if template_note is not None and notes is not None:
            notes = [*notes, template_note]
        choice = data.get("cost_model_choice")
        given = data.get("cost_model")
        if given is None or choice:
            # No cost model, or one ServeSim chose (a dumped scenario, an edited one): chosen for this scenario again,
            # no better than the tier named before (a file's variants, a sweep's points share one: `shared_choice`); a
            # dumped choice that still holds is kept as it is, so a scenario reads back equal.
            from sim.config.cost_choice import default_cost_model, tier_of
            chosen, why = default_cost_model(data, overhead, tier_of(choice))
            if given is None or tier_of(why) != tier_of(choice):
                if given is None and choice:
                    why += " (the tier every scenario compared with it can have)"  # (shared_choice)
                data = {**data, "cost_model": chosen, "cost_model_choice": why}
        if notes is not None:  # the preset's notes go with its engine, so that nothing derives them again
            data = {**data, "engine": EngineSpec.applied(data["engine"], notes, preset.set_by, preset.v0_fallback)}
        return data
    attention: AttentionSpec = Field(AttentionSpec(), description="the attention kernel: flash (default) or "
                                     "materialized scores")

    @model_validator(mode="after")
    def _run_size(self) -> "Scenario":
        """A run needs a count or a duration, but a trace, which replays every row without them; a duration with no
        count must not ask for more than MAX_NUM_REQUESTS requests (rate x duration)."""
        if self.run.num_requests is None and self.run.duration_s is None and self.workload.arrival.kind != "trace":
            raise ConfigError(f"run: neither num_requests nor duration_s is set; give at least one of them (only a "
                              f"trace arrival may leave both out, replaying the whole trace; arrival kind is "
                              f"{self.workload.arrival.kind!r})")
        check_run_size(self.workload, self.run.num_requests, self.run.duration_s)
        return self

    @model_validator(mode="after")
    def _frontend_fits(self) -> "Scenario":
        """The front-end (sim/frontend.py) runs before and after a colocated engine (open arrivals) or inside the
        SimPy engine's closed loop; a disaggregated deployment is outside it."""
        if self.frontend is None:
            return self
        if self.hardware.disaggregation is not None:
            raise ConfigError("frontend: not allowed with hardware.disaggregation (not modelled yet); allowed: a "
                              "colocated deployment")
        if self.frontend.discipline in SHARED_DISCIPLINES and self.workload.arrival.kind == "closed_loop":
            raise ConfigError(f"frontend.discipline: {self.frontend.discipline!r} is modelled for open arrivals only "
                              "(a closed loop's front-end decides each arrival when the request is sent); allowed "
                              "with workload.arrival.kind closed_loop: fifo")
        if self.frontend.client is not None and self.workload.arrival.kind == "closed_loop":
            raise ConfigError("frontend.client: modelled for open arrivals only (a closed loop's front-end runs in "
                              "the engine's loop); allowed with workload.arrival.kind closed_loop: null")
        shared, replicas = self.frontend.replicas_per_server, self.hardware.num_replicas
        if replicas % shared:
            raise ConfigError(f"frontend.replicas_per_server: {shared} does not divide hardware.num_replicas "
                              f"{replicas}; allowed: a divisor of it (each server feeds that many replicas)")
        return self

    @model_validator(mode="after")
    def _offload_fits(self) -> "Scenario":
        """Offloaded weights are modelled for one colocated pipeline stage with no draft model (each stage's, a
        pool's or a draft's own layers would move as well, as the engine fills its limit)."""
        if not self.kv_cache.weights_offload_bytes:
            return self
        h = self.hardware
        for clash, given in (("hardware.pipeline_parallel", h.pipeline_parallel > 1),
                             ("hardware.disaggregation", h.disaggregation is not None),
                             ("speculation", self.speculation is not None)):
            if given:
                raise ConfigError(f"kv_cache.weights_offload_bytes: {self.kv_cache.weights_offload_bytes:,} with "
                                  f"{clash} is not modelled yet; allowed with it: 0 or absent")
        return self

    @model_validator(mode="after")
    def _move_deprecated_preemption(self) -> "Scenario":
        """kv_cache.preemption / swap_space_bytes (before scheduler.preemption existed) move there, with a
        warning; one that contradicts the new key is an error. To be removed in the release after next."""
        kv, new = self.kv_cache, self.scheduler.preemption
        moved = {}
        for old_key, new_key in (("preemption", "mode"), ("swap_space_bytes", "swap_space_bytes")):
            value = getattr(kv, old_key)
            if value is None:
                continue
            if new_key in new.model_fields_set and getattr(new, new_key) != value:
                raise ConfigError(f"kv_cache.{old_key}: {value!r} contradicts scheduler.preemption.{new_key} "
                                  f"{getattr(new, new_key)!r}; kv_cache.{old_key} is deprecated, keep only "
                                  f"scheduler.preemption.{new_key}")
            warnings.warn(f"kv_cache.{old_key} is deprecated: write scheduler.preemption.{new_key} instead",
                          ConfigDeprecationWarning, stacklevel=2)
            moved[new_key] = value
        if moved:
            preemption = new.model_copy(update=moved)
            self.scheduler = self.scheduler.model_copy(update={"preemption": preemption})
            self.kv_cache = kv.model_copy(update={"preemption": None, "swap_space_bytes": None})
        return self

    @field_validator("model", mode="before")
    @classmethod
    def _read_hf_config(cls, value):
        # {hf_config: path} is read once, here (sim.model.hf_config.HFConfigModel): everything downstream sees an
        # inline ModelSpec, and scenario.yaml outputs keep it. Not a union member, so that an inline ModelSpec's
        # errors stay about its own fields.
        return read_model_ref(value, "model")

    def to_yaml(self) -> str:
        data = self.model_dump(mode="json", exclude_none=True)
        if "attention" not in self.model_fields_set and self.attention == AttentionSpec():
            # The default kernel, not asked for: scenario.yaml outputs (and what sweeps key their results by) stay
            # as they were before the section existed.
            data.pop("attention")
        return yaml.safe_dump(data, sort_keys=False)


@dataclass(frozen=True)
class ScenarioSet:
    """A scenario file: the base and its variants, each fully validated."""

    base: Scenario
    variants: dict[str, Scenario]  # name -> merged scenario; {"base": base} when the file has none
    source: str

    def items(self) -> list[tuple[str, Scenario]]:
        return list(self.variants.items())


def json_schema() -> dict:
    schema = Scenario.model_json_schema()
    schema["properties"]["variants"] = {
        "type": "object", "description": "named partial overrides of the sections above",
        "additionalProperties": {"type": "object"},
    }
    return schema
