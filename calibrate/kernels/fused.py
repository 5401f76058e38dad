"""Fused elementwise kernels an engine runs between its GEMMs, in Triton (as vLLM's custom ops):

- `rms_norm` and `fused_add_rms_norm` (vLLM `fused_add_rms_norm`: the residual becomes x + residual,
  in place, and the output is the RMS norm of that sum: one read of each, one write of each);
- `rotary_inplace`: neox rotary embedding of q and k in one launch, in place, from the token positions
  and a [max_position, head_dim] cos|sin cache (vLLM `rotary_embedding`);
- `silu_and_mul`: SiLU(gate) × up from the fused gate/up GEMM's output;
- `static_fp8_quant`: an activation to fp8 (e4m3) with a static per-tensor scale, saturated at ±448, before an fp8
  GEMM (vLLM `static_scaled_fp8_quant`, one launch).

Each has a torch fallback (`*_torch`) with the same semantics, used on the CPU (the Triton kernels run
on a CPU only under TRITON_INTERPRET=1: right for checking, far too slow to time). `fused_ops(device)`
returns the set the device runs. Arithmetic is in float32 whatever the storage dtype; inputs are 2-D
[tokens, features] (rotary: [tokens, heads, head_dim]) with the last dimension contiguous; other strides
are passed to the kernels, so q and k may be views into the QKV GEMM's output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import triton
import triton.language as tl

from . import torch_ops as ops

IMPL_FILE = "calibrate/kernels/fused.py"


def _check_rows(name: str, *tensors: torch.Tensor) -> None:
    for t in tensors:
        if t.dim() != 2 or t.stride(-1) != 1:
            raise ValueError(f"{name}: expected 2-D tensors contiguous in the last dimension, got shape "
                             f"{tuple(t.shape)} strides {t.stride()}")


# --- RMSNorm, with and without the residual add ------------------------------------------------------

@triton.jit
def _rms_norm_kernel(x_ptr, residual_ptr, weight_ptr, out_ptr, stride_x, stride_residual, stride_out,
                     num_cols, eps, HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    ok = cols < num_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        r_ptrs = residual_ptr + row * stride_residual + cols
        r = tl.load(r_ptrs, mask=ok, other=0.0).to(tl.float32)
        # Rounded to the storage dtype first, so the norm is of the residual as stored (as vLLM).
        total = (x + r).to(residual_ptr.dtype.element_ty)
        tl.store(r_ptrs, total, mask=ok)
        x = total.to(tl.float32)
    mean_square = tl.sum(x * x, axis=0) / num_cols
    w = tl.load(weight_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    y = x * tl.rsqrt(mean_square + eps) * w
    tl.store(out_ptr + row * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=ok)


def _rms_norm_launch(x, residual, weight, eps, out):
    _check_rows("rms_norm", x, out, *(() if residual is None else (residual,)))
    rows, cols = x.shape
    block = triton.next_power_of_2(cols)
    # One program per row; wide rows get more warps so each thread holds a few dozen values.
    warps = min(max(block // 512, 1), 16)
    _rms_norm_kernel[(rows,)](x, x if residual is None else residual, weight, out, x.stride(0),
                              0 if residual is None else residual.stride(0), out.stride(0), cols, eps,
                              HAS_RESIDUAL=residual is not None, BLOCK=block, num_warps=warps)
    return out


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, out: torch.Tensor | None = None) -> torch.Tensor:
    """x: [tokens, hidden] -> RMS norm of each row times weight."""
    return _rms_norm_launch(x, None, weight, eps, torch.empty_like(x) if out is None else out)


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                       out: torch.Tensor | None = None) -> torch.Tensor:
    """residual <- x + residual (in place); returns rms_norm(residual) · weight."""
    return _rms_norm_launch(x, residual, weight, eps, torch.empty_like(x) if out is None else out)


def rms_norm_torch(x, weight, eps=1e-6, out=None):
    y = ops.rms_norm(x, weight, eps)
    return y if out is None else out.copy_(y)


def fused_add_rms_norm_torch(x, residual, weight, eps=1e-6, out=None):
    residual.add_(x)
    return rms_norm_torch(residual, weight, eps, out)


# --- rotary on q and k ---------------------------------------------------------------------------------

@triton.jit
def _rotate_heads(x_ptr, stride_token, stride_head, token, num_heads, cos, sin, half, h, i):
    ok = (h[:, None] < num_heads) & (i[None, :] < half)
    first = x_ptr + token * stride_token + h[:, None] * stride_head + i[None, :]
    x1 = tl.load(first, mask=ok, other=0.0).to(tl.float32)
    x2 = tl.load(first + half, mask=ok, other=0.0).to(tl.float32)
    tl.store(first, (x1 * cos[None, :] - x2 * sin[None, :]).to(x_ptr.dtype.element_ty), mask=ok)
    tl.store(first + half, (x2 * cos[None, :] + x1 * sin[None, :]).to(x_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _rotary_kernel(q_ptr, k_ptr, positions_ptr, cos_sin_ptr, stride_q_token, stride_q_head,
                   stride_k_token, stride_k_head, stride_cache, num_q_heads, num_k_heads, half,
                   Q_HEADS_PAD: tl.constexpr, K_HEADS_PAD: tl.constexpr, HALF_PAD: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    pos = tl.load(positions_ptr + token).to(tl.int64)
    i = tl.arange(0, HALF_PAD)
    i_ok = i < half
    cos = tl.load(cos_sin_ptr + pos * stride_cache + i, mask=i_ok, other=1.0).to(tl.float32)
    sin = tl.load(cos_sin_ptr + pos * stride_cache + half + i, mask=i_ok, other=0.0).to(tl.float32)
    _rotate_heads(q_ptr, stride_q_token, stride_q_head, token, num_q_heads, cos, sin, half,
                  tl.arange(0, Q_HEADS_PAD), i)
    _rotate_heads(k_ptr, stride_k_token, stride_k_head, token, num_k_heads, cos, sin, half,
                  tl.arange(0, K_HEADS_PAD), i)


def rotary_cos_sin_cache(max_position: int, head_dim: int, device, base: float = 10000.0) -> torch.Tensor:
    """[max_position, head_dim] float32: cos of each position's angles, then their sin (vLLM's layout)."""
    cos, sin = ops.rotary_cos_sin(torch.arange(max_position, device=device), head_dim, base)
    return torch.cat((cos, sin), dim=-1).contiguous()


def _check_rotary(q, k, positions, cos_sin):
    for t in (q, k):
        if t.dim() != 3 or t.stride(-1) != 1:
            raise ValueError(f"rotary: q and k must be [tokens, heads, head_dim] contiguous in head_dim, got "
                             f"shape {tuple(t.shape)} strides {t.stride()}")
    if q.shape[0] != k.shape[0] or q.shape[0] != positions.shape[0] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"rotary: q {tuple(q.shape)}, k {tuple(k.shape)} and positions {tuple(positions.shape)} "
                         "disagree on tokens or head_dim")
    if cos_sin.shape[-1] != q.shape[-1] or cos_sin.stride(-1) != 1:
        raise ValueError(f"rotary: cos_sin cache {tuple(cos_sin.shape)} does not match head_dim {q.shape[-1]}")


def rotary_inplace(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor):
    """Neox rotary of q [tokens, q_heads, d] and k [tokens, k_heads, d] in place; returns (q, k)."""
    _check_rotary(q, k, positions, cos_sin)
    tokens, q_heads, dim = q.shape
    half = dim // 2
    if tokens:
        _rotary_kernel[(tokens,)](q, k, positions, cos_sin, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
                                  cos_sin.stride(0), q_heads, k.shape[1], half,
                                  Q_HEADS_PAD=triton.next_power_of_2(q_heads),
                                  K_HEADS_PAD=triton.next_power_of_2(k.shape[1]),
                                  HALF_PAD=triton.next_power_of_2(half))
    return q, k


def rotary_inplace_torch(q, k, positions, cos_sin):
    _check_rotary(q, k, positions, cos_sin)
    half = q.shape[-1] // 2
    table = cos_sin[positions]
    cos, sin = table[:, :half], table[:, half:]
    q.copy_(ops.apply_rotary(q, cos, sin))
    k.copy_(ops.apply_rotary(k, cos, sin))
    return q, k


# --- SiLU(gate) x up ---------------------------------------------------------------------------------

@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, stride_x, stride_out, ffn, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < ffn
    gate = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + ffn + cols, mask=ok, other=0.0).to(tl.float32)
    y = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=ok)


def silu_and_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x: [tokens, 2·ffn] (gate | up) -> [tokens, ffn]."""
    rows, width = x.shape
    ffn = width // 2
    out = torch.empty(rows, ffn, dtype=x.dtype, device=x.device) if out is None else out
    _check_rows("silu_and_mul", x, out)
    block = min(triton.next_power_of_2(ffn), 1024)
    if rows:
        _silu_and_mul_kernel[(rows, triton.cdiv(ffn, block))](x, out, x.stride(0), out.stride(0), ffn, BLOCK=block)
    return out


def silu_and_mul_torch(x, out=None):
    y = ops.silu_and_mul(x)
    return y if out is None else out.copy_(y)


# --- static per-tensor fp8 quantization -------------------------------------------------------------

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # the largest finite e4m3fn value: vLLM saturates to it


@triton.jit
def _static_fp8_quant_kernel(x_ptr, out_ptr, inv_scale_ptr, stride_x, stride_out, width, fp8_max,
                             BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < width
    x = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
    y = tl.clamp(x * tl.load(inv_scale_ptr), -fp8_max, fp8_max)
    tl.store(out_ptr + row * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=ok)


def static_fp8_quant(x: torch.Tensor, inv_scale: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x: [tokens, features] -> fp8 e4m3 of clamp(x · inv_scale, ±448); inv_scale: a float32 scalar tensor."""
    rows, width = x.shape
    out = torch.empty(rows, width, dtype=FP8_DTYPE, device=x.device) if out is None else out
    _check_rows("static_fp8_quant", x, out)
    block = min(triton.next_power_of_2(width), 1024)
    if rows:
        _static_fp8_quant_kernel[(rows, triton.cdiv(width, block))](x, out, inv_scale, x.stride(0), out.stride(0),
                                                                     width, FP8_MAX, BLOCK=block)
    return out


def static_fp8_quant_torch(x, inv_scale, out=None):
    y = (x.float() * inv_scale).clamp_(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return y if out is None else out.copy_(y)


# --- the set a device runs ---------------------------------------------------------------------------

@dataclass(frozen=True)
class FusedOps:
    """The fused elementwise ops one device runs, and what implements them (for meta.json)."""

    rms_norm: Callable
    fused_add_rms_norm: Callable
    rotary_inplace: Callable
    silu_and_mul: Callable
    static_fp8_quant: Callable
    impls: dict  # op -> implementation, in words


def fused_ops(device: str) -> FusedOps:
    if device == "cuda":
        return FusedOps(rms_norm, fused_add_rms_norm, rotary_inplace, silu_and_mul, static_fp8_quant, {
            "rmsnorm": f"triton rms_norm / fused_add_rms_norm ({IMPL_FILE})",
            "rotary": f"triton rotary_inplace, q and k in one launch ({IMPL_FILE})",
            "silu_mul": f"triton silu_and_mul ({IMPL_FILE})",
            "fp8_quant": f"triton static_fp8_quant ({IMPL_FILE})",
        })
    return FusedOps(rms_norm_torch, fused_add_rms_norm_torch, rotary_inplace_torch, silu_and_mul_torch,
                    static_fp8_quant_torch, {
        "rmsnorm": f"torch fallback of fused_add_rms_norm ({IMPL_FILE}; Triton runs on CPU only interpreted)",
        "rotary": f"torch fallback of rotary_inplace ({IMPL_FILE})",
        "silu_mul": f"torch fallback of silu_and_mul ({IMPL_FILE})",
        "fp8_quant": f"torch fallback of static_fp8_quant ({IMPL_FILE})",
    })

