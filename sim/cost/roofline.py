"""Cost models: how long one engine step takes.

All share one interface, `step_time(plan) -> seconds`, plus `step_cost(plan) -> StepCost` with the
FLOPs and bytes behind it (for utilization figures). The engine is handed an object; it never
picks a cost model by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from sim.core.step_plan import StepPlan
from sim.cost import compiled_pricing, roofline_kernel
from sim.cost.compiled_pricing import KIND_ROOFLINE
from sim.cost.packed import PackedCostModel
from sim.cost.step_args import NO_CHUNKS, step_args
from sim.errors import ConfigError
from sim.jit import HAVE_NUMBA
from sim.model.attention_io import ATTENTION_KERNELS, ELEMENTWISE_PASSES, math_sdpa_terms
from sim.model.attention_io import heads_per_gpu as attention_heads_per_gpu
from sim.model.memory import DTYPE_BYTES, check_fp4_products, check_weight_dtype, kv_bytes_per_token, param_bytes
from sim.model.shapes import GpuLinear, gpu_layer_groups, gpu_linear, lm_head_shape
from sim.model.specs import ExpertGroup, GPUSpec, ModelSpec



_ATTENTION_DTYPES = ("bf16", "fp16", "fp32")  # what attention's Q, K, V and O may be


class StepCost(NamedTuple):
    """One step's price. A named tuple, not a dataclass: decode runs build one per step, and a frozen
    dataclass takes ~3x longer to construct."""

    time_s: float  # wall time of the step on one replica
    flops: float  # floating-point operations per GPU
    bytes: float  # HBM bytes moved per GPU


@dataclass(frozen=True, slots=True)
class _Matmul:
    """A weight matrix group of one layer, per GPU: params read per step, params each token multiplies."""

    weight_params: float  # parameters stored on one GPU (all experts)
    params_per_token: float  # parameters one token multiplies on one GPU
    num_experts: int  # >1: mixture of experts; only the experts some token routes to are read
    experts_per_token: float
    in_features: int
    out_features: int
    bytes_per_param: float  # what a product reads per weight param (`sim.model.memory.param_bytes`)
    group_tokens: bool = False  # it runs a lockstep group's tokens (`GpuLinear.group_tokens`)


def matmul_peak_flops(gpu: GPUSpec, weight_dtype: str, fp8_compute: bool) -> float:
    """The tensor-core peak a model's matrix products run at, every one of them (the 16-bit LM head too, a small
    share): FP4's for nvfp4 weights (W4A4; refused on a GPU without it), fp8's under fp8_compute where the GPU has
    an fp8 rate, else bf16's."""
    check_fp4_products(gpu, weight_dtype)
    if weight_dtype == "nvfp4":
        return gpu.fp4_flops_per_s
    return gpu.fp8_flops_per_s if (fp8_compute and gpu.fp8_flops_per_s) else gpu.bf16_flops_per_s


# FlashMLA's sparse kernel takes the query heads in multiples of these (Hopper, Blackwell); fewer are padded with zeros.
SPARSE_MLA_HEAD_MULTIPLE, SPARSE_MLA_HEAD_MULTIPLE_BLACKWELL = 64, 128


class RooflineCostModel(PackedCostModel):
    """Analytical roofline per op: max(FLOPs / (peak × efficiency), bytes / (bandwidth × efficiency)).

    Per layer: the linear layers (weights read once per step, 2 FLOPs per parameter per token),
    attention for prefill chunks (causal FLOPs against their context) and decodes (reading each
    request's KV), norms and activations, and under tensor parallelism two all-reduces over the
    interconnect; then the LM head for sampled rows, plus a fixed per-step overhead.

    The arithmetic is `sim.cost.roofline_kernel`'s (numba), the one definition both engines call (through
    `sim.cost.compiled_pricing`); this class holds the model's numbers and packs them for it (`sim.cost.packed`).
    """

    def __init__(self, model: ModelSpec, gpu: GPUSpec, *, tensor_parallel: int = 1,
                 weight_dtype: str = "bf16", kv_dtype: str = "bf16", fp8_compute: bool = False,
                 compute_efficiency: float | None = None, memory_efficiency: float | None = None,
                 step_overhead_s: float | None = None, attention_kernel: str = "flash",
                 attention_dtype: str = "bf16", expert_parallel: int = 1, expert_group: ExpertGroup | None = None):
        if attention_kernel not in ATTENTION_KERNELS:
            raise ConfigError(f"attention.kernel: {attention_kernel!r} is not allowed; allowed: "
                              f"{', '.join(ATTENTION_KERNELS)}")
        if attention_dtype not in _ATTENTION_DTYPES:
            raise ConfigError(f"attention_dtype: {attention_dtype!r} is not allowed; allowed: "
                              f"{', '.join(_ATTENTION_DTYPES)}")
        self.model, self.gpu, self.tp, self.ep = model, gpu, tensor_parallel, expert_parallel
        # A lockstep rank's: how its group spreads the routed experts (None: over its own tensor-parallel GPUs;
        # `sim.model.shapes.gpu_linear`), its steps' experts priced at the group's tokens (`StepPlan.num_expert_tokens`)
        self.expert_group = expert_group
        expert_gpus = expert_group.gpus if expert_group is not None else 0
        self.attention_kernel = attention_kernel
        self.weight_dtype, self.kv_dtype = weight_dtype, kv_dtype
        peak = matmul_peak_flops(gpu, weight_dtype, fp8_compute)
        self.flops_per_s = peak * (compute_efficiency or gpu.compute_efficiency)
        self.bytes_per_s = gpu.hbm_bytes_per_s * (memory_efficiency or gpu.memory_efficiency)
        self.link_bytes_per_s = gpu.interconnect_bytes_per_s * gpu.interconnect_efficiency
        self.step_overhead_s = gpu.step_overhead_s if step_overhead_s is None else step_overhead_s
        if model.index_topk and attention_kernel != "flash":
            raise ConfigError(f"attention.kernel: {attention_kernel!r} is not allowed for {model.name}'s sparse "
                              "attention; allowed: flash")
        # The attention's own KV; a sparse-attention indexer's keys are priced apart (`indexer_parts`).
        self.kv_bytes_per_token_layer = kv_bytes_per_token(model, kv_dtype, tensor_parallel,
                                                           indexer=False) / model.num_layers
        # A preempted request's KV swapped over the host link, a token at a time: every layer's, the indexer's keys
        # too; each GPU moves its own shard over its own link. Every cost model prices a swap so.
        self.swap_s_per_token = kv_bytes_per_token(model, kv_dtype, tensor_parallel) / gpu.host_link_bytes_per_s
        # DeepSeek sparse attention's indexer, on every GPU whole (SGLang's Indexer: replicated): per (query, key)
        # pair each head's FP8 q.k, then its ReLU and the heads' weighted sum; per query its FP8 query and 4-byte
        # head weights; at the GPU's fp8 rate where it has one (DeepGEMM's fp8 MQA logits).
        self.index_flops_per_pair = 2.0 * model.index_n_heads * (model.index_head_dim + 1)
        self.index_q_bytes_per_token = model.index_n_heads * (model.index_head_dim + 4)
        index_peak = gpu.fp8_flops_per_s or gpu.bf16_flops_per_s
        self.index_flops_per_s = index_peak * (compute_efficiency or gpu.compute_efficiency)
        self.index_speedup = index_peak / gpu.bf16_flops_per_s  # its rate over bf16's (the measured model's shape)
        heads_per_gpu = attention_heads_per_gpu(model, tensor_parallel)
        if model.index_topk:
            # DeepSeek sparse attention runs FlashMLA's sparse kernel (SGLang's nsa backend, vLLM's FLASHMLA_SPARSE;
            # TensorRT-LLM's was not read): MLA absorbed, each head's query against the 576-wide latent and
            # rope key, its output the 512-wide latent, and the heads padded to the kernel's multiple (64 on
            # Hopper, 128 on Blackwell: vLLM's flashmla_sparse.py `padding`, SGLang's nsa_backend.py
            # `_forward_flashmla_sparse`), so 16 heads a GPU run as 64. A decode is priced so too (vLLM's bf16 KV runs
            # it there; SGLang's fa3 decode does not pad): at the catalog's H200 rates its KV read bounds it either
            # way (64 heads: 121 FLOPs a byte of bf16 latent, against 180 for the rates' ratio).
            qk_dim, v_dim = model.kv_lora_rank + model.qk_rope_head_dim, model.kv_lora_rank
            multiple = SPARSE_MLA_HEAD_MULTIPLE_BLACKWELL if gpu.blackwell else SPARSE_MLA_HEAD_MULTIPLE
            heads_per_gpu = -(-heads_per_gpu // multiple) * multiple
        elif model.attention == "mla":
            qk_dim = model.qk_nope_head_dim + model.qk_rope_head_dim
            v_dim = model.v_head_dim
        else:
            qk_dim = v_dim = model.head_dim
        # Per (query, key) pair: QK^T and PV, 2 FLOPs per multiply-add.
        self.attn_flops_per_pair = 2.0 * heads_per_gpu * (qk_dim + v_dim)
        # Q read and O written, in the attention's dtype (serving: bf16/fp16; the CPU benchmark: fp32).
        attn_bytes = DTYPE_BYTES[attention_dtype]
        self.q_bytes_per_token = heads_per_gpu * (qk_dim + v_dim) * attn_bytes
        # A flash kernel's one new buffer, where the device pays a first touch: O.
        self.flash_fresh_bytes_per_query = heads_per_gpu * v_dim * attn_bytes
        # Materialized scores (`roofline_kernel.materialized_parts`): torch's math SDPA's passes for inputs of
        # `attn_bytes` (`attention_io.MATH_SDPA_PASSES`: fp32 scores whatever the inputs), per (query, key) pair of
        # every head on this GPU, per query and per key token. Its ops run in fp32 whatever the inputs (torch casts
        # bf16/fp16 Q, K and V to fp32 first), so they are priced at the device's fp32 rate: on a GPU its CUDA cores',
        # as torch runs an fp32 matmul unless TF32 is allowed (`GPUSpec.fp32_flops_per_s`; not known: the bf16 rate).
        fp32_peak = gpu.fp32_flops_per_s or gpu.bf16_flops_per_s
        self.score_flops_per_s = fp32_peak * (compute_efficiency or gpu.compute_efficiency)
        self.score_bytes_per_pair, passes, self.fresh_bytes = math_sdpa_terms(heads_per_gpu, qk_dim, v_dim, attn_bytes)
        units = {"pair": roofline_kernel.U_PAIR, "query": roofline_kernel.U_QUERY, "key": roofline_kernel.U_KEY}
        # A device that does each pass's own work on top of its memory time (a CPU core: `GPUSpec.pass_s_per_element`)
        # adds those seconds per unit.
        own_s = gpu.pass_s_per_element or {}
        unknown = sorted(set(own_s) - set(ELEMENTWISE_PASSES))
        if unknown:
            raise ConfigError(f"hardware.gpu.pass_s_per_element: {unknown[0]!r} is not allowed; allowed: "
                              f"{', '.join(ELEMENTWISE_PASSES)}")
        self.materialized_passes = [(units[unit], nbytes, flops, elements * own_s.get(op, 0.0))
                                    for op, unit, nbytes, flops, elements in passes]
        check_weight_dtype(model, weight_dtype)
        self.groups = [(n, [self._matmul(g, weight_dtype) for g in gpu_shapes])
                       for n, gpu_shapes in gpu_layer_groups(model, tensor_parallel, expert_parallel, expert_gpus,
                                                         expert_group.dense_gpus if expert_group else 0)]
        self.lm_head = self._matmul(gpu_linear(lm_head_shape(model), tensor_parallel), weight_dtype)
        self.hidden = model.hidden_size
        self.ffn_per_gpu = model.ffn_size / tensor_parallel
        self.include_lm_head = True  # False for a pipeline stage before the last: the LM head runs on the last

    def _build_pack(self) -> tuple:
        return roofline_kernel.pack(self)

    @staticmethod
    def _matmul(g: GpuLinear, weight_dtype: str) -> _Matmul:
        # Under expert parallelism a GPU holds count / EP whole experts and a token routes to active / EP of them in
        # expectation: under uniform routing its FLOPs and weight bytes equal tensor parallelism's at the same
        # number of GPUs (tests/unit/test_expert_parallel.py), its kernels (measured tables) do not.
        # The activations a GPU reads and writes are its shard's: a column-split matrix writes out / split of each
        # token's output, a row-split one reads in / split of its input (`GpuLinear`).
        params = g.shape.in_features * g.shape.out_features / g.split
        return _Matmul(params * g.count, params * g.active_per_token, g.count, g.active_per_token,
                       g.in_features, g.out_features, param_bytes(g.shape, weight_dtype), g.group_tokens)

    def __repr__(self) -> str:
        # The kernel is named only when it is not the default, so that a flash run's records read as before.
        attention = "" if self.attention_kernel == "flash" else f", attention={self.attention_kernel}"
        if self.attention_kernel == "materialized" and self.gpu.fp32_flops_per_s is None:
            attention += " (its fp32 matmuls at the bf16 rate: the GPU gives no fp32_flops_per_s)"
        ep = f" ep{self.ep}" if self.ep > 1 else ""
        if self.expert_group is not None:
            ep += f", experts over {self.expert_group.gpus} GPUs"
        return (f"RooflineCostModel({self.model.name} on {self.gpu.name} x{self.tp}{ep}, "
                f"weights={self.weight_dtype}, kv={self.kv_dtype}{attention})")


    def step_cost(self, plan: StepPlan) -> StepCost:
        return StepCost(*compiled_pricing.price_parts(KIND_ROOFLINE, self._pack(), None, None, *step_args(plan)))

    def step_time(self, plan: StepPlan) -> float:
        return self.step_cost(plan).time_s

    def compiled_params(self) -> tuple | None:
        """This model's pack for the compiled engine core (`sim.compiled`), through `sim.cost.compiled_pricing`;
        None for a subclass that prices otherwise, or without numba."""
        same_prices = type(self) is RooflineCostModel or type(self).__dict__.get("PRICES_AS_ROOFLINE", False)
        if not same_prices or not HAVE_NUMBA:
            return None
        return compiled_pricing.pricer(self._pack())

    def decode_step_costs(self, num_seqs: int, context_tokens: int, num_steps: int) -> list[StepCost]:
        """Costs of `num_steps` consecutive decode-only steps of `num_seqs` single-token decodes, the first
        attending `context_tokens` KV tokens (new ones included), each next one `num_seqs` more: `step_cost`
        of each, in one call."""
        return decode_run_costs(KIND_ROOFLINE, self._pack(), None, None, num_seqs, context_tokens, num_steps)


def step_costs(rows) -> list[StepCost]:
    """A pricer's (time_s, FLOPs, bytes) rows as StepCosts."""
    return list(map(StepCost._make, rows.tolist()))


def decode_run_costs(kind: int, roofline: tuple, steps: tuple | None, measured: tuple | None, num_seqs: int,
                     context_tokens: int, num_steps: int) -> list[StepCost]:
    """`compiled_pricing.decode_run` as StepCosts. A run of one step, as the engine prices every plain decode step
    before it knows whether a run follows, is priced as that step (a third of the time: no array to build)."""
    if num_steps == 1:
        return [StepCost(*compiled_pricing.price_parts(kind, roofline, steps, measured, 0, NO_CHUNKS, NO_CHUNKS, 0,
                                                       num_seqs, context_tokens, num_seqs, 1, 0, 0, 0))]
    return step_costs(compiled_pricing.decode_run(kind, roofline, steps, measured, num_seqs, context_tokens,
                                                  num_steps))


class FixedCostModel:
    """Step times that ignore the batch: `prefill_s` if any prefill is in the step, else `decode_s`.

    For queueing-theory checks and for speculative-decoding known answers, where a deterministic
    service time is the point.
    """

    def __init__(self, prefill_s: float, decode_s: float):
        self.prefill_s, self.decode_s = prefill_s, decode_s

    def __repr__(self) -> str:
        return f"FixedCostModel(prefill_s={self.prefill_s}, decode_s={self.decode_s})"

    def step_cost(self, plan: StepPlan) -> StepCost:
        return StepCost(self.prefill_s if plan.prefill_request_ids else self.decode_s, 0.0, 0.0)

    def step_time(self, plan: StepPlan) -> float:
        return self.step_cost(plan).time_s


class SpeculativeCostModel:
    """A target cost model plus the draft model's work: γ draft decode steps per speculative step,
    and the draft's own prefill of every prompt chunk. The draft is either a cost model (a catalog
    model through the same roofline) or a ratio c = draft step time / target step time.
    """

    def __init__(self, target, *, draft=None, draft_cost_ratio: float | None = None,
                 sync_overhead_fraction: float = 0.0, draft_tree_width: int = 1):
        if (draft is None) == (draft_cost_ratio is None):
            raise ValueError("give exactly one of draft and draft_cost_ratio")
        self.target, self.draft, self.ratio = target, draft, draft_cost_ratio
        self.sync_overhead_fraction = sync_overhead_fraction
        self.draft_tree_width = draft_tree_width  # drafts a request each draft step after the first computes

    def __repr__(self) -> str:
        draft = repr(self.draft) if self.draft is not None else f"c={self.ratio}"
        return f"SpeculativeCostModel(target={self.target!r}, draft={draft})"

    def _draft_cost(self, plan: StepPlan) -> StepCost:
        """The draft's prefill of this step's chunks plus its γ decode steps: one token a request, then, for a tree
        of width w, w tokens a request each step (each branch a sequence of the request's context)."""
        gamma, width = plan.num_draft_tokens, self.draft_tree_width
        prefill = StepPlan(prefill_request_ids=plan.prefill_request_ids, prefill_chunk_tokens=plan.prefill_chunk_tokens,
                           prefill_context_tokens=plan.prefill_context_tokens, num_sampled_seqs=0)
        parts = [prefill] if plan.prefill_request_ids else []
        n = plan.num_decode_seqs
        base_ctx = plan.decode_context_tokens - n * plan.decode_query_tokens
        for i in range(gamma):
            seqs, branches = (n, 1) if i == 0 else (n * width, width)
            parts.append(StepPlan(num_decode_seqs=seqs, decode_context_tokens=branches * (base_ctx + n * (i + 1)),
                                  num_sampled_seqs=seqs))
        if self.draft is not None:
            costs = [self.draft.step_cost(p) for p in parts]
            return StepCost(sum(c.time_s for c in costs), sum(c.flops for c in costs), sum(c.bytes for c in costs))
        # A bare cost ratio says how long the draft takes, not what it computes or reads.
        return StepCost(self.ratio * sum(self.target.step_time(p) for p in parts), 0.0, 0.0)

    def step_cost(self, plan: StepPlan) -> StepCost:
        verify = self.target.step_cost(plan)
        if not plan.num_draft_tokens:
            return verify
        draft = self._draft_cost(plan)
        time_s = verify.time_s * (1.0 + self.sync_overhead_fraction) + draft.time_s
        return StepCost(time_s, verify.flops + draft.flops, verify.bytes + draft.bytes)

    def step_time(self, plan: StepPlan) -> float:
        return self.step_cost(plan).time_s
