"""Architecture and hardware descriptions: what a model is and what a GPU can do.

These are the shapes that catalog entries and inline scenario definitions are validated against.
Units are in the field names. Derived quantities (parameter counts, linear-layer shapes) live in
sim/catalog.py, so every consumer (memory math, cost models, calibration) agrees.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

AttentionKind = Literal["mha", "mqa", "gqa", "mla"]

# The largest any size or count of a model may be (layers, widths, heads, experts, vocabulary, context). The
# largest in any released model is Llama 4 Scout's 10,485,760-token context; 2^24 is above it, and a value
# beyond it (a corrupt config.json, a typo of 1e30) is not a model: its memory and FLOP arithmetic would be
# meaningless or too large to compute.
MAX_MODEL_DIM = 1 << 24


class RopeScaling(BaseModel):
    """One entry of a model's RoPE scaling (config.json `rope_scaling`, or `rope_parameters`, one per layer type): what
    the engines' context rules read of it (sim/config/engines/: `EnginePreset.context`). It changes no price."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    rope_type: str
    factor: float | None = Field(None, gt=0)
    original_max_position_embeddings: int | None = Field(None, gt=0, le=MAX_MODEL_DIM)


class ModelSpec(BaseModel):
    """A decoder-only transformer, described by its architecture (no weights)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # inf and nan are never a setting

    name: str
    num_layers: int = Field(gt=0, le=MAX_MODEL_DIM)
    hidden_size: int = Field(gt=0, le=MAX_MODEL_DIM)
    num_attention_heads: int = Field(gt=0, le=MAX_MODEL_DIM)
    num_kv_heads: int = Field(gt=0, le=MAX_MODEL_DIM)
    head_dim: int = Field(gt=0, le=MAX_MODEL_DIM)
    ffn_size: int = Field(gt=0, le=MAX_MODEL_DIM,
                          description="MLP intermediate size (per expert for mixture-of-experts)")
    vocab_size: int = Field(gt=0, le=MAX_MODEL_DIM)
    max_context: int = Field(gt=0, le=MAX_MODEL_DIM, description="maximum sequence length in tokens")
    rope_scaling: tuple[RopeScaling, ...] = Field((), description="config.json's RoPE scaling, which an engine's "
                                                  "context rule may scale max_context by (empty: none)")
    attention: AttentionKind = "gqa"
    gated_mlp: bool = Field(True, description="SwiGLU-style gate/up/down (3 matrices) vs plain fc1/fc2 (2)")
    sliding_window: int | None = Field(None, gt=0, le=MAX_MODEL_DIM,
                                       description="attention window in tokens; caps KV per sequence")
    sliding_window_layers: int | None = Field(
        None, gt=0, le=MAX_MODEL_DIM, description="how many layers attend through the window, the others to the "
        "whole context (gpt-oss: every other one; Gemma 3: five in six); None: every layer (Mistral)")
    tie_word_embeddings: bool = False
    attention_bias: bool = Field(False, description="biases on Q/K/V projections")
    linear_bias: bool = Field(False, description="biases on every linear layer (OPT)")
    learned_position_embeddings: int = Field(0, ge=0, le=MAX_MODEL_DIM,
                                             description="rows of a learned position table (OPT: 2050)")
    # Mixture of experts: 0 experts means a dense model.
    num_experts: int = Field(0, ge=0, le=MAX_MODEL_DIM)
    num_experts_per_token: int = Field(0, ge=0, le=MAX_MODEL_DIM)
    num_shared_experts: int = Field(0, ge=0, le=MAX_MODEL_DIM)
    num_dense_layers: int = Field(0, ge=0, le=MAX_MODEL_DIM,
                                  description="leading layers with a dense MLP in an MoE model")
    dense_ffn_size: int | None = Field(None, gt=0, le=MAX_MODEL_DIM,
                                       description="intermediate size of those dense layers")
    # Multi-head latent attention (DeepSeek-V2): the KV cache holds one compressed latent per token.
    kv_lora_rank: int = Field(0, ge=0, le=MAX_MODEL_DIM)
    q_lora_rank: int = Field(0, ge=0, le=MAX_MODEL_DIM, description="0: queries are not compressed")
    qk_rope_head_dim: int = Field(0, ge=0, le=MAX_MODEL_DIM)
    qk_nope_head_dim: int = Field(0, ge=0, le=MAX_MODEL_DIM)
    v_head_dim: int = Field(0, ge=0, le=MAX_MODEL_DIM)
    # DeepSeek sparse attention (DeepSeek-V3.2; SGLang 0.5.6.post2 layers/attention/nsa/nsa_indexer.py): an indexer of
    # index_n_heads heads of index_head_dim scores every earlier token in FP8, and MLA attends only the index_topk it
    # ranks highest.
    index_topk: int = Field(0, ge=0, le=MAX_MODEL_DIM, description="keys each query attends; 0: dense attention")
    index_n_heads: int = Field(0, ge=0, le=MAX_MODEL_DIM)
    index_head_dim: int = Field(0, ge=0, le=MAX_MODEL_DIM)
    published_params: float | None = Field(None, gt=0, description="published parameter count, for checking")
    not_modelled: str | None = Field(None, description="what the simulation leaves out of this architecture (the "
                                     "Hugging Face reader's `IGNORED`), shown beside every run of it")
    model_type: str | None = Field(None, description="the Hugging Face model_type it was read as (gpt_oss, gemma2, "
                                   "...): engine presets key some rules on the architecture")

    @model_validator(mode="after")
    def _consistent(self) -> "ModelSpec":
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_kv_heads={self.num_kv_heads}"
            )
        if self.attention == "mha" and self.num_kv_heads != self.num_attention_heads:
            raise ValueError("attention 'mha' needs num_kv_heads == num_attention_heads")
        if self.attention == "mqa" and self.num_kv_heads != 1:
            raise ValueError("attention 'mqa' needs num_kv_heads == 1")
        if self.attention == "mla" and not (self.kv_lora_rank and self.qk_rope_head_dim):
            raise ValueError("attention 'mla' needs kv_lora_rank and qk_rope_head_dim")
        if self.index_topk and not (self.attention == "mla" and self.index_n_heads and self.index_head_dim):
            raise ValueError("index_topk (sparse attention) needs attention 'mla', index_n_heads and index_head_dim")
        if self.index_topk and self.sliding_window is not None:
            raise ValueError("index_topk (sparse attention) and sliding_window cannot both be set")
        if self.sliding_window_layers is not None:
            if self.sliding_window is None:
                raise ValueError("sliding_window_layers needs a sliding_window")
            if self.sliding_window_layers > self.num_layers:
                raise ValueError(f"sliding_window_layers={self.sliding_window_layers} is more than "
                                 f"num_layers={self.num_layers}")
        if self.num_experts and not (0 < self.num_experts_per_token <= self.num_experts):
            raise ValueError("num_experts_per_token must be between 1 and num_experts")
        return self

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def index_key_bytes(self) -> int:
        """Bytes of one token's indexer key in one layer: FP8 values and a 4-byte scale per 128 (SGLang's
        NSATokenToKVPool index_k_with_scale_buffer: index_head_dim + index_head_dim // 128 * 4); 0: dense attention."""
        return self.index_head_dim + self.index_head_dim // 128 * 4 if self.index_topk else 0

    @property
    def num_window_layers(self) -> int:
        """Layers that attend through the sliding window (0: none has one)."""
        if self.sliding_window is None:
            return 0
        return self.num_layers if self.sliding_window_layers is None else self.sliding_window_layers

    @property
    def hybrid_window(self) -> bool:
        """Some layers slide and the others attend to everything (gpt-oss, Gemma 2 and 3): the sliding layers'
        KV stops growing at the window while the others' grows with the context."""
        return 0 < self.num_window_layers < self.num_layers

    @property
    def window_layer_share(self) -> float:
        """The fraction of layers whose attention the window caps (1: every layer, as Mistral; 0: no window)."""
        return self.num_window_layers / self.num_layers

    def served(self, sliding_window: bool = True) -> "ModelSpec":
        """The model as an engine serves it: with `sliding_window` false its sliding-window layers attend to, and
        keep, every token, as the other layers do (vLLM's --disable-sliding-window; the scenario's
        `attention.sliding_window`)."""
        if sliding_window or self.sliding_window is None:
            return self
        return self.model_copy(update={"sliding_window": None, "sliding_window_layers": None})


class GPUSpec(BaseModel):
    """One accelerator: peak rates, memory, links, price, and the efficiencies the roofline applies."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # inf and nan are never a setting

    name: str
    bf16_flops_per_s: float = Field(gt=0, description="dense (no sparsity) bf16 tensor-core peak")
    fp8_flops_per_s: float | None = Field(None, gt=0, description="dense fp8 peak; None where unsupported")
    fp4_flops_per_s: float | None = Field(None, gt=0, description="dense FP4 peak (Blackwell's tensor cores, which run "
                                          "NVFP4 products); None where unsupported")
    fp32_flops_per_s: float | None = Field(
        None, gt=0, description="fp32 peak without tensor cores (a GPU's CUDA cores): what torch runs an fp32 "
        "matrix product on unless TF32 is allowed, so what the materialized attention kernel's fp32 matmuls reach "
        "(`sim.model.attention_io.MATH_SDPA_PASSES`); None: not known, and that kernel is priced at the bf16 rate")
    hbm_bytes: int = Field(gt=0, description="device memory")
    hbm_bytes_per_s: float = Field(gt=0)
    interconnect_bytes_per_s: float = Field(gt=0, description="GPU-to-GPU bandwidth per direction")
    host_link_bytes_per_s: float = Field(gt=0, description="GPU-to-host (PCIe) bandwidth per direction")
    price_per_hour: float = Field(ge=0, description="USD per GPU-hour; editable")
    compute_capability: tuple[int, int] | None = Field(
        None, description="CUDA compute capability (major, minor): what engines key architecture-specific defaults on "
        "(vLLM's MLA kernel and its KV block size); None: not an NVIDIA GPU, or unknown")
    kernels_as: str | None = Field(
        None, description="the catalog GPU whose measured kernel tables price this part's kernels where it has none "
        "of its own: the same die, clocks and memory sold with other links (the H800 is the H100 SXM's); its "
        "collectives are priced on its own interconnect (`sim.cost.measured.tables_gpu`). None: its own tables only")
    compute_efficiency: float = Field(0.7, gt=0, le=1, description="fraction of peak FLOP/s a GEMM reaches")
    memory_efficiency: float = Field(0.8, gt=0, le=1, description="fraction of peak HBM bandwidth reached")
    interconnect_efficiency: float = Field(0.7, gt=0, le=1)
    allreduce_latency_s: float = Field(10e-6, ge=0, description="fixed latency of one all-reduce")
    step_overhead_s: float = Field(3e-3, ge=0, description="fixed per-step CPU/launch overhead of the engine")
    # What a device other than the catalog's GPUs may add (a CPU: benchmarks/bench_attention.py describes one). Absent
    # (None), each prices as before. Only attention reads them (`sim.cost.roofline_kernel.attention_parts`).
    cache_bytes: int | None = Field(None, gt=0, description="last-level cache (a CPU's L3, a GPU's L2): a pass over "
                                    "materialized scores that moves at most this many bytes runs at its bandwidth")
    cache_bytes_per_s: float | None = Field(None, gt=0, description="that cache's bandwidth (given with cache_bytes)")
    first_touch_bytes_per_s: float | None = Field(
        None, gt=0, description="rate at which newly allocated memory is first written (page faults, zeroing): every "
        "new buffer of an attention kernel pays it; None: a caching allocator reuses its memory (a GPU)")
    flash_key_block: int | None = Field(
        None, gt=0, description="keys per block of the flash kernel: a query row computes the whole block holding its "
        "own key, masked (torch's CPU kernel: 512); None: exactly the causal pairs")
    pass_s_per_element: dict[str, float] | None = Field(
        None, description="seconds per element of each of the materialized kernel's elementwise passes with its "
        "data in cache (`sim.model.attention_io.ELEMENTWISE_PASSES` names them): the pass's own work, paid on top of "
        "its memory time, as one CPU core does; None: the passes are memory-bound (a GPU)")

    @model_validator(mode="after")
    def _cache_whole(self) -> "GPUSpec":
        if (self.cache_bytes is None) != (self.cache_bytes_per_s is None):
            raise ValueError("cache_bytes and cache_bytes_per_s go together: give both or neither")
        if self.pass_s_per_element is not None:  # its names are checked where they are read (RooflineCostModel)
            for op, seconds in self.pass_s_per_element.items():
                if not (math.isfinite(seconds) and seconds > 0):
                    raise ValueError(f"pass_s_per_element.{op}: {seconds!r} is not allowed; allowed: a number > 0")
        return self

    @property
    def blackwell(self) -> bool:
        """Compute capability 10.x or later (B200, GB200, B300): where engines and kernels switch to Blackwell's."""
        return self.compute_capability is not None and self.compute_capability[0] >= 10


@dataclass(frozen=True, slots=True)
class LinearShape:
    """One weight matrix of a transformer layer (full, unsharded shape)."""

    name: str  # qkv, attn_out, gate_up, down, expert_gate_up, ..., lm_head
    in_features: int
    out_features: int
    count: int  # how many such matrices per layer (e.g. number of experts)
    tp_split: Literal["column", "row", "replicated"]  # how tensor parallelism shards it
    active_per_token: float  # how many of the `count` matrices one token passes through
    has_bias: bool = False


EXCHANGES = ("all_gather_reduce_scatter", "broadcast_all_reduce", "dp_attention")


@dataclass(frozen=True, slots=True)
class ExpertGroup:
    """How a lockstep data-parallel group spreads a mixture of experts' routed experts (sim/core/lockstep.py): over
    every rank's GPUs, each step's expert layers running the whole group's tokens, which the ranks exchange around
    each such layer over their data-parallel group (each rank's GPU with its peers at the same tensor-parallel
    position; vLLM's FusedMoE under --data-parallel-size). Exchange `dp_attention` (SGLang's data-parallel
    attention, sim/config/engines/sglang_dp_attention.py): every layer's MLP runs the gathered tokens over all the
    group's GPUs, its dense layers' and shared experts' too (`dense_over_group`), and the exchange spans them all."""

    gpus: int  # the GPUs holding the routed experts: ranks x each rank's tensor-parallel GPUs
    ranks: int  # the group's ranks
    exchange: Literal[EXCHANGES] = "all_gather_reduce_scatter"  # (`roofline_kernel.expert_exchange_s`)

    @property
    def exchange_gpus(self) -> int:
        """The GPUs each exchange spans: one per rank, its peers at the same tensor-parallel position alongside
        (`dp_attention`: every GPU of the group)."""
        return self.gpus if self.dense_over_group else self.ranks

    @property
    def dense_over_group(self) -> bool:
        """The dense MLPs (dense layers', shared experts') run the group's tokens over its GPUs, not the rank's own."""
        return self.exchange == "dp_attention"

    @property
    def dense_gpus(self) -> int:
        """The GPUs the dense MLPs spread over at the group's tokens (`sim.model.shapes.gpu_linear`); 0: the rank's."""
        return self.gpus if self.dense_over_group else 0
