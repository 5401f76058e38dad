"""`calibrate selftest` and `calibrate paged-bench` on the CPU with a tiny model (the Triton kernels through
TRITON_INTERPRET): they run, print their tables, and the self-test fails when a kernel is wrong.

TRITON_INTERPRET must be set before triton is imported (triton.jit reads it then).
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

from pathlib import Path  # noqa: E402

import pandas as pd  # noqa: E402
import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from calibrate.arch import load_model  # noqa: E402
from calibrate.gpucheck import selftest  # noqa: E402
from calibrate.kernels import fused  # noqa: E402
from test_calibrated import one_error_line, run_cli  # noqa: E402

ARCH_FILE = Path(__file__).resolve().parents[1] / "fixtures" / "calibrate" / "tiny_llama.yaml"


def test_selftest_passes_with_the_kernels_as_written():
    results = selftest(load_model(str(ARCH_FILE)), 1, "fp32", "cpu")
    names = {r.name for r in results}
    assert {"triton rms_norm", "triton fused_add_rms_norm (output)", "triton rotary_inplace (q)",
            "triton silu_and_mul", "triton paged attention", "fused layer vs unfused layer"} <= names
    assert all(r.ok for r in results), [r for r in results if not r.ok]


def test_selftest_catches_a_wrong_kernel(monkeypatch):
    real = fused.silu_and_mul
    monkeypatch.setattr(fused, "silu_and_mul", lambda x, out=None: real(x, out) * 1.1)
    failed = [r.name for r in selftest(load_model(str(ARCH_FILE)), 1, "fp32", "cpu") if not r.ok]
    assert "triton silu_and_mul" in failed


def test_paged_bench_cli_writes_its_table(tmp_path):
    out = tmp_path / "paged.csv"
    result = run_cli("calibrate", "paged-bench", "--model", str(ARCH_FILE), "--grid", "quick", "--dtype", "fp32",
                     "--out", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    table = pd.read_csv(out)
    assert list(table.columns) == ["decode_batch", "decode_context", "dense_s", "paged_s", "ratio"]
    assert len(table) == 4 and (table["ratio"] > 0).all()
    assert "paged / dense: median" in result.stdout


def test_selftest_without_cuda_gives_one_line(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    line = one_error_line(run_cli("calibrate", "selftest", "--device", "cuda", "--model", str(ARCH_FILE),
                                  cwd=tmp_path))
    assert "--device:" in line and "allowed here: cpu" in line
