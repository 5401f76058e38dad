"""Known answers for the attention-kernel what-if (issue 33): the HBM accesses of standard attention and of
FlashAttention as Dao et al. 2022 count them (arXiv:2205.14135, Algorithms 0 and 1, Theorem 2), and the memory of
one prefill's score matrix."""

import pytest

from sim.errors import ConfigError
from sim.model.attention_io import (
    attention_hbm_bytes,
    flash_attention_accesses,
    flash_block_sizes,
    score_activation_bytes,
    score_matrix_bytes,
    standard_attention_accesses,
)
from sim.model.catalog import get_model


def test_standard_attention_moves_4nd_plus_4n_squared_elements():
    # Algorithm 0: read Q, K (2Nd); write S (N²); read S, write P (2N²); read P, V (N² + Nd); write O (Nd).
    assert standard_attention_accesses(1024, 64) == 2 * 1024 * 64 + 1024**2 + 2 * 1024**2 + 1024**2 + 1024 * 64 + 1024 * 64
    assert standard_attention_accesses(1024, 64) == 4_456_448
    assert standard_attention_accesses(4096, 128) == 69_206_016


def test_flash_attention_block_sizes_and_accesses_by_hand():
    # M = 100 KiB of bf16: 51,200 elements. B_c = ceil(51200 / (4 * 64)) = 200, B_r = min(200, 64) = 64.
    assert flash_block_sizes(64, 51_200) == (200, 64)
    # T_c = ceil(1024 / 200) = 6 passes, each reading Q, O, l, m and writing O, l, m: 1024 * (3 * 64 + 4) = 200,704;
    # K and V once: 2 * 1024 * 64 = 131,072. 131,072 + 6 * 200,704 = 1,335,296.
    assert flash_attention_accesses(1024, 64, 100 * 1024) == 1_335_296
    # A100's 192 KiB per SM, d = 128: B_c = ceil(98,304 / 512) = 192, T_c = ceil(4096 / 192) = 22.
    assert flash_attention_accesses(4096, 128, 192 * 1024) == 2 * 4096 * 128 + 22 * 4096 * (3 * 128 + 4) == 36_012_032
    # fp32 elements halve the SRAM's elements: B_c = ceil(25,600 / 256) = 100, T_c = ceil(1024 / 100) = 11.
    assert flash_attention_accesses(1024, 64, 100 * 1024, element_bytes=4) == 131_072 + 11 * 1024 * 196


def test_bytes_are_accesses_times_the_element_size_for_either_kernel():
    assert attention_hbm_bytes("materialized", 1024, 64, 100 * 1024) == 2 * 4_456_448
    assert attention_hbm_bytes("flash", 1024, 64, 100 * 1024) == 2 * 1_335_296
    with pytest.raises(ConfigError, match="attention.kernel: 'eager' is not allowed; allowed: flash, materialized"):
        attention_hbm_bytes("eager", 1024, 64, 100 * 1024)


def test_theorem_2_flash_over_standard_tends_to_3d_squared_over_m():
    # Θ(N²d²/M) against Θ(Nd + N²): for N >> d the ratio is T_c * N * 3d / 4N² ~ 3d / (4 B_c) = 3d² / M.
    n, d, m_elements = 65_536, 64, 51_200
    ratio = flash_attention_accesses(n, d, 2 * m_elements) / standard_attention_accesses(n, d)
    assert ratio == pytest.approx(3 * d * d / m_elements, rel=0.03)
    # Doubling the SRAM halves FlashAttention's passes over Q and O (not standard attention's traffic).
    big = flash_attention_accesses(n, d, 4 * m_elements)
    assert (big - 2 * n * d) * 2 == pytest.approx(flash_attention_accesses(n, d, 2 * m_elements) - 2 * n * d, rel=0.01)


def test_one_8k_prefill_of_llama_3_1_8b_holds_8_gib_of_fp32_scores_per_layer():
    llama = get_model("llama-3.1-8b")
    # torch's math SDPA keeps the scores in fp32 whatever the inputs: 4 bytes an element.
    assert score_matrix_bytes(llama, 8192, 8192) == 32 * 8192 * 8192 * 4 == 8_589_934_592
    # Tensor parallelism splits the heads: 16 per GPU at tp 2.
    assert score_matrix_bytes(llama, 8192, 8192, tensor_parallel=2) == 4_294_967_296
    # At its peak the softmax holds S and P; FlashAttention holds neither.
    assert score_activation_bytes("materialized", llama, 8192, 8192) == 2 * 8_589_934_592
    assert score_activation_bytes("flash", llama, 8192, 8192) == 0


def test_bad_sizes_are_one_line_errors():
    with pytest.raises(ConfigError, match="n: 0 is not allowed; allowed: an integer >= 1"):
        standard_attention_accesses(0, 64)
    with pytest.raises(ConfigError, match="sram_bytes"):
        flash_attention_accesses(1024, 64, 0)
