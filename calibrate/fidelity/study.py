"""One report for the whole study matrix (calibrate/fidelity/run_all.sh): every comparison under
OUT/<model>/compare/<workload>/<load>/<cost model>/, errors side by side, flags and machines listed."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from sim.errors import ConfigError

from .compare import METRICS, machine_line


def collect(out: Path) -> pd.DataFrame:
    """One row per comparison: model, workload, load, cost model, error per metric, flags."""
    rows = []
    for csv in sorted(Path(out).glob("*/compare/*/*/*/fidelity.csv")):
        cost_model, load, workload, model = csv.parent.name, csv.parents[1].name, csv.parents[2].name, csv.parents[4].name
        table = pd.read_csv(csv).set_index("metric")
        info = json.loads((csv.parent / "simulation.json").read_text())
        row = {"model": model, "workload": workload, "load": load, "cost_model": cost_model,
               "dtype": info.get("dtype", "bfloat16"),  # the recording's (compare checks the profile's against it)
               "repeats": int(table["repeats"].iloc[0]), "max_real_spread": float(table["real_spread"].max()),
               "kernel_excess": bool(info.get("kernel_excess")), "compared_on": machine_line(info.get("machine", {})),
               # share of the recorded steps outside the step model's calibration (NaN: not a step model)
               "uncovered_steps": (info["calibration_coverage"]["outside_fraction"]
                                   if "calibration_coverage" in info else float("nan"))}
        row.update({key: float(table.loc[key, "error"]) for key, _, _ in METRICS})
        # vLLM's own repeats spread (near saturation 10-20% here): how far ServeSim lies outside their range.
        row.update({f"{key}_beyond_range": beyond_range(table.loc[key]) for key, _, _ in METRICS})
        rows.append(row)
    if not rows:
        raise ConfigError(f"OUT: '{out}' holds no comparisons (<model>/compare/<workload>/<load>/<cost model>/"
                          "fidelity.csv); run calibrate/fidelity/run_all.sh first")
    return pd.DataFrame(rows)


def beyond_range(metric: pd.Series) -> float:
    """Distance from ServeSim's value to vLLM's [min, max] over repeats, relative to vLLM's median (0 inside)."""
    if "real_min" not in metric or not metric["real"]:
        return float("nan")
    sim, low, high = float(metric["simulated"]), float(metric["real_min"]), float(metric["real_max"])
    return max(0.0, sim - high, low - sim) / abs(float(metric["real"]))


def recording_machines(out: Path) -> list[str]:
    lines = set()
    for meta in Path(out).glob("*/vllm/*/*/repeat-1/meta.json"):
        lines.add(machine_line(json.loads(meta.read_text()).get("machine", {})))
    return sorted(lines)


def study_markdown(out: Path, frame: pd.DataFrame) -> str:
    keys = [k for k, _, _ in METRICS]
    labels = {k: label for k, label, _ in METRICS}
    lines = ["# Fidelity study", "", f"Comparisons: {len(frame)} under `{out}`. Error = (ServeSim - vLLM) / vLLM, "
             "vLLM the median of its repeats.", ""]
    lines += [f"- recorded on: {m}" for m in recording_machines(out)] or ["- recorded on: not found"]
    lines += [f"- served in: {', '.join(sorted(frame['dtype'].unique()))}"]
    flagged = frame[frame["kernel_excess"]]
    if len(flagged):
        lines += ["", f"**WARNING: in {len(flagged)} comparisons the kernel prices exceed measured vLLM steps** "
                      "(the overhead fit could not explain them; see each fidelity.md)."]
    uncovered = frame[frame["uncovered_steps"] > 0]
    if len(uncovered):
        lines += ["", f"**WARNING: in {len(uncovered)} step-model comparisons some recorded steps lie outside the "
                      "calibration run's steps** (column 'outside calibration'; the step model extrapolates there)."]
    lines += ["", "| model | workload | load | cost model | " + " | ".join(labels[k] for k in keys)
              + " | max repeat spread | outside calibration |",
              "| --- | --- | --- | --- | " + " | ".join("---:" for _ in keys) + " | ---: | ---: |"]
    for r in frame.itertuples():
        flag = " ⚠" if r.kernel_excess else ""
        outside = "" if r.uncovered_steps != r.uncovered_steps else f"{r.uncovered_steps:.0%}"  # NaN: not a step model
        lines.append(f"| {r.model} | {r.workload} | {r.load} | {r.cost_model}{flag} | "
                     + " | ".join(f"{getattr(r, k):+.1%}" for k in keys) + f" | {r.max_real_spread:.1%} | {outside} |")
    lines += ["", "The issue's goals per cost model (every mean metric within 10% of vLLM, both p90s within 15%, "
                  "no bias in one direction across loads):", "", goals_markdown(goal_summary(frame))]
    summary = frame.groupby("cost_model")[keys].agg(lambda s: s.abs().max())
    lines += ["", "Worst absolute error per cost model over the whole matrix:", "",
              "| cost model | " + " | ".join(labels[k] for k in keys) + " |", "| --- | " + " | ".join("---:" for _ in keys) + " |"]
    for cm, r in summary.iterrows():
        lines.append(f"| {cm} | " + " | ".join(f"{r[k]:.1%}" for k in keys) + " |")
    return "\n".join(lines) + "\n"


MEAN_KEYS = ("makespan_s", "throughput_tok_s", "ttft_mean_s", "tpot_mean_s", "e2e_mean_s")
P90_KEYS = ("ttft_p90_s", "e2e_p90_s")
MEAN_GOAL, P90_GOAL = 0.10, 0.15


def goal_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per cost model over the matrix's cells: how many meet the goals, the worst and mean errors, and
    the signed mean TPOT / E2E error at each load (a bias shows as one sign at every load)."""
    rows = []
    for cost_model, cells in frame.groupby("cost_model", sort=True):
        means, p90s = cells[list(MEAN_KEYS)].abs(), cells[list(P90_KEYS)].abs()
        row = {"cost_model": cost_model, "cells": len(cells),
               "cells_means_within_10pct": int((means.max(axis=1) <= MEAN_GOAL).sum()),
               "cells_p90s_within_15pct": int((p90s.max(axis=1) <= P90_GOAL).sum()),
               "worst_mean_error": float(means.to_numpy().max()), "mean_abs_mean_error": float(means.to_numpy().mean()),
               "worst_p90_error": float(p90s.to_numpy().max())}
        beyond = [f"{k}_beyond_range" for k in MEAN_KEYS]
        if set(beyond) <= set(cells.columns):
            row["cells_means_inside_repeat_range"] = int((cells[beyond] == 0).all(axis=1).sum())
            row["worst_mean_beyond_repeat_range"] = float(cells[beyond].to_numpy().max())
        for load, at in cells.groupby("load", sort=False):
            row[f"tpot_mean_signed_{load}"] = float(at["tpot_mean_s"].mean())
            row[f"e2e_mean_signed_{load}"] = float(at["e2e_mean_s"].mean())
        rows.append(row)
    return pd.DataFrame(rows)


def goals_markdown(goals: pd.DataFrame) -> str:
    loads = [c[len("tpot_mean_signed_"):] for c in goals.columns if c.startswith("tpot_mean_signed_")]
    head = ("| cost model | cells | all means within 10% | both p90s within 15% | worst mean | mean abs (means) | worst p90 | "
            "all means inside vLLM's repeat range | worst mean beyond that range | "
            + " | ".join(f"TPOT / E2E signed, {load}" for load in loads) + " |")
    lines = [head, "| --- | " + " | ".join("---:" for _ in range(8 + len(loads))) + " |"]
    for r in goals.to_dict("records"):
        inside = r.get("cells_means_inside_repeat_range")
        lines.append(f"| {r['cost_model']} | {r['cells']} | {r['cells_means_within_10pct']}/{r['cells']} | "
                     f"{r['cells_p90s_within_15pct']}/{r['cells']} | {r['worst_mean_error']:.1%} | "
                     f"{r['mean_abs_mean_error']:.1%} | {r['worst_p90_error']:.1%} | "
                     + (f"{inside}/{r['cells']} | {r['worst_mean_beyond_repeat_range']:.1%} | " if inside == inside and
                        inside is not None else "- | - | ")
                     + " | ".join(f"{r[f'tpot_mean_signed_{load}']:+.1%} / {r[f'e2e_mean_signed_{load}']:+.1%}"
                                  for load in loads) + " |")
    return "\n".join(lines)
