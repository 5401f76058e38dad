"""A cost model from kernels measured on real GPUs: NVIDIA AIConfigurator's vLLM tables (issue 12).

`python -m calibrate.aic_import` turns `aiconfigurator-core`'s Parquet tables into compact per-GPU tables
under calibrate/measured/<gpu>/ (GEMMs, context and generation attention, vLLM's custom all-reduce, fused
MoE; meta.json names the source package, framework, versions and kernels). This module reads them with
pandas only: simulating never needs aiconfigurator-core or torch.

A step is priced the way vLLM runs it, per layer: every linear layer at its per-GPU shard shape (GEMM
table at m = the step's tokens), the fused MoE experts (MoE table; else expert GEMMs), prefill attention
per chunk, decode attention for the batch at its mean context, two all-reduces of the step's hidden
states under tensor parallelism, and the norms/activation/rotary streams; then the LM head for the
sampled rows. Between measured shapes a time is interpolated in log space, like sim/cost/calibrated.py:
log(measured / roofline) bilinear on log axes, where the roofline is the device's own (the fastest FLOP
rate and byte rate any measured GEMM reached). Outside the grid that ratio is held at the nearest edge,
so a time follows the roofline's shape; every such extrapolation is listed in `notes` and the repr, each
point once (`note_outside`). Grid points are reproduced exactly.

What the tables do not hold: elementwise ops (priced at the GEMM table's byte rate, at least the
fastest measured kernel), MLA attention (the device roofline), swap copies (the host link), and
the engine's CPU time per step (`step_overhead_s`, default 0: AIConfigurator's estimator, a pure
kernel sum, is within ~6% median of whole CUDA-graphed steps measured on an H100).
"""

from __future__ import annotations

import json
import math
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sim.core.step_plan import StepPlan
from sim.cost.roofline import RooflineCostModel, StepCost
from sim.errors import ConfigError
from sim.model.memory import kv_bytes_per_token
from sim.model.shapes import layer_groups, lm_head_shape
from sim.model.specs import GPUSpec, ModelSpec

# Shipped tables: calibrate/measured/<gpu>/ (written by `python -m calibrate.aic_import`).
MEASURED_DIR = Path(__file__).resolve().parents[2] / "calibrate" / "measured"
MEASURED_FORMAT_VERSION = 1
ENGINES = ("vllm-cudagraph", "vllm-eager")  # which all-reduce curve: under CUDA graphs or eager
_GEMM_DTYPE = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8"}  # scenario weights -> table dtype
_KV_DTYPE = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8"}
_DTYPE_BYTES = {"bf16": 2, "fp8": 1}
_ACT_BYTES = 2


def _canonical(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def measured_gpus(root: Path | None = None) -> list[str]:
    """GPUs with shipped measured tables."""
    root = root or MEASURED_DIR
    return sorted(p.parent.name for p in root.glob("*/meta.json")) if root.is_dir() else []


def measured_unsupported(gpu: str, weight_dtype: str = "bf16", kv_dtype: str = "bf16",
                         root: Path | None = None) -> str | None:
    """Why the measured cost model cannot price this setup (None if it can): one line."""
    root = root or MEASURED_DIR
    gpus = measured_gpus(root)
    name = _canonical(gpu)
    if name not in gpus:
        return f"no measured kernel tables for gpu {gpu!r}; measured: {', '.join(gpus) or 'none'}"
    if weight_dtype not in _GEMM_DTYPE:
        return f"weights {weight_dtype!r} are not measured; allowed: {', '.join(_GEMM_DTYPE)}"
    if kv_dtype not in _KV_DTYPE:
        return f"kv_cache {kv_dtype!r} is not measured; allowed: {', '.join(_KV_DTYPE)}"
    tables = load_tables(root / name)
    if _GEMM_DTYPE[weight_dtype] not in tables.gemm_dtypes:
        return f"{name} has no {weight_dtype} GEMM table; measured: {', '.join(sorted(tables.gemm_dtypes))}"
    if _KV_DTYPE[kv_dtype] not in tables.kv_dtypes:
        return f"{name} has no attention measured with a {kv_dtype} KV cache"
    return None


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

    @property
    def source(self) -> str:
        s = self.meta["source"]
        return (f"{s['package']} {s['version']} {self.meta['system']} "
                f"{self.meta['framework']} {self.meta['framework_version']}")


_CACHE: dict[str, MeasuredTables] = {}


def load_tables(path: str | Path, field: str = "cost_model.gpu_data") -> MeasuredTables:
    p = Path(path)
    key = str(p.resolve())
    if key in _CACHE:
        return _CACHE[key]
    meta_path = p / "meta.json"
    if not meta_path.is_file():
        raise ConfigError(f"{field}: '{p}' has no meta.json; allowed: a folder written by `python -m calibrate.aic_import`")
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
    tables = MeasuredTables(p, meta, gemm, ctx, gen, read("allreduce", False), read("moe", False),
                            frozenset(gemm["dtype"].unique()),
                            frozenset(ctx["kv_dtype"].unique()) & frozenset(gen["kv_dtype"].unique()))
    _CACHE[key] = tables
    return tables


# --- interpolation ---------------------------------------------------------------------------------

def _bracket(grid: list[float], u: float) -> tuple[int, float, bool]:
    """Index i and weight w so that u ≈ grid[i]·(1-w) + grid[i+1]·w, clamped; and whether u was outside."""
    if len(grid) == 1:
        return 0, 0.0, abs(u - grid[0]) > 1e-12
    if u <= grid[0]:
        return 0, 0.0, u < grid[0] - 1e-12
    if u >= grid[-1]:
        return len(grid) - 2, 1.0, u > grid[-1] + 1e-12
    i = bisect_right(grid, u) - 1
    return i, (u - grid[i]) / (grid[i + 1] - grid[i]), False


@dataclass(frozen=True)
class DeviceRoofline:
    """The measured device's own roofline: the fastest FLOP rate and byte rate any measured GEMM reached."""

    flops_per_s: float
    bytes_per_s: float

    def time(self, flops: float, nbytes: float) -> float:
        return max(flops / self.flops_per_s, nbytes / self.bytes_per_s)


def device_roofline(gemm: pd.DataFrame) -> DeviceRoofline:
    g = gemm[gemm["dtype"] == "bf16"]
    m, n, k = (g[c].to_numpy(float) for c in ("m", "n", "k"))
    t = g["latency_ms"].to_numpy(float) * 1e-3
    return DeviceRoofline(float((2 * m * n * k / t).max()), float(((n * k + m * (n + k)) * 2 / t).max()))


def note_outside(notes: Counter, message: str) -> None:
    """A point priced outside the measured tables: listed once, however often it is priced. How often that is
    depends on the model's caches and on the engine (the compiled core remembers other things), so a count
    would say nothing about the run."""
    notes[message] = 1


class Curve:
    """A time along one axis: shape(x) · exp(log ratio interpolated on log1p(x)), held past the ends."""

    def __init__(self, xs, log_ratio, shape, name: str, notes: Counter):
        order = sorted(range(len(xs)), key=lambda i: xs[i])
        self.xs = [float(xs[i]) for i in order]
        self.grid = [math.log1p(x) for x in self.xs]
        self.lr = [float(log_ratio[i]) for i in order]
        self.shape, self.name, self.notes = shape, name, notes

    def outside_note(self, x: float) -> str:
        return f"{self.name} at {x:g} outside measured {self.xs[0]:g}..{self.xs[-1]:g}"

    def __call__(self, x: float) -> float:
        i, w, outside = _bracket(self.grid, math.log1p(x))
        if outside:
            note_outside(self.notes, self.outside_note(x))
        lr = self.lr[i] if w == 0.0 else self.lr[i] * (1 - w) + self.lr[i + 1] * w
        return self.shape(x) * math.exp(lr)


class Grid2D:
    """A time over two axes (bilinear log ratio on log1p axes). Cells the table lacks take the nearest
    measured ratio along the second axis, then the first (counted in `filled`)."""

    def __init__(self, df: pd.DataFrame, a: str, b: str, shape, name: str, notes: Counter):
        df = df.assign(lr=[math.log(t * 1e-3 / shape(x, y)) for x, y, t in zip(df[a], df[b], df["latency_ms"])])
        piv = df.pivot_table(index=a, columns=b, values="lr", aggfunc="median")
        self.filled = int(piv.isna().to_numpy().sum())
        piv = piv.ffill(axis=1).bfill(axis=1).ffill(axis=0).bfill(axis=0)
        self.xs, self.ys = [float(v) for v in piv.index], [float(v) for v in piv.columns]
        self.ga, self.gb = [math.log1p(v) for v in self.xs], [math.log1p(v) for v in self.ys]
        self.r = piv.to_numpy(float).tolist()
        self.shape, self.name, self.notes = shape, name, notes
        if self.filled:
            notes[f"{name}: {self.filled} unmeasured grid cells take the nearest measured ratio"] += 1

    def outside_note(self, x: float, y: float) -> str:
        return (f"{self.name} at ({x:g}, {y:g}) outside measured "
                f"{self.xs[0]:g}..{self.xs[-1]:g} x {self.ys[0]:g}..{self.ys[-1]:g}")

    def along_second(self, x: float):
        """`self(x, y)` as a function of y alone: the first axis bracketed once, the same operations."""
        i, wa, out_a = _bracket(self.ga, math.log1p(x))
        r, shape, gb, notes = self.r, self.shape, self.gb, self.notes
        i1 = min(i + 1, len(r) - 1)
        ri, ri1 = r[i], r[i1]
        last_j = len(r[0]) - 1

        def at(y: float) -> float:
            j, wb, out_b = _bracket(gb, math.log1p(y))
            if out_a or out_b:
                note_outside(notes, self.outside_note(x, y))
            j1 = min(j + 1, last_j)
            lr = ((ri[j] * (1 - wb) + ri[j1] * wb) * (1 - wa) + (ri1[j] * (1 - wb) + ri1[j1] * wb) * wa)
            return shape(x, y) * math.exp(lr)

        return at

    def __call__(self, x: float, y: float) -> float:
        i, wa, out_a = _bracket(self.ga, math.log1p(x))
        j, wb, out_b = _bracket(self.gb, math.log1p(y))
        if out_a or out_b:
            note_outside(self.notes, self.outside_note(x, y))
        r = self.r
        i1, j1 = min(i + 1, len(r) - 1), min(j + 1, len(r[0]) - 1)
        lr = ((r[i][j] * (1 - wb) + r[i][j1] * wb) * (1 - wa) + (r[i1][j] * (1 - wb) + r[i1][j1] * wb) * wa)
        return self.shape(x, y) * math.exp(lr)


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

    def shape_nk(nn: float, kk: float):
        return lambda m: roof.time(2.0 * m * nn * kk, nn * kk * eb + m * (nn + kk) * _ACT_BYTES)

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
    curve = Curve(ms, lr, shape_nk(n, k), f"{name} tokens", notes)
    curve.shape_numbers = (n, k, eb)  # the roofline shape's (n, k, weight bytes), for the compiled pricer
    return curve


def _select_heads(df: pd.DataFrame, hq: int, hkv: int, d: int, name: str, notes: Counter) -> pd.DataFrame:
    """Rows measured at this head configuration, else the nearest one (scaled by the roofline shape)."""
    rows = df[(df["num_heads"] == hq) & (df["num_kv_heads"] == hkv) & (df["head_dim"] == d)]
    if not rows.empty:
        return rows
    configs = df[["num_heads", "num_kv_heads", "head_dim"]].drop_duplicates().itertuples(index=False)

    def dist(c) -> float:
        return (abs(math.log(c.num_heads / hq)) + abs(math.log(c.num_kv_heads / hkv))
                + 2 * abs(math.log(c.head_dim / d)))
    near = min(configs, key=dist)
    notes[f"{name}: heads {hq}/{hkv}/{d} (q/kv/dim) not measured; nearest {near.num_heads}/"
          f"{near.num_kv_heads}/{near.head_dim} scaled by the roofline"] += 1
    return df[(df["num_heads"] == near.num_heads) & (df["num_kv_heads"] == near.num_kv_heads)
              & (df["head_dim"] == near.head_dim)]


def _heads_shape(rows: pd.DataFrame) -> tuple[int, int, int]:
    r = rows.iloc[0]
    return int(r["num_heads"]), int(r["num_kv_heads"]), int(r["head_dim"])


# --- the cost model --------------------------------------------------------------------------------

@dataclass
class _Linear:
    curve: Curve
    experts: int
    active: float


class MeasuredCostModel:
    """Step times from GPU kernels measured by NVIDIA AIConfigurator (vLLM), summed per layer.

    See the module docstring for what is priced from which table. A speculative verification (γ+1 query
    tokens per sequence) is priced as decode attention over batch × (γ+1) rows at the same context.
    """

    def __init__(self, model: ModelSpec, gpu: GPUSpec, *, tensor_parallel: int = 1, weight_dtype: str = "bf16",
                 kv_dtype: str = "bf16", engine: str = "vllm-cudagraph", step_overhead_s: float = 0.0,
                 gpu_data: str | None = None, root: Path | None = None, communication: bool = True):
        if engine not in ENGINES:
            raise ConfigError(f"cost_model.engine: {engine!r} is not allowed; allowed: {', '.join(ENGINES)}")
        data = gpu_data or gpu.name
        reason = measured_unsupported(data, weight_dtype, kv_dtype, root)
        if reason:
            raise ConfigError(f"cost_model: {reason}")
        self.tables = load_tables((root or MEASURED_DIR) / _canonical(data))
        self.model, self.gpu, self.tp, self.engine = model, gpu, tensor_parallel, engine
        self.weight_dtype, self.kv_dtype = weight_dtype, kv_dtype
        self.step_overhead_s = step_overhead_s
        # False prices one GPU's shard alone (no all-reduce), to compare with steps measured on one GPU.
        self.communication = communication
        self.notes: Counter = Counter()
        tp, t = tensor_parallel, self.tables
        self.roof = device_roofline(t.gemm)
        # The fastest kernel the GEMM table holds: a floor for any kernel launch inside a step.
        self.min_kernel_s = float(t.gemm["latency_ms"].min()) * 1e-3
        self.roofline = RooflineCostModel(model, gpu, tensor_parallel=tp, weight_dtype=weight_dtype,
                                          kv_dtype=kv_dtype, fp8_compute=weight_dtype == "fp8")
        gd = _GEMM_DTYPE[weight_dtype]
        self._curves: dict[tuple[int, int], Curve] = {}

        def linear(in_f: int, out_f: int, name: str) -> Curve:
            key = (out_f, in_f)
            if key not in self._curves:
                self._curves[key] = gemm_curve(t.gemm, gd, out_f, in_f, self.roof, self.notes, f"gemm {name}",
                                               str(t.path))
            return self._curves[key]

        self._moe = self._moe_curve()
        self._groups = []
        for n_layers, shapes in layer_groups(model):
            mats = []
            for s in shapes:
                if s.count > 1 and self._moe is not None:
                    continue  # the fused MoE table prices all experts of the layer
                in_f = s.in_features // tp if s.tp_split == "row" else s.in_features
                out_f = s.out_features // tp if s.tp_split == "column" else s.out_features
                mats.append(_Linear(linear(in_f, out_f, s.name), s.count, s.active_per_token))
            self._groups.append((n_layers, mats, any(s.count > 1 for s in shapes)))
        head = lm_head_shape(model)
        self._lm_head = linear(head.in_features, head.out_features // tp, "lm_head")
        self._setup_attention()
        self._allreduce = self._allreduce_curve() if tp > 1 else None
        h, ffn = model.hidden_size, model.ffn_size // tp
        self._elementwise_bytes = [4 * h * _ACT_BYTES, 4 * h * _ACT_BYTES, 3 * ffn * _ACT_BYTES]  # 2 add+norm, act
        self._swap_s_per_token = (kv_bytes_per_token(model, kv_dtype, tp) / gpu.host_link_bytes_per_s)
        self._dense_cache: dict[int, list[float]] = {}
        self._decode_cache: dict[int, tuple] = {}  # batch size -> context-free parts of a decode-only step

    # -- setup --

    def _setup_attention(self) -> None:
        m, tp, t = self.model, self.tp, self.tables
        self.mla = m.attention == "mla"
        if self.mla:
            self.notes["attention: MLA is not in the tables; priced by the device roofline"] += 1
            return
        hq = m.num_attention_heads // tp
        hkv = m.num_kv_heads // tp if m.num_kv_heads % tp == 0 else 1
        d, kvd = m.head_dim, _KV_DTYPE[self.kv_dtype]
        kvb, roof = _DTYPE_BYTES[kvd], self.roof

        def prefill_shape(b: float, s: float, hq=hq, hkv=hkv, d=d) -> float:
            pairs = b * s * (s + 1) / 2
            return roof.time(4.0 * hq * d * pairs, b * s * (2 * hkv * d * kvb + 2 * hq * d * _ACT_BYTES))

        def decode_shape(b: float, x: float, hq=hq, hkv=hkv, d=d) -> float:
            return roof.time(4.0 * hq * d * b * x, b * x * 2 * hkv * d * kvb + 2 * b * hq * d * _ACT_BYTES)

        self.attention_shape = (hq, hkv, d, kvb)  # per GPU: query heads, KV heads, head size, KV bytes per element
        ctx = _select_heads(t.context[t.context["kv_dtype"] == kvd], hq, hkv, d, "context attention", self.notes)
        gen = _select_heads(t.generation[t.generation["kv_dtype"] == kvd], hq, hkv, d, "decode attention",
                            self.notes)
        # Ratios are taken against the measured configuration's roofline and applied to this model's.
        cq, ckv, cd = _heads_shape(ctx)
        gq, gkv, gd = _heads_shape(gen)
        ctx_grid = Grid2D(ctx, "batch_size", "isl", lambda b, s: prefill_shape(b, s, cq, ckv, cd),
                          "context attention (batch, tokens)", self.notes)
        gen_grid = Grid2D(gen, "batch_size", "kv_tokens", lambda b, x: decode_shape(b, x, gq, gkv, gd),
                          "decode attention (batch, context)", self.notes)
        ctx_grid.shape, gen_grid.shape = prefill_shape, decode_shape
        self._prefill, self._decode = ctx_grid, gen_grid

    def _moe_curve(self) -> Curve | None:
        m, t = self.model, self.tables
        if not m.is_moe:
            return None
        if t.moe is None or not m.gated_mlp or self.weight_dtype not in ("bf16", "fp16"):
            self.notes["moe: no fused-MoE table for this setup; experts priced from the GEMM table"] += 1
            return None
        rows = t.moe[(t.moe["hidden_size"] == m.hidden_size) & (t.moe["inter_size"] == m.ffn_size)
                     & (t.moe["topk"] == m.num_experts_per_token) & (t.moe["num_experts"] == m.num_experts)
                     & (t.moe["moe_tp_size"] == self.tp)]
        if rows.empty:
            self.notes[f"moe: ({m.hidden_size}, {m.ffn_size}, top{m.num_experts_per_token} of {m.num_experts}, "
                       f"tp {self.tp}) not in the fused-MoE table; experts priced from the GEMM table"] += 1
            return None
        h, ffn, e, k, roof = m.hidden_size, m.ffn_size // self.tp, m.num_experts, m.num_experts_per_token, self.roof

        def shape(n: float) -> float:
            touched = e * (1.0 - (1.0 - k / e) ** n)
            return roof.time(2.0 * n * k * 3 * h * ffn, touched * 3 * h * ffn * 2 + n * k * (2 * h + 3 * ffn) * 2)
        lr = [math.log(x * 1e-3 / shape(n)) for n, x in zip(rows["num_tokens"], rows["latency_ms"])]
        return Curve(list(rows["num_tokens"]), lr, shape, "fused MoE", self.notes)

    def _allreduce_curve(self) -> Curve | None:
        """The time of one all-reduce by the elements it reduces (a step's tokens × hidden size)."""
        t, tp = self.tables, self.tp
        if t.allreduce is None:
            self.notes["all-reduce: no measured table; priced by the GPU catalog's interconnect"] += 1
            return None
        backend = "graph" if self.engine == "vllm-cudagraph" else "eager"
        ar = t.allreduce[t.allreduce["backend"] == backend]
        counts = sorted(set(ar["num_gpus"]))
        i, w, outside = _bracket([math.log(c) for c in counts], math.log(tp))
        if outside or w not in (0.0, 1.0):
            self.notes[f"all-reduce: {tp} GPUs not measured (measured {counts}); interpolated in log GPUs"] += 1
        lat0 = float(ar["latency_ms"].min()) * 1e-3
        busbw = max(2 * (g - 1) / g * e * 2 / (x * 1e-3) for g, e, x in
                    zip(ar["num_gpus"], ar["message_elements"], ar["latency_ms"]))

        def shape_g(g: float):
            return lambda elems: lat0 + 2 * (g - 1) / g * elems * 2 / busbw
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
        curve = Curve(xs, lr, shape_g(tp), f"all-reduce x{tp} elements", self.notes)
        curve.shape_numbers = (lat0, tp, busbw)  # for the compiled pricer
        return curve

    # -- pricing --

    def __repr__(self) -> str:
        notes = "; ".join(f"{n}" + (f" (x{c})" if c > 1 else "") for n, c in sorted(self.notes.items()))
        return (f"MeasuredCostModel({self.model.name} on {self.gpu.name} x{self.tp}, {self.engine}, "
                f"weights={self.weight_dtype}, kv={self.kv_dtype}, kernels: {self.tables.source} "
                f"({self.tables.meta['device_name']}), step overhead {self.step_overhead_s * 1e3:g} ms"
                + (f"; notes: {notes}" if notes else "") + ")")

    def _elementwise_s(self, num_tokens: int) -> float:
        return sum(max(self.min_kernel_s, num_tokens * b / self.roof.bytes_per_s) for b in self._elementwise_bytes)

    def _per_layer_token_s(self, num_tokens: int) -> list[float]:
        cached = self._dense_cache.get(num_tokens)
        if cached is not None:
            return cached
        common = self._elementwise_s(num_tokens)
        if self.tp > 1 and self.communication:
            if self._allreduce is not None:
                common += 2 * self._allreduce(num_tokens * self.model.hidden_size)
            else:
                link = self.gpu.interconnect_bytes_per_s * self.gpu.interconnect_efficiency
                msg = num_tokens * self.model.hidden_size * _ACT_BYTES
                common += 2 * (self.gpu.allreduce_latency_s + 2 * (self.tp - 1) / self.tp * msg / link)
        out = []
        for _, mats, is_moe in self._groups:
            s = common
            for mm in mats:
                if mm.experts > 1:
                    touched = mm.experts * (1.0 - (1.0 - mm.active / mm.experts) ** num_tokens)
                    s += touched * mm.curve(num_tokens * mm.active / touched)
                else:
                    s += mm.curve(num_tokens)
            if is_moe and self._moe is not None:
                s += self._moe(num_tokens)
            out.append(s)
        if len(self._dense_cache) < 65536:
            self._dense_cache[num_tokens] = out
        return out

    def _attention_s(self, plan: StepPlan) -> float:
        if self.mla:
            return self._mla_attention_s(plan)
        window = self.model.sliding_window
        attn = 0.0
        groups = Counter(zip(plan.prefill_chunk_tokens, plan.prefill_context_tokens))
        for (chunk, context), count in groups.items():
            if window:
                context = min(context, window)
            total = context + chunk
            # Causal pairs of this chunk against its context, as a share of a fresh prompt of `total`
            # tokens; at least the chunk alone and one read of the sequence's KV.
            share = chunk * (context + (chunk + 1) / 2) / (total * (total + 1) / 2)
            attn += max(self._prefill(count, total) * share, self._prefill(count, chunk), self._decode(count, total))
        if plan.num_decode_seqs:
            mean_ctx = plan.decode_context_tokens / plan.num_decode_seqs
            if window:
                mean_ctx = min(mean_ctx, window)
            attn += self._decode(plan.num_decode_seqs * plan.decode_query_tokens, max(mean_ctx, 1.0))
        return attn

    def _mla_attention_s(self, plan: StepPlan) -> float:
        m = self.model
        heads = m.num_attention_heads // self.tp
        per_pair = 2.0 * heads * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim)
        kv_b = self.roofline.kv_bytes_per_token_layer
        t = 0.0
        for chunk, context in zip(plan.prefill_chunk_tokens, plan.prefill_context_tokens):
            t += max(self.min_kernel_s, self.roof.time(chunk * (context + (chunk + 1) / 2) * per_pair,
                                                       (context + chunk) * kv_b))
        if plan.num_decode_seqs:
            t += max(self.min_kernel_s, self.roof.time(plan.decode_context_tokens * plan.decode_query_tokens * per_pair,
                                                       plan.decode_context_tokens * kv_b))
        return t

    def step_cost(self, plan: StepPlan) -> StepCost:
        counts = self.roofline.step_cost(plan)
        num_tokens = plan.num_tokens
        if num_tokens == 0:
            return StepCost(self.step_overhead_s, 0.0, 0.0)
        attn = self._attention_s(plan)
        time_s = sum(n * (layer_s + attn) for (n, _, _), layer_s in zip(self._groups, self._per_layer_token_s(num_tokens)))
        rows = plan.num_sampled_seqs + plan.num_decode_seqs * (plan.decode_query_tokens - 1)
        if rows:
            time_s += self._lm_head(rows)
        time_s += (plan.swap_in_tokens + plan.swap_out_tokens) * self._swap_s_per_token
        return StepCost(time_s + self.step_overhead_s, counts.flops, counts.bytes)

    def step_time(self, plan: StepPlan) -> float:
        return self.step_cost(plan).time_s

    reuse_compiled_pack = False  # as RooflineCostModel's (its roofline's pack is reused with it)

    def compiled_params(self) -> tuple | None:
        """This model's tables for the compiled engine core (`sim.cost.measured_kernel.step_time`, bit-identical
        to `step_cost`'s time; the roofline's counts beside it); None where that form does not cover it: a
        subclass, MoE, MLA, a sliding window, a roofline without a compiled form, or numba missing."""
        if (type(self) is not MeasuredCostModel or self.mla or self.model.sliding_window or self._moe is not None
                or any(is_moe or any(mm.experts != 1 for mm in mats) for _, mats, is_moe in self._groups)):
            return None
        counts = self.roofline.compiled_params()
        if counts is None:
            return None
        from sim.cost import compiled_pricing, measured_kernel
        # (counts[1]: the roofline's pack.) A reused pack keeps its memos filled, as this model's caches do
        # (`_dense_cache`); its note log starts empty, for `note_compiled_outside` after each run.
        pack = compiled_pricing.reused_pack(
            self, lambda: compiled_pricing.pricer(counts[1], measured_params=measured_kernel.pack(self)))
        measured_kernel.clear_notes(pack[3])
        return pack

    def note_compiled_outside(self, points) -> None:
        """Note the points the compiled core priced outside the tables (rows of `measured_kernel`'s note log:
        kind, curve row, x, y), with the words pricing them here gives."""
        from sim.cost.measured_kernel import NOTE_CURVE, NOTE_PREFILL, curves_in_pack_order
        curves = curves_in_pack_order(self)
        for kind, row, x, y in sorted(set(map(tuple, points.tolist()))):
            if kind == NOTE_CURVE:
                message = curves[int(row)].outside_note(x)
            else:
                message = (self._prefill if kind == NOTE_PREFILL else self._decode).outside_note(x, y)
            note_outside(self.notes, message)

    def _decode_constants(self, num_seqs: int) -> tuple:
        """The context-free parts of a decode-only step of `num_seqs` sequences: per-layer token-count terms
        and the LM head (pricing them notes any point outside the tables, once)."""
        cached = (self._per_layer_token_s(num_seqs), self._lm_head(num_seqs))  # one sampled row per sequence
        if len(self._decode_cache) < 65536:
            self._decode_cache[num_seqs] = cached
        return cached

    def decode_step_costs(self, num_seqs: int, context_tokens: int, num_steps: int) -> list[StepCost]:
        """Costs of a run of decode-only steps (`sim.core.step_plan.decode_step_costs`), bit-identical to `step_cost` of
        each: the per-layer token-count terms, the LM head and the roofline's context-free counts are
        computed once per batch size; per step only the decode attention, at the batch's bracket of the
        decode grid (`Grid2D.along_second`). The points outside the tables are those pricing each step alone
        would note (the context-free ones were noted when first priced)."""
        n = num_seqs
        counts = self.roofline.decode_step_costs(n, context_tokens, num_steps)
        cached = self._decode_cache.get(n)
        per_group, head_s = cached if cached is not None else self._decode_constants(n)
        swap_s = 0 * self._swap_s_per_token  # no swaps in a decode run; added as step_cost adds it
        layers = [num_layers for num_layers, _, _ in self._groups]
        window = self.model.sliding_window
        decode = None if self.mla else self._decode.along_second(n)
        out = []
        ctx = context_tokens
        for c in counts:
            if decode is None:
                attn = self._mla_attention_s(StepPlan(num_decode_seqs=n, decode_context_tokens=ctx, num_sampled_seqs=n))
            else:
                mean_ctx = ctx / n
                if window:
                    mean_ctx = min(mean_ctx, window)
                attn = 0.0
                attn += decode(max(mean_ctx, 1.0))
            time_s = sum(k * (layer_s + attn) for k, layer_s in zip(layers, per_group))
            time_s += head_s
            time_s += swap_s
            out.append(StepCost(time_s + self.step_overhead_s, c.flops, c.bytes))
            ctx += n
        return out


class MeasuredFallback(RooflineCostModel):
    """`cost_model: {kind: measured}` on a setup without measured tables: the roofline, and its repr says why."""

    PRICES_AS_ROOFLINE = True  # only the repr differs: the roofline's compiled form prices it (compiled_params)

    def __init__(self, *args, reason: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.reason = reason

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}; measured kernels unavailable: {self.reason})"


def make_measured_cost_model(model: ModelSpec, gpu: GPUSpec, *, tensor_parallel: int = 1, weight_dtype: str = "bf16",
                             kv_dtype: str = "bf16", fp8_compute: bool = False, engine: str = "vllm-cudagraph",
                             step_overhead_s: float = 0.0, gpu_data: str | None = None,
                             on_missing: str = "roofline", root: Path | None = None):
    """The measured cost model, or where no tables fit (GPU, dtype): the roofline whose repr says why
    (on_missing 'roofline'), or a one-line ConfigError (on_missing 'error')."""
    reason = measured_unsupported(gpu_data or gpu.name, weight_dtype, kv_dtype, root)
    if reason is None and fp8_compute and weight_dtype != "fp8":
        reason = "fp8_compute without fp8 weights is not measured"
    if reason is None:
        return MeasuredCostModel(model, gpu, tensor_parallel=tensor_parallel, weight_dtype=weight_dtype,
                                 kv_dtype=kv_dtype, engine=engine, step_overhead_s=step_overhead_s,
                                 gpu_data=gpu_data, root=root)
    if on_missing == "error":
        raise ConfigError(f"cost_model: {reason}")
    return MeasuredFallback(model, gpu, tensor_parallel=tensor_parallel, weight_dtype=weight_dtype,
                            kv_dtype=kv_dtype, fp8_compute=fp8_compute, reason=reason)
