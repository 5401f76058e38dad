"""A cost model from measured kernel times: a profile written by `python -m calibrate run`.

A profile folder holds one CSV per op family (shape columns, then median/p20/p80 seconds of one
call) and `meta.json` (device, versions, dtype, threads, the architecture, tensor-parallel degree,
block size, grid). This module reads profiles with numpy/pandas only: simulating never needs torch.

Between measured shapes a time is interpolated in log space; outside the grid it follows the shape
of a roofline fitted to the profile itself (the fastest FLOP rate and byte rate any measured GEMM or
stream reached). Both are one rule: interpolate the ratio measured / roofline, and hold that ratio
at its value on the nearest grid edge. Grid points are reproduced exactly.

No compiled form: the compiled engine core hands runs priced by this model to the SimPy engine. Its price is
written once, here, in Python (the interpolation is `sim.cost.interpolation`'s, shared with the measured
kernels); `decode_step_costs` prices a run's context-free terms once and repeats `step_cost`'s remaining
operations per step, which tests/unit/test_decode_step_costs.py checks bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
from pydantic import ValidationError

from sim.core.step_plan import StepPlan
from sim.cost import interpolation
from sim.cost.profile_meta import MAX_CELL_COUNT, MAX_STEP_S, count_words, first_bad_cell, read_meta
from sim.cost.roofline import RooflineCostModel, StepCost
from sim.cost.roofline_kernel import expert_load, hybrid_layer_mean, touched_experts
from sim.errors import ConfigError
from sim.model.catalog import canonical_name, data_owner, get_gpu
from sim.model.shapes import gpu_layer_groups, kv_heads_per_gpu, lm_head_shape
from sim.model.specs import GPUSpec, ModelSpec

# Op family -> the columns that name one measured shape (each CSV then has STAT_COLUMNS).
FAMILY_KEYS: dict[str, tuple[str, ...]] = {
    "linear": ("op", "in_features", "out_features", "num_tokens"),
    "prefill_attention": ("chunk_tokens", "context_tokens"),
    "decode_attention": ("layout", "batch", "context_tokens"),
    "elementwise": ("op", "num_tokens"),
    "sampling": ("num_rows",),
    "step_overhead": ("num_seqs",),
}
STAT_COLUMNS = ("median_s", "p20_s", "p80_s")
KV_LAYOUTS = ("contiguous", "paged")
# Profiles shipped with ServeSim: calibrate/profiles/<device>/<model>/tp<N>/
PROFILES_DIR = Path(__file__).resolve().parents[2] / "calibrate" / "profiles"
_DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


def shard_shapes(model: ModelSpec, tensor_parallel: int) -> dict:
    """What one GPU of a tensor-parallel group computes: the shapes a profile is measured at."""
    if model.attention == "mla":
        raise ConfigError(f"model: {model.name} uses attention 'mla', which calibration does not support yet; "
                          "allowed: mha, mqa, gqa")
    tp = tensor_parallel
    linear: dict[str, list[int]] = {}
    for _, gpu_shapes in gpu_layer_groups(model, tp):
        for g in gpu_shapes:
            linear[g.shape.name] = [g.in_features, g.out_features]
    head = lm_head_shape(model)
    linear["lm_head"] = [head.in_features, head.out_features // tp]
    return {
        "linear": linear,  # per-GPU [in_features, out_features] of one matrix (one expert)
        "num_heads": model.num_attention_heads // tp,
        "num_kv_heads": kv_heads_per_gpu(model, tp),
        "head_dim": model.head_dim,
        "hidden_size": model.hidden_size,
        "ffn_size": model.ffn_size // tp,
        "gated_mlp": model.gated_mlp,
        "vocab_size": model.vocab_size,  # sampling sees the whole vocabulary after the gather
    }


# --- interpolation ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class DeviceRoofline:
    """The measured device's own roofline: its fastest GEMM FLOP rate and streaming byte rate."""

    flops_per_s: float
    bytes_per_s: float
    elem_bytes: int  # bytes per element of the profiled dtype

    def time(self, flops: float, nbytes: float) -> float:
        return max(flops / self.flops_per_s, nbytes / self.bytes_per_s)


@dataclass(frozen=True)
class OpTable:
    """The measured points of one op, and the roofline shape used between and beyond them."""

    name: str  # e.g. "linear:qkv", "decode_attention:paged"
    axes: tuple[str, ...]  # one or two shape columns
    points: pd.DataFrame  # axes + median_s
    shape: Callable[..., float]  # roofline seconds of one call at a point


def _axis(values) -> np.ndarray:
    return np.array([math.log1p(v) for v in values], dtype=np.float64)  # log1p: context lengths may be 0


class Interpolator:
    """log(measured / roofline) interpolated (bi)linearly on log1p axes, held constant past the edges
    (`sim.cost.interpolation`)."""

    def __init__(self, table: OpTable, points: pd.DataFrame | None = None):
        pts = table.points if points is None else points
        self.name, self.shape = table.name, table.shape
        self.ndim = len(table.axes)
        if self.ndim == 1:
            (col,) = table.axes
            pts = pts.sort_values(col)
            xs = pts[col].to_numpy(float)
            self.grid = [_axis(xs)]
            self.log_ratio = np.array([math.log(t / self.shape(x)) for x, t in zip(xs, pts["median_s"])])
        else:
            a, b = table.axes
            grid = pts.pivot_table(index=a, columns=b, values="median_s", aggfunc="median")
            if grid.isna().to_numpy().any():
                raise ConfigError(f"cost_model.profile: {table.name} is not measured on a full grid of "
                                  f"({a}, {b}); rerun `python -m calibrate run` to complete it")
            self.grid = [_axis(grid.index.to_numpy(float)), _axis(grid.columns.to_numpy(float))]
            self.log_ratio = np.array([[math.log(grid.iat[i, j] / self.shape(x, y)) for j, y in enumerate(grid.columns)]
                                       for i, x in enumerate(grid.index)])

    def along_second(self, x: float):
        """`self(x, y)` of a 2-D table as a function of y alone."""
        return lambda y: self(x, y)

    def __call__(self, *x: float) -> float:
        if self.ndim == 1:
            lr, _ = interpolation.log_ratio_1d(self.grid[0], self.log_ratio, math.log1p(x[0]))
        else:
            lr, _ = interpolation.log_ratio_2d(self.grid[0], self.grid[1], self.log_ratio, math.log1p(x[0]),
                                               math.log1p(x[1]))
        return self.shape(*x) * math.exp(lr)


# --- profiles --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Profile:
    path: Path
    meta: dict
    frames: dict[str, pd.DataFrame]  # family -> measured rows
    roofline: DeviceRoofline
    tables: dict[str, OpTable]  # op name -> its measured points and roofline shape


def _device_roofline(meta: dict, frames: dict[str, pd.DataFrame]) -> DeviceRoofline:
    eb = _DTYPE_BYTES.get(meta.get("dtype"), 2)
    lin = frames["linear"]
    n, k, m = (lin[c].to_numpy(float) for c in ("num_tokens", "in_features", "out_features"))
    t = lin["median_s"].to_numpy(float)
    flops_per_s = float((2 * n * k * m / t).max())
    bytes_per_s = float(((k * m + n * (k + m)) * eb / t).max())
    return DeviceRoofline(flops_per_s, bytes_per_s, eb)


def _elementwise_bytes(shard: dict, eb: int) -> dict[str, float]:
    """Bytes one token moves through each elementwise op (read + write)."""
    h, d = shard["hidden_size"], shard["head_dim"]
    ffn = shard["ffn_size"]
    return {
        "rmsnorm": 2 * h * eb,
        "residual_add": 3 * h * eb,
        "rotary": 2 * (shard["num_heads"] + shard["num_kv_heads"]) * d * eb,
        "silu_mul": 3 * ffn * eb,
        "relu": 2 * ffn * eb,
    }


def op_tables(meta: dict, frames: dict[str, pd.DataFrame], roof: DeviceRoofline) -> dict[str, OpTable]:
    """Every measured op of a profile with the roofline shape its interpolation follows."""
    shard, eb = meta["shard"], roof.elem_bytes
    hq, hkv, d = shard["num_heads"], shard["num_kv_heads"], shard["head_dim"]
    tables: dict[str, OpTable] = {}
    for op, rows in frames["linear"].groupby("op", sort=False):
        k, m = int(rows["in_features"].iloc[0]), int(rows["out_features"].iloc[0])
        shape = lambda n, k=k, m=m: roof.time(2.0 * n * k * m, (k * m + n * (k + m)) * eb)  # noqa: E731
        tables[f"linear:{op}"] = OpTable(f"linear:{op}", ("num_tokens",), rows, shape)

    def prefill_shape(c: float, x: float) -> float:
        pairs = c * (x + (c + 1) / 2)
        return roof.time(4.0 * hq * d * pairs, ((x + c) * 2 * hkv * d + 2 * c * hq * d) * eb)

    tables["prefill_attention"] = OpTable("prefill_attention", ("chunk_tokens", "context_tokens"),
                                          frames["prefill_attention"], prefill_shape)

    def decode_shape(b: float, x: float) -> float:
        return roof.time(4.0 * hq * d * b * x, (b * x * 2 * hkv * d + 2 * b * hq * d) * eb)

    for layout, rows in frames["decode_attention"].groupby("layout", sort=False):
        tables[f"decode_attention:{layout}"] = OpTable(f"decode_attention:{layout}", ("batch", "context_tokens"),
                                                       rows, decode_shape)
    per_token = _elementwise_bytes(shard, eb)
    for op, rows in frames["elementwise"].groupby("op", sort=False):
        shape = lambda n, b=per_token.get(op, 2 * shard["hidden_size"] * eb): roof.time(0.0, n * b)  # noqa: E731
        tables[f"elementwise:{op}"] = OpTable(f"elementwise:{op}", ("num_tokens",), rows, shape)
    vocab = shard["vocab_size"]
    tables["sampling"] = OpTable("sampling", ("num_rows",), frames["sampling"],
                                 lambda r: roof.time(0.0, r * vocab * 4 * 3))  # fp32 logits, probs, read back
    tables = {name: _with_launch_cost(t) for name, t in tables.items()}
    tables["step_overhead"] = _host_loop_table(frames["step_overhead"])
    return tables


def _with_launch_cost(table: OpTable) -> OpTable:
    """Roofline plus the op's fixed per-call cost (launch, dispatch), which small shapes show: the
    smallest gap between a measured time and the roofline."""
    gaps = [row.median_s - table.shape(*(getattr(row, a) for a in table.axes))
            for row in table.points.itertuples(index=False)]
    launch_s = max(0.0, min(gaps))
    roofline = table.shape
    return OpTable(table.name, table.axes, table.points, lambda *x: launch_s + roofline(*x))


def _host_loop_table(points: pd.DataFrame) -> OpTable:
    """The engine loop: a fixed cost plus per-sequence bookkeeping, the line through the grid's ends."""
    pts = points.sort_values("num_seqs")
    s0, s1 = float(pts["num_seqs"].iloc[0]), float(pts["num_seqs"].iloc[-1])
    t0, t1 = float(pts["median_s"].iloc[0]), float(pts["median_s"].iloc[-1])
    per_seq_s = max((t1 - t0) / (s1 - s0), 0.0) if s1 > s0 else 0.0
    fixed_s = max(t0 - per_seq_s * s0, t0 / 2)
    return OpTable("step_overhead", ("num_seqs",), points, lambda s: fixed_s + per_seq_s * s)


_CACHE: dict[tuple, Profile] = {}
_CONTEXT_KEYS = ("context_tokens",)  # a shape column that may be 0 (a prefill chunk with no context before it)


def _read_family(csv: Path, keys: tuple[str, ...], field: str) -> pd.DataFrame:
    """One op family's table, every cell checked (`first_bad_cell`), one line naming the file, line, column and
    value: the shapes whole numbers (>= 1, a context >= 0), the layouts known, median_s seconds (p20_s and p80_s too
    where given). Before, a cell such as "x", -1 or inf reached the interpolation as a TypeError, a math domain
    error, or infinite steps."""
    try:
        df = pd.read_csv(csv)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
        raise ConfigError(f"{field}: '{csv}' is not a readable CSV") from None
    missing = [c for c in keys + STAT_COLUMNS if c not in df.columns]
    if missing or df.empty:
        raise ConfigError(f"{field}: '{csv}' lacks columns {missing or '(no rows)'}; "
                          f"expected: {', '.join(keys + STAT_COLUMNS)}")
    for col in keys + STAT_COLUMNS:
        if col in ("op", "layout"):
            ok = (df[col].notna() if col == "op" else df[col].isin(KV_LAYOUTS)).to_numpy()
            i = int(np.argmax(~ok))
            bad, allowed = None if ok.all() else (i, repr(df[col].iloc[i])), (
                "an op name" if col == "op" else ", ".join(KV_LAYOUTS))
        elif col in STAT_COLUMNS:
            bad = first_bad_cell(df[col], 0.0, MAX_STEP_S, False, above_lo=True, optional=col != "median_s")
            allowed = f"seconds > 0, at most {MAX_STEP_S:g} (finite)"
        else:
            minimum = 0 if col in _CONTEXT_KEYS else 1
            bad, allowed = first_bad_cell(df[col], minimum, MAX_CELL_COUNT, True), count_words(minimum)
        if bad is not None:
            raise ConfigError(f"{field}: '{csv}' line {bad[0] + 2}: {col} {bad[1]} is not allowed; allowed: {allowed}")
    return df


def profile_model(meta: dict, path: Path, field: str) -> tuple[ModelSpec, int]:
    """(model, tensor_parallel) a profile's meta.json names, with its shard section checked against them (what
    the tables were measured at), for both kinds of profile. One line where any is malformed: a shard that is not
    a mapping of numbers reached the per-op tables' arithmetic as a TypeError, tensor_parallel 0 the shard's
    shapes as a ZeroDivisionError."""
    try:
        model = ModelSpec.model_validate(meta.get("model"))
        tp = meta["tensor_parallel"]
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
            raise ValueError(tp)
    except (ValidationError, KeyError, TypeError, ValueError):
        raise ConfigError(f"{field}: '{path / 'meta.json'}' lacks a valid model or tensor_parallel (a whole number "
                          ">= 1)") from None
    if meta["shard"] != shard_shapes(model, tp):
        raise ConfigError(f"{field}: '{path / 'meta.json'}' has a shard section that is not {model.name}'s at "
                          f"tensor_parallel {tp}; rewrite the profile")
    return model, tp


def load_profile(path: str | Path, field: str = "cost_model.profile") -> Profile:
    """Read and check a profile folder (cached: many replicas share one)."""
    p = Path(path).expanduser()
    meta = read_meta(p, field)
    # every file it reads: a table edited in place is read again (the whole-step loader keys its table too)
    tables = [p / f"{family}.csv" for family in FAMILY_KEYS]
    key = (str(p.resolve()), (p / "meta.json").stat().st_mtime, *(t.stat().st_mtime if t.is_file() else None
                                                                 for t in tables))
    if key in _CACHE:
        return _CACHE[key]
    if meta.get("profile_kind") in ("steps", "engine_steps"):
        raise ConfigError(f"{field}: '{path}' holds whole measured steps, not per-op kernel times; allowed here: "
                          "a profile from `python -m calibrate run` (check a whole-step one with `calibrate check`)")
    if not meta.get("complete"):
        raise ConfigError(f"{field}: '{path}' is incomplete (an interrupted run); rerun `python -m calibrate run` "
                          "with the same options and --out to resume it")
    profile_model(meta, p, field)
    frames = {}
    for family, keys in FAMILY_KEYS.items():
        csv = p / f"{family}.csv"
        if not csv.is_file():
            raise ConfigError(f"{field}: '{path}' lacks {family}.csv; allowed: a complete profile folder")
        frames[family] = _read_family(csv, keys, field)
    roof = _device_roofline(meta, frames)
    profile = Profile(p, meta, frames, roof, op_tables(meta, frames, roof))
    _CACHE[key] = profile
    return profile


def check_matches(profile: Profile, model: ModelSpec, tensor_parallel: int, field: str = "cost_model.profile") -> None:
    """The profile must have been measured at the shapes this model has on each GPU."""
    want = shard_shapes(model, tensor_parallel)
    have = profile.meta["shard"]
    for key in ("num_heads", "num_kv_heads", "head_dim", "hidden_size", "ffn_size", "vocab_size"):
        if have.get(key) != want[key]:
            raise ConfigError(
                f"{field}: '{profile.path}' was measured for {profile.meta.get('model', {}).get('name')} at tp "
                f"{profile.meta.get('tensor_parallel')} ({key} {have.get(key)} per GPU), but {model.name} at "
                f"tensor_parallel {tensor_parallel} has {key} {want[key]}")
    for name, shape in want["linear"].items():
        if have["linear"].get(name) != shape:
            raise ConfigError(f"{field}: '{profile.path}' has linear layer {name} at {have['linear'].get(name)} per "
                              f"GPU, but {model.name} at tensor_parallel {tensor_parallel} needs {shape}")
        if f"linear:{name}" not in profile.tables:
            raise ConfigError(f"{field}: '{profile.path}' has no measurements of linear layer {name}")
    act = "silu_mul" if model.gated_mlp else "relu"
    for op in ("elementwise:rmsnorm", "elementwise:rotary", "elementwise:residual_add", f"elementwise:{act}"):
        if op not in profile.tables:
            raise ConfigError(f"{field}: '{profile.path}' has no measurements of {op}")


# Shipped layout: <device>/<model>/tp<N>/steps/<engine>/ (whole steps, preferred in this order) and
# <device>/<model>/tp<N>/ops/ (per-op kernels); the older flat <device>/<model>/tp<N>/meta.json is per-op.
ENGINE_PREFERENCE = ("fused", "compiled", "unfused", "ops")


def shipped_profiles() -> list[str]:
    """Named profiles under calibrate/profiles: '<device>/<model>/tp<N>' (flat, per-op),
    '<device>/<model>/tp<N>/ops' and '<device>/<model>/tp<N>/steps/<engine>'."""
    if not PROFILES_DIR.is_dir():
        return []
    metas = [*PROFILES_DIR.glob("*/*/tp*/meta.json"), *PROFILES_DIR.glob("*/*/tp*/ops/meta.json"),
             *PROFILES_DIR.glob("*/*/tp*/steps/*/meta.json")]
    return sorted(str(m.parent.relative_to(PROFILES_DIR)) for m in metas)


def shipped_engines(device: str, model_name: str, tensor_parallel: int) -> dict[str, Path]:
    """Engine name -> shipped folder for (device, model, tp), in the order a default picks them."""
    base = PROFILES_DIR / device.lower() / model_name.lower() / f"tp{tensor_parallel}"
    found = {m.parent.name: m.parent for m in sorted(base.glob("steps/*/meta.json"))}
    if (base / "ops" / "meta.json").is_file():
        found["ops"] = base / "ops"
    elif (base / "meta.json").is_file():
        found["ops"] = base
    rank = {e: i for i, e in enumerate(ENGINE_PREFERENCE)}
    return dict(sorted(found.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))


def resolve_profile_dir(profile: str | None, device: str, model_name: str, tensor_parallel: int,
                        engine: str | None = None, quantization: dict | None = None) -> Path:
    """A profile folder: the given path, or the shipped one named by (device, model, tp, engine);
    without an engine, the first shipped of fused, compiled, unfused, ops (then any other engine) measured in the
    `quantization` (`profile_meta.profile_fits` keywords: a W8A8 scenario takes `steps/fused-fp8`), else the first
    of the same weights, else the first (whose refusal then says why)."""
    if profile is not None:
        return Path(profile).expanduser()
    from sim.atomic_files import plain_name
    if not (plain_name(device) and plain_name(model_name)):  # they become folder names under calibrate/profiles
        raise ConfigError(f"cost_model.profile_device: {device!r} / model {model_name!r} must be plain names; "
                          "allowed: no '/', '\\', '.' or '..'")
    name = f"{device.lower()}/{model_name.lower()}/tp{tensor_parallel}"
    engines = shipped_engines(device, model_name, tensor_parallel)
    if not engines:
        shipped = ", ".join(shipped_profiles()) or "none"
        raise ConfigError(f"cost_model: no shipped profile for {name}; "
                          f"give cost_model.profile: PATH or one of: {shipped}")
    if engine is None:
        fitting = (path for path in engines.values() if _measured_in(path, quantization))
        # none fits: one of the same weights, whose refusal then names what else differs (fp8_compute, say)
        same_weights = (path for path in engines.values() if _weights_of(path) == (quantization or {}).get(
            "weight_dtype", "bf16"))
        return next(fitting, next(same_weights, next(iter(engines.values()))))
    if engine not in engines:
        raise ConfigError(f"cost_model.engine: {engine!r} has no shipped profile for {name}; "
                          f"allowed: {', '.join(engines)}")
    return engines[engine]


def _weights_of(path: Path) -> str:
    from sim.cost.profile_meta import profile_dtypes, read_meta
    return profile_dtypes(read_meta(path))[0]


def _measured_in(path: Path, quantization: dict | None) -> bool:
    from sim.cost.profile_meta import profile_fits, read_meta
    return profile_fits(read_meta(path), **(quantization or {}))


def profile_gpu(gpu: str | GPUSpec, tensor_parallel: int) -> str:
    """The GPU whose shipped profiles price this one's steps: its own where it has any. A part with none that is
    another's silicon (`GPUSpec.kernels_as`: the H800 is the H100 SXM with slower links) takes the twin's at
    tensor_parallel 1, where it runs the twin's steps in the same time, as a step on one GPU crosses no link. At a
    larger TP a profiled step's all-reduces ran on the twin's links, so the twin's kernel tables price it instead,
    their all-reduce rows stretched to the part's own links (sim/cost/measured.py `allreduce_on_links`)."""
    if tensor_parallel != 1:
        return canonical_name(gpu.name if isinstance(gpu, GPUSpec) else str(gpu))
    return data_owner(gpu, lambda name: (PROFILES_DIR / name).is_dir())


def shipped_step_profile_fits(device: str, model_name: str, tensor_parallel: int, quantization: dict) -> bool:
    """Whether a shipped whole-step profile of (device, model, tp) was measured in `quantization`."""
    return any(name != "ops" and _measured_in(path, quantization)
               for name, path in shipped_engines(device, model_name, tensor_parallel).items())


# --- the cost model --------------------------------------------------------------------------------

class CalibratedCostModel:
    """Step times from measured kernels, summed the way one engine step runs them.

    Per layer: the linear layers at the step's token count, each prefill chunk's attention at
    (chunk, context), decode attention at (decoding sequences, mean context) for the KV layout,
    two norms, rotary, the MLP activation and two residual adds (or the counts the profile's
    `elementwise_per_layer` gives: none of the adds where the engine's norm adds the residual); then the LM head and sampling at
    the sampled rows, plus the measured per-step loop overhead. What one device cannot measure —
    the tensor-parallel all-reduces and swap copies over the host link — comes from the roofline of
    the scenario's GPU. FLOPs and bytes (for utilization figures) are the roofline's counts.

    Paged decode attention is priced at the block size the profile was measured with (`block_size`
    is the scenario's, shown in the repr where they differ); likewise the profile's dtype. A quantized scenario
    (fp8, int8, int4) the profile was not measured in is refused with one line by `make_calibrated_cost_model`
    (`check_profile_dtypes`), which builds this model for a scenario.

    A speculative verification (γ+1 query tokens per sequence) is priced as decode attention over
    batch × (γ+1) query rows at the same context: each row reads the sequence's KV, an upper bound
    for kernels that read it once for all rows.
    """

    def __init__(self, profile_dir: str | Path, model: ModelSpec, *, tensor_parallel: int = 1,
                 kv_layout: str = "paged", block_size: int = 16, gpu: GPUSpec | None = None,
                 weight_dtype: str = "bf16", kv_dtype: str = "bf16"):
        if kv_layout not in KV_LAYOUTS:
            raise ConfigError(f"kv_cache.layout: {kv_layout!r} is not allowed; allowed: {', '.join(KV_LAYOUTS)}")
        self.profile = load_profile(profile_dir)
        check_matches(self.profile, model, tensor_parallel)
        self.model, self.tp, self.kv_layout, self.block_size = model, tensor_parallel, kv_layout, block_size
        self.gpu = gpu or get_gpu("h100-sxm")
        # The roofline counts FLOPs/bytes and prices what one device cannot measure (all-reduce, swap).
        self.roofline = RooflineCostModel(model, self.gpu, tensor_parallel=tensor_parallel,
                                          weight_dtype=weight_dtype, kv_dtype=kv_dtype)
        tables = self.profile.tables
        decode_key = f"decode_attention:{kv_layout}"
        if decode_key not in tables:
            raise ConfigError(f"cost_model.profile: '{self.profile.path}' has no {kv_layout} decode attention; "
                              f"measured: {', '.join(k.split(':')[1] for k in tables if k.startswith('decode_attention:'))}")
        f = {name: Interpolator(t) for name, t in tables.items()}
        self._prefill, self._decode = f["prefill_attention"], f[decode_key]
        self._lm_head, self._sampling, self._overhead = f["linear:lm_head"], f["sampling"], f["step_overhead"]
        act = "silu_mul" if model.gated_mlp else "relu"
        # Calls per layer of each elementwise row: the profile's own count where it says (meta.json
        # `elementwise_per_layer`: vLLM's CPU norm adds the residual itself, so such a profile counts no
        # residual_add), else two norms, rotary, the activation and two residual adds.
        per_layer = {"rmsnorm": 2, "rotary": 1, act: 1, "residual_add": 2,
                     **(self.profile.meta.get("elementwise_per_layer") or {})}
        self._elementwise = [(per_layer[op], f[f"elementwise:{op}"]) for op in ("rmsnorm", "rotary", act, "residual_add")
                             if per_layer[op]]
        # Per layer group: (layers, [(matrix interpolator, experts, experts each token routes to)]).
        self._groups = [(n, [(f[f"linear:{g.shape.name}"], g.count, g.active_per_token) for g in gpu_shapes])
                        for n, gpu_shapes in gpu_layer_groups(model, tensor_parallel)]
        self._dense_cache: dict[int, list[float]] = {}  # num_tokens -> token-count-only time per layer group
        self._decode_cache: dict[int, tuple] = {}  # batch size -> context-free parts of a decode-only step
        link = self.gpu.interconnect_bytes_per_s * self.gpu.interconnect_efficiency
        self._allreduce_s_per_token = 2.0 * (tensor_parallel - 1) / tensor_parallel * model.hidden_size * 2 / link

    def __repr__(self) -> str:
        meta = self.profile.meta
        measured_block = meta.get("block_size")
        # Paged decode is priced at the block size the profile was measured with.
        block = (f", measured block size {measured_block} (scenario {self.block_size})"
                 if self.kv_layout == "paged" and measured_block != self.block_size else "")
        return (f"CalibratedCostModel({self.model.name} x{self.tp}, {self.kv_layout} KV, profile "
                f"'{self.profile.path}' measured on {meta.get('device_name')} in {meta.get('dtype')}{block})")

    def _per_layer_token_s(self, num_tokens: int) -> list[float]:
        """Linear layers, elementwise ops and all-reduces of one layer: functions of the token count only."""
        cached = self._dense_cache.get(num_tokens)
        if cached is not None:
            return cached
        common = sum(k * f(num_tokens) for k, f in self._elementwise)
        if self.tp > 1:
            common += 2 * (self.gpu.allreduce_latency_s + num_tokens * self._allreduce_s_per_token)
        per_group = []
        for _, matmuls in self._groups:
            layer_s = common
            for f, experts, active in matmuls:
                if active < experts:  # routed: a token passes through some of them (expert parallelism: maybe of 1)
                    # The experts some token routes to, each a measured matmul of its share of the tokens.
                    touched = touched_experts(experts, active, num_tokens)
                    layer_s += touched * f(expert_load(experts, active, num_tokens))
                else:
                    layer_s += f(num_tokens)
            per_group.append(layer_s)
        if len(self._dense_cache) < 65536:
            self._dense_cache[num_tokens] = per_group
        return per_group

    def _attention_s(self, plan: StepPlan) -> float:
        """One layer's attention; a hybrid model's mean layer (`hybrid_layer_mean`)."""
        window, share = self.model.sliding_window, self.model.window_layer_share
        attn_s = self._layer_attention_s(plan, window)
        if window and share != 1.0:
            attn_s = hybrid_layer_mean(share, attn_s, self._layer_attention_s(plan, None))
        return attn_s

    def _layer_attention_s(self, plan: StepPlan, window: int | None) -> float:
        attn_s = 0.0
        for chunk, context in zip(plan.prefill_chunk_tokens, plan.prefill_context_tokens):
            attn_s += self._prefill(chunk, min(context, window) if window else context)
        if plan.num_decode_seqs:
            mean_ctx = plan.decode_context_tokens / plan.num_decode_seqs
            if window:
                mean_ctx = min(mean_ctx, window)
            attn_s += self._decode(plan.num_decode_seqs * plan.decode_query_tokens, max(mean_ctx, 1.0))
        return attn_s

    def step_cost(self, plan: StepPlan) -> StepCost:
        counts = self.roofline.step_cost(plan)
        num_tokens = plan.num_tokens
        if num_tokens == 0:
            return StepCost(self._overhead(max(plan.num_seqs, 1)), 0.0, 0.0)
        attn_s = self._attention_s(plan)
        time_s = sum(n * (layer_s + attn_s) for (n, _), layer_s in zip(self._groups, self._per_layer_token_s(num_tokens)))
        rows = plan.num_sampled_seqs + plan.num_decode_seqs * (plan.decode_query_tokens - 1)
        if rows:
            time_s += self._lm_head(rows) + self._sampling(rows)
        time_s += (plan.swap_in_tokens + plan.swap_out_tokens) * self.roofline.swap_s_per_token
        time_s += self._overhead(max(plan.num_seqs, 1))
        return StepCost(time_s, counts.flops, counts.bytes)

    def step_time(self, plan: StepPlan) -> float:
        return self.step_cost(plan).time_s

    def decode_step_costs(self, num_seqs: int, context_tokens: int, num_steps: int) -> list[StepCost]:
        """Costs of a run of decode-only steps (`sim.core.step_plan.decode_step_costs`), bit-identical to `step_cost` of
        each: the per-layer token-count terms, LM head, sampling, loop overhead and the roofline's
        context-free counts are computed once per batch size; per step only the decode attention at the
        mean context."""
        n = num_seqs
        counts = self.roofline.decode_step_costs(n, context_tokens, num_steps)
        cached = self._decode_cache.get(n)
        if cached is None:
            cached = ([num_layers for num_layers, _ in self._groups], self._per_layer_token_s(n),
                      self._lm_head(n) + self._sampling(n),  # one sampled row per decoding sequence
                      0 * self.roofline.swap_s_per_token,  # no swaps in a decode run; added as step_cost adds it
                      self._overhead(max(n, 1)), self._decode.along_second(n))
            if len(self._decode_cache) < 65536:
                self._decode_cache[n] = cached
        layers, per_group, head_s, swap_s, overhead_s, decode = cached
        window, share = self.model.sliding_window, self.model.window_layer_share
        out = []
        ctx = context_tokens
        for c in counts:
            mean_ctx = ctx / n
            whole_ctx = mean_ctx
            if window:
                mean_ctx = min(mean_ctx, window)
            attn_s = 0.0
            attn_s += decode(max(mean_ctx, 1.0))
            if window and share != 1.0:  # as `_attention_s`
                attn_s = hybrid_layer_mean(share, attn_s, 0.0 + decode(max(whole_ctx, 1.0)))
            time_s = sum(k * (layer_s + attn_s) for k, layer_s in zip(layers, per_group))
            time_s += head_s
            time_s += swap_s
            time_s += overhead_s
            out.append(StepCost(time_s, c.flops, c.bytes))
            ctx += n
        return out
