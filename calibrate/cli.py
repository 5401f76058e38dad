"""`python -m calibrate run|steps|fit|selftest|paged-bench|import-steps|check`. Bad input: one line naming the
option, the value and what is
allowed; exit 2 (as `servesim`)."""

from __future__ import annotations

import contextlib

import datetime as dt
import json
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
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


def device_info(torch, device: str) -> dict:
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
    from .fidelity.machine import cpuinfo
    cpu_name = cpuinfo()["cpu_model"]
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
    _choice("--dtype", dtype, DTYPES)
    _choice("--device", device, DEVICES)
    _choice("--grid", grid, GRIDS)
    _at_least_one("--threads", threads)
    _at_least_one("--block-size", block_size)
    spec = _load_dense_model(model, tp)
    torch = _import_torch(device)
    torch.set_num_threads(threads)
    # vLLM runs every step under torch.inference_mode (its model runner's execute_model), which skips the
    # autograd and version-counter dispatch each op otherwise pays: a few microseconds per small CPU op.
    # On CUDA the graph replays carry no such host work, so the GPU path is left as it was measured.
    with torch.inference_mode() if device == "cpu" else contextlib.nullcontext():
        _measure(torch, spec, model, tp, dtype, device, threads, block_size, grid, out, quiet)


def _measure(torch, spec, model, tp, dtype, device, threads, block_size, grid, out, quiet):
    from .bench import GRAPH_CALLS, ShardBench
    from .store import ProfileWriter
    from .timing import time_cpu, time_cuda_graph
    bench = ShardBench(spec, tp, dtype, device, block_size)
    the_grid = make_grid(grid, spec.max_context)
    started = time.perf_counter()
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    meta = {
        "device": device, **device_info(torch, device),
        "torch_version": torch.__version__, "triton_version": _version("triton"),
        "dtype": dtype, "threads": threads, "date": now, "started": now,
        "grad_mode": ("torch.inference_mode, as vLLM's execute_model" if device == "cpu" else "default (autograd on)"),
        "model": spec.model_dump(mode="json"), "tensor_parallel": tp, "block_size": block_size,
        "grid": the_grid.as_dict(), "shard": bench.shard,
        "timer": (f"calibrate.timing.time_cuda_graph: {GRAPH_CALLS} back-to-back calls captured in one CUDA graph "
                  "after warm-up on a side stream, replays timed with CUDA events, per call = replay / "
                  f"{GRAPH_CALLS}; activations reused (warm in L2 as in a step), weights and KV rotated among copies "
                  "exceeding twice the L2 (cold, as each layer reads its own)" if device == "cuda"
                  else "time.perf_counter_ns per call after warm-up"),
        "op_impls": bench.op_impls(),
        "op_notes": ("rmsnorm is timed as the fused residual add + RMSNorm an engine runs; residual_add as a plain "
                     "add (the cost model adds two per layer: an upper bound where the engine fuses them)"
                     if device == "cuda" else
                     ("linears, attention, norms, rotary and the activation through vLLM's own CPU kernels and "
                      "layers (op_impls), the other ops plain torch; rmsnorm is vLLM's norm with the residual add "
                      "inside, so elementwise_per_layer counts no residual_add; timed one call at a time"
                      if bench.engine_elem is not None else
                      "linears and attention through vLLM's own CPU kernels (op_impls), the other ops plain torch; "
                      "timed one call at a time" if bench.engine_attn is not None else
                      "every op plain torch, timed one call at a time")),
        "elementwise_per_layer": bench.elementwise_per_layer(),
        "paged_decode_impl": bench.paged_impl,
        "prefill_attention_impl": (bench.prefill_impl if bench.engine_attn is not None else
                                   "torch SDPA, bottom-right causal mask (flash attention on GPU where supported)"),
    }
    if bench.engine_attn is not None:
        probe = bench.engine_probe(lambda call: time_cpu(call, the_grid.seconds_per_point))
        meta["engine_probe"] = probe
        for r in probe:
            console.print(f"engine probe: {r['op']} {r['shape']}: engine {r['engine_s'] * 1e6:.1f} us, torch stand-in "
                          f"{r['stand_in_s'] * 1e6:.1f} us ({r['stand_in_over_engine']:.2f}x)")
    writer = ProfileWriter(out, meta)
    if not quiet:
        err_console.print(f"checking kernels of {spec.name} (tp {tp}, {dtype}, {device}) against float64 references")
    checks = bench.run_checks()
    def timer(call, budget_s):
        if device == "cuda":
            # Graph replays of GRAPH_CALLS calls vary little: a quarter of the grid's budget is plenty.
            return time_cuda_graph(call, calls=GRAPH_CALLS, budget_s=budget_s / 4)
        return time_cpu(call, budget_s)
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
    from sim.model.memory import check_tensor_parallel

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
          attention: str = typer.Option("flash", "--attention", help="flash (tiled SDPA backends) | materialized "
                                        "(torch's math backend: the scores written and read back)"),
          weights: str = typer.Option("", "--weights", help="GEMM weights: fp8 (W8A8, per-tensor scales, as vLLM "
                                      "runs an fp8 checkpoint); absent: the --dtype"),
          block_size: int = typer.Option(16, "--block-size", help="paged KV: tokens per block"),
          grid: str = typer.Option("quick", "--grid", help="quick (CPU, CI) | full (GPU)"),
          layers: int = typer.Option(0, "--layers", help="decoder layers to run (0: the model's own count)"),
          reps: int = typer.Option(20, "--reps", help="timed repetitions per step (median, p20, p80)"),
          threads: int = typer.Option(1, "--threads", help="CPU threads torch may use"),
          out: Path = typer.Option(..., "--out", help="profile folder (a rerun resumes into it)"),
          quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar")):
    """Time whole engine steps of the model's per-GPU shard (CUDA-graph replays on a GPU) and write a steps profile."""
    from sim.model.attention_io import ATTENTION_KERNELS

    from .steps import ENGINE_DESCRIPTIONS, ENGINES, FP8_INPUT_SCALE, KV_LAYOUTS, STEP_GRIDS
    _choice("--dtype", dtype, DTYPES)
    _choice("--device", device, DEVICES)
    _choice("--engine", engine, ENGINES)
    _choice("--kv", kv, KV_LAYOUTS)
    _choice("--attention", attention, ATTENTION_KERNELS)
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
    if weights:
        from .steps import WEIGHT_FORMATS
        _choice("--weights", weights, WEIGHT_FORMATS)
    the_model = ShardModel(spec, tp, dtype=dtype, device=device, engine=engine, kv_layout=kv, block_size=block_size,
                           num_layers=layers or None, attention=attention, weights=weights or None)
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    method = (f"the whole step captured as ONE CUDA graph per shape after 2 warm-up steps on a side stream, replayed "
              f"{reps} times back to back, each replay timed with CUDA events; median, p20, p80"
              if device == "cuda" else
              f"the eager step timed with time.perf_counter {reps} times after one warm-up step; median, p20, p80")
    meta = {
        "model": spec.model_dump(mode="json"), "tensor_parallel": tp, "shard": the_model.shard,
        "layers": the_model.num_layers,
        "device": device, **device_info(torch, device),
        "torch_version": torch.__version__, "triton_version": _version("triton"),
        "dtype": dtype, "threads": threads, "date": now, "started": now,
        "grad_mode": ("torch.inference_mode, as vLLM's execute_model" if device == "cpu" else "default (autograd on)"),
        "engine": engine, "engine_description": ENGINE_DESCRIPTIONS[engine], "op_impls": the_model.op_impls(),
        "method": method, "source": "measured by python -m calibrate steps", "includes_communication": False,
        "kv_layout": kv, "block_size": block_size if kv == "paged" else None, "grid": grid,
        # The kernel attention ran with: a cost model built from this profile prices only it (sim/cost/attention_support.py).
        "attention_kernel": attention,
        # What a scenario's quantization must be to use this profile (sim/cost/profile_meta.py check_profile_dtypes).
        **({"weight_dtype": "fp8", "fp8_compute": True, "activation_scales": f"static, per tensor: "
            f"{FP8_INPUT_SCALE:.6g} (inputs within ±8 kept, beyond saturated)"} if weights == "fp8" else {}),
        "weights": ("distinct weights per layer" if the_model.distinct_weights
                    else "one set of weights shared by every layer (each still run as its own layer call)"),
        "columns": "step_s, p20_s, p80_s: seconds of one step; decode_context counts the new token",
    }
    meta["source"] += f" on {meta['device_name']}"  # a shipped profile names its GPU (test_step_profile.py)

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
def selftest(model: str = typer.Option("llama-3.1-8b", "--model", help="catalog model name or architecture file: the shapes checked"),
             tp: int = typer.Option(1, "--tp", help="tensor-parallel degree of the shard checked"),
             dtype: str = typer.Option("bf16", "--dtype", help="bf16 | fp16 | fp32"),
             device: str = typer.Option("cpu", "--device", help="cpu (Triton interpreted, slow) | cuda"),
             block_size: int = typer.Option(16, "--block-size", help="paged KV: tokens per block")):
    """Check every Triton kernel and fused op against float64 references on this device; print the errors."""
    _choice("--dtype", dtype, DTYPES)
    _choice("--device", device, DEVICES)
    _at_least_one("--block-size", block_size)
    spec = _load_dense_model(model, tp)
    _import_torch(device)
    from .gpucheck import SelfTestError, print_selftest
    from .gpucheck import selftest as run_selftest
    started = time.perf_counter()
    results = run_selftest(spec, tp, dtype, device, block_size)
    print_selftest(results, console)
    failed = [r.name for r in results if not r.ok]
    console.print(f"selftest: {len(results) - len(failed)}/{len(results)} checks passed in "
                  f"{time.perf_counter() - started:.1f} s")
    if failed:
        raise SelfTestError(f"selftest: {len(failed)} check(s) differ from their float64 reference beyond the "
                            f"allowed error: {', '.join(sorted(set(failed)))}")


@app.command("paged-bench")
def paged_bench(model: str = typer.Option("llama-3.1-8b", "--model", help="catalog model name or architecture file"),
                tp: int = typer.Option(1, "--tp", help="tensor-parallel degree of the shard"),
                dtype: str = typer.Option("bf16", "--dtype", help="bf16 | fp16 | fp32"),
                device: str = typer.Option("cpu", "--device", help="cpu | cuda"),
                block_size: int = typer.Option(16, "--block-size", help="paged KV: tokens per block"),
                grid: str = typer.Option("full", "--grid", help="full (the decode grid) | quick (tiny, for a dry run)"),
                out: Path | None = typer.Option(None, "--out", help="also write the table to this CSV file")):
    """Paged decode kernel against dense SDPA over the same contexts: seconds per call and their ratio."""
    _choice("--dtype", dtype, DTYPES)
    _choice("--device", device, DEVICES)
    _choice("--grid", grid, GRIDS)
    _at_least_one("--block-size", block_size)
    if out is not None:
        from sim.views.output_paths import check_output_file
        check_output_file(out)  # before timing, not after
    spec = _load_dense_model(model, tp)
    _import_torch(device)
    from .gpucheck import DECODE_BATCHES, DECODE_CONTEXTS
    from .gpucheck import paged_bench as run_paged_bench
    batches, contexts = (DECODE_BATCHES, DECODE_CONTEXTS) if grid == "full" else ((1, 4), (32, 128))
    contexts = tuple(c for c in contexts if c <= spec.max_context)
    rows = run_paged_bench(spec, tp, dtype, device, block_size, batches, contexts)
    table = Table(title=f"decode attention, {spec.name} tp{tp} ({dtype}, {device}): paged kernel / dense SDPA")
    for col in ("batch", "context", "dense us", "paged us", "paged / dense"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["decode_batch"]), str(r["decode_context"]), f"{r['dense_s'] * 1e6:.1f}",
                      f"{r['paged_s'] * 1e6:.1f}", f"{r['ratio']:.2f}")
    console.print(table)
    if rows:
        ratios = sorted(r["ratio"] for r in rows)
        console.print(f"paged / dense: median {ratios[len(ratios) // 2]:.2f}, worst {ratios[-1]:.2f} "
                      f"over {len(rows)} points")
    if out is not None:
        import pandas as pd

        from sim.atomic_files import write_output_file
        write_output_file(out, pd.DataFrame(rows).to_csv(index=False, float_format="%.6e"))


@app.command()
def fit(profile: Path = typer.Argument(..., help="profile folder from `python -m calibrate run`"),
        every: int = typer.Option(3, "--every", help="hold out every k-th interior grid value along each axis"),
        as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table")):
    """Held-out error per op: interpolate each held-out shape from the others."""
    from sim.cost.calibrated import load_profile

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



@app.command("import-steps")
def import_steps(table: Path = typer.Argument(..., help="CSV: kind,prefill_tokens[,prefill_context],decode_batch,"
                                              "decode_context,step_s[,p20_s,p80_s]"),
                 model: str = typer.Option(..., "--model", help="catalog model name, or a YAML/JSON architecture file"),
                 tp: int = typer.Option(..., "--tp", help="tensor-parallel degree the table's shard belongs to"),
                 device_name: str = typer.Option(..., "--device-name", help="the GPU (or CPU) the table was measured on"),
                 engine: str = typer.Option("unspecified", "--engine",
                                            help="which engine ran the steps: unfused | fused | compiled | an id"),
                 engine_description: str = typer.Option(None, "--engine-description", help="one sentence"),
                 source: str = typer.Option(None, "--source", help="where the numbers came from"),
                 method: str = typer.Option(None, "--method", help="how the steps were timed, one sentence"),
                 dtype: str = typer.Option("bf16", "--dtype", help="bf16 | fp16 | fp32"),
                 device: str = typer.Option("cuda", "--device", help="cuda | cpu"),
                 kv_layout: str = typer.Option("dense", "--kv-layout", help="dense | paged: the KV cache decodes read"),
                 out: Path = typer.Option(..., "--out", help="profile folder to write (replaced if it is a profile)")):
    """Check a measured whole-step table and write it as a whole-step profile."""
    from sim.model.memory import check_tensor_parallel

    from .arch import load_model
    from .stepcheck import KV_LAYOUTS
    from .stepcheck import import_steps as do_import
    _choice("--dtype", dtype, DTYPES)
    _choice("--device", device, DEVICES)
    _choice("--kv-layout", kv_layout, KV_LAYOUTS)
    _at_least_one("--tp", tp)
    if not engine.strip() or "/" in engine or engine in (".", ".."):
        raise ConfigError(f"--engine: {engine!r} is not allowed; allowed: unfused, fused, compiled or an id "
                          "without '/'")
    if not device_name.strip():
        raise ConfigError("--device-name: '' is not allowed; allowed: the device's name, e.g. 'NVIDIA H100 80GB HBM3'")
    spec = load_model(model)
    check_tensor_parallel(spec, tp, "--tp")
    meta = do_import(table, spec, tp, device_name=device_name, out=out, engine=engine,
                     engine_description=engine_description, source=source, method=method, dtype=dtype,
                     device=device, kv_layout=kv_layout)
    console.print(f"whole-step profile written to {out}/ ({spec.name} tp{tp}, engine {engine}, "
                  f"{len(meta['fit_notes'])} fit note(s))")
    for note in meta["fit_notes"]:
        console.print(f"note: {note}", markup=False, highlight=False)


@app.command()
def check(profile: str = typer.Argument(..., help="a whole-step or per-op profile folder, or 'roofline'"),
          against: Path = typer.Option(..., "--against", help="measured whole-step table (CSV)"),
          loo: bool = typer.Option(False, "--loo", help="whole-step profile: refit without each row (held out)"),
          as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
          gpu: str = typer.Option(None, "--gpu", help="roofline: the catalog GPU"),
          model: str = typer.Option(None, "--model", help="roofline: the model (a profile names its own)"),
          tp: int = typer.Option(None, "--tp", help="roofline: tensor-parallel degree (default 1)"),
          kv_layout: str = typer.Option("dense", "--kv-layout", help="per-op profile: dense/contiguous | paged")):
    """Predicted against measured step time for every row of a table."""
    from .arch import load_model
    from .stepcheck import check_rows, make_target
    if tp is not None:
        _at_least_one("--tp", tp)
    spec = load_model(model) if model is not None else None
    target = make_target(profile, model=spec, tensor_parallel=tp, gpu_name=gpu, kv_layout=kv_layout)
    report = check_rows(target, against, loo=loo)
    if as_json:
        print(json.dumps(report, indent=2, allow_nan=True))
        return
    for line in report["header"]:
        console.print(line, markup=False, highlight=False)
    table = Table(title=f"{against}: predicted against measured step time")
    cols = ["shape", "predicted_ms", "measured_ms", "error_%"] + (["held_out_ms", "held_out_error_%"] if loo else [])
    for col in cols:
        table.add_column(col, justify="left" if col == "shape" else "right")
    for r in report["rows"]:
        cells = [r["shape"], f"{r['predicted_s'] * 1e3:.3f}", f"{r['measured_s'] * 1e3:.3f}", f"{r['error_pct']:+.2f}"]
        if loo:
            cells += [f"{r['loo_predicted_s'] * 1e3:.3f}", f"{r['loo_error_pct']:+.2f}"]
        table.add_row(*cells)
    console.print(table)
    console.print(f"absolute error: median {report['median_abs_error_pct']:.2f}%, max {report['max_abs_error_pct']:.2f}%",
                  highlight=False)
    if loo and "median_abs_loo_error_pct" in report:
        console.print(f"held out (refit without each row): median {report['median_abs_loo_error_pct']:.2f}%, "
                      f"max {report['max_abs_loo_error_pct']:.2f}%", highlight=False)
    for note in report["notes"]:
        console.print(f"note: {note}", markup=False, highlight=False)


@app.command("fit-engine")
def fit_engine_cmd(
    measurements: Path | None = typer.Argument(None, help="steps.csv or requests.csv (or a folder of them, repeat-*/ "
                                               "read together) measured on your engine; or give --bench instead"),
    scenario: Path = typer.Option(..., help="the deployment's scenario: its cost model prices the kernels"),
    out: Path = typer.Option(..., help="the scenario with the fitted terms (YAML)"),
    holdout: list[Path] = typer.Option([], help="runs not used to fit (requests.csv folders): their error is reported"),
    bench: list[Path] = typer.Option([], help="a benchmark result (vllm bench serve --save-result JSON, "
                                     "sglang.bench_serving JSONL, genai-perf profile_export_genai_perf.json); repeat it"),
    fit_on: list[str] = typer.Option([], help="with --bench: the points to fit on (c=N, rate=R/s, burst; repeat or "
                                     "comma-separate); default the lowest and the highest load; the others are held out"),
    dataset: str | None = typer.Option(None, help="with --bench: the dataset the client sampled, where the results "
                                       "hold no per-request lengths: sharegpt (lengths drawn as vllm bench serve draws "
                                       "ShareGPT, around each result's means); default every request at the means"),
) -> None:
    """Fit the engine-overhead terms (sim/cost/overhead.py) to measured steps or requests, or the engine's and the
    front-end's CPU terms to published benchmark results (--bench); report the errors, held-out points apart."""
    from sim.atomic_files import write_output_file
    from sim.config.files import load_scenario_set
    from sim.views.output_paths import check_output_file

    from .engine_fit import bench_report_text, bench_scenario_yaml, fit_bench, fit_engine, fitted_scenario_yaml, report_text

    if out.suffix not in (".yaml", ".yml"):
        raise ConfigError(f"--out: '{out}' is not allowed; allowed: a .yaml or .yml file")
    if (measurements is None) == (not bench):
        raise ConfigError("MEASUREMENTS: " + ("given with --bench" if bench else "missing") + "; allowed: either a "
                          "steps.csv/requests.csv measurement or one or more --bench result files")
    if bench and holdout:
        raise ConfigError("--holdout: not allowed with --bench; allowed: --fit-on (the points not named are held out)")
    if fit_on and not bench:
        raise ConfigError("--fit-on: allowed only with --bench")
    if dataset is not None and not bench:
        raise ConfigError("--dataset: allowed only with --bench")
    check_output_file(out)
    sset = load_scenario_set(scenario)
    if len(sset.variants) != 1:
        raise ConfigError(f"--scenario: '{scenario}' has {len(sset.variants)} variants; allowed: a scenario without variants")
    if bench:
        fitted = fit_bench(bench, sset.base, fit_on, dataset=dataset)
        write_output_file(out, bench_scenario_yaml(sset.base, fitted))
        print(bench_report_text(fitted), end="")
    else:
        fit = fit_engine(measurements, sset.base, holdout)
        write_output_file(out, fitted_scenario_yaml(sset.base, fit))
        print(report_text(fit), end="")
    print(f"scenario: {out}")


def main(argv: list[str] | None = None) -> int:
    from sim.views.cli import run_app
    return run_app(app, argv)
