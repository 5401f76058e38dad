"""Attention's HBM traffic and score memory: FlashAttention against a kernel that materializes the scores.

Two things the `attention.kernel` what-if rests on, as pure functions with known answers (tests/unit/test_attention_io.py):

- the element accesses to HBM of one head's attention over N tokens of head dimension d, with M bytes of on-chip
  SRAM, counted as Dao et al. 2022 count them ("FlashAttention: Fast and Memory-Efficient Exact Attention with
  IO-Awareness", arXiv:2205.14135, Theorem 2 and its proof in Appendix C): the standard implementation
  (their Algorithm 0) makes Θ(Nd + N²) accesses, FlashAttention (Algorithm 1) Θ(N²d²/M);
- the bytes of the score matrices a materialized kernel holds while one layer runs, which the memory arithmetic
  (`sim.model.memory.activation_bytes`) reserves out of the KV budget.

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
