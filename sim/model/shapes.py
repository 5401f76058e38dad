"""The shapes a model's weights take: linear layers per layer group, LM head, norms, parameter counts."""

from __future__ import annotations

from dataclasses import dataclass

from sim.model.specs import LinearShape, ModelSpec


def _attention_shapes(m: ModelSpec) -> list[LinearShape]:
    if m.attention == "mla":
        # DeepSeek-V2 MLA: keys/values are rebuilt per head from one shared latent (kv_a), which every
        # tensor-parallel rank needs in full, so kv_a is replicated; kv_b expands it per head.
        qk_head_dim = m.qk_nope_head_dim + m.qk_rope_head_dim
        q_out = m.num_attention_heads * qk_head_dim
        if m.q_lora_rank:
            q = [
                LinearShape("q_a_proj", m.hidden_size, m.q_lora_rank, 1, "replicated", 1),
                LinearShape("q_b_proj", m.q_lora_rank, q_out, 1, "column", 1),
            ]
        else:
            q = [LinearShape("q_proj", m.hidden_size, q_out, 1, "column", 1)]
        if m.index_topk:  # DeepSeek sparse attention's indexer, whole on every rank (SGLang's Indexer: replicated)
            q += [LinearShape("index_q", m.q_lora_rank, m.index_n_heads * m.index_head_dim, 1, "replicated", 1),
                  LinearShape("index_k", m.hidden_size, m.index_head_dim, 1, "replicated", 1),
                  LinearShape("index_weights", m.hidden_size, m.index_n_heads, 1, "replicated", 1)]
        return q + [
            LinearShape("kv_a_proj", m.hidden_size, m.kv_lora_rank + m.qk_rope_head_dim, 1, "replicated", 1),
            LinearShape(
                "kv_b_proj",
                m.kv_lora_rank,
                m.num_attention_heads * (m.qk_nope_head_dim + m.v_head_dim),
                1,
                "column",
                1,
            ),
            LinearShape("attn_out", m.num_attention_heads * m.v_head_dim, m.hidden_size, 1, "row", 1),
        ]
    qkv_out = (m.num_attention_heads + 2 * m.num_kv_heads) * m.head_dim
    return [
        LinearShape("qkv", m.hidden_size, qkv_out, 1, "column", 1, m.attention_bias or m.linear_bias),
        LinearShape("attn_out", m.num_attention_heads * m.head_dim, m.hidden_size, 1, "row", 1, m.linear_bias),
    ]


def _mlp_shapes(m: ModelSpec, ffn: int, prefix: str = "", count: int = 1, active: float = 1) -> list[LinearShape]:
    if m.gated_mlp:
        return [
            LinearShape(f"{prefix}gate_up", m.hidden_size, 2 * ffn, count, "column", active, m.linear_bias),
            LinearShape(f"{prefix}down", ffn, m.hidden_size, count, "row", active, m.linear_bias),
        ]
    return [
        LinearShape(f"{prefix}fc1", m.hidden_size, ffn, count, "column", active, m.linear_bias),
        LinearShape(f"{prefix}fc2", ffn, m.hidden_size, count, "row", active, m.linear_bias),
    ]


def layer_groups(model: ModelSpec) -> list[tuple[int, list[LinearShape]]]:
    """(number of layers, weight matrices of one such layer) for each kind of layer, in order."""
    attention = _attention_shapes(model)
    if not model.is_moe:
        return [(model.num_layers, attention + _mlp_shapes(model, model.ffn_size))]
    k = model.num_experts_per_token
    moe = [LinearShape("router", model.hidden_size, model.num_experts, 1, "replicated", 1)]
    moe += _mlp_shapes(model, model.ffn_size, "experts_", model.num_experts, k)
    if model.num_shared_experts:
        # One MLP as wide as all the shared experts, as the engines build it (vLLM's DeepseekV2MoE: intermediate
        # moe_intermediate_size x n_shared_experts): every token passes through it, so it is dense.
        moe += _mlp_shapes(model, model.ffn_size * model.num_shared_experts, "shared_")
    groups = []
    if model.num_dense_layers:
        dense_ffn = model.dense_ffn_size or model.ffn_size
        groups.append((model.num_dense_layers, attention + _mlp_shapes(model, dense_ffn)))
    groups.append((model.num_layers - model.num_dense_layers, attention + moe))
    return groups


@dataclass(frozen=True)
class GpuLinear:
    """One kind of weight matrix as one GPU of a tensor-parallel group holds it: the one rule every cost model and
    the memory budget read, so that tensor and expert parallelism split a matrix the same way everywhere."""

    shape: LinearShape  # the full, unsharded matrix
    split: int  # GPUs sharing each matrix (1: every GPU holds it whole)
    count: int  # matrices of this kind on this GPU (the experts it holds)
    active_per_token: float  # of them, how many one token passes through, in expectation under uniform routing
    group_tokens: bool = False  # it runs a lockstep group's gathered tokens (`sim.model.specs.ExpertGroup`)

    @property
    def in_features(self) -> int:
        return self.shape.in_features // self.split if self.shape.tp_split == "row" else self.shape.in_features

    @property
    def out_features(self) -> int:
        return self.shape.out_features // self.split if self.shape.tp_split == "column" else self.shape.out_features


def is_routed_expert(shape: LinearShape) -> bool:
    return shape.name.startswith("experts_")


def is_dense_mlp(shape: LinearShape) -> bool:
    """A dense layer's MLP matrix or a shared expert's (`_mlp_shapes` without the routed experts' prefix)."""
    return shape.name in ("gate_up", "down", "fc1", "fc2") or shape.name.startswith("shared_")


def gpu_linear(shape: LinearShape, tensor_parallel: int, expert_parallel: int = 1, expert_gpus: int = 0,
               dense_gpus: int = 0) -> GpuLinear:
    """`shape` on one GPU. Tensor parallelism splits every matrix that is not replicated across the group. Expert
    parallelism (`expert_parallel` GPUs of the group) gives each GPU whole routed experts, `count / expert_parallel`
    of them, and splits each one over the remaining `tensor_parallel / expert_parallel` GPUs, as vLLM's
    `--enable-expert-parallel`, SGLang's `--ep-size` and TensorRT-LLM's `moe_expert_parallel_size` do without
    data-parallel attention (`sim.model.memory.check_expert_parallel` holds the sizes allowed). `expert_gpus` (0:
    the tensor-parallel group's): the GPUs the routed experts spread over instead, a lockstep data-parallel group's
    (vLLM's experts under --data-parallel-size: sim/core/lockstep.py), `expert_parallel` of them holding whole
    experts (`sim.model.memory.check_expert_group`); `dense_gpus` (0: the rank's own): the GPUs the dense MLPs
    (dense layers', shared experts') spread over at the group's tokens (SGLang's data-parallel attention:
    `ExpertGroup.dense_gpus`). Both run the group's tokens (`GpuLinear.group_tokens`)."""
    if shape.tp_split == "replicated":
        return GpuLinear(shape, 1, shape.count, shape.active_per_token)
    if expert_gpus and is_routed_expert(shape):
        return GpuLinear(shape, expert_gpus // expert_parallel, shape.count // expert_parallel,
                         shape.active_per_token / expert_parallel, True)
    if dense_gpus and is_dense_mlp(shape):
        return GpuLinear(shape, dense_gpus, shape.count, shape.active_per_token, True)
    if expert_parallel > 1 and is_routed_expert(shape):
        return GpuLinear(shape, tensor_parallel // expert_parallel, shape.count // expert_parallel,
                         shape.active_per_token / expert_parallel)
    return GpuLinear(shape, tensor_parallel, shape.count, shape.active_per_token)


def gpu_layer_groups(model: ModelSpec, tensor_parallel: int, expert_parallel: int = 1,
                     expert_gpus: int = 0, dense_gpus: int = 0) -> list[tuple[int, list[GpuLinear]]]:
    """`layer_groups` as one GPU holds them (`gpu_linear`)."""
    return [(n, [gpu_linear(s, tensor_parallel, expert_parallel, expert_gpus, dense_gpus) for s in shapes])
            for n, shapes in layer_groups(model)]


def lm_head_shape(model: ModelSpec) -> LinearShape:
    """The output projection; tensor parallelism splits it over the vocabulary."""
    return LinearShape("lm_head", model.hidden_size, model.vocab_size, 1, "column", 1)


def norm_param_count(model: ModelSpec) -> int:
    """Normalization weights: two per layer plus the final one (LayerNorm also has a bias: OPT),
    and MLA's norms on its compressed latents."""
    per_norm = 2 if model.linear_bias else 1
    latent = model.kv_lora_rank + model.q_lora_rank
    return (2 * model.num_layers + 1) * per_norm * model.hidden_size + model.num_layers * latent


def _shape_params(shape: LinearShape) -> int:
    return shape.count * (shape.in_features * shape.out_features + (shape.out_features if shape.has_bias else 0))


def param_count(model: ModelSpec) -> int:
    """Every weight: layers, embeddings, norms, biases, position table; a tied lm_head counted once."""
    layers = sum(n * sum(_shape_params(s) for s in shapes) for n, shapes in layer_groups(model))
    embeddings = model.vocab_size * model.hidden_size * (1 if model.tie_word_embeddings else 2)
    positions = model.learned_position_embeddings * model.hidden_size
    return layers + embeddings + positions + norm_param_count(model)


def active_param_count(model: ModelSpec) -> int:
    """Weights one token multiplies through: attention, active and shared experts, dense MLPs, norms,
    lm_head. Embedding and position lookups are excluded: they read one row, not the matrix."""
    layers = sum(
        n * sum(_shape_params(s) * s.active_per_token / s.count for s in shapes)
        for n, shapes in layer_groups(model)
    )
    head = lm_head_shape(model)
    return round(layers) + head.in_features * head.out_features + norm_param_count(model)


def kv_heads_per_gpu(model: ModelSpec, tensor_parallel: int) -> int:
    """KV heads each GPU holds: tensor parallelism splits them evenly, or, with fewer KV heads than ranks, each rank
    keeps one (a KV head replicated on tensor_parallel / num_kv_heads ranks)."""
    kv = model.num_kv_heads
    return kv // tensor_parallel if kv % tensor_parallel == 0 else 1


FP8_SCALE_BLOCK = 128  # quantization.fp8_block_scales: one scale per 128 x 128 block of a weight matrix


def _output_partitions(m: ModelSpec, g: GpuLinear) -> list[float]:
    """The per-GPU output widths of a column-split matrix, one per matrix merged into it (qkv: q, k and v; gate_up:
    gate and up): each must hold whole scale blocks."""
    shape = g.shape
    if shape.name == "qkv":
        kv_width = kv_heads_per_gpu(m, g.split) * m.head_dim
        return [m.num_attention_heads * m.head_dim / g.split, kv_width, kv_width]
    if shape.name.endswith("gate_up"):
        return [shape.out_features / 2 / g.split] * 2
    return [shape.out_features / g.split]


def block_scale_problem(model: ModelSpec, tp: int, expert_parallel: int = 1) -> str | None:
    """Why `tp` ranks cannot shard this model's block-scaled fp8 weights (None: they can). Each rank must hold whole
    128 x 128 scale blocks: a column-split matrix's output width per rank (each merged matrix's: gate and up, q, k
    and v), and a row-split one's input width per rank when it is split, must be multiples of 128, as the engines
    check when they load such a checkpoint (vLLM: validate_fp8_block_shape, Fp8MoEMethod.create_weights: "... is not
    divisible by weight quantization block_n"). Expert parallelism keeps each expert whole on fewer ranks."""
    b = FP8_SCALE_BLOCK
    for _, gpu_shapes in gpu_layer_groups(model, tp, expert_parallel):
        for g in gpu_shapes:
            shape = g.shape
            if shape.tp_split == "column":
                widths = _output_partitions(model, g)
            elif shape.tp_split == "row" and g.split > 1:
                widths = [shape.in_features / g.split]
            else:
                continue
            bad = next((w for w in widths if w % b), None)
            if bad is not None:
                split = "output" if shape.tp_split == "column" else "input"
                where = f"tensor_parallel {tp}" + (f", expert_parallel {expert_parallel}" if expert_parallel > 1
                                                   else "")
                return (f"{shape.name}'s {split} width per GPU is {bad:g} at {where}, not a multiple of the {b}-wide "
                        "fp8 scale blocks")
    return None
