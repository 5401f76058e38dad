"""Paged-attention decode in Triton: one query token per sequence attends to its KV, read block by
block through a block table (vLLM's PagedAttention, Kwon et al., SOSP 2023).

Layout (vLLM v1 style): k_cache and v_cache are [num_blocks, block_size, num_kv_heads, head_dim];
block_table is [num_seqs, max_blocks_per_seq] int32; context_lens is [num_seqs] int32 (>= 1).
One program handles one (sequence, KV head) and all query heads that share it (GQA), keeping an
online softmax over the blocks, so each KV block is read once per KV head.

On a CPU this runs only under TRITON_INTERPRET=1 (set before triton is imported): right for
checking, far too slow to time. Written for correctness first and not yet run on a GPU: scores are
a broadcast multiply-and-sum rather than tl.dot, one KV block per loop iteration, no tuning of
warps or split-K over long contexts — a GPU profile times exactly this kernel.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _paged_decode_kernel(q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, context_lens_ptr, out_ptr, scale,
                         stride_q_seq, stride_q_head, stride_kv_block, stride_kv_slot, stride_kv_head,
                         stride_table_seq, stride_o_seq, stride_o_head,
                         GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
                         DIM_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_PAD: tl.constexpr):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    context_len = tl.load(context_lens_ptr + seq)
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, DIM_PAD)
    t = tl.arange(0, BLOCK_PAD)
    g_ok = g < GROUP
    d_ok = d < HEAD_DIM
    heads = kv_head * GROUP + g
    q = tl.load(q_ptr + seq * stride_q_seq + heads[:, None] * stride_q_head + d[None, :],
                mask=g_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, DIM_PAD], tl.float32)
    num_blocks = tl.cdiv(context_len, BLOCK_SIZE)
    for b in range(0, num_blocks):
        block_id = tl.load(block_table_ptr + seq * stride_table_seq + b).to(tl.int64)
        t_ok = (t < BLOCK_SIZE) & (b * BLOCK_SIZE + t < context_len)
        offs = block_id * stride_kv_block + t[:, None] * stride_kv_slot + kv_head * stride_kv_head + d[None, :]
        kv_mask = t_ok[:, None] & d_ok[None, :]
        k = tl.load(k_cache_ptr + offs, mask=kv_mask, other=0.0).to(tl.float32)
        scores = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale  # [GROUP_PAD, BLOCK_PAD]
        scores = tl.where(t_ok[None, :], scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        correction = tl.exp(m_i - m_new)
        p = tl.exp(scores - m_new[:, None])
        v = tl.load(v_cache_ptr + offs, mask=kv_mask, other=0.0).to(tl.float32)
        acc = acc * correction[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
        l_i = l_i * correction + tl.sum(p, axis=1)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(out_ptr + seq * stride_o_seq + heads[:, None] * stride_o_head + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=g_ok[:, None] & d_ok[None, :])


def paged_attention_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_table: torch.Tensor, context_lens: torch.Tensor,
                           scale: float | None = None) -> torch.Tensor:
    """q: [num_seqs, num_heads, head_dim] -> [num_seqs, num_heads, head_dim]."""
    num_seqs, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads {num_heads} is not a multiple of num_kv_heads {num_kv_heads}")
    if v_cache.stride() != k_cache.stride():
        raise ValueError("k_cache and v_cache must have the same layout")
    if k_cache.stride(-1) != 1 or q.stride(-1) != 1:
        raise ValueError("q and the KV caches must be contiguous in head_dim")
    group = num_heads // num_kv_heads
    out = torch.empty_like(q)
    scale = head_dim ** -0.5 if scale is None else scale
    _paged_decode_kernel[(num_seqs, num_kv_heads)](
        q, k_cache, v_cache, block_table, context_lens, out, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_table.stride(0), out.stride(0), out.stride(1),
        # Padded to powers of two (tl.arange needs them), at least 2 wide; masks drop the padding.
        GROUP=group, GROUP_PAD=max(triton.next_power_of_2(group), 2), HEAD_DIM=head_dim,
        DIM_PAD=max(triton.next_power_of_2(head_dim), 2), BLOCK_SIZE=block_size,
        BLOCK_PAD=max(triton.next_power_of_2(block_size), 2))
    return out
