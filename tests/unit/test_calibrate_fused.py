"""The fused Triton kernels (calibrate/kernels/fused.py) and their torch fallbacks against the float64
references, on the CPU through Triton's interpreter. Fresh random inputs (never zeros), ragged and odd
sizes, outputs poisoned with NaN before the call so a row or column the kernel skips shows up.

TRITON_INTERPRET must be set before triton is imported (triton.jit reads it then).
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from calibrate.kernels import fused  # noqa: E402
from calibrate.kernels import reference as ref  # noqa: E402

_TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2}  # relative error against float64
_DTYPES = [torch.float32, torch.bfloat16]
_IMPLS = {"triton": (fused.rms_norm, fused.fused_add_rms_norm, fused.rotary_inplace, fused.silu_and_mul),
          "torch": (fused.rms_norm_torch, fused.fused_add_rms_norm_torch, fused.rotary_inplace_torch,
                    fused.silu_and_mul_torch)}


def _randn(gen, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=gen).to(dtype)


def _poisoned(*shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype)


@pytest.mark.parametrize("impl", list(_IMPLS))
@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("rows, hidden", [(1, 64), (7, 96), (3, 1000)])
def test_rms_norm_matches_reference(impl, dtype, rows, hidden):
    rms_norm, _, _, _ = _IMPLS[impl]
    gen = torch.Generator().manual_seed(rows * hidden)
    x, w = _randn(gen, rows, hidden, dtype=dtype), _randn(gen, hidden, dtype=dtype)
    out = rms_norm(x, w, 1e-6, _poisoned(rows, hidden, dtype=dtype))
    assert ref.relative_error(out, ref.rms_norm(x, w)) < _TOLERANCE[dtype]


@pytest.mark.parametrize("impl", list(_IMPLS))
@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("rows, hidden", [(1, 64), (5, 96), (9, 1000)])
def test_fused_add_rms_norm_updates_the_residual_and_normalizes_the_sum(impl, dtype, rows, hidden):
    _, add_norm, _, _ = _IMPLS[impl]
    gen = torch.Generator().manual_seed(rows + hidden)
    x, residual, w = _randn(gen, rows, hidden, dtype=dtype), _randn(gen, rows, hidden, dtype=dtype), \
        _randn(gen, hidden, dtype=dtype)
    expected_out, expected_residual = ref.fused_add_rms_norm(x, residual, w)
    x_before = x.clone()
    out = add_norm(x, residual, w, 1e-6, _poisoned(rows, hidden, dtype=dtype))
    assert ref.relative_error(residual, expected_residual) < _TOLERANCE[dtype]
    assert ref.relative_error(out, expected_out) < _TOLERANCE[dtype]
    assert torch.equal(x, x_before)  # x is read, not written


def test_fused_add_rms_norm_handles_strided_rows():
    """Rows of a wider buffer (a stride larger than the row): the kernel follows the stride."""
    gen = torch.Generator().manual_seed(3)
    wide = _randn(gen, 4, 80)
    x, residual, w = wide[:, :48], _randn(gen, 4, 48), _randn(gen, 48)
    expected_out, expected_residual = ref.fused_add_rms_norm(x, residual, w)
    out = fused.fused_add_rms_norm(x, residual, w)
    assert ref.relative_error(out, expected_out) < 1e-5
    assert ref.relative_error(residual, expected_residual) < 1e-5


@pytest.mark.parametrize("impl", list(_IMPLS))
@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("tokens, q_heads, k_heads, head_dim", [(1, 4, 4, 64), (5, 6, 2, 32), (3, 7, 1, 48)])
def test_rotary_rotates_q_and_k_in_place(impl, dtype, tokens, q_heads, k_heads, head_dim):
    _, _, rotary, _ = _IMPLS[impl]
    gen = torch.Generator().manual_seed(tokens * q_heads + head_dim)
    max_position = 5000
    positions = torch.randint(0, max_position, (tokens,), generator=gen)
    # q and k as views into one QKV GEMM output, as an engine splits it: strided along tokens.
    qkv = _randn(gen, tokens, (q_heads + 2 * k_heads) * head_dim, dtype=dtype)
    q = qkv[:, :q_heads * head_dim].view(tokens, q_heads, head_dim)
    k = qkv[:, q_heads * head_dim:(q_heads + k_heads) * head_dim].view(tokens, k_heads, head_dim)
    v_before = qkv[:, (q_heads + k_heads) * head_dim:].clone()
    expected_q, expected_k = ref.rotary(q, positions), ref.rotary(k, positions)
    cache = fused.rotary_cos_sin_cache(max_position, head_dim, "cpu")
    rotary(q, k, positions, cache)
    assert ref.relative_error(q, expected_q) < _TOLERANCE[dtype]
    assert ref.relative_error(k, expected_k) < _TOLERANCE[dtype]
    assert torch.equal(qkv[:, (q_heads + k_heads) * head_dim:], v_before)  # v untouched


@pytest.mark.parametrize("impl", list(_IMPLS))
@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("rows, ffn", [(1, 16), (6, 100), (2, 2500)])
def test_silu_and_mul_matches_reference(impl, dtype, rows, ffn):
    _, _, _, silu_and_mul = _IMPLS[impl]
    gen = torch.Generator().manual_seed(rows + ffn)
    x = _randn(gen, rows, 2 * ffn, dtype=dtype)
    out = silu_and_mul(x, _poisoned(rows, ffn, dtype=dtype))
    assert ref.relative_error(out, ref.silu_and_mul(x)) < _TOLERANCE[dtype]


def test_kernels_reject_layouts_they_cannot_read():
    with pytest.raises(ValueError, match="contiguous"):
        fused.rms_norm(torch.randn(8, 4).t(), torch.randn(8))
    with pytest.raises(ValueError, match="disagree"):
        fused.rotary_inplace(torch.randn(3, 2, 8), torch.randn(4, 2, 8), torch.arange(3),
                             fused.rotary_cos_sin_cache(16, 8, "cpu"))


def test_fused_ops_name_their_implementations():
    assert "triton" in fused.fused_ops("cuda").impls["rmsnorm"]
    assert fused.fused_ops("cpu").rms_norm is fused.rms_norm_torch
