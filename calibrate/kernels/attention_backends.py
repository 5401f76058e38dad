"""Prefill and decode attention timed with a chosen torch SDPA backend: the kernel behind `attention.kernel`.

- `materialized`: torch's math backend (`SDPBackend.MATH`, `_scaled_dot_product_attention_math`): QK^T, an
  out-of-place softmax and PV as separate ops, the score and probability matrices written to memory and read back
  (Dao et al. 2022's standard attention, Algorithm 0).
- `flash`: the tiled kernels that never write the scores: FlashAttention where it takes the shapes, else the
  memory-efficient kernel (CUDA); on a CPU torch's flash-attention-for-CPU (`_scaled_dot_product_flash_attention_cpu`,
  the only tiled CPU backend: memory-efficient attention has no CPU kernel).

`sdpa_context(kernel, device)` is what a whole-step measurement runs attention under (`calibrate steps
--attention`); `time_prefill` / `time_decode` time one layer's attention alone, and `prefill_call` is the prefill
call itself (`benchmarks/bench_attention.py` times it in rounds with its micro-benchmarks).
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from sim.model.attention_io import ATTENTION_KERNELS

from ..timing import Timing, time_cpu, time_cuda_graph


def backends(kernel: str, device: str) -> list:
    """The SDPA backends `kernel` allows on `device`, in the order torch tries them."""
    from torch.nn.attention import SDPBackend
    if kernel == "materialized":
        return [SDPBackend.MATH]
    if kernel != "flash":
        raise ValueError(f"kernel: {kernel!r} is not allowed; allowed: {', '.join(ATTENTION_KERNELS)}")
    if device == "cuda":
        return [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    return [SDPBackend.FLASH_ATTENTION]


def sdpa_context(kernel: str, device: str):
    """The context attention runs under. Flash on CUDA also allows math as a last resort, as `calibrate steps`
    always did (a shape neither tiled kernel takes); flash on a CPU leaves the choice to torch (its CPU flash kernel
    where the inputs allow), as before the option existed. Materialized forces the math backend everywhere."""
    if kernel == "flash" and device != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    chosen = backends(kernel, device)
    return sdpa_kernel(chosen + ([SDPBackend.MATH] if kernel == "flash" else []))


def describe(kernel: str, device: str) -> str:
    """One phrase for a profile's op_impls: which SDPA backend ran attention."""
    if kernel == "materialized":
        return "torch SDPA math backend (scores materialized: QK^T, softmax, PV as separate ops)"
    if device == "cuda":
        return "torch SDPA, flash attention where it supports the shapes (else memory-efficient)"
    return "torch SDPA (CPU)"


def _qkv(heads: int, kv_heads: int, head_dim: int, queries: int, keys: int, dtype, device: str, seed: int = 0):
    g = torch.Generator(device="cpu").manual_seed(seed)  # random inputs: zeros would make the softmax uniform
    q = torch.randn(1, heads, queries, head_dim, generator=g, dtype=torch.float32).to(device=device, dtype=dtype)
    k = torch.randn(1, kv_heads, keys, head_dim, generator=g, dtype=torch.float32).to(device=device, dtype=dtype)
    v = torch.randn(1, kv_heads, keys, head_dim, generator=g, dtype=torch.float32).to(device=device, dtype=dtype)
    return q, k, v


def _time(fn, device: str, budget_s: float) -> Timing:
    if device == "cuda":
        return time_cuda_graph(fn, budget_s=budget_s)
    return time_cpu(fn, budget_s)


def prefill_call(kernel: str, *, heads: int, kv_heads: int, head_dim: int, tokens: int, dtype=torch.float32,
                 device: str = "cpu"):
    """A call of one layer's causal attention of a `tokens`-long prompt (no earlier context) with `kernel`'s
    backends, on fresh random inputs (run it under `torch.inference_mode()`)."""
    q, k, v = _qkv(heads, kv_heads, head_dim, tokens, tokens, dtype, device)
    gqa = heads != kv_heads
    from torch.nn.attention import sdpa_kernel

    def call():
        with sdpa_kernel(backends(kernel, device)):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    return call


def time_prefill(kernel: str, *, heads: int, kv_heads: int, head_dim: int, tokens: int, dtype=torch.float32,
                 device: str = "cpu", budget_s: float = 1.0) -> Timing:
    """One layer's causal attention of a `tokens`-long prompt (no earlier context) with `kernel`'s backends."""
    call = prefill_call(kernel, heads=heads, kv_heads=kv_heads, head_dim=head_dim, tokens=tokens, dtype=dtype,
                        device=device)
    with torch.inference_mode():
        return _time(call, device, budget_s)


def time_decode(kernel: str, *, batch: int, heads: int, kv_heads: int, head_dim: int, context: int,
                dtype=torch.float32, device: str = "cpu", budget_s: float = 1.0) -> Timing:
    """One layer's decode attention: `batch` single-token queries, each against `context` keys."""
    g = torch.Generator(device="cpu").manual_seed(1)
    q = torch.randn(batch, heads, 1, head_dim, generator=g).to(device=device, dtype=dtype)
    k = torch.randn(batch, kv_heads, context, head_dim, generator=g).to(device=device, dtype=dtype)
    v = torch.randn(batch, kv_heads, context, head_dim, generator=g).to(device=device, dtype=dtype)
    gqa = heads != kv_heads
    from torch.nn.attention import sdpa_kernel

    def call():
        with sdpa_kernel(backends(kernel, device)):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
    with torch.inference_mode():
        return _time(call, device, budget_s)
