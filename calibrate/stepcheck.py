"""Whole-step tables in and out of ServeSim: `calibrate import-steps` turns a measured table into a
whole-step profile; `calibrate check` compares any cost model's step times with a measured table.

Why: a profile is only as good as the error it shows on rows it is compared with. `check` prices
each row of a table with a whole-step profile, a per-op profile or the roofline, so all three can be
read side by side, and `--loo` refits a whole-step profile without each row to show held-out error.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from sim.atomic_files import atomic_dir, atomic_write_text
from sim.cost.calibrated import shard_shapes
from sim.cost.steps import (
    PROFILE_KIND,
    SHAPE_COLUMNS,
    STEPS_COLUMNS,
    StepFitWarning,
    describe_row,
    fit_steps,
    load_step_profile,
    plan_for_row,
    read_meta,
    read_steps_table,
)
from sim.errors import ConfigError
from sim.model.specs import ModelSpec

KV_LAYOUTS = ("dense", "paged")
DEVICES = ("cuda", "cpu")
DTYPES = ("bf16", "fp16", "fp32")
COMMUNICATION_NOTE = ("communication: off (the table times one GPU's shard, which holds no tensor-parallel "
                      "all-reduce; predictions leave it out too)")


# --- import-steps -----------------------------------------------------------------------------------

def _check_out(out: Path) -> None:
    """--out may be new, an empty folder, or a profile folder (replaced); nothing else is overwritten."""
    if not out.exists():
        return
    if not out.is_dir():
        raise ConfigError(f"--out: '{out}' exists and is not a folder; allowed: a new folder or a profile folder")
    if not any(out.iterdir()):
        return
    meta_path = out / "meta.json"
    try:
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        meta = None
    if not (isinstance(meta, dict) and meta.get("format_version") == 1 and "shard" in meta):
        raise ConfigError(f"--out: '{out}' is a folder that is not a ServeSim profile; allowed: a new folder, "
                          "an empty one, or a profile folder to replace")


def import_steps(table: Path, model: ModelSpec, tensor_parallel: int, *, device_name: str, out: Path,
                 engine: str, engine_description: str | None, source: str | None, method: str | None,
                 dtype: str, device: str, kv_layout: str) -> dict:
    """Check `table`, fit it (a table the model cannot explain is refused) and write a whole-step
    profile to `out` in one rename. Returns the meta written."""
    rows = read_steps_table(table, "TABLE", model=model, device=device)
    shard = shard_shapes(model, tensor_parallel)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", StepFitWarning)
        fit_steps(rows, model, tensor_parallel, dtype, field=f"TABLE: '{table}'")
    _check_out(out)
    data = Path(table).read_bytes()
    imported = f"imported from {Path(table).name} by calibrate import-steps"
    meta = {
        "format_version": 1, "profile_kind": PROFILE_KIND, "complete": True,
        "model": model.model_dump(mode="json"), "tensor_parallel": tensor_parallel, "shard": shard,
        "device": device, "device_name": device_name, "dtype": dtype, "engine": engine,
        "engine_description": engine_description or "not stated when the table was imported",
        "method": method or "not stated when the table was imported",
        "source": f"{imported}: {source}" if source else imported,
        "includes_communication": False, "kv_layout": kv_layout,
        "imported": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "table_sha256": hashlib.sha256(data).hexdigest(),
        "fit_notes": [str(w.message) for w in caught],
    }
    csv = rows[list(STEPS_COLUMNS)].to_csv(index=False, float_format="%.6e")
    with atomic_dir(out) as tmp:
        atomic_write_text(tmp / "steps.csv", csv)
        atomic_write_text(tmp / "meta.json", json.dumps(meta, indent=2) + "\n")
    return meta


# --- check --------------------------------------------------------------------------------------------

@dataclass
class Target:
    """What `check` prices a table with."""

    kind: str  # "steps" | "ops" | "roofline" | "measured"
    cost_model: object
    header: list[str]
    model: ModelSpec
    tensor_parallel: int
    path: Path | None = None


def no_communication(gpu):
    """The GPU with a free interconnect: like-with-like against one GPU's shard."""
    return gpu.model_copy(update={"allreduce_latency_s": 0.0, "interconnect_bytes_per_s": math.inf})


def make_target(target: str, *, model: ModelSpec | None, tensor_parallel: int | None, gpu_name: str | None,
                kv_layout: str, fp8: bool = False) -> Target:
    """What `check` prices a table with. `fp8`: the roofline and measured models with fp8 weights and fp8 matrix
    products (W8A8), as a scenario quantized `{weights: fp8, fp8_compute: true}` builds them."""
    from sim.cost.roofline import RooflineCostModel
    from sim.model.catalog import get_gpu
    if target in ("roofline", "measured"):
        if gpu_name is None or model is None:
            raise ConfigError(f"PROFILE: {target!r} needs --gpu (a catalog GPU) and --model; allowed: "
                              f"check {target} --gpu h100-sxm --model llama-3.1-8b --against TABLE.csv")
        tp = tensor_parallel or 1
        gpu = get_gpu(gpu_name, "--gpu")
        quant = dict(weight_dtype="fp8", fp8_compute=True) if fp8 else {}
        if target == "roofline":
            cost = RooflineCostModel(model, no_communication(gpu), tensor_parallel=tp, **quant)
            described = (f"roofline of {gpu.name} (catalog), {model.name} tp{tp}, {'W8A8 fp8' if fp8 else 'bf16'}, "
                         f"step overhead {cost.step_overhead_s * 1e3:g} ms, as a scenario builds it")
        else:
            from sim.cost.measured import MeasuredCostModel
            cost = MeasuredCostModel(model, gpu, tensor_parallel=tp, communication=False, **quant)
            described = repr(cost)
        return Target(target, cost, [f"cost model: {described}", COMMUNICATION_NOTE], model, tp)
    path = Path(target).expanduser()
    meta = read_meta(path, "PROFILE")
    try:
        have_model = ModelSpec.model_validate(meta.get("model"))
        have_tp = int(meta["tensor_parallel"])
    except (ValidationError, KeyError, TypeError, ValueError):
        raise ConfigError(f"PROFILE: '{path / 'meta.json'}' lacks a valid model or tensor_parallel") from None
    if model is not None and model.name != have_model.name:
        raise ConfigError(f"--model: {model.name!r} is not the profile's model; allowed: {have_model.name!r} "
                          "(or leave it out)")
    if tensor_parallel is not None and tensor_parallel != have_tp:
        raise ConfigError(f"--tp: {tensor_parallel} is not the profile's degree; allowed: {have_tp} (or leave it out)")
    gpu = no_communication(get_gpu(gpu_name or "h100-sxm", "--gpu"))
    where = (f"device {meta.get('device_name')} ({meta.get('device')}), {meta.get('dtype')}, "
             f"{have_model.name} tp{have_tp}")
    if meta.get("profile_kind") == PROFILE_KIND:
        from sim.cost.steps import StepProfileCostModel
        cost = StepProfileCostModel(path, have_model, tensor_parallel=have_tp, gpu=gpu, communication=False)
        header = [f"profile: {path} (whole steps, engine {meta.get('engine')}: {meta.get('engine_description')})",
                  where, f"method: {meta.get('method')}", f"source: {meta.get('source')}", COMMUNICATION_NOTE]
        return Target("steps", cost, header, have_model, have_tp, path)
    from sim.cost.calibrated import KV_LAYOUTS as OP_LAYOUTS
    from sim.cost.calibrated import CalibratedCostModel
    layout = {"dense": "contiguous"}.get(kv_layout, kv_layout)
    if layout not in OP_LAYOUTS:
        raise ConfigError(f"--kv-layout: {kv_layout!r} is not allowed; allowed: dense, contiguous, paged")
    cost = CalibratedCostModel(path, have_model, tensor_parallel=have_tp, kv_layout=layout, gpu=gpu)
    header = [f"profile: {path} (per-op kernel times summed per step, {layout} decode attention)", where,
              f"method: {meta.get('timer')}", f"source: python -m calibrate run ({meta.get('date')})",
              COMMUNICATION_NOTE]
    return Target("ops", cost, header, have_model, have_tp, path)


def _shape(row) -> dict:
    return {c: (row[c] if c == "kind" else int(row[c])) for c in SHAPE_COLUMNS}


def check_rows(target: Target, table: Path, loo: bool = False) -> dict:
    """Predicted and measured step time of every row of `table`; with `loo`, refit without each row."""
    rows = read_steps_table(table, "--against", model=target.model)
    if loo and target.kind != "steps":
        raise ConfigError(f"--loo: refits a whole-step profile; PROFILE is {target.kind!r}; allowed: a whole-step "
                          "profile built from the same table")
    profile = load_step_profile(target.path, "PROFILE") if loo else None
    out_rows, notes = [], []
    if target.kind == "steps":
        notes += target.cost_model.fit.notes
    for _, row in rows.iterrows():
        shape = _shape(row)
        plan = plan_for_row(*shape.values())
        predicted = target.cost_model.step_time(plan)
        measured = float(row["step_s"])
        rec = {**shape, "shape": describe_row(*shape.values()), "predicted_s": predicted, "measured_s": measured,
               "error_pct": 100 * (predicted / measured - 1)}
        if profile is not None:
            key = tuple(shape.values())
            keep = [tuple(_shape(r).values()) != key for _, r in profile.rows.iterrows()]
            rec["in_profile"] = not all(keep)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", StepFitWarning)
                    fit = fit_steps(profile.rows[keep], profile.model, target.tensor_parallel,
                                    profile.meta.get("dtype", "bf16"), field="--loo")
                rec["loo_predicted_s"] = fit.time_s(plan) + target.cost_model.allreduce_s(plan.num_tokens)
                rec["loo_error_pct"] = 100 * (rec["loo_predicted_s"] / measured - 1)
            except ConfigError as err:
                rec["loo_predicted_s"] = rec["loo_error_pct"] = float("nan")
                notes.append(f"without {rec['shape']}: {err}")
        out_rows.append(rec)
    summary = {"header": target.header, "rows": out_rows, "notes": notes}
    for col in ("error_pct", "loo_error_pct"):
        vals = np.array([abs(r[col]) for r in out_rows if col in r and math.isfinite(r[col])])
        if len(vals):
            name = col.removesuffix("_pct")
            summary[f"median_abs_{name}_pct"] = float(np.median(vals))
            summary[f"max_abs_{name}_pct"] = float(vals.max())
    return summary
