"""The resolve step: a validated scenario plus the catalogs become one frozen `Deployment`.

Everything the simulation derives from a scenario before it starts — the model and GPU looked up in
the catalogs, the cross-section rules that need them, the KV capacity from the memory arithmetic, the
token budget, the calibrated profile folder — is computed here, once. The runner, the planner and
the views read the record instead of asking the scenario, the memory arithmetic and the catalogs
again for each number.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sim.config.schema import Scenario
from sim.errors import ConfigError, DoesNotFitError
from sim.model.catalog import get_gpu, get_model
from sim.model.memory import (
    check_tensor_parallel,
    kv_bytes_per_token,
    kv_capacity,
    pipeline_kv_capacity,
    pipeline_stage_layers,
    weight_bytes_per_gpu,
)
from sim.model.specs import GPUSpec, ModelSpec


@dataclass(frozen=True)
class Deployment:
    """One replica's hardware and limits, as the simulation uses them."""

    model: ModelSpec
    gpu: GPUSpec
    tensor_parallel: int
    draft_model: ModelSpec | None  # speculative decoding's draft, sharing the GPUs; None without one
    kv_capacity_tokens: int  # KV token slots per replica (the scenario's pin, or the memory arithmetic)
    kv_bytes_per_token_per_gpu: int  # one token's KV on each GPU of a replica, the draft's included (summed over
    # the pipeline stages: each stage's GPUs hold their layers' share)
    max_model_len: int  # longest sequence (prompt + output) the engine accepts
    max_num_batched_tokens: int  # token budget of one step
    sequences_per_request: int  # parallel samples or beam width
    profile_dir: Path | None  # the calibrated cost model's profile folder; None for other cost models
    pipeline_parallel: int = 1  # pipeline stages per replica (sim/core/pipeline.py)
    stage_layers: tuple[int, ...] = ()  # decoder layers per stage, vLLM's split; (num_layers,) without pipelining

    @property
    def num_gpus(self) -> int:
        """GPUs in one replica."""
        return self.tensor_parallel * self.pipeline_parallel

    @property
    def kv_bytes_per_token_per_stage_gpu(self) -> int:
        """One token's KV on each GPU of the stage with the most layers (what a per-GPU budget such as swap
        space divides by); the same as kv_bytes_per_token_per_gpu without pipelining."""
        if self.pipeline_parallel == 1:
            return self.kv_bytes_per_token_per_gpu
        return self.kv_bytes_per_token_per_gpu // self.model.num_layers * max(self.stage_layers)

    @property
    def kv_bytes_per_token(self) -> int:
        """One token's KV across the whole tensor-parallel group."""
        return self.kv_bytes_per_token_per_gpu * self.tensor_parallel


def model_spec(scenario: Scenario) -> ModelSpec:
    return scenario.model if isinstance(scenario.model, ModelSpec) else get_model(scenario.model, "model")


def gpu_spec(scenario: Scenario) -> GPUSpec:
    gpu = scenario.hardware.gpu
    return gpu if isinstance(gpu, GPUSpec) else get_gpu(gpu, "hardware.gpu")


def max_num_batched_tokens(scenario: Scenario, max_model_len: int) -> int:
    s = scenario.scheduler
    if s.max_num_batched_tokens is not None:
        return s.max_num_batched_tokens
    # Unchunked, a full-length prompt must fit beside a full batch of decodes, or it would block
    # the head of the queue until the running batch drains.
    return 2048 if s.chunked_prefill else max_model_len + s.max_num_seqs


def _check_sections(scenario: Scenario, model: ModelSpec, draft: ModelSpec | None, max_len: int,
                    token_budget: int) -> None:
    """The cross-section rules that need the catalogs."""
    s, tp = scenario.scheduler, scenario.hardware.tensor_parallel
    check_tensor_parallel(model, tp)
    if max_len > model.max_context:
        raise ConfigError(f"scheduler.max_model_len: {max_len} exceeds {model.name}'s max_context "
                          f"{model.max_context}")
    if s.batching == "continuous" and token_budget < s.max_num_seqs:
        raise ConfigError(f"scheduler.max_num_batched_tokens: {token_budget} must be "
                          f">= max_num_seqs ({s.max_num_seqs}) so every running decode fits a step")
    w = scenario.workload
    if w.samples_per_prompt > 1 and w.beam_width > 1:
        raise ConfigError("workload.beam_width: set samples_per_prompt or beam_width, not both")
    if max(w.samples_per_prompt, w.beam_width) > 1 and (scenario.kv_cache.layout != "paged" or s.batching != "continuous"):
        raise ConfigError("workload.samples_per_prompt/beam_width: several sequences per prompt share blocks, "
                          "which needs kv_cache.layout 'paged' and scheduler.batching 'continuous'")
    if scenario.kv_cache.enable_prefix_caching and scenario.kv_cache.layout != "paged":
        raise ConfigError("kv_cache.enable_prefix_caching: needs layout 'paged'")
    if scenario.speculation is not None:
        if s.batching != "continuous":
            raise ConfigError("speculation: needs scheduler.batching 'continuous'")
        if draft is not None:
            check_tensor_parallel(draft, tp, field="speculation.draft_model")
            if draft.vocab_size != model.vocab_size:
                # The target verifies the draft's token ids, so they must index the same vocabulary: vLLM's
                # spec_decode_worker asserts equal vocab sizes (vllm-project/vllm#5203). A draft whose embedding is
                # only padded differently (Qwen2.5 0.5B: 151,936; 7B: 152,064) can be given the target's size.
                raise ConfigError(f"speculation.draft_model: {draft.name} has vocab_size {draft.vocab_size:,}, "
                                  f"{model.name} has {model.vocab_size:,}; allowed: a draft with the target's "
                                  "vocabulary (the same vocab_size)")
    pp = scenario.hardware.pipeline_parallel
    if pp > 1:
        pipeline_stage_layers(model.num_layers, pp)  # one-line error when there are more stages than layers
        if s.batching != "continuous":
            raise ConfigError(f"hardware.pipeline_parallel: {pp} needs scheduler.batching 'continuous' "
                              "(micro-batches are continuous batches); allowed with static batching: 1")
        if max(w.samples_per_prompt, w.beam_width) > 1:
            raise ConfigError(f"hardware.pipeline_parallel: {pp} with several sequences per prompt is not modelled; "
                              "allowed with samples_per_prompt/beam_width > 1: 1")
        if scenario.speculation is not None:
            raise ConfigError(f"hardware.pipeline_parallel: {pp} with speculation is not modelled; allowed with "
                              "speculation: 1")


def _kv_capacity_tokens(scenario: Scenario, model: ModelSpec, gpu: GPUSpec, draft: ModelSpec | None,
                        token_budget: int) -> int:
    """KV token slots per replica: from the memory arithmetic, unless the scenario pins it."""
    if scenario.kv_cache.capacity_tokens is not None:
        return scenario.kv_cache.capacity_tokens
    s, q, tp = scenario.scheduler, scenario.quantization, scenario.hardware.tensor_parallel
    if scenario.hardware.pipeline_parallel > 1:
        # Every stage keeps its own layers' KV for every token: the tightest stage bounds the replica.
        stages = pipeline_kv_capacity(
            model, gpu, pipeline_parallel=scenario.hardware.pipeline_parallel, tensor_parallel=tp,
            weight_dtype=q.weights, kv_dtype=q.kv_cache, gpu_memory_utilization=scenario.kv_cache.gpu_memory_utilization,
            reserve_bytes=scenario.kv_cache.reserve_bytes, max_num_batched_tokens=token_budget,
            max_num_seqs=s.max_num_seqs)
        return min(c.num_tokens for c in stages)
    cap = kv_capacity(model, gpu, tensor_parallel=tp, weight_dtype=q.weights, kv_dtype=q.kv_cache,
                      gpu_memory_utilization=scenario.kv_cache.gpu_memory_utilization,
                      reserve_bytes=scenario.kv_cache.reserve_bytes, max_num_batched_tokens=token_budget,
                      max_num_seqs=s.max_num_seqs if s.batching == "continuous" else s.max_batch_size)
    if draft is None:
        return cap.num_tokens
    # The draft model's weights share the GPU, and every token also keeps the draft's KV.
    kv_bytes = cap.kv_bytes - weight_bytes_per_gpu(draft, q.weights, tp)
    per_token = cap.kv_bytes_per_token + kv_bytes_per_token(draft, q.kv_cache, tp)
    if kv_bytes < per_token:
        raise DoesNotFitError(f"{model.name} with draft {draft.name} leaves "
                              f"{max(kv_bytes, 0):,} bytes per GPU for KV, less than one token's {per_token:,}")
    return kv_bytes // per_token


def calibrated_profile_dir(scenario: Scenario, model: ModelSpec, gpu: GPUSpec) -> Path:
    """The profile a calibrated cost model reads: the given folder, or the shipped one for this setup."""
    from sim.cost.calibrated import (
        resolve_profile_dir,  # the cost layer reads profiles; config only names one
    )
    spec = scenario.cost_model
    device = spec.profile_device or gpu.name
    return resolve_profile_dir(spec.profile, device, model.name, scenario.hardware.tensor_parallel, spec.engine)


def resolve(scenario: Scenario) -> Deployment:
    """Check what needs the catalogs and compute every derived number once; ConfigError names the field."""
    model, gpu = model_spec(scenario), gpu_spec(scenario)
    tp = scenario.hardware.tensor_parallel
    draft = scenario.speculation.draft_spec() if scenario.speculation else None
    max_len = scenario.scheduler.max_model_len or model.max_context
    token_budget = max_num_batched_tokens(scenario, max_len)
    _check_sections(scenario, model, draft, max_len, token_budget)
    try:
        capacity = _kv_capacity_tokens(scenario, model, gpu, draft, token_budget)
    except DoesNotFitError as err:
        raise ConfigError(f"hardware: {err}") from None
    q = scenario.quantization
    per_token = kv_bytes_per_token(model, q.kv_cache, tp) + (kv_bytes_per_token(draft, q.kv_cache, tp) if draft else 0)
    profile_dir = None
    if scenario.cost_model.kind == "calibrated":
        from sim.cost.profiles import (  # per-op or whole-step
            check_profile_matches,
            profile_engine,
        )
        profile_dir = calibrated_profile_dir(scenario, model, gpu)
        check_profile_matches(profile_dir, model, tp)
        engine, given = scenario.cost_model.engine, scenario.cost_model.profile
        if given is not None and engine is not None and engine != profile_engine(profile_dir):
            raise ConfigError(f"cost_model.engine: {engine!r} is not the engine of cost_model.profile "
                              f"'{given}'; allowed: {profile_engine(profile_dir)!r} or leave it out")
    return Deployment(model=model, gpu=gpu, tensor_parallel=tp, draft_model=draft, kv_capacity_tokens=capacity,
                      kv_bytes_per_token_per_gpu=per_token, max_model_len=max_len,
                      max_num_batched_tokens=token_budget,
                      sequences_per_request=max(scenario.workload.samples_per_prompt, scenario.workload.beam_width),
                      profile_dir=profile_dir, pipeline_parallel=scenario.hardware.pipeline_parallel,
                      stage_layers=pipeline_stage_layers(model.num_layers, scenario.hardware.pipeline_parallel))
