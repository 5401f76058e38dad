"""How much of a fidelity error is the reference's own noise: vLLM against itself, and the host's speed.

Two measurements from the recordings alone (no ServeSim, no cost model):

- `self_agreement`: each repeat of a cell scored against the median of its other repeats, exactly as a
  cost model is scored against the median of all of them (every mean within 10%, both p90s within 15%).
  A cost model cannot be shown closer to vLLM than vLLM's repeats of the same requests are to each other.
- `speed_index`: one step model (sim/cost/engine_steps.py's features) fitted jointly on every recording of
  a shape, with one factor per recording: steps of the same composition take factor× as long in that
  recording. The factors are relative to the calibration recordings' mean, so a cell's index is how much
  slower (> 1) or faster than during calibration the host ran while vLLM served that cell. A model fitted
  once on the calibration run carries the difference into every prediction.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sim.cost.engine_steps import feature_matrix, fit_relative

from .compare import load_run, relative_error, repeat_dirs_of, request_metrics
from .overhead import read_steps, step_plan
from .study import MEAN_GOAL, MEAN_KEYS, P90_GOAL, P90_KEYS

SPEED_FEATURES = ("const", "prefill_tokens", "decode_seqs", "decode_context", "prefill_attention")
CALIBRATION_LOAD = "calib"


def cell_dirs(out: Path) -> list[tuple[str, str, str, Path]]:
    """(model, workload, load, folder) of every recorded cell under a study's OUT (calibration excluded)."""
    load_dirs = sorted({d.parent for d in Path(out).glob("*/vllm/*/*/repeat-*") if d.is_dir()})
    return [(d.parents[2].name, d.parent.name, d.name, d) for d in load_dirs]


def self_agreement(out: Path, mean_goal: float = MEAN_GOAL, p90_goal: float = P90_GOAL) -> pd.DataFrame:
    """One row per (cell, repeat): that repeat's error against the median of the cell's other repeats.
    Cells with fewer than two repeats are skipped."""
    rows = []
    for model, workload, load, path in cell_dirs(out):
        metrics = [request_metrics(f) for f in load_run(path).repeats]
        for folder, mine in zip(repeat_dirs_of(path), metrics):
            others = [m for m in metrics if m is not mine]
            if not others:
                continue
            error = {k: relative_error(mine[k], float(np.median([o[k] for o in others]))) for k in mine}
            worst_mean = max(abs(error[k]) for k in MEAN_KEYS)
            worst_p90 = max(abs(error[k]) for k in P90_KEYS)
            rows.append({"model": model, "workload": workload, "load": load, "repeat": folder.name,
                         "worst_mean_error": worst_mean, "worst_p90_error": worst_p90,
                         "means_within_goal": worst_mean <= mean_goal, "p90s_within_goal": worst_p90 <= p90_goal,
                         **{f"{k}_error": v for k, v in error.items()}})
    return pd.DataFrame(rows)


def joint_speed_fit(recordings: list[pd.DataFrame], reference: list[int], iterations: int = 20
                    ) -> tuple[np.ndarray, dict[str, float], np.ndarray]:
    """Per-recording speed factors and one step model, fitted together on recorded steps.

    Alternates: the step model (non-negative, relative error) on every step divided by its recording's
    factor; each factor the median of its steps' measured / modelled time. Factors are scaled so the
    `reference` recordings' mean is 1. Returns (factors, coefficients, per recording its steps' residuals
    after both).
    """
    plans = [[step_plan(r) for r in steps.itertuples()] for steps in recordings]
    x = np.vstack([feature_matrix(p, SPEED_FEATURES) for p in plans])
    y = np.concatenate([(s["end_s"] - s["start_s"]).to_numpy(float) for s in recordings])
    owner = np.concatenate([np.full(len(s), i) for i, s in enumerate(recordings)])
    factor = np.ones(len(recordings))
    for _ in range(iterations):
        modelled = x @ fit_relative(x, y / factor[owner])
        new = np.array([np.median(y[owner == i] / modelled[owner == i]) for i in range(len(recordings))])
        new /= new[reference].mean()
        converged = np.allclose(new, factor, rtol=1e-9, atol=0)
        factor = new
        if converged:
            break
    beta = fit_relative(x, y / factor[owner])
    residual = y / (x @ beta * factor[owner]) - 1
    return (factor, dict(zip(SPEED_FEATURES, (float(b) for b in beta))),
            [residual[owner == i] for i in range(len(recordings))])


def speed_index(out: Path) -> pd.DataFrame:
    """One row per recording (calibration repeats included) of every shape with recorded steps: its speed
    factor relative to that shape's calibration recordings (or to all recordings' mean without any), and
    the median |residual| of its steps after the factor (the within-recording noise)."""
    rows = []
    cells = cell_dirs(out)
    for model in sorted({c[0] for c in cells}):
        calibration = Path(out) / model / "vllm" / CALIBRATION_LOAD
        dirs = [(CALIBRATION_LOAD, CALIBRATION_LOAD, d) for d in repeat_dirs_of(calibration)
                if calibration.is_dir() and (d / "steps.csv").is_file()]
        dirs += [(workload, load, d) for m, workload, load, path in cells if m == model
                 for d in repeat_dirs_of(path) if (d / "steps.csv").is_file()]
        if len(dirs) < 2:
            continue
        recordings = [read_steps([d]) for _, _, d in dirs]
        reference = [i for i, (w, _, _) in enumerate(dirs) if w == CALIBRATION_LOAD] or list(range(len(dirs)))
        factor, _, residuals = joint_speed_fit(recordings, reference)
        for i, (workload, load, d) in enumerate(dirs):
            rows.append({"model": model, "workload": workload, "load": load, "repeat": d.name,
                         "steps": len(recordings[i]), "speed_index": float(factor[i]),
                         "median_abs_residual": float(np.median(np.abs(residuals[i])))})
    return pd.DataFrame(rows)


def noise_markdown(agreement: pd.DataFrame, speed: pd.DataFrame) -> str:
    """The study report's section on the reference's own noise."""
    lines = ["## How much of the error is the host", ""]
    if not len(agreement) and not len(speed):
        return "\n".join(lines + ["No recordings with two or more repeats or recorded steps under OUT/<model>/vllm/."]) + "\n"
    if len(agreement):
        cells = agreement.groupby(["model", "workload", "load"])
        lines += [
            "vLLM against itself: each repeat of a cell against the median of its other repeats, scored as a cost "
            "model is scored.", "",
            f"- repeats with every mean within {MEAN_GOAL:.0%} of the others: {int(agreement['means_within_goal'].sum())}"
            f"/{len(agreement)}; with both p90s within {P90_GOAL:.0%}: "
            f"{int(agreement['p90s_within_goal'].sum())}/{len(agreement)}",
            f"- cells where every repeat has every mean within {MEAN_GOAL:.0%}: "
            f"{int(cells['means_within_goal'].all().sum())}/{cells.ngroups}; where the median repeat does: "
            f"{int((cells['worst_mean_error'].median() <= MEAN_GOAL).sum())}/{cells.ngroups}",
            f"- worst mean error of one repeat against the others: {agreement['worst_mean_error'].max():.1%}", ""]
    if len(speed):
        lines += ["The host's speed per recording (one step model fitted on every recording of a shape, one factor per "
                  "recording; 1 = the calibration recordings' mean, 1.10 = steps of the same composition took 10% longer):",
                  "", "| model | workload | load | repeats' speed index | median abs step residual |",
                  "| --- | --- | --- | --- | ---: |"]
        for (model, workload, load), group in speed.groupby(["model", "workload", "load"], sort=True):
            lines.append(f"| {model} | {workload} | {load} | "
                         + " / ".join(f"{v:.2f}" for v in group["speed_index"])
                         + f" | {group['median_abs_residual'].median():.1%} |")
        cells = speed[speed["workload"] != CALIBRATION_LOAD]
        if len(cells):
            lines += ["", f"- cells' recordings span speed {cells['speed_index'].min():.2f}-{cells['speed_index'].max():.2f} "
                          "of the calibration's; a model fitted once on the calibration run is off by that much before "
                          "any error of its own (more near saturation, where queues amplify it)."]
    return "\n".join(lines) + "\n"
