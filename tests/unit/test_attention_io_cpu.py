"""Known answers for torch's two CPU attention kernels as `benchmarks/bench_attention.py` models them (issue 33):
the tiled flash kernel's blocks, score pairs and memory accesses, and the math backend's passes over the N x N
matrices (sim/model/attention_io.py), each counted by hand."""

import pytest

from sim.cost.roofline_kernel import SCORE_ACCESSES
from sim.errors import ConfigError
from sim.model.attention_io import (
    MATH_SDPA_PASSES,
    math_sdpa_pass_bytes,
    tiled_attention_accesses,
    tiled_score_pairs,
    torch_cpu_flash_fresh_bytes,
    torch_cpu_flash_q_block,
)


def test_torch_cpu_flash_query_block_by_prompt_length():
    # flash_attention_kernel_impl: 256 rows from 768 queries, 64 from 192, else 32.
    assert [torch_cpu_flash_q_block(n) for n in (1, 191, 192, 767, 768, 16384)] == [32, 32, 64, 64, 256, 256]


def test_tiled_pairs_compute_whole_key_blocks_up_to_the_diagonal():
    # N = 1024 in 256 x 512 blocks: the query blocks end at keys 256, 512, 768, 1024, so they compute 1, 1, 2 and
    # 2 key blocks of 512: 256 * (512 + 512 + 1024 + 1024) = 786,432 pairs, against N(N+1)/2 = 524,800 kept.
    assert tiled_score_pairs(1024, 256, 512) == 786_432
    assert tiled_score_pairs(1024, 256, 512, causal=False) == 1024**2
    # No longer than one key block: every query block computes all of it, the whole N x N.
    assert tiled_score_pairs(512, 64, 512) == 512**2
    # Long prompts tend to the causal half: 256 * 512 * (1 + 1 + 2 + 2 + ... + 32 + 32) at 16k.
    assert tiled_score_pairs(16384, 256, 512) == 256 * 512 * 2 * sum(range(1, 33)) == 138_412_032
    assert tiled_score_pairs(16384, 256, 512) / (16384 * 16385 / 2) == pytest.approx(1.031, abs=1e-3)
    # Short last blocks: at N = 1,100 the last query block has 76 rows and the last key block 76 keys.
    assert tiled_score_pairs(1100, 256, 512) == 256 * (512 + 512 + 1024 + 1024) + 76 * (512 + 512 + 76) == 870_032


def test_tiled_accesses_read_q_and_write_o_once_and_k_v_per_query_block():
    # 2Nd for Q and O, then 2d per key each query block computes: keys 512 + 512 + 1024 + 1024 = 3072.
    assert tiled_attention_accesses(1024, 128, 256, 512) == 2 * 1024 * 128 + 2 * 128 * 3072 == 1_048_576
    assert tiled_attention_accesses(1024, 128, 256, 512, causal=False) == 262_144 + 2 * 128 * 4 * 1024 == 1_310_720
    # Θ(N²d / B_r): doubling the query block halves the K and V re-reads.
    n, d = 8192, 128
    assert (tiled_attention_accesses(n, d, 512, 512, False) - 2 * n * d) * 2 == (
        tiled_attention_accesses(n, d, 256, 512, False) - 2 * n * d)
    with pytest.raises(ConfigError, match="q_block: 0 is not allowed"):
        tiled_attention_accesses(n, d, 0, 512)


def test_torch_cpu_flash_allocates_its_output_and_one_block_buffer_per_thread():
    # O (2 x 1024 x 128) and the log-sum-exp (2 x 1024), then 256 x 512 scores, 2 x 256 row statistics and a
    # 256 x 128 accumulator: 428,544 fp32 = 1.63 MiB (418 pages first touched per call, measured).
    assert torch_cpu_flash_fresh_bytes(1024, 128, 2) == 4 * (2 * 1024 * 129 + 256 * 512 + 512 + 256 * 128) == 1_714_176
    assert torch_cpu_flash_fresh_bytes(1024, 128, 2, threads=2) - torch_cpu_flash_fresh_bytes(1024, 128, 2) == 4 * (
        256 * 512 + 512 + 256 * 128)


def test_math_sdpa_passes_by_hand_for_a_tiny_prompt():
    # N = 4, d = 2, 2 heads: 32 score elements, 16 of the mask, 16 of Q (or K, or O).
    passes = {op: (elements, moved, fresh) for op, elements, moved, fresh in math_sdpa_pass_bytes(4, 2, 2)}
    assert list(passes) == [op for op, *_ in MATH_SDPA_PASSES]
    assert passes["scale_q"] == (16, 16 * 8, 16 * 4)
    assert passes["tril"] == (16, 16 * 2, 16)
    assert passes["where_mask"] == (16, 16 * 5, 16 * 4)
    assert passes["qk"] == (32, 32 * 4, 32 * 4)
    assert passes["add_mask"] == (32, 32 * 12, 0)
    assert passes["eq"] == (32, 32 * 5, 32)
    assert passes["out"] == (16, 16 * 4, 16 * 4)
    # 42 bytes per score element and 8 per mask element, 20 per token element: 1,792 bytes moved.
    assert sum(m for _, m, _ in passes.values()) == (42 * 2 + 8) * 16 + 20 * 16 == 1_792
    # New buffers: S, P, the bool S == -inf (9 bytes a score), the three masks (6), Q·s, K·s and O (12 a token).
    assert sum(f for *_, f in passes.values()) == (9 * 2 + 6) * 16 + 12 * 16 == 576
    # The roofline's four score accesses (S written, read, P written, read) are among them.
    assert passes["qk"][1] + passes["softmax"][1] + passes["pv"][1] == SCORE_ACCESSES * 4 * 32


def test_math_sdpa_new_buffers_at_1024_tokens_match_the_pages_measured():
    # 2 heads x d 128: 27 MiB newly allocated per call; the page faults of one call measured 27 MiB (6,921 pages,
    # torch 2.13, MALLOC_MMAP_THRESHOLD_=131072).
    assert sum(f for *_, f in math_sdpa_pass_bytes(1024, 128, 2)) == 27 * 2**20
