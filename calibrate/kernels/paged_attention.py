"""Paged-attention decode in Triton, flash-decoding style: one query token per sequence attends to its
KV, read through a block table (vLLM's PagedAttention, Kwon et al., SOSP 2023), with long contexts split
across programs (Dao et al., "Flash-Decoding for long-context inference", 2023).

Layout (vLLM v1 style): k_cache and v_cache are [num_blocks, block_size, num_kv_heads, head_dim];
block_table is [num_seqs, max_blocks_per_seq] int32; context_lens is [num_seqs] int32 (>= 1).

Pass 1 (`_paged_decode_partition_kernel`): one program per (sequence, KV head, partition of
`partition_tokens` context tokens). It takes all query heads that share the KV head (GQA) as the rows of
a tile padded to at least 16 rows, so the scores and the weighted sum of values are `tl.dot`s on tensor
cores, and walks its partition `tile_tokens` tokens at a time (several KV blocks per iteration: each
token's block id is looked up in the table, so any block size works, 1 and 5 included), keeping an online
softmax. With one partition per sequence it writes the output directly; otherwise it writes its partial
maximum, sum of exponentials and unnormalized accumulator, and pass 2 (`_paged_decode_reduce_kernel`,
one program per (sequence, query head)) rescales and combines the partitions.

The partition size is picked so that about two programs per multiprocessor exist (more partitions for few,
long sequences; one per sequence when the batch alone fills the GPU). On a CPU the kernels run only under
TRITON_INTERPRET=1 (set before triton is imported): right for checking, far too slow to time.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

IMPL = "triton flash-decoding paged attention (calibrate/kernels/paged_attention.py)"
_MIN_DOT = 16  # tl.dot needs every dimension >= 16


@triton.jit
def _paged_decode_partition_kernel(
        q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, context_lens_ptr, out_ptr,
        part_max_ptr, part_sum_ptr, part_acc_ptr, scale,
        stride_q_seq, stride_q_head, stride_kv_block, stride_kv_slot, stride_kv_head, stride_table_seq,
        stride_o_seq, stride_o_head, stride_part_seq, stride_part_head,
        GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, DIM_PAD: tl.constexpr,
        BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, PARTITION: tl.constexpr, DIRECT: tl.constexpr,
        IEEE: tl.constexpr, UPCAST: tl.constexpr):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    part = tl.program_id(2)
    context_len = tl.load(context_lens_ptr + seq)
    start = part * PARTITION
    end = tl.minimum(start + PARTITION, context_len)  # start >= end: a partition past this sequence's end
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, DIM_PAD)
    t = tl.arange(0, TILE)
    g_ok = g < GROUP
    d_ok = d < HEAD_DIM
    heads = kv_head * GROUP + g
    q = tl.load(q_ptr + seq.to(tl.int64) * stride_q_seq + heads[:, None] * stride_q_head + d[None, :],
                mask=g_ok[:, None] & d_ok[None, :], other=0.0)
    q = (q.to(tl.float32) * scale).to(q_ptr.dtype.element_ty)
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, DIM_PAD], tl.float32)
    table_row = block_table_ptr + seq.to(tl.int64) * stride_table_seq
    for tile_start in range(start, end, TILE):
        pos = tile_start + t
        t_ok = pos < end
        block_id = tl.load(table_row + pos // BLOCK_SIZE, mask=t_ok, other=0).to(tl.int64)
        offs = (block_id[:, None] * stride_kv_block + (pos % BLOCK_SIZE)[:, None] * stride_kv_slot
                + kv_head * stride_kv_head + d[None, :])
        kv_mask = t_ok[:, None] & d_ok[None, :]
        k = tl.load(k_cache_ptr + offs, mask=kv_mask, other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
        if IEEE:
            scores = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            scores = tl.dot(q, tl.trans(k))
        scores = tl.where(t_ok[None, :], scores, float("-inf"))  # [GROUP_PAD, TILE]
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        correction = tl.exp(m_i - m_new)
        p = tl.exp(scores - m_new[:, None])
        v = tl.load(v_cache_ptr + offs, mask=kv_mask, other=0.0)
        if UPCAST:
            v = v.to(tl.float32)
        if IEEE:
            acc = acc * correction[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        else:
            acc = acc * correction[:, None] + tl.dot(p.to(v.dtype), v)
        l_i = l_i * correction + tl.sum(p, axis=1)
        m_i = m_new
    row_ok = g_ok & ((g * 0 + start) < context_len)  # a vector compare: scalar masks trip the interpreter
    if DIRECT:
        out = acc / l_i[:, None]
        tl.store(out_ptr + seq.to(tl.int64) * stride_o_seq + heads[:, None] * stride_o_head + d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])
    else:
        base = seq.to(tl.int64) * stride_part_seq + heads * stride_part_head + part
        tl.store(part_max_ptr + base, m_i, mask=row_ok)
        tl.store(part_sum_ptr + base, l_i, mask=row_ok)
        tl.store(part_acc_ptr + base[:, None] * DIM_PAD + d[None, :], acc, mask=row_ok[:, None] & d_ok[None, :])


@triton.jit
def _paged_decode_reduce_kernel(context_lens_ptr, part_max_ptr, part_sum_ptr, part_acc_ptr, out_ptr,
                                stride_part_seq, stride_part_head, stride_o_seq, stride_o_head,
                                HEAD_DIM: tl.constexpr, DIM_PAD: tl.constexpr, PARTITION: tl.constexpr,
                                PARTS_CHUNK: tl.constexpr):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    num_parts = tl.cdiv(tl.load(context_lens_ptr + seq), PARTITION)
    base = seq.to(tl.int64) * stride_part_seq + head * stride_part_head
    c = tl.arange(0, PARTS_CHUNK)
    d = tl.arange(0, DIM_PAD)
    d_ok = d < HEAD_DIM
    # Pass 1: the largest partial maximum.
    m = tl.full([PARTS_CHUNK], float("-inf"), tl.float32)
    for first in range(0, num_parts, PARTS_CHUNK):
        ok = first + c < num_parts
        m = tl.maximum(m, tl.load(part_max_ptr + base + first + c, mask=ok, other=float("-inf")))
    m_all = tl.max(m, axis=0)
    # Pass 2: each partition's accumulator and sum, rescaled to that maximum.
    total = tl.zeros([PARTS_CHUNK], tl.float32)
    acc = tl.zeros([DIM_PAD], tl.float32)
    for first in range(0, num_parts, PARTS_CHUNK):
        ok = first + c < num_parts
        w = tl.exp(tl.load(part_max_ptr + base + first + c, mask=ok, other=float("-inf")) - m_all)
        w = tl.where(ok, w, 0.0)
        total += w * tl.load(part_sum_ptr + base + first + c, mask=ok, other=0.0)
        parts = tl.load(part_acc_ptr + (base + first + c)[:, None] * DIM_PAD + d[None, :],
                        mask=ok[:, None] & d_ok[None, :], other=0.0)
        acc += tl.sum(w[:, None] * parts, axis=0)
    out = acc / tl.sum(total, axis=0)
    tl.store(out_ptr + seq.to(tl.int64) * stride_o_seq + head * stride_o_head + d, out.to(out_ptr.dtype.element_ty),
             mask=d_ok)


def _interpreted() -> bool:
    # Triton's interpreter computes tl.dot in numpy, which has no bfloat16: its bf16 products come out
    # wrong (triton 3.9). Interpreted, bf16 tiles go through the dot as float32; compiled, they stay bf16.
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132  # under the interpreter: an H100's count, so CPU tests take the GPU's split decisions


def choose_partition(num_seqs: int, num_kv_heads: int, max_context: int, tile_tokens: int, num_sms: int) -> int:
    """Tokens per partition: a multiple of the tile, large enough that the split pays for its reduce,
    small enough that about two programs per multiprocessor exist."""
    programs = num_seqs * num_kv_heads
    want_parts = max(1, -(-2 * num_sms // programs))
    tokens = triton.next_power_of_2(max(1, -(-max_context // want_parts)))
    return max(tokens, 2 * tile_tokens) if want_parts > 1 else max(tokens, tile_tokens)


def paged_attention_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_table: torch.Tensor, context_lens: torch.Tensor, scale: float | None = None,
                           max_context: int | None = None, partition_tokens: int | None = None,
                           tile_tokens: int | None = None) -> torch.Tensor:
    """q: [num_seqs, num_heads, head_dim] -> [num_seqs, num_heads, head_dim].

    `max_context` bounds the context lengths (default: the block table's capacity, so no device-to-host
    read is needed and the call can be captured in a CUDA graph). `partition_tokens` and `tile_tokens`
    override the split (tests force small partitions)."""
    num_seqs, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads {num_heads} is not a multiple of num_kv_heads {num_kv_heads}")
    if v_cache.stride() != k_cache.stride():
        raise ValueError("k_cache and v_cache must have the same layout")
    if k_cache.stride(-1) != 1 or q.stride(-1) != 1:
        raise ValueError("q and the KV caches must be contiguous in head_dim")
    group = num_heads // num_kv_heads
    out = torch.empty(num_seqs, num_heads, head_dim, dtype=q.dtype, device=q.device)
    scale = head_dim ** -0.5 if scale is None else scale
    max_context = block_table.shape[1] * block_size if max_context is None else max_context
    dim_pad = max(triton.next_power_of_2(head_dim), _MIN_DOT)
    tile = tile_tokens or (64 if dim_pad <= 128 else 32)
    if tile < _MIN_DOT or tile & (tile - 1):
        raise ValueError(f"tile_tokens {tile} must be a power of two >= {_MIN_DOT}")
    partition = partition_tokens or choose_partition(num_seqs, num_kv_heads, max_context, tile, _num_sms(q.device))
    if partition % tile:
        raise ValueError(f"partition_tokens {partition} must be a multiple of tile_tokens {tile}")
    num_parts = triton.cdiv(max_context, partition)
    direct = num_parts == 1
    if direct:
        part_max = part_sum = part_acc = out  # unused
        stride_part_seq = stride_part_head = 0
    else:
        part_max = torch.empty(num_seqs, num_heads, num_parts, dtype=torch.float32, device=q.device)
        part_sum = torch.empty_like(part_max)
        part_acc = torch.empty(num_seqs, num_heads, num_parts, dim_pad, dtype=torch.float32, device=q.device)
        stride_part_seq, stride_part_head = part_max.stride(0), part_max.stride(1)
    _paged_decode_partition_kernel[(num_seqs, num_kv_heads, num_parts)](
        q, k_cache, v_cache, block_table, context_lens, out, part_max, part_sum, part_acc, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_table.stride(0),
        out.stride(0), out.stride(1), stride_part_seq, stride_part_head,
        # The query heads of one KV head are a tile's rows, padded to 16 for tl.dot; masks drop the padding.
        GROUP=group, GROUP_PAD=max(triton.next_power_of_2(group), _MIN_DOT), HEAD_DIM=head_dim, DIM_PAD=dim_pad,
        BLOCK_SIZE=block_size, TILE=tile, PARTITION=partition, DIRECT=direct,
        IEEE=q.dtype == torch.float32, UPCAST=_interpreted() and q.dtype == torch.bfloat16, num_warps=4)
    if not direct:
        _paged_decode_reduce_kernel[(num_seqs, num_heads)](
            context_lens, part_max, part_sum, part_acc, out, stride_part_seq, stride_part_head,
            out.stride(0), out.stride(1), HEAD_DIM=head_dim, DIM_PAD=dim_pad, PARTITION=partition,
            PARTS_CHUNK=min(triton.next_power_of_2(num_parts), 32), num_warps=4)
    return out
