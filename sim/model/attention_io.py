"""Attention's HBM traffic and score memory: FlashAttention against a kernel that materializes the scores.

What the `attention.kernel` what-if rests on, as pure functions with known answers (tests/unit/test_attention_io*.py):

- the element accesses to HBM of one head's attention over N tokens of head dimension d, with M bytes of on-chip
  SRAM, counted as Dao et al. 2022 count them ("FlashAttention: Fast and Memory-Efficient Exact Attention with
  IO-Awareness", arXiv:2205.14135, Theorem 2 and its proof in Appendix C): the standard implementation
  (their Algorithm 0) makes Θ(Nd + N²) accesses, FlashAttention (Algorithm 1) Θ(N²d²/M);
- the bytes of the score matrices a materialized kernel holds while one layer runs, which the memory arithmetic
  (`sim.model.memory.activation_bytes`) reserves out of the KV budget;
- what torch's two CPU kernels do (its tiled flash kernel's blocks, and its math backend's passes over the N x N
  matrices), which `benchmarks/bench_attention.py` prices with a CPU's measured rates.

The roofline prices a step's score traffic itself (`sim.cost.roofline_kernel.attention_parts`, SCORE_ACCESSES);
these functions are the paper's per-head counts, for tests, reports and the benchmark, not a second price.
"""

from __future__ import annotations

import math

from sim.errors import ConfigError
from sim.model.specs import ModelSpec

ATTENTION_KERNELS = ("flash", "materialized")  # the schema's `attention.kernel` values, default first
# A score element in the activations' dtype: torch's math SDPA computes S = QK^T and P = softmax(S) in the inputs'
# dtype (bf16/fp16 in serving), as eager Hugging Face attention does.
SCORE_ELEMENT_BYTES = 2
# Score matrices alive at once at a materialized kernel's peak: the softmax is out of place (torch's math SDPA,
# `attn = softmax(attn)` in aten/src/ATen/native/transformers/attention.cpp), so S and P coexist while it runs.
SCORE_BUFFERS = 2


def _positive(value: int, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{field}: {value!r} is not allowed; allowed: an integer >= 1")


def standard_attention_accesses(n: int, d: int) -> int:
    """HBM element accesses of standard attention (Dao et al. 2022, Algorithm 0) for one head, N queries against
    N keys: read Q and K (2Nd), write S (N²); read S, write P (2N²); read P and V (N² + Nd), write O (Nd).
    4Nd + 4N² = Θ(Nd + N²)."""
    _positive(n, "n")
    _positive(d, "d")
    return 4 * n * d + 4 * n * n


def flash_block_sizes(d: int, sram_elements: int) -> tuple[int, int]:
    """(B_c, B_r) of FlashAttention's Algorithm 1, line 1: B_c = ceil(M / 4d), B_r = min(ceil(M / 4d), d), with M
    the SRAM size in elements."""
    _positive(d, "d")
    _positive(sram_elements, "sram_elements")
    b_c = math.ceil(sram_elements / (4 * d))
    return b_c, min(b_c, d)


def flash_attention_accesses(n: int, d: int, sram_bytes: int, element_bytes: int = 2) -> int:
    """HBM element accesses of FlashAttention (Dao et al. 2022, Algorithm 1) for one head, N against N, with
    `sram_bytes` of SRAM holding elements of `element_bytes`.

    K and V are loaded once (2Nd). The outer loop runs T_c = ceil(N / B_c) times; each pass reads all of Q and O
    and the row statistics ℓ and m (Nd + Nd + 2N) and writes O, ℓ and m back (Nd + 2N): N(3d + 4) per pass. So
    2Nd + T_c·N(3d + 4) = Θ(Nd·T_c) = Θ(N²d²/M), the proof of Theorem 2. (O, ℓ and m are initialized in HBM
    before the loops, and counted there as the paper counts them: not.)"""
    _positive(n, "n")
    _positive(sram_bytes, "sram_bytes")
    _positive(element_bytes, "element_bytes")
    b_c, _ = flash_block_sizes(d, sram_bytes // element_bytes)
    t_c = math.ceil(n / b_c)
    return 2 * n * d + t_c * n * (3 * d + 4)


def attention_hbm_bytes(kernel: str, n: int, d: int, sram_bytes: int, element_bytes: int = 2) -> int:
    """Bytes one head's attention moves to and from HBM with `kernel` ('flash' or 'materialized'): the accesses
    above times `element_bytes`."""
    if kernel == "flash":
        return flash_attention_accesses(n, d, sram_bytes, element_bytes) * element_bytes
    if kernel == "materialized":
        return standard_attention_accesses(n, d) * element_bytes
    raise ConfigError(f"attention.kernel: {kernel!r} is not allowed; allowed: {', '.join(ATTENTION_KERNELS)}")


def heads_per_gpu(model: ModelSpec, tensor_parallel: int = 1) -> int:
    """Query heads on each GPU: tensor parallelism splits them evenly (`memory.check_tensor_parallel`)."""
    return model.num_attention_heads // tensor_parallel


def score_matrix_bytes(model: ModelSpec, query_tokens: int, key_tokens: int, tensor_parallel: int = 1) -> int:
    """One score matrix (S or P) of one layer on each GPU: its heads x queries x keys elements. One 8,192-token
    prefill of Llama-3.1-8B on one GPU: 32 x 8192² x 2 bytes = 4 GiB per layer."""
    _positive(query_tokens, "query_tokens")
    _positive(key_tokens, "key_tokens")
    return heads_per_gpu(model, tensor_parallel) * query_tokens * key_tokens * SCORE_ELEMENT_BYTES


def score_activation_bytes(kernel: str, model: ModelSpec, query_tokens: int, key_tokens: int,
                           tensor_parallel: int = 1) -> int:
    """The score memory a step of `query_tokens` queries, each attending at most `key_tokens` keys, holds at its
    peak on each GPU: none with FlashAttention (it never forms the matrix), SCORE_BUFFERS matrices of one layer
    with materialized scores (layers run one after another and reuse the buffers). Sequences' scores are separate
    matrices whose rows sum to at most `query_tokens`, so the bound holds for a batch of chunks too."""
    if kernel == "flash":
        return 0
    if kernel != "materialized":
        raise ConfigError(f"attention.kernel: {kernel!r} is not allowed; allowed: {', '.join(ATTENTION_KERNELS)}")
    return SCORE_BUFFERS * score_matrix_bytes(model, query_tokens, key_tokens, tensor_parallel)


# torch's two CPU attention kernels (torch 2.13), which `benchmarks/bench_attention.py` measures and models on a
# CPU. The flash kernel (`cpu_flash_attention` in aten/src/ATen/native/cpu/FlashAttentionKernel.cpp) tiles the
# queries into blocks of `torch_cpu_flash_q_block(n)` rows and the keys into blocks of 512 (`kv_split_size`); a
# block of scores (256 x 512 fp32: 512 KiB) lives in the core's own cache and never reaches memory.
TORCH_CPU_FLASH_KV_BLOCK = 512


def torch_cpu_flash_q_block(n: int) -> int:
    """The query block torch's CPU flash kernel picks for `n` queries (`flash_attention_kernel_impl`, q_split_size)."""
    _positive(n, "n")
    return 256 if n >= 768 else 64 if n >= 192 else 32


def _tiled_keys(n: int, q_block: int, kv_block: int, causal: bool) -> list[tuple[int, int]]:
    """(rows, keys computed) of each query block, N queries against N keys."""
    _positive(n, "n")
    _positive(q_block, "q_block")
    _positive(kv_block, "kv_block")
    blocks = []
    for m in range(0, n, q_block):
        rows = min(q_block, n - m)
        last = m + rows if causal else n  # the keys its last row attends
        blocks.append((rows, sum(min(kv_block, n - k) for k in range(0, last, kv_block))))
    return blocks


def tiled_score_pairs(n: int, q_block: int, kv_block: int, causal: bool = True) -> int:
    """Score elements a tiled kernel computes for one head, N queries against N keys, in blocks of `q_block` queries
    and `kv_block` keys. Causal, a query block stops after the key block holding its last row's key and computes
    that block whole (the masked part filled with -inf), as torch's CPU flash kernel does (`num_keys`): more than
    the N(N+1)/2 pairs the mask keeps, all N² at N <= kv_block."""
    return sum(rows * keys for rows, keys in _tiled_keys(n, q_block, kv_block, causal))


def torch_cpu_flash_fresh_bytes(n: int, d: int, heads: int, threads: int = 1) -> int:
    """Bytes torch's CPU flash kernel allocates per call, fp32: the output (heads x N x d), the log-sum-exp (heads x
    N) and each thread's buffer (a q_block x kv_block score block, the row maxima and sums, a q_block x d
    accumulator)."""
    _positive(heads, "heads")
    _positive(threads, "threads")
    qb, kv = min(torch_cpu_flash_q_block(n), n), min(TORCH_CPU_FLASH_KV_BLOCK, n)
    return 4 * (heads * n * (d + 1) + threads * (qb * kv + 2 * qb + qb * d))


def tiled_attention_accesses(n: int, d: int, q_block: int, kv_block: int, causal: bool = True) -> int:
    """Memory element accesses of a tiled kernel whose outer loop runs over query blocks (FlashAttention-2's order,
    torch's CPU flash kernel): Q read and O written once (2Nd), and each query block reads the K and V rows of every
    key it computes (2d each). Θ(N²d / B_r): with B_r ∝ M / d, Dao et al.'s Θ(N²d²/M)."""
    _positive(d, "d")
    return 2 * n * d + 2 * d * sum(keys for _, keys in _tiled_keys(n, q_block, kv_block, causal))


# torch's math SDPA on a CPU (`_scaled_dot_product_attention_math` and `_safe_softmax`,
# aten/src/ATen/native/transformers/attention.cpp, torch 2.13), causal, fp32 scores: its passes over N x N matrices
# in order, as (op, "score" (one element per head and query-key pair), "mask" (one N x N matrix shared by the heads)
# or "token" (one per head, token and head dimension), bytes read, bytes written, whether the written buffer is
# newly allocated; the page faults of one call, counted, equal the new bytes at 512-16k tokens). The roofline's
# SCORE_ACCESSES = 4 are the S write of "qk", the S read and P write of "softmax" and the P read of "pv"; the mask
# passes, the in-place mask add and the three passes of `_safe_softmax` (rows that are all -inf) are on top. (Given
# bf16/fp16 inputs, torch 2.13 casts Q, K, V to fp32 first: the scores are fp32 whatever the inputs.)
MATH_SDPA_PASSES = (
    ("scale_q", "token", 4, 4, True),  # Q * sqrt(scale), a new buffer
    ("scale_k", "token", 4, 4, True),  # K^T * sqrt(scale)
    ("ones", "mask", 0, 1, True),  # the causal mask: ones(L, S) of bool ...
    ("tril", "mask", 1, 1, True),  # ... its lower triangle ...
    ("where_mask", "mask", 1, 4, True),  # ... as 0 / -inf in the scores' dtype (convert_boolean_attn_mask)
    ("qk", "score", 0, 4, True),  # S = Q K^T (bmm), written to a new buffer
    ("add_mask", "score", 8, 4, False),  # S += mask, in place (S and the mask read)
    ("softmax", "score", 4, 4, True),  # P = softmax(S), out of place
    ("eq", "score", 4, 1, True),  # _safe_softmax: S == -inf, a bool matrix
    ("all", "score", 1, 0, False),  # rows that are all -inf
    ("where_p", "score", 4, 4, False),  # P zeroed on those rows (into P)
    ("pv", "score", 4, 0, False),  # O = P V (bmm) reads P ...
    ("out", "token", 0, 4, True),  # ... and writes O, a new buffer
)


def math_sdpa_pass_bytes(n: int, d: int, heads: int) -> list[tuple[str, int, int, int]]:
    """(op, elements, bytes moved, bytes newly allocated) of each MATH_SDPA_PASSES pass of `heads` heads' causal
    attention of N queries against N keys of head dimension d: a "score" pass over heads·N² elements, a "mask"
    pass over N², a "token" pass over heads·N·d."""
    _positive(n, "n")
    _positive(d, "d")
    _positive(heads, "heads")
    out = []
    for op, over, read, written, fresh in MATH_SDPA_PASSES:
        elements = {"score": heads * n * n, "mask": n * n, "token": heads * n * d}[over]
        out.append((op, elements, elements * (read + written), elements * written if fresh else 0))
    return out
