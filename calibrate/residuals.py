"""The step-time residuals of each cost model, summarised for bands (issue 31): writes calibrate/residuals.json.

A band's step-time source (`run.band_sources: [step_time]`, sim/bands.py) perturbs every priced step by
exp(bias + sigma_kind × z) (sim/cost/draws.py). The numbers come from here: for each cost model, the error
e = ln(measured / priced) of whole steps it did not see, on the GPU tables this project measured
(calibrate/profiles/<gpu>/.../steps/<engine>/steps.csv, H100 and H200, `calibrate/gpu_run.sh`) and on the two
tables measured on another H100 (../shared/gpu):

- per table, its mean error is that table's bias (the model's shared error on that machine and engine), and the
  rest, e minus that mean, the per-step noise of each row;
- `bias_sigma`: the root mean square of the tables' biases (a user's machine is one more table whose offset, and
  its sign, is not known: the RMS counts the models' average offset as uncertainty, not as a correction);
- `sigma_prefill` / `sigma_decode`: the root mean square of the per-step noise of prefill-bearing rows (prefill,
  chunked prefill and mixed) and of decode-only rows, over all tables.

Per model, which steps are held out:
- `roofline`, `learned_roofline`: every row of every table (nothing in them was fitted to these steps);
- `measured` (AIConfigurator's kernel tables): the tables of the engines they stand for (fused, compiled: vLLM,
  SGLang and TensorRT-LLM run fused kernels); the unfused tables are left out and listed;
- `steps` (a whole-step profile): the per-step noise is each shipped profile's leave-one-out error (refitted
  without the row it predicts, `calibrate check --loo`); the bias is a profile against the same model's steps
  measured on another H100 (../shared/gpu), matched by engine: the leave-one-out errors of a profile's own table
  average to ~0 by construction and cannot show a machine's offset;
- `ops` (a per-op profile, paged decode attention): tp1 profiles against the fused and compiled tables.

    .venv/bin/python -m calibrate.residuals [--shared ../shared/gpu] [--out calibrate/residuals.json]

About a minute on the 2-core development machine (the leave-one-out refits).
"""

from __future__ import annotations

import argparse
import json
import math
import warnings
from pathlib import Path

import numpy as np

from calibrate.stepcheck import Target, no_communication, check_rows, make_target
from sim.cost.steps import StepFitWarning
from sim.model.catalog import get_gpu, get_model

REPO = Path(__file__).resolve().parents[1]
PROFILES = REPO / "calibrate" / "profiles"
OUT = REPO / "calibrate" / "residuals.json"
FORMAT_VERSION = 1
PREFILL_KINDS = ("prefill", "mixed")  # rows that compute prompt tokens: the draws' prefill-bearing steps
# Shipped tables (gpu, model, tp, engine), as benchmarks/bench_gpu_profiles.py reads them.
TABLES = [("h100-sxm", "llama-3.1-8b", 1, "fused"), ("h100-sxm", "llama-3.1-8b", 1, "unfused"),
          ("h100-sxm", "llama-3.1-8b", 1, "compiled"), ("h100-sxm", "llama-3.1-8b", 1, "fused-paged"),
          ("h100-sxm", "llama-3.1-70b", 2, "fused"), ("h100-sxm", "qwen2.5-7b", 1, "fused"),
          ("h100-sxm", "qwen2.5-7b", 1, "unfused"), ("h100-sxm", "llama-3.1-70b", 4, "fused"),
          ("h100-sxm", "llama-3.1-70b", 8, "fused"),
          ("h200", "llama-3.1-8b", 1, "fused"), ("h200", "llama-3.1-8b", 1, "unfused"),
          ("h200", "qwen2.5-7b", 1, "fused"), ("h200", "llama-3.1-70b", 4, "fused"),
          ("h200", "llama-3.1-70b", 8, "fused")]
# The two tables measured on another H100 (../shared/gpu/README.md): llama-3.1-8b tp1, unfused and compiled.
SHARED = [("unfused", "h100_llama-3.1-8b_whole_steps.csv"), ("compiled", "h100_llama-3.1-8b_whole_steps_compiled.csv")]
# Which shipped profile stands for each shared table's engine (fused stands for a compiled engine too: both
# fuse the elementwise ops; README "Across machines").
SHARED_PROFILE_ENGINES = {"unfused": ("unfused",), "compiled": ("compiled", "fused")}
FUSED_ENGINES = ("fused", "compiled", "fused-paged")


def _table(gpu: str, model: str, tp: int, engine: str) -> Path:
    return PROFILES / gpu / model / f"tp{tp}" / "steps" / engine / "steps.csv"


def _errors(report: dict, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(ln(measured / priced) per row, whether the row computes prompt tokens)."""
    rows = [r for r in report["rows"] if math.isfinite(r.get(key, math.nan))]
    predicted = np.array([r[key] for r in rows])
    measured = np.array([r["measured_s"] for r in rows])
    prefill = np.array([r["kind"] in PREFILL_KINDS for r in rows])
    return np.log(measured / predicted), prefill


class _Pool:
    """Tables' errors pooled for one model: each table's bias, each row's noise around it, by kind."""

    def __init__(self):
        self.table_bias: dict[str, float] = {}
        self.noise = {"prefill": [], "decode": []}

    def add(self, name: str, e: np.ndarray, prefill: np.ndarray, *, bias: bool = True, noise: bool = True) -> None:
        mean = float(e.mean())
        if bias:
            self.table_bias[name] = mean
        if noise:
            r = e - mean
            self.noise["prefill"] += r[prefill].tolist()
            self.noise["decode"] += r[~prefill].tolist()

    def summary(self, source: str, excluded: list[str]) -> dict:
        biases = np.array(list(self.table_bias.values()))
        out = {
            "bias_sigma": _round(math.sqrt(float(np.mean(biases ** 2)))),
            "sigma_prefill": _round(_rms(self.noise["prefill"])),
            "sigma_decode": _round(_rms(self.noise["decode"])),
            "held_out_steps": {"prefill": len(self.noise["prefill"]), "decode": len(self.noise["decode"])},
            "num_bias_tables": len(biases),
            "table_bias": {k: _round(v) for k, v in self.table_bias.items()},
            "source": source,
        }
        if excluded:
            out["excluded"] = excluded
        return out


def _rms(values: list[float]) -> float:
    return math.sqrt(float(np.mean(np.square(values)))) if values else 0.0


def _round(x: float) -> float:
    return float(f"{x:.6g}")


def _kernel_target(kind: str, model_name: str, tp: int, gpu: str) -> Target:
    model = get_model(model_name)
    if kind == "learned_roofline":
        from sim.cost.learned import LearnedRooflineCostModel
        cost = LearnedRooflineCostModel(model, no_communication(get_gpu(gpu)), tensor_parallel=tp)
        return Target("roofline", cost, [repr(cost)], model, tp)
    return make_target(kind, model=model, tensor_parallel=tp, gpu_name=gpu, kv_layout="dense")


def table_errors(shared: Path | None) -> dict[str, list[tuple]]:
    """Per cost model, its tables' errors: (label, ln(measured / priced) per row, prefill-bearing per row, whether
    the table's mean counts as a bias, whether its rows count as noise). `residuals` pools them;
    benchmarks/bench_band_coverage.py holds each table out in turn."""
    warnings.simplefilter("ignore", StepFitWarning)
    shared_tables = [(engine, shared / name) for engine, name in SHARED] if shared and shared.is_dir() else []
    out: dict[str, list[tuple]] = {}
    excluded: dict[str, list[str]] = {}
    for kind in ("roofline", "learned_roofline", "measured"):
        rows, skipped = [], []
        for gpu, name, tp, engine in TABLES:
            label = f"{gpu} {name} tp{tp} {engine}"
            if kind == "measured" and engine not in FUSED_ENGINES:
                skipped.append(f"{label} (an unfused engine: the measured kernels stand for fused ones)")
                continue
            e, prefill = _errors(check_rows(_kernel_target(kind, name, tp, gpu), _table(gpu, name, tp, engine)),
                                 "predicted_s")
            rows.append((label, e, prefill, True, True))
        for engine, path in shared_tables:
            if kind == "measured" and engine not in FUSED_ENGINES:
                skipped.append(f"shared/gpu {path.name} (an unfused engine)")
                continue
            e, prefill = _errors(check_rows(_kernel_target(kind, "llama-3.1-8b", 1, "h100-sxm"), path), "predicted_s")
            rows.append((f"shared/gpu {path.name}", e, prefill, True, True))
        out[kind], excluded[kind] = rows, skipped

    rows = []
    for gpu, name, tp, engine in TABLES:
        folder = _table(gpu, name, tp, engine).parent
        report = check_rows(make_target(str(folder), model=None, tensor_parallel=None, gpu_name=gpu,
                                        kv_layout="dense"), folder / "steps.csv", loo=True)
        rows.append((f"{gpu} {name} tp{tp} {engine} (leave-one-out)", *_errors(report, "loo_predicted_s"), False, True))
    for engine, path in shared_tables:
        for profile_engine in SHARED_PROFILE_ENGINES[engine]:
            folder = _table("h100-sxm", "llama-3.1-8b", 1, profile_engine).parent
            report = check_rows(make_target(str(folder), model=None, tensor_parallel=None, gpu_name="h100-sxm",
                                            kv_layout="dense"), path)
            rows.append((f"h100-sxm llama-3.1-8b tp1 {profile_engine} profile against shared/gpu {path.name}",
                         *_errors(report, "predicted_s"), True, False))
    out["steps"] = rows

    rows = []
    for gpu, name, tp, engine in TABLES:
        folder = PROFILES / gpu / name / f"tp{tp}" / "ops"
        if engine not in FUSED_ENGINES or not folder.is_dir():
            continue
        target = make_target(str(folder), model=None, tensor_parallel=None, gpu_name=gpu, kv_layout="paged")
        rows.append((f"{gpu} {name} tp{tp} {engine}", *_errors(check_rows(target, _table(gpu, name, tp, engine)),
                                                                "predicted_s"), True, True))
    for engine, path in shared_tables:
        if engine in FUSED_ENGINES:
            target = make_target(str(PROFILES / "h100-sxm" / "llama-3.1-8b" / "tp1" / "ops"), model=None,
                                 tensor_parallel=None, gpu_name="h100-sxm", kv_layout="paged")
            rows.append((f"shared/gpu {path.name}", *_errors(check_rows(target, path), "predicted_s"), True, True))
    out["ops"] = rows
    out["_excluded"] = excluded
    return out


SOURCES = {
    "steps": "whole-step profiles: noise from each shipped profile's leave-one-out refit (python -m calibrate check "
             "PROFILE --against PROFILE/steps.csv --loo); bias from the llama-3.1-8b tp1 profiles against the same "
             "steps measured on another H100 (python -m calibrate check PROFILE --against ../shared/gpu/TABLE.csv)",
    "ops": "per-op profiles (tp1/ops, paged decode attention) against the fused and compiled whole-step tables "
           "(python -m calibrate check PROFILE/ops --kv-layout paged --against steps.csv)",
}


def pooled(tables: list[tuple]) -> _Pool:
    pool = _Pool()
    for label, e, prefill, bias, noise in tables:
        pool.add(label, e, prefill, bias=bias, noise=noise)
    return pool


def residuals(shared: Path | None) -> dict:
    errors = table_errors(shared)
    excluded = errors.pop("_excluded")
    models = {}
    for kind, tables in errors.items():
        source = SOURCES.get(kind) or (
            f"{kind} as a scenario builds it (communication off: one GPU's shard), every row of the tables below "
            "priced and compared; python -m calibrate check " + ("measured" if kind == "measured" else "roofline")
            + " --gpu G --model M --against steps.csv")
        models[kind] = pooled(tables).summary(source, excluded.get(kind, []))
    return {
        "format_version": FORMAT_VERSION,
        "definition": "e = ln(measured step time / priced step time) on steps the model did not fit; a perturbed "
                      "run multiplies every priced step by exp(bias + sigma_kind * z), bias ~ N(0, bias_sigma^2) "
                      "once per run, z ~ N(0, 1) per step (sim/cost/draws.py)",
        "written_by": "python -m calibrate.residuals (calibrate/residuals.py)",
        "measured_on": "one NVIDIA H100 80GB HBM3 SXM and one H200, driver 580.159.04, torch 2.11.0+cu130, "
                       "2026-11-23 (calibrate/profiles/README.md); shared/gpu: another H100, same day",
        "models": models,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "gpu")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    data = residuals(args.shared)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    for kind, m in data["models"].items():
        print(f"{kind}: bias_sigma {m['bias_sigma']:.4f} ({m['num_bias_tables']} tables), sigma_prefill "
              f"{m['sigma_prefill']:.4f}, sigma_decode {m['sigma_decode']:.4f} ({m['held_out_steps']} steps)")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
