"""Whole-step measurement: the primary GPU calibration (`python -m calibrate steps`).

A step is priced as an engine runs it: the project's own torch model of one GPU's shard of the model
(shapes from `sim.calibrated.shard_shapes`) runs every decoder layer — RMSNorm, fused QKV GEMM, rotary on
q and k, attention, output GEMM, residual, RMSNorm, fused gate/up GEMM, SiLU × up (ReLU for non-gated
MLPs), down GEMM, residual — then the final norm, the LM head on the sampled rows only, and argmax.
Random weights; GEMMs through torch (cuBLAS on a GPU). On a GPU the whole step is captured as ONE CUDA
graph per shape and replayed (no launch gaps, as an engine that graph-captures its steps); on a CPU the
same code runs eagerly under `time.perf_counter`. One mechanism, two devices.

Engines (a profile names its engine: the same model and kernels give steps 23% apart with and without
fusion, ../shared/gpu/README.md):
- `unfused`: every elementwise op plain torch (as ../shared/gpu/h100_llama-3.1-8b_whole_steps.csv);
- `fused`: the Triton kernels of calibrate/kernels/fused.py, as vLLM's custom ops: residual adds fused
  into the RMSNorms, rotary of q and k in one launch, SiLU × up in one (their torch fallbacks on a CPU);
- `compiled`: the layer pieces on either side of attention through `torch.compile(dynamic=False,
  fullgraph=True)`, attention left out of the compiled graph as vLLM's piecewise compilation does.

FP8 (`weights="fp8"`): the four GEMMs of each layer in W8A8 as vLLM runs an fp8 checkpoint with static
activation scales (Llama 3.1 8B Instruct FP8 and the like): e4m3 weights with one scale per tensor, each GEMM's
input quantized with a static per-tensor scale (in float32, clamped to ±448, then cast: `static_fp8_quant`, one
Triton launch in the fused engine, four torch ops unfused) and the product through `torch._scaled_mm` (cuBLASLt
fp8, bf16 out). The embedding, the LM head, the norms and attention stay in the activation dtype, as such
checkpoints keep them.

Attention: one prefill chunk of P tokens with X tokens of earlier context (causal, bottom-right aligned)
through SDPA; B decoding sequences of one new token each attending to C tokens (its own included)
through SDPA over a dense KV cache, or with `kv_layout="paged"` through the paged decode kernel
(calibrate/kernels/paged_attention.py; the torch gather path on a CPU). The new tokens' K/V are written
into the caches in place. Each layer has its own KV cache (a layer's attention reads its own, cold).
"""

from __future__ import annotations

import io
import json
import math
import os
import time
from dataclasses import dataclass, fields
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from sim.atomic_files import atomic_write_text
from sim.cost.calibrated import shard_shapes
from sim.errors import ConfigError
from sim.model.attention_io import ATTENTION_KERNELS
from sim.model.specs import ModelSpec

from .kernels import torch_ops as ops
from .timing import Timing

ENGINES = ("unfused", "fused", "compiled")
KV_LAYOUTS = ("dense", "paged")
STEP_GRIDS = ("quick", "full")
STEP_COLUMNS = ("kind", "prefill_tokens", "prefill_context", "decode_batch", "decode_context", "step_s", "p20_s",
                "p80_s")
TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# How the GEMM weights are stored: None (the activation dtype) or fp8 (W8A8, per-tensor scales; compiled: not yet)
WEIGHT_FORMATS = ("fp8",)
# The static scale of every GEMM input (fp8 = x / scale): the activations here are O(1) (normed, random weights
# scaled by fan-in), so |x| up to 8 is kept and larger values saturate, as a calibrated checkpoint's scale would.
FP8_INPUT_SCALE = 8.0 / 448.0
_EPS = 1e-6
# Share of device memory the KV caches of one grid point may take (the weights and activations need the rest).
KV_MEMORY_SHARE = 0.6
# Left free beside weights and KV: activations, the CUDA graph's pool, cuBLAS workspaces.
_HEADROOM_BYTES = 6 << 30

ENGINE_DESCRIPTIONS = {
    "unfused": "every elementwise op (RMSNorm, rotary, SiLU x up, residual adds) in plain torch, GEMMs through "
               "torch (cuBLAS), attention through torch SDPA",
    "fused": "Triton kernels as vLLM's custom ops (residual add fused into RMSNorm, rotary of q and k in one launch, "
             "SiLU x up in one), GEMMs through torch (cuBLAS), attention through torch SDPA",
    "compiled": "the layer pieces around attention through torch.compile (inductor, dynamic=False, fullgraph=True; "
                "attention outside the compiled graph as vLLM's piecewise compilation), GEMMs cuBLAS, SDPA attention",
}


@dataclass(frozen=True)
class StepShape:
    """One step of the grid: at most one prefill chunk plus a batch of decodes."""

    kind: str  # prefill | decode | mixed
    prefill_tokens: int  # tokens of the prefill chunk (0: none)
    prefill_context: int  # tokens of that sequence already in the KV cache before the chunk
    decode_batch: int  # sequences decoding one new token each
    decode_context: int  # tokens each decoding sequence attends to, its new token included

    @property
    def num_tokens(self) -> int:
        return self.prefill_tokens + self.decode_batch

    @property
    def sampled_rows(self) -> int:
        # The chunk is taken to finish its prompt: its last token is sampled, as is every decode.
        return (1 if self.prefill_tokens else 0) + self.decode_batch

    def key(self) -> tuple[str, int, int, int, int]:
        return (self.kind, self.prefill_tokens, self.prefill_context, self.decode_batch, self.decode_context)

    def kv_tokens(self) -> int:
        """KV slots the step's caches hold, per layer."""
        return self.prefill_context + self.prefill_tokens + self.decode_batch * self.decode_context


def _shape(prefill: int = 0, context: int = 0, batch: int = 0, decode_context: int = 0) -> StepShape:
    kind = "mixed" if prefill and batch else ("prefill" if prefill else "decode")
    return StepShape(kind, prefill, context if prefill else 0, batch, decode_context if batch else 0)


def step_grid(name: str, max_context: int) -> list[StepShape]:
    """The steps measured. `quick`: a handful of tiny steps for CPUs and CI; `full`: for a GPU."""
    if name == "quick":
        shapes = ([_shape(batch=b, decode_context=c) for c in (16, 48) for b in (1, 3)]
                  + [_shape(prefill=p) for p in (8, 24)] + [_shape(prefill=8, context=24)]
                  + [_shape(prefill=8, batch=2, decode_context=16)])
    elif name == "full":
        shapes = ([_shape(batch=b, decode_context=c) for c in (512, 2048, 8192) for b in (1, 4, 16, 32, 64, 128, 256)]
                  + [_shape(prefill=p) for p in (128, 512, 2048, 8192)]
                  + [_shape(prefill=512, context=x) for x in (2048, 8192)]
                  + [_shape(prefill=p, batch=b, decode_context=2048) for p in (128, 512, 2048) for b in (16, 64)])
    else:
        raise ValueError(name)
    return [s for s in shapes if s.prefill_context + s.prefill_tokens <= max_context and s.decode_context <= max_context]


# --- the model ---------------------------------------------------------------------------------------

@dataclass
class LayerWeights:
    input_norm: torch.Tensor  # [hidden]
    qkv: torch.Tensor  # [(q_heads + 2 kv_heads) · head_dim, hidden]
    qkv_bias: torch.Tensor | None
    attn_out: torch.Tensor  # [hidden, q_heads · head_dim]
    post_norm: torch.Tensor
    up: torch.Tensor  # gate_up [2 ffn, hidden] or fc1 [ffn, hidden]
    down: torch.Tensor  # [hidden, ffn]
    attn_out_bias: torch.Tensor | None = None
    up_bias: torch.Tensor | None = None
    down_bias: torch.Tensor | None = None
    # fp8 weights: each GEMM's per-tensor weight scale (float32 scalars), by field name; None in 16 bits
    scales: dict | None = None

    def nbytes(self) -> int:
        # fields(), not asdict(): asdict deep-copies every tensor
        values = [getattr(self, f.name) for f in fields(self)]
        return sum(t.numel() * t.element_size() for t in values if isinstance(t, torch.Tensor))


@dataclass
class StepInputs:
    """Everything one step reads, built once per grid point (static addresses for graph capture)."""

    shape: StepShape
    token_ids: torch.Tensor  # [tokens]
    positions: torch.Tensor  # [tokens]
    sample_index: torch.Tensor  # [sampled rows]: rows whose next token is picked
    prefill_kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer [1, kv_heads, X + P, d]
    decode_kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer: dense [B, kv_heads, C, d] or paged caches
    block_table: torch.Tensor | None = None  # paged: [B, blocks per sequence] int32
    context_lens: torch.Tensor | None = None  # paged: [B] int32
    decode_slots: torch.Tensor | None = None  # paged: flat slot of each new token
    gather_buffers: tuple[torch.Tensor, torch.Tensor] | None = None  # paged on CPU: the gather's workspace


def _sdpa_context(device: str, attention: str = "flash"):
    # flash: flash attention where it supports the shapes, else the next listed (as calibrate run's prefill);
    # materialized: torch's math backend, the scores written and read back (kernels/attention_backends.py).
    from .kernels.attention_backends import sdpa_context
    return sdpa_context(attention, device)


class ShardModel:
    """One GPU's shard of `spec` at tensor parallelism `tp`, run one step at a time by `engine`."""

    def __init__(self, spec: ModelSpec, tp: int, *, dtype: str = "bf16", device: str = "cpu",
                 engine: str = "unfused", kv_layout: str = "dense", block_size: int = 16,
                 num_layers: int | None = None, kernels: str | None = None, seed: int = 0,
                 distinct_weights: bool | None = None, attention: str = "flash", weights: str | None = None):
        if weights is not None and weights not in WEIGHT_FORMATS:
            raise ConfigError(f"--weights: {weights!r} is not allowed; allowed: {', '.join(WEIGHT_FORMATS)} (absent: "
                              "the --dtype)")
        if weights == "fp8" and engine == "compiled":
            raise ConfigError("--weights: 'fp8' with --engine compiled is not supported yet; allowed: --engine "
                              "unfused or fused")
        if attention not in ATTENTION_KERNELS:
            raise ConfigError(f"--attention: {attention!r} is not allowed; allowed: {', '.join(ATTENTION_KERNELS)}")
        if engine not in ENGINES:
            raise ConfigError(f"--engine: {engine!r} is not allowed; allowed: {', '.join(ENGINES)}")
        if kv_layout not in KV_LAYOUTS:
            raise ConfigError(f"--kv: {kv_layout!r} is not allowed; allowed: {', '.join(KV_LAYOUTS)}")
        if spec.is_moe:
            raise ConfigError(f"--model: {spec.name} is a mixture-of-experts model, which step measurement does not "
                              "support yet; allowed: dense models")
        self.spec, self.tp, self.device, self.engine = spec, tp, device, engine
        self.dtype_name, self.dtype = dtype, TORCH_DTYPES[dtype]
        self.fp8 = weights == "fp8"
        if self.fp8:
            from .kernels.fused import FP8_DTYPE
            self.fp8_dtype = FP8_DTYPE
            self.input_scale = torch.tensor(FP8_INPUT_SCALE, dtype=torch.float32, device=device)
            self.inv_input_scale = torch.tensor(1.0 / FP8_INPUT_SCALE, dtype=torch.float32, device=device)
        self.kv_layout, self.block_size = kv_layout, block_size
        self.attention_kernel = attention  # which SDPA backends attention runs under (meta.json attention_kernel)
        self.shard = shard_shapes(spec, tp)
        s = self.shard
        self.hq, self.hkv, self.d = s["num_heads"], s["num_kv_heads"], s["head_dim"]
        self.hidden, self.ffn, self.gated = s["hidden_size"], s["ffn_size"], s["gated_mlp"]
        self.vocab_shard = s["linear"]["lm_head"][1]
        self.num_layers = num_layers or spec.num_layers
        self.gen = torch.Generator(device=device).manual_seed(seed)
        from .kernels.fused import fused_ops
        # Which fused kernels run: the device's (Triton on a GPU, torch fallbacks on a CPU), or "triton" /
        # "torch" by name (tests run the Triton kernels on a CPU under TRITON_INTERPRET).
        self.fused = fused_ops("cuda" if kernels == "triton" else ("cpu" if kernels == "torch" else device))
        self.max_position = spec.max_context
        self.cos_sin = self._cos_sin_cache()
        one_layer = self._make_layer()
        layer_bytes = one_layer.nbytes()
        if distinct_weights is None:
            distinct_weights = layer_bytes * self.num_layers <= 0.5 * device_memory_bytes(device)
        self.distinct_weights = distinct_weights
        self.layers = [one_layer] + [self._make_layer() if distinct_weights else one_layer
                                     for _ in range(self.num_layers - 1)]
        self.embedding = self._randn(self.vocab_shard, self.hidden)
        self.final_norm = self._norm_weight()
        self.lm_head = self._randn(self.vocab_shard, self.hidden, scale=self.hidden ** -0.5)
        self._pre, self._post = self._pre_layer, self._post_layer
        if engine == "compiled":
            from torch import _dynamo
            # Every grid point is a new shape: a recompilation each, beyond dynamo's default limit of 8.
            for name in ("recompile_limit", "cache_size_limit"):
                if hasattr(_dynamo.config, name):
                    setattr(_dynamo.config, name, 4096)
            self._pre = torch.compile(self._pre_layer, dynamic=False, fullgraph=True)
            self._post = torch.compile(self._post_layer, dynamic=False, fullgraph=True)

    # --- weights ---------------------------------------------------------------------------------------
    def _randn(self, *shape: int, scale: float = 1.0) -> torch.Tensor:
        # Random normal, scaled so activations stay O(1) through many layers in bf16.
        t = torch.randn(*shape, generator=self.gen, device=self.device, dtype=self.dtype)
        return t.mul_(scale) if scale != 1.0 else t

    def _norm_weight(self) -> torch.Tensor:
        return self._randn(self.hidden, scale=0.1).add_(1.0)

    def _bias(self, n: int, on: bool) -> torch.Tensor | None:
        return self._randn(n, scale=0.1) if on else None

    def _make_layer(self) -> LayerWeights:
        s, spec = self.shard, self.spec
        (qkv_in, qkv_out), (o_in, o_out) = s["linear"]["qkv"], s["linear"]["attn_out"]
        up_name, down_name = ("gate_up", "down") if self.gated else ("fc1", "fc2")
        (up_in, up_out), (down_in, down_out) = s["linear"][up_name], s["linear"][down_name]
        lb = spec.linear_bias
        weights = LayerWeights(
            input_norm=self._norm_weight(),
            qkv=self._randn(qkv_out, qkv_in, scale=qkv_in ** -0.5),
            qkv_bias=self._bias(qkv_out, spec.attention_bias or lb),
            attn_out=self._randn(o_out, o_in, scale=o_in ** -0.5), attn_out_bias=self._bias(o_out, lb),
            post_norm=self._norm_weight(),
            up=self._randn(up_out, up_in, scale=up_in ** -0.5), up_bias=self._bias(up_out, lb),
            down=self._randn(down_out, down_in, scale=down_in ** -0.5), down_bias=self._bias(down_out, lb))
        if self.fp8:
            weights.scales = {}
            for name in ("qkv", "attn_out", "up", "down"):
                fp8, weights.scales[name] = self._to_fp8(getattr(weights, name))
                setattr(weights, name, fp8)
        return weights

    def _to_fp8(self, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A weight in e4m3 with its per-tensor scale (amax / 448), as an fp8 checkpoint stores it."""
        from .kernels.fused import FP8_MAX
        scale = (w.abs().amax().float() / FP8_MAX).clamp_(min=1e-12)
        return (w.float() / scale).to(self.fp8_dtype), scale

    def linear(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,
               w_scale: torch.Tensor | None = None) -> torch.Tensor:
        """x @ w.T + bias: F.linear in 16 bits; with an fp8 weight, x quantized with the static input scale and
        the product through torch._scaled_mm (bf16 out)."""
        if w_scale is None:
            return F.linear(x, w, bias)
        if self.engine == "fused":
            xq = self.fused.static_fp8_quant(x, self.inv_input_scale)
        else:  # unfused: float32, multiply, clamp, cast to fp8 as four torch ops (the fused kernel's fallback)
            from .kernels.fused import static_fp8_quant_torch
            xq = static_fp8_quant_torch(x, self.inv_input_scale)
        return torch._scaled_mm(xq, w.t(), scale_a=self.input_scale, scale_b=w_scale, bias=bias, out_dtype=self.dtype)

    def _cos_sin_cache(self) -> torch.Tensor:
        from .kernels.fused import rotary_cos_sin_cache
        return rotary_cos_sin_cache(self.max_position, self.d, self.device)

    def weight_bytes(self) -> int:
        unique = {id(w): w for w in self.layers}.values()
        heads = (self.embedding.numel() + self.lm_head.numel()) * self.embedding.element_size()
        return sum(w.nbytes() for w in unique) + heads

    # --- inputs of one step ----------------------------------------------------------------------------
    def kv_bytes(self, shape: StepShape) -> int:
        """Bytes of the KV caches a step needs over all layers (paged: whole blocks)."""
        per_token = 2 * self.hkv * self.d * self.dtype.itemsize
        tokens = shape.prefill_context + shape.prefill_tokens
        if self.kv_layout == "paged":
            tokens += shape.decode_batch * math.ceil(shape.decode_context / self.block_size) * self.block_size
        else:
            tokens += shape.decode_batch * shape.decode_context
        return self.num_layers * tokens * per_token

    def make_inputs(self, shape: StepShape) -> StepInputs:
        P, X, B, C = shape.prefill_tokens, shape.prefill_context, shape.decode_batch, shape.decode_context
        dev = self.device
        ids = torch.randint(0, self.vocab_shard, (shape.num_tokens,), generator=self.gen, device=dev)
        positions = torch.cat((torch.arange(X, X + P, device=dev), torch.full((B,), C - 1, device=dev)))
        # The chunk's last token, then every decode token: the rows whose next token is picked.
        sample_index = torch.arange(P - 1 if P else P, shape.num_tokens, device=dev)
        # Caches start random: the earlier context's keys and values (zeros would make attention uniform).
        prefill_kv = [(self._randn(1, self.hkv, X + P, self.d), self._randn(1, self.hkv, X + P, self.d))
                      if P else None for _ in range(self.num_layers)]
        inputs = StepInputs(shape, ids, positions, sample_index, prefill_kv, [None] * self.num_layers)
        if B and self.kv_layout == "dense":
            inputs.decode_kv = [(self._randn(B, self.hkv, C, self.d), self._randn(B, self.hkv, C, self.d))
                                for _ in range(self.num_layers)]
        elif B:
            bs = self.block_size
            per_seq = math.ceil(C / bs)
            num_blocks = B * per_seq
            inputs.decode_kv = [(self._randn(num_blocks, bs, self.hkv, self.d), self._randn(num_blocks, bs, self.hkv, self.d))
                                for _ in range(self.num_layers)]
            # Scattered block ids, as a cache that has been allocating and freeing for a while.
            table = torch.randperm(num_blocks, generator=self.gen, device=dev).view(B, per_seq)
            inputs.block_table = table.to(torch.int32)
            inputs.context_lens = torch.full((B,), C, dtype=torch.int32, device=dev)
            inputs.decode_slots = table[:, (C - 1) // bs] * bs + (C - 1) % bs
            if dev != "cuda":
                inputs.gather_buffers = (torch.empty(num_blocks, bs, self.hkv, self.d, dtype=self.dtype, device=dev),
                                         torch.empty(num_blocks, bs, self.hkv, self.d, dtype=self.dtype, device=dev))
        return inputs

    # --- one layer, in three pieces (attention in the middle stays outside torch.compile) ----------------
    def _pre_layer(self, h: torch.Tensor, residual: torch.Tensor | None, w_norm: torch.Tensor, w_qkv: torch.Tensor,
                   b_qkv: torch.Tensor | None, positions: torch.Tensor, cos_sin: torch.Tensor,
                   s_qkv: torch.Tensor | None = None):
        """Input norm (with the residual add), QKV GEMM, rotary. Returns (q, k, v, residual)."""
        T, hq, hkv, d = h.shape[0], self.hq, self.hkv, self.d
        if self.engine == "fused":
            if residual is None:
                residual, x = h, self.fused.rms_norm(h, w_norm, _EPS)
            else:
                x = self.fused.fused_add_rms_norm(h, residual, w_norm, _EPS)  # residual += h, in place
        else:
            residual = h if residual is None else h + residual
            x = ops.rms_norm(residual, w_norm, _EPS)
        qkv = self.linear(x, w_qkv, b_qkv, s_qkv)
        q = qkv[:, :hq * d].view(T, hq, d)
        k = qkv[:, hq * d:(hq + hkv) * d].view(T, hkv, d)
        v = qkv[:, (hq + hkv) * d:].view(T, hkv, d)
        if self.engine == "fused":
            self.fused.rotary_inplace(q, k, positions, cos_sin)
        else:
            table = cos_sin[positions]
            cos, sin = table[:, :d // 2], table[:, d // 2:]
            q, k = ops.apply_rotary(q, cos, sin), ops.apply_rotary(k, cos, sin)
        return q, k, v, residual

    def _post_layer(self, attn: torch.Tensor, residual: torch.Tensor, w_o, b_o, w_norm, w_up, b_up, w_down, b_down,
                    s_o=None, s_up=None, s_down=None):
        """Output GEMM, residual add and norm, MLP. Returns (h, residual): the layer's output is their sum."""
        o = self.linear(attn, w_o, b_o, s_o)
        if self.engine == "fused":
            x = self.fused.fused_add_rms_norm(o, residual, w_norm, _EPS)
        else:
            residual = o + residual
            x = ops.rms_norm(residual, w_norm, _EPS)
        up = self.linear(x, w_up, b_up, s_up)
        if not self.gated:
            act = F.relu(up)
        elif self.engine == "fused":
            act = self.fused.silu_and_mul(up)
        else:
            act = ops.silu_and_mul(up)
        return self.linear(act, w_down, b_down, s_down), residual

    def attention(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, inputs: StepInputs) -> torch.Tensor:
        """Write the new tokens' K/V into the layer's caches, attend. Returns [tokens, q_heads · head_dim]."""
        shape = inputs.shape
        P, X, B, C = shape.prefill_tokens, shape.prefill_context, shape.decode_batch, shape.decode_context
        hq, d = self.hq, self.d
        parts = []
        with _sdpa_context(self.device, self.attention_kernel):
            if P:
                k_cache, v_cache = inputs.prefill_kv[layer]
                k_cache[0, :, X:].copy_(k[:P].transpose(0, 1))
                v_cache[0, :, X:].copy_(v[:P].transpose(0, 1))
                out = ops.prefill_attention(q[:P].transpose(0, 1)[None], k_cache, v_cache)  # [1, hq, P, d]
                parts.append(out[0].transpose(0, 1).reshape(P, hq * d))
            if B:
                k_cache, v_cache = inputs.decode_kv[layer]
                if self.kv_layout == "dense":
                    k_cache[:, :, C - 1].copy_(k[P:])
                    v_cache[:, :, C - 1].copy_(v[P:])
                    out = F.scaled_dot_product_attention(q[P:].unsqueeze(2), k_cache, v_cache, enable_gqa=True)
                else:
                    k_cache.view(-1, self.hkv, d).index_copy_(0, inputs.decode_slots, k[P:])
                    v_cache.view(-1, self.hkv, d).index_copy_(0, inputs.decode_slots, v[P:])
                    out = self._paged_decode(q[P:], k_cache, v_cache, inputs)
                parts.append(out.reshape(B, hq * d))
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def _paged_decode(self, q, k_cache, v_cache, inputs: StepInputs):
        # The Triton kernel is flash-decoding (never writes the scores); materialized scores take the gather path,
        # whose SDPA runs under the math backend.
        if self.device == "cuda" and self.attention_kernel == "flash":
            from .kernels.paged_attention import paged_attention_decode
            return paged_attention_decode(q, k_cache, v_cache, inputs.block_table, inputs.context_lens)
        return ops.paged_decode_gather(q.contiguous(), k_cache, v_cache, inputs.block_table, inputs.context_lens,
                                       buffers=inputs.gather_buffers)

    def layer(self, i: int, h: torch.Tensor, residual: torch.Tensor | None, inputs: StepInputs):
        """Decoder layer i as its own call. Returns (h, residual); the layer's output is h + residual."""
        w = self.layers[i]
        s = w.scales or {}
        q, k, v, residual = self._pre(h, residual, w.input_norm, w.qkv, w.qkv_bias, inputs.positions, self.cos_sin,
                                      s.get("qkv"))
        attn = self.attention(i, q, k, v, inputs)
        return self._post(attn, residual, w.attn_out, w.attn_out_bias, w.post_norm, w.up, w.up_bias, w.down,
                          w.down_bias, s.get("attn_out"), s.get("up"), s.get("down"))

    def step(self, inputs: StepInputs) -> torch.Tensor:
        """One engine step: embedding, every layer, final norm, LM head on the sampled rows, argmax."""
        h, residual = F.embedding(inputs.token_ids, self.embedding), None
        for i in range(self.num_layers):
            h, residual = self.layer(i, h, residual, inputs)
        if self.engine == "fused":
            x = self.fused.fused_add_rms_norm(h, residual, self.final_norm, _EPS)
        else:
            x = ops.rms_norm(h + residual, self.final_norm, _EPS)
        logits = F.linear(x[inputs.sample_index], self.lm_head)
        return logits.argmax(dim=-1)

    def op_impls(self) -> dict[str, str]:
        gemm = "torch F.linear (cuBLAS)" if self.device == "cuda" else "torch F.linear (CPU BLAS)"
        layer_gemms = gemm
        if self.fp8:
            quant = (self.fused.impls["fp8_quant"] if self.engine == "fused"
                     else "torch eager: to float32, multiply, clamp to ±448, cast to fp8 (four launches)")
            layer_gemms = (f"W8A8 fp8 e4m3, per-tensor weight scales, static per-tensor input scale; the input "
                           f"quantized by {quant}; torch._scaled_mm "
                           f"({'cuBLASLt' if self.device == 'cuda' else 'CPU'}), {self.dtype_name} out")
        from .kernels.attention_backends import describe
        sdpa = describe(self.attention_kernel, self.device)
        if self.engine == "fused":
            elementwise = {"rmsnorm": self.fused.impls["rmsnorm"] + "; the residual adds fused into it",
                           "residual_add": "fused into rmsnorm (fused_add_rms_norm)",
                           "rotary": self.fused.impls["rotary"],
                           "silu_mul": self.fused.impls["silu_mul"]}
        else:
            how = "torch eager" if self.engine == "unfused" else "torch.compile (inductor) generated kernels"
            elementwise = {"rmsnorm": f"{how} (float32 math)", "residual_add": how,
                           "rotary": f"{how}: cos/sin gathered by position, neox halves rotated",
                           "silu_mul": how}
        if not self.gated:
            elementwise.pop("silu_mul")
            elementwise["relu"] = "torch F.relu" if self.engine != "compiled" else "torch.compile generated kernel"
        paged = ("triton flash-decoding paged attention (calibrate/kernels/paged_attention.py)"
                 if self.device == "cuda" and self.attention_kernel == "flash"
                 else f"torch gather of each sequence's blocks by block id, then {sdpa}")
        return {"linear": layer_gemms, "embedding": "torch F.embedding", **elementwise,
                "prefill_attention": sdpa + ", bottom-right causal",
                "decode_attention": paged if self.kv_layout == "paged" else sdpa + " over a dense KV cache",
                "kv_write": "in place: copy_ into the dense cache" if self.kv_layout == "dense"
                else "in place: index_copy_ into the paged cache by slot",
                "lm_head": gemm + " on the sampled rows only", "sampling": "argmax (greedy) over the shard's vocabulary"}


def device_memory_bytes(device: str) -> int:
    if device == "cuda":
        return torch.cuda.get_device_properties(0).total_memory
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 << 30


def kv_budget_bytes(model: ShardModel) -> int:
    """What one grid point's KV caches may take: KV_MEMORY_SHARE of the device, and no more than is free
    beside the weights and a headroom for activations."""
    total = device_memory_bytes(model.device)
    if model.device == "cuda":
        free, _ = torch.cuda.mem_get_info()
    else:
        free = total - model.weight_bytes()
    return int(max(0, min(KV_MEMORY_SHARE * total, free - _HEADROOM_BYTES)))


# --- timing ------------------------------------------------------------------------------------------

def time_step(model: ShardModel, inputs: StepInputs, reps: int) -> Timing:
    """cuda: warm-up, the whole step captured as ONE CUDA graph, `reps` replays each timed with CUDA
    events. cpu: `reps` eager steps each timed with time.perf_counter after one warm-up."""
    step = lambda: model.step(inputs)  # noqa: E731
    with torch.no_grad():
        if model.device == "cuda":
            from .timing import time_cuda_graph
            return time_cuda_graph(step, calls=1, reps=reps, warmup=2)
        step()  # warm-up: first-call allocation, dispatch, compilation
        samples = np.empty(reps)
        for i in range(reps):
            t0 = time.perf_counter()
            step()
            samples[i] = time.perf_counter() - t0
    p20, median, p80 = np.percentile(samples, [20, 50, 80])
    return Timing(float(median), float(p20), float(p80))


def measure_steps(model: ShardModel, shapes: list[StepShape], reps: int,
                  on_point: Callable[[StepShape, Timing | None, str | None], None]) -> None:
    """Time each shape; `on_point(shape, timing, None)` after each, or `(shape, None, why)` for a skipped one."""
    budget = kv_budget_bytes(model)
    for shape in shapes:
        need = model.kv_bytes(shape)
        if need > budget:
            on_point(shape, None, f"KV caches need {need / 2**30:.1f} GiB; allowed {budget / 2**30:.1f} GiB")
            continue
        inputs = model.make_inputs(shape)
        timing = time_step(model, inputs, reps)
        del inputs
        if model.device == "cuda":
            torch.cuda.empty_cache()  # the next point's caches reuse this memory
        on_point(shape, timing, None)


# --- the profile folder --------------------------------------------------------------------------------

# meta.json keys that must match for a rerun to resume into an existing folder.
_RESUME_KEYS = ("profile_kind", "device", "dtype", "engine", "kv_layout", "tensor_parallel", "shard", "layers",
                "block_size", "grid", "attention_kernel", "weight_dtype")


class StepsWriter:
    """steps.csv and meta.json of a steps profile, each rewritten atomically (temporary name, then rename)
    after every point, so an interrupted run resumes where it stopped."""

    def __init__(self, out, meta: dict):
        from .store import open_profile_folder
        self.out, meta = open_profile_folder(out, {"format_version": 1, "profile_kind": "steps", **meta,
                                                   "complete": False}, _RESUME_KEYS)
        self.rows: list[dict] = []
        csv = self.out / "steps.csv"
        if csv.is_file():
            import pandas as pd
            self.rows = pd.read_csv(csv).to_dict("records")
        self.meta = meta
        self.done = {tuple(r[c] for c in STEP_COLUMNS[:5]) for r in self.rows}
        self._write_meta()

    def _write_meta(self) -> None:
        atomic_write_text(self.out / "meta.json", json.dumps(self.meta, indent=2) + "\n")

    def has(self, shape: StepShape) -> bool:
        return shape.key() in self.done

    def add(self, shape: StepShape, timing: Timing) -> None:
        self.rows.append({**dict(zip(STEP_COLUMNS[:5], shape.key())), "step_s": timing.median_s,
                          "p20_s": timing.p20_s, "p80_s": timing.p80_s})
        self.done.add(shape.key())
        buf = io.StringIO()
        buf.write(",".join(STEP_COLUMNS) + "\n")
        for r in self.rows:
            buf.write(",".join([str(r[c]) for c in STEP_COLUMNS[:5]] + [f"{r[c]:.6e}" for c in STEP_COLUMNS[5:]]) + "\n")
        atomic_write_text(self.out / "steps.csv", buf.getvalue())

    def finish(self, **extra) -> None:
        self.meta.update(extra, complete=True)
        self._write_meta()
