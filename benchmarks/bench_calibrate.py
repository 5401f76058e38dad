"""How long a CPU calibration takes, and how well its profile predicts held-out shapes.

Runs `python -m calibrate run` (quick grid, CPU) for each architecture into a temporary folder,
then `python -m calibrate fit`, and prints one Markdown row per architecture (paste into
benchmarks/RESULTS.md). Run:

    .venv/bin/python benchmarks/bench_calibrate.py                       # the tiny test model, fp32 and bf16
    .venv/bin/python benchmarks/bench_calibrate.py --model qwen2_5_0_5b  # Qwen2.5-0.5B shapes (minutes)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "fixtures" / "calibrate" / "tiny_llama.yaml"
# Qwen/Qwen2.5-0.5B config.json: hidden_size 896, 24 layers, 14 heads, 2 KV heads, intermediate 4864,
# vocab 151936, max_position_embeddings 32768 (head_dim = 896 / 14 = 64).
QWEN_0_5B = {"name": "qwen2.5-0.5b", "num_layers": 24, "hidden_size": 896, "num_attention_heads": 14,
             "num_kv_heads": 2, "head_dim": 64, "ffn_size": 4864, "vocab_size": 151936, "max_context": 32768,
             "attention": "gqa", "attention_bias": True, "tie_word_embeddings": True}


def calibrate(arch: Path, dtype: str, threads: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "profile"
        start = time.perf_counter()
        run = subprocess.run([sys.executable, "-m", "calibrate", "run", "--model", str(arch), "--dtype", dtype,
                              "--threads", str(threads), "--grid", "quick", "--out", str(out), "--quiet"],
                             cwd=REPO, capture_output=True, text=True)
        if run.returncode:
            sys.exit(run.stderr.strip())
        wall_s = time.perf_counter() - start
        fit = json.loads(subprocess.run([sys.executable, "-m", "calibrate", "fit", str(out), "--json"], cwd=REPO,
                                        check=True, capture_output=True, text=True).stdout)
        meta = json.loads((out / "meta.json").read_text())
    return {"wall_s": wall_s, "fit": fit, "meta": meta}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["tiny", "qwen2_5_0_5b"], default="tiny")
    parser.add_argument("--dtype", nargs="*", default=["fp32", "bf16"])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        arch = TINY
        if args.model == "qwen2_5_0_5b":
            arch = Path(tmp) / "qwen.json"
            arch.write_text(json.dumps(QWEN_0_5B))
        for dtype in args.dtype:
            r = calibrate(arch, dtype, args.threads)
            fit = {row["op"]: row for row in r["fit"]}
            worst = max(fit.values(), key=lambda row: row["median_ape_pct"])
            gemm = [row["median_ape_pct"] for op, row in fit.items() if op.startswith("linear:")]
            points = sum(1 for _ in r["fit"])
            print(f"| {r['meta']['model']['name']} | {dtype} | {args.threads} | {r['wall_s']:.1f} | "
                  f"{sorted(gemm)[len(gemm) // 2]:.1f} | {worst['op']} {worst['median_ape_pct']:.1f} | "
                  f"{sum(row['median_ape_pct'] for row in r['fit']) / points:.1f} |")


if __name__ == "__main__":
    main()
