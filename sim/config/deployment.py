"""The resolve step: a validated scenario plus the catalogs become one frozen `Deployment`.

Everything the simulation derives from a scenario before it starts — the model and GPU looked up in
the catalogs, the cross-section rules that need them, the KV capacity from the memory arithmetic, the
token budget, the calibrated profile folder — is computed here, once. The runner, the planner and
the views read the record instead of asking the scenario, the memory arithmetic and the catalogs
again for each number.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from sim.config.engines import PRESETS
from sim.config.schema import Scenario
from sim.errors import ConfigError, DoesNotFitError
from sim.kv.paged import MAX_KV_BLOCKS
from sim.model.attention_io import SCORE_BUFFERS, heads_per_gpu, score_activation_bytes
from sim.model.catalog import get_gpu, resolve_model
from sim.model.memory import (
    check_block_scales,
    check_expert_group,
    check_expert_parallel,
    check_tensor_parallel,
    engine_memory,
    kv_bytes_per_token,
    kv_capacity,
    kv_slot_bytes,
    offloaded_weight_bytes,
    pipeline_kv_capacity,
    pipeline_stage_layers,
    sequence_slots,
    weight_bytes_per_gpu,
    window_kv_bytes_per_token,
)
from sim.model.specs import ExpertGroup, GPUSpec, ModelSpec


@dataclass(frozen=True)
class Deployment:
    """One replica's hardware and limits, as the simulation uses them."""

    model: ModelSpec
    gpu: GPUSpec
    tensor_parallel: int
    draft_model: ModelSpec | None  # speculative decoding's draft, sharing the GPUs; None without one
    kv_capacity_tokens: int  # KV token slots per replica (the scenario's pin, or the memory arithmetic)
    kv_bytes_per_token_per_gpu: int  # one token slot's KV on each GPU of a replica (`kv_slot_bytes`: a hybrid
    # model's sliding layers apart), the draft's included (summed over the pipeline stages: each stage's GPUs hold
    # their layers' share)
    max_model_len: int  # longest sequence (prompt + output) the engine accepts
    max_num_batched_tokens: int  # token budget of one step
    sequences_per_request: int  # parallel samples or beam width
    profile_dir: Path | None  # the calibrated cost model's profile folder; None for other cost models
    pipeline_parallel: int = 1  # pipeline stages per replica (sim/core/pipeline.py)
    stage_layers: tuple[int, ...] = ()  # decoder layers per stage, vLLM's split; (num_layers,) without pipelining
    attention_kernel: str = "flash"  # the scenario's attention.kernel
    score_bytes_per_gpu: int = 0  # materialized: score matrices of the largest step, reserved out of the KV budget
    max_prompt_tokens_materialized: int | None = None  # materialized: the longest prompt whose unchunked prefill's
    # scores (and its own KV) fit this replica's GPUs (`longest_prompt_tokens`); None with flash
    expert_parallel: int = 1  # GPUs of the tensor-parallel group holding whole routed experts (`hardware`)
    # How a lockstep group spreads the routed experts (`expert_group`; expert_parallel of its GPUs holding whole
    # experts); None: over the replica's own GPUs
    expert_group: ExpertGroup | None = None
    window_kv_bytes_per_token_per_gpu: int = 0  # a hybrid model's sliding layers: one token's KV on each GPU
    weights_offloaded_bytes: int = 0  # each GPU's layer weights kept in host memory (`kv_cache.weights_offload_bytes`)

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
        """One token slot's KV across the whole tensor-parallel group."""
        return self.kv_bytes_per_token_per_gpu * self.tensor_parallel

    def kv_bytes_for_tokens(self, num_tokens: int) -> int:
        """The KV of one sequence of `num_tokens` across the whole tensor-parallel group: every token's in the layers
        that grow, and a hybrid model's last window in its sliding layers."""
        windowed = min(num_tokens, self.model.sliding_window or 0) if self.window_kv_bytes_per_token_per_gpu else 0
        return (num_tokens * self.kv_bytes_per_token_per_gpu
                + windowed * self.window_kv_bytes_per_token_per_gpu) * self.tensor_parallel


def model_spec(scenario: Scenario) -> ModelSpec:
    """The model as the scenario serves it (`attention.sliding_window`)."""
    return resolve_model(scenario.model).served(scenario.attention.sliding_window)


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


def expert_group(scenario: Scenario, model: ModelSpec) -> ExpertGroup | None:
    """How a lockstep group spreads a mixture of experts' routed experts: over every rank's GPUs (vLLM's
    --data-parallel-size: each step's expert layers run every rank's tokens over every rank's GPUs;
    sim/core/lockstep.py). None: the replica's own tensor-parallel GPUs hold them."""
    hw = scenario.hardware
    if hw.lockstep is None or not model.is_moe:
        return None
    return ExpertGroup(hw.num_replicas * hw.tensor_parallel, hw.num_replicas, hw.lockstep.expert_exchange)


def expert_group_gpus(scenario: Scenario, model: ModelSpec) -> int:
    """The GPUs of `expert_group`, 0 without one."""
    group = expert_group(scenario, model)
    return group.gpus if group is not None else 0


def _check_sections(scenario: Scenario, model: ModelSpec, draft: ModelSpec | None, max_len: int,
                    token_budget: int) -> None:
    """The cross-section rules that need the catalogs."""
    s, tp = scenario.scheduler, scenario.hardware.tensor_parallel
    check_tensor_parallel(model, tp)
    ep = scenario.hardware.expert_parallel
    group_gpus = expert_group_gpus(scenario, model)
    if group_gpus:
        check_expert_group(model, group_gpus, ep)
    else:
        check_expert_parallel(model, tp, ep)
    if scenario.quantization.fp8_block_scales:
        # (a group's experts checked as its tensor-parallel split: whole experts, or a finer split, hold whole blocks
        # where that one does)
        check_block_scales(model, tp, 1 if group_gpus else ep)
    if scenario.quantization.expert_padding is not None and not model.is_moe:
        raise ConfigError(f"quantization.expert_padding: {model.name} has no routed experts to pad; allowed: leave "
                          "it out")
    if group_gpus and (scenario.cost_model.kind == "calibrated"
                       or getattr(scenario.cost_model, "efficiencies", "catalog") == "learned"):
        # A group's ranks run their experts at the group's tokens (`StepPlan.num_expert_tokens`), which only the
        # per-layer pricers split from the rest of a step (sim/cost/compiled_pricing.py)
        what = ("cost_model calibrated" if scenario.cost_model.kind == "calibrated"
                else "cost_model roofline with efficiencies learned")
        raise ConfigError(f"hardware.lockstep: {what} cannot price {model.name}'s experts at the group's tokens "
                          "apart from each rank's own; allowed: cost_model measured, or roofline with catalog "
                          "efficiencies")
    if ep > 1 and scenario.cost_model.kind == "calibrated":
        raise ConfigError(f"hardware.expert_parallel: {ep} is not allowed with cost_model calibrated (its profiles "
                          "time experts split by tensor parallelism); allowed: 1, or cost_model measured or roofline")
    engine_context = scenario.engine is not None and PRESETS[scenario.engine.name].context is not None
    if max_len > model.max_context and not engine_context:  # (an engine's context rule checked it: presets.py)
        raise ConfigError(f"scheduler.max_model_len: {max_len} exceeds {model.name}'s max_context "
                          f"{model.max_context}")
    # The scheduler runs every running decode each step; an engine that cuts a step's decodes to its token budget
    # (vLLM, the default; TensorRT-LLM) needs the budget to hold them all (`EnginePreset.decodes_within_budget`).
    cuts = scenario.engine is None or PRESETS[scenario.engine.name].decodes_within_budget
    if s.batching == "continuous" and token_budget < s.max_num_seqs and cuts:
        raise ConfigError(f"scheduler.max_num_batched_tokens: {token_budget} must be "
                          f">= max_num_seqs ({s.max_num_seqs}) so every running decode fits a step")
    w = scenario.workload
    if w.samples_per_prompt > 1 and w.beam_width > 1:
        raise ConfigError("workload.beam_width: set samples_per_prompt or beam_width, not both")
    if max(w.samples_per_prompt, w.beam_width) > 1 and (scenario.kv_cache.layout != "paged" or s.batching != "continuous"):
        raise ConfigError("workload.samples_per_prompt/beam_width: several sequences per prompt share blocks, "
                          "which needs kv_cache.layout 'paged' and scheduler.batching 'continuous'")
    for field, sequences in (("samples_per_prompt", w.samples_per_prompt), ("beam_width", w.beam_width)):
        if sequences > s.max_num_seqs:  # a request's sequences start together (sim/sched/continuous.py): never here
            raise ConfigError(f"workload.{field}: {sequences} sequences a request are more than scheduler.max_num_seqs "
                              f"({s.max_num_seqs}) lets run at once, so no request could start; allowed: at most "
                              f"{s.max_num_seqs}, or a larger max_num_seqs")
    if scenario.kv_cache.enable_prefix_caching and scenario.kv_cache.layout != "paged":
        by = f" (on by default in engine {scenario.engine.name})" if scenario.engine is not None else ""
        raise ConfigError(f"kv_cache.enable_prefix_caching: needs layout 'paged'{by}; allowed: kv_cache.layout "
                          "'paged', or enable_prefix_caching false")
    block_rules = [rule for rule, on in (("scheduler.kv_reservation 'whole_output'", s.kv_reservation == "whole_output"),
                                         ("scheduler.new_token_ratio", s.new_token_ratio is not None)) if on]
    if block_rules and scenario.kv_cache.layout != "paged":
        # both count the running requests' future blocks (sim/sched/continuous.py), which a region per request has not
        by = f" (engine {scenario.engine.name} sets it)" if scenario.engine is not None else ""
        raise ConfigError(f"kv_cache.layout: {scenario.kv_cache.layout!r} is not modelled with {block_rules[0]}{by}, "
                          "which reserves blocks; allowed: 'paged'")
    if model.hybrid_window and scenario.kv_cache.layout != "paged" and scenario.kv_cache.window_memory != "every_token":
        raise ConfigError(f"kv_cache.layout: {scenario.kv_cache.layout!r} is not modelled for {model.name}, whose "
                          f"{model.num_window_layers} of {model.num_layers} layers slide (a region holds one KV size "
                          "per token); allowed: 'paged', or kv_cache.window_memory: 'every_token'")
    if scenario.speculation is not None:
        if s.batching != "continuous":
            raise ConfigError("speculation: needs scheduler.batching 'continuous'")
        if s.context_pass:
            raise ConfigError("scheduler.context_pass: not modelled with speculation; allowed: "
                              "scheduler.context_pass: false (an engine preset sets it), or no speculation")
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


def _window_memory(scenario: Scenario) -> dict:
    """Where the engine keeps a hybrid model's sliding layers' KV (`kv_cache.window_memory`), as the memory
    arithmetic takes it."""
    kv = scenario.kv_cache
    return {"window_memory": kv.window_memory, "window_pool_ratio": kv.window_pool_ratio}


def _engine_memory(scenario: Scenario) -> dict:
    """`engine_memory` of a validated scenario."""
    return engine_memory(scenario.kv_cache.model_dump(), scenario.quantization.model_dump())


def _check_kv_blocks(scenario: Scenario, capacity_tokens: int) -> None:
    """Paged pools of more than MAX_KV_BLOCKS blocks in all (a pinned capacity, an engine's block override, many
    replicas of a large pool: each replica's pool is held in the one run) are refused in one line, before any array is
    sized by them."""
    kv = scenario.kv_cache
    replicas = scenario.hardware.num_replicas
    blocks = capacity_tokens // kv.block_size
    if kv.layout != "paged" or blocks * replicas <= MAX_KV_BLOCKS:
        return
    where = "kv_cache.capacity_tokens" if kv.capacity_tokens is not None else "kv_cache"
    most = MAX_KV_BLOCKS // replicas * kv.block_size
    if replicas == 1:
        raise ConfigError(f"{where}: {capacity_tokens:,} tokens per replica are {blocks:,} blocks of {kv.block_size}, "
                          f"more than ServeSim holds ({MAX_KV_BLOCKS:,}); allowed: at most {most:,} tokens")
    raise ConfigError(f"{where}: {capacity_tokens:,} tokens per replica over {replicas} replicas are "
                      f"{blocks * replicas:,} blocks of {kv.block_size}, more than ServeSim holds in one run "
                      f"({MAX_KV_BLOCKS:,}); allowed: at most {most:,} tokens per replica at {replicas} replicas "
                      "(kv_cache.capacity_tokens), or fewer replicas (hardware.num_replicas)")


def _check_weights_fit(scenario: Scenario, model: ModelSpec, gpu: GPUSpec, draft: ModelSpec | None,
                       token_budget: int) -> None:
    """A pinned KV capacity sets the cache's size, not whether the model loads: the weights (a draft's too, each
    stage's) must fit the GPU's whole memory, else DoesNotFitError (Mixtral-8x22B's 282 GB ran on one 80 GB A100).
    The weights only: an engine whose preset pins the cache sizes its activations its own way (LMDeploy 0.1's k/v
    blocks a fraction of the total memory), which the arithmetic's activations would overstate."""
    bare_kv = scenario.kv_cache.model_copy(update={
        "capacity_tokens": None, "gpu_memory_utilization": 1.0, "reserve_bytes": 0, "profile_activations": False,
        "transient_margin": None, "free_memory_fraction": None})
    _kv_capacity_tokens(scenario.model_copy(update={"kv_cache": bare_kv}), model, gpu, draft, token_budget)


def _kv_capacity_tokens(scenario: Scenario, model: ModelSpec, gpu: GPUSpec, draft: ModelSpec | None,
                        token_budget: int, score_bytes: int = 0, pinned: bool = True) -> int:
    """KV token slots per replica: from the memory arithmetic (after `score_bytes` of materialized attention scores
    per GPU), unless the scenario pins it (`pinned=False`: the memory arithmetic's, pin or not)."""
    if pinned and scenario.kv_cache.capacity_tokens is not None:
        _check_weights_fit(scenario, model, gpu, draft, token_budget)
        return scenario.kv_cache.capacity_tokens
    s, q, tp = scenario.scheduler, scenario.quantization, scenario.hardware.tensor_parallel
    # TensorRT-LLM sizes its KV cache as a fraction of the memory free once the model is loaded: the arithmetic at
    # utilization 1, then that fraction of what is left (each stage's, with pipelining).
    free_fraction = scenario.kv_cache.free_memory_fraction
    utilization = scenario.kv_cache.gpu_memory_utilization if free_fraction is None else 1.0

    def of_free(cap):
        return cap if free_fraction is None else dataclasses.replace(cap, kv_bytes=int(cap.kv_bytes * free_fraction))
    if scenario.hardware.pipeline_parallel > 1:
        # Every stage keeps its own layers' KV for every token: the tightest stage bounds the replica.
        stages = pipeline_kv_capacity(
            model, gpu, pipeline_parallel=scenario.hardware.pipeline_parallel, tensor_parallel=tp,
            weight_dtype=q.weights, kv_dtype=q.kv_cache, gpu_memory_utilization=utilization,
            reserve_bytes=scenario.kv_cache.reserve_bytes, max_num_batched_tokens=token_budget,
            max_num_seqs=s.max_num_seqs, score_bytes=score_bytes, **_engine_memory(scenario))
        return min(of_free(c).num_tokens for c in stages)
    group = expert_group(scenario, model)
    cap = of_free(kv_capacity(model, gpu, tensor_parallel=tp, weight_dtype=q.weights, kv_dtype=q.kv_cache,
                              gpu_memory_utilization=utilization, reserve_bytes=scenario.kv_cache.reserve_bytes,
                              max_num_batched_tokens=token_budget,
                              max_num_seqs=s.max_num_seqs if s.batching == "continuous" else s.max_batch_size,
                              score_bytes=score_bytes, expert_gpus=group.gpus if group else 0,
                              dense_gpus=group.dense_gpus if group else 0, **_engine_memory(scenario)))
    if draft is None:
        return cap.num_tokens
    # The draft model's weights share the GPU, and every token also keeps the draft's KV.
    kv_bytes = cap.kv_bytes - weight_bytes_per_gpu(draft, q.weights, tp)
    per_token = cap.kv_bytes_per_token + kv_bytes_per_token(draft, q.kv_cache, tp)
    if kv_bytes < per_token:
        raise DoesNotFitError(f"{model.name} with draft {draft.name} leaves "
                              f"{max(kv_bytes, 0):,} bytes per GPU for KV, less than one token's {per_token:,}")
    return kv_bytes // per_token


# --- materialized attention scores ---------------------------------------------------------------------------
# A kernel that materializes the scores holds a layer's score matrices while the layer runs (SCORE_BUFFERS of
# heads x queries x keys, sim/model/attention_io.py). They are activations, so they are reserved as vLLM's profiling
# run reserves activations: for the largest step the scheduler may plan, out of the KV budget. Limiting each prefill
# chunk instead would need the scheduler to size chunks by their scores, and it sizes them by tokens; the token
# budget (rows) and max_model_len (keys) bound every step's scores, so reserving for them guarantees that no step
# is ever priced with scores that do not fit. The rule, enforced in `resolve`:
#   scores = SCORE_BUFFERS x heads per GPU x rows x keys x SCORE_ELEMENT_BYTES (fp32: 4), rows = the token budget
#   (static batching: a padded batch of max_batch_size full-length prompts), keys = max_model_len (a sliding
#   window: at most window + rows); it must leave KV room for one max_model_len sequence (vLLM refuses to start
#   otherwise). With chunked prefill and no budget given, the budget shrinks from its default until it does;
#   otherwise the scenario is refused in one line naming the limit.


def _score_rows(scenario: Scenario, token_budget: int, max_len: int) -> int:
    """Query rows of the largest step: the token budget, or a static batch prefilled padded to its longest."""
    s = scenario.scheduler
    return s.max_batch_size * max_len if s.batching == "static" else token_budget


def _score_bytes(scenario: Scenario, model: ModelSpec, draft: ModelSpec | None, rows: int, max_len: int) -> int:
    """Score bytes per GPU a step of `rows` query rows, each attending at most `max_len` keys, holds (0 with flash).
    The draft's steps run apart from the target's, so the larger of the two."""
    kernel = scenario.attention.kernel
    if kernel == "flash":
        return 0
    tp = scenario.hardware.tensor_parallel
    out = 0
    for m in (model, draft):
        if m is not None:
            # A hybrid model's layers without the window attend every key: the largest scores are theirs.
            windowed = m.sliding_window and not m.hybrid_window
            keys = min(max_len, m.sliding_window + min(rows, max_len)) if windowed else max_len
            out = max(out, score_activation_bytes(kernel, m, rows, keys, tp))
    return out


def _room_for(scenario: Scenario, model: ModelSpec, gpu: GPUSpec, draft: ModelSpec | None, token_budget: int,
              max_len: int, rows: int) -> bool:
    """A step of `token_budget` tokens whose scores have `rows` query rows leaves the memory arithmetic KV room for
    one `max_len` sequence (a pin on the KV capacity does not move the weights and scores: the arithmetic is asked
    without it)."""
    scores = _score_bytes(scenario, model, draft, rows, max_len)
    kept = sequence_slots(model, max_len, scenario.quantization.kv_cache, scenario.hardware.tensor_parallel,
                          window_memory=scenario.kv_cache.window_memory)
    try:
        return _kv_capacity_tokens(scenario, model, gpu, draft, token_budget, scores, pinned=False) >= kept
    except DoesNotFitError:
        return False


def _context_in_kv(scenario: Scenario, model: ModelSpec, max_len: int, capacity_tokens: int) -> int:
    """max_len as the KV cache allows it: cut to the longest one request of which it holds
    (`scheduler.fit_max_model_len`), or refused in one line where the engine refuses to start a KV cache that cannot
    hold one request of max_len (`EnginePreset.kv_holds_max_len`); as it is otherwise. A request's need: its token
    slots (`sequence_slots`), in whole blocks where the cache is paged."""
    s, kv = scenario.scheduler, scenario.kv_cache
    engine = scenario.engine
    rule = PRESETS[engine.name].kv_holds_max_len if engine is not None else None
    if not s.fit_max_model_len and rule is None:
        return max_len

    def need(n: int) -> int:
        slots = sequence_slots(model, n, scenario.quantization.kv_cache, scenario.hardware.tensor_parallel,
                               window_memory=kv.window_memory)
        return -(-slots // kv.block_size) * kv.block_size if kv.layout == "paged" else slots
    held = capacity_tokens // kv.block_size * kv.block_size if kv.layout == "paged" else capacity_tokens
    if need(max_len) <= held:
        return max_len
    longest = _largest(lambda n: need(n) <= held, 1, max_len)
    if s.fit_max_model_len and longest >= 1:
        return longest
    if s.fit_max_model_len:
        raise ConfigError(f"scheduler.fit_max_model_len: the KV cache holds {held:,} token slots, not one token of a "
                          "request; allowed: more memory for the KV cache (kv_cache.gpu_memory_utilization, more GPUs)")
    default = "" if s.max_model_len else f" ({model.name}'s max_context, the default)"
    engine_text = f"{PRESETS[engine.name].label} {engine.version}"
    raise ConfigError(f"scheduler.max_model_len: {max_len:,}{default} needs {need(max_len):,} KV token slots for one "
                      f"request, more than the KV cache's {held:,}, which {engine_text} does not start with ({rule}); "
                      f"allowed: scheduler.max_model_len <= {longest:,} (the engine's max_model_len flag), "
                      "scheduler.fit_max_model_len true, or more memory for the KV cache")


def _largest(fits, lo: int, hi: int) -> int:
    """The largest n in [lo, hi] with fits(n), for fits true up to some n and false after; lo - 1 if none."""
    if not fits(lo):
        return lo - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def longest_prompt_tokens(scenario: Scenario, model: ModelSpec, gpu: GPUSpec, chunk_tokens: int | None = None) -> int:
    """The longest prompt (up to the model's max_context) this scenario's replica could prefill with its
    attention.kernel on otherwise empty GPUs: unchunked (`chunk_tokens` None: one step of the whole prompt), or in
    chunks of `chunk_tokens`, its scores and activations beside the weights leaving KV room for the prompt itself.
    With flash only the KV bounds it. 0: not even one token fits."""
    draft = scenario.speculation.draft_spec() if scenario.speculation else None
    def fits(n: int) -> bool:
        step = n if chunk_tokens is None else min(chunk_tokens, n)
        return _room_for(scenario, model, gpu, draft, step, n, step)
    return max(0, _largest(fits, 1, model.max_context))


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.2f} GiB"


def _materialized_budget(scenario: Scenario, model: ModelSpec, gpu: GPUSpec, draft: ModelSpec | None,
                         max_len: int, token_budget: int) -> int:
    """The token budget a materialized kernel's scores allow (the rule above); ConfigError naming the limit."""
    def fits(budget: int) -> bool:
        return _room_for(scenario, model, gpu, draft, budget, max_len, _score_rows(scenario, budget, max_len))
    if fits(token_budget):
        return token_budget
    s = scenario.scheduler
    scores = _score_bytes(scenario, model, draft, _score_rows(scenario, token_budget, max_len), max_len)
    held = (f"attention.kernel: 'materialized' holds {SCORE_BUFFERS} score matrices of "
            f"{heads_per_gpu(model, scenario.hardware.tensor_parallel)} heads x "
            f"{_score_rows(scenario, token_budget, max_len):,} query rows x {max_len:,} keys ({_gib(scores)} per GPU) "
            f"at the largest step, which leaves {gpu.name} less KV room than one max_model_len ({max_len:,}) sequence")
    if s.batching == "static":
        # A static batch prefills its prompts together, padded to the longest: the batch or the length shrinks.
        def batch_fits(n: int) -> bool:
            rows = s.max_batch_size * n
            return _room_for(scenario, model, gpu, draft, rows, n, rows)
        longest = max(0, _largest(batch_fits, 1, max_len))
        batch = s.max_batch_size
        batch = max(0, _largest(lambda b: _room_for(scenario, model, gpu, draft, token_budget, max_len, b * max_len),
                                1, batch))
        raise ConfigError(f"{held}; allowed: scheduler.max_batch_size <= {batch:,}, scheduler.max_model_len <= "
                          f"{longest:,} (batches of {s.max_batch_size} prompts whose scores fit), or "
                          "attention.kernel: 'flash'")
    chunked = s.chunked_prefill
    if not chunked:
        # Unchunked, the budget must hold a whole prompt: what can shrink is the longest prompt.
        longest = longest_prompt_tokens(scenario, model, gpu)
        raise ConfigError(f"{held}; allowed: scheduler.max_model_len <= {longest:,} (the longest prompt whose "
                          "scores fit unchunked), scheduler.chunked_prefill: true, or attention.kernel: 'flash'")
    best = _largest(fits, 1, token_budget - 1)
    if best >= s.max_num_seqs and s.max_num_batched_tokens is None:
        return best  # the default budget, shrunk until the scores fit
    longest = longest_prompt_tokens(scenario, model, gpu, chunk_tokens=max(s.max_num_seqs, min(best, token_budget)))
    if best >= s.max_num_seqs:
        raise ConfigError(f"{held}; allowed: scheduler.max_num_batched_tokens <= {best:,}, scheduler.max_model_len "
                          f"<= {longest:,}, or attention.kernel: 'flash'")
    raise ConfigError(f"{held} even at a budget of max_num_seqs ({s.max_num_seqs:,}) tokens; allowed: "
                      f"scheduler.max_model_len <= {longest:,}, a smaller scheduler.max_num_seqs, or "
                      "attention.kernel: 'flash'")


def calibrated_profile_dir(scenario: Scenario, model: ModelSpec, gpu: GPUSpec) -> Path:
    """The profile a calibrated cost model reads: the given folder, or the shipped one for this setup."""
    from sim.cost.calibrated import (  # the cost layer reads profiles; config only names one
        profile_gpu,
        resolve_profile_dir,
    )
    spec = scenario.cost_model
    device = spec.profile_device or profile_gpu(gpu, scenario.hardware.tensor_parallel)
    from sim.cost.profile_meta import measured_in
    return resolve_profile_dir(spec.profile, device, model.name, scenario.hardware.tensor_parallel, spec.engine,
                               measured_in(scenario.quantization.model_dump()))


def resolve(scenario: Scenario) -> Deployment:
    """Check what needs the catalogs and compute every derived number once; ConfigError names the field."""
    model, gpu = model_spec(scenario), gpu_spec(scenario)
    tp = scenario.hardware.tensor_parallel
    draft = scenario.speculation.draft_spec() if scenario.speculation else None
    max_len = scenario.scheduler.max_model_len or model.max_context
    token_budget = max_num_batched_tokens(scenario, max_len)
    _check_sections(scenario, model, draft, max_len, token_budget)
    kernel = scenario.attention.kernel
    scores, longest = 0, None
    if kernel != "flash":
        token_budget = _materialized_budget(scenario, model, gpu, draft, max_len, token_budget)
        scores = _score_bytes(scenario, model, draft, _score_rows(scenario, token_budget, max_len), max_len)
        longest = longest_prompt_tokens(scenario, model, gpu)
    try:
        capacity = _kv_capacity_tokens(scenario, model, gpu, draft, token_budget, scores)
    except DoesNotFitError as err:
        raise ConfigError(f"hardware: {err}") from None
    _check_kv_blocks(scenario, capacity)
    max_len = _context_in_kv(scenario, model, max_len, capacity)
    q = scenario.quantization
    per_token = (kv_slot_bytes(model, q.kv_cache, tp, **_window_memory(scenario))
                 + (kv_bytes_per_token(draft, q.kv_cache, tp) if draft else 0))
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
    return Deployment(model=model, gpu=gpu, tensor_parallel=tp, expert_parallel=scenario.hardware.expert_parallel,
                      expert_group=expert_group(scenario, model), draft_model=draft, kv_capacity_tokens=capacity,
                      kv_bytes_per_token_per_gpu=per_token, max_model_len=max_len,
                      max_num_batched_tokens=token_budget,
                      sequences_per_request=max(scenario.workload.samples_per_prompt, scenario.workload.beam_width),
                      profile_dir=profile_dir, pipeline_parallel=scenario.hardware.pipeline_parallel,
                      stage_layers=pipeline_stage_layers(model.num_layers, scenario.hardware.pipeline_parallel),
                      attention_kernel=kernel, score_bytes_per_gpu=scores, max_prompt_tokens_materialized=longest,
                      window_kv_bytes_per_token_per_gpu=window_kv_bytes_per_token(
                          model, q.kv_cache, tp, window_memory=scenario.kv_cache.window_memory),
                      weights_offloaded_bytes=offloaded_weight_bytes(
                          model, scenario.kv_cache.weights_offload_bytes or 0, q.weights, tp,
                          expert_padding=_engine_memory(scenario)["expert_padding"]))
