"""The Triton paged-attention decode kernel against a float64 torch reference, on the CPU through
Triton's interpreter; and the torch ops calibration times against theirs. Fresh random inputs.

TRITON_INTERPRET must be set before the kernel module is imported (triton.jit reads it then).
"""

from __future__ import annotations

import math
import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from calibrate.kernels import reference as ref  # noqa: E402
from calibrate.kernels import torch_ops as ops  # noqa: E402
from calibrate.kernels.paged_attention import paged_attention_decode  # noqa: E402

_TOLERANCE = 1e-5  # relative error in fp32 against the float64 reference


def _paged_case(seed: int, context_lens: list[int], block_size: int, num_kv_heads: int, group: int, head_dim: int):
    gen = torch.Generator().manual_seed(seed)
    per_seq = max(math.ceil(n / block_size) for n in context_lens)
    num_blocks = len(context_lens) * per_seq + 5  # spare blocks nobody points at
    k_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=gen)
    v_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=gen)
    # Scattered, non-contiguous block ids: the kernel must follow the table, not assume an order.
    table = torch.randperm(num_blocks, generator=gen)[:len(context_lens) * per_seq].view(len(context_lens), per_seq)
    q = torch.randn(len(context_lens), num_kv_heads * group, head_dim, generator=gen)
    return q, k_cache, v_cache, table.to(torch.int32), torch.tensor(context_lens, dtype=torch.int32)


@pytest.mark.parametrize("block_size", [1, 8, 16, 32, 5])
@pytest.mark.parametrize("group", [1, 4, 8])
def test_triton_paged_attention_matches_reference(block_size, group):
    # Ragged lengths: a single token, exactly one block, one past a block, several blocks partly filled.
    lens = [1, block_size, block_size + 1, 3 * block_size + 2, 37]
    inputs = _paged_case(seed=block_size * 10 + group, context_lens=lens, block_size=block_size,
                         num_kv_heads=2, group=group, head_dim=32)
    out = paged_attention_decode(*inputs)
    expected = ref.paged_decode(*inputs)
    assert ref.relative_error(out, expected) < _TOLERANCE


def test_triton_paged_attention_head_dim_not_a_power_of_two():
    inputs = _paged_case(seed=7, context_lens=[3, 20, 9], block_size=16, num_kv_heads=1, group=4, head_dim=48)
    assert ref.relative_error(paged_attention_decode(*inputs), ref.paged_decode(*inputs)) < _TOLERANCE


def test_triton_paged_attention_reads_only_its_own_blocks():
    """Changing a block the table does not list for a sequence leaves that sequence's output alone."""
    q, k_cache, v_cache, table, lens = _paged_case(seed=3, context_lens=[20, 20], block_size=8, num_kv_heads=2,
                                                   group=2, head_dim=16)
    before = paged_attention_decode(q, k_cache, v_cache, table, lens)
    other = table[1].tolist()
    k_cache[other] += 100.0
    after = paged_attention_decode(q, k_cache, v_cache, table, lens)
    assert torch.equal(before[0], after[0])
    assert not torch.allclose(before[1], after[1])


@pytest.mark.parametrize("group", [1, 4, 8])
def test_torch_gather_paged_decode_matches_reference(group):
    """The CPU timing path (gather by block id, then SDPA) computes the same attention."""
    inputs = _paged_case(seed=group, context_lens=[1, 16, 17, 50], block_size=16, num_kv_heads=2, group=group,
                         head_dim=32)
    assert ref.relative_error(ops.paged_decode_gather(*inputs), ref.paged_decode(*inputs)) < _TOLERANCE
    k_cache = inputs[1]
    buffers = (torch.empty_like(k_cache[: inputs[3].numel()]), torch.empty_like(k_cache[: inputs[3].numel()]))
    out = ops.paged_decode_gather(*inputs, buffers=buffers)
    assert ref.relative_error(out, ref.paged_decode(*inputs)) < _TOLERANCE


@pytest.mark.parametrize("chunk, context", [(1, 0), (16, 0), (7, 30), (32, 100)])
def test_prefill_attention_is_bottom_right_causal(chunk, context):
    gen = torch.Generator().manual_seed(chunk + context)
    q = torch.randn(1, 8, chunk, 32, generator=gen)
    k, v = torch.randn(1, 2, context + chunk, 32, generator=gen), torch.randn(1, 2, context + chunk, 32, generator=gen)
    assert ref.relative_error(ops.prefill_attention(q, k, v), ref.prefill_attention(q, k, v)) < _TOLERANCE


def test_elementwise_ops_match_references():
    gen = torch.Generator().manual_seed(11)
    x, w = torch.randn(6, 64, generator=gen), torch.randn(64, generator=gen)
    assert ref.relative_error(ops.rms_norm(x, w), ref.rms_norm(x, w)) < _TOLERANCE
    heads, positions = torch.randn(6, 4, 32, generator=gen), torch.randint(0, 4096, (6,), generator=gen)
    cos, sin = ops.rotary_cos_sin(positions, 32)
    assert ref.relative_error(ops.apply_rotary(heads, cos, sin), ref.rotary(heads, positions)) < 1e-4
    gate_up = torch.randn(6, 128, generator=gen)
    assert ref.relative_error(ops.silu_and_mul(gate_up), ref.silu_and_mul(gate_up)) < _TOLERANCE


def test_sampling_follows_the_distribution():
    """The exponential race draws index i with probability softmax(logits / T)[i]."""
    gen = torch.Generator().manual_seed(5)
    logits = torch.tensor([[0.0, 1.0, 2.0, -1.0]]).repeat(20000, 1)
    drawn = ops.sample(logits, temperature=0.8, generator=gen)
    freq = torch.bincount(drawn, minlength=4).double() / len(drawn)
    expected = torch.softmax(logits[0].double() / 0.8, dim=-1)
    assert (freq - expected).abs().max() < 0.015
