"""Attention's HBM traffic and score memory: FlashAttention against a kernel that materializes the scores.

What the `attention.kernel` what-if rests on, as pure functions with known answers (tests/unit/test_attention_io*.py):

- the element accesses to HBM of one head's attention over N tokens of head dimension d, with M bytes of on-chip
  SRAM, counted as Dao et al. 2022 count them ("FlashAttention: Fast and Memory-Efficient Exact Attention with
  IO-Awareness", arXiv:2205.14135, Theorem 2 and its proof in Appendix C): the standard implementation
  (their Algorithm 0) makes Θ(Nd + N²) accesses, FlashAttention (Algorithm 1) Θ(N²d²/M);
- the bytes of the score matrices a materialized kernel holds while one layer runs, which the memory arithmetic
  (`sim.model.memory.activation_bytes`) reserves out of the KV budget;
- what the materialized kernel does, pass by pass (MATH_SDPA_PASSES: torch's math SDPA), which the roofline prices
  (`math_sdpa_terms` -> `sim.cost.roofline_kernel.attention_parts`), and what torch's tiled CPU flash kernel
  computes, which `benchmarks/bench_attention.py` checks on a CPU.

The paper's counts (`standard_attention_accesses`, `flash_attention_accesses`) are for tests and reports, not a
second price: the roofline's materialized price is MATH_SDPA_PASSES's.
"""

from __future__ import annotations

import math

from sim.errors import ConfigError
from sim.model.specs import ModelSpec

ATTENTION_KERNELS = ("flash", "materialized")  # the schema's `attention.kernel` values, default first
TRITON_BACKEND = "triton"  # the schema's `attention.backend` value: vLLM's Triton backend (sim/cost/measured.py)
# The materialized kernel is torch's math SDPA (`_scaled_dot_product_attention_math`, torch >= 2.5, on a CPU and on a
# GPU alike: it is a composite of ATen ops with no device-specific path), what `F.scaled_dot_product_attention` runs
# when no fused kernel is allowed or takes the shapes, and what the calibration and the benchmark measure
# (`calibrate/kernels/attention_backends.py`). It keeps its score matrices in fp32 whatever the inputs: given
# bf16/fp16 Q, K, V it casts them to fp32 first ("Keep query, key, value in high precision for accuracy", unless
# `torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)`), so S and P are 4 bytes an element. (Eager Hugging
# Face attention, another materializing kernel, keeps S in bf16 and only its softmax in fp32: not this kernel.)
SCORE_ELEMENT_BYTES = 4
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
    prefill of Llama-3.1-8B on one GPU: 32 x 8192² x 4 bytes (fp32) = 8 GiB per layer."""
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


# torch's CPU flash kernel (torch 2.13), which `benchmarks/bench_attention.py` measures against the math backend
# (`cpu_flash_attention` in aten/src/ATen/native/cpu/FlashAttentionKernel.cpp) tiles the queries into blocks of
# `torch_cpu_flash_q_block(n)` rows and the keys into blocks of 512 (`kv_split_size`); a block of scores (256 x 512
# fp32: 512 KiB) lives in the core's own cache and never reaches memory. The query blocks nest in the key blocks,
# so the pairs it computes depend on the key block alone (`GPUSpec.flash_key_block`,
# `roofline_kernel.tiled_causal_pairs`).
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


# What the materialized kernel does: torch's math SDPA (`_scaled_dot_product_attention_math` and `_safe_softmax`,
# aten/src/ATen/native/transformers/attention.cpp, torch 2.13; the op list checked with torch.profiler for fp32 and
# bf16 inputs), causal, pass by pass: (op, over, bytes read, bytes written per element, whether the written buffer
# is newly allocated, inputs). `over` is what one element is: "score" one (query, key) pair of one head, "mask" one
# (query, key) pair (the N x N mask is shared by the heads), "query"/"output" one query token's Q/O in one head and
# head dimension, "key"/"value" one key's K/V likewise. `inputs` "any" runs whatever the inputs' dtype, "half" only
# given bf16/fp16 inputs (the casts to fp32 and back). The page faults of one fp32 call, counted, equal the new
# bytes at 512-16k tokens. fp32 inputs: 42 bytes per score element (the paper's standard attention, Algorithm 0,
# has four accesses: 16 bytes at fp32), 8 per mask element; bf16/fp16 inputs 48 and 8.
_F32, _BOOL, _HALF = SCORE_ELEMENT_BYTES, 1, 2
MATH_SDPA_PASSES = (
    ("cast_q", "query", _HALF, _F32, True, "half"),  # Q.to(float)
    ("cast_k", "key", _HALF, _F32, True, "half"),  # K.to(float)
    ("cast_v", "value", _HALF, _F32, True, "half"),  # V.to(float)
    ("scale_q", "query", _F32, _F32, True, "any"),  # Q * sqrt(scale), a new buffer
    ("scale_k", "key", _F32, _F32, True, "any"),  # K^T * sqrt(scale)
    ("ones", "mask", 0, _BOOL, True, "any"),  # the causal mask: ones(L, S) of bool ...
    ("tril", "mask", _BOOL, _BOOL, True, "any"),  # ... its lower triangle ...
    ("where_mask", "mask", _BOOL, _F32, True, "any"),  # ... as 0 / -inf in fp32 (convert_boolean_attn_mask)
    ("qk", "score", 0, _F32, True, "any"),  # S = Q K^T (bmm), written to a new buffer
    ("add_mask", "score", 2 * _F32, _F32, False, "any"),  # S += mask, in place (S and the mask read)
    ("softmax", "score", _F32, _F32, True, "any"),  # P = softmax(S), out of place
    ("eq", "score", _F32, _BOOL, True, "any"),  # _safe_softmax: S == -inf, a bool matrix
    ("all", "score", _BOOL, 0, False, "any"),  # rows that are all -inf
    ("where_p", "score", _F32, _F32, False, "any"),  # P zeroed on those rows (into P)
    ("p_half", "score", _F32, _HALF, True, "half"),  # attn.to(origin_dtype): P returned beside O, cast
    ("pv", "score", _F32, 0, False, "any"),  # O = P V (bmm) reads P ...
    ("out", "output", 0, _F32, True, "any"),  # ... and writes O, a new buffer
    ("out_half", "output", _F32, _HALF, True, "half"),  # O.to(origin_dtype)
)
# The two matmuls, and O as PV's output: the roofline prices them as one op beside the Q, K, V reads and the O write
# it counts for flash too (`attention_parts`); the other passes are an op each.
MATH_SDPA_MATMULS = ("qk", "pv", "out")
# The passes a device may give its own time per element (`GPUSpec.pass_s_per_element`): every pass but the matmuls.
ELEMENTWISE_PASSES = tuple(row[0] for row in MATH_SDPA_PASSES if row[0] not in MATH_SDPA_MATMULS)
# FLOPs per score element of a safe softmax: the row max, the subtraction, exp (counted as one), the row sum and the
# division (Milakov & Gimelshein 2018, "Online normalizer calculation for softmax", arXiv:1805.02867, Algorithm 2).
# The other passes are comparisons, selects and copies: no FLOPs counted.
SOFTMAX_FLOPS_PER_SCORE = 5
_PASS_FLOPS = {"softmax": SOFTMAX_FLOPS_PER_SCORE}


def math_sdpa_passes(input_bytes: float) -> tuple:
    """MATH_SDPA_PASSES that run given inputs of `input_bytes` (4: fp32, no casts; 2: bf16/fp16)."""
    if input_bytes not in (_HALF, _F32):
        raise ConfigError(f"attention input bytes: {input_bytes!r} is not allowed; allowed: {_HALF}, {_F32}")
    return tuple(row for row in MATH_SDPA_PASSES if row[5] == "any" or input_bytes == _HALF)


def math_sdpa_pass_bytes(n: int, d: int, heads: int, input_bytes: float = _F32) -> list[tuple[str, int, int, int]]:
    """(op, elements, bytes moved, bytes newly allocated) of each pass of `heads` heads' causal attention of N
    queries against N keys of head dimension d, given inputs of `input_bytes`: a "score" pass over heads·N²
    elements, a "mask" pass over N², a query/key/value/output pass over heads·N·d."""
    _positive(n, "n")
    _positive(d, "d")
    _positive(heads, "heads")
    out = []
    for op, over, read, written, fresh, _ in math_sdpa_passes(input_bytes):
        elements = heads * n * n if over == "score" else n * n if over == "mask" else heads * n * d
        out.append((op, elements, elements * (read + written), elements * written if fresh else 0))
    return out


def math_sdpa_terms(heads: int, qk_dim: int, v_dim: int, input_bytes: float) -> tuple[float, list, tuple]:
    """MATH_SDPA_PASSES as the roofline prices them, per unit of a step: a "pair" (one query row against one key,
    every head), a "query" token or a "key" token. (bytes the two matmuls move per pair (S written, P read),
    [(op, unit, bytes per unit, FLOPs per unit, elements per unit) of each other pass], (bytes newly allocated per
    pair, per query, per key)). Q and K in `qk_dim`, V and O in `v_dim` per head."""
    per = {"score": ("pair", heads), "mask": ("pair", 1), "query": ("query", heads * qk_dim),
           "key": ("key", heads * qk_dim), "value": ("key", heads * v_dim), "output": ("query", heads * v_dim)}
    matmul_bytes, passes, fresh = 0.0, [], {"pair": 0.0, "query": 0.0, "key": 0.0}
    for op, over, read, written, new, _ in math_sdpa_passes(input_bytes):
        unit, factor = per[over]
        if new:
            fresh[unit] += factor * written
        if op in MATH_SDPA_MATMULS:
            if over == "score":
                matmul_bytes += factor * (read + written)
        else:
            passes.append((op, unit, factor * (read + written), factor * _PASS_FLOPS.get(op, 0), factor))
    return matmul_bytes, passes, (fresh["pair"], fresh["query"], fresh["key"])
