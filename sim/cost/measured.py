"""A cost model from kernels measured on real GPUs: NVIDIA AIConfigurator's tables (issue 12; engines: issue 30).

`python -m calibrate.aic_import` turns `aiconfigurator-core`'s Parquet tables into compact per-GPU tables
under calibrate/measured/<gpu>/ (vLLM) and calibrate/measured/<gpu>/{sglang,trtllm}/ (GEMMs, context and
generation attention, the engine's custom all-reduce, fused MoE; meta.json names the source package,
framework, versions, kernels and the dtypes measured). `cost_model.tables` picks the engine. This module
reads them with pandas only: simulating never needs aiconfigurator-core or torch.

Dtypes are priced only where measured (`quantization_unmeasured`): fp8 weights with fp8 matrix products
(W8A8) from the fp8 GEMM rows, block-scaled ones (`quantization.fp8_block_scales`) from the fp8_block rows (the
per-tensor ones, noted, where a framework has none usable; and the fused-MoE rows of that kind where the tables
have any, else the bf16 ones' ratio at the fp8 roofline), an fp8 KV cache from the fp8-KV attention rows; bf16
and fp16 (same element size and tensor-core rate on every catalog GPU) from the bf16 rows; MXFP4 experts (gpt-oss's
checkpoints, `quantization.weights: mxfp4`) from the fused-MoE table's MXFP4 rows, the rest from the bf16 rows;
int8 and int4 weights with 16-bit products (weight-only: w8a16, w4a16) from the weight-only GEMM rows where the
tables have them (TensorRT-LLM's A100 tables; a mixture of experts' routed experts from those GEMM rows as one fused
kernel, no fused-MoE row having measured these dtypes). Anything else (int8/int4 weights where no weight-only rows
were measured, an int8 KV cache, weight-only fp8, fp8 or MXFP4 on a GPU or engine whose tables lack it) is refused
with one line naming the field, unless the scenario asks for the roofline instead
(`cost_model.unmeasured_dtype: roofline`); `on_missing` covers only a GPU without tables. A dtype is never priced
from another dtype's rows.

A step is priced the way vLLM runs it, per layer: every linear layer at its per-GPU shard shape (GEMM table at m =
the step's tokens), the fused MoE experts (MoE table: its own configuration, else the nearest measured one scaled by
the roofline; expert parallelism without rows of the dtype at that split, the model's TP rows times another dtype's
EP / TP ratio, `ep_rows_from_another_dtype`; EP rows that do not split the work, `unsplit_ep_dtypes`, as TP over as
many GPUs; without rows of the dtype, expert GEMMs in one fused launch), prefill attention per chunk, decode
attention for the batch at its mean context, two all-reduces of the step's hidden states under tensor parallelism
(the engine's own kernel, or NCCL's where `hardware.all_reduce` says nccl: the GPU's nccl/ table, measured once for
every engine), and the norms/activation/rotary streams; then the LM head for the sampled rows. Between measured
shapes a time is interpolated in log space, like sim/cost/calibrated.py: log(measured / roofline) bilinear on log
axes, where the roofline is the device's own (the fastest FLOP rate and byte rate any measured GEMM reached).
Outside the grid that ratio is held at the nearest edge, so a time follows the roofline's shape; every such
extrapolation is listed in `notes` and the repr, each point once (`note_outside`). Grid points are reproduced
exactly.

A sliding-window layer's attention comes from the tables' own rows at the model's window where they measured it
(`*_window_attention`: gpt-oss's 128 tokens and others, on every GPU but the A100); elsewhere from the full-attention
rows, the window capping the context (said in the notes).

MLA attention comes from the MLA tables where the engine's tables have them (SGLang, TensorRT-LLM: the attention
alone, DeepSeek-V3's latent sizes, by heads per GPU; the projections around it are GEMMs like any other).

vLLM's MLA AIConfigurator measures only as whole modules (projections, attention, norms, rotary, cache write, under
CUDA graphs; DeepSeek-V3's sizes): its attention is each module row less this model's own prices of the module's
projections, so the block costs the module's measured time at every measured point (`_vllm_mla_rows`); other sizes,
heads per GPU not measured, or modules measured at or below the GEMM rows' price of their projections (the B200's
fp8 ones), take the device roofline, said.

DeepSeek sparse attention (DeepSeek-V3.2) comes from the engine's whole DSA modules alike (vLLM's and SGLang's;
`_dsa_rows`: the indexer's three projections are taken off too), a step's prefill chunks priced as one module call
(`measured_kernel._dsa_prefill`); where those rows cannot price it the model refuses in one line
(`SparseAttentionUnmeasured`): no other kernel here prices the indexer.

What the tables do not hold: elementwise ops (priced at the GEMM table's byte rate, at least the
fastest measured kernel), swap copies (the host link), and
the engine's CPU time per step (`step_overhead_s`, default 0: AIConfigurator's estimator, a pure
kernel sum, is within ~6% median of whole CUDA-graphed steps measured on an H100).

This module reads the tables and builds the interpolations; their arithmetic, and a step's, is
`sim.cost.measured_kernel`'s (numba), written once for this model and the compiled engine core.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sim.core.step_plan import StepPlan
from sim.cost import compiled_pricing, interpolation, measured_kernel
from sim.cost.compiled_pricing import KIND_MEASURED
from sim.cost.packed import PackedCostModel
from sim.cost.roofline import RooflineCostModel, StepCost, step_costs
from sim.cost.roofline_kernel import ACT_BYTES, expert_load, op_time
from sim.cost.step_args import step_args
from sim.errors import ConfigError
from sim.jit import HAVE_NUMBA
from sim.model.attention_io import TRITON_BACKEND as TRITON
from sim.model.attention_io import heads_per_gpu as attention_heads_per_gpu
from sim.model.catalog import GPUS, canonical_name, data_owner, get_gpu
from sim.model.interconnects import CUSTOM_ALL_REDUCE, NCCL_ALL_REDUCE
from sim.model.memory import DTYPE_BYTES, MARLIN, NVFP4_PARAM_BYTES, matrix_dtype
from sim.model.shapes import gpu_layer_groups, is_routed_expert, kv_heads_per_gpu, lm_head_shape
from sim.model.specs import ExpertGroup, GPUSpec, ModelSpec

# Shipped tables: calibrate/measured/<gpu>/ (written by `python -m calibrate.aic_import`).
MEASURED_DIR = Path(__file__).resolve().parents[2] / "calibrate" / "measured"
MEASURED_FORMAT_VERSION = 1
ENGINES = ("vllm-cudagraph", "vllm-eager")  # which all-reduce curve: under CUDA graphs or eager
# Whose measured kernels (`cost_model.tables`): vLLM's tables in calibrate/measured/<gpu>/, the others in a
# subfolder named after the framework (calibrate/aic_import.py: framework_dir).
TABLES = ("vllm", "sglang", "trtllm")
# Scenario dtype -> the table rows that price it. fp16 takes the bf16 rows: the same element size and the same
# tensor-core rate on every catalog GPU (NVIDIA's A100/H100/H200/L40S datasheets list one "FP16/BF16" figure).
# nvfp4: NVFP4 W4A4 products (`quantization.weights: nvfp4`), from the nvfp4 rows (the B200's tables only).
_GEMM_DTYPE = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "nvfp4": "nvfp4",  # scenario weights -> table dtype
               "int8": "int8", "int4": "int4"}  # weight-only (16-bit products): WEIGHT_ONLY_INT
WEIGHT_ONLY_INT = ("int8", "int4")  # GEMM rows only: no fused-MoE row measured these (AIConfigurator's <d>_wo)
# AIConfigurator's int4 rows are per-channel weight-only (TensorRT-LLM's weight_only_quant_gemm, the kernel its
# WeightOnlyQuantLinearMethod runs: tensorrt_llm/_torch/modules/linear.py at NVIDIA/TensorRT-LLM 00bbf71e); an AWQ or
# GPTQ checkpoint's group-wise int4 runs finegrained_mixed_dtype_gemm there (W4A16_AWQ_LinearMethod), not measured.
INT4_ROWS_NOTE = ("gemm: int4 from the per-channel weight-only rows (weight_only_quant_gemm); group-wise int4 (AWQ, "
                  "GPTQ) runs another kernel, not measured")
# mxfp4 (gpt-oss's checkpoints): the routed experts from the fused-MoE table's MXFP4 rows, every other matrix (16-bit
# in those checkpoints) from the bf16 GEMM rows.
MXFP4 = "mxfp4"
# `quantization.moe_kernel: marlin` (vLLM's Marlin MXFP4 experts): the MXFP4 rows of Marlin's kernel, where the tables'
# main MXFP4 kernel is another (calibrate/aic_import.py MOE_ALSO).
MXFP4_MARLIN = "mxfp4_marlin"
# `attention.backend: triton` (vLLM's Triton attention backend): its own rows where a GPU's tables keep them, else
# FlashAttention-2's context rows times the Triton / FA2 ratio by prompt length measured where both were
# (TRITON_PREFILL_FILE, written by calibrate/aic_import.py `triton_prefill_ratio_from_tables`).
TRITON_ATTENTION, FA2_ATTENTION = "vllm_triton_attn", "vllm_flash_attn_fa2"  # AIConfigurator's kernel_source names
TRITON_PREFILL_FILE = "vllm_triton_prefill.json"
# vLLM's own FlashAttention fork (`vllm_flash_attn`, the A100's tables at vLLM 0.14.0) runs FA2 below sm_90 (FA3 needs
# Hopper): FA2 rows under another name there.
VLLM_FLASH_ATTN, FA3_SINCE = "vllm_flash_attn", (9, 0)
_KV_DTYPE = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8"}
# (a 128 x 128 block's scale: 4 bytes in 16 KiB, left out; NVFP4's 1-byte scale per 16 weights, counted)
_DTYPE_BYTES = {"bf16": 2, "fp8": 1, "fp8_block": 1, "nvfp4": NVFP4_PARAM_BYTES,
                **{d: DTYPE_BYTES[d] for d in WEIGHT_ONLY_INT}}


def gemm_dtype(weight_dtype: str, fp8_block: bool = False) -> str | None:
    """The table rows asked for to price these weights: fp8 with 128 x 128 weight-block scales (`fp8_block_scales`,
    as DeepSeek-V3/R1's and Qwen's FP8 checkpoints) the block-scaled rows. (Where a framework's tables lack
    block-scaled GEMM rows, `MeasuredCostModel` takes the per-tensor fp8 ones and notes it.)"""
    dtype = _GEMM_DTYPE.get("bf16" if weight_dtype == MXFP4 else weight_dtype)
    return "fp8_block" if fp8_block and dtype == "fp8" else dtype


def moe_dtype(weight_dtype: str, fp8_block: bool = False) -> str | None:
    """The fused-MoE table rows asked for to price the routed experts: MXFP4 experts their own rows, any other
    weights the rows of their GEMM dtype."""
    return MXFP4 if weight_dtype == MXFP4 else gemm_dtype(weight_dtype, fp8_block)


# The MLA sizes AIConfigurator's MLA tables were measured at, DeepSeek-V3's (qk_nope_head_dim, qk_rope_head_dim,
# v_head_dim, kv_lora_rank; its sdk/models/deepseek.py): DeepSeek-V2, V2-Lite, V3 and R1 share them.
MLA_MEASURED_DIMS = (128, 64, 128, 512)
# vLLM's whole MLA modules were measured at DeepSeek-V3's sizes, projections included (hidden_size, q_lora_rank, and
# MLA_MEASURED_DIMS); DeepSeek-R1 shares them. The module's projections as `sim.model.shapes` names them: the model
# prices these from the GEMM rows and takes them off the module's time (`_vllm_mla_rows`).
MLA_MODULE_DIMS = (7168, 1536, *MLA_MEASURED_DIMS)
MLA_MODULE_PROJECTIONS = ("q_a_proj", "kv_a_proj", "q_b_proj", "kv_b_proj", "attn_out")
# The engines' whole DeepSeek sparse attention modules were measured at DeepSeek-V3.2's sizes (MLA_MODULE_DIMS, then
# index_topk, index_n_heads, index_head_dim). The projections inside each engine's rows, the indexer's three among
# them, as `_dsa_rows` takes them off: SGLang's collector replaces the fused q_a / kv_a projection by random latents
# (AIConfigurator's collector/sglang/collect_mla_module.py), so its rows hold the rest. (SGLang's prefill where every
# sequence fits the top-k computes the indexer's keys only, dsa_indexer.py `_forward_cuda_k_only`; its query and
# head-weight projections are taken off those rows too, as the model prices all three in every step: the block then
# costs the row, plus the fused projection, at every measured point.)
DSA_MODULE_DIMS = (*MLA_MODULE_DIMS, 2048, 64, 128)
DSA_INDEXER_PROJECTIONS = ("index_q", "index_k", "index_weights")
DSA_MODULE_PROJECTIONS = {"vllm": (*MLA_MODULE_PROJECTIONS, *DSA_INDEXER_PROJECTIONS),
                          "sglang": ("q_b_proj", "kv_b_proj", "attn_out", *DSA_INDEXER_PROJECTIONS)}


def tables_dir(gpu: str, tables: str = "vllm", root: Path | None = None) -> Path:
    """The folder of one GPU's tables of one framework (`cost_model.tables`)."""
    base = (root or MEASURED_DIR) / canonical_name(gpu)
    return base if tables == "vllm" else base / tables


def measured_gpus(root: Path | None = None, tables: str = "vllm") -> list[str]:
    """GPUs with shipped measured tables of this framework."""
    root = root or MEASURED_DIR
    if not root.is_dir():
        return []
    return sorted(p.parent.name for p in root.glob("*/meta.json") if (tables_dir(p.parent.name, tables, root)
                                                                     / "meta.json").is_file())


def tables_gpu(gpu: str | GPUSpec, tables: str = "vllm", root: Path | None = None) -> str:
    """The GPU whose tables of this framework price this one's kernels: its own where they ship, else those of the part
    its catalog entry is the same silicon as (`GPUSpec.kernels_as`: the H800 is the H100 SXM with slower links), where
    those ship; its own name otherwise (`gpu_unmeasured` then says none ship)."""
    gpus = measured_gpus(root, tables)
    return data_owner(gpu, gpus.__contains__)


def _check_tables(tables: str) -> None:
    if tables not in TABLES:
        raise ConfigError(f"cost_model.tables: {tables!r} is not allowed; allowed: {', '.join(TABLES)}")


def gpu_unmeasured(gpu: str, tables: str = "vllm", root: Path | None = None) -> str | None:
    """Why there are no tables of this framework for this GPU (None: there are): one line, without a field."""
    _check_tables(tables)
    gpus = measured_gpus(root, tables)
    if tables_gpu(gpu, tables, root) in gpus:
        return None
    which = "" if tables == "vllm" else f"{tables} "
    return f"no measured {which}kernel tables for gpu {gpu!r}; measured: {', '.join(gpus) or 'none'}"


def quantization_unmeasured(gpu: str, weight_dtype: str = "bf16", kv_dtype: str = "bf16",
                            fp8_compute: bool | None = None, tables: str = "vllm",
                            root: Path | None = None, moe_kernel: str | None = None) -> str | None:
    """Why this GPU's tables of this framework cannot price the quantization (None: they can): one line naming the
    field, its value and what is allowed. `fp8_compute` None is not checked: fp8 weights are taken as W8A8, for
    callers that do not know (a direct `MeasuredCostModel`). `moe_kernel` (`quantization.moe_kernel`): tables that
    hold Marlin's MXFP4 rows alone (A100's, borrowed) price MXFP4 experts only where Marlin runs them."""
    owner = tables_gpu(gpu, tables, root)
    t = load_tables(tables_dir(owner, tables, root))
    where = f"in the {tables} tables of {owner}" + ("" if owner == canonical_name(gpu) else f" (the {gpu}'s kernels)")
    escape = "or cost_model.unmeasured_dtype: roofline"
    weights = [w + (" (with fp8_compute: true)" if w == "fp8" else "") for w, d in _GEMM_DTYPE.items()
               if d in t.gemm_dtypes]
    weights += [MXFP4] if MXFP4 in t.moe_dtypes else []
    kv = [k for k, d in _KV_DTYPE.items() if d in t.kv_dtypes]
    marlin_only = MXFP4 not in t.moe_dtypes and MXFP4_MARLIN in t.moe_dtypes  # (A100's: borrowed, meta.json)
    if weight_dtype == MXFP4 and MXFP4 not in t.moe_dtypes and not (marlin_only and moe_kernel == MARLIN):
        rows = "only Marlin's MXFP4 fused-MoE rows" if marlin_only else "no MXFP4 fused-MoE rows"
        also = "quantization.moe_kernel: marlin, " if marlin_only else ""
        return (f"quantization.weights: 'mxfp4' is not measured {where} ({rows}); allowed: "
                f"{', '.join(weights)}, {also}{escape}")
    if weight_dtype != MXFP4 and _GEMM_DTYPE.get(weight_dtype) not in t.gemm_dtypes:
        return (f"quantization.weights: {weight_dtype!r} is not measured {where}; allowed: {', '.join(weights)}, "
                f"{escape}")
    if weight_dtype == "fp8" and fp8_compute is False:
        # The fp8 rows are W8A8 (fp8 matrix products); weight-only fp8 (16-bit products, e.g. Marlin) is not in
        # the tables, and W8A8 would price it too fast.
        return (f"quantization.fp8_compute: false with weights 'fp8' (weight-only fp8) is not measured {where}; "
                f"allowed: true (W8A8, the fp8 GEMM rows), {escape}")
    if fp8_compute and weight_dtype != "fp8":
        return (f"quantization.fp8_compute: true with weights {weight_dtype!r} is not measured {where}; "
                f"allowed: false, or weights 'fp8', {escape}")
    if _KV_DTYPE.get(kv_dtype) not in t.kv_dtypes:
        return f"quantization.kv_cache: {kv_dtype!r} is not measured {where}; allowed: {', '.join(kv)}, {escape}"
    return None


def attention_kernel(gpu: str, tables: str = "vllm", root: Path | None = None, mla: bool = False) -> str | None:
    """The attention kernel this GPU's tables of this framework measured (context and decode alike, bf16 KV: the
    kernel_source meta.json records; `mla`: the MLA tables'), or None where there are no such tables or the two
    differ."""
    if gpu_unmeasured(gpu, tables, root):
        return None
    meta = json.loads((tables_dir(tables_gpu(gpu, tables, root), tables, root) / "meta.json").read_text())["tables"]
    names = ("context_mla", "generation_mla") if mla else ("context_attention", "generation_attention")
    kernels = {meta.get(t, {}).get("kernels", {}).get("bf16") for t in names}
    return kernels.pop() if len(kernels) == 1 else None


def triton_prefill_ratio(root: Path | None = None) -> tuple[np.ndarray, np.ndarray, dict]:
    """(prompt lengths, log of vLLM's Triton / FA2 context-attention ratio there, the file read): the mean over the
    GPUs that measured both of each one's log median ratio (TRITON_PREFILL_FILE)."""
    data = json.loads(((root or MEASURED_DIR) / TRITON_PREFILL_FILE).read_text())
    by_gpu = [dict(zip(g["isl"], g["ratio"])) for g in data["gpus"].values()]
    if not by_gpu:
        raise ConfigError(f"attention.backend: {TRITON!r} has no ratio to price it: {TRITON_PREFILL_FILE} holds no GPU "
                          "that measured both kernels; allowed: null")
    isl = sorted(set.intersection(*(set(g) for g in by_gpu)))
    log_ratio = [sum(math.log(g[x]) for g in by_gpu) / len(by_gpu) for x in isl]
    return np.array(isl, dtype=np.float64), np.array(log_ratio, dtype=np.float64), data


class SparseAttentionUnmeasured(ConfigError):
    """The measured model cannot price this model's DeepSeek sparse attention (`reason` says why)."""

    def __init__(self, reason: str):
        super().__init__(f"cost_model.kind 'measured' cannot price {reason}; allowed: cost_model.kind 'roofline'")
        self.reason = reason


def sparse_attention_unmeasured(model, gpu: str, tables: str = "vllm", root: Path | None = None, *,
                                tensor_parallel: int = 1, weight_dtype: str = "bf16", kv_dtype: str = "bf16",
                                fp8_compute: bool | None = None, fp8_block: bool = False) -> str | None:
    """Why this GPU's tables of this framework cannot price the model's attention, None where they can or it is
    dense: DeepSeek sparse attention (`ModelSpec.index_topk`) only from the engine's whole DSA module rows at the
    model's sizes, heads per GPU and dtypes (`MeasuredCostModel._setup_dsa`, which is asked: the rule lives there).
    A GPU or quantization the tables lack is `measured_unsupported`'s to say."""
    if (not getattr(model, "index_topk", 0) or gpu_unmeasured(gpu, tables, root)
            or quantization_unmeasured(gpu, weight_dtype, kv_dtype, fp8_compute, tables, root)):
        return None
    try:
        MeasuredCostModel(model, get_gpu(gpu), tensor_parallel=tensor_parallel, weight_dtype=weight_dtype,
                          kv_dtype=kv_dtype, root=root, tables=tables, fp8_compute=fp8_compute, fp8_block=fp8_block)
    except SparseAttentionUnmeasured as refused:
        return refused.reason
    return None


def measured_unsupported(gpu: str, weight_dtype: str = "bf16", kv_dtype: str = "bf16",
                         root: Path | None = None, *, fp8_compute: bool | None = None,
                         tables: str = "vllm", moe_kernel: str | None = None) -> str | None:
    """Why the measured cost model cannot price this setup (None if it can): one line. A missing GPU first
    (`gpu_unmeasured`), then the quantization (`quantization_unmeasured`)."""
    return (gpu_unmeasured(gpu, tables, root)
            or quantization_unmeasured(gpu, weight_dtype, kv_dtype, fp8_compute, tables, root, moe_kernel))


# --- tables ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MeasuredTables:
    path: Path
    meta: dict
    gemm: pd.DataFrame
    context: pd.DataFrame
    generation: pd.DataFrame
    allreduce: pd.DataFrame | None
    moe: pd.DataFrame | None
    gemm_dtypes: frozenset  # GEMM dtypes measured
    kv_dtypes: frozenset  # KV-cache dtypes measured for both context and decode attention
    context_mla: pd.DataFrame | None = None  # MLA attention alone (SGLang's and TensorRT-LLM's tables)
    generation_mla: pd.DataFrame | None = None
    moe_by_routing: dict | None = None  # {routing distribution: its fused-MoE rows}; `moe` is the default's
    context_mla_module: pd.DataFrame | None = None  # vLLM's whole MLA module, projections inside (`_vllm_mla_rows`)
    generation_mla_module: pd.DataFrame | None = None
    context_window: pd.DataFrame | None = None  # sliding-window attention (a `window` column), where measured
    generation_window: pd.DataFrame | None = None
    context_dsa_module: pd.DataFrame | None = None  # the engine's whole DeepSeek sparse attention module (`_dsa_rows`)
    generation_dsa_module: pd.DataFrame | None = None

    @property
    def launch_floor_s(self) -> float:
        """The fastest kernel the GEMM table holds: a floor for any kernel launch inside a step (the measured model's
        and the learned roofline's launch)."""
        return float(self.gemm["latency_ms"].min()) * 1e-3

    def moe_rows(self, routing: str) -> tuple[pd.DataFrame | None, str]:
        """(the fused-MoE rows measured under `routing`, the routing they were measured under). Balanced where the
        tables hold none: their mildest skew (A100's tables measured only power-law routing), which the caller
        says. A skew the tables lack: a one-line ConfigError naming the routings they hold."""
        default = str(self.meta["tables"].get("moe", {}).get("kernels", {}).get("distribution", "balanced"))
        if self.moe is None or routing == "balanced" or routing == default:
            return self.moe, default
        measured = self.moe_by_routing or {}
        if routing not in measured:
            allowed = ", ".join(["balanced", *(d for d in measured if d != "balanced")])
            raise ConfigError(f"cost_model.moe_routing: {routing!r} was not measured in the {self.framework} tables "
                              f"of {self.meta['gpu']}; allowed: {allowed}")
        found = measured[routing]
        return found, routing

    @property
    def source(self) -> str:
        s = self.meta["source"]
        return (f"{s['package']} {s['version']} {self.meta['system']} "
                f"{self.meta['framework']} {self.meta['framework_version']}")

    @property
    def framework(self) -> str:
        return str(self.meta.get("framework", "vllm"))

    @property
    def moe_dtypes(self) -> frozenset:
        """The expert dtypes the fused-MoE table measured (meta.json)."""
        return frozenset(self.meta["tables"].get("moe", {}).get("dtypes", ()))

    def attention_dtype(self, kv_dtype: str) -> str:
        """The dtype context attention computes in with this KV dtype (meta.json; bf16 where unrecorded)."""
        kernels = self.meta["tables"]["context_attention"].get("kernels", {})
        return str(kernels.get("attention_dtypes", {}).get(kv_dtype, "bf16"))


_CACHE: dict[str, MeasuredTables] = {}


def allreduce_on_links(rows: pd.DataFrame, stretch: float) -> pd.DataFrame:
    """All-reduce rows (num_gpus, message_elements, latency_ms) as links `stretch` times slower would run them: each
    row's time past the fastest row of its GPU count (launch and synchronisation) scaled by `stretch`, the fastest kept
    (benchmarks/bench_link_stretch.py checks the rule across the measured GPUs)."""
    fastest = rows.groupby("num_gpus")["latency_ms"].transform("min")
    return rows.assign(latency_ms=fastest + (rows["latency_ms"] - fastest) * stretch)


def nccl_allreduce(gpu_dir: Path) -> tuple[pd.DataFrame, dict]:
    """(NCCL's all-reduce rows of one GPU, their meta.json): `calibrate.aic_import.convert_nccl`'s table under the
    GPU's folder, for every framework. A GPU without one is refused in one line."""
    folder = Path(gpu_dir) / NCCL_ALL_REDUCE
    key = str(folder.resolve())
    if key not in _NCCL_CACHE:
        if not (folder / "meta.json").is_file():
            raise ConfigError(f"hardware.all_reduce: 'nccl' is not measured for {Path(gpu_dir).name!r} (no "
                              f"{folder}/); allowed: custom")
        meta = json.loads((folder / "meta.json").read_text())
        if meta.get("format_version") != MEASURED_FORMAT_VERSION:
            raise ConfigError(f"hardware.all_reduce: '{folder / 'meta.json'}' has format_version "
                              f"{meta.get('format_version')}; allowed: {MEASURED_FORMAT_VERSION}")
        _NCCL_CACHE[key] = (pd.read_parquet(folder / "allreduce.parquet"), meta)
    return _NCCL_CACHE[key]


_NCCL_CACHE: dict[str, tuple[pd.DataFrame, dict]] = {}


def load_tables(path: str | Path, field: str = "cost_model.gpu_data") -> MeasuredTables:
    p = Path(path)
    key = str(p.resolve())
    if key in _CACHE:
        return _CACHE[key]
    meta_path = p / "meta.json"
    if not meta_path.is_file():
        raise ConfigError(f"{field}: '{p}' has no meta.json; allowed: a folder written by "
                          "`python -m calibrate.aic_import`")
    meta = json.loads(meta_path.read_text())
    if meta.get("format_version") != MEASURED_FORMAT_VERSION:
        raise ConfigError(f"{field}: '{meta_path}' has format_version {meta.get('format_version')}; "
                          f"allowed: {MEASURED_FORMAT_VERSION}")

    def read(name: str, required: bool) -> pd.DataFrame | None:
        f = p / f"{name}.parquet"
        if not f.is_file():
            if required:
                raise ConfigError(f"{field}: '{p}' lacks {name}.parquet; allowed: a complete import")
            return None
        import pyarrow.parquet as pq  # (pandas' read_parquet also imports pyarrow.dataset: ~0.1 s a process)
        df = pq.ParquetFile(f).read().to_pandas()
        if (df["latency_ms"] <= 0).any() or df["latency_ms"].isna().any():
            raise ConfigError(f"{field}: '{f}' has a non-positive or missing latency_ms; allowed: > 0")
        return df

    gemm, ctx, gen = read("gemm", True), read("context_attention", True), read("generation_attention", True)
    moe, moe_by_routing = read("moe", False), None
    if moe is not None and "distribution" in moe.columns:  # every routing measured (imports since 11-29)
        moe_by_routing = {str(d): rows.drop(columns="distribution").reset_index(drop=True)
                          for d, rows in moe.groupby("distribution", sort=True)}
        moe = moe_by_routing[str(meta["tables"]["moe"]["kernels"]["distribution"])]
    tables = MeasuredTables(p, meta, gemm, ctx, gen, read("allreduce", False), moe,
                            frozenset(gemm["dtype"].unique()),
                            frozenset(ctx["kv_dtype"].unique()) & frozenset(gen["kv_dtype"].unique()),
                            read("context_mla", False), read("generation_mla", False), moe_by_routing,
                            read("context_mla_module", False), read("generation_mla_module", False),
                            read("context_window_attention", False), read("generation_window_attention", False),
                            read("context_dsa_module", False), read("generation_dsa_module", False))
    _CACHE[key] = tables
    return tables


# --- interpolation ---------------------------------------------------------------------------------

def _bracket(grid: list[float], u: float) -> tuple[int, float, bool]:
    """Index i and weight w so that u ≈ grid[i]·(1-w) + grid[i+1]·w, clamped; and whether u was outside."""
    return interpolation.bracket(np.asarray(grid, dtype=np.float64), u)


@dataclass(frozen=True)
class DeviceRoofline:
    """The measured device's own roofline: the fastest FLOP rate and byte rate any measured GEMM reached."""

    flops_per_s: float
    bytes_per_s: float

    def time(self, flops: float, nbytes: float) -> float:
        return op_time(flops, nbytes, self.flops_per_s, self.bytes_per_s)


def device_roofline(gemm: pd.DataFrame) -> DeviceRoofline:
    g = gemm[gemm["dtype"] == "bf16"]
    m, n, k = (g[c].to_numpy(float) for c in ("m", "n", "k"))
    t = g["latency_ms"].to_numpy(float) * 1e-3
    return DeviceRoofline(float((2 * m * n * k / t).max()), float(((n * k + m * (n + k)) * 2 / t).max()))


@dataclass(frozen=True)
class Shape:
    """The roofline time a kernel's measured time is taken relative to: a kind of `measured_kernel.shape_at` and
    its four numbers (`measured_kernel.SHAPE_*`), on a device's roofline."""

    kind: int
    numbers: tuple[float, float, float, float]
    roof: DeviceRoofline

    def __call__(self, x: float, y: float = 0.0) -> float:
        return measured_kernel.shape_at(self.kind, *self.numbers, self.roof.flops_per_s, self.roof.bytes_per_s, x, y)


def note_outside(notes: Counter, message: str) -> None:
    """A point priced outside the measured tables: listed once, however often it is priced. How often that is
    depends on the model's memos (terms remembered by token count), so a count would say nothing about the run."""
    notes[message] = 1


def outside_message(name: str, point: str, measured: str) -> str:
    """The note of a point priced past a curve's or grid's measured range (`OUTSIDE` reads it back)."""
    return f"{name} at {point} outside measured {measured}"


OUTSIDE = re.compile(r"^(?P<name>.+) at (?P<point>\(.+?\)|\S+) outside measured (?P<measured>.+)$")
HELD = "the nearest edge's ratio to the roofline held"  # how a point past the measured range is priced


def note_lines(notes) -> tuple[str, ...]:
    """A measured model's notes for a reader, sorted: each curve's or grid's points past its measured range
    collapsed into one line (how many, the first and last in order), the rest as they are."""
    lines, outside = set(), {}
    for note in notes:
        m = OUTSIDE.match(note)
        if m:
            outside.setdefault((m["name"], m["measured"]), []).append(m["point"])
        else:
            lines.add(note)
    for (name, measured), points in outside.items():
        if len(points) == 1:
            lines.add(f"{outside_message(name, points[0], measured)} ({HELD})")
            continue
        shown = sorted(points, key=lambda point: tuple(float(v) for v in point.strip("()").split(",")))
        lines.add(f"{name}: {len(points)} points outside measured {measured}, from {shown[0]} to {shown[-1]} ({HELD})")
    return tuple(sorted(lines))


class Curve:
    """A time along one axis: shape(x) · exp(log ratio interpolated on log1p(x)), held past the ends."""

    def __init__(self, xs, log_ratio, shape: Shape, name: str, notes: Counter):
        order = sorted(range(len(xs)), key=lambda i: xs[i])
        self.xs = [float(xs[i]) for i in order]
        self.grid = np.array([math.log1p(x) for x in self.xs], dtype=np.float64)
        self.lr = np.array([float(log_ratio[i]) for i in order], dtype=np.float64)
        self.shape, self.name, self.notes = shape, name, notes

    def outside_note(self, x: float) -> str:
        return outside_message(self.name, f"{x:g}", f"{self.xs[0]:g}..{self.xs[-1]:g}")

    def __call__(self, x: float, note: bool = True) -> float:
        """The time at x; a point past the measured range is noted unless `note` is False (a price taken while the
        model is built, not one a step asked for)."""
        shape = self.shape
        value, outside = measured_kernel.curve_at(self.grid, self.lr, shape.kind, *shape.numbers,
                                                  shape.roof.flops_per_s, shape.roof.bytes_per_s, x)
        if outside and note:
            note_outside(self.notes, self.outside_note(x))
        return value


class Grid2D:
    """A time over two axes (bilinear log ratio on log1p axes). Cells the table lacks take the nearest
    measured ratio along the second axis, then the first (counted in `filled`)."""

    def __init__(self, df: pd.DataFrame, a: str, b: str, shape: Shape, name: str, notes: Counter):
        df = df.assign(lr=[math.log(t * 1e-3 / shape(x, y)) for x, y, t in zip(df[a], df[b], df["latency_ms"])])
        piv = df.pivot_table(index=a, columns=b, values="lr", aggfunc="median")
        self.filled = int(piv.isna().to_numpy().sum())
        piv = piv.ffill(axis=1).bfill(axis=1).ffill(axis=0).bfill(axis=0)
        self.xs, self.ys = [float(v) for v in piv.index], [float(v) for v in piv.columns]
        self.ga = np.array([math.log1p(v) for v in self.xs], dtype=np.float64)
        self.gb = np.array([math.log1p(v) for v in self.ys], dtype=np.float64)
        self.r = np.ascontiguousarray(piv.to_numpy(float))
        self.shape, self.name, self.notes = shape, name, notes
        if self.filled:
            notes[f"{name}: {self.filled} unmeasured grid cells take the nearest measured ratio"] += 1

    def outside_note(self, x: float, y: float) -> str:
        return outside_message(self.name, f"({x:g}, {y:g})",
                               f"{self.xs[0]:g}..{self.xs[-1]:g} x {self.ys[0]:g}..{self.ys[-1]:g}")

    def __call__(self, x: float, y: float) -> float:
        shape = self.shape
        value, outside = measured_kernel.grid_at(self.ga, self.gb, self.r, shape.kind, *shape.numbers,
                                                 shape.roof.flops_per_s, shape.roof.bytes_per_s, x, y)
        if outside:
            note_outside(self.notes, self.outside_note(x, y))
        return value


_GEMM_GROUPS: dict[tuple[str, str], dict] = {}
_GEMM_CURVES: dict[tuple[str, str, int, int], tuple[list, list, list[str]]] = {}


def _gemm_groups(gemm: pd.DataFrame, dtype: str, key: str) -> dict:
    """(n, k) -> (m values, seconds) of one GEMM dtype, built once per table."""
    if (key, dtype) not in _GEMM_GROUPS:
        # numpy, not a pandas groupby (a DataFrame per group: ~60 ms a table, paid by every planner run)
        rows = (gemm["dtype"] == dtype).to_numpy()
        n_col, k_col = gemm["n"].to_numpy()[rows], gemm["k"].to_numpy()[rows]
        m_col, s_col = gemm["m"].to_numpy(float)[rows], gemm["latency_ms"].to_numpy(float)[rows] * 1e-3
        order = np.lexsort((m_col, k_col, n_col))  # by n, then k, then m (stable)
        n_col, k_col, m_col, s_col = n_col[order], k_col[order], m_col[order], s_col[order]
        starts = np.flatnonzero(np.r_[True, (n_col[1:] != n_col[:-1]) | (k_col[1:] != k_col[:-1])])
        ends = np.r_[starts[1:], len(n_col)]
        _GEMM_GROUPS[(key, dtype)] = {
            (int(n_col[a]), int(k_col[a])): (m_col[a:b].tolist(), s_col[a:b].tolist()) for a, b in zip(starts, ends)}
    return _GEMM_GROUPS[(key, dtype)]


def gemm_curve(gemm: pd.DataFrame, dtype: str, n: int, k: int, roof: DeviceRoofline, notes: Counter,
               name: str, key: str = "") -> Curve:
    """Time of an (m × k) · (k × n) GEMM as a function of m, interpolated between measured (n, k):
    log(measured / roofline) bilinear in log n and log k over the measured (n, k) around it."""
    eb = _DTYPE_BYTES[dtype]

    def shape_nk(nn: float, kk: float) -> Shape:
        return Shape(measured_kernel.SHAPE_GEMM, (nn, kk, eb, 0.0), roof)

    cache_key = (key, dtype, n, k)
    if key and cache_key in _GEMM_CURVES:
        ms, lr, static_notes = _GEMM_CURVES[cache_key]
    else:
        groups = _gemm_groups(gemm, dtype, key or str(id(gemm)))
        ns, ks = sorted({c[0] for c in groups}), sorted({c[1] for c in groups})
        i, wn, out_n = _bracket([math.log(v) for v in ns], math.log(n))
        j, wk, out_k = _bracket([math.log(v) for v in ks], math.log(k))
        corners: dict = {}
        for nn, w1 in ((ns[i], 1 - wn), (ns[min(i + 1, len(ns) - 1)], wn)):
            for kk, w2 in ((ks[j], 1 - wk), (ks[min(j + 1, len(ks) - 1)], wk)):
                if w1 * w2 > 0:
                    corners[(nn, kk)] = corners.get((nn, kk), 0.0) + w1 * w2
        present = {c: w for c, w in corners.items() if c in groups}
        static_notes = []
        if not present:  # no measured neighbour: the nearest measured (n, k)
            near = min(groups, key=lambda c: abs(math.log(c[0] / n)) + abs(math.log(c[1] / k)))
            present = {near: 1.0}
            static_notes.append(f"{name}: (n={n}, k={k}) has no measured neighbours; nearest measured {near}")
        if out_n or out_k:
            static_notes.append(f"{name}: (n={n}, k={k}) outside measured n {ns[0]}..{ns[-1]}, k {ks[0]}..{ks[-1]}")
        total = sum(present.values())
        curves = []
        for (nn, kk), w in present.items():
            m_vals, secs = groups[(nn, kk)]
            sh = shape_nk(nn, kk)
            curves.append((w / total, Curve(m_vals, [math.log(t / sh(m)) for m, t in zip(m_vals, secs)], sh,
                                            name, Counter())))
        ms = sorted({x for _, c in curves for x in c.xs})
        lr = [sum(w * math.log(c(m) / c.shape(m)) for w, c in curves) for m in ms]
        if key:
            _GEMM_CURVES[cache_key] = (ms, lr, static_notes)
    for note in static_notes:
        notes[note] += 1
    return Curve(ms, lr, shape_nk(n, k), f"{name} tokens", notes)


def nearest_heads(df: pd.DataFrame, hq: int, hkv: int, d: int) -> tuple[int, int, int]:
    """The head configuration (query heads, KV heads, head size) among `df`'s rows nearest this one: the least sum of
    |log ratio| of query heads, KV heads and twice the head size."""
    configs = df[["num_heads", "num_kv_heads", "head_dim"]].drop_duplicates().itertuples(index=False)

    def dist(c) -> float:
        return (abs(math.log(c.num_heads / hq)) + abs(math.log(c.num_kv_heads / hkv))
                + 2 * abs(math.log(c.head_dim / d)))
    near = min(configs, key=dist)
    return int(near.num_heads), int(near.num_kv_heads), int(near.head_dim)


def heads_rows(df: pd.DataFrame, heads: tuple[int, int, int]) -> pd.DataFrame:
    """`df`'s rows at one head configuration (query heads, KV heads, head size)."""
    hq, hkv, d = heads
    return df[(df["num_heads"] == hq) & (df["num_kv_heads"] == hkv) & (df["head_dim"] == d)]


def _select_heads(df: pd.DataFrame, hq: int, hkv: int, d: int, name: str, notes: Counter,
                  how: str = "scaled by the roofline") -> pd.DataFrame:
    """Rows measured at this head configuration, else the nearest one (`nearest_heads`; `how` the caller carries
    them over)."""
    rows = heads_rows(df, (hq, hkv, d))
    if not rows.empty:
        return rows
    near = nearest_heads(df, hq, hkv, d)
    notes[f"{name}: heads {hq}/{hkv}/{d} (q/kv/dim) not measured; nearest {near[0]}/{near[1]}/{near[2]} {how}"] += 1
    return heads_rows(df, near)


MOE_KEYS = ["hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"]  # a configuration


def of_moe_config(rows: pd.DataFrame, config: tuple) -> np.ndarray:
    """The rows of one configuration (MOE_KEYS' values), as a mask."""
    return np.logical_and.reduce([rows[k] == v for k, v in zip(MOE_KEYS, config)])


def nearest_moe_config(moe: pd.DataFrame, config: tuple) -> tuple:
    """The fused-MoE table's configuration (hidden, intermediate, top-k, experts, moe TP, moe EP) nearest this one:
    itself where measured, else, among the rows of the same expert parallelism where there are any (its kernels
    differ: vLLM's expert map, other GEMM widths), the least sum of |log ratio| of hidden size, per-GPU intermediate
    size, top-k and experts (ties: the table's order)."""
    configs = [tuple(int(v) for v in c) for c in moe[MOE_KEYS].drop_duplicates().itertuples(index=False)]
    if config in configs:
        return config
    h, inter, k, e, tp, ep = config

    def dist(c) -> tuple[bool, float]:
        return (c[5] != ep, abs(math.log(c[0] / h)) + abs(math.log((c[1] / c[4]) / (inter / tp)))
                + abs(math.log(c[2] / k)) + abs(math.log(c[3] / e)))
    return min(configs, key=dist)


# A fused-MoE table's expert-parallel rows must split the work: a rank holding 1/ep of the experts does about 1/ep of
# one GPU's expert work at many tokens. At 8,192 tokens and more, the shipped tables' EP rows cost 0.12-0.71 of the
# same configuration's single-GPU rows (median over configurations, per dtype, routing and EP size 2-8: 846 medians),
# but for four tables' dtypes, 0.79-1.09 (36): a single GPU's time, as if each rank ran every expert. They are the
# A100's SGLang bf16 rows (SGLang 0.5.10), vLLM's A100 Marlin MXFP4 rows (borrowed from them), and the RTX PRO 6000's
# SGLang MXFP4 and TensorRT-LLM block-scaled FP8 rows (benchmarks/bench_moe.py `study_unsplit_ep_rows`). A dtype with
# a median at or above UNSPLIT_EP_RATIO, in that gap, is not priced from its EP rows: expert parallelism is then
# priced as tensor parallelism over as many GPUs, which prices the other tables' EP rows at a median 1.00x (mean |log
# error| 0.22, 52,620 points) held out (the same bench's `study_ep`).
UNSPLIT_EP_TOKENS = 8192
UNSPLIT_EP_RATIO = 0.75
_UNSPLIT_CACHE: dict[tuple, frozenset] = {}


def ep_to_single_gpu(rows: pd.DataFrame) -> dict[tuple[str, int], float]:
    """{(dtype, EP size): the median over configurations of the EP rows' (moe TP 1) time over the single-GPU rows' at
    the token counts of UNSPLIT_EP_TOKENS and more both measured} for one routing's fused-MoE rows."""
    if "moe_ep_size" not in rows.columns:
        return {}
    ratios: dict[tuple[str, int], list[float]] = {}
    big = rows[(rows["num_tokens"] >= UNSPLIT_EP_TOKENS) & (rows["moe_tp_size"] == 1)]
    for key, group in big.groupby(["dtype", *MOE_KEYS[:4]]):
        single = group[group["moe_ep_size"] == 1].set_index("num_tokens")["latency_ms"]
        for ep, split in group[group["moe_ep_size"] > 1].groupby("moe_ep_size"):
            ratio = (split.set_index("num_tokens")["latency_ms"] / single).dropna()
            if not ratio.empty:
                ratios.setdefault((str(key[0]), int(ep)), []).append(float(ratio.median()))
    return {k: float(np.median(v)) for k, v in ratios.items()}


def unsplit_dtypes(rows: pd.DataFrame) -> frozenset:
    """The dtypes of one routing's fused-MoE rows whose expert-parallel rows do not split the work (`ep_to_single_gpu`
    at least UNSPLIT_EP_RATIO at some EP size)."""
    return frozenset(d for (d, _), r in ep_to_single_gpu(rows).items() if r >= UNSPLIT_EP_RATIO)


def unsplit_ep_dtypes(tables: "MeasuredTables", routing: str, rows: pd.DataFrame) -> frozenset:
    """`unsplit_dtypes` of these rows (`routing`'s, of `tables`), once per table and routing: `MeasuredCostModel` does
    not price from their EP rows."""
    key = (str(tables.path), routing)
    if key not in _UNSPLIT_CACHE:
        _UNSPLIT_CACHE[key] = unsplit_dtypes(rows)
    return _UNSPLIT_CACHE[key]


def ep_rows_from_another_dtype(rows: pd.DataFrame, all_rows: pd.DataFrame,
                               config: tuple) -> tuple[pd.DataFrame, str, tuple] | None:
    """Fused-MoE rows for `config` (hidden, intermediate, top-k, experts, moe TP, moe EP), whose dtype (`rows`) holds no
    expert-parallel rows at its EP size: its own rows at tensor parallelism over as many GPUs, times another dtype's
    measured EP / TP ratio at each token count (`all_rows`: the nearest configuration at the same split whose TP rows
    are measured too; of its dtypes, the first by name), with that dtype and configuration. None where this dtype lacks
    the model at that TP or no other dtype has the split. Held out on every table's expert-parallel rows, each dtype's
    taken as missing (benchmarks/bench_moe.py `study_ep_without_dtype_rows`, 12-05): under skewed routing (power law
    1.01) a median predicted / measured of 1.01 and a mean |log error| of 0.21, where the same model's single-GPU rows
    split ep ways (the nearest split, the rule before) gave 0.82 and 0.33: one GPU's experts under a skewed router are
    not an even share of the work, and the ratio carries the busiest GPU's extra load the tables measured."""
    h, inter, k, e, tp, ep = config
    as_tp = (h, inter, k, e, tp * ep, 1)
    own_tp = rows[of_moe_config(rows, as_tp)]
    others = all_rows[~all_rows["dtype"].isin(set(rows["dtype"]))]
    others_ep = others[others["moe_ep_size"] == ep]
    if own_tp.empty or others_ep.empty:
        return None
    split = [tuple(int(v) for v in c) for c in others_ep[MOE_KEYS].drop_duplicates().itertuples(index=False)]
    with_tp = [c for c in split if c[4:] == config[4:] and of_moe_config(others, (*c[:4], c[4] * c[5], 1)).any()]
    if not with_tp:
        return None
    near = nearest_moe_config(others_ep[np.logical_or.reduce([of_moe_config(others_ep, c) for c in with_tp])], config)
    dtype = sorted(set(others_ep.loc[of_moe_config(others_ep, near), "dtype"]))[0]
    other = others[others["dtype"] == dtype]
    ratio = (other[of_moe_config(other, near)].set_index("num_tokens")["latency_ms"]
             / other[of_moe_config(other, (*near[:4], near[4] * near[5], 1))].set_index("num_tokens")["latency_ms"])
    times = (own_tp.set_index("num_tokens")["latency_ms"] * ratio).dropna()  # the token counts all three measured
    if times.empty:
        return None
    derived = own_tp.drop_duplicates("num_tokens").set_index("num_tokens").loc[times.index].reset_index()
    derived["moe_tp_size"], derived["moe_ep_size"], derived["latency_ms"] = tp, ep, times.to_numpy()
    return derived, dtype, near


def _moe_split(config: tuple) -> str:
    return f"tp {config[4]}" + (f" ep {config[5]}" if config[5] > 1 else "")


# How a fused-MoE configuration's rows are carried to another one (`carried_moe_curve`): each row's ratio to its
# roofline at the token count that gives the other configuration's touched experts as many tokens each
# (`roofline_kernel.expert_load`), where it was taken at the same token count before 12-03 18:13. Each configuration
# predicted from its nearest other one where their top-k or experts differ (benchmarks/bench_moe.py, every table, 7,818
# points): mean |log error| 0.132 against 0.162; per table better in all but vLLM's H200 (0.188 against 0.187); vLLM's
# A100 (its Marlin MXFP4 and bf16 rows) 0.047 against 0.108.
def tokens_at_expert_load(experts: float, experts_per_token: float, load: float) -> float:
    """The token count at which `expert_load` is `load` (it rises with the tokens: 1 at one token), by bisection."""
    lo, hi = 1e-9, 1e12
    for _ in range(100):  # past the precision of a double
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if expert_load(experts, experts_per_token, mid) < load else (lo, mid)
    return math.sqrt(lo * hi)


def carried_moe_curve(rows: pd.DataFrame, near: tuple, config: tuple, kind: int, rows_kind: int, roof: DeviceRoofline,
                      notes: Counter) -> Curve:
    """The fused-MoE curve of `config` (hidden, intermediate, top-k, experts, moe TP, moe EP) from the rows of
    `near` (itself where measured): each row's ratio to `near`'s roofline (`rows_kind`), at the token count that gives
    `config`'s touched experts as many tokens each as the row gave `near`'s, applied to `config`'s roofline (`kind`).
    Each roofline is one GPU's: its experts (count / ep), the experts a token routes to among them (top-k / ep, in
    expectation) and each expert's intermediate width (split by moe TP), at the layer's tokens."""
    near_e, near_k = near[3] / near[5], near[2] / near[5]
    measured = Shape(rows_kind, (near_e, near_k, near[0], near[1] / near[4]), roof)
    lr = [math.log(x * 1e-3 / measured(n)) for n, x in zip(rows["num_tokens"], rows["latency_ms"])]
    e, k = config[3] / config[5], config[2] / config[5]
    tokens = list(rows["num_tokens"])
    if (near_e, near_k) != (e, k):
        tokens = [tokens_at_expert_load(e, k, expert_load(near_e, near_k, n)) for n in tokens]
    return Curve(tokens, lr, Shape(kind, (e, k, config[0], config[1] // config[4]), roof), "fused MoE", notes)


# How decode attention measured at other heads is carried over (`decode_rows_for_heads`); against taking the nearest
# configuration's ratio to its roofline (the rule before 12-03 15:40), each configuration predicted from its nearest
# other one (benchmarks/bench_attention_heads.py): median |log error| where the KV heads or head size differ 0.026
# against 0.243 on the H100, 0.233 against 0.488 on the A100, 0.078 against 0.320 on the B200.
KV_BYTES_MATCH = "KV heads x head size"


def decode_rows_for_heads(rows: pd.DataFrame, hkv: int, d: int) -> pd.DataFrame:
    """Decode-attention rows of one measured head configuration, for a model with `hkv` KV heads of `d` each: each row
    at the context that reads the same KV bytes per sequence (kv_tokens x measured KV heads x head size / this
    model's), its time as measured; the rows themselves where the configuration is the model's."""
    _, mkv, md = _heads_shape(rows)
    if (mkv, md) == (hkv, d):
        return rows
    return rows.assign(kv_tokens=rows["kv_tokens"] * (mkv * md / (hkv * d)))


def _heads_shape(rows: pd.DataFrame) -> tuple[int, int, int]:
    r = rows.iloc[0]
    return int(r["num_heads"]), int(r["num_kv_heads"]), int(r["head_dim"])


# --- the cost model --------------------------------------------------------------------------------

@dataclass
class _Linear:
    curve: Curve
    experts: int
    active: float
    group_tokens: bool = False  # it runs a lockstep group's tokens (`GpuLinear.group_tokens`)


def moe_routing_of(model: ModelSpec, routing: str) -> str:
    """`cost_model.moe_routing`, with `auto` resolved as AIConfigurator 0.12.0's estimator resolves its default
    workload distribution ("power_law"): exponent 1.01 for its DeepSeek-family models (sdk/models/deepseek.py, the
    MLA models here), 1.2 for its generic mixture of experts (sdk/models/moe.py: Mixtral, Qwen3-MoE, ...). Real
    routers are skewed: fewer experts than balanced routing touch a small batch, and the busiest one gets more
    than its share of a large one."""
    if routing != "auto":
        return routing
    return "power_law_1.01" if model.attention == "mla" else "power_law_1.2"


class MeasuredCostModel(PackedCostModel):
    """Step times from GPU kernels measured by NVIDIA AIConfigurator (vLLM, SGLang or TensorRT-LLM: `tables`), summed
    per layer, each dtype from its own rows (`quantization_unmeasured` refuses the others).

    See the module docstring for what is priced from which table. A speculative verification (γ+1 query
    tokens per sequence) is priced as decode attention over batch × (γ+1) rows at the same context.
    """

    def __init__(self, model: ModelSpec, gpu: GPUSpec, *, tensor_parallel: int = 1, weight_dtype: str = "bf16",
                 kv_dtype: str = "bf16", engine: str = "vllm-cudagraph", step_overhead_s: float = 0.0,
                 gpu_data: str | None = None, root: Path | None = None, communication: bool = True,
                 tables: str = "vllm", fp8_compute: bool | None = None, fp8_block: bool = False,
                 expert_parallel: int = 1, moe_routing: str = "auto", moe_kernel: str | None = None,
                 all_reduce: str = CUSTOM_ALL_REDUCE, attention_backend: str | None = None,
                 expert_group: ExpertGroup | None = None):
        if engine not in ENGINES:
            raise ConfigError(f"cost_model.engine: {engine!r} is not allowed; allowed: {', '.join(ENGINES)}")
        data = tables_gpu(gpu_data or gpu, tables, root)
        reason = gpu_unmeasured(data, tables, root)
        if reason:
            raise ConfigError(f"cost_model: {reason}")
        reason = quantization_unmeasured(data, weight_dtype, kv_dtype, fp8_compute, tables, root, moe_kernel)
        if reason:
            raise ConfigError(reason)
        self.tables = load_tables(tables_dir(data, tables, root))
        self.model, self.gpu, self.tp, self.ep, self.engine = model, gpu, tensor_parallel, expert_parallel, engine
        # A lockstep rank's: how its group spreads the routed experts (None: over its own tensor-parallel GPUs;
        # `sim.model.shapes.gpu_linear`), the fused-MoE rows read at that split and its steps' experts priced at the
        # group's tokens (`StepPlan.num_expert_tokens`), exchanged over the catalog's interconnect
        self.expert_group = expert_group
        expert_gpus = expert_group.gpus if expert_group is not None else 0
        self.weight_dtype, self.kv_dtype = weight_dtype, kv_dtype
        self.step_overhead_s = step_overhead_s
        self.moe_routing = moe_routing_of(model, moe_routing)
        self.moe_kernel = moe_kernel  # the routed experts' kernel where the engine's is known (quantization.moe_kernel)
        self.all_reduce = all_reduce  # the engine's own all-reduce kernel, or NCCL's (hardware.all_reduce)
        if attention_backend not in (None, TRITON):
            raise ConfigError(f"attention.backend: {attention_backend!r} is not allowed; allowed: {TRITON!r}, or null")
        if attention_backend == TRITON and tables != "vllm":
            raise ConfigError(f"attention.backend: {TRITON!r} (vLLM's Triton backend) is priced from vLLM's tables "
                              f"only, not cost_model.tables {tables!r}; allowed: cost_model.tables 'vllm', or null")
        self.attention_backend = attention_backend  # the engine's attention backend where not the tables' own
        self.triton_priced = False  # True: context attention priced as FA2's rows x Triton / FA2
        self._data_dir = tables_dir(data, "vllm", root)  # the GPU's folder: NCCL's table is in it, for every framework
        self._measured_root = root
        self.moe_rows_routing: str | None = None  # the routing of the fused-MoE rows in use (None: none in use)
        # False prices one GPU's shard alone (no all-reduce), to compare with steps measured on one GPU.
        self.communication = communication
        self.notes: Counter = Counter()
        self.tables_gpu = data  # whose kernels the tables measured: this GPU's, or another part's (`tables_gpu`)
        if data != canonical_name(gpu.name):
            why = ("the same silicon, clocks and memory: hardware.gpu's kernels_as"
                   if gpu.kernels_as and canonical_name(gpu.kernels_as) == data else "cost_model.gpu_data")
            self.notes[f"kernels: the {data}'s tables price the {gpu.name}'s ({why})"] += 1
        for field, dtype in (("weights", weight_dtype), ("kv_cache", kv_dtype)):
            if dtype == "fp16":  # said, not silent: the tables hold no fp16 rows
                self.notes[f"{field} fp16 priced from the bf16 rows (same element size and tensor-core rate)"] += 1
        tp, t = tensor_parallel, self.tables
        self.roof = device_roofline(t.gemm)
        self.min_kernel_s = t.launch_floor_s
        self.roofline = RooflineCostModel(model, gpu, tensor_parallel=tp, weight_dtype=weight_dtype,
                                          kv_dtype=kv_dtype, fp8_compute=weight_dtype == "fp8",
                                          expert_parallel=expert_parallel, expert_group=expert_group)
        if expert_group is not None:  # said, not silent: no table of these collectives is read
            self.notes[f"moe: the experts over the group's {expert_gpus} GPUs, at its tokens; its exchange around each "
                       f"expert layer ({expert_group.exchange.replace('_', ' ')} over {expert_group.exchange_gpus} GPUs) "
                       "priced by the GPU catalog's interconnect"] += 1
        self.fp8_block = fp8_block
        gd = gemm_dtype(weight_dtype, fp8_block)
        if gd == "fp8_block" and gd not in t.gemm_dtypes:  # same fp8 products, per-tensor scales: said, not silent
            gd = "fp8"
            self.notes[f"gemm: no block-scaled fp8 rows in the {t.framework} tables of {t.meta['gpu']}; block-scaled "
                       "GEMMs priced from the per-tensor fp8 rows"] += 1
        if gd == "int4":  # the scale granularity the rows and the scenario may differ in: said, not silent
            self.notes[INT4_ROWS_NOTE] += 1
        self.gemm_rows = gd
        self._curves: dict[tuple[int, int, str], Curve] = {}  # (out features, in features, table dtype) -> curve

        def linear(in_f: int, out_f: int, name: str, dtype: str = gd) -> Curve:
            key = (out_f, in_f, dtype)
            if key not in self._curves:
                self._curves[key] = gemm_curve(t.gemm, dtype, out_f, in_f, self.roof, self.notes, f"gemm {name}",
                                               str(t.path))
            return self._curves[key]

        self._moe = self._moe_curve()
        self._groups = []
        self._linear_by_name: dict[str, Curve] = {}  # a layer's dense matrices' curves (the same in every group)
        dense_gpus = expert_group.dense_gpus if expert_group is not None else 0
        for n_layers, gpu_shapes in gpu_layer_groups(model, tp, expert_parallel, expert_gpus, dense_gpus):
            mats = []
            for g in gpu_shapes:
                if is_routed_expert(g.shape) and self._moe is not None:
                    continue  # the fused MoE table prices the layer's routed experts
                # a matrix the scheme keeps 16-bit (nvfp4's MoE router) from the bf16 rows
                rows = gd if matrix_dtype(g.shape, weight_dtype) == weight_dtype else "bf16"
                curve = linear(g.in_features, g.out_features, g.shape.name, rows)
                mats.append(_Linear(curve, g.count, g.active_per_token, g.group_tokens))
                if g.count == 1:
                    self._linear_by_name.setdefault(g.shape.name, curve)
            self._groups.append((n_layers, mats, any(is_routed_expert(g.shape) for g in gpu_shapes)))
        head = lm_head_shape(model)
        # The LM head stays 16-bit in fp8 deployments: vLLM's Fp8Config quantizes LinearBase layers only, and its
        # ParallelLMHead is an embedding (vllm/model_executor/layers/quantization/fp8.py: get_quant_method);
        # TensorRT-LLM's ModelOpt FP8 recipe leaves *lm_head* unquantized. So it is priced from the bf16 rows.
        self._lm_head = linear(head.in_features, head.out_features // tp, "lm_head", "bf16")
        self._setup_attention()
        self._allreduce = self._allreduce_curve() if tp > 1 else None
        h, ffn = model.hidden_size, model.ffn_size // tp
        self._elementwise_bytes = [4 * h * ACT_BYTES, 4 * h * ACT_BYTES, 3 * ffn * ACT_BYTES]  # 2 add+norm, act

    # -- setup --

    def _setup_attention(self) -> None:
        m, tp, t = self.model, self.tp, self.tables
        self.mla_by_roofline = False
        self._prefill = self._decode = self._window_prefill = self._window_decode = None  # (MLA by the roofline: none)
        if m.index_topk:
            self._setup_dsa()
            return
        if m.attention == "mla":
            if self._setup_mla():
                return
            self.mla_by_roofline = True
            heads = m.num_attention_heads // tp
            self.mla_flops_per_pair = 2.0 * heads * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim)
            self.mla_kv_bytes = self.roofline.kv_bytes_per_token_layer
            return
        hq = m.num_attention_heads // tp
        hkv = kv_heads_per_gpu(m, tp)
        d, kvd = m.head_dim, _KV_DTYPE[self.kv_dtype]
        kvb, roof = _DTYPE_BYTES[kvd], self.roof

        def prefill_shape(hq: int, hkv: int, d: int) -> Shape:
            return Shape(measured_kernel.SHAPE_PREFILL, (hq, hkv, d, kvb), roof)

        def decode_shape(hq: int, hkv: int, d: int) -> Shape:
            return Shape(measured_kernel.SHAPE_DECODE, (hq, hkv, d, kvb), roof)

        ctx = _select_heads(t.context[t.context["kv_dtype"] == kvd], hq, hkv, d, "context attention", self.notes)
        gen = _select_heads(t.generation[t.generation["kv_dtype"] == kvd], hq, hkv, d, "decode attention",
                            self.notes, f"at the context whose KV bytes per sequence match ({KV_BYTES_MATCH})")
        # Context attention: ratios are taken against the measured configuration's roofline and applied to this
        # model's. Decode attention reads the KV cache: another configuration's rows are taken at the context that
        # reads as many KV bytes per sequence (`decode_rows_for_heads`), which keeps a short context's launch-bound
        # time as measured, where a roofline ratio would scale it by the bytes.
        cq, ckv, cd = _heads_shape(ctx)
        ctx_grid = Grid2D(ctx, "batch_size", "isl", prefill_shape(cq, ckv, cd), "context attention (batch, tokens)",
                          self.notes)
        gen_grid = Grid2D(decode_rows_for_heads(gen, hkv, d), "batch_size", "kv_tokens", decode_shape(hq, hkv, d),
                          "decode attention (batch, context)", self.notes)
        ctx_grid.shape = prefill_shape(hq, hkv, d)
        self._prefill, self._decode = ctx_grid, gen_grid
        if self.attention_backend == TRITON:
            self._price_triton_prefill(ctx_grid, kvd)
        if m.sliding_window:
            self._setup_window(hq, hkv, d, kvd, kvb)

    def _setup_window(self, hq: int, hkv: int, d: int, kvd: str, kvb: float) -> None:
        """A sliding-window layer's attention from the tables' rows at the model's window, where they measured it at
        this KV dtype (`measured_kernel._layer_attention` with its window rows; heads as the full-attention rows pick
        them); else from the full-attention rows, the window capping the context (`_windowed_chunk`), said."""
        t, window = self.tables, self.model.sliding_window
        where = f"the {t.framework} tables of {t.meta['gpu']}"
        why = None
        if t.context_window is None or t.generation_window is None:
            why = f"{where} measured no sliding window"
        elif self.triton_priced:
            kernel = t.meta["tables"]["context_attention"]["kernels"][kvd]
            why = f"{where} measured the window with {kernel}, not Triton"
        else:
            ctx, gen = ((df[(df["window"] == window) & (df["kv_dtype"] == kvd)]) for df in (t.context_window,
                                                                                            t.generation_window))
            if ctx.empty or gen.empty:
                measured = sorted(set(t.context_window["window"]) & set(t.generation_window["window"]))
                why = (f"{where} measured windows of {', '.join(f'{w:,}' for w in measured)} tokens at "
                       f"{', '.join(sorted(set(t.context_window['kv_dtype'])))} KV, not {window:,} at {kvd}")
        if why is not None:
            self.notes[f"attention: a sliding-window layer priced from the full-attention rows, the window capping "
                       f"its context ({why}); a prefill chunk longer than the {window:,}-token window as a batch of "
                       "prompts two windows long, one per window, at their time per query-key pair (against "
                       "AIConfigurator's window rows where measured, medians by GPU: prefill 17-33% low, decode 1-21% "
                       "low, benchmarks/bench_window_attention.py)"] += 1
            return

        def shape(kind: int, hq: int, hkv: int, d: int) -> Shape:
            return Shape(kind, (hq, window, d, 2 * hkv * d * kvb), self.roof)

        ctx = _select_heads(ctx.drop(columns="window"), hq, hkv, d, "sliding-window context attention", self.notes)
        gen = _select_heads(gen.drop(columns="window"), hq, hkv, d, "sliding-window decode attention", self.notes)
        pf, dc = measured_kernel.SHAPE_WINDOW_PREFILL, measured_kernel.SHAPE_WINDOW_DECODE
        self._window_prefill = Grid2D(ctx, "batch_size", "isl", shape(pf, *_heads_shape(ctx)),
                                      "sliding-window context attention (batch, tokens)", self.notes)
        self._window_decode = Grid2D(gen, "batch_size", "kv_tokens", shape(dc, *_heads_shape(gen)),
                                     "sliding-window decode attention (batch, context)", self.notes)
        self._window_prefill.shape, self._window_decode.shape = shape(pf, hq, hkv, d), shape(dc, hq, hkv, d)
        kernels = t.meta["tables"]["context_window_attention"]["kernels"]
        self.notes[f"attention: sliding-window layers ({window:,} tokens) priced from the window rows of {where} "
                   f"({kernels[kvd]}, {kvd} KV)"] += 1

    def _price_triton_prefill(self, grid: Grid2D, kvd: str) -> None:
        """vLLM's Triton attention where the tables measured FlashAttention-2 only: each context-attention column
        (prompt length) times the Triton / FA2 ratio measured there on the GPUs that ran both (interpolated in log
        prompt length, held past their ends); decode attention stays FA2's (Triton's decode rows are fp8-KV, FA2's
        bf16-KV: their ratio is not the kernels'). Tables of another kernel price it with their own rows, said."""
        t = self.tables
        kernel = t.meta["tables"]["context_attention"].get("kernels", {}).get(kvd)
        if kernel == TRITON_ATTENTION:
            return
        capability = get_gpu(t.meta["gpu"]).compute_capability or (0, 0)
        if kernel != FA2_ATTENTION and not (kernel == VLLM_FLASH_ATTN and capability < FA3_SINCE):
            self.notes[f"attention.backend {TRITON}: the vLLM tables of {t.meta['gpu']} measured {kernel} at {kvd} "
                       "KV, not FlashAttention-2 (Triton's ratio was measured against FA2): its rows price Triton's "
                       "attention"] += 1
            return
        isl, log_ratio, data = triton_prefill_ratio(self._measured_root)
        at = np.interp(np.log(np.maximum(grid.ys, 1.0)), np.log(isl), log_ratio)
        grid.r = np.ascontiguousarray(grid.r + at[None, :])
        self.triton_priced = True
        ratio = np.exp(log_ratio)
        gpus = " and ".join(data["gpus"])
        versions = ", ".join(sorted({g["framework_version"] for g in data["gpus"].values()}))
        self.notes[f"attention.backend {TRITON}: context attention priced as {kernel}'s rows (FlashAttention-2) x "
                   f"vLLM's Triton / FA2 ratio by prompt length, {ratio.min():.2f}-{ratio.max():.2f}x "
                   f"({ratio[-1]:.2f}x at {isl[-1]:,.0f} tokens, held past), measured on {gpus} (vLLM {versions}; "
                   f"Triton's rows at fp8 KV, FA2's at bf16; the GPUs' log mean); decode attention from {kernel}'s "
                   "rows"] += 1

    def _setup_mla(self) -> bool:
        """MLA attention from the engine's MLA tables (vLLM's: its whole-module rows, `_vllm_mla_rows`): True if they
        price it; else a note says why not (the caller prices it by the device roofline)."""
        m, t, kvd = self.model, self.tables, _KV_DTYPE[self.kv_dtype]
        where = f"the {t.framework} tables of {t.meta['gpu']}"
        if t.framework == "vllm":
            found = self._vllm_mla_rows(where, kvd)
            if found is None:
                return False
            ctx, gen = found
        else:
            if t.context_mla is None or t.generation_mla is None:
                self.notes[f"attention: MLA is not in {where}; priced by the device roofline"] += 1
                return False
            ctx, gen = (df[df["kv_dtype"] == kvd] for df in (t.context_mla, t.generation_mla))
        if ctx.empty or gen.empty:
            self.notes[f"attention: MLA with a {kvd} KV cache is not in {where}; priced by the device roofline"] += 1
            return False
        heads, roof = m.num_attention_heads // self.tp, self.roof
        kvb = _DTYPE_BYTES[kvd]
        nope, rope, v, latent = MLA_MEASURED_DIMS

        def prefill_shape(h: int, qk: int, v_dim: int) -> Shape:
            return Shape(measured_kernel.SHAPE_MLA_PREFILL, (h, qk, v_dim, 0.0), roof)

        def decode_shape(h: int, lat: int, r: int) -> Shape:
            return Shape(measured_kernel.SHAPE_MLA_DECODE, (h, lat + r, lat, kvb), roof)

        measured = sorted(set(ctx["num_heads"]) & set(gen["num_heads"]))
        near = min(measured, key=lambda h: (abs(math.log(h / heads)), h))
        if near != heads:
            self.notes[f"MLA attention: {heads} heads per GPU not measured; nearest {near} scaled by the "
                       "roofline"] += 1
        dims = (m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim, m.kv_lora_rank)
        if dims != MLA_MEASURED_DIMS:
            self.notes[f"MLA attention: latent sizes (nope, rope, v, kv_lora) {dims} not measured; "
                       f"{MLA_MEASURED_DIMS} scaled by the roofline"] += 1
        self._prefill = Grid2D(ctx[ctx["num_heads"] == near], "batch_size", "isl",
                               prefill_shape(near, nope + rope, v), "MLA prefill attention (batch, tokens)",
                               self.notes)
        self._decode = Grid2D(gen[gen["num_heads"] == near], "batch_size", "kv_tokens",
                              decode_shape(near, latent, rope), "MLA decode attention (batch, context)", self.notes)
        self._prefill.shape = prefill_shape(heads, m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim)
        self._decode.shape = decode_shape(heads, m.kv_lora_rank, m.qk_rope_head_dim)
        return True

    def _vllm_mla_rows(self, where: str, kvd: str) -> tuple[pd.DataFrame, pd.DataFrame] | None:
        """vLLM's MLA attention as attention-alone rows: each whole-module row (AIConfigurator's, under CUDA graphs)
        less this model's own prices of the module's projections (`MLA_MODULE_PROJECTIONS`, from the GEMM rows) at
        the module's tokens (decode: the batch; context: batch x prompt tokens). What is left is the attention kernel
        with its norms, rotary embedding and cache write, and the projections' measured time beyond this model's
        price of them; a step's MLA block then costs the module's measured time at every measured point. None (a note
        says why) where the tables or the model's sizes do not allow it."""
        m, t = self.model, self.tables
        if t.context_mla_module is None or t.generation_mla_module is None:
            self.notes[f"attention: MLA is not in {where}; priced by the device roofline"] += 1
            return None
        dims = (m.hidden_size, m.q_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim, m.kv_lora_rank)
        if dims != MLA_MODULE_DIMS:
            self.notes[f"attention: vLLM's MLA modules in {where} were measured at DeepSeek-V3's sizes (hidden, "
                       f"q_lora, nope, rope, v, kv_lora) {MLA_MODULE_DIMS}, not {dims}; priced by the device "
                       "roofline"] += 1
            return None
        gd, heads = gemm_dtype(self.weight_dtype, self.fp8_block), m.num_attention_heads // self.tp
        rows = [df[(df["kv_dtype"] == kvd) & (df["gemm_dtype"] == gd) & (df["num_heads"] == heads)]
                for df in (t.context_mla_module, t.generation_mla_module)]
        if any(r.empty for r in rows):
            self.notes[f"attention: vLLM's MLA modules with {heads} heads per GPU, {gd} projections and a {kvd} KV "
                       f"cache are not in {where}; priced by the device roofline"] += 1
            return None
        derived, disagree = self._less_projections(rows, MLA_MODULE_PROJECTIONS)
        if disagree:  # the GEMM rows price the projections above the whole module: neither is taken over the other
            self.notes[f"attention: {disagree} of vLLM's {len(rows[0]) + len(rows[1])} MLA module rows in {where} "
                       f"({gd} projections, {heads} heads, {kvd} KV) measured at or below this model's price of their "
                       "projections (the GEMM rows and the modules disagree); priced by the device roofline"] += 1
            return None
        kernels = [t.meta["tables"][f"{phase}_mla_module"]["kernels"][kvd][gd] for phase in ("generation", "context")]
        self.notes[f"attention: vLLM's MLA (decode {kernels[0]}, prefill {kernels[1]}) from its whole-module rows in "
                   f"{where} (projections, attention, norms, rotary, cache write; {gd} projections) less this model's "
                   "prices of the projections"] += 1
        return derived[0], derived[1]

    def _setup_dsa(self) -> None:
        """DeepSeek sparse attention from the engine's whole-module rows (`_dsa_rows`), their ratios taken against
        `measured_kernel.SHAPE_DSA_*` with this model's numbers: the roofline's attention FLOPs a selected pair (its
        heads padded as FlashMLA's sparse kernel runs them), the top-k, the indexer's FLOPs a pair at the bf16 rate,
        the latent's bytes a key. No other kernel here prices the indexer: tables that cannot are refused in one
        line."""
        m, t, kvd = self.model, self.tables, _KV_DTYPE[self.kv_dtype]
        r, where = self.roofline, f"the {t.framework} tables of {t.meta['gpu']}"
        if t.context_dsa_module is None or t.generation_dsa_module is None:
            raise SparseAttentionUnmeasured(f"{m.name}'s sparse attention (index_topk {m.index_topk}), which is not "
                                            f"in {where} (vLLM's and SGLang's DSA module rows where measured)")
        rows = self._dsa_rows(where, kvd)
        numbers = (r.attn_flops_per_pair, float(m.index_topk), r.index_flops_per_pair / r.index_speedup,
                   r.kv_bytes_per_token_layer)
        self._prefill = Grid2D(rows[0], "batch_size", "isl",
                               Shape(measured_kernel.SHAPE_DSA_PREFILL, numbers, self.roof),
                               "sparse attention prefill (batch, tokens)", self.notes)
        self._decode = Grid2D(rows[1], "batch_size", "kv_tokens",
                              Shape(measured_kernel.SHAPE_DSA_DECODE, numbers, self.roof),
                              "sparse attention decode (batch, context)", self.notes)

    def _dsa_rows(self, where: str, kvd: str) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The engine's DeepSeek sparse attention as attention-alone rows, as `_vllm_mla_rows` derives MLA's: each
        whole-module row less this model's prices of the projections inside it (`DSA_MODULE_PROJECTIONS`) at the
        module's tokens, so a step's attention block costs the module's measured time (SGLang's: and the fused q_a /
        kv_a projection it was timed without) at every measured point. What is left
        is the indexer's logits and top-k, the sparse kernel, the absorbed BMMs, the norms, rotary and cache writes,
        and the projections' measured time beyond this model's price of them. Refused in one line where the sizes,
        heads or dtypes were not measured, or the modules measured at or below their projections' price."""
        m, t = self.model, self.tables
        dims = (m.hidden_size, m.q_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim, m.kv_lora_rank,
                m.index_topk, m.index_n_heads, m.index_head_dim)
        gd, heads = gemm_dtype(self.weight_dtype, self.fp8_block), attention_heads_per_gpu(m, self.tp)
        sparse = f"{m.name}'s sparse attention (index_topk {m.index_topk})"
        if dims != DSA_MODULE_DIMS:
            raise SparseAttentionUnmeasured(f"{sparse}: the DSA modules in {where} were measured at "
                                            "DeepSeek-V3.2's sizes (hidden, q_lora, nope, rope, v, kv_lora, topk, "
                                            f"index heads, index dim) {DSA_MODULE_DIMS}, not {dims}")
        rows = [df[(df["kv_dtype"] == kvd) & (df["gemm_dtype"] == gd) & (df["num_heads"] == heads)]
                for df in (t.context_dsa_module, t.generation_dsa_module)]
        if any(r.empty for r in rows):
            raise SparseAttentionUnmeasured(f"{sparse} with {heads} heads per GPU, {gd} projections and a {kvd} KV "
                                            f"cache: not in the DSA modules in {where}")
        derived, disagree = self._less_projections(rows, DSA_MODULE_PROJECTIONS[t.framework])
        if disagree:  # no attention left to derive: neither the GEMM rows nor the modules are taken over the other
            raise SparseAttentionUnmeasured(f"{sparse}: {disagree} of the {len(rows[0]) + len(rows[1])} DSA "
                                            f"module rows in {where} ({gd} projections, {heads} heads, {kvd} KV) "
                                            "measured at or below this model's price of their projections")
        kernel = t.meta["tables"]["context_dsa_module"]["kernels"][kvd][gd]
        floor_ms = float(rows[0]["latency_ms"].min())
        self.notes[f"attention: DeepSeek sparse attention ({kernel}) from the whole-module rows in {where} "
                   f"(projections, indexer, sparse MLA, norms, rotary, cache write; {gd} projections) less this "
                   f"model's prices of the projections; the prefill modules were timed eagerly, {floor_ms:.2f} ms "
                   "a layer at the least, kept as measured"] += 1
        return derived[0], derived[1]

    def _less_projections(self, rows: list[pd.DataFrame], names: tuple[str, ...]) -> tuple[list, int]:
        """Whole-module rows (context, decode) less this model's prices of the named projections at each row's tokens
        (context: batch x prompt tokens; decode: the batch), and how many rows that leaves at or below zero."""
        curves = [self._linear_by_name[name] for name in names]
        derived, disagree = [], 0
        for df, tokens in ((rows[0], rows[0]["batch_size"] * rows[0]["isl"]), (rows[1], rows[1]["batch_size"])):
            counts, at = np.unique(tokens.to_numpy(float), return_inverse=True)  # each token count priced once
            projections_ms = np.array([sum(c(n, note=False) for c in curves) for n in counts])[at] * 1e3
            rest = df["latency_ms"].to_numpy(float) - projections_ms
            disagree += int((rest <= 0).sum())
            derived.append(df.assign(latency_ms=rest))
        return derived, disagree

    def _experts_from_gemm_rows(self, gd: str) -> None:
        """No fused-MoE curve: the routed experts are priced from the `gd` GEMM rows as one fused kernel (said)."""
        self.notes[f"moe: no {gd} fused-MoE table for this setup; experts priced from the {gd} GEMM rows as one fused "
                   "kernel"] += 1

    def _moe_curve(self) -> Curve | None:
        m, t = self.model, self.tables
        if not m.is_moe:
            return None
        gd = moe_dtype(self.weight_dtype, self.fp8_block)
        if gd in WEIGHT_ONLY_INT:  # no fused-MoE row measured these dtypes
            return self._experts_from_gemm_rows(gd)
        all_rows, routing = t.moe_rows(self.moe_routing)
        if all_rows is not None and routing != self.moe_routing:
            self.notes[f"moe: no {self.moe_routing} routing in these tables; their {routing} rows"] += 1
        elif routing != "balanced":
            self.notes[f"moe: {routing} routing"] += 1
        moe = None if all_rows is None else all_rows[all_rows["dtype"] == gd]
        if gd == MXFP4 and self.moe_kernel == MARLIN and all_rows is not None:
            moe = self._marlin_mxfp4_rows(all_rows, moe)
        # The roofline this model's experts take (kind) and the one the rows' ratios are taken against (rows_kind).
        kind = rows_kind = {"bf16": measured_kernel.SHAPE_MOE, MXFP4: measured_kernel.SHAPE_MOE_MXFP4,
                            "nvfp4": measured_kernel.SHAPE_MOE_NVFP4}.get(gd, measured_kernel.SHAPE_MOE_FP8)
        if gd == MXFP4 and (moe is None or moe.empty or not m.gated_mlp):  # never from another dtype's rows
            raise ConfigError(f"quantization.weights: 'mxfp4' is not measured in the {t.framework} tables of "
                              f"{t.meta['gpu']} for {m.name} (no MXFP4 fused-MoE rows under {routing} routing for "
                              "its gated experts); allowed: cost_model.unmeasured_dtype: roofline")
        if (moe is None or moe.empty) and gd != "bf16" and all_rows is not None and m.gated_mlp:
            # No FP8 fused-MoE rows: the bf16 rows' ratio to their roofline, applied to this model's FP8 roofline.
            # Held out on the tables that hold both dtypes (TensorRT-LLM's H100, H200 and B200, 7,452 points), this
            # gives a median predicted / measured of 0.86 and a mean |log error| of 0.27, where the FP8 expert GEMMs
            # in one fused launch gave 4.77 and 1.68 (benchmarks/bench_moe.py, 11-29).
            moe, rows_kind = all_rows[all_rows["dtype"] == "bf16"], measured_kernel.SHAPE_MOE
            self.notes[f"moe: no {gd} fused-MoE rows; the bf16 fused-MoE rows' ratio to their roofline, applied to "
                       f"the {'fp8' if gd.startswith('fp8') else gd} roofline"] += 1
        if moe is None or moe.empty or not m.gated_mlp:
            return self._experts_from_gemm_rows(gd)
        if "moe_ep_size" not in moe.columns:  # tables imported before expert-parallel rows were kept
            moe = moe.assign(moe_ep_size=1)
        ep, split = self.ep, self.expert_group.gpus if self.expert_group is not None else self.tp
        row_dtype = str(moe["dtype"].iloc[0])
        if ep > 1 and row_dtype in unsplit_ep_dtypes(t, routing, all_rows):
            moe, ep = moe[moe["moe_ep_size"] == 1], 1
            self.notes[f"moe: the {t.framework} tables' expert-parallel {row_dtype} rows of {t.meta['gpu']} cost a "
                       "rank about a single GPU's time at many tokens (they do not split the work: "
                       f"sim/cost/measured.py UNSPLIT_EP_RATIO); expert parallelism {self.ep} priced as tensor "
                       f"parallelism over {split} GPUs"] += 1
        config = (m.hidden_size, m.ffn_size, m.num_experts_per_token, m.num_experts, split // ep, ep)
        if ep > 1 and not (moe["moe_ep_size"] == ep).any() and "moe_ep_size" in all_rows.columns:
            derived = ep_rows_from_another_dtype(moe, all_rows, config)
            if derived is not None:
                moe, dtype, near = derived
                self.notes[f"moe: no expert-parallel {gd} rows at ep {ep}; this model's tp {split} rows times the "
                           f"{dtype} rows' EP / TP ratio of ({near[0]}, {near[1]}, top{near[2]} of {near[3]}, "
                           f"{_moe_split(near)} against tp {near[4] * near[5]})"] += 1
        near = nearest_moe_config(moe, config)
        if near != config:
            self.notes[f"moe: ({m.hidden_size}, {m.ffn_size}, top{m.num_experts_per_token} of {m.num_experts}, "
                       f"{_moe_split(config)}) not in the fused-MoE table; nearest measured ({near[0]}, {near[1]}, "
                       f"top{near[2]} of {near[3]}, {_moe_split(near)}) scaled by the roofline, at as many tokens per "
                       "touched expert"] += 1
        rows = moe[of_moe_config(moe, near)]
        # Ratios are taken against the measured configuration's roofline and applied to this model's (as for
        # attention heads; `carried_moe_curve`): held out one configuration at a time, every shipped table's 115,063
        # fused-MoE times at a median ratio of 0.98 and a mean |log error| of 0.16, where pricing each expert as its
        # own GEMM launch gave 2.75 and 1.24; their 55,510 expert-parallel times from the nearest configuration at
        # the same split 1.00 and 0.16, where pricing EP as TP over as many GPUs gave 1.00 and 0.24
        # (benchmarks/bench_moe.py, 12-03 18:15).
        self.moe_rows_routing = routing
        return carried_moe_curve(rows, near, config, kind, rows_kind, self.roof, self.notes)

    def _marlin_mxfp4_rows(self, all_rows: pd.DataFrame, main: pd.DataFrame) -> pd.DataFrame:
        """The MXFP4 fused-MoE rows of Marlin's kernel, which the engine runs (`quantization.moe_kernel: marlin`):
        the tables' own MXFP4 rows where Marlin is their main kernel, else their Marlin rows (MXFP4_MARLIN); where
        they hold none, their main kernel's, said."""
        t = self.tables
        main_kernel = str(t.meta["tables"].get("moe", {}).get("kernels", {}).get(MXFP4, ""))
        if MARLIN in main_kernel:
            return main
        marlin = all_rows[all_rows["dtype"] == MXFP4_MARLIN]
        if marlin.empty:
            self.notes[f"moe: Marlin's MXFP4 kernel is not in the {t.framework} tables of {t.meta['gpu']}; their "
                       f"{main_kernel or 'MXFP4'} rows price it"] += 1
            return main
        lent = t.meta["tables"].get("moe", {}).get("borrowed", {}).get(MXFP4_MARLIN)
        if lent:  # another engine's Marlin rows, where this one's were not measured (calibrate/aic_import.py)
            self.notes[f"moe: MXFP4 experts from {lent['framework']} {lent['framework_version']}'s Marlin fused-MoE "
                       f"rows ({lent['kernel']}, {lent['moe_dtype']} weights: the same kernel family; "
                       f"{t.framework}'s own Marlin MXFP4 kernel was not measured on {t.meta['gpu']}; "
                       "quantization.moe_kernel: marlin)"] += 1
        else:
            self.notes["moe: MXFP4 experts from the Marlin kernel's rows (quantization.moe_kernel: marlin)"] += 1
        return marlin

    def _allreduce_rows(self) -> pd.DataFrame | None:
        """The measured all-reduce rows of this engine's kernel (`engine`: under CUDA graphs or eager) or of NCCL's
        (`all_reduce` nccl, the GPU's nccl/ table), None without a table (the catalog's interconnect then prices it)."""
        t = self.tables
        if self.all_reduce == NCCL_ALL_REDUCE:
            ar, meta = nccl_allreduce(self._data_dir)
            self.notes[f"all-reduce: NCCL's, measured at NCCL {meta['nccl_version']} (hardware.all_reduce nccl)"] += 1
            return ar
        if t.allreduce is None:
            self.notes["all-reduce: no measured table; priced by the GPU catalog's interconnect"] += 1
            return None
        backend = "graph" if self.engine == "vllm-cudagraph" else "eager"
        ar = t.allreduce[t.allreduce["backend"] == backend]
        if ar.empty:  # TensorRT-LLM's table has one curve, under CUDA graphs
            have = sorted(set(t.allreduce["backend"]))
            allowed = ", ".join(e for e in ENGINES if ("graph" if e == "vllm-cudagraph" else "eager") in have)
            raise ConfigError(f"cost_model.engine: {self.engine!r} has no {backend} all-reduce in the "
                              f"{t.framework} tables of {self.tables.meta['gpu']}; allowed: {allowed}")
        return ar

    def _on_own_links(self, ar: pd.DataFrame) -> pd.DataFrame:
        """All-reduce rows measured on another part's links (`tables_gpu`) for this GPU: where that part is its twin
        (`GPUSpec.kernels_as`: the same silicon, slower links), stretched by the ratio of the two catalog link rates
        (`allreduce_on_links`); another silicon's (`cost_model.gpu_data`) as measured, said, since across silicon the
        link ratio alone does not carry them (benchmarks/bench_link_stretch.py); unchanged where the links are alike."""
        measured_on = GPUS.get(self.tables_gpu)
        own = self.gpu.interconnect_bytes_per_s
        if measured_on is None or measured_on.interconnect_bytes_per_s == own:
            return ar
        rates = f"{own / 1e9:g} against {measured_on.interconnect_bytes_per_s / 1e9:g} GB/s a direction, the catalog's"
        if not (self.gpu.kernels_as and canonical_name(self.gpu.kernels_as) == self.tables_gpu):
            self.notes[f"all-reduce: the {self.tables_gpu}'s measured rows as they ran on its own links, not priced "
                       f"for the {self.gpu.name}'s ({rates})"] += 1
            return ar
        stretch = measured_on.interconnect_bytes_per_s / own
        self.notes[f"all-reduce: the {self.tables_gpu}'s measured rows, their time past each GPU count's fastest "
                   f"row scaled {stretch:.3g}x for the {self.gpu.name}'s links ({rates})"] += 1
        return allreduce_on_links(ar, stretch)

    def _allreduce_curve(self) -> Curve | None:
        """The time of one all-reduce by the elements it reduces (a step's tokens × hidden size)."""
        tp = self.tp
        ar = self._allreduce_rows()
        if ar is None:
            return None
        ar = self._on_own_links(ar)
        counts = sorted(set(ar["num_gpus"]))
        i, w, outside = _bracket([math.log(c) for c in counts], math.log(tp))
        if outside:  # the nearest measured count's ratios to the ring shape, held at tp (a GPU count past them)
            near = counts[min(i + 1, len(counts) - 1)] if w >= 1.0 else counts[i]
            self.notes[f"all-reduce: {tp} GPUs not measured (measured {counts}); the {near}-GPU rows' ratio to the "
                       f"ring all-reduce's shape, held at {tp} GPUs"] += 1
        elif w not in (0.0, 1.0):
            self.notes[f"all-reduce: {tp} GPUs not measured (measured {counts}); interpolated in log GPUs"] += 1
        lat0 = float(ar["latency_ms"].min()) * 1e-3
        busbw = max(2 * (g - 1) / g * e * 2 / (x * 1e-3) for g, e, x in
                    zip(ar["num_gpus"], ar["message_elements"], ar["latency_ms"]))

        def shape_g(g: float) -> Shape:
            return Shape(measured_kernel.SHAPE_ALLREDUCE, (lat0, g, busbw, 0.0), self.roof)
        parts = []
        for g, wt in ((counts[i], 1 - w), (counts[min(i + 1, len(counts) - 1)], w)):
            if wt <= 0:
                continue
            rows = ar[ar["num_gpus"] == g]
            sh = shape_g(g)
            lr = [math.log(x * 1e-3 / sh(e)) for e, x in zip(rows["message_elements"], rows["latency_ms"])]
            parts.append((wt, Curve(list(rows["message_elements"]), lr, sh, "all-reduce", Counter())))
        xs = sorted({x for _, c in parts for x in c.xs})
        lr = [sum(wt * math.log(c(x) / c.shape(x)) for wt, c in parts) for x in xs]
        return Curve(xs, lr, shape_g(tp), f"all-reduce x{tp} elements", self.notes)

    # -- pricing --

    @property
    def source(self) -> str:
        """The tables and the rows of them this model prices from: package, system, framework and version, the GEMM
        dtype, the KV dtype of the attention rows and the dtype that attention computes in."""
        t, kvd = self.tables, _KV_DTYPE[self.kv_dtype]
        if self.model.attention != "mla":
            attention = f"attention {kvd}-KV rows computed in {t.attention_dtype(kvd)}" + (
                " (context x Triton / FA2)" if self.triton_priced else "")
        # (the MLA tables hold bf16 computation only: calibrate/aic_import.py keeps mla_dtype bfloat16)
        elif self.model.index_topk:
            attention = f"sparse attention {kvd}-KV rows (whole modules less their projections)"
        elif self.mla_by_roofline:
            attention = "MLA attention by the device roofline"
        else:
            attention = f"MLA attention {kvd}-KV rows computed in bf16" + (
                " (whole modules less their projections)" if t.framework == "vllm" else "")
        return f"{t.source}: gemm {self.gemm_rows} rows, {attention}"

    def __repr__(self) -> str:
        notes = "; ".join(f"{n}" + (f" (x{c})" if c > 1 else "") for n, c in sorted(self.notes.items()))
        ep = f" ep{self.ep}" if self.ep > 1 else ""
        if self.expert_group is not None:
            ep += f", experts over {self.expert_group.gpus} GPUs"
        return (f"MeasuredCostModel({self.model.name} on {self.gpu.name} x{self.tp}{ep}, {self.engine}, "
                + (f"all-reduce {self.all_reduce}, " if self.all_reduce != CUSTOM_ALL_REDUCE else "") +
                f"weights={self.weight_dtype}, kv={self.kv_dtype}, kernels: {self.source} "
                f"({self.tables.meta['device_name']}), step overhead {self.step_overhead_s * 1e3:g} ms"
                + (f"; notes: {notes}" if notes else "") + ")")

    # The step's arithmetic is `measured_kernel`'s; a pack holds the model's curves and grids for it.
    PYTHON_NOTE_ROWS = 4096  # the note log `step_cost` reads after every call (more than one step can note)

    def _build_pack(self) -> tuple:
        """(the roofline's pack, for the FLOPs and bytes; this model's, for the compiled core; the same with a note
        log of its own, for `step_cost`). Their curves, in row order, name the points the logs hold."""
        measured, self._pack_curves = measured_kernel.pack(self)
        return self.roofline._pack(), measured, measured_kernel.with_note_log(measured, self.PYTHON_NOTE_ROWS)

    def _read_notes(self, measured: tuple) -> bool:
        """Note the points in a pack's note log and empty it. True: it was full (a price may be NaN: again)."""
        log, count = measured[-2], measured[-1]
        if not count[0]:
            return False
        self.note_compiled_outside(log[:count[0]])
        full = count[0] == len(log)
        count[0] = 0
        return full

    def step_cost(self, plan: StepPlan) -> StepCost:
        roofline, _, measured = self._pack()
        args = step_args(plan)
        for _ in range(2):
            cost = compiled_pricing.price_parts(KIND_MEASURED, roofline, None, measured, *args)
            if not self._read_notes(measured):
                return StepCost(*cost)
        raise RuntimeError(f"one step notes more points outside the tables than the note log holds: {plan}")

    def step_time(self, plan: StepPlan) -> float:
        return self.step_cost(plan).time_s

    def decode_step_costs(self, num_seqs: int, context_tokens: int, num_steps: int) -> list[StepCost]:
        """Costs of a run of decode-only steps (`sim.core.step_plan.decode_step_costs`): `step_cost` of each, in
        as few calls as the note log allows."""
        roofline, _, measured = self._pack()
        parts = []
        while num_steps > 0:
            rows = compiled_pricing.decode_run(KIND_MEASURED, roofline, None, measured, num_seqs, context_tokens,
                                               num_steps)
            if self._read_notes(measured) and not len(rows):  # (a full log stops a run before its NaN step)
                raise RuntimeError("one decode step notes more points outside the tables than the note log holds")
            parts.append(rows)
            context_tokens += len(rows) * num_seqs
            num_steps -= len(rows)
        return step_costs(np.concatenate(parts) if len(parts) > 1 else parts[0])

    def compiled_params(self) -> tuple | None:
        """This model's pack for the compiled engine core (`sim.compiled`), through `sim.cost.compiled_pricing`,
        with an empty note log (the core's run reads it after itself, `note_compiled_outside`); None for a
        subclass (it may price otherwise), or without numba."""
        if type(self) is not MeasuredCostModel or not HAVE_NUMBA:
            return None
        roofline, measured, _ = self._pack()
        measured[-1][0] = 0
        return compiled_pricing.pricer(roofline, measured_params=measured)

    def note_lines(self, steps=None) -> tuple[str, ...]:
        """What this model approximated so far, one line each (`note_lines`; `steps` unused: its notes gain the
        points past the tables as it prices them)."""
        return note_lines(self.notes)

    def note_compiled_outside(self, points) -> None:
        """Note the points priced outside the tables (rows of a `measured_kernel` note log: kind, curve row, x,
        y), each once."""
        from sim.cost.measured_kernel import (NOTE_CURVE, NOTE_DECODE, NOTE_PREFILL, NOTE_WINDOW_DECODE,
                                              NOTE_WINDOW_PREFILL)
        curves = self._pack_curves
        grids = {NOTE_PREFILL: self._prefill, NOTE_DECODE: self._decode, NOTE_WINDOW_PREFILL: self._window_prefill,
                 NOTE_WINDOW_DECODE: self._window_decode}
        for kind, row, x, y in sorted(set(map(tuple, points.tolist()))):
            if kind == NOTE_CURVE:
                message = curves[int(row)].outside_note(x)
            else:
                message = grids[int(kind)].outside_note(x, y)
            note_outside(self.notes, message)


class MeasuredFallback(RooflineCostModel):
    """`cost_model: {kind: measured}` on a setup without measured tables: the roofline, and its repr says why."""

    PRICES_AS_ROOFLINE = True  # only the repr differs: the roofline's compiled form prices it (compiled_params)

    def __init__(self, *args, reason: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.reason = reason

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}; measured kernels unavailable: {self.reason})"


def measured_refusal(gpu: str, weight_dtype: str, kv_dtype: str, fp8_compute: bool, tables: str, on_missing: str,
                     unmeasured_dtype: str, root: Path | None = None,
                     moe_kernel: str | None = None) -> tuple[str | None, str | None]:
    """(why the measured model cannot price this setup, None where it can; the one-line error it then stops with,
    None where it falls back to the roofline instead): `on_missing` decides for a GPU without tables of this
    framework, `unmeasured_dtype` for a quantization the tables were not measured in. `make_measured_cost_model`
    acts on it; the dashboard says it before a run."""
    reason = gpu_unmeasured(gpu, tables, root)
    if reason is not None:
        return reason, (f"cost_model: {reason}" if on_missing == "error" else None)
    reason = quantization_unmeasured(gpu, weight_dtype, kv_dtype, fp8_compute, tables, root, moe_kernel)
    return reason, (reason if reason is not None and unmeasured_dtype != "roofline" else None)


def make_measured_cost_model(model: ModelSpec, gpu: GPUSpec, *, tensor_parallel: int = 1, weight_dtype: str = "bf16",
                             kv_dtype: str = "bf16", fp8_compute: bool = False, engine: str = "vllm-cudagraph",
                             step_overhead_s: float = 0.0, gpu_data: str | None = None,
                             on_missing: str = "roofline", root: Path | None = None, tables: str = "vllm",
                             unmeasured_dtype: str = "error", fp8_block: bool = False, expert_parallel: int = 1,
                             moe_routing: str = "auto", moe_kernel: str | None = None,
                             all_reduce: str = CUSTOM_ALL_REDUCE, attention_backend: str | None = None,
                             expert_group: ExpertGroup | None = None):
    """The measured cost model. A GPU without tables of this framework: the roofline whose repr says why
    (on_missing 'roofline'), or a one-line ConfigError (on_missing 'error'). A quantization the tables were not
    measured in: a one-line ConfigError naming the field (unmeasured_dtype 'error', the default), or the roofline
    whose repr says why (unmeasured_dtype 'roofline', asked for)."""
    reason, refusal = measured_refusal(gpu_data or tables_gpu(gpu, tables, root), weight_dtype, kv_dtype, fp8_compute,
                                       tables, on_missing, unmeasured_dtype, root, moe_kernel)
    if reason is None:
        return MeasuredCostModel(model, gpu, tensor_parallel=tensor_parallel, weight_dtype=weight_dtype,
                                 kv_dtype=kv_dtype, engine=engine, step_overhead_s=step_overhead_s,
                                 gpu_data=gpu_data, root=root, tables=tables, fp8_compute=fp8_compute,
                                 fp8_block=fp8_block, expert_parallel=expert_parallel, moe_routing=moe_routing,
                                 moe_kernel=moe_kernel, all_reduce=all_reduce, attention_backend=attention_backend,
                                 expert_group=expert_group)
    if refusal is not None:
        raise ConfigError(refusal)
    return MeasuredFallback(model, gpu, tensor_parallel=tensor_parallel, weight_dtype=weight_dtype,
                            kv_dtype=kv_dtype, fp8_compute=fp8_compute, reason=reason, expert_parallel=expert_parallel,
                            expert_group=expert_group)
