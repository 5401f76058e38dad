"""The flash-decoding paged attention kernel's split path (several partitions per sequence, combined by
the reduce kernel) against the float64 reference, on the CPU through Triton's interpreter. Small
partitions are forced so ragged contexts span several partitions, some sequences fewer than others.

TRITON_INTERPRET must be set before triton is imported (triton.jit reads it then).
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from calibrate.kernels import reference as ref  # noqa: E402
from calibrate.kernels.paged_attention import choose_partition, paged_attention_decode  # noqa: E402
from test_calibrate_kernels import _paged_case  # noqa: E402


@pytest.mark.parametrize("block_size", [1, 5, 8, 16, 32])
@pytest.mark.parametrize("group", [1, 4, 8])
def test_split_partitions_match_the_reference(block_size, group):
    # 1 token (one partition, the rest empty), a partition boundary exactly, one past it, several partitions.
    lens = [1, 32, 33, 75, 130]
    inputs = _paged_case(seed=100 + block_size * 10 + group, context_lens=lens, block_size=block_size,
                         num_kv_heads=2, group=group, head_dim=32)
    out = paged_attention_decode(*inputs, partition_tokens=32, tile_tokens=16)
    assert ref.relative_error(out, ref.paged_decode(*inputs)) < 1e-5


@pytest.mark.parametrize("partition, tile", [(16, 16), (64, 32), (256, 64)])
def test_partition_and_tile_sizes_do_not_change_the_result(partition, tile):
    inputs = _paged_case(seed=partition, context_lens=[200, 7, 64, 129], block_size=16, num_kv_heads=1, group=4,
                         head_dim=48)
    out = paged_attention_decode(*inputs, partition_tokens=partition, tile_tokens=tile)
    assert ref.relative_error(out, ref.paged_decode(*inputs)) < 1e-5


def test_bf16_split_path_matches_the_reference():
    q, k, v, table, lens = _paged_case(seed=9, context_lens=[90, 3, 47], block_size=16, num_kv_heads=2, group=4,
                                       head_dim=64)
    q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
    out = paged_attention_decode(q, k, v, table, lens, partition_tokens=32, tile_tokens=16)
    assert out.dtype == torch.bfloat16
    assert ref.relative_error(out, ref.paged_decode(q, k, v, table, lens)) < 2e-2


def test_q_may_be_a_strided_view_of_the_qkv_output():
    q, k, v, table, lens = _paged_case(seed=4, context_lens=[40, 17], block_size=8, num_kv_heads=2, group=2,
                                       head_dim=16)
    wide = torch.randn(2, 4 + 2 * 2, 16)
    wide[:, :4] = q
    view = wide[:, :4]
    assert not view.is_contiguous()
    out = paged_attention_decode(view, k, v, table, lens, partition_tokens=16, tile_tokens=16)
    assert ref.relative_error(out, ref.paged_decode(q, k, v, table, lens)) < 1e-5


def test_the_split_is_chosen_to_fill_the_gpu():
    # Batch 1, 8 KV heads, 2048 tokens on 132 multiprocessors: split; batch 256: one partition each.
    assert choose_partition(1, 8, 2048, 64, 132) < 2048
    assert choose_partition(256, 8, 2048, 64, 132) >= 2048
    for args in [(1, 8, 2048, 64, 132), (4, 2, 100, 16, 132), (64, 8, 8192, 64, 132)]:
        assert choose_partition(*args) % args[3] == 0


def test_bad_tiles_are_refused():
    inputs = _paged_case(seed=1, context_lens=[5], block_size=4, num_kv_heads=1, group=1, head_dim=16)
    with pytest.raises(ValueError, match="tile_tokens"):
        paged_attention_decode(*inputs, tile_tokens=24)
    with pytest.raises(ValueError, match="multiple of tile_tokens"):
        paged_attention_decode(*inputs, partition_tokens=40, tile_tokens=16)
