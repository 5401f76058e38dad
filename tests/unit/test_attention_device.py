"""The device's optional attention terms (issue 33), by hand: a cache level the materialized kernel's small passes run
in, the first touch of every new buffer, and a flash kernel that computes its diagonal key blocks whole. Absent (every
catalog GPU), each prices as before."""

import numpy as np
import pytest
from pydantic import ValidationError

from sim.cost import roofline_kernel as rk
from sim.cost.roofline import RooflineCostModel
from sim.errors import ConfigError
from sim.model.attention_io import tiled_score_pairs
from sim.model.catalog import GPUS
from sim.model.specs import GPUSpec, ModelSpec

# One layer of 2 heads x d 128 in fp32, the CPU benchmark's shape (benchmarks/bench_attention.py).
TINY = ModelSpec(name="tiny", num_layers=1, hidden_size=256, num_attention_heads=2, num_kv_heads=2, head_dim=128,
                 ffn_size=256, vocab_size=256, max_context=32_768, attention="mha")
# Round rates: 100 GFLOP/s, 40 GB/s from memory, a 4 MiB cache at 100 GB/s, 3 GB/s of first touch.
CPU = GPUSpec(name="cpu", bf16_flops_per_s=1e11, hbm_bytes=1 << 34, hbm_bytes_per_s=4e10, interconnect_bytes_per_s=1e9,
              host_link_bytes_per_s=1e9, price_per_hour=0, compute_efficiency=1, memory_efficiency=1,
              cache_bytes=4 << 20, cache_bytes_per_s=1e11, first_touch_bytes_per_s=3e9, flash_key_block=512)
BARE = CPU.model_copy(update={"cache_bytes": None, "cache_bytes_per_s": None, "first_touch_bytes_per_s": None,
                              "flash_key_block": None})


def prefill_s(gpu, kernel, n):
    """One layer's attention of an n-token prompt (no context): `attention_parts`'s prefill time."""
    cost = RooflineCostModel(TINY, gpu, kv_dtype="fp32", attention_dtype="fp32", attention_kernel=kernel)
    return rk.attention_parts(cost._pack()[0], n, np.array([n]), np.array([0]), 1, 0, 0, 1)[0]


def test_materialized_512_tokens_by_hand_each_pass_in_the_cache_or_memory_then_the_first_touch():
    pairs = 512 * 512  # 262,144 per head; 2 heads
    mm = max(pairs * 1024 / 1e11, (2 * 1024 * 1024 + pairs * 16) / 4e10)  # QK^T + PV: 6 MiB moved, compute-bound
    passes = [  # (bytes, bandwidth): at most 4 MiB in the cache
        (512 * 2048, 1e11),  # Q * s: 2 heads x 128 x (4 read + 4 written) per token
        (512 * 2048, 1e11),  # K * s
        (pairs * 1, 1e11), (pairs * 2, 1e11), (pairs * 5, 1e11),  # the mask: ones, tril, where (one per pair)
        (pairs * 24, 4e10),  # S += mask: 12 bytes a head, 6 MiB: from memory
        (pairs * 16, 1e11),  # softmax: 8 a head, exactly 4 MiB: in the cache (its 10 FLOPs a pair take less)
        (pairs * 10, 1e11), (pairs * 2, 1e11), (pairs * 16, 1e11),  # S == -inf, all, where
    ]
    fresh = pairs * (9 * 2 + 6) + 512 * 2048 + 512 * 1024  # S, P, bool; three masks; Q*s, O; K*s: 7.5 MiB
    expected = mm + sum(b / bw for b, bw in passes) + fresh / 3e9
    assert prefill_s(CPU, "materialized", 512) == pytest.approx(expected, rel=1e-12)
    # Without a cache every pass runs from memory; without a first touch nothing is added.
    bare = mm + sum(b / 4e10 for b, _ in passes)
    assert prefill_s(BARE, "materialized", 512) == pytest.approx(bare, rel=1e-12)


def test_each_pass_s_own_time_per_element_is_paid_on_top_of_its_memory_time_and_flash_is_unchanged():
    # 512 tokens, 2 heads: 524,288 score elements, 262,144 mask elements, 131,072 Q (and K) elements.
    own = {"softmax": 2e-9, "where_mask": 1e-9, "scale_q": 3e-9}
    cpu = CPU.model_copy(update={"pass_s_per_element": own})
    added = 2 * 512 * 512 * 2e-9 + 512 * 512 * 1e-9 + 2 * 512 * 128 * 3e-9
    assert prefill_s(cpu, "materialized", 512) == pytest.approx(prefill_s(CPU, "materialized", 512) + added, rel=1e-12)
    assert prefill_s(cpu, "flash", 512) == prefill_s(CPU, "flash", 512)
    # Only the elementwise passes have one; a time must be a positive number.
    with pytest.raises(ConfigError, match="hardware.gpu.pass_s_per_element: 'qk' is not allowed; allowed: cast_q, "):
        prefill_s(CPU.model_copy(update={"pass_s_per_element": {"qk": 1e-9}}), "materialized", 512)
    with pytest.raises(ValidationError, match=r"pass_s_per_element.softmax: 0.0 is not allowed; allowed: a number > 0"):
        CPU.model_validate({**CPU.model_dump(), "pass_s_per_element": {"softmax": 0.0}})


def test_flash_computes_whole_diagonal_key_blocks_and_first_touches_its_output():
    # 512 tokens in one key block of 512: all 512² pairs, not the causal 512 x 513 / 2, then O (2 x 128 fp32 a token).
    assert prefill_s(CPU, "flash", 512) == pytest.approx(512 * 512 * 1024 / 1e11 + 512 * 1024 / 3e9, rel=1e-12)
    assert prefill_s(BARE, "flash", 512) == pytest.approx(512 * 513 / 2 * 1024 / 1e11, rel=1e-12)
    # 1,024 tokens: rows 0-511 compute 512 keys, rows 512-1023 all 1,024.
    assert prefill_s(CPU, "flash", 1024) == pytest.approx((512 * 512 + 512 * 1024) * 1024 / 1e11 + 1024 * 1024 / 3e9,
                                                          rel=1e-12)


def test_tiled_causal_pairs_are_torch_s_cpu_kernel_counts_and_follow_a_chunk_s_context():
    for n in (1, 511, 512, 513, 1024, 1100, 16_384):
        assert rk.tiled_causal_pairs(n, 0, 512.0) == tiled_score_pairs(n, 256, 512) == tiled_score_pairs(n, 64, 512)
    # 300 rows after 400 tokens: rows at 400-511 compute keys up to 512, rows at 512-699 up to the last key, 700.
    assert rk.tiled_causal_pairs(300, 400, 512.0) == 112 * 512 + 188 * 700 == 188_944


def test_the_catalog_gpus_have_none_of_the_terms_and_a_cache_needs_its_bandwidth():
    for gpu in GPUS.values():
        assert (gpu.cache_bytes, gpu.cache_bytes_per_s, gpu.first_touch_bytes_per_s, gpu.flash_key_block,
                gpu.pass_s_per_element) == (None, None, None, None, None)
    with pytest.raises(ValidationError, match="cache_bytes and cache_bytes_per_s go together"):
        CPU.model_validate({**CPU.model_dump(), "cache_bytes_per_s": None})
    with pytest.raises(ConfigError, match="attention_dtype: 'int8' is not allowed; allowed: bf16, fp16, fp32"):
        RooflineCostModel(TINY, CPU, attention_dtype="int8")


# A GPU of round rates: bf16 tensor cores 1 PFLOP/s, fp32 1 TFLOP/s, memory so fast that every op is compute-bound.
ROUND_GPU = GPUSpec(name="round", bf16_flops_per_s=1e15, fp32_flops_per_s=1e12, hbm_bytes=1 << 36, hbm_bytes_per_s=1e20,
                    interconnect_bytes_per_s=1e9, host_link_bytes_per_s=1e9, price_per_hour=0, compute_efficiency=1,
                    memory_efficiency=1)


def bf16_prefill_s(gpu, kernel, n):
    cost = RooflineCostModel(TINY, gpu, attention_kernel=kernel)  # bf16 Q, K, V: torch casts them to fp32
    return rk.attention_parts(cost._pack()[0], n, np.array([n]), np.array([0]), 1, 0, 0, 1)[0]


def test_the_materialized_kernel_computes_in_fp32_and_is_priced_at_the_fp32_rate():
    """torch's math SDPA casts bf16 inputs to fp32 (`_scaled_dot_product_attention_math`), so its matmuls and
    softmax run at the device's fp32 rate. By hand, 512 tokens, 2 heads x d 128: QK^T and PV over the whole 512 x 512
    rectangle (the mask is applied, not skipped), 2 FLOPs per multiply-add, and the softmax's 5 FLOPs per score."""
    pairs = 512 * 512
    flops = pairs * 2 * 2 * (128 + 128) + 5 * 2 * pairs
    assert bf16_prefill_s(ROUND_GPU, "materialized", 512) == pytest.approx(flops / 1e12, rel=1e-6)
    # the bf16 rate does not enter it; flash runs on the tensor cores, whatever the fp32 rate
    faster_tensor = ROUND_GPU.model_copy(update={"bf16_flops_per_s": 2e15})
    assert bf16_prefill_s(faster_tensor, "materialized", 512) == bf16_prefill_s(ROUND_GPU, "materialized", 512)
    slower_fp32 = ROUND_GPU.model_copy(update={"fp32_flops_per_s": 5e11})
    assert bf16_prefill_s(slower_fp32, "flash", 512) == bf16_prefill_s(ROUND_GPU, "flash", 512)
    # a GPU that gives no fp32 rate: the bf16 rate, said in the cost model's repr
    unknown = ROUND_GPU.model_copy(update={"fp32_flops_per_s": None})
    assert bf16_prefill_s(unknown, "materialized", 512) == pytest.approx(flops / 1e15, rel=1e-3)
    assert "at the bf16 rate" in repr(RooflineCostModel(TINY, unknown, attention_kernel="materialized"))
    assert "bf16 rate" not in repr(RooflineCostModel(TINY, ROUND_GPU, attention_kernel="materialized"))


def test_every_catalog_gpu_with_an_fp32_source_names_its_rate_below_its_bf16_tensor_rate():
    # no NVIDIA datasheet for the a10g; the four Blackwell parts' rates are aiconfigurator's system files, which give
    # no fp32 rate
    for name, gpu in GPUS.items():
        if name in ("a10g", "a30", "b300", "gb200", "gb300", "rtx-pro-6000"):
            assert gpu.fp32_flops_per_s is None
        elif name == "l40":  # its tensor cores run bf16 at half the L40S's rate, 2x its fp32 rate
            assert gpu.fp32_flops_per_s == pytest.approx(gpu.bf16_flops_per_s / 2, rel=0.01)
        else:
            assert 0 < gpu.fp32_flops_per_s < gpu.bf16_flops_per_s / 3, name
