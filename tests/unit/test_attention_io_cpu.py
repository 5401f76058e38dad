"""Known answers for torch's two attention kernels (issue 33): the CPU flash kernel's blocks and the score pairs it
computes, and the math backend's passes (sim/model/attention_io.py, what the roofline prices as the materialized
kernel), each counted by hand."""

import pytest

from sim.errors import ConfigError
from sim.model.attention_io import (
    math_sdpa_pass_bytes,
    math_sdpa_passes,
    math_sdpa_terms,
    tiled_score_pairs,
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


def test_math_sdpa_passes_by_hand_for_a_tiny_prompt():
    # N = 4, d = 2, 2 heads: 32 score elements, 16 of the mask, 16 of Q (or K, or O).
    passes = {op: (elements, moved, fresh) for op, elements, moved, fresh in math_sdpa_pass_bytes(4, 2, 2)}
    fp32 = ["scale_q", "scale_k", "ones", "tril", "where_mask", "qk", "add_mask", "softmax", "eq", "all", "where_p",
            "pv", "out"]
    assert list(passes) == fp32  # fp32 inputs: no casts
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
    # Dao et al.'s four accesses of standard attention (S written, read, P written, read) are among them, at 4 bytes.
    assert passes["qk"][1] + passes["softmax"][1] + passes["pv"][1] == 4 * 4 * 32


def test_math_sdpa_given_half_inputs_casts_q_k_v_to_fp32_and_p_and_o_back():
    # torch.profiler, torch 2.13, bf16 inputs: three aten::to of Q, K, V, then the fp32 passes, then aten::to of P
    # (returned beside O) and of O. N = 4, d = 2, 2 heads.
    passes = {op: (elements, moved, fresh) for op, elements, moved, fresh in math_sdpa_pass_bytes(4, 2, 2, 2)}
    half = ["cast_q", "cast_k", "cast_v", "scale_q", "scale_k", "ones", "tril", "where_mask", "qk", "add_mask",
            "softmax", "eq", "all", "where_p", "p_half", "pv", "out", "out_half"]
    assert [op for op, *_ in math_sdpa_passes(2)] == half
    assert passes["cast_q"] == (16, 16 * 6, 16 * 4)  # 2 bytes read, 4 written to a new buffer
    assert passes["p_half"] == (32, 32 * 6, 32 * 2)
    assert passes["out_half"] == (16, 16 * 6, 16 * 2)
    # 48 bytes per score element, 8 per mask element, 20 + 4 x 6 = 44 per token element.
    assert sum(m for _, m, _ in passes.values()) == (48 * 2 + 8) * 16 + 44 * 16 == 2_368
    # New: 11 bytes a score (S, P, the bool, P in bf16), 6 a mask element, 12 + 3 x 4 + 2 = 26 a token element.
    assert sum(f for *_, f in passes.values()) == (11 * 2 + 6) * 16 + 26 * 16 == 864
    with pytest.raises(ConfigError, match="attention input bytes: 1 is not allowed"):
        math_sdpa_passes(1)


def test_math_sdpa_terms_are_the_passes_per_pair_and_per_token_as_the_roofline_prices_them():
    # 32 heads, Q and K of 192, V and O of 128 per head (an MLA-like split, to tell the dims apart), bf16 inputs.
    matmul, passes, fresh = math_sdpa_terms(32, 192, 128, 2)
    assert matmul == 32 * (4 + 4)  # S written by QK^T, P read by PV, fp32
    by_op = {op: (unit, nbytes, flops) for op, unit, nbytes, flops, _ in passes}
    elements = {op: n for op, _, _, _, n in passes}  # per unit: a head's score, the mask's one, a head's dims
    assert (elements["softmax"], elements["where_mask"], elements["cast_q"], elements["cast_v"]) == (
        32, 1, 32 * 192, 32 * 128)
    assert "qk" not in by_op and "pv" not in by_op and "out" not in by_op  # the matmul op's
    assert by_op["softmax"] == ("pair", 32 * 8, 32 * 5)  # fp32 S read, P written; 5 FLOPs a score
    assert by_op["add_mask"] == ("pair", 32 * 12, 0)
    assert by_op["where_mask"] == ("pair", 5, 0)  # the mask: one per pair, shared by the heads
    assert by_op["cast_q"] == ("query", 32 * 192 * 6, 0) and by_op["cast_v"] == ("key", 32 * 128 * 6, 0)
    assert by_op["out_half"] == ("query", 32 * 128 * 6, 0)
    # Per pair in all: 48 bytes a head and 8 of the mask, the matmuls' 8 included.
    assert matmul + sum(b for _, unit, b, _, _ in passes if unit == "pair") == 32 * 48 + 8
    # New buffers: S, P, the bool and P in bf16 (11 a head) and the three masks (6) per pair; Q in fp32, Q·s
    # (4 + 4), O in fp32 and in bf16 (4 + 2) per query; K and K·s (4 + 4), V (4) per key.
    assert fresh == (32 * 11 + 6, 32 * 192 * 8 + 32 * 128 * 6, 32 * 192 * 8 + 32 * 128 * 4)


def test_math_sdpa_new_buffers_at_1024_tokens_match_the_pages_measured():
    # 2 heads x d 128: 27 MiB newly allocated per call; the page faults of one call measured 27 MiB (6,921 pages,
    # torch 2.13, MALLOC_MMAP_THRESHOLD_=131072).
    assert sum(f for *_, f in math_sdpa_pass_bytes(1024, 128, 2)) == 27 * 2**20
