"""vLLM's MLA attention from its whole-module rows: what the measured model prices against what it priced before.

AIConfigurator measures vLLM's MLA only as whole modules (vLLM's DeepseekV2MLAAttention forward under CUDA graphs:
the q_a/kv_a, q_b, kv_b and o projections, the attention with its norms, rotary embedding and cache write), at
DeepSeek-V3's sizes. Since 12-03 the measured model prices vLLM's MLA attention as each module row less its own prices
of the module's projections (sim/cost/measured.py `_vllm_mla_rows`): the block then costs the measured module at every
measured point (tests/unit/test_measured_engines.py checks it). Before, the attention was the device roofline.

For DeepSeek-R1 at 8 GPUs (16 heads each), fp8 block-scaled weights and a bf16 KV cache (GPUStack's H200 runs), on
every GPU whose shipped vLLM tables hold the modules, this prints: the modules' time beyond the projections' price
(the share of the module the attention term now carries), the MLA block as the roofline priced it over the measured
module (decode points), and a decode step before and after. It reads the shipped tables only; before = the same
tables without the module files (a temporary copy). Nothing is fitted.

A held-out check of the composition, where aiconfigurator-core 0.12.0 is on the path: TensorRT-LLM's tables hold both
its MLA attention alone (which the measured model prices TensorRT-LLM's MLA from) and its whole modules (which it does
not read). The model's TensorRT-LLM block (its attention-alone price plus its projections' GEMM price) against those
modules, on the H100 and H200, by projection and KV dtype.

    .venv/bin/python benchmarks/bench_mla_module.py        # PYTHONPATH=.:/path/to/unpacked/wheel for the check
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from sim.core.step_plan import StepPlan
from sim.cost.measured import MEASURED_DIR, MLA_MODULE_PROJECTIONS, MeasuredCostModel
from sim.model.catalog import get_gpu
from sim.model.hf_config import load_hf_config

MODEL = load_hf_config(Path(__file__).parents[1] / "sim" / "model" / "configs" / "deepseek-r1.json")
TP, HEADS = 8, 16
MODULE_FILES = ("context_mla_module.parquet", "generation_mla_module.parquet")
STEP_BATCHES = (4, 64, 256)


def projections_s(cost: MeasuredCostModel, tokens: float) -> float:
    """The model's price of the MLA module's projections at `tokens` (what `_vllm_mla_rows` takes off a module)."""
    return sum(cost._linear_by_name[p](tokens, note=False) for p in MLA_MODULE_PROJECTIONS)


def step_ms(cost: MeasuredCostModel, batch: int, context: int = 1024) -> float:
    return cost.step_time(StepPlan(num_decode_seqs=batch, decode_context_tokens=batch * context,
                                   num_sampled_seqs=batch)) * 1e3


def main() -> int:
    gpus = sorted(p.name for p in MEASURED_DIR.iterdir() if all((p / f).is_file() for f in MODULE_FILES))
    print(f"DeepSeek-R1, TP{TP} ({HEADS} heads a GPU), fp8 block-scaled weights, bf16 KV; vLLM's tables")
    print("| GPU | kernel | module beyond the projections (decode / context, median) | roofline block / module "
          "(decode: median, min-max) | decode step, batch " + "/".join(map(str, STEP_BATCHES))
          + " at 1,024 tokens: before -> now (ms) |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        before_root = Path(tmp) / "measured"
        shutil.copytree(MEASURED_DIR, before_root, ignore=shutil.ignore_patterns(*MODULE_FILES))
        for gpu in gpus:
            kw = {"tensor_parallel": TP, "weight_dtype": "fp8", "fp8_block": True}
            now = MeasuredCostModel(MODEL, get_gpu(gpu), **kw)
            before = MeasuredCostModel(MODEL, get_gpu(gpu), root=before_root, **kw)
            if now.mla_by_roofline:
                print(f"| {gpu} | (not priced from the modules: {'; '.join(n for n in now.notes if 'MLA' in n)}) |")
                continue
            t = now.tables
            gen, ctx = t.generation_mla_module, t.context_mla_module
            gen = gen[(gen.kv_dtype == "bf16") & (gen.gemm_dtype == "fp8_block") & (gen.num_heads == HEADS)]
            ctx = ctx[(ctx.kv_dtype == "bf16") & (ctx.gemm_dtype == "fp8_block") & (ctx.num_heads == HEADS)]
            share_gen = 1 - np.array([projections_s(now, b) for b in gen.batch_size]) * 1e3 / gen.latency_ms.to_numpy()
            share_ctx = 1 - np.array([projections_s(now, b * s) for b, s in zip(ctx.batch_size, ctx.isl)]) * 1e3 \
                / ctx.latency_ms.to_numpy()
            # Steps differ only in attention: the roofline block = module + (before - now) / layers.
            ratios = []
            for b, k, ms in zip(gen.batch_size, gen.kv_tokens, gen.latency_ms):
                plan = StepPlan(num_decode_seqs=int(b), decode_context_tokens=int(b * k), num_sampled_seqs=int(b))
                moved_ms = (before.step_time(plan) - now.step_time(plan)) * 1e3 / MODEL.num_layers
                ratios.append((ms + moved_ms) / ms)
            ratios = np.array(ratios)
            steps = ", ".join(f"{step_ms(before, b):.2f} -> {step_ms(now, b):.2f}" for b in STEP_BATCHES)
            kernel = t.meta["tables"]["generation_mla_module"]["kernels"]["bf16"]["fp8_block"]
            print(f"| {gpu} | {kernel} | {np.median(share_gen):.0%} / {np.median(share_ctx):.0%} | "
                  f"{np.median(ratios):.2f} ({ratios.min():.2f}-{ratios.max():.2f}) | {steps} |")
    trtllm_check()
    return 0


def trtllm_check() -> None:
    """TensorRT-LLM's MLA block as the measured model composes it (attention-alone rows + projection GEMMs) over
    TensorRT-LLM's own whole-module rows (AIConfigurator's, not shipped: read from the installed package)."""
    import pandas as pd

    from calibrate.aic_import import SYSTEMS, installed_systems_root
    root = installed_systems_root()
    if root is None:
        return
    print(f"\nTensorRT-LLM: its composed MLA block (attention alone + projections) / its measured whole module, at the "
          f"shipped tables' version, DeepSeek-R1 at TP{TP} ({HEADS} heads a GPU); median (p10-p90)")
    print("| GPU | projections | KV | decode | context |\n| --- | --- | --- | --- | --- |")
    for gpu in ("h100-sxm", "h200"):
        version = MeasuredCostModel(MODEL, get_gpu(gpu), tensor_parallel=TP, tables="trtllm").tables.meta[
            "tables"]["generation_mla"]["framework_version"]  # the version its MLA rows were imported at
        folder = root / "data" / SYSTEMS[gpu] / "mla" / "trtllm" / version
        gen = pd.read_parquet(folder / "mla_generation_module_perf.parquet")
        ctx = pd.read_parquet(folder / "mla_context_module_perf.parquet")
        for weights, block, gemm in (("fp8", True, "fp8_block"), ("bf16", False, "bfloat16")):
            for kv, raw_kv in (("bf16", "bfloat16"), ("fp8", "fp8")):
                cost = MeasuredCostModel(MODEL, get_gpu(gpu), tensor_parallel=TP, weight_dtype=weights,
                                         fp8_block=block, kv_dtype=kv, tables="trtllm")
                pick = {"num_heads": HEADS, "gemm_type": gemm, "kv_cache_dtype": raw_kv}
                g = gen[(gen[list(pick)] == pd.Series(pick)).all(axis=1)]
                c = ctx[(ctx[list(pick)] == pd.Series(pick)).all(axis=1) & (ctx["step"] == 0)]
                # (TensorRT-LLM's generation `step` is the context before the new token, as its attention tables')
                dec = np.array([(projections_s(cost, b) + cost._decode(b, s + 1)) * 1e3 / ms
                                for b, s, ms in zip(g["batch_size"], g["step"], g["latency"])])
                pre = np.array([(projections_s(cost, b * s) + cost._prefill(b, s)) * 1e3 / ms
                                for b, s, ms in zip(c["batch_size"], c["isl"], c["latency"])])
                cells = [f"{np.median(x):.2f} ({np.percentile(x, 10):.2f}-{np.percentile(x, 90):.2f}), {len(x)} points"
                         for x in (dec, pre)]
                print(f"| {gpu} ({version}) | {gemm} | {kv} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    sys.exit(main())
