"""benchmarks/published_diff.py: two suite CSVs side by side, on files written here by hand."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import published_diff  # noqa: E402

COLUMNS = ["case", "engine", "version", "role", "metric", "error", "measured"]


def write(path: Path, rows: list[tuple]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        w.writerows(rows)
    return path


def test_it_names_every_figure_that_moved_and_the_medians_before_and_after(tmp_path, capsys):
    before = write(tmp_path / "a.csv", [
        ("a", "vllm", "0.6.0", "held-out", "throughput", 0.10, 1), ("a", "vllm", "0.6.0", "held-out", "ttft", -0.30, 1),
        ("b", "vllm", "0.6.0", "held-out", "throughput", 0.20, 1), ("b", "vllm", "0.6.0", "held-out", "itl", 0.5, 1),
        ("c", "vllm", "0.11.0", "held-out", "throughput", 0.05, 1), ("f", "vllm", "0.6.0", "fit", "ttft", 0.01, 1),
        ("s", "sglang", "0.5.3", "held-out", "ttft", "", 1), ("gone", "vllm", "0.6.0", "held-out", "ttft", 0.2, 1)])
    after = write(tmp_path / "b.csv", [
        ("a", "vllm", "0.6.0", "held-out", "throughput", 0.10, 1), ("a", "vllm", "0.6.0", "held-out", "ttft", -0.10, 1),
        ("b", "vllm", "0.6.0", "held-out", "throughput", 0.40, 1), ("b", "vllm", "0.6.0", "held-out", "itl", 0.1, 1),
        ("c", "vllm", "0.11.0", "held-out", "throughput", 0.05, 1), ("f", "vllm", "0.6.0", "fit", "ttft", 0.02, 1),
        ("s", "sglang", "0.5.3", "held-out", "ttft", "", 1)])
    assert published_diff.main([str(before), str(after)]) == 0
    out = capsys.readouterr().out
    # vLLM's held-out throughput: |0.10|, |0.20|, |0.05| -> median 10%, max 20%; then 0.10, 0.40, 0.05. Each file's
    # summary is over its own rows: before, TTFT has "gone"'s too
    assert "| vLLM | 10.0 / 20 (n=3) -> 10.0 / 40 (n=3) | 25.0 / 30 (n=2) -> 10.0 / 10 (n=1) | - |" in out
    assert "| SGLang | - | - | - |" in out  # a NaN on both sides is no figure and no move
    # only 0.6.0 moved; 0.11.0 is not listed among the versions
    assert "| vLLM | 0.6.0 |" in out and "| vLLM | 0.11.0 |" not in out
    assert "| a | held-out | ttft | -30.0% | -10.0% | yes |" in out
    assert "| b | held-out | throughput | +20.0% | +40.0% | no |" in out
    assert "| f | fit | ttft | +1.0% | +2.0% | no |" in out
    assert "| b | held-out | itl |" not in out  # not a headline metric
    assert "3 figures moved, 1 came closer; 4 moved in all metrics." in out
    assert "In one file only: 1 figures before, 0 after (not compared)." in out
    assert published_diff.main([str(before), str(after), "--all-metrics"]) == 0
    assert "| b | held-out | itl | +50.0% | +10.0% | yes |" in capsys.readouterr().out


def test_a_file_that_is_not_a_suite_csv_is_refused_in_one_line(tmp_path, capsys):
    good = write(tmp_path / "good.csv", [("a", "vllm", "0.6.0", "held-out", "ttft", 0.1, 1)])
    (tmp_path / "bad.csv").write_text("case,metric\na,ttft\n")
    twice = write(tmp_path / "twice.csv", [("a", "vllm", "0.6.0", "held-out", "ttft", 0.1, 1)] * 2)
    for other, words in ((tmp_path / "missing.csv", "no such file"), (tmp_path / "bad.csv", "no column 'engine'"),
                         (twice, "case 'a' has metric 'ttft' twice")):
        assert published_diff.main([str(good), str(other)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("published_diff: ") and words in err and "\n" not in err
