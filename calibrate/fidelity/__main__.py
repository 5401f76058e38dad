"""`python -m calibrate.fidelity record ...` (in .venv-fidelity, with vLLM) and
`python -m calibrate.fidelity compare RUN_DIR --profile PROFILE` (in .venv)."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import typer

from sim.errors import ConfigError, ServeSimError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Fidelity of ServeSim against a real vLLM engine on this CPU.")

DEFAULT_LOADS = ["light=1.5", "medium=3.0", "high=5.0"]  # saturation is ~5 req/s for 100 requests


def _parse_loads(loads: list[str]) -> dict[str, float]:
    parsed = {}
    for item in loads:
        name, _, rate = item.partition("=")
        try:
            value = float(rate)
        except ValueError:
            value = -1.0
        if not name or value <= 0:
            raise ConfigError(f"--load: {item!r} is not NAME=RATE_PER_S with a positive rate; e.g. light=1.5")
        parsed[name] = value
    return parsed


@app.command()
def record(
    out: Path = typer.Option(Path("out/fidelity/vllm"), help="writes OUT/<load>/repeat-<k>/{requests.csv,meta.json}"),
    load: list[str] = typer.Option(DEFAULT_LOADS, help="NAME=RATE_PER_S, repeatable"),
    num_requests: int = typer.Option(100, min=1),
    repeats: int = typer.Option(3, min=1),
    first_row: int = typer.Option(0, min=0, help="first row of the Azure conv trace"),
    trace: Path = typer.Option(None, help="Azure conv trace CSV; default ../shared/traces/..., else Poisson"),
    threads: int = typer.Option(1, min=1),
    max_num_seqs: int = typer.Option(32, min=1),
    max_num_batched_tokens: int = typer.Option(512, min=1),
    seed: int = typer.Option(0, min=0),
) -> None:
    """Replay each load REPEATS times against vLLM (interleaved: repeat 1 of every load, then 2, ...)."""
    from .replay_vllm import EngineSettings, LlamaShape, pin_threads
    from .schedule import DEFAULT_TRACE, from_azure_trace, poisson

    settings = EngineSettings(threads=threads, max_num_seqs=max_num_seqs,
                              max_num_batched_tokens=max_num_batched_tokens)
    pin_threads(settings)  # before torch is imported
    from sim.atomic_files import atomic_dir, write_json

    from .replay_vllm import StepRecorder, replay, run_meta, start_engine

    rates = _parse_loads(load)
    trace_path = trace or DEFAULT_TRACE
    if trace is not None and not trace.is_file():
        raise ConfigError(f"--trace: '{trace}' is not a file; give the Azure conv trace CSV")
    schedules = {name: (from_azure_trace(trace_path, num_requests=num_requests, rate_per_s=rate, first_row=first_row)
                        if trace_path.is_file() else poisson(num_requests=num_requests, rate_per_s=rate, seed=seed))
                 for name, rate in rates.items()}
    shape = LlamaShape()
    engine, num_blocks = start_engine(shape, settings, seed=seed)
    recorder = StepRecorder(engine)
    for k in range(1, repeats + 1):
        for name, schedule in schedules.items():
            requests, steps = replay(engine, schedule, shape, seed=seed, recorder=recorder)
            num_steps = len(steps)
            target = out / name / f"repeat-{k}"
            with atomic_dir(target) as tmp:
                requests.to_csv(tmp / "requests.csv", index=False, float_format="%.6f")
                steps.to_csv(tmp / "steps.csv", index=False, float_format="%.6f")
                write_json(tmp / "meta.json", run_meta(shape, settings, num_blocks, schedule, seed=seed,
                                                       num_steps=num_steps, repeat=k))
            makespan = requests["finish_s"].max() - requests["arrival_s"].min()
            print(f"{name} repeat {k}: {len(requests)} requests, makespan {makespan:.2f} s, {num_steps} steps, "
                  f"{int(requests['num_preemptions'].sum())} preemptions -> {target}", flush=True)


@app.command()
def compare(
    run_dir: Path = typer.Argument(..., help="one load: requests.csv + meta.json, or repeat-*/ of them"),
    profile: Path = typer.Option(..., help="CPU profile folder from `python -m calibrate run` for this model"),
    out: Path = typer.Option(None, help="report folder; default RUN_DIR/compare"),
) -> None:
    """Simulate the recorded requests with ServeSim and report the error of each metric."""
    from .compare import compare_run, load_run, markdown_table, write_report

    run = load_run(run_dir)
    table, info = compare_run(run, profile)
    target = write_report(out or run_dir / "compare", run, table, info, profile)
    print(markdown_table(table), end="")
    print(f"report: {target / 'fidelity.md'}")


@app.command("fit-overhead")
def fit_overhead(
    run_dir: Path = typer.Argument(..., help="a calibration run (its requests are not the compared ones)"),
    profile: Path = typer.Option(..., help="kernel profile from `python -m calibrate run`"),
    out: Path = typer.Option(..., help="the kernel profile with vLLM's measured per-step overhead"),
) -> None:
    """Fit vLLM's per-step engine overhead from recorded steps; write it into a copy of the profile."""
    from sim.config.deployment import model_spec
    from sim.config.schema import Scenario
    from sim.cost.calibrated import CalibratedCostModel

    from .compare import load_run, scenario_dict
    import pandas as pd

    from .overhead import (
        KernelExcessWarning,
        fit_step_overhead,
        priced_steps,
        read_steps,
        write_engine_profile,
    )

    run = load_run(run_dir)
    scenario = Scenario.model_validate(scenario_dict(run.meta, 1))
    cost = CalibratedCostModel(profile, model_spec(scenario), block_size=scenario.kv_cache.block_size)
    repeat_dirs = sorted(d for d in run.path.glob("repeat-*") if d.is_dir()) or [run.path]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", KernelExcessWarning)
        fit = fit_step_overhead(priced_steps(read_steps(repeat_dirs), cost))
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    write_engine_profile(profile, fit, out, str(run_dir))
    shown = pd.concat([fit.table.assign(fitted="yes"), fit.excess.assign(fitted="NO: kernels exceed the steps")])
    print(shown.assign(median_ms=shown["median_s"] * 1e3)[["num_seqs", "median_ms", "num_steps", "fitted"]]
          .sort_values("num_seqs").to_string(index=False))
    print(f"kernel_excess: {json.dumps(fit.summary())}")
    print(f"profile: {out}")


@app.command("fit-steps")
def fit_steps(
    run_dir: Path = typer.Argument(..., help="a calibration run with steps.csv (its requests are not the compared ones)"),
    out: Path = typer.Option(..., help="profile folder to write (profile_kind engine_steps)"),
    folds: int = typer.Option(5, help="K of the K-fold cross-validation (contiguous blocks of steps)"),
) -> None:
    """Fit a step cost model to vLLM's recorded steps; choose its features by K-fold cross-validation."""
    from .compare import load_run
    from .stepfit import coefficients_text, cv_markdown, write_fit

    if folds < 2:
        raise ConfigError(f"--folds: {folds} is not allowed; allowed: an integer >= 2")
    cv, coefficients = write_fit(load_run(run_dir), out, folds)
    print(cv_markdown(cv), end="")
    print(f"chosen: {cv.chosen} (simplest within one standard error of the best held-out error)")
    print(coefficients_text(coefficients), end="")
    print(f"profile: {out}")


def main(argv: list[str] | None = None) -> int:
    """Exits 2 with one line for any input error (as `servesim`)."""
    try:
        app(args=argv, standalone_mode=False)
    except ServeSimError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except typer.Exit as exit_:
        sys.exit(exit_.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except typer.TyperException as err:  # usage errors: a missing argument, a bad option value
        print(f"error: {err.format_message()}", file=sys.stderr)
        sys.exit(2)
    return 0


if __name__ == "__main__":
    main()
