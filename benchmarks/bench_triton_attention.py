"""vLLM's Triton attention against its FlashAttention-2, where AIConfigurator measured both on one GPU.

vLLM runs its Triton attention backend for a model with attention sinks (gpt-oss) on sm_80+ GPUs other than sm_90 and
sm_100 (every sm_10x from 0.13.0), and in 0.11.x for an fp8 KV cache (vllm/platforms/cuda.py, read in the sdists of
0.10.2 to 0.24.0: sim/config/engines/vllm.py `_vllm_triton_attention`). The A100's vLLM tables measured
FlashAttention-2 only, so a measured run there prices Triton's context attention as FA2's rows times the Triton / FA2
ratio by prompt length shipped in calibrate/measured/vllm_triton_prefill.json (the vLLM preset's `attention.backend:
triton`, sim/cost/measured.py). This checks that ratio where it comes from: the two GPUs whose vLLM 0.24.0 tables hold
both kernels, the L40S (sm_89) and the RTX PRO 6000 Blackwell Server Edition (sm_120): the ratio Triton / FA2 at each
full-attention shape both measured (batch, prompt or context tokens, query heads, KV heads, head size; window_size 0),
by prompt length (the median over the other axes), and how well one GPU's ratio predicts the other's (median and p90
|log difference| over the shared shapes), the spread a third GPU (the A100) may be off by. Caveat, said in the output:
Triton's rows were measured with an fp8 KV cache and FA2's with a bf16 one (the kernels vLLM 0.24.0 picks for each),
which halves the KV bytes Triton reads: decode attention (bytes-bound) is confounded by it, prefill attention
(compute-bound at long prompts) much less. Nothing is fitted. Last, it checks that the shipped ratio file is what
these tables give (exit 1 where it is not: rerun `python -m calibrate.aic_import`).

Needs aiconfigurator-core 0.12.0 on the path (`pip install aiconfigurator-core==0.12.0`, or its wheel unpacked on
PYTHONPATH):

    PYTHONPATH=.:/path/to/unpacked/wheel .venv/bin/python benchmarks/bench_triton_attention.py
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from calibrate.aic_import import (
    kernel_ratios,
    installed_systems_root,
    triton_prefill_ratio_from_tables,
)
from sim.cost.measured import FA2_ATTENTION, MEASURED_DIR, TRITON_ATTENTION, TRITON_PREFILL_FILE

GPUS = {"l40s": "L40S", "rtx_pro_6000_server": "RTX PRO 6000"}  # AIConfigurator system -> name in the output
VERSION = "0.24.0"


def ratios(data: Path, system: str, kind: str) -> pd.Series:
    """Triton / FA2 latency at every full-attention shape both kernels were measured at on this GPU (`kind`: context
    or generation attention): calibrate/aic_import.py `kernel_ratios`, which ships the context ratio."""
    rows = pd.read_parquet(data / system / "attention" / "vllm" / VERSION / f"{kind}_attention_perf.parquet")
    return kernel_ratios(rows, TRITON_ATTENTION, FA2_ATTENTION)


def main() -> int:
    systems = installed_systems_root()
    if systems is None:
        return 2
    data = systems / "data"
    print(f"vLLM {VERSION} tables of aiconfigurator-core: Triton ({TRITON_ATTENTION}, fp8 KV) / FlashAttention-2 "
          f"({FA2_ATTENTION}, bf16 KV), latency ratio at the full-attention shapes both measured")
    for kind, axis in (("context", "isl"), ("generation", "batch_size")):
        per_gpu = {name: ratios(data, system, kind) for system, name in GPUS.items()}
        for name, r in per_gpu.items():
            print(f"  {kind} attention, {name}: {len(r)} shapes, median {r.median():.2f}, "
                  f"p10 {r.quantile(0.1):.2f}, p90 {r.quantile(0.9):.2f}")
        both = pd.concat(per_gpu, axis=1).dropna()
        diff = np.log(both.iloc[:, 0] / both.iloc[:, 1]).abs()
        print(f"  {kind}: one GPU's ratio against the other's at {len(both)} shared shapes: median |log difference| "
              f"{diff.median():.3f}, p90 {diff.quantile(0.9):.3f}")
        table = both.reset_index().groupby(axis)[list(per_gpu)].median()
        print(f"  {kind}: median ratio by {axis}\n" + table.round(2).T.to_string())
    print("  caveat: fp8 KV (Triton) against bf16 KV (FA2): the decode ratios are confounded by half the KV bytes")
    shipped = json.loads((MEASURED_DIR / TRITON_PREFILL_FILE).read_text())["gpus"]
    versions = yaml.safe_load((data.parent / "query_versions.yaml").read_text())
    now = triton_prefill_ratio_from_tables(data, versions, metadata.version("aiconfigurator-core"))["gpus"]
    same = {gpu: (g["isl"], g["ratio"]) for gpu, g in shipped.items()} == {
        gpu: (g["isl"], g["ratio"]) for gpu, g in now.items()}
    print(f"  the shipped {TRITON_PREFILL_FILE} (what the measured model prices Triton with) "
          f"{'matches' if same else 'DIFFERS FROM'} these tables' ratios by prompt length")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
