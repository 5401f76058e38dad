"""Import NVIDIA AIConfigurator's measured kernel tables into compact per-GPU tables ServeSim ships.

    python -m calibrate.aic_import --out calibrate/measured/        # run with a venv that has
                                                                    # aiconfigurator-core==0.12.0

AIConfigurator (`aiconfigurator-core`, Apache-2.0) ships Parquet tables of kernel latencies measured on
real GPUs under `aiconfigurator_core/systems/data/<system>/<op>/<framework>/<version>/`. This reads the
tables of three engines (frameworks), each at the version AIConfigurator itself queries
(`systems/query_versions.yaml` of 0.12.0: vllm 0.24.0, sglang 0.5.14, trtllm 1.3.0rc20; on a100_sxm vllm
0.14.0, sglang 0.5.10, trtllm 1.0.0), keeps what ServeSim prices a dense or MoE decoder with, and writes
per ServeSim GPU one folder per framework:

    calibrate/measured/<gpu>/            vLLM (the layout before issue 30: unchanged)
    calibrate/measured/<gpu>/sglang/     SGLang
    calibrate/measured/<gpu>/trtllm/     TensorRT-LLM (its PyTorch flow)

each holding the same files (`sim.cost.measured.tables_dir` maps a framework to its folder):

- gemm.parquet: dtype (bf16, fp8 = per-tensor W8A8, fp8_block = W8A8 with 128 x 128 weight-block scales, as
  DeepSeek-V3/R1's and Qwen's FP8 checkpoints; `quantization.fp8_block_scales`), m (tokens), n (out features),
  k (in features), latency_ms; int8 / int4 = weight-only (w8a16 / w4a16: AIConfigurator's int8_wo / int4_wo, the
  weights dequantized to bf16 before the matrix product), where measured (at the queried versions only TensorRT-LLM's
  A100 tables: its WeightOnlyQuantMatmul plugin; its SmoothQuant `sq` int8 products are not kept)
- context_attention.parquet: kv_dtype, batch_size, isl (prompt tokens, empty cache), num_heads,
  num_kv_heads, head_dim, latency_ms  (full attention only: window_size 0). Per KV dtype the kernel with the
  most rows is kept and, within it, attention computed in the KV dtype where measured (AIConfigurator's own
  default: sdk/models/helpers.py sets fmha fp8 for an fp8 KV cache): with an fp8 KV cache SGLang's FA3
  (H100, H200) and TensorRT-LLM compute context attention in fp8, vLLM (no such rows) and SGLang's flashinfer
  (L40S) in bf16; meta.json's `attention_dtypes` says which.
- generation_attention.parquet: kv_dtype, batch_size, kv_tokens (step + 1: AIConfigurator's `step` is the
  context before the new token), num_heads, num_kv_heads, head_dim, latency_ms
- context_window_attention.parquet, generation_window_attention.parquet: the same, a `window` column (the sliding
  window, tokens) after kv_dtype, from the rows with window_size > 0 of the kernel and attention dtype the
  full-attention table keeps (`WINDOW_TABLES`; none on the A100, whose tables measured no window)
- allreduce.parquet: backend (graph = under CUDA graphs, eager), num_gpus, message_elements (bf16
  elements: AIConfigurator's `message_size` is an element count: one decode token of llama-3.1-8b at
  tp 2 queries 4096), latency_ms
- moe.parquet: dtype (bf16; fp8 = per-tensor W8A8, fp8_block = block-scaled W8A8, mxfp4 = MXFP4 experts with
  16-bit activations, gpt-oss's shapes; mxfp4_marlin = vLLM's Marlin MXFP4 kernel, `MOE_ALSO`, or on A100, where
  it was not measured, SGLang's Marlin MoE kernel with int4 weights, `MOE_BORROWED`; each where measured),
  num_tokens,
  distribution (the routing: balanced, power_law_1.01 or power_law_1.2, each where measured;
  `cost_model.moe_routing` picks one), hidden_size, inter_size, topk, num_experts, moe_tp_size, moe_ep_size,
  latency_ms (expert parallelism 1, or up to `MAX_EP_GPUS` GPUs in all; num_tokens are the layer's tokens before
  dispatch, every GPU's expert share of them priced by the row; under skewed routing the busiest GPU's time)
- context_mla.parquet, generation_mla.parquet (SGLang and TensorRT-LLM only): MLA attention alone (DeepSeek-V3's
  latent sizes; AIConfigurator's `ContextMLA` / `GenerationMLA`, which its DeepSeek model puts between the
  q/kv projections and o_proj), kv_dtype, batch_size, isl (context: prompt tokens, empty cache) or kv_tokens
  (generation: step + 1), num_heads (per GPU), latency_ms; computed in bf16 (the only `mla_dtype` of these
  tables). vLLM's tables hold MLA only as whole modules (`mla_*_module_perf`: the projections inside):
- context_mla_module.parquet, generation_mla_module.parquet (vLLM only): vLLM's whole MLA attention module
  (`_mla_module`), kv_dtype, gemm_dtype (its projections' dtype: bf16, fp8_block, nvfp4), batch_size, isl (context,
  empty cache) or kv_tokens (generation: AIConfigurator's `step`, which here counts the new token), num_heads (per
  GPU), latency_ms; DeepSeek-V3's sizes. The measured model prices vLLM's MLA attention as these less its own prices
  of the module's projections.
- context_dsa_module.parquet, generation_dsa_module.parquet (vLLM and SGLang): the engine's whole DeepSeek sparse
  attention module (`_dsa_module`: projections, the indexer and the sparse MLA inside; SGLang's without the fused
  q_a / kv_a projection), with the MLA modules' columns; DeepSeek-V3.2's sizes. The measured model prices V3.2's
  attention as these less its own prices of the projections inside.
- meta.json: source package and version, system, framework and version of each table (and any fallback
  to another version), the kernel each table keeps, the dtypes measured, the device name, units.

and once per GPU, for every framework:

    calibrate/measured/<gpu>/nccl/       NCCL's all-reduce (`convert_nccl`): allreduce.parquet, as above with
                                         backend nccl, and meta.json (the NCCL version, the source file)

and once for all GPUs, `TRITON_PREFILL_FILE` (calibrate/measured/vllm_triton_prefill.json,
`triton_prefill_ratio_from_tables`): vLLM's Triton attention over its FlashAttention-2 in context attention, by prompt
length, on each GPU whose vLLM tables measured both (the L40S and RTX PRO 6000 at vLLM 0.24.0), which prices Triton
where only FA2 was measured (`attention.backend: triton`, sim/cost/measured.py).

The all-reduce backends: vLLM and SGLang measure their custom all-reduce under CUDA graphs (`graph`) and
eagerly (`eager`); TensorRT-LLM's table has one curve (its own all-reduce kernel, `implementation trtllm`),
kept as `graph` since its PyTorch flow captures decode steps in CUDA graphs.

Latencies are AIConfigurator's (ms of one call): vLLM's unchanged, SGLang's and TensorRT-LLM's rounded to 3
significant digits (`LATENCY_DIGITS`: at most 0.5% off one kernel, to keep the shipped files small). A table a
framework lacks at its queried version is taken from the newest older version holding it, and meta.json says
so; a (system, framework) with no data is listed in `missing.json` and skipped.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from importlib import metadata
from pathlib import Path

import pandas as pd
import yaml

from sim.cost.measured import (
    FA2_ATTENTION,
    MEASURED_FORMAT_VERSION,
    MXFP4,
    MXFP4_MARLIN,
    TRITON_ATTENTION,
    TRITON_PREFILL_FILE,
    WEIGHT_ONLY_INT,
)
from sim.model.interconnects import NCCL_ALL_REDUCE
from sim.model.memory import MARLIN

# ServeSim catalog GPU (sim/model/catalog.py GPUS) -> AIConfigurator system.
SYSTEMS = {
    "h100-sxm": "h100_sxm",  # device "NVIDIA H100 80GB HBM3"
    "h200": "h200_sxm",  # device "NVIDIA H200"
    "b200": "b200_sxm",  # device "NVIDIA B200"
    "a100-80gb": "a100_sxm",  # device "NVIDIA A100-SXM4-80GB"
    "l40s": "l40s",
    "l4": "l4",  # AIConfigurator 0.12.0 ships an empty l4 folder: reported in missing.json
    "b300": "b300_sxm",  # device "NVIDIA B300 SXM6 AC"
    "gb200": "gb200",  # device "NVIDIA GB200"
    "gb300": "gb300",  # device "NVIDIA GB300"
    "rtx-pro-6000": "rtx_pro_6000_server",  # device "NVIDIA RTX PRO 6000 Blackwell Server Edition"
}
FRAMEWORKS = ("vllm", "sglang", "trtllm")
FRAMEWORK = "vllm"  # the default: its tables stay at calibrate/measured/<gpu>/
PACKAGE = "aiconfigurator-core"
_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}
# GEMM and MoE rows: per-tensor and block-scaled fp8, and NVFP4 (W4A4 with FP8 scales per 16; on the B200 only).
_WEIGHT_DTYPES = {**_DTYPES, "fp8_block": "fp8_block", "nvfp4": "nvfp4"}
# MoE rows also: MXFP4 experts with 16-bit activations (gpt-oss's checkpoints; `quantization.weights: mxfp4`).
_MOE_DTYPES = {**_WEIGHT_DTYPES, "w4a16_mxfp4": "mxfp4"}
# GEMM rows also: weight-only int8 and int4 (16-bit products; `quantization.weights: int8 | int4`), not fused MoE.
_GEMM_DTYPES = {**_WEIGHT_DTYPES, **{f"{d}_wo": d for d in WEIGHT_ONLY_INT}}


# What a command that reads AIConfigurator's tables says where the package is not importable (exit 2).
NOT_INSTALLED = (f"{PACKAGE} 0.12.0 is not on the path; allowed: pip install {PACKAGE}==0.12.0, or its wheel "
                 "unpacked on PYTHONPATH")


def installed_systems_root() -> Path | None:
    """aiconfigurator_core/systems of the installed package; None, said in one line on stderr, without it (the
    caller exits 2)."""
    try:
        import aiconfigurator_core
    except ImportError:
        print(NOT_INSTALLED, file=sys.stderr)
        return None
    return Path(aiconfigurator_core.__file__).parent / "systems"


def _versions(path: Path) -> list[str]:
    return sorted((p.name for p in path.iterdir() if p.is_dir()), key=_version_key) if path.is_dir() else []


def framework_dir(gpu_dir: Path, framework: str) -> Path:
    """Where a framework's tables of one GPU live: vLLM's in the GPU folder itself (as before issue 30), the
    others in a subfolder named after the framework."""
    return gpu_dir if framework == FRAMEWORK else gpu_dir / framework


def _pick(system_dir: Path, op: str, filename: str, current: str,
          framework: str = FRAMEWORK) -> tuple[Path, str] | None:
    """The table at the queried version, else the newest older version that has it."""
    versions = [v for v in _versions(system_dir / op / framework)
                if (system_dir / op / framework / v / filename).is_file()]
    if not versions:
        return None
    older = [v for v in versions if _versions_le(v, current)]
    version = current if current in versions else (older[-1] if older else versions[-1])
    return system_dir / op / framework / version / filename, version


def _version_key(v: str) -> tuple:
    """1.3.0rc20 -> (1, 3, 0, -1, 20): a release candidate sorts before its release (1.3.0 -> (1, 3, 0, 0, 0))."""
    m = re.match(r"^(\d+(?:\.\d+)*)(?:(rc|post)(\d+))?", v.replace(".post", "post"))
    if not m:
        return (0,)
    nums = tuple(int(p) for p in m.group(1).split("."))
    tag = {"rc": -1, "post": 1}.get(m.group(2), 0)
    return nums + (0,) * (4 - len(nums)) + (tag, int(m.group(3) or 0))


def _versions_le(a: str, b: str) -> bool:
    return _version_key(a) <= _version_key(b)


def _main_kernel(df: pd.DataFrame) -> str:
    """The kernel with the most measured rows (the one the framework runs by default for this table)."""
    return str(df["kernel_source"].value_counts().idxmax())


def _main_rows(df: pd.DataFrame, column: str, names: dict) -> tuple[list[tuple[str, pd.DataFrame]], dict]:
    """Per source dtype of `column` present, (its table name, its rows of its main kernel); and {name: kernel}."""
    out, kernels = [], {}
    for src_dtype, dtype in names.items():
        rows = df[df[column] == src_dtype]
        if rows.empty:
            continue
        kernel = _main_kernel(rows)
        kernels[dtype] = kernel
        out.append((dtype, rows[rows["kernel_source"] == kernel]))
    return out, kernels


def _medians(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The frames' rows, one per key (every column but latency_ms), at their median latency."""
    out = pd.concat(frames, ignore_index=True)
    keys = [c for c in out.columns if c != "latency_ms"]
    return out.groupby(keys, as_index=False)["latency_ms"].median()


def _gemm(df: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    picked, kernels = _main_rows(df, "gemm_dtype", _GEMM_DTYPES)
    return _medians([pd.DataFrame({"dtype": dtype, "m": rows["m"], "n": rows["n"], "k": rows["k"],
                                   "latency_ms": rows["latency"]}) for dtype, rows in picked]), kernels


def _attention(df: pd.DataFrame, generation: bool, windowed: bool = False) -> tuple[pd.DataFrame, dict]:
    """Full-attention rows (window_size 0), or with `windowed` the sliding-window rows (window_size > 0, a `window`
    column) of the same kernel and attention dtype per KV dtype, chosen on the full-attention rows."""
    window = df["window_size"] if "window_size" in df.columns else pd.Series(0, index=df.index)
    full, slid = df[window == 0], df[window > 0]
    keep, kernels, attn_dtypes = [], {}, {}
    for src_dtype, dtype in _DTYPES.items():
        rows = full[(full["kv_cache_dtype"] == src_dtype) & full["attn_dtype"].isin(list(_DTYPES))]
        if rows.empty:
            continue
        # The kernel with the most rows (the framework's default for this KV dtype: SGLang h100 fp8 KV -> FA3, 13,703
        # rows against 1,156 of triton; l40s -> flashinfer); within it, attention computed in the KV dtype where
        # measured (AIConfigurator's own default: sdk/models/helpers.py sets fmha fp8 for an fp8 KV cache), else bf16.
        kernel = _main_kernel(rows)
        rows = rows[rows["kernel_source"] == kernel]
        attn = src_dtype if (rows["attn_dtype"] == src_dtype).any() else "bfloat16"
        if windowed:
            rows = slid[(slid["kv_cache_dtype"] == src_dtype) & (slid["kernel_source"] == kernel)]
        rows = rows[rows["attn_dtype"] == attn]
        if rows.empty:
            continue
        kernels[dtype] = str(kernel)
        attn_dtypes[dtype] = _DTYPES[attn]
        cols = {"kv_dtype": dtype}
        if windowed:
            cols["window"] = rows["window_size"]
        cols["batch_size"] = rows["batch_size"]
        if generation:
            cols["kv_tokens"] = rows["step"] + 1
        else:
            cols["isl"] = rows["isl"]
        cols.update(num_heads=rows["num_heads"], num_kv_heads=rows["num_key_value_heads"],
                    head_dim=rows["head_dim"], latency_ms=rows["latency"])
        keep.append(pd.DataFrame(cols))
    if not keep:
        return pd.DataFrame(), {}
    out = {**kernels, "attention_dtypes": attn_dtypes}
    if windowed:
        out["windows"] = sorted(int(w) for w in set(pd.concat(keep)["window"]))
    return _medians(keep), out


# vLLM's Triton attention against its FlashAttention-2 (`TRITON_PREFILL_FILE`): vLLM 0.10.x-0.11.x run Triton on GPUs
# whose vLLM tables measured only FA2 (the A100's), so those rows price it times the ratio measured where both were.
ATTENTION_SHAPE = ["batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "step"]


def kernel_ratios(rows: pd.DataFrame, kernel: str, against: str) -> pd.Series:
    """`kernel`'s latency over `against`'s at every full-attention shape (window_size 0, ATTENTION_SHAPE) one GPU's
    attention table measured both at (each kernel's median where a shape repeats)."""
    if "window_size" in rows.columns:
        rows = rows[rows["window_size"] == 0]
    mine, theirs = (rows[rows["kernel_source"] == k].groupby(ATTENTION_SHAPE)["latency"].median()
                    for k in (kernel, against))
    return (mine / theirs).dropna()


def triton_prefill_ratio_from_tables(data_root: Path, versions: dict, package_version: str) -> dict:
    """The Triton / FA2 context-attention ratio by prompt length on every system whose vLLM tables (at the version
    AIConfigurator queries there) measured both kernels: the median over the other axes (batch, heads, KV heads,
    head size) at each prompt length. Triton's rows are fp8-KV and FA2's bf16-KV (the kernels vLLM picks for each);
    prefill attention at long prompts is compute-bound, so the KV bytes matter little there."""
    gpus = {}
    for gpu, system in SYSTEMS.items():
        version = (versions.get("overrides", {}).get(system, {}).get(FRAMEWORK, {}).get("current")
                   or versions["defaults"][FRAMEWORK]["current"])
        path = data_root / system / "attention" / FRAMEWORK / version / "context_attention_perf.parquet"
        if not path.is_file():
            continue
        ratios = kernel_ratios(pd.read_parquet(path), TRITON_ATTENTION, FA2_ATTENTION)
        if ratios.empty:
            continue
        by_isl = ratios.groupby(level="isl").median()
        gpus[gpu] = {"system": system, "framework_version": version, "shapes": len(ratios),
                     "source_file": str(path.relative_to(data_root.parent)),
                     "isl": [int(x) for x in by_isl.index], "ratio": [round(float(r), 4) for r in by_isl]}
    return {"format_version": MEASURED_FORMAT_VERSION,
            "source": {"package": PACKAGE, "version": package_version, "license": "Apache-2.0",
                       "path": "aiconfigurator_core/systems/data"},
            "framework": FRAMEWORK, "kernel": TRITON_ATTENTION, "against": FA2_ATTENTION,
            "kv_dtypes": {TRITON_ATTENTION: "fp8", FA2_ATTENTION: "bf16"},
            "ratio": "median over batch, heads, KV heads and head size of kernel / against latency at each prompt "
                     "length (isl, empty cache), full attention (window_size 0), at the shapes both measured",
            "gpus": gpus}


def _allreduce(df: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    df = df[df["allreduce_dtype"] == "bfloat16"]
    if "backend" in df.columns:  # vllm_graph, sglang_eager, ...
        backend = df["backend"].str.replace(r"^[a-z]+_", "", regex=True)
    else:  # TensorRT-LLM: one curve, its own kernel; decode steps run under CUDA graphs in its PyTorch flow
        backend = pd.Series("graph", index=df.index)
    out = pd.DataFrame({"backend": backend, "num_gpus": df["num_gpus"], "message_elements": df["message_size"],
                        "latency_ms": df["latency"]})
    kernels = dict(zip(backend, df["kernel_source"]))
    return out.groupby(["backend", "num_gpus", "message_elements"], as_index=False)["latency_ms"].median(), kernels


def _moe_table(dtype: str, rows: pd.DataFrame) -> pd.DataFrame:
    """AIConfigurator's fused-MoE rows as moe.parquet keeps them, under one table dtype."""
    return pd.DataFrame({"dtype": dtype, "distribution": rows["distribution"], "num_tokens": rows["num_tokens"],
                         "hidden_size": rows["hidden_size"], "inter_size": rows["inter_size"], "topk": rows["topk"],
                         "num_experts": rows["num_experts"], "moe_tp_size": rows["moe_tp_size"],
                         "moe_ep_size": rows["moe_ep_size"], "latency_ms": rows["latency"]})


def _moe(df: pd.DataFrame, dtypes: tuple[str, ...] = ("bfloat16",),
         also: dict[str, tuple[str, str]] | None = None) -> tuple[pd.DataFrame, dict]:
    """The fused-MoE rows of `dtypes`, each dtype's main kernel; `also`: {source dtype: (a kernel's name part, the
    table dtype)} keeps a second kernel's rows of that dtype under a dtype of their own, where it is not the main one
    (MOE_ALSO)."""
    ep, tp = df["moe_ep_size"], df["moe_tp_size"]
    df = df[df["moe_dtype"].isin(list(dtypes)) & ((ep == 1) | (ep * tp <= MAX_EP_GPUS))]
    if df.empty:
        return pd.DataFrame(), {}
    # Every routing distribution measured (balanced, power_law_1.01, power_law_1.2), each with its own main kernel
    # per dtype; the kernels recorded are the balanced rows' (else the mildest skew's, as the model's default reads).
    dists = sorted(set(df["distribution"]), key=lambda d: (d != "balanced", d))
    keep, kernels = [], {}
    for distribution in dists:
        picked, found = _main_rows(df[df["distribution"] == distribution], "moe_dtype",
                                   {d: _MOE_DTYPES[d] for d in dtypes})
        by_dist = df[df["distribution"] == distribution]
        for src_dtype, (part, dtype) in (also or {}).items():
            main = found.get(_MOE_DTYPES[src_dtype], "")
            rows = by_dist[(by_dist["moe_dtype"] == src_dtype)
                           & by_dist["kernel_source"].str.contains(part, regex=False)]
            if part in main or rows.empty:
                continue
            kernel = _main_kernel(rows)
            found[dtype] = kernel
            picked.append((dtype, rows[rows["kernel_source"] == kernel]))
        kernels = kernels or found
        keep += [_moe_table(dtype, rows) for dtype, rows in picked]
    return _medians(keep), {**kernels, "distribution": dists[0], "distributions": dists}


def _borrow_moe(df: pd.DataFrame, kernels: dict, system_dir: Path, framework: str,
                lenders: dict[str, str]) -> tuple[pd.DataFrame, dict, dict]:
    """The fused-MoE table with `MOE_BORROWED`'s rows added where the framework's own hold none of that kernel:
    (the table, its kernels, {table dtype: where the rows came from}). `lenders`: {framework: the version queried}.
    Only the routings the framework's own rows were measured under are kept (all where it has none)."""
    borrowed = {}
    for dtype, (stands_for, lender, src_dtype, part) in MOE_BORROWED.get(framework, {}).items():
        if dtype in kernels or part in str(kernels.get(stands_for, "")) or lender not in lenders:
            continue
        found = _pick(system_dir, "moe", "moe_perf.parquet", lenders[lender], lender)
        if found is None:
            continue
        raw = pd.read_parquet(found[0])
        ep, tp = raw["moe_ep_size"], raw["moe_tp_size"]
        rows = raw[(raw["moe_dtype"] == src_dtype) & raw["kernel_source"].str.contains(part, regex=False)
                   & ((ep == 1) | (ep * tp <= MAX_EP_GPUS))]
        if not df.empty:
            rows = rows[rows["distribution"].isin(set(df["distribution"]))]
        if rows.empty:
            continue
        kernel = _main_kernel(rows)
        rows = rows[rows["kernel_source"] == kernel]
        lent = _moe_table(dtype, rows)
        df = _medians([df, lent]) if not df.empty else _medians([lent])
        kernels = {**kernels, dtype: kernel}
        borrowed[dtype] = {"framework": lender, "framework_version": found[1], "moe_dtype": src_dtype,
                           "kernel": kernel, "source_file": str(found[0].relative_to(system_dir.parent.parent)),
                           "stands_for": f"{_NAMES[framework]}'s {stands_for} experts run by this kernel family"}
    return df, kernels, borrowed


def _mla(df: pd.DataFrame, generation: bool) -> tuple[pd.DataFrame, dict]:
    picked, kernels = _main_rows(df[df["mla_dtype"] == "bfloat16"], "kv_cache_dtype", _DTYPES)
    keep = []
    for dtype, rows in picked:
        cols = {"kv_dtype": dtype, "batch_size": rows["batch_size"]}
        if generation:
            cols["kv_tokens"] = rows["step"] + 1
        else:
            cols["isl"] = rows["isl"]
        cols.update(num_heads=rows["num_heads"], latency_ms=rows["latency"])
        keep.append(pd.DataFrame(cols))
    return (_medians(keep) if keep else pd.DataFrame()), kernels


# vLLM's MLA, which AIConfigurator measures only as whole modules (vLLM's DeepseekV2MLAAttention forward under CUDA
# graphs: the fused q_a/kv_a projection, q_b, the attention with its norms, rotary and cache write, o_proj), at
# DeepSeek-V3's sizes with 1-128 heads (collector/vllm/collect_mla_module.py). Kept as measured, per KV dtype and
# GEMM dtype; the measured model takes its own prices of the projections off them (sim/cost/measured.py
# `_vllm_mla_rows`). Its `step` is the decode's whole context, the new token included ("seq_len includes the
# current token"); context rows start from an empty cache (prefix 0). A context row's kernel is vLLM's prefill
# backend, or its decode backend where vLLM ran a short prompt as a decode (FLASH_ATTN_MLA to 512 tokens on the
# H100); where two prefill backends measured the same point (the B200's TRTLLM_RAGGED beside FLASH_ATTN, fp8 KV),
# `MLA_PREFILL_BACKEND`'s, which vLLM 0.24.0's selector ranks first (the collector says so of sm_100).
MLA_MODULE_MODEL = "deepseek-ai/DeepSeek-V3"
MLA_PREFILL_BACKEND = "FLASH_ATTN"


def _module_rows(rows: pd.DataFrame, generation: bool, pick, step_holds_new_token: bool = True
                 ) -> tuple[pd.DataFrame, dict]:
    """Whole-module rows as measured, per KV dtype and GEMM dtype: `pick(part)` gives the rows of the kernels kept
    and those kernels' names. A decode's context is its `step`, the new token included (vLLM's collector), else
    `step` + 1 (SGLang's: `step` is the past KV, the new token's position)."""
    keep, kernels = [], {}
    for src_kv, kv in _DTYPES.items():
        for src_gemm, gemm in _WEIGHT_DTYPES.items():
            part = rows[(rows["kv_cache_dtype"] == src_kv) & (rows["gemm_type"] == src_gemm)]
            if part.empty:
                continue
            part, used = pick(part)
            kernels.setdefault(kv, {})[gemm] = ", ".join(used)
            cols = {"kv_dtype": kv, "gemm_dtype": gemm, "batch_size": part["batch_size"]}
            if generation:
                cols["kv_tokens"] = part["step"] + (0 if step_holds_new_token else 1)
            else:
                cols["isl"] = part["isl"]
            cols.update(num_heads=part["num_heads"], latency_ms=part["latency"])
            keep.append(pd.DataFrame(cols))
    return (_medians(keep) if keep else pd.DataFrame()), kernels


def _main_kernel_rows(part: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    kernel = _main_kernel(part)
    return part[part["kernel_source"] == kernel], [kernel]


def _mla_prefill_rows(part: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Every backend vLLM ran, one per point: the prefill backend's where several measured it."""
    used = sorted(set(part["kernel_source"]), key=lambda k: (k != MLA_PREFILL_BACKEND, k))
    part = part.assign(rank=[used.index(k) for k in part["kernel_source"]])
    best = part.groupby(["num_heads", "batch_size", "isl"])["rank"].transform("min")
    part = part[part["rank"] == best]  # (a point measured twice by that kernel: the median, below)
    used = [k for k in used if k in set(part["kernel_source"])]
    return part[part["kernel_source"].isin(used)], used


def _mla_module(df: pd.DataFrame, generation: bool) -> tuple[pd.DataFrame, dict]:
    rows = df[(df["model"] == MLA_MODULE_MODEL) & (df["mla_dtype"] == "bfloat16")]
    if not generation:
        rows = rows[rows["step"] == 0]
    return _module_rows(rows, generation, _main_kernel_rows if generation else _mla_prefill_rows)


# DeepSeek sparse attention (DSA), measured only as whole modules at DeepSeek-V3.2's sizes with 1-128 heads
# (AIConfigurator's `ContextDSAModule` / `GenerationDSAModule`, sdk/operations/dsa.py). Kept as the MLA modules are:
# per KV dtype and GEMM dtype, context rows from an empty cache (step 0: the rows over a cached prefix are left out).
# GLM-5's rows (and their skip-indexer variants) are left out.
# - vLLM's (FLASHMLA_SPARSE): the q/kv projections with the indexer's key, the indexer's query and head-weight
#   projections, its FP8 logits and top-k, FlashMLA's sparse kernel, the absorbed BMMs and o_proj; a decode's `step`
#   is its context, the new token included. The context rows were timed eagerly: a flat ~1.2 ms (bf16 projections)
#   to ~1.5 ms (fp8_block, DeepGEMM's host time) a call at small prompts on the H200, where the generation rows start
#   at 0.17 ms; they are kept as measured (sim/cost/measured.py `_dsa_rows` says so).
# - SGLang's (AIConfigurator's collector/sglang/collect_mla_module.py, one layer's self_attn): the same, less the
#   fused q_a / kv_a projection, which the collector replaces by random latents (sim/cost/measured.py
#   `DSA_MODULE_PROJECTIONS`). Its context rows are every kernel SGLang ran, one a point: dense MHA (FA3 on Hopper,
#   TRT-LLM's ragged kernel on Blackwell) where the longest sequence fits the top-k (nsa_backend.py
#   `set_nsa_prefill_impl`: up to 2,048 tokens), the indexer with sparse MLA past it; timed eagerly, as SGLang runs
#   a prefill. A decode's `step` is its past KV (the context is step + 1). Its decode rows were timed under CUDA
#   graphs only up to the collector's own cap (`SGLANG_DSA_GRAPHED_BATCH`); larger batches ran eagerly, ~1.3 ms a
#   layer at any context, and are left out: the engine graphs its decode past them (512 at tp >= 4 on these GPUs),
#   and the presets' overhead prices an eager step.
DSA_MODULE_MODEL = "deepseek-ai/DeepSeek-V3.2"
# The largest decode batch AIConfigurator's SGLang collector timed under CUDA graphs, per device: SGLang 0.5.14's
# server_args.py default decode cap at tp 1 (below 160 GB of memory 256, else 512), which its
# `_generation_cuda_graph_enabled_for_tokens` applies at every tp_size it ran (1-8, 128/tp heads): in the 0.12.0 rows
# of the H100, H200, B200 and GB200 the batch past the cap times ~1.3 ms (GB200 ~2.1) at every tp_size and context.
SGLANG_DSA_GRAPHED_BATCH = {"NVIDIA H100 80GB HBM3": 256, "NVIDIA H200": 256, "NVIDIA B200": 512,
                            "NVIDIA B300 SXM6 AC": 512, "NVIDIA GB200": 512, "NVIDIA GB300": 512}


def _every_kernel_rows(part: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Every kernel the engine ran, each at its own points (SGLang's dense MHA and sparse prefill)."""
    if part.groupby(["num_heads", "batch_size", "isl"])["kernel_source"].nunique().max() > 1:
        raise ValueError("two DSA kernels measured one context point; the import keeps one kernel a point")
    return part, sorted(set(part["kernel_source"]))


def _dsa_module(df: pd.DataFrame, generation: bool) -> tuple[pd.DataFrame, dict]:
    op = "dsa_generation_module" if generation else "dsa_context_module"
    rows = df[(df["model"] == DSA_MODULE_MODEL) & (df["mla_dtype"] == "bfloat16") & (df["op_name"] == op)]
    if rows.empty:
        return pd.DataFrame(), {}
    sglang = str(rows["framework"].iloc[0]) == "SGLang"
    if not generation:  # (vLLM's: its main backend, as imported before SGLang's were)
        return _module_rows(rows[rows["step"] == 0], generation, _every_kernel_rows if sglang else _main_kernel_rows)
    if sglang:
        device = str(rows["device"].iloc[0])
        if device not in SGLANG_DSA_GRAPHED_BATCH:
            raise ValueError(f"SGLang's DSA decode rows of {device}: its collector's CUDA-graph cap is not known")
        rows = rows[rows["batch_size"] <= SGLANG_DSA_GRAPHED_BATCH[device]]
    return _module_rows(rows, generation, _main_kernel_rows, step_holds_new_token=not sglang)


TABLES = {
    # name: (AIConfigurator op folder, file, converter)
    "gemm": ("gemm", "gemm_perf.parquet", _gemm),
    "context_attention": ("attention", "context_attention_perf.parquet", lambda d: _attention(d, False)),
    "generation_attention": ("attention", "generation_attention_perf.parquet", lambda d: _attention(d, True)),
    "context_window_attention": ("attention", "context_attention_perf.parquet", lambda d: _attention(d, False, True)),
    "generation_window_attention": ("attention", "generation_attention_perf.parquet",
                                    lambda d: _attention(d, True, True)),
    "allreduce": ("comm", "custom_allreduce_perf.parquet", _allreduce),
    "moe": ("moe", "moe_perf.parquet", _moe),
    "context_mla": ("mla", "context_mla_perf.parquet", lambda d: _mla(d, False)),
    "generation_mla": ("mla", "generation_mla_perf.parquet", lambda d: _mla(d, True)),
    "context_mla_module": ("mla", "mla_context_module_perf.parquet", lambda d: _mla_module(d, False)),
    "generation_mla_module": ("mla", "mla_generation_module_perf.parquet", lambda d: _mla_module(d, True)),
    "context_dsa_module": ("sparse_attention", "dsa_context_module_perf.parquet", lambda d: _dsa_module(d, False)),
    "generation_dsa_module": ("sparse_attention", "dsa_generation_module_perf.parquet",
                              lambda d: _dsa_module(d, True)),
}
# Sliding-window attention (window_size > 0 in AIConfigurator's attention tables: windows of 128, 512, 1024 and 8192
# tokens where measured): the full-attention table's kernel and attention dtype, a `window` column more. The measured
# model prices a sliding layer from them where its window and KV dtype were measured (sim/cost/measured.py).
WINDOW_TABLES = ("context_window_attention", "generation_window_attention")
# Tables imported for some frameworks only: the others price MLA from their attention-alone tables; TensorRT-LLM's
# DSA module rows (1.3.0rc20/rc23, 1-128 heads as vLLM's) are not imported: the TensorRT-LLM preset's rules for a
# sparse-attention model are not read (sim/config/engines/sparse_attention.py refuses it), so its tables do not price
# DeepSeek sparse attention.
ONLY_FOR = {"context_mla_module": ("vllm",), "generation_mla_module": ("vllm",),
            "context_dsa_module": ("vllm", "sglang"), "generation_dsa_module": ("vllm", "sglang")}
# Per framework, the MoE dtypes kept (fp8 = per-tensor W8A8 experts, fp8_block = block-scaled, w4a16_mxfp4 = MXFP4
# experts). TensorRT-LLM measures both fp8 kinds with its default kernel (moe_torch_flow_cutlass); SGLang only
# block-scaled fp8; vLLM's per-tensor fp8 rows are one checkpoint format's kernel (ModelOpt, FlashInfer CUTLASS), so
# they are left out (its bf16 rows are as imported for issue 12). Where no fp8 MoE row of the kind is kept, fp8
# experts are priced from the bf16 rows' ratio at the fp8 roofline (sim/cost/measured.py). MXFP4 rows are measured
# at gpt-oss's expert shapes only, each engine's gpt-oss kernel the main one (vLLM on Hopper: OpenAI's Triton
# kernels; SGLang: its fused Triton MoE; TensorRT-LLM: its PyTorch flow); no other dtype's rows ever price them.
MOE_DTYPES = {"vllm": ("bfloat16", "fp8_block", "w4a16_mxfp4", "nvfp4"),
              "sglang": ("bfloat16", "fp8_block", "w4a16_mxfp4", "nvfp4"),
              "trtllm": ("bfloat16", "fp8", "fp8_block", "w4a16_mxfp4", "nvfp4")}
# A second MoE kernel kept where an engine version runs it instead of the main one: vLLM's Marlin MXFP4 experts
# (`vllm_..._marlin_marlinexperts...`), which vLLM runs below sm_90 and before 0.12.0 on every GPU
# (sim/config/engines/vllm.py `_vllm_expert_padding`), as dtype mxfp4_marlin; `quantization.moe_kernel: marlin` prices
# from them. AIConfigurator measured them at another model's expert shapes than gpt-oss's (on H100, H200 and B200:
# 896 experts, top 16, hidden 3584, intermediate 3072): the measured model scales the nearest shape by the roofline.
MOE_ALSO = {"vllm": {"w4a16_mxfp4": (MARLIN, MXFP4_MARLIN)}}
# MoE rows of a kernel a framework runs, borrowed from another framework's table of the same GPU where its own hold
# none: {framework: {table dtype: (the dtype it stands for, the lender, the lender's moe_dtype, a kernel's name
# part)}}. vLLM runs gpt-oss's MXFP4 experts with Marlin below sm_90, and AIConfigurator measured vLLM's Marlin MXFP4
# kernel on H100, H200, B200 and L40S, not on A100; there it measured SGLang's Marlin MoE kernel (sgl-kernel's
# moe_wna16_marlin_gemm, vLLM's kernel ported), with int4 weights (4.125 bits a weight with their scales, MXFP4
# 4.25). Held out where both were measured, without expert parallelism (the A100 runs' split), SGLang's int4 rows
# predict vLLM's Marlin MXFP4 rows to a median 0.96 on the L40S (at gpt-oss's own shapes; mean |log error| 0.35),
# 0.90 on the H100 (0.5.10's rows, the A100's version: 0.92) and 0.80 on the H200 (benchmarks/bench_moe.py
# `study_borrowed_marlin`). meta.json names what was borrowed; the measured model says so where it prices from it.
MOE_BORROWED = {"vllm": {MXFP4_MARLIN: (MXFP4, "sglang", "int4_wo", MARLIN)}}
# GEMM rows left out, and why (meta.json records it): vLLM's block-scaled fp8 rows (DeepGEMM and FlashInfer kernels)
# take a flat ~60-90 us at every m from 1 to ~2k (H200, n 1536, k 7168: 57-95 us, where its per-tensor fp8 kernel
# takes 11-17 us and the weights' bytes 2.3 us; B200: 175-276 us against 10-27 us): host time of eager calls, not
# what a CUDA-graphed step runs. The measured model then prices block-scaled GEMMs from the per-tensor fp8 rows and
# says so.
DROPPED_GEMM_DTYPES = {"vllm": {"fp8_block": "host-bound: a flat ~60-90 us at every m up to ~2k (H200 n 1536 k 7168: "
                                             "57-95 us; per-tensor fp8 11-17 us), eager calls' host time"}}
REQUIRED = ("gemm", "context_attention", "generation_attention")
# Expert-parallel fused-MoE rows are kept up to this many GPUs (moe_tp_size x moe_ep_size): one 8-GPU node, where the
# engines without data-parallel attention combine the experts' outputs with the all-reduce ServeSim prices. Wider
# expert parallelism dispatches tokens all-to-all across nodes, which ServeSim does not model.
MAX_EP_GPUS = 8


_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
# Significant digits kept of a latency: 3 (at most 0.5% off one kernel, below the run-to-run noise of a
# microsecond kernel timing; a step sums hundreds of kernels whose rounding errors do not add up in one
# direction). It keeps what SGLang's and TensorRT-LLM's tables add to the repository at 1.8 MB for four GPUs
# (4.9 MB unrounded, 3.1 MB at 4 digits). vLLM's tables keep issue 12's exact values: their shipped files stay
# byte for byte as they were.
LATENCY_DIGITS = {"vllm": None, "sglang": 3, "trtllm": 3}
# The window tables, new in every framework, are rounded alike (vLLM's too: 2.2 MB -> 1.4 MB for all of them).
WINDOW_LATENCY_DIGITS = 3


def _write(df: pd.DataFrame, path: Path, framework: str, name: str = "") -> None:
    digits = WINDOW_LATENCY_DIGITS if name in WINDOW_TABLES else LATENCY_DIGITS[framework]
    if digits is None:
        df.to_parquet(path, index=False, compression="zstd")
        return
    df = df.assign(latency_ms=[float(f"{x:.{digits}g}") for x in df["latency_ms"]])
    df.to_parquet(path, index=False, compression="zstd", compression_level=19)


# NCCL's all-reduce, once per GPU for every framework (calibrate/measured/<gpu>/nccl/): what an engine runs where it
# does not run its own kernel (`hardware.all_reduce: nccl`: LMDeploy's TurboMind; vLLM and SGLang with
# --disable-custom-all-reduce, past two PCIe-only GPUs, or at a TP their kernel does not support). AIConfigurator's
# comm/nccl tables at the NCCL version its system file names (`misc.nccl_version`), the fp16 ("half") rows: the same
# element size as bf16, which NCCL reduces alike.


def convert_nccl(systems_root: Path, system: str, out_dir: Path, gpu: str, package_version: str) -> dict:
    """Write one GPU's NCCL all-reduce table and its meta.json into out_dir (raises LookupError without one)."""
    config = yaml.safe_load((systems_root / f"{system}.yaml").read_text())
    version = str((config.get("misc") or {}).get("nccl_version", ""))
    path = systems_root / "data" / system / "comm" / NCCL_ALL_REDUCE / version / "nccl_perf.parquet"
    if not version or not path.is_file():
        raise LookupError(f"no NCCL all-reduce table at NCCL {version or '(unnamed)'} for {system}")
    raw = pd.read_parquet(path)
    rows = raw[(raw["op_name"] == "all_reduce") & (raw["nccl_dtype"] == "half")]
    out = pd.DataFrame({"backend": NCCL_ALL_REDUCE, "num_gpus": rows["num_gpus"],
                        "message_elements": rows["message_size"], "latency_ms": rows["latency"]})
    out = out.groupby(["backend", "num_gpus", "message_elements"], as_index=False)["latency_ms"].median()
    out_dir.mkdir(parents=True, exist_ok=True)
    out.to_parquet(out_dir / "allreduce.parquet", index=False, compression="zstd")
    meta = {"format_version": MEASURED_FORMAT_VERSION,
            "source": {"package": PACKAGE, "version": package_version, "license": "Apache-2.0",
                       "path": "aiconfigurator_core/systems/data"},
            "gpu": gpu, "system": system, "device_name": str(raw["device"].iloc[0]), "library": NCCL_ALL_REDUCE,
            "nccl_version": version, "source_file": str(path.relative_to(systems_root)),
            "rows": len(out), "dtype": "fp16 (nccl_dtype half), priced for bf16 alike",
            "units": {"message_elements": "elements reduced (AIConfigurator's message_size)",
                      "latency_ms": "milliseconds per call"}}
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def convert_system(system_dir: Path, current: str, out_dir: Path, gpu: str, system: str,
                   package_version: str, framework: str = FRAMEWORK, lenders: dict[str, str] | None = None) -> dict:
    """Convert one system's tables of one framework into out_dir; returns its meta (raises LookupError if it has
    no data). `lenders`: {another framework: its version queried on this system}, whose MoE rows may fill a
    kernel this framework's lack (`MOE_BORROWED`)."""
    fw = _NAMES[framework]
    found = {name: _pick(system_dir, op, fname, current, framework) for name, (op, fname, _) in TABLES.items()
             if framework in ONLY_FOR.get(name, (framework,))}
    missing = [n for n in REQUIRED if found[n] is None]
    if missing:
        raise LookupError(f"no {fw} {', '.join(missing)} table under {system_dir}")
    out_dir.mkdir(parents=True, exist_ok=True)
    tables, device = {}, None
    raws: dict[Path, pd.DataFrame] = {}  # a raw file read once: the full and window attention tables share theirs
    for name, (op, fname, convert) in TABLES.items():
        if name not in found:
            continue
        if found[name] is None:
            note = f"no {fw} {fname} for {system}"
            if name in ("context_mla", "generation_mla") and found.get("context_mla_module") is not None:
                note += " (MLA measured only as whole modules, the projections inside: *_mla_module)"
            tables[name] = {"status": "absent", "note": note}
            continue
        path, version = found[name]
        if path not in raws:
            raws[path] = pd.read_parquet(path)
        raw = raws[path]
        device = device or str(raw["device"].iloc[0])
        df, kernels = _moe(raw, MOE_DTYPES[framework], MOE_ALSO.get(framework)) if name == "moe" else convert(raw)
        borrowed = {}
        if name == "moe":
            df, kernels, borrowed = _borrow_moe(df, kernels, system_dir, framework, lenders or {})
        dropped = DROPPED_GEMM_DTYPES.get(framework, {}) if name == "gemm" else {}
        if dropped:
            df = df[~df["dtype"].isin(list(dropped))].reset_index(drop=True)
            kernels = {k: v for k, v in kernels.items() if k not in dropped}
        if df.empty:
            what = ("sliding-window rows of the full-attention kernels kept" if name in WINDOW_TABLES
                    else f"{DSA_MODULE_MODEL} rows" if "dsa" in name else "bf16 rows usable here")
            tables[name] = {"status": "absent", "note": f"{fname} has no {what}"}
            continue
        _write(df, out_dir / f"{name}.parquet", framework, name)
        entry = {"status": "ok", "framework": framework, "framework_version": version,
                 "source_file": str(path.relative_to(system_dir.parent.parent)), "rows": len(df),
                 "kernels": kernels}
        if "gemm_dtype" in df.columns:
            entry["gemm_dtypes"] = sorted(set(df["gemm_dtype"]))
        if "dtype" in df.columns or "kv_dtype" in df.columns:
            entry["dtypes"] = sorted(set(df["dtype" if "dtype" in df.columns else "kv_dtype"]))
        if name in WINDOW_TABLES:
            entry["latency_digits"] = WINDOW_LATENCY_DIGITS
        if dropped:
            entry["dropped"] = dict(dropped)
        if borrowed:
            entry["borrowed"] = borrowed
        if version != current:
            entry["note"] = f"{fw} {current} lacks {fname} for {system}; taken from {fw} {version}"
        tables[name] = entry
    gemm_dtypes = tables["gemm"]["dtypes"]
    kv = sorted(set(tables["context_attention"]["dtypes"]) & set(tables["generation_attention"]["dtypes"]))
    meta = {
        "format_version": 1,
        "source": {"package": PACKAGE, "version": package_version, "license": "Apache-2.0",
                   "path": "aiconfigurator_core/systems/data"},
        "gpu": gpu, "system": system, "device_name": device, "framework": framework,
        "framework_version": current, "activation_dtype": "bf16",
        # What a scenario may ask of these tables (sim.cost.measured refuses anything else).
        "measured_dtypes": {"weights": gemm_dtypes, "kv_cache": kv},
        "units": {"latency_ms": "milliseconds per call" + (
            f", rounded to {LATENCY_DIGITS[framework]} significant digits" if LATENCY_DIGITS[framework] else "")},
        "tables": tables,
    }
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m calibrate.aic_import", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="calibrate/measured", help="output folder (one subfolder per GPU)")
    ap.add_argument("--gpus", default=",".join(SYSTEMS), help=f"comma-separated; allowed: {', '.join(SYSTEMS)}")
    ap.add_argument("--frameworks", default=",".join(FRAMEWORKS),
                    help=f"comma-separated; allowed: {', '.join(FRAMEWORKS)}")
    args = ap.parse_args(argv)
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()]
    bad = [g for g in gpus if g not in SYSTEMS]
    if bad:
        print(f"--gpus: {bad[0]!r} is not allowed; allowed: {', '.join(SYSTEMS)}", file=sys.stderr)
        return 2
    frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    bad = [f for f in frameworks if f not in FRAMEWORKS]
    if bad:
        print(f"--frameworks: {bad[0]!r} is not allowed; allowed: {', '.join(FRAMEWORKS)}", file=sys.stderr)
        return 2
    root = installed_systems_root()
    if root is None:
        return 2
    versions = yaml.safe_load((root / "query_versions.yaml").read_text())
    out = Path(args.out)
    missing_path = out / "missing.json"
    missing = json.loads(missing_path.read_text()) if missing_path.is_file() else {}
    for gpu in gpus:
        system = SYSTEMS[gpu]
        missing.pop(f"{gpu}/{NCCL_ALL_REDUCE}", None)
        try:
            nccl = convert_nccl(root, system, out / gpu / NCCL_ALL_REDUCE, gpu, metadata.version(PACKAGE))
            print(f"{gpu}/{NCCL_ALL_REDUCE}: {nccl['device_name']}, NCCL {nccl['nccl_version']} all-reduce, "
                  f"{nccl['rows']} rows")
        except LookupError as err:
            missing[f"{gpu}/{NCCL_ALL_REDUCE}"] = {"system": system, "framework": NCCL_ALL_REDUCE, "reason": str(err)}
            print(f"{gpu}/{NCCL_ALL_REDUCE}: skipped ({err})")
        queried = {fw: versions.get("overrides", {}).get(system, {}).get(fw, {}).get("current")
                   or versions["defaults"][fw]["current"] for fw in FRAMEWORKS}
        for framework in frameworks:
            current = queried[framework]
            key = gpu if framework == FRAMEWORK else f"{gpu}/{framework}"
            missing.pop(key, None)
            dest = framework_dir(out / gpu, framework)
            try:
                meta = convert_system(root / "data" / system, current, dest, gpu, system,
                                      metadata.version(PACKAGE), framework,
                                      {fw: v for fw, v in queried.items() if fw != framework})
            except LookupError as err:
                missing[key] = {"system": system, "framework": framework,
                                "reason": str(err).replace(str(root), "aiconfigurator_core/systems")}
                print(f"{key}: skipped ({missing[key]['reason']})")
                continue
            size = sum(p.stat().st_size for p in dest.iterdir() if p.is_file())
            rows = ", ".join(f"{name} {t.get('rows', 0)}" for name, t in meta["tables"].items())
            print(f"{key}: {meta['device_name']}, {_NAMES[framework]} {current}, {rows} rows, "
                  f"dtypes {meta['measured_dtypes']}, {size / 1e6:.2f} MB")
    missing_path.write_text(json.dumps(dict(sorted(missing.items())), indent=2) + "\n")
    if FRAMEWORK in frameworks:
        triton = triton_prefill_ratio_from_tables(root / "data", versions, metadata.version(PACKAGE))
        (out / TRITON_PREFILL_FILE).write_text(json.dumps(triton, indent=2) + "\n")
        print(f"{TRITON_PREFILL_FILE}: Triton / FA2 context attention on {', '.join(triton['gpus']) or 'no GPU'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
