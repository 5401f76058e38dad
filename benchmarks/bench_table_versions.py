"""How far AIConfigurator's kernel times move between two versions of one engine, where it measured both.

ServeSim prices every run of an engine from the one version of that engine's tables that AIConfigurator 0.12.0
queries (vLLM 0.24.0, SGLang 0.5.14, TensorRT-LLM 1.3.0rc20; calibrate/aic_import.py), whatever version the run
names. Published runs of older releases (vLLM 0.8.x, SGLang 0.4.x, April 2025) are simulated faster than they ran;
older kernels are a candidate cause. The package keeps an older version beside the queried one for a few tables;
this compares them at the shapes both measured (older / newer latency, median and 10th-90th percentiles):

- SGLang's GEMMs on the H100, 0.5.6.post2 against 0.5.14, per dtype;
- vLLM's fused MoE on the H200, 0.19.0 (its `vllm_fused_moe`, the Triton kernel vLLM 0.8 ran) against 0.24.0's
  Triton rows (the kernel the shipped tables keep), per routing, overall and at DeepSeek-V3/R1's experts over 8 GPUs
  (hidden 7168, intermediate 2048, top 8 of 256, moe TP 8);
- SGLang's fused MoE on the H200, 0.5.10 against 0.5.14, per dtype (both Triton).

It says nothing about versions older than the oldest kept (vLLM 0.8, SGLang 0.4 were not measured). Nothing is fitted
and nothing shipped reads it. Needs aiconfigurator-core 0.12.0 on the path (`pip install aiconfigurator-core==0.12.0`,
or its wheel unpacked on PYTHONPATH).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_table_versions.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# the shipped tables keep AIConfigurator's column names, so the fused-MoE configuration's keys are the same
from sim.cost.measured import MOE_KEYS, of_moe_config  # noqa: E402

SHAPE = ["m", "n", "k"]
MOE = ["num_tokens", *MOE_KEYS, "distribution"]
DEEPSEEK_TP8 = (7168, 2048, 8, 256, 8, 1)  # MOE_KEYS' values


def ratios(old: pd.DataFrame, new: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Older / newer latency at every shape both measured (each side's median where a shape repeats)."""
    a, b = (d.groupby(keys)["latency"].median() for d in (old, new))
    both = a.index.intersection(b.index)
    return (a[both] / b[both]).rename("ratio")


def row(label: str, r: pd.Series) -> str:
    q = np.quantile(r.to_numpy(), [0.1, 0.5, 0.9]) if len(r) else [float("nan")] * 3
    return f"| {label} | {len(r):,} | {q[1]:.3f} | {q[0]:.3f} - {q[2]:.3f} |"


def main() -> int:
    try:
        import aiconfigurator_core
    except ImportError:
        print("aiconfigurator-core 0.12.0 is not installed: nothing to compare", file=sys.stderr)
        return 2
    data = Path(aiconfigurator_core.__file__).parent / "systems" / "data"

    def read(system, op, framework, version, name):
        return pd.read_parquet(data / system / op / framework / version / name)

    print("| tables, older against newer | shapes | older / newer, median | 10th - 90th percentile |")
    print("| --- | ---: | ---: | ---: |")
    old, new = (read("h100_sxm", "gemm", "sglang", v, "gemm_perf.parquet") for v in ("0.5.6.post2", "0.5.14"))
    for dtype in sorted(set(old["gemm_dtype"]) & set(new["gemm_dtype"])):
        r = ratios(old[old["gemm_dtype"] == dtype], new[new["gemm_dtype"] == dtype], SHAPE)
        print(row(f"SGLang H100 GEMM {dtype}, 0.5.6.post2 / 0.5.14", r))

    old, new = (read("h200_sxm", "moe", "vllm", v, "moe_perf.parquet") for v in ("0.19.0", "0.24.0"))
    old = old[(old["moe_dtype"] == "fp8_block") & (old["kernel_source"] == "vllm_fused_moe")]
    new = new[(new["moe_dtype"] == "fp8_block") & (new["kernel_source"] == "vllm_fp8moe_triton_tritonexperts")]
    r = ratios(old, new, MOE)
    for distribution in sorted(set(r.index.get_level_values("distribution"))):
        part = r.xs(distribution, level="distribution")
        print(row(f"vLLM H200 fused MoE fp8_block (Triton), 0.19.0 / 0.24.0, {distribution}", part))
        frame = part.reset_index()
        deepseek = of_moe_config(frame, DEEPSEEK_TP8)
        print(row(f"  the same at DeepSeek-R1's experts, moe TP 8, {distribution}", frame.loc[deepseek, "ratio"]))

    old, new = (read("h200_sxm", "moe", "sglang", v, "moe_perf.parquet") for v in ("0.5.10", "0.5.14"))
    for dtype in ("bfloat16", "fp8_block"):
        o = old[(old["moe_dtype"] == dtype) & (old["kernel_source"] == "sglang_fused_moe_triton")]
        n = new[(new["moe_dtype"] == dtype) & (new["kernel_source"] == "sglang_fused_moe_triton")]
        print(row(f"SGLang H200 fused MoE {dtype} (Triton), 0.5.10 / 0.5.14, every routing", ratios(o, n, MOE)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
