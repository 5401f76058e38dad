"""benchmarks/bench_sustained_gpu.py on a CPU (`--dry-run`): its windows' CSV, and its refusals (exit 2, one line,
nothing written or overwritten)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_sustained_gpu.py"


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_a_dry_run_writes_one_row_per_window_with_a_positive_rate(tmp_path):
    out = tmp_path / "windows.csv"
    done = bench("--dry-run", "--workloads", "copy", "--seconds", "1", "--window-s", "0.2", "--csv", str(out))
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(out.open()))
    assert len(rows) >= 2 and {r["workload"] for r in rows} == {"copy"} and {r["unit"] for r in rows} == {"TB/s"}
    assert all(float(r["rate"]) > 0 for r in rows)
    times = [float(r["t_s"]) for r in rows]
    assert times == sorted(times) and times[-1] >= 1.0  # it ran for the seconds asked
    assert "median of the last third" in done.stdout


@pytest.mark.parametrize("args, field", [(("--workloads", "gemm,fft"), "--workloads"),
                                         (("--csv", "EXISTING"), "--csv")])
def test_bad_input_is_refused_in_one_line_and_nothing_is_touched(tmp_path, args, field):
    existing = tmp_path / "mine.csv"
    existing.write_text("a user's file\n")
    args = tuple(str(existing) if a == "EXISTING" else a for a in args)
    done = bench("--dry-run", *args)
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1
    assert done.stderr.startswith(field) and "allowed" in done.stderr
    assert existing.read_text() == "a user's file\n"
