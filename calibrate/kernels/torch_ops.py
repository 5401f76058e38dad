"""The per-layer ops an engine step runs, as plain torch: what calibration times (except the
Triton paged-attention kernel on GPU). Shapes follow vLLM: tokens are flattened across sequences."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    variance = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(variance + eps)).to(x.dtype) * weight


def rotary_cos_sin(positions: torch.Tensor, head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    # Angles in float64: position × frequency reaches tens of thousands of radians at long contexts,
    # where float32 loses ~1e-3 rad. The table is built once; only its lookup is timed.
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float64) / head_dim))
    angles = positions.double()[:, None] * inv_freq[None, :]
    return angles.cos().float(), angles.sin().float()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Neox-style rotary embedding of x: [num_tokens, num_heads, head_dim] (halves rotated)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).to(x.dtype)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return F.silu(x[..., :half]) * x[..., half:]


def residual_add(x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    return x + residual


def sample(logits: torch.Tensor, temperature: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """Temperature sampling over the whole vocabulary (logits in fp32, as engines upcast them).

    As vLLM's sampler: argmax of probs / E with E ~ Exp(1) draws index i with probability probs[i]
    (an exponential race), without torch.multinomial's slow CPU path."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    race = torch.empty_like(probs).exponential_(generator=generator)
    return (probs / race).argmax(dim=-1)


def prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q: [1, heads, chunk, dim] attends causally to k, v: [1, kv_heads, context + chunk, dim];
    the chunk's queries sit at the end of the keys (bottom-right causal alignment)."""
    chunk, total = q.shape[2], k.shape[2]
    if chunk == total:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(chunk, total), enable_gqa=True)


def decode_attention_contiguous(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q: [batch, heads, 1, dim] against dense per-sequence K/V [batch, kv_heads, context, dim]."""
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def paged_decode_gather(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                        context_lens: torch.Tensor, buffers: tuple[torch.Tensor, torch.Tensor] | None = None
                        ) -> torch.Tensor:
    """Paged decode in torch: gather each sequence's blocks through the block table (index_select by
    block id), then attention with the positions past each context masked.
    q: [num_seqs, heads, dim]; caches [num_blocks, block_size, kv_heads, dim] -> [num_seqs, heads, dim].
    `buffers` ([num_seqs * max_blocks, block_size, kv_heads, dim] each) are reused for the gathered K/V,
    as an engine keeps its workspace, instead of allocating (and page-faulting) every step."""
    num_seqs, max_blocks = block_table.shape
    _, block_size, kv_heads, dim = k_cache.shape
    length = max_blocks * block_size
    ids = block_table.reshape(-1)
    k_buf, v_buf = buffers if buffers is not None else (None, None)
    k = torch.index_select(k_cache, 0, ids, out=k_buf) if k_buf is not None else k_cache.index_select(0, ids)
    v = torch.index_select(v_cache, 0, ids, out=v_buf) if v_buf is not None else v_cache.index_select(0, ids)
    k = k.view(num_seqs, length, kv_heads, dim).transpose(1, 2)
    v = v.view(num_seqs, length, kv_heads, dim).transpose(1, 2)
    valid = torch.arange(length, device=q.device)[None, :] < context_lens[:, None].to(q.device)
    out = F.scaled_dot_product_attention(q[:, :, None, :], k, v, attn_mask=valid[:, None, None, :], enable_gqa=True)
    return out[:, :, 0, :]
