"""How well each cost model predicts the whole steps measured on an H100 in this project (issue 17).

The shipped whole-step profiles under calibrate/profiles/h100-sxm/ were measured by `calibrate/gpu_run.sh`
(`python -m calibrate steps`, each step one CUDA graph). For each of them this prints, per table:
- the roofline of the h100-sxm catalog entry (as a scenario builds it, communication off);
- the per-op calibrated model from the shipped per-op profile (`tp1/ops/`, measured the same day with the
  CUDA-graph per-op timer and the fused kernels), contiguous and paged decode attention (tp1 models only);
- the whole-step model refitted without each row (leave-one-out);
- mixed steps and chunked prefills predicted from a profile fitted on the PURE rows only (prefill without
  context, decode), i.e. on rows that never mix;
and, across sources, our unfused/fused profiles against the two tables in ../shared/gpu/ (the same model on
another H100 machine, unfused and torch.compile'd). Then the tables measured on an H200 on 11-30
(`H200_NEW_TABLES`: W8A8 fp8 steps, `calibrate steps --weights fp8`, and the unfused and TP-2 shards) and on 12-04
(`H200_TABLES_1204`: the TP-2 unfused shard, the compiled engine, more fp8 shards; `H200_TABLES_1204_EVENING`: the
unfused fp8 TP-2/TP-8 shards and the paged decode kernel, with the per-op profiles `H200_PER_OP`): each
against its own leave-one-out fit, the roofline and AIConfigurator's vLLM tables, fp8 priced as fp8 (weights and
matrix products); the fp8 step's time over the bf16 step's at each shape, measured and as each model prices it; and
one engine's measured step over another's (`ENGINE_PAIRS`: compiled against fused, unfused against fused).

    .venv/bin/python benchmarks/bench_gpu_profiles.py [--shared ../shared/gpu]
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from calibrate.fidelity.machine import cpuinfo  # noqa: E402
from calibrate.stepcheck import check_rows, import_steps, make_target  # noqa: E402
from sim.cost.steps import StepFitWarning  # noqa: E402
from sim.model.catalog import get_model  # noqa: E402

PROFILES = REPO / "calibrate" / "profiles" / "h100-sxm"
H200_TABLES = [("llama-3.1-8b", 1, "fused"), ("llama-3.1-8b", 1, "unfused"), ("qwen2.5-7b", 1, "fused"),
               ("llama-3.1-70b", 4, "fused"), ("llama-3.1-70b", 8, "fused")]
# Measured on one H200 on 11-30 (calibrate/gpu_run.sh): "-fp8" engines ran W8A8 GEMMs
H200_NEW_TABLES = [("llama-3.1-8b", 1, "fused-fp8"), ("llama-3.1-8b", 1, "unfused-fp8"), ("qwen2.5-7b", 1, "fused-fp8"),
                   ("llama-3.1-70b", 4, "fused-fp8"), ("qwen2.5-7b", 1, "unfused"), ("llama-3.1-70b", 2, "fused"),
                   ("llama-3.1-70b", 4, "unfused"), ("llama-3.1-70b", 8, "unfused")]
# Measured on one H200 on 12-04 (calibrate/gpu_run.sh): the gaps the 11-30 run left
H200_TABLES_1204 = [("llama-3.1-70b", 2, "unfused"), ("llama-3.1-8b", 1, "compiled"), ("qwen2.5-7b", 1, "unfused-fp8"),
                    ("llama-3.1-70b", 2, "fused-fp8"), ("llama-3.1-70b", 4, "unfused-fp8"),
                    ("llama-3.1-70b", 8, "fused-fp8")]
# Measured on one H200 on 12-04 from 18:40 (calibrate/gpu_run.sh): the unfused fp8 70B shards, the paged decode kernel
H200_TABLES_1204_EVENING = [("llama-3.1-70b", 2, "unfused-fp8"), ("llama-3.1-70b", 8, "unfused-fp8"),
                            ("llama-3.1-8b", 1, "fused-paged")]
# Per-op profiles measured on that H200 (`calibrate run`, tp1/ops/) and the whole-step tables they stand for
H200_PER_OP = [("llama-3.1-8b", "fused"), ("llama-3.1-8b", "fused-paged"), ("qwen2.5-7b", "fused")]
TABLES = [("llama-3.1-8b", 1, "fused"), ("llama-3.1-8b", 1, "unfused"), ("llama-3.1-8b", 1, "compiled"),
          ("llama-3.1-8b", 1, "fused-paged"), ("llama-3.1-70b", 2, "fused"),
          ("qwen2.5-7b", 1, "fused"), ("qwen2.5-7b", 1, "unfused"),
          ("llama-3.1-70b", 4, "fused"), ("llama-3.1-70b", 8, "fused")]


def errors(report: dict, key: str = "error_pct") -> np.ndarray:
    return np.abs(np.array([r[key] for r in report["rows"]], dtype=float))


def stat(x: np.ndarray) -> str:
    x = x[~np.isnan(x)]
    return f"{np.median(x):.1f}% / {x.max():.1f}%" if len(x) else "n/a"


def target(path_or_roofline: str, model=None, tp=None, kv="dense", gpu="h100-sxm", fp8=False):
    return make_target(path_or_roofline, model=model, tensor_parallel=tp,
                       gpu_name=gpu if path_or_roofline in ("roofline", "measured") else None, kv_layout=kv, fp8=fp8)


_KEY = ["kind", "prefill_tokens", "prefill_context", "decode_batch", "decode_context"]


def _key(row) -> tuple:
    return tuple(row[c] if c == "kind" else int(row[c]) for c in _KEY)


def h200_new_tables(title: str, tables: list, fp8_pairs: tuple) -> None:
    """Each table against its own leave-one-out fit, the measured kernels and the roofline; then the fp8 step over
    the bf16 step of one engine for `fp8_pairs` ((model, tp, engine), both measured)."""
    folder = PROFILES.parent / "h200"
    print(f"### Measured on an H200 on {title}\n")
    print("| table (rows) | whole-step held out (LOO) | measured kernels (AIC vLLM): median / max, mean signed | "
          "roofline: median / max, mean signed |")
    print("| --- | ---: | ---: | ---: |")
    for name, tp, engine in tables:
        path = folder / name / f"tp{tp}" / "steps" / engine
        table, model, fp8 = path / "steps.csv", get_model(name), engine.endswith("-fp8")
        loo = check_rows(target(str(path)), table, loo=True)
        cells = []
        for kind in ("measured", "roofline"):
            rep = check_rows(target(kind, model, tp, gpu="h200", fp8=fp8), table)
            signed = np.array([r["error_pct"] for r in rep["rows"]])
            cells.append(f"{stat(errors(rep))}, {signed.mean():+.1f}%")
        print(f"| {name} tp{tp} {engine} ({len(pd.read_csv(table))}) | {stat(errors(loo, 'loo_error_pct'))} | "
              + " | ".join(cells) + " |")
    print("\nfp8 step / bf16 step at the same shape (one engine, H200), median (range) over the shapes both "
          "measured, by kind of step: measured, and as each model prices it\n")
    print("| model | kind (shapes) | measured | measured kernels (AIC) | roofline |")
    print("| --- | --- | ---: | ---: | ---: |")
    for name, tp, engine in fp8_pairs:
        base = folder / name / f"tp{tp}" / "steps"
        both = pd.read_csv(base / engine / "steps.csv").merge(pd.read_csv(base / f"{engine}-fp8" / "steps.csv"),
                                                               on=_KEY, suffixes=("_bf16", "_fp8"))
        model, priced = get_model(name), {}
        for kind in ("measured", "roofline"):
            for quant in ("bf16", "fp8"):
                rep = check_rows(target(kind, model, tp, gpu="h200", fp8=quant == "fp8"),
                                 base / (f"{engine}-fp8" if quant == "fp8" else engine) / "steps.csv")
                priced[kind, quant] = {_key(r): r["predicted_s"] for r in rep["rows"]}
        for kind_of_step, rows in both.groupby("kind"):
            shapes = [_key(r) for _, r in rows.iterrows()]
            cells = [rows["step_s_fp8"] / rows["step_s_bf16"]]
            cells += [pd.Series([priced[k, "fp8"][s] / priced[k, "bf16"][s] for s in shapes])
                      for k in ("measured", "roofline")]
            print(f"| {name} tp{tp} {engine} | {kind_of_step} ({len(rows)}) | " + " | ".join(
                f"{c.median():.2f} ({c.min():.2f}-{c.max():.2f})" for c in cells) + " |")


# One engine's step over another's at the same shapes (steps/<engine>/ folders of one GPU, model and TP)
ENGINE_PAIRS = [("h200", "llama-3.1-8b", 1, "compiled", "fused"), ("h100-sxm", "llama-3.1-8b", 1, "compiled", "fused"),
                ("h200", "llama-3.1-8b", 1, "compiled", "unfused"), ("h200", "llama-3.1-70b", 2, "unfused", "fused"),
                ("h200", "llama-3.1-8b", 1, "fused-paged", "fused"),
                ("h100-sxm", "llama-3.1-8b", 1, "fused-paged", "fused")]


def h200_per_op() -> None:
    """The per-op profiles measured on the H200 against the whole steps of the engine they stand for, with
    contiguous and paged decode attention (as the H100's per-op columns)."""
    folder = PROFILES.parent / "h200"
    print("### The H200's per-op profiles (tp1/ops/, 12-04) against its whole steps\n")
    print("| per-op profile | table (rows) | per-op contiguous: median / max, mean signed | per-op paged |")
    print("| --- | --- | ---: | ---: |")
    for name, engine in H200_PER_OP:
        ops, table = folder / name / "tp1" / "ops", folder / name / "tp1" / "steps" / engine / "steps.csv"
        cells = []
        for kv in ("contiguous", "paged"):
            rep = check_rows(target(str(ops), kv=kv), table)
            signed = np.array([r["error_pct"] for r in rep["rows"]])
            cells.append(f"{stat(errors(rep))}, {signed.mean():+.1f}%")
        print(f"| {name} tp1/ops | {engine} ({len(pd.read_csv(table))}) | " + " | ".join(cells) + " |")


def engine_ratios() -> None:
    print("One engine's measured step over another's at the shapes both measured: median (range), by kind of step\n")
    print("| GPU | model | engines | all (shapes) | decode | mixed | prefill |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    for gpu, name, tp, engine, base in ENGINE_PAIRS:
        steps = PROFILES.parent / gpu / name / f"tp{tp}" / "steps"
        both = pd.read_csv(steps / engine / "steps.csv").merge(pd.read_csv(steps / base / "steps.csv"), on=_KEY,
                                                               suffixes=("_a", "_b"))
        ratio = both["step_s_a"] / both["step_s_b"]
        cells = [f"{ratio.median():.3f} ({ratio.min():.2f}-{ratio.max():.2f}, {len(ratio)})"]
        cells += [f"{ratio[both['kind'] == kind].median():.3f}" for kind in ("decode", "mixed", "prefill")]
        print(f"| {gpu} | {name} tp{tp} | {engine} / {base} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "gpu")
    args = parser.parse_args()
    warnings.simplefilter("ignore", StepFitWarning)
    print(f"benchmark CPU: {cpuinfo()['cpu_model']}, {platform.python_implementation()} {platform.python_version()} "
          "(the timings themselves were measured on the H100 named in each profile's meta.json)\n")
    print("| table (rows) | roofline | per-op contiguous | per-op paged | whole-step held out (LOO) |"
          " mixed + chunked from pure rows |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, tp, engine in TABLES:
            folder = PROFILES / name / f"tp{tp}" / "steps" / engine
            table = folder / "steps.csv"
            model = get_model(name)
            roof = check_rows(target("roofline", model, tp), table)
            loo = check_rows(target(str(folder)), table, loo=True)
            ops = PROFILES / name / f"tp{tp}" / "ops"
            per_op = {kv: stat(errors(check_rows(target(str(ops), kv=kv), table))) if ops.is_dir() else "n/a"
                      for kv in ("contiguous", "paged")}
            rows = pd.read_csv(table)
            pure = rows[(rows["kind"] == "decode") | ((rows["kind"] == "prefill") & (rows["prefill_context"] == 0))]
            held = rows.drop(pure.index)
            mixed = "no such rows"
            if len(held):
                pure.to_csv(tmp / "pure.csv", index=False)
                held.to_csv(tmp / "held.csv", index=False)
                out = tmp / f"pure-{name}-{tp}-{engine}"
                import_steps(tmp / "pure.csv", model, tp, device_name="H100", out=out, engine=engine,
                             engine_description=None, source="bench", method=None, dtype="bf16", device="cuda",
                             kv_layout="dense")
                rep = check_rows(target(str(out)), tmp / "held.csv")
                mixed = f"{stat(errors(rep))} ({len(held)} rows: " + ", ".join(
                    f"{r['shape']} {r['error_pct']:+.1f}%" for r in rep["rows"]) + ")"
            print(f"| {name} tp{tp} {engine} ({len(rows)}) | {stat(errors(roof))} | {per_op['contiguous']} | "
                  f"{per_op['paged']} | {stat(errors(loo, 'loo_error_pct'))} | {mixed} |")
        print("\nCells: median / max absolute error of the predicted step time against the measured one.\n")
        print("### The measured-kernel model (AIConfigurator's tables, `cost_model: {kind: measured}`) and the "
              "roofline against the steps measured here, H100 and H200\n")
        print("| GPU | table | measured kernels (AIC): median / max, mean signed | roofline: median / max, mean signed |")
        print("| --- | --- | ---: | ---: |")
        for gpu, folder, tables in (("h100-sxm", PROFILES, TABLES), ("h200", PROFILES.parent / "h200", H200_TABLES)):
            for name, tp, engine in tables:
                if engine == "fused-paged":
                    continue
                table = folder / name / f"tp{tp}" / "steps" / engine / "steps.csv"
                cells = []
                for kind in ("measured", "roofline"):
                    rep = check_rows(target(kind, get_model(name), tp, gpu=gpu), table)
                    signed = np.array([r["error_pct"] for r in rep["rows"]])
                    cells.append(f"{stat(errors(rep))}, {signed.mean():+.1f}%")
                print(f"| {gpu} | {name} tp{tp} {engine} | " + " | ".join(cells) + " |")
        print()
        if args.shared.is_dir():
            print("### Across machines: our H100 profiles against the tables measured on another H100 "
                  "(../shared/gpu)\n")
            print("| profile | table | median / max abs error | mean signed error |")
            print("| --- | --- | ---: | ---: |")
            for engine, table in (("unfused", "h100_llama-3.1-8b_whole_steps.csv"),
                                  ("compiled", "h100_llama-3.1-8b_whole_steps_compiled.csv"),
                                  ("fused", "h100_llama-3.1-8b_whole_steps_compiled.csv"),
                                  ("fused", "h100_llama-3.1-8b_whole_steps.csv")):
                rep = check_rows(target(str(PROFILES / "llama-3.1-8b" / "tp1" / "steps" / engine)),
                                 args.shared / table)
                signed = np.array([r["error_pct"] for r in rep["rows"]])
                print(f"| llama-3.1-8b tp1 {engine} | {table} | {stat(errors(rep))} | {signed.mean():+.1f}% |")
            ops = str(PROFILES / "llama-3.1-8b" / "tp1" / "ops")
            for label, tgt in (("per-op (tp1/ops), paged", target(ops, kv="paged")),
                               ("roofline h100-sxm", target("roofline", get_model("llama-3.1-8b"), 1))):
                for table in ("h100_llama-3.1-8b_whole_steps.csv", "h100_llama-3.1-8b_whole_steps_compiled.csv"):
                    rep = check_rows(tgt, args.shared / table)
                    signed = np.array([r["error_pct"] for r in rep["rows"]])
                    print(f"| {label} | {table} | {stat(errors(rep))} | {signed.mean():+.1f}% |")
    print()
    h200_new_tables("11-30: W8A8 fp8 steps, unfused and TP-2 shards", H200_NEW_TABLES,
                    (("llama-3.1-8b", 1, "fused"), ("qwen2.5-7b", 1, "fused"), ("llama-3.1-70b", 4, "fused")))
    print()
    h200_new_tables("12-04: the TP-2 unfused shard, the compiled engine, more fp8 shards", H200_TABLES_1204,
                    (("llama-3.1-70b", 2, "fused"), ("llama-3.1-70b", 8, "fused")))
    print()
    h200_new_tables("12-04 from 18:40: the unfused fp8 70B shards, the paged decode kernel", H200_TABLES_1204_EVENING,
                    (("llama-3.1-70b", 2, "unfused"), ("llama-3.1-70b", 8, "unfused")))
    print()
    h200_per_op()
    print()
    engine_ratios()


if __name__ == "__main__":
    main()
