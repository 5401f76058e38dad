"""Slow, obviously-correct float64 references that every timed kernel is checked against.

Every reference computes on the CPU: it moves its inputs there first and makes its own tensors there
with an explicit device, so a caller's CUDA inputs never meet a tensor made on the default device
(issue 17: `rotary` crashed the first check of a GPU run that way)."""

from __future__ import annotations

import math

import torch


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """q: [heads, nq, dim], k/v: [kv_heads, nk, dim] (GQA: heads a multiple of kv_heads); mask [nq, nk] bool."""
    group = q.shape[0] // k.shape[0]
    q, k, v = q.double(), k.double().repeat_interleave(group, 0), v.double().repeat_interleave(group, 0)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Batch-1 chunk with its context; the query at chunk index i sees keys 0 .. context + i."""
    chunk, total = q.shape[2], k.shape[2]
    cpu = torch.device("cpu")
    mask = torch.arange(total, device=cpu)[None, :] <= (torch.arange(chunk, device=cpu)[:, None] + total - chunk)
    return attention(q[0].cpu(), k[0].cpu(), v[0].cpu(), mask)[None]


def paged_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                 context_lens: torch.Tensor) -> torch.Tensor:
    """One sequence at a time: walk its block table, keep its first context_len slots, attend."""
    q, k_cache, v_cache = q.cpu(), k_cache.cpu(), v_cache.cpu()
    block_size = k_cache.shape[1]
    out = []
    for i, length in enumerate(context_lens.tolist()):
        blocks = block_table[i, :math.ceil(length / block_size)].tolist()
        k = torch.cat([k_cache[b] for b in blocks])[:length]  # [length, kv_heads, dim]
        v = torch.cat([v_cache[b] for b in blocks])[:length]
        out.append(attention(q[i][:, None, :], k.transpose(0, 1), v.transpose(0, 1))[:, 0, :])
    return torch.stack(out)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x, weight = x.double().cpu(), weight.cpu()
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.double()


def rotary(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Neox rotary as a complex rotation of (x[i], x[i + half]) pairs by position × base^(-2i/dim)."""
    x, positions = x.cpu(), positions.cpu()
    dim = x.shape[-1]
    half = dim // 2
    freqs = base ** (-torch.arange(half, dtype=torch.float64, device=x.device) * 2 / dim)
    rot = torch.polar(torch.ones(len(positions), half, dtype=torch.float64, device=x.device),
                      positions.double()[:, None] * freqs)
    z = torch.complex(x[..., :half].double(), x[..., half:].double()) * rot[:, None, :]
    return torch.cat((z.real, z.imag), dim=-1)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    x = x.cpu()
    half = x.shape[-1] // 2
    a, b = x[..., :half].double(), x[..., half:].double()
    return a / (1 + torch.exp(-a)) * b


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in float64."""
    out, ref = out.double().cpu(), ref.double().cpu()
    return float((out - ref).norm() / ref.norm().clamp_min(1e-30))


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's fused_add_rms_norm: the new residual is x + residual; the output is its RMS norm."""
    total = x.double().cpu() + residual.double().cpu()
    return rms_norm(total, weight, eps), total
