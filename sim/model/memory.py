"""GPU memory arithmetic: KV bytes per token, weight bytes, peak activations, and what is left for KV.

Pure functions of a ModelSpec (and a GPUSpec). Every byte count is per GPU when a tensor_parallel
argument is taken, because that is the budget that decides whether a replica fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from sim.errors import ConfigError, DoesNotFitError
from sim.model.shapes import (
    GpuLinear,
    block_scale_problem,
    gpu_layer_groups,
    is_routed_expert,
    kv_heads_per_gpu,
    lm_head_shape,
    norm_param_count,
)
from sim.model.specs import GPUSpec, LinearShape, ModelSpec

DTYPE_BYTES: dict[str, float] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5, "mxfp4": 0.5,
                                 "nvfp4": 0.5}
WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "int8", "int4", "mxfp4", "nvfp4")
# MXFP4 (the OCP Microscaling format's FP4, gpt-oss's checkpoints): the routed experts' weights as 4-bit floats with
# one 8-bit (E8M0) scale per block of 32; the rest (attention, router, embeddings, LM head) stays 16-bit, the
# checkpoint's `modules_to_not_convert`. The rooflines price its products in 16 bits (w4a16, as Hopper and Ampere
# run them; a B200's FP4 rate is not used); the measured tables, as each engine's kernel ran them.
MXFP4_BLOCK = 32
MXFP4_PARAM_BYTES = DTYPE_BYTES["mxfp4"] + 1 / MXFP4_BLOCK  # with its 1-byte scale per block
# NVFP4 (NVIDIA's FP4, ModelOpt's and llm-compressor's NVFP4 checkpoints): 4-bit floats (E2M1) with one FP8 (E4M3)
# scale per block of 16 and one fp32 scale per tensor (left out: 4 bytes a matrix); the activations are quantized to
# NVFP4 as they run, so the products are W4A4, on the FP4 tensor cores of a GPU that has them
# (`GPUSpec.fp4_flops_per_s`: Blackwell), refused elsewhere (`check_fp4_products`). Every linear layer but the LM head
# and the MoE router is 4-bit, as ModelOpt's NVFP4 recipe leaves them (a checkpoint that keeps more in 16 bits is
# not read as nvfp4: `sim.model.checkpoint_quant`).
NVFP4_BLOCK = 16
NVFP4_PARAM_BYTES = DTYPE_BYTES["nvfp4"] + 1 / NVFP4_BLOCK  # with its 1-byte scale per block
# quantization.fp8_compute when a scenario (or its checkpoint) does not say: fp8 weights with 16-bit matrix products
# (weight-only fp8). The schema's default and the default cost-model choice both read it.
FP8_COMPUTE_DEFAULT = False

_QUANTIZED = ("fp8", "int8", "int4")
_SCALE_BYTES = 2  # one fp16 scale per group of quantized weights
_ZERO_POINT_BYTES = 0.5  # int4 (GPTQ/AWQ-style asymmetric) also stores a 4-bit zero point per group
# Quantization schemes leave embeddings, lm_head, norms and biases in 16 bits.
_UNQUANTIZED_BYTES = DTYPE_BYTES["bf16"]
_ACTIVATION_BYTES = DTYPE_BYTES["bf16"]
LOGIT_BYTES = DTYPE_BYTES["fp32"]  # samplers upcast the logits to fp32: one copy (kv_cache.sampler_bytes_per_logit)


def _dtype_bytes(dtype: str, allowed: tuple[str, ...], field: str) -> float:
    if dtype not in allowed:
        raise ConfigError(f"{field}: unknown dtype {dtype!r}; allowed: {', '.join(allowed)}")
    return DTYPE_BYTES[dtype]


def _positive_int(value: int, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{field}: {value!r} is not allowed; allowed: an integer >= 1")


def _splits(model: ModelSpec, tp: int) -> bool:
    if model.num_attention_heads % tp:
        return False
    if model.attention == "mla":
        return True  # the KV latent is shared by all heads and replicated on every rank
    kv = model.num_kv_heads
    # Fewer KV heads than ranks works by replicating each KV head on tp // kv ranks.
    return kv % tp == 0 or tp % kv == 0


def _allowed_tensor_parallel(model: ModelSpec, block_scales: bool = False) -> list[int]:
    """Every TP that splits the model's attention heads (and, with block-scaled fp8 weights, its scale blocks)."""
    return [d for d in range(1, model.num_attention_heads + 1)
            if _splits(model, d) and not (block_scales and block_scale_problem(model, d))]


def check_tensor_parallel(model: ModelSpec, tp: int, field: str = "hardware.tensor_parallel") -> None:
    """Raise ConfigError unless `tp` ranks can split the model's attention heads evenly."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1 or not _splits(model, tp):
        allowed = _allowed_tensor_parallel(model)
        raise ConfigError(
            f"{field}: {tp!r} cannot split {model.name} ({model.num_attention_heads} attention heads, "
            f"{model.num_kv_heads} KV heads); allowed: {', '.join(map(str, allowed))}"
        )


def _allowed_expert_parallel(model: ModelSpec, tp: int) -> list[int]:
    return [e for e in range(1, tp + 1) if tp % e == 0 and (e == 1 or model.num_experts % e == 0)]


def check_expert_parallel(model: ModelSpec, tp: int, ep: int, field: str = "hardware.expert_parallel") -> None:
    """Raise ConfigError unless `ep` GPUs of the `tp`-GPU group can each hold whole routed experts: the model has
    them, `ep` divides their count and the group (the rest of each expert split by the other tp / ep GPUs, as the
    engines' moe_tp x moe_ep = tp without data-parallel attention)."""
    if isinstance(ep, bool) or not isinstance(ep, int) or ep < 1:
        raise ConfigError(f"{field}: {ep!r} is not allowed; allowed: an integer >= 1")
    if ep == 1:
        return
    if not model.is_moe:
        raise ConfigError(f"{field}: {ep} needs routed experts, and {model.name} has none; allowed: 1")
    if tp % ep or model.num_experts % ep:
        allowed = ", ".join(map(str, _allowed_expert_parallel(model, tp)))
        raise ConfigError(f"{field}: {ep} cannot split {model.name}'s {model.num_experts} experts over "
                          f"tensor_parallel {tp} GPUs (it must divide both); allowed: {allowed}")


def check_expert_group(model: ModelSpec, expert_gpus: int, ep: int, field: str = "hardware.expert_parallel") -> None:
    """Raise ConfigError unless a lockstep group's `expert_gpus` GPUs can hold the routed experts, `ep` of them
    holding whole ones (`gpu_linear`): the model has them, and `ep` divides their count and the GPUs."""
    if not model.is_moe:
        raise ConfigError(f"{field}: {model.name} has no routed experts to spread over a group; allowed: a mixture of "
                          "experts")
    if isinstance(ep, bool) or not isinstance(ep, int) or ep < 1 or expert_gpus % ep or model.num_experts % ep:
        allowed = ", ".join(str(e) for e in range(1, expert_gpus + 1)
                            if expert_gpus % e == 0 and model.num_experts % e == 0)
        raise ConfigError(f"{field}: {ep!r} cannot split {model.name}'s {model.num_experts} experts over the group's "
                          f"{expert_gpus} GPUs (it must divide both); allowed: {allowed}")


def check_block_scales(model: ModelSpec, tp: int, ep: int = 1, field: str = "hardware.tensor_parallel") -> None:
    """Raise ConfigError unless `tp` ranks (`ep` of them holding whole experts) each hold whole 128 x 128 scale blocks
    of the model's block-scaled fp8 weights (`shapes.block_scale_problem`): the engines refuse to load such a
    checkpoint otherwise."""
    problem = block_scale_problem(model, tp, ep)
    if problem:
        allowed = ", ".join(map(str, _allowed_tensor_parallel(model, block_scales=True))) or "none"
        eps = [e for e in _allowed_expert_parallel(model, tp) if e > 1 and not block_scale_problem(model, tp, e)]
        by_ep = f", hardware.expert_parallel {' or '.join(map(str, eps))}" if eps else ""
        raise ConfigError(f"{field}: {tp} cannot shard {model.name}'s block-scaled fp8 weights ({problem}; the "
                          f"engines refuse it); allowed: {allowed}{by_ep}, or quantization.fp8_block_scales false")


def kv_bytes_per_token(model: ModelSpec, kv_dtype: str = "bf16", tensor_parallel: int = 1, *,
                       layers: int | None = None, indexer: bool = True) -> int:
    """KV-cache bytes one token occupies on each GPU of a tensor-parallel group, in every layer (or in `layers` of
    them: every layer keeps the same bytes per token). Under DeepSeek sparse attention, its indexer's keys too
    (`ModelSpec.index_key_bytes`: FP8 whatever kv_dtype, every rank all of them), unless `indexer` is False: the
    attention's own KV alone."""
    check_tensor_parallel(model, tensor_parallel)
    nbytes = _dtype_bytes(kv_dtype, tuple(DTYPE_BYTES), "kv_dtype")
    layers = model.num_layers if layers is None else layers
    if model.attention == "mla":
        # One compressed latent plus the shared rope key per layer; every rank keeps all of it.
        elements = layers * (model.kv_lora_rank + model.qk_rope_head_dim)
    else:
        elements = 2 * layers * kv_heads_per_gpu(model, tensor_parallel) * model.head_dim
    return math.ceil(elements * nbytes) + (layers * model.index_key_bytes if indexer else 0)


# Where an engine keeps a hybrid model's sliding layers' KV (`kv_cache.window_memory`): each request's last window in
# the one pool (vLLM's hybrid KV cache manager), a pool of their own holding `window_pool_ratio` tokens for each
# token slot of the others (SGLang's SWA pool, --swa-full-tokens-ratio), or every token, as the other layers' (an
# engine that does not tell the layers apart: SGLang's disable_hybrid_swa_memory).
WINDOW_MEMORY = ("shared_pool", "own_pool", "every_token")
WINDOW_POOL_RATIO = 0.8  # SGLang's --swa-full-tokens-ratio default (server_args.py, 0.5.3 to 0.5.23)

# The routed experts' kernel where an engine preset knows it is not the measured tables' main one
# (`quantization.moe_kernel`): vLLM's Marlin for MXFP4 experts (sim/config/engines/vllm.py `_vllm_expert_padding`).
MARLIN = "marlin"
MOE_KERNELS = (MARLIN,)


def kv_slot_bytes(model: ModelSpec, kv_dtype: str = "bf16", tensor_parallel: int = 1, *,
                  window_memory: str = "shared_pool", window_pool_ratio: float = WINDOW_POOL_RATIO) -> int:
    """Bytes per GPU of one token slot of the KV cache: the token's KV in the layers whose KV grows with the context.
    That is every layer, except a hybrid model's sliding layers (`ModelSpec.hybrid_window`): theirs stops at the
    window, so each request holds it apart (`window_kv_bytes_per_token`), out of the same memory; in a pool of their
    own, each slot pays for `window_pool_ratio` tokens of it; kept for every token, as any other layer's."""
    if not model.hybrid_window or window_memory == "every_token":
        return kv_bytes_per_token(model, kv_dtype, tensor_parallel)
    full = kv_bytes_per_token(model, kv_dtype, tensor_parallel, layers=model.num_layers - model.num_window_layers)
    if window_memory == "own_pool":
        sliding = kv_bytes_per_token(model, kv_dtype, tensor_parallel, layers=model.num_window_layers)
        return math.ceil(full + window_pool_ratio * sliding)
    return full


def window_kv_bytes_per_token(model: ModelSpec, kv_dtype: str = "bf16", tensor_parallel: int = 1, *,
                              window_memory: str = "shared_pool") -> int:
    """Bytes per GPU of one token's KV in a hybrid model's sliding layers, where each request holds its last window out
    of the one pool (0 for any other model, or where the engine keeps them otherwise: `WINDOW_MEMORY`)."""
    if not model.hybrid_window or window_memory != "shared_pool":
        return 0
    return kv_bytes_per_token(model, kv_dtype, tensor_parallel, layers=model.num_window_layers)


def sequence_slots(model: ModelSpec, num_tokens: int, kv_dtype: str = "bf16", tensor_parallel: int = 1, *,
                   window_memory: str = "shared_pool") -> int:
    """The token slots one sequence of `num_tokens` takes: every token; a sliding window on every layer, the last
    window's; a hybrid model, every token plus, where its sliding layers share the pool, their last window's KV in
    slots (rounded up; the paged cache rounds it to blocks: `PagedKVManager.window_blocks`)."""
    if not model.hybrid_window:
        return min(num_tokens, model.sliding_window) if model.sliding_window else num_tokens
    window_bytes = window_kv_bytes_per_token(model, kv_dtype, tensor_parallel, window_memory=window_memory)
    kept = min(num_tokens, model.sliding_window)
    return num_tokens + -(-kept * window_bytes // kv_slot_bytes(model, kv_dtype, tensor_parallel))


def kv_bytes_for_sequence(
    model: ModelSpec, num_tokens: int, kv_dtype: str = "bf16", tensor_parallel: int = 1
) -> int:
    """KV bytes per GPU for one sequence of `num_tokens`; a sliding window caps the tokens its layers keep."""
    if num_tokens < 0:
        raise ConfigError(f"num_tokens: {num_tokens!r} is not allowed; allowed: an integer >= 0")
    windowed = min(num_tokens, model.sliding_window) if model.sliding_window else num_tokens
    if model.hybrid_window:
        return (num_tokens * kv_slot_bytes(model, kv_dtype, tensor_parallel)
                + windowed * window_kv_bytes_per_token(model, kv_dtype, tensor_parallel))
    return windowed * kv_bytes_per_token(model, kv_dtype, tensor_parallel)


def matrix_dtype(shape: LinearShape, weight_dtype: str) -> str:
    """The dtype one weight matrix is stored in under `quantization.weights`: the LM head stays 16-bit under every
    scheme (as the embeddings, norms and biases), under mxfp4 only the routed experts are 4-bit, and under nvfp4 the
    MoE router stays 16-bit too."""
    if (shape.name == "lm_head" or (weight_dtype == "mxfp4" and not is_routed_expert(shape))
            or (weight_dtype == "nvfp4" and shape.name == "router")):
        return "bf16"
    return weight_dtype


def param_bytes(shape: LinearShape, weight_dtype: str) -> float:
    """Bytes a matrix product reads per parameter of this matrix: its element size (MXFP4's and NVFP4's with their
    block scales; the integer formats' group scales are left out, as they always were in the step prices)."""
    dtype = matrix_dtype(shape, weight_dtype)
    return {"mxfp4": MXFP4_PARAM_BYTES, "nvfp4": NVFP4_PARAM_BYTES}.get(dtype, DTYPE_BYTES[dtype])


def weight_dtypes_for(model: ModelSpec) -> tuple[str, ...]:
    """The weight dtypes this model can be stored in: mxfp4 is a mixture-of-experts checkpoint's format."""
    return tuple(d for d in WEIGHT_DTYPES if d != "mxfp4" or model.is_moe)


def check_fp4_products(gpu: GPUSpec, weight_dtype: str) -> None:
    """nvfp4 weights run W4A4 products on FP4 tensor cores: refused on a GPU without an FP4 rate (the engines'
    weight-only fallbacks there, such as vLLM's Marlin NVFP4 kernel, are not modelled)."""
    if weight_dtype == "nvfp4" and gpu.fp4_flops_per_s is None:
        raise ConfigError(f"quantization.weights: 'nvfp4' runs its products on FP4 tensor cores, which {gpu.name} "
                          "lacks (hardware.gpu.fp4_flops_per_s is none; the engines' weight-only NVFP4 fallbacks are "
                          "not modelled); allowed: a GPU with an FP4 rate (b200), or weights "
                          f"{', '.join(d for d in WEIGHT_DTYPES if d != 'nvfp4')}")


def check_weight_dtype(model: ModelSpec, weight_dtype: str) -> None:
    """mxfp4 is a mixture-of-experts checkpoint's format (its experts' weights): refused for a model without them."""
    if weight_dtype not in weight_dtypes_for(model):
        raise ConfigError(f"quantization.weights: {weight_dtype!r} stores a mixture of experts' routed experts "
                          f"(gpt-oss), and {model.name} has none; allowed: {', '.join(weight_dtypes_for(model))}")


def _matrix_bytes(shape: LinearShape, weight_dtype: str, group_size: int) -> float:
    nbytes = shape.in_features * shape.out_features * param_bytes(shape, weight_dtype)
    dtype = matrix_dtype(shape, weight_dtype)
    if dtype in _QUANTIZED:
        groups = shape.out_features * math.ceil(shape.in_features / group_size)
        nbytes += groups * (_SCALE_BYTES + (_ZERO_POINT_BYTES if dtype == "int4" else 0))
    if shape.has_bias:
        nbytes += shape.out_features * _UNQUANTIZED_BYTES
    return nbytes * shape.count


# (hidden multiple, intermediate multiple) an engine's MoE kernel rounds each routed expert up to, the intermediate
# size as each GPU holds its share (`quantization.expert_padding`, which the engine presets set); None: the
# checkpoint's shapes.
ExpertPadding = tuple[int, int]


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _padded_expert(shape: LinearShape, split: int, padding: ExpertPadding) -> LinearShape:
    """A routed expert's matrix as the engine stores it, each GPU's share (of `split`) padded: the first matrix
    (gate_up, fc1) takes the hidden size in and gives the intermediate (twice, gated) out; the second the reverse."""
    hidden, intermediate = padding
    first = shape.tp_split == "column"
    gates = 2 if first and shape.name.endswith("gate_up") else 1
    share = (shape.out_features if first else shape.in_features) // split // gates
    inner = gates * _round_up(share, intermediate) * split
    outer = _round_up(shape.in_features if first else shape.out_features, hidden)
    return replace(shape, in_features=outer if first else inner, out_features=inner if first else outer)


def _gpu_matrix_bytes(g: GpuLinear, num_layers: int, weight_dtype: str, group_size: int,
                      expert_padding: ExpertPadding | None = None) -> float:
    shape = g.shape
    if expert_padding is not None and is_routed_expert(shape):
        shape = _padded_expert(shape, g.split, expert_padding)
    return num_layers * _matrix_bytes(shape, weight_dtype, group_size) / g.split * (g.count / g.shape.count)


def weight_bytes_per_gpu(
    model: ModelSpec, weight_dtype: str = "bf16", tensor_parallel: int = 1, group_size: int = 128,
    expert_padding: ExpertPadding | None = None, expert_gpus: int = 0, dense_gpus: int = 0,
) -> int:
    """Weight bytes on each GPU: column/row-split matrices and the (vocab-parallel) embeddings and
    lm_head are divided by tensor_parallel; replicated matrices, norms and positions are not. The routed experts
    are stored padded where the engine pads them (`expert_padding`), and divided by `expert_gpus` where a lockstep
    group spreads them over that many GPUs (0: by tensor_parallel), the dense MLPs by `dense_gpus` where the group
    spreads those too (SGLang's data-parallel attention; 0: by tensor_parallel)."""
    check_tensor_parallel(model, tensor_parallel)
    _dtype_bytes(weight_dtype, WEIGHT_DTYPES, "weight_dtype")
    check_weight_dtype(model, weight_dtype)
    _positive_int(group_size, "group_size")
    total = 0.0
    # Expert parallelism leaves these bytes as they are: a GPU holds 1 / tp (1 / expert_gpus) of the experts'
    # weights either way.
    for num_layers, gpu_shapes in gpu_layer_groups(model, tensor_parallel, 1, expert_gpus, dense_gpus):
        for g in gpu_shapes:
            total += _gpu_matrix_bytes(g, num_layers, weight_dtype, group_size, expert_padding)
    head = lm_head_shape(model)
    vocab_tables = 1 if model.tie_word_embeddings else 2  # input embedding (+ separate lm_head)
    total += vocab_tables * head.in_features * head.out_features * _UNQUANTIZED_BYTES / tensor_parallel
    total += model.learned_position_embeddings * model.hidden_size * _UNQUANTIZED_BYTES
    total += norm_param_count(model) * _UNQUANTIZED_BYTES
    return math.ceil(total)


def _layer_norm_params(model: ModelSpec) -> float:
    """One decoder layer's norm weights: its two norms (and MLA's latent norms), the final norm left out."""
    return (norm_param_count(model) - (2 if model.linear_bias else 1) * model.hidden_size) / model.num_layers


def offloaded_weight_bytes(model: ModelSpec, limit_bytes: int, weight_dtype: str = "bf16", tensor_parallel: int = 1,
                           group_size: int = 128, expert_padding: ExpertPadding | None = None) -> int:
    """Bytes of each GPU's decoder-layer weights an engine keeps in host memory when told to offload at most
    `limit_bytes` (`kv_cache.weights_offload_bytes`, vLLM's and SGLang's --cpu-offload-gb): as vLLM's
    `maybe_offload_to_cpu` (model_executor/models/utils.py as read to 0.14.0; model_executor/offloader/uva.py from
    0.19.0; SGLang's copy of it) moves them, layer by layer from the first, whole parameters in each layer's order
    (its matrices, then its norms), until it has moved at least `limit_bytes`: up to one parameter more, or every
    layer's when they hold less. A matrix's bias and scales move with it here, and a layer's norms together (apart in
    the engine: a few bytes either way). The embeddings, the final norm and the LM head stay on the GPU (they are not
    built as layers)."""
    if limit_bytes <= 0:
        return 0
    norm_bytes = _layer_norm_params(model) * _UNQUANTIZED_BYTES
    moved = 0.0
    for num_layers, gpu_shapes in gpu_layer_groups(model, tensor_parallel):
        params = [_gpu_matrix_bytes(g, 1, weight_dtype, group_size, expert_padding) for g in gpu_shapes]
        params.append(norm_bytes)
        for _ in range(num_layers):
            for nbytes in params:
                moved += nbytes
                if moved >= limit_bytes:
                    return math.ceil(moved)
    return math.ceil(moved)


def draft_head_bytes_per_gpu(model: ModelSpec, weight_dtype: str = "bf16", tensor_parallel: int = 1,
                             group_size: int = 128, expert_padding: ExpertPadding | None = None) -> int:
    """Weight bytes on each GPU of a one-layer draft built on the target's shapes, as an EAGLE head or a DeepSeek
    NEXTN (multi-token-prediction) module is: one decoder layer like the target's last (its matrices in the target's
    dtype, as the draft takes the target's quantization), its two norms, an input embedding and an LM head of the
    target's vocabulary (vocab-parallel, unquantized) and the 2h x h projection joining a token's embedding to the
    target's hidden state (replicated, unquantized). An EAGLE3 head differs (wider inputs, its own smaller vocabulary
    head): an estimate there."""
    check_tensor_parallel(model, tensor_parallel)
    groups = gpu_layer_groups(model, tensor_parallel)
    layer = sum(_gpu_matrix_bytes(g, 1, weight_dtype, group_size, expert_padding) for g in groups[-1][1])
    norms = _layer_norm_params(model)
    head = lm_head_shape(model)
    vocab_tables = 2 * head.in_features * head.out_features / tensor_parallel
    projection = 2 * model.hidden_size * model.hidden_size
    return math.ceil(layer + (norms + vocab_tables + projection) * _UNQUANTIZED_BYTES)


def weight_bytes(model: ModelSpec, weight_dtype: str = "bf16", group_size: int = 128) -> int:
    """All weight bytes of the model on one GPU (no tensor parallelism)."""
    return weight_bytes_per_gpu(model, weight_dtype, 1, group_size)


def activation_bytes(
    model: ModelSpec, max_num_batched_tokens: int, max_num_seqs: int, tensor_parallel: int = 1,
    logit_bytes: float = LOGIT_BYTES,
) -> int:
    """Estimated peak activation bytes per GPU of one step over a full batch: its forward pass, then its sampling.

    Layers run one after another and their buffers are reused, so the forward's peak is one layer's worth:
    the residual stream and the current layer's input ([tokens, hidden] each, bf16), plus the widest
    intermediate output of any weight matrix on this GPU (e.g. gate_up: [tokens, 2*ffn/tp]; for MoE
    each token's copy for each of its active experts). Those buffers are freed when the forward returns; the
    sampler then holds the forward's output ([tokens, hidden]) and the logits over the full vocabulary for the
    sampled rows (at most one per sequence), `logit_bytes` per row and vocabulary entry (fp32 by default; an
    engine's sampler may hold several copies at once: `kv_cache.sampler_bytes_per_logit`). The peak is the larger
    of the two phases, as vLLM V1's profiling run measures it (`profile_run`: `_dummy_run`, whose output it keeps,
    then `_dummy_sampler_run`, one peak over both; vllm/v1/worker/gpu_model_runner.py, read in the 0.11.0 wheel).
    Attention scores are not counted here: FlashAttention never forms them, and a kernel that materializes them
    reserves their bytes apart (`sim.model.attention_io.score_activation_bytes`, the `score_bytes` of
    `kv_capacity`). Like vLLM's profiling run, this sizes the worst step the scheduler may plan.
    """
    check_tensor_parallel(model, tensor_parallel)
    _positive_int(max_num_batched_tokens, "max_num_batched_tokens")
    _positive_int(max_num_seqs, "max_num_seqs")
    tokens = max_num_batched_tokens
    # (Expert parallelism leaves it as it is: a GPU's experts see tokens x active / ep rows of tp / ep times the
    # width.)
    widest = max(
        g.shape.out_features * g.active_per_token / (g.split if g.shape.tp_split == "column" else 1)
        for _, gpu_shapes in gpu_layer_groups(model, tensor_parallel)
        for g in gpu_shapes
    )
    forward = (2 * tokens * model.hidden_size + tokens * widest) * _ACTIVATION_BYTES
    sampled_rows = min(max_num_seqs, tokens)
    if not logit_bytes > 0:
        raise ConfigError(f"logit_bytes: {logit_bytes!r} is not allowed; allowed: a number > 0")
    sampling = tokens * model.hidden_size * _ACTIVATION_BYTES + sampled_rows * model.vocab_size * logit_bytes
    return math.ceil(max(forward, sampling))


@dataclass(frozen=True, slots=True)
class KVCapacity:
    """How one GPU's memory divides up; all fields are bytes per GPU except kv_bytes_per_token's unit."""

    usable_bytes: int  # hbm_bytes * gpu_memory_utilization (at most the device less a transient margin)
    weight_bytes: int  # this GPU's share of the weights
    activation_bytes: int  # peak activations of the largest step
    reserve_bytes: int  # held back by the user (CUDA graphs, fragmentation, other processes)
    kv_bytes: int  # what is left for the KV cache
    kv_bytes_per_token: int  # this GPU's share of one token slot's KV (`kv_slot_bytes`)
    score_bytes: int = 0  # materialized attention's score matrices at the largest step (0 with FlashAttention)

    @property
    def num_tokens(self) -> int:
        """Token slots the replica's KV cache holds (each GPU holds its share of every token): tokens, but for a
        hybrid model, whose requests also hold their sliding layers' window out of them."""
        return self.kv_bytes // self.kv_bytes_per_token

    def num_blocks(self, block_size: int) -> int:
        """Whole KV blocks of `block_size` tokens that fit."""
        _positive_int(block_size, "block_size")
        return self.kv_bytes // (block_size * self.kv_bytes_per_token)


def usable_bytes(gpu: GPUSpec, gpu_memory_utilization: float, reserve_bytes: int) -> int:
    """Bytes per GPU the engine may use (vLLM's gpu_memory_utilization share), after checking the settings."""
    if not 0 < gpu_memory_utilization <= 1:
        raise ConfigError(
            f"gpu_memory_utilization: {gpu_memory_utilization!r} is not allowed; allowed: a fraction in (0, 1]"
        )
    if reserve_bytes < 0:
        raise ConfigError(f"reserve_bytes: {reserve_bytes!r} is not allowed; allowed: an integer >= 0")
    return int(gpu.hbm_bytes * gpu_memory_utilization)


# What an engine that sizes its KV cache after warmup keeps free of the whole device beside the peak activations:
# (floor in bytes, fraction of the peak); the larger of the two (vLLM's extensible KV cache: its preset sets it).
TransientMargin = tuple[int, float]


def margined_usable_bytes(gpu: GPUSpec, usable: int, activations: int, margin: TransientMargin | None) -> int:
    """`usable` (the utilization's share), but at most the device less the transient margin: max(floor, fraction x
    the peak activations) kept free as headroom for transients no profile saw (vLLM 0.34's measure_kv_cache_bytes:
    min(requested - used, free - margin), less the peak). None: no margin."""
    if margin is None:
        return usable
    floor_bytes, fraction = margin
    return min(usable, gpu.hbm_bytes - max(int(floor_bytes), math.ceil(fraction * activations)))


# kv_capacity's keyword for each scenario field that says how the engine's own memory differs from the checkpoint's
# arithmetic: where it keeps a hybrid model's sliding layers, what its profile's sampler holds per logit, whether its
# KV budget leaves out the activations (and, apart, how it pads the routed experts: `engine_memory`).
_KV_CACHE_MEMORY_FIELDS = {"window_memory": "window_memory", "window_pool_ratio": "window_pool_ratio",
                           "sampler_bytes_per_logit": "logit_bytes", "profile_activations": "profiled_activations"}


def engine_memory(kv_cache: dict, quantization: dict) -> dict:
    """kv_capacity's keyword arguments for the engine's own memory, from a scenario's kv_cache and quantization
    sections as dicts, validated or raw (an engine preset sizes its limits before validation: sim/config/engines/):
    a field left out keeps kv_capacity's default. The one translation sim/config's deployment and presets both use."""
    out = {arg: kv_cache[name] for name, arg in _KV_CACHE_MEMORY_FIELDS.items() if kv_cache.get(name) is not None}
    margin = kv_cache.get("transient_margin")
    if isinstance(margin, dict):
        out["transient_margin"] = (margin["floor_bytes"], margin["fraction"])
    if kv_cache.get("weights_offload_bytes"):
        out["weights_offload_bytes"] = kv_cache["weights_offload_bytes"]
    pad = quantization.get("expert_padding")
    out["expert_padding"] = (pad["hidden"], pad["intermediate"]) if isinstance(pad, dict) else None
    return out


def kv_capacity(
    model: ModelSpec,
    gpu: GPUSpec,
    *,
    tensor_parallel: int = 1,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
    gpu_memory_utilization: float = 0.9,
    reserve_bytes: int = 0,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 256,
    score_bytes: int = 0,
    window_memory: str = "shared_pool",
    window_pool_ratio: float = WINDOW_POOL_RATIO,
    expert_padding: ExpertPadding | None = None,
    logit_bytes: float = LOGIT_BYTES,
    profiled_activations: bool = True,
    transient_margin: TransientMargin | None = None,
    weights_offload_bytes: int = 0,
    expert_gpus: int = 0,
    dense_gpus: int = 0,
) -> KVCapacity:
    """The memory left for KV cache on each GPU after weights, activations (with `score_bytes` of materialized
    attention scores, `sim.model.attention_io.score_activation_bytes`) and a reserve, in token slots of
    `kv_slot_bytes` (a hybrid model's sliding layers kept as `window_memory` says). `profiled_activations` False:
    the utilization's share is taken after the weights alone, the activations living in the memory outside it
    (SGLang's mem_fraction_static; `kv_cache.profile_activations`). `transient_margin`: the usable bytes are at most
    the device less that margin (`margined_usable_bytes`). `weights_offload_bytes`: at most about this many bytes of
    each GPU's layers are kept in host memory instead (`offloaded_weight_bytes`); `weight_bytes` is what stays.
    `expert_gpus`: the GPUs a lockstep group spreads the routed experts over (0: the tensor-parallel group's;
    `weight_bytes_per_gpu`), and `dense_gpus` the dense MLPs where it spreads those too. The activations are
    sized as the rank's alone: a rank's experts run its group's tokens
    on a 1 / expert_gpus share of the experts where its own would run on 1 / tensor_parallel, the same rows x width
    at the group's padded batch.

    Raises DoesNotFitError when nothing is left.
    """
    weights = weight_bytes_per_gpu(model, weight_dtype, tensor_parallel, expert_padding=expert_padding,
                                   expert_gpus=expert_gpus, dense_gpus=dense_gpus)
    if expert_gpus and weights_offload_bytes:
        raise ConfigError(f"kv_cache.weights_offload_bytes: {weights_offload_bytes} is not modelled for a lockstep "
                          "group's experts; allowed: 0")
    weights -= offloaded_weight_bytes(model, weights_offload_bytes, weight_dtype, tensor_parallel,
                                      expert_padding=expert_padding)
    activations = (activation_bytes(model, max_num_batched_tokens, max_num_seqs, tensor_parallel, logit_bytes)
                   if profiled_activations else 0)
    usable = margined_usable_bytes(gpu, usable_bytes(gpu, gpu_memory_utilization, reserve_bytes), activations,
                                   transient_margin)
    per_token = kv_slot_bytes(model, kv_dtype, tensor_parallel, window_memory=window_memory,
                              window_pool_ratio=window_pool_ratio)
    needed = weights + activations + score_bytes + reserve_bytes
    if usable - needed <= 0:
        raise DoesNotFitError(
            f"{model.name} ({weight_dtype} weights{', some offloaded' if weights_offload_bytes else ''}, "
            f"tensor_parallel={tensor_parallel}) needs {needed:,} bytes "
            f"per GPU but {gpu.name} offers {usable:,} ({gpu_memory_utilization:g} of {gpu.hbm_bytes:,}"
            f"{', less the transient margin' if transient_margin is not None else ''}); "
            "try a larger tensor_parallel, lower-precision weights or more of them in host memory "
            "(kv_cache.weights_offload_bytes)"
        )
    return KVCapacity(usable, weights, activations, reserve_bytes, usable - needed, per_token, score_bytes)


# --- pipeline parallelism -------------------------------------------------------------------------


def pipeline_stage_layers(num_layers: int, pipeline_parallel: int) -> tuple[int, ...]:
    """Decoder layers per pipeline stage, as vLLM splits them (`get_pp_indices` in vllm/distributed/utils.py):
    `num_layers // pp` each, and the remainder one more each to the stages before the last, from the
    second-to-last backwards. The last stage also runs the final norm and the LM head, and the first the
    embedding, so they get the fewer layers. 61 layers on 4 stages: (15, 15, 16, 15)."""
    _positive_int(pipeline_parallel, "hardware.pipeline_parallel")
    if pipeline_parallel > num_layers:
        raise ConfigError(f"hardware.pipeline_parallel: {pipeline_parallel} stages for {num_layers} layers; "
                          f"allowed: 1 to {num_layers} (every stage needs a layer)")
    parts = [num_layers // pipeline_parallel] * pipeline_parallel
    for i in range(2, num_layers % pipeline_parallel + 2):
        parts[-i] += 1
    return tuple(parts)


def stage_weight_bytes_per_gpu(model: ModelSpec, stage: int, pipeline_parallel: int, weight_dtype: str = "bf16",
                               tensor_parallel: int = 1, group_size: int = 128,
                               expert_padding: ExpertPadding | None = None) -> int:
    """Weight bytes on each GPU of pipeline stage `stage` (0-based): its layers' matrices and norms, the input
    embedding (and learned positions) on the first stage, the LM head and final norm on the last. With tied
    embeddings and more than one stage the last stage keeps its own copy of the table for the LM head, as vLLM
    does (its Llama builds `embed_tokens` on the first rank and, when tied, on the last rank too)."""
    check_tensor_parallel(model, tensor_parallel)
    _dtype_bytes(weight_dtype, WEIGHT_DTYPES, "weight_dtype")
    check_weight_dtype(model, weight_dtype)
    _positive_int(group_size, "group_size")
    layers = pipeline_stage_layers(model.num_layers, pipeline_parallel)
    if not 0 <= stage < pipeline_parallel:
        raise ConfigError(f"stage: {stage!r} is not allowed; allowed: 0 to {pipeline_parallel - 1}")
    first, last = stage == 0, stage == pipeline_parallel - 1
    start = sum(layers[:stage])
    end = start + layers[stage]
    total = 0.0
    group_start = 0
    # groups are consecutive layers in order (dense first)
    for num_layers, gpu_shapes in gpu_layer_groups(model, tensor_parallel):
        here = max(0, min(end, group_start + num_layers) - max(start, group_start))
        group_start += num_layers
        for g in gpu_shapes:
            total += _gpu_matrix_bytes(g, here, weight_dtype, group_size, expert_padding)
    head = lm_head_shape(model)
    table = head.in_features * head.out_features * _UNQUANTIZED_BYTES / tensor_parallel
    if pipeline_parallel == 1:
        total += (1 if model.tie_word_embeddings else 2) * table
    else:
        total += table * (first + last)
    per_norm = 2 if model.linear_bias else 1
    layer_norms = 2 * per_norm * model.hidden_size + model.kv_lora_rank + model.q_lora_rank
    total += (layers[stage] * layer_norms + (per_norm * model.hidden_size if last else 0)) * _UNQUANTIZED_BYTES
    if first:
        total += model.learned_position_embeddings * model.hidden_size * _UNQUANTIZED_BYTES
    return math.ceil(total)


def stage_kv_bytes_per_token(model: ModelSpec, stage_layers: int, kv_dtype: str = "bf16",
                             tensor_parallel: int = 1, *, window_memory: str = "shared_pool",
                             window_pool_ratio: float = WINDOW_POOL_RATIO) -> int:
    """One token slot's KV on each GPU of a stage holding `stage_layers` layers (every layer keeps the same bytes
    per token, so the full model's bytes divide evenly by its layers; a hybrid model's stages, each its share of the
    layers that grow)."""
    slot = kv_slot_bytes(model, kv_dtype, tensor_parallel, window_memory=window_memory,
                         window_pool_ratio=window_pool_ratio)
    return slot * stage_layers // model.num_layers


def pipeline_kv_capacity(
    model: ModelSpec,
    gpu: GPUSpec,
    *,
    pipeline_parallel: int,
    tensor_parallel: int = 1,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
    gpu_memory_utilization: float = 0.9,
    reserve_bytes: int = 0,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 256,
    score_bytes: int = 0,
    window_memory: str = "shared_pool",
    window_pool_ratio: float = WINDOW_POOL_RATIO,
    expert_padding: ExpertPadding | None = None,
    logit_bytes: float = LOGIT_BYTES,
    profiled_activations: bool = True,
    transient_margin: TransientMargin | None = None,
) -> list[KVCapacity]:
    """`kv_capacity` for each pipeline stage's GPUs. Every stage keeps its own layers' KV for every token in
    flight, so the replica holds as many tokens as its tightest stage: min(c.num_tokens for c in the list).

    Activations are sized as for the whole model on every stage (the hidden states of a full batch pass every
    stage; only the last computes logits, so this over-counts the others' by the logits buffer, conservative).
    """
    activations = (activation_bytes(model, max_num_batched_tokens, max_num_seqs, tensor_parallel, logit_bytes)
                   if profiled_activations else 0)
    usable = margined_usable_bytes(gpu, usable_bytes(gpu, gpu_memory_utilization, reserve_bytes), activations,
                                   transient_margin)
    out = []
    for stage, layers in enumerate(pipeline_stage_layers(model.num_layers, pipeline_parallel)):
        weights = stage_weight_bytes_per_gpu(model, stage, pipeline_parallel, weight_dtype, tensor_parallel,
                                             expert_padding=expert_padding)
        needed = weights + activations + score_bytes + reserve_bytes  # every stage runs whole layers' attention
        if usable - needed <= 0:
            raise DoesNotFitError(
                f"{model.name} stage {stage} ({layers} layers, {weight_dtype} weights, tensor_parallel="
                f"{tensor_parallel}) needs {needed:,} bytes per GPU but {gpu.name} offers {usable:,}; "
                "try more pipeline stages, a larger tensor_parallel or lower-precision weights")
        out.append(KVCapacity(usable, weights, activations, reserve_bytes, usable - needed,
                              stage_kv_bytes_per_token(model, layers, kv_dtype, tensor_parallel,
                                                       window_memory=window_memory,
                                                       window_pool_ratio=window_pool_ratio), score_bytes))
    return out
