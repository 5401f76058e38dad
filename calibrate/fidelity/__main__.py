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

DEFAULT_LOADS = ["light=1.5", "medium=3.0", "high=5.0"]  # the AMX machine (bf16, saturation ~5 req/s); pick per machine


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


FIDELITY_DIR = Path(__file__).resolve().parent
DEFAULT_MODEL = FIDELITY_DIR / "model.yaml"
DEFAULT_WORKLOAD = FIDELITY_DIR / "workloads" / "azure-conv.yaml"


@app.command()
def record(
    out: Path = typer.Option(Path("out/fidelity/vllm"), help="writes OUT/<load>/repeat-<k>/{requests,steps}.csv + meta.json"),
    model: Path = typer.Option(DEFAULT_MODEL, help="architecture YAML/JSON (as `calibrate run --model`)"),
    workload: Path = typer.Option(DEFAULT_WORKLOAD, help="a ServeSim workload specification (YAML); each load sets its rate"),
    load: list[str] = typer.Option(DEFAULT_LOADS, help="NAME=RATE_PER_S, repeatable"),
    num_requests: int = typer.Option(100, min=1),
    repeats: int = typer.Option(3, min=1),
    first_repeat: int = typer.Option(1, min=1, help="number of the first repeat folder (repeat-K): run_all.sh "
                                     "records one repeat round at a time, a calibration round before each"),
    first_row: int = typer.Option(0, min=0, help="first request of the generated workload (a trace's row)"),
    raw_lengths: bool = typer.Option(False, help="keep generated lengths (default: divide and clip them to fit a CPU)"),
    kv_tokens: int = typer.Option(8192, min=1, help="KV cache capacity in tokens (vLLM gets the bytes for them)"),
    threads: int = typer.Option(1, min=1, help="OMP threads, bound to the first cores this process may use"),
    dtype: str = typer.Option("bfloat16", help="bfloat16 or float32: weights, activations and KV cache (the KV "
                              "bytes follow it); run_all.sh picks float32 on a CPU without AVX512-BF16/AMX"),
    max_num_seqs: int = typer.Option(32, min=1),
    max_num_batched_tokens: int = typer.Option(512, min=1),
    seed: int = typer.Option(0, min=0),
    dry_run: bool = typer.Option(False, help="check the options and print the schedules; start no engine"),
) -> None:
    """Replay each load REPEATS times against vLLM (interleaved: repeat 1 of every load, then 2, ...) into
    OUT/<load>/repeat-<FIRST_REPEAT>, repeat-<FIRST_REPEAT + 1>, ..."""
    import time

    from calibrate.arch import load_model

    from .machine import machine_info
    from .replay_vllm import (
        DTYPE_BYTES,
        EngineSettings,
        kv_bytes_for_tokens,
        pin_threads,
        shape_from_model,
    )
    from .schedule import LengthScaling, from_workload, read_workload

    started = time.perf_counter()
    if dtype not in DTYPE_BYTES:
        raise ConfigError(f"--dtype: {dtype!r} is not allowed; allowed: {', '.join(DTYPE_BYTES)}")
    spec = load_model(str(model))
    shape = shape_from_model(spec)
    rates = _parse_loads(load)
    raw = read_workload(workload)
    scaling = None if raw_lengths else LengthScaling()
    schedules = {name: from_workload(raw, num_requests=num_requests, rate_per_s=rate, seed=seed, first_row=first_row,
                                     max_context=shape.max_context, scaling=scaling, source=str(workload))
                 for name, rate in rates.items()}
    settings = EngineSettings(threads=threads, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                              dtype=dtype, kv_cache_bytes=kv_bytes_for_tokens(shape, kv_tokens, DTYPE_BYTES[dtype]))
    if kv_tokens < settings.block_size:
        raise ConfigError(f"--kv-tokens: {kv_tokens} is not allowed; allowed: at least one block ({settings.block_size})")
    cores = pin_threads(threads)  # before torch is imported
    machine = machine_info(threads, cores)
    if dry_run:
        for name, schedule in schedules.items():
            print(f"{name}: {len(schedule)} requests over {schedule.arrival_s[-1]:.1f} s, mean prompt "
                  f"{schedule.input_tokens.mean():.0f}, mean output {schedule.output_tokens.mean():.0f} tokens")
        print(f"model {spec.name}: {shape}; {dtype}; kv {kv_tokens} tokens = {settings.kv_cache_bytes} bytes; "
              f"threads {threads} on cores {cores}")
        return
    from sim.atomic_files import atomic_dir, write_json

    from .replay_vllm import StepRecorder, replay, run_meta, start_engine

    engine, num_blocks = start_engine(shape, settings, seed=seed)
    recorder = StepRecorder(engine)
    phases = {"engine_start_s": round(time.perf_counter() - started, 2)}
    for k in range(first_repeat, first_repeat + repeats):
        for name, schedule in schedules.items():
            replay_started = time.perf_counter()
            requests, steps = replay(engine, schedule, shape, seed=seed, recorder=recorder)
            num_steps = len(steps)
            target = out / name / f"repeat-{k}"
            with atomic_dir(target) as tmp:
                requests.to_csv(tmp / "requests.csv", index=False, float_format="%.6f")
                steps.to_csv(tmp / "steps.csv", index=False, float_format="%.6f")
                write_json(tmp / "meta.json", run_meta(shape, settings, num_blocks, schedule, seed=seed,
                                                       num_steps=num_steps, repeat=k, machine=machine,
                                                       phases_s=phases | {"replay_s": round(time.perf_counter() - replay_started, 2)})
                           | {"model_file": str(model), "kv_tokens_requested": kv_tokens})
            makespan = requests["finish_s"].max() - requests["arrival_s"].min()
            print(f"{name} repeat {k}: {len(requests)} requests, makespan {makespan:.2f} s, {num_steps} steps, "
                  f"{int(requests['num_preemptions'].sum())} preemptions -> {target}", flush=True)


@app.command()
def compare(
    run_dir: Path = typer.Argument(..., help="one load: requests.csv + meta.json, or repeat-*/ of them"),
    profile: Path = typer.Option(..., help="CPU profile folder from `python -m calibrate run` for this model"),
    out: Path = typer.Option(None, help="report folder; default RUN_DIR/compare"),
    model: Path = typer.Option(None, help="architecture YAML/JSON the run must have served (checked against its meta.json)"),
) -> None:
    """Simulate the recorded requests with ServeSim and report the error of each metric."""
    from .compare import compare_run, load_run, markdown_table, write_report

    run = load_run(run_dir)
    if model is not None:
        from dataclasses import asdict

        from calibrate.arch import load_model

        from .replay_vllm import shape_from_model
        want = asdict(shape_from_model(load_model(str(model))))
        if want != run.meta["model"]:
            diff = ", ".join(f"{k} {run.meta['model'].get(k)} (file {v})" for k, v in want.items()
                             if run.meta["model"].get(k) != v)
            raise ConfigError(f"--model: '{model}' is not the architecture '{run_dir}' served: {diff}")
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
    import pandas as pd

    from sim.config.deployment import model_spec
    from sim.config.schema import Scenario
    from sim.cost.calibrated import CalibratedCostModel

    from .compare import check_profile_dtype, load_run, repeat_dirs_of, scenario_dict
    from .overhead import (
        KernelExcessWarning,
        fit_step_overhead,
        priced_steps,
        read_steps,
        write_engine_profile,
    )

    run = load_run(run_dir)
    check_profile_dtype(run.meta, profile)
    scenario = Scenario.model_validate(scenario_dict(run.meta, 1))
    cost = CalibratedCostModel(profile, model_spec(scenario), block_size=scenario.kv_cache.block_size)
    repeat_dirs = repeat_dirs_of(run.path)
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


@app.command("study-report")
def study_report(
    out_dir: Path = typer.Argument(..., help="the study's OUT folder (calibrate/fidelity/run_all.sh)"),
    out: Path = typer.Option(..., help="the markdown report to write (a CSV beside it)"),
) -> None:
    """One report of every comparison in the study matrix, and of the reference's own noise (vLLM's repeats
    against each other, the host's speed per recording: calibrate/fidelity/noise.py)."""
    from sim.atomic_files import write_output_file
    from sim.views.output_paths import check_output_file

    from .noise import noise_markdown, self_agreement, speed_index
    from .study import collect, goal_summary, study_markdown

    paths = {"report": out, "table": out.with_suffix(".csv"), "goals": out.with_name(out.stem + "-goals.csv"),
             "agreement": out.with_name(out.stem + "-self-agreement.csv"),
             "speed": out.with_name(out.stem + "-speed.csv")}
    for path in paths.values():
        check_output_file(path)  # all of them before writing any
    frame = collect(out_dir)
    agreement, speed = self_agreement(out_dir), speed_index(out_dir)
    write_output_file(paths["report"], study_markdown(out_dir, frame) + "\n" + noise_markdown(agreement, speed))
    write_output_file(paths["table"], frame.to_csv(index=False))
    write_output_file(paths["goals"], goal_summary(frame).to_csv(index=False))
    write_output_file(paths["agreement"], agreement.to_csv(index=False))
    write_output_file(paths["speed"], speed.to_csv(index=False))
    print(f"study report: {out} ({len(frame)} comparisons)")


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
