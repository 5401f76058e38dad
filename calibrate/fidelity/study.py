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
        rows.append(row)
    if not rows:
        raise ConfigError(f"OUT: '{out}' holds no comparisons (<model>/compare/<workload>/<load>/<cost model>/"
                          "fidelity.csv); run calibrate/fidelity/run_all.sh first")
    return pd.DataFrame(rows)


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
    summary = frame.groupby("cost_model")[keys].agg(lambda s: s.abs().max())
    lines += ["", "Worst absolute error per cost model over the whole matrix:", "",
              "| cost model | " + " | ".join(labels[k] for k in keys) + " |", "| --- | " + " | ".join("---:" for _ in keys) + " |"]
    for cm, r in summary.iterrows():
        lines.append(f"| {cm} | " + " | ".join(f"{r[k]:.1%}" for k in keys) + " |")
    return "\n".join(lines) + "\n"
