"""`python -m calibrate run|steps|fit|selftest|paged-bench`. Bad input: one line naming the option, the value and what is
allowed; exit 2 (as `servesim`)."""

from __future__ import annotations

import datetime as dt
import json
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sim.errors import ConfigError

from .grids import GRIDS, make_grid

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="Time a model's kernels on this machine and fit ServeSim's calibrated cost model.")
console = Console(width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True)

DEVICES = ("cpu", "cuda")
DTYPES = ("bf16", "fp16", "fp32")


def _choice(option: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(f"{option}: {value!r} is not allowed; allowed: {', '.join(allowed)}")
    return value


def _at_least_one(option: str, value: int) -> int:
    if value < 1:
        raise ConfigError(f"{option}: {value} is not allowed; allowed: an integer >= 1")
    return value


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _device_info(torch, device: str) -> dict:
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        driver = None
        try:
            import subprocess
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=10).stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            pass
        return {"device_name": props.name, "driver": driver, "cuda": torch.version.cuda,
                "device_memory_bytes": props.total_memory}
    cpu_name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"device_name": cpu_name, "driver": f"{platform.system()} {platform.release()}", "cuda": None}


@app.command()
def run(model: str = typer.Option(..., "--model", help="catalog model name, or a YAML/JSON file with an inline architecture"),
        tp: int = typer.Option(1, "--tp", help="tensor-parallel degree: measure one GPU's shard"),
        dtype: str = typer.Option("bf16", "--dtype", help="bf16 | fp16 | fp32"),
        device: str = typer.Option("cpu", "--device", help="cpu | cuda"),
        threads: int = typer.Option(1, "--threads", help="CPU threads torch may use"),
        block_size: int = typer.Option(16, "--block-size", help="paged KV: tokens per block"),
        grid: str = typer.Option("quick", "--grid", help="quick (CPU, CI) | full (GPU)"),
        out: Path = typer.Option(..., "--out", help="profile folder (a rerun resumes into it)"),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar")):
    """Time every kernel of one layer of the model's per-GPU shard and write a profile folder."""
    from sim.memory import check_tensor_parallel

    from .arch import load_model
    _choice("--dtype", dtype, DTYPES)
    _choice("--device", device, DEVICES)
    _choice("--grid", grid, GRIDS)
    _at_least_one("--threads", threads)
    _at_least_one("--block-size", block_size)
    spec = load_model(model)
    if spec.attention == "mla":
        raise ConfigError(f"--model: {spec.name} uses attention 'mla', which calibration does not support yet; "
                          "allowed: mha, mqa, gqa models")
    check_tensor_parallel(spec, tp, "--tp")
    try:
        import torch
    except ImportError:
        raise ConfigError("--device: calibration needs torch; install it with "
                          "`pip install torch==2.13.0 triton` (or `pip install -e '.[calibrate]'`)") from None
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device: 'cuda' requested but torch {torch.__version__} sees no CUDA device; "
                          "allowed here: cpu")
    torch.set_num_threads(threads)

    from .bench import ShardBench
    from .store import ProfileWriter
    from .timing import time_cpu, time_cuda
    bench = ShardBench(spec, tp, dtype, device, block_size)
    the_grid = make_grid(grid, spec.max_context)
    started = time.perf_counter()
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    meta = {
        "device": device, **_device_info(torch, device),
        "torch_version": torch.__version__, "triton_version": _version("triton"),
        "dtype": dtype, "threads": threads, "date": now, "started": now,
        "model": spec.model_dump(mode="json"), "tensor_parallel": tp, "block_size": block_size,
        "grid": the_grid.as_dict(), "shard": bench.shard,
        "timer": ("triton.testing.do_bench (CUDA events, L2 flushed between repetitions)" if device == "cuda"
                  else "time.perf_counter_ns per call after warm-up"),
        "paged_decode_impl": bench.paged_impl,
        "prefill_attention_impl": "torch SDPA, bottom-right causal mask (flash attention on GPU where supported)",
    }
    writer = ProfileWriter(out, meta)
    if not quiet:
        err_console.print(f"checking kernels of {spec.name} (tp {tp}, {dtype}, {device}) against float64 references")
    checks = bench.run_checks()
    timer = time_cuda if device == "cuda" else time_cpu
    points = list(bench.points(the_grid))
    todo = [p for p in points if not writer.has(p.family, p.key)]
    with Progress(TextColumn("[bold]calibrate[/bold] {task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err_console, disable=quiet) as progress:
        task = progress.add_task("", total=len(points), completed=len(points) - len(todo))
        for point in todo:
            progress.update(task, description=f"{point.family} {point.key}")
            call = point.make()
            # The engine loop is host work: wall clock on every device.
            timing = time_cpu(call, the_grid.seconds_per_point) if point.family == "step_overhead" \
                else timer(call, the_grid.seconds_per_point)
            writer.add(point.family, point.key, timing)
            del call
            progress.advance(task)
    writer.finish(finished=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                  checks_relative_error=checks,
                  measured_s_this_run=round(time.perf_counter() - started, 2))
    console.print(f"profile written to {out}/ ({len(points)} points, {len(todo)} measured in this run, "
                  f"{time.perf_counter() - started:.1f} s)")


def _import_torch(device: str):
    try:
        import torch
    except ImportError:
        raise ConfigError("--device: calibration needs torch; install it with "
                          "`pip install torch==2.13.0 triton` (or `pip install -e '.[calibrate]'`)") from None
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device: 'cuda' requested but torch {torch.__version__} sees no CUDA device; "
                          "allowed here: cpu")
    return torch


def _load_dense_model(model: str, tp: int):
    from sim.memory import check_tensor_parallel

    from .arch import load_model
    spec = load_model(model)
    if spec.attention == "mla":
        raise ConfigError(f"--model: {spec.name} uses attention 'mla', which calibration does not support yet; "
                          "allowed: mha, mqa, gqa models")
    check_tensor_parallel(spec, tp, "--tp")
    return spec


@app.command()
def steps(model: str = typer.Option(..., "--model", help="catalog model name, or a YAML/JSON file with an inline architecture"),
          tp: int = typer.Option(1, "--tp", help="tensor-parallel degree: measure one GPU's shard"),
          dtype: str = typer.Option("bf16", "--dtype", help="bf16 | fp16 | fp32"),
          device: str = typer.Option("cpu", "--device", help="cpu | cuda"),
          engine: str = typer.Option("fused", "--engine", help="unfused | fused | compiled"),
          kv: str = typer.Option("dense", "--kv", help="decode KV layout: dense | paged"),
          block_size: int = typer.Option(16, "--block-size", help="paged KV: tokens per block"),
          grid: str = typer.Option("quick", "--grid", help="quick (CPU, CI) | full (GPU)"),
          layers: int = typer.Option(0, "--layers", help="decoder layers to run (0: the model's own count)"),
          reps: int = typer.Option(20, "--reps", help="timed repetitions per step (median, p20, p80)"),
          threads: int = typer.Option(1, "--threads", help="CPU threads torch may use"),
          out: Path = typer.Option(..., "--out", help="profile folder (a rerun resumes into it)"),
          quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar")):
    """Time whole engine steps of the model's per-GPU shard (CUDA-graph replays on a GPU) and write a steps profile."""
    from .steps import ENGINE_DESCRIPTIONS, ENGINES, KV_LAYOUTS, STEP_GRIDS
    _choice("--dtype", dtype, DTYPES)
    _choice("--device", device, DEVICES)
    _choice("--engine", engine, ENGINES)
    _choice("--kv", kv, KV_LAYOUTS)
    _choice("--grid", grid, STEP_GRIDS)
    _at_least_one("--block-size", block_size)
    _at_least_one("--threads", threads)
    _at_least_one("--reps", reps)
    if layers < 0:
        raise ConfigError(f"--layers: {layers} is not allowed; allowed: 0 (the model's own count) or an integer >= 1")
    spec = _load_dense_model(model, tp)
    if spec.is_moe:
        raise ConfigError(f"--model: {spec.name} is a mixture-of-experts model, which step measurement does not "
                          "support yet; allowed: dense models")
    torch = _import_torch(device)
    torch.set_num_threads(threads)

    from .steps import ShardModel, StepsWriter, measure_steps, step_grid
    started = time.perf_counter()
    shapes = step_grid(grid, spec.max_context)
    the_model = ShardModel(spec, tp, dtype=dtype, device=device, engine=engine, kv_layout=kv, block_size=block_size,
                           num_layers=layers or None)
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    method = (f"the whole step captured as ONE CUDA graph per shape after 2 warm-up steps on a side stream, replayed "
              f"{reps} times back to back, each replay timed with CUDA events; median, p20, p80"
              if device == "cuda" else
              f"the eager step timed with time.perf_counter {reps} times after one warm-up step; median, p20, p80")
    meta = {
        "model": spec.model_dump(mode="json"), "tensor_parallel": tp, "shard": the_model.shard,
        "layers": the_model.num_layers,
        "device": device, **_device_info(torch, device),
        "torch_version": torch.__version__, "triton_version": _version("triton"),
        "dtype": dtype, "threads": threads, "date": now, "started": now,
        "engine": engine, "engine_description": ENGINE_DESCRIPTIONS[engine], "op_impls": the_model.op_impls(),
        "method": method, "source": "measured by python -m calibrate steps", "includes_communication": False,
        "kv_layout": kv, "block_size": block_size if kv == "paged" else None, "grid": grid,
        "weights": ("distinct weights per layer" if the_model.distinct_weights
                    else "one set of weights shared by every layer (each still run as its own layer call)"),
        "columns": "step_s, p20_s, p80_s: seconds of one step; decode_context counts the new token",
    }
    writer = StepsWriter(out, meta)
    todo = [s for s in shapes if not writer.has(s)]
    skipped: list[dict] = []
    with Progress(TextColumn("[bold]steps[/bold] {task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err_console, disable=quiet) as progress:
        task = progress.add_task("", total=len(shapes), completed=len(shapes) - len(todo))

        def on_point(shape, timing, why):
            if timing is None:
                skipped.append({**dict(zip(("kind", "prefill_tokens", "prefill_context", "decode_batch",
                                            "decode_context"), shape.key())), "why": why})
            else:
                writer.add(shape, timing)
            progress.update(task, description=f"{shape.key()}")
            progress.advance(task)
        measure_steps(the_model, todo, reps, on_point)
    writer.finish(finished=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), skipped_points=skipped,
                  measured_s_this_run=round(time.perf_counter() - started, 2))
    console.print(f"steps profile written to {out}/ ({len(writer.rows)} steps, {len(skipped)} skipped for memory, "
                  f"{time.perf_counter() - started:.1f} s)")


@app.command()
def fit(profile: Path = typer.Argument(..., help="profile folder from `python -m calibrate run`"),
        every: int = typer.Option(3, "--every", help="hold out every k-th interior grid value along each axis"),
        as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table")):
    """Held-out error per op: interpolate each held-out shape from the others."""
    from sim.calibrated import load_profile

    from .fit import fit_report
    if every < 2:
        raise ConfigError(f"--every: {every} is not allowed; allowed: an integer >= 2")
    report = fit_report(load_profile(profile, field="PROFILE"), every)
    if as_json:
        print(json.dumps(report.to_dict("records"), indent=2))
        return
    meta = load_profile(profile, field="PROFILE").meta
    table = Table(title=f"held-out error: {meta['model']['name']} tp{meta['tensor_parallel']} on "
                        f"{meta.get('device_name')} ({meta['dtype']}, {meta['threads']} thread(s))")
    for col in report.columns:
        table.add_column(col, justify="left" if col == "op" else "right")
    for row in report.itertuples(index=False):
        table.add_row(*[f"{v:.2f}" if isinstance(v, float) else str(v) for v in row])
    console.print(table)
    overall = report["median_ape_pct"].median()
    console.print(f"median over ops of the held-out median absolute percentage error: {overall:.2f}%")


def main(argv: list[str] | None = None) -> int:
    from sim.cli import run_app
    return run_app(app, argv)
