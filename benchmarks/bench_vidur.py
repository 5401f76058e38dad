"""Side by side with Vidur (issue 15): the same requests through ServeSim and Vidur, wall time and predictions.

Both simulators get one CSV trace (Azure LLM inference conversation trace, tiled past its 19,366 rows,
inter-arrival gaps rescaled to RATE_PER_S) for Llama-3-8B on one H100, TP1, a vLLM-style scheduler
without chunked prefill, block size 16, at most BATCH_CAP sequences and MAX_BATCHED_TOKENS tokens per step,
the same KV capacity in blocks. Each run is a subprocess pinned to one core (`taskset -c CORE`), so both
pay their interpreter start and imports; ServeSim's in-process simulate() time is reported beside it.

Vidur (`vidur==0.0.26`, its own venv; not a ServeSim dependency) runs offline on the H100 profile in
../shared/gpu/vidur_h100_llama-3-8b/ (see its README): this script lays that profile out as a Hugging Face
dataset cache under OUT/vidur_cache_<grid>, so `HF_HUB_OFFLINE=1` finds it. Vidur's first run fits its random-forest
predictors (reported separately as "first run"); later runs load them from that cache.

    python3 -m venv /work/vidur-venv && /work/vidur-venv/bin/pip install vidur==0.0.26
    .venv/bin/python benchmarks/bench_vidur.py --vidur-python /work/vidur-venv/bin/python \
        --out out/bench_vidur 1000 10000 100000

Prints Markdown tables (paste into benchmarks/RESULTS.md) and writes OUT/results_<counts>.json (per-request
latencies included). `--vidur-grid default` fits with Vidur's full random-forest grid (slow; see RF_GRIDS);
`--roofline` adds a ServeSim run with the roofline. Afterwards:

    .venv/bin/python benchmarks/bench_vidur.py --report OUT/results_1000_10000_100000.json   # tables again
    .venv/bin/python benchmarks/bench_vidur.py --steps OUT/vidur_cache_small   # Vidur vs measured H100 steps
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calibrate.fidelity.machine import cpuinfo
from sim.workload.traces import load_azure_csv

SHARED = ROOT.parent / "shared"
AZURE_CONV = SHARED / "traces" / "AzureLLMInferenceTrace_conv.csv"
VIDUR_PROFILE = SHARED / "gpu" / "vidur_h100_llama-3-8b"

# Vidur's Llama-3-8B is capped at 4096 tokens (vidur/config/model_config.py, Llama38BModelConfig.max_model_len),
# and its trace generator cuts the prompt so that prompt + output fits; we cut the same way before writing.
MAX_TOTAL_TOKENS = 4096
BATCH_CAP = 128  # Vidur's default batch_size_cap and prediction_max_batch_size (vidur/config/config.py)
MAX_BATCHED_TOKENS = 4096  # Vidur's vLLM scheduler default max_tokens_in_batch (vidur/config/config.py)
BLOCK_SIZE = 16
# Load: with these lengths and settings one H100 finishes 13.9 req/s when saturated (ServeSim, calibrated
# profile: 2,000 requests offered at 100 req/s); 10 req/s is 72% of that, busy with finite queues.
RATE_PER_S = 10.0

# Vidur 0.0.26 names its inputs as Hugging Face datasets (vidur/config/config.py defaults); the offline cache
# must carry these names. Only the compute dataset's CSVs are read at TP1/PP1; the network one needs a config.
COMPUTE_DATASET = "project-vajra/dev-staging-meta-llama-llama-3-8b-h100"
NETWORK_DATASET = "project-vajra/dev-staging-h100-dgx"
SNAPSHOT_ID = "0" * 40  # any id: refs/main points at it
VIDUR_TRACE_DATE = "2023-08-21"  # vidur's trace_replay keeps only rows whose Date equals its `date` option


# --------------------------------------------------------------------------------------------------
# The trace


def build_trace(num_requests: int, rate_per_s: float, source: Path = AZURE_CONV) -> pd.DataFrame:
    """`arrived_at` (s, first at 0), `num_prefill_tokens`, `num_decode_tokens` for `num_requests` requests.

    Rows cycle through the source trace; the recorded inter-arrival gaps (cycled the same way) are scaled
    so that their mean is 1/rate_per_s, which keeps the trace's burstiness. Lengths are at least 1 and
    prompt + output <= MAX_TOTAL_TOKENS (the prompt is cut, as Vidur does).
    """
    trace = load_azure_csv(source, field="bench_vidur.source")
    rows = np.arange(num_requests) % len(trace)
    recorded_gaps_s = np.diff(trace.arrival_s)
    gaps_s = recorded_gaps_s[np.arange(num_requests - 1) % len(recorded_gaps_s)]
    gaps_s = gaps_s * (1.0 / rate_per_s) / gaps_s.mean() if len(gaps_s) else gaps_s
    output = np.clip(trace.output_tokens[rows], 1, MAX_TOTAL_TOKENS - 1)
    prompt = np.clip(trace.input_tokens[rows], 1, None)
    prompt = np.minimum(prompt, MAX_TOTAL_TOKENS - output)
    return pd.DataFrame({
        "arrived_at": np.concatenate([[0.0], np.cumsum(gaps_s)]),
        "num_prefill_tokens": prompt.astype(np.int64),
        "num_decode_tokens": output.astype(np.int64),
    })


def write_traces(frame: pd.DataFrame, out: Path) -> tuple[Path, Path]:
    """The trace as ServeSim reads it, and the same rows in vidur 0.0.26's trace_replay columns."""
    out.mkdir(parents=True, exist_ok=True)
    n = len(frame)
    plain = out / f"trace_{n}.csv"
    frame.to_csv(plain, index=False, float_format="%.9f")
    # Read back so that both simulators see exactly the printed arrival times.
    back = pd.read_csv(plain)
    vidur = out / f"trace_{n}_vidur.csv"
    pd.DataFrame({
        "Date": VIDUR_TRACE_DATE,
        "Time": back["arrived_at"],
        "PromptTokenCount": back["num_prefill_tokens"],
        "CompletionTokenCount": back["num_decode_tokens"],
    }).to_csv(vidur, index=False, float_format="%.9f")
    return plain, vidur


# --------------------------------------------------------------------------------------------------
# ServeSim


def servesim_scenario(trace_csv: Path, num_requests: int, kv_capacity_tokens: int | None,
                      cost_model: dict | None = None) -> dict:
    return {
        "name": f"vidur-side-by-side-{num_requests}",
        "model": "llama-3.1-8b",  # same architecture as Llama-3-8B (32 layers, 4096/14336, GQA 32/8, vocab 128256)
        "hardware": {"gpu": "h100-sxm", "tensor_parallel": 1},
        "workload": {
            "arrival": {"kind": "trace", "path": str(trace_csv), "format": "csv",
                        "columns": {"arrival": "arrived_at", "input": "num_prefill_tokens",
                                    "output": "num_decode_tokens"}},
            "lengths": {"kind": "trace"},
        },
        "scheduler": {"batching": "continuous", "max_num_seqs": BATCH_CAP, "chunked_prefill": False,
                      "max_num_batched_tokens": MAX_BATCHED_TOKENS, "max_model_len": MAX_TOTAL_TOKENS},
        "kv_cache": {"layout": "paged", "block_size": BLOCK_SIZE,
                     **({"capacity_tokens": kv_capacity_tokens} if kv_capacity_tokens else {})},
        "cost_model": cost_model or {"kind": "calibrated"},
        "run": {"seed": 0, "num_requests": num_requests, "fast_decode": True},
    }


def servesim_child(scenario_json: str, out_json: str) -> None:
    """Runs in the pinned subprocess: simulate, write per-request latencies and the summary."""
    t_start = time.perf_counter()
    from sim.config.files import validate_scenario
    from sim.run import make_cost_model, make_workload, simulate

    scenario = validate_scenario(json.loads(Path(scenario_json).read_text()))
    t_imported = time.perf_counter()
    workload = make_workload(scenario)
    result = simulate(scenario, workload)
    t_done = time.perf_counter()
    requests = result.requests
    fin = requests[requests["status"] == "finished"]
    Path(out_json).write_text(json.dumps({
        "simulate_s": t_done - t_imported,
        "import_s": t_imported - t_start,
        "cost_model": repr(make_cost_model(scenario)),
        "num_finished": len(fin),
        "makespan_s": float(fin["finish_s"].max()),
        "ttft_s": fin["ttft_s"].tolist(),
        "tpot_s": fin["tpot_s"].dropna().tolist(),
        "e2e_s": fin["e2e_s"].tolist(),
        "num_preemptions": int(requests["preemptions"].sum()) if "preemptions" in requests else None,
    }))


def run_servesim(trace_csv: Path, n: int, out: Path, core: int, kv_capacity_tokens: int,
                 cost_model: dict | None, tag: str) -> dict:
    scenario_json = out / f"servesim_{tag}_{n}.json"
    scenario_json.write_text(json.dumps(servesim_scenario(trace_csv, n, kv_capacity_tokens, cost_model)))
    result_json = out / f"servesim_{tag}_{n}_result.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    t0 = time.perf_counter()
    subprocess.run(["taskset", "-c", str(core), sys.executable, __file__, "--servesim-child",
                    str(scenario_json), str(result_json)], check=True, env=env)
    wall_s = time.perf_counter() - t0
    result = json.loads(result_json.read_text())
    result["wall_s"] = wall_s
    return result


def servesim_kv_capacity_tokens() -> int:
    """ServeSim's own KV capacity for this deployment (rounded down to whole blocks); Vidur gets the same."""
    from sim.config.deployment import resolve
    from sim.config.files import validate_scenario

    scenario = validate_scenario(servesim_scenario(AZURE_CONV, 1, None) | {
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1.0}, "lengths": {"kind": "preset", "name": "sharegpt"}}})
    return resolve(scenario).kv_capacity_tokens // BLOCK_SIZE * BLOCK_SIZE


# --------------------------------------------------------------------------------------------------
# Vidur


def prepare_vidur_cache(cache_dir: Path, profile: Path = VIDUR_PROFILE) -> None:
    """Lay out the local profile as the Hugging Face dataset cache vidur 0.0.26 reads (xz-compressed CSVs)."""
    for dataset, files in (
        (COMPUTE_DATASET, {"config.json": json.dumps({"model": "meta-llama/Llama-3-8B", "device_sku": "h100"}),
                           "mlp.csv.xz": profile / "mlp.csv", "attention.csv.xz": profile / "attention.csv"}),
        (NETWORK_DATASET, {"config.json": json.dumps({"sku": "h100_dgx"})}),
    ):
        kind = "compute" if dataset == COMPUTE_DATASET else "network"
        repo = cache_dir / "profiling_data" / kind / ("datasets--" + dataset.replace("/", "--"))
        snapshot = repo / "snapshots" / SNAPSHOT_ID
        snapshot.mkdir(parents=True, exist_ok=True)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(SNAPSHOT_ID)
        for name, content in files.items():
            target = snapshot / name
            if isinstance(content, Path):
                if not target.exists():
                    target.write_bytes(lzma.compress(content.read_bytes()))
            else:
                target.write_text(content)


# Vidur's default random-forest grid is 3 x 3 x 3 settings, each cross-validated 10-fold, for 12 predictors:
# under this machine's load the first predictor alone took 3.5 min on one core. "small" fits the one setting
# that grid chose for that first predictor (attn_pre_proj: 250 trees, depth 16, min split 2), 27x less work.
RF_GRIDS = {
    "default": None,
    "small": {"num_estimators": ["250"], "max_depth": ["16"], "min_samples_split": ["2"]},
}


def vidur_command(vidur_python: str, trace_csv: Path, cache_dir: Path, out_dir: Path, num_blocks: int,
                  grid: str = "small") -> list[str]:
    rf = "--random_forrest_execution_time_predictor_config_"
    grid_args = [a for key, values in (RF_GRIDS[grid] or {}).items() for a in (rf + key, *values)]
    return [
        vidur_python, "-m", "vidur.main",
        "--replica_config_model_name", "meta-llama/Llama-3-8B",
        "--replica_config_device", "h100",
        "--replica_config_network_device", "h100_dgx",
        "--replica_config_tensor_parallel_size", "1",
        "--replica_config_num_pipeline_stages", "1",
        "--cluster_config_num_replicas", "1",
        "--replica_scheduler_config_type", "vllm",
        "--vllm_scheduler_config_batch_size_cap", str(BATCH_CAP),
        "--vllm_scheduler_config_max_tokens_in_batch", str(MAX_BATCHED_TOKENS),
        "--cache_config_block_size", str(BLOCK_SIZE),
        "--cache_config_num_blocks", str(num_blocks),
        "--request_generator_config_type", "trace_replay",
        "--trace_request_generator_config_trace_file", str(trace_csv),
        "--trace_request_generator_config_date", VIDUR_TRACE_DATE,
        "--trace_request_generator_config_prefill_scale_factor", "1",
        "--trace_request_generator_config_decode_scale_factor", "1",
        "--trace_request_generator_config_time_scale_factor", "1",
        "--trace_request_generator_config_max_tokens", str(MAX_TOTAL_TOKENS),
        "--execution_time_predictor_config_type", "random_forrest",
        "--random_forrest_execution_time_predictor_config_cache_dir", str(cache_dir),
        "--random_forrest_execution_time_predictor_config_num_training_job_threads", "1",
        "--metrics_config_output_dir", str(out_dir),
        "--no-metrics_config_enable_chrome_trace",
        "--no-metrics_config_store_plots",
        "--no-metrics_config_write_json_trace",
        *grid_args,
    ]


LOG_STAMP = re.compile(r"^\w+ (\d\d-\d\d \d\d:\d\d:\d\d) ", re.MULTILINE)


def vidur_log_phases(text: str) -> dict:
    """Seconds from Vidur's first log line to "Starting simulation" (predictions loaded or fitted) and from
    there to "Simulation ended" (the event loop), read from its log's timestamps (1 s resolution)."""
    def stamp(line_pattern: str) -> pd.Timestamp | None:
        found = re.search(r"^\w+ (\d\d-\d\d \d\d:\d\d:\d\d) .*" + line_pattern, text, re.MULTILINE)
        return pd.Timestamp("2000-" + found.group(1)) if found else None

    first = LOG_STAMP.search(text)
    t0 = pd.Timestamp("2000-" + first.group(1)) if first else None
    start, end = stamp("Starting simulation"), stamp("Simulation ended at")
    if t0 is None or start is None or end is None:
        return {"setup_s": float("nan"), "loop_s": float("nan")}
    return {"setup_s": (start - t0).total_seconds(), "loop_s": (end - start).total_seconds()}


def run_vidur(vidur_python: str, trace_csv: Path, n: int, out: Path, core: int, num_blocks: int, tag: str,
              timeout_s: float | None = None, grid: str = "small") -> dict:
    cache_dir = out / f"vidur_cache_{grid}"  # the predictors' cache key leaves the grid out: one cache per grid
    prepare_vidur_cache(cache_dir)
    run_dir = out / f"vidur_{tag}_{n}"
    env = dict(os.environ, HF_HUB_OFFLINE="1", WANDB_MODE="disabled", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", PYTHONPATH="")
    log = out / f"vidur_{tag}_{n}.log"
    t0 = time.perf_counter()
    with log.open("w") as f:
        try:
            subprocess.run(["taskset", "-c", str(core), *vidur_command(vidur_python, trace_csv, cache_dir, run_dir,
                                                                       num_blocks, grid)],
                           check=True, env=env, stdout=f, stderr=subprocess.STDOUT, cwd=out, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"wall_s": time.perf_counter() - t0, "timed_out": True}
    wall_s = time.perf_counter() - t0
    text = log.read_text()
    ended = re.findall(r"Simulation ended at: ([0-9.eE+-]+)s", text)
    metrics = sorted(run_dir.rglob("request_metrics.csv"))
    if not metrics:
        raise RuntimeError(f"vidur wrote no request_metrics.csv under {run_dir}; see {log}")
    frame = pd.read_csv(metrics[-1])
    decode = frame["request_num_decode_tokens"].to_numpy(dtype=float)
    e2e = frame["request_e2e_time"].to_numpy(dtype=float)
    ttft = frame["prefill_e2e_time"].to_numpy(dtype=float)
    # Vidur's prefill yields the first output token (vidur/entities/request.py), so (e2e - ttft) / (n - 1) is
    # ServeSim's TPOT: (last token - first token) / (output tokens - 1).
    many = decode > 1
    return {
        "wall_s": wall_s,
        **vidur_log_phases(text),
        "num_finished": len(frame),
        "makespan_s": float(ended[-1]) if ended else float("nan"),
        "ttft_s": ttft.tolist(),
        "tpot_s": ((e2e[many] - ttft[many]) / (decode[many] - 1)).tolist(),
        "e2e_s": e2e.tolist(),
        "num_restarts": int(frame["request_num_restarts"].sum()) if "request_num_restarts" in frame else None,
    }


# --------------------------------------------------------------------------------------------------
# Step times: Vidur's prediction against a whole step measured on an H100

STEP_PROFILE = ROOT / "calibrate" / "profiles" / "h100-sxm" / "llama-3.1-8b" / "tp1" / "steps" / "fused" / "steps.csv"
# Per-token ops Vidur sums for every layer (vidur/entities/execution_time.py: attention layer without the KV
# cache save, which it leaves out; MLP layer with its norm; the residual add); TP1 has no communication.
VIDUR_TOKEN_OPS = ("attn_pre_proj", "attn_post_proj", "attn_rope", "input_layernorm", "mlp_up_proj",
                   "mlp_down_proj", "mlp_act", "post_attention_layernorm", "add")
VIDUR_LAYERS = 32
VIDUR_KV_GRANULARITY = 256  # kv_cache_prediction_granularity (vidur/config/config.py default)
VIDUR_DECODE_BATCHING_OVERHEAD = 0.1  # attention_decode_batching_overhead_fraction, applied to GQA models


def load_vidur_predictions(cache_dir: Path) -> dict[str, dict[tuple, float]]:
    """The prediction tables Vidur's first run wrote (milliseconds, keyed by its rounded features)."""
    tables = {}
    for path in sorted(cache_dir.glob("predictions/*/*.csv.xz")):
        frame = pd.read_csv(path)
        prediction = frame.pop("prediction").to_numpy()
        tables[path.name.split(".")[0]] = {tuple(int(x) for x in row): p for row, p in zip(frame.to_numpy(), prediction)}
    return tables


def vidur_step_s(tables: dict, prefill_tokens: int, prefill_context: int, decode_batch: int,
                 decode_context: int) -> float | None:
    """What Vidur 0.0.26 predicts for one step (its SklearnExecutionTimePredictor arithmetic); None outside
    its prediction tables."""
    def round_up(x: int, to: int) -> int:
        return (x + to - 1) // to * to

    tokens = round_up(prefill_tokens + decode_batch, 8)
    try:
        per_layer_ms = sum(tables[op][(tokens,)] for op in VIDUR_TOKEN_OPS)
        if decode_batch:
            per_layer_ms += tables["attn_decode"][(decode_batch, round_up(decode_context, VIDUR_KV_GRANULARITY))] * (
                1 + VIDUR_DECODE_BATCHING_OVERHEAD * (decode_batch > 1))
        if prefill_tokens:
            kv = round_up(prefill_context + prefill_tokens, VIDUR_KV_GRANULARITY)
            per_layer_ms += tables["attn_prefill"][(kv, round_up(prefill_tokens, 32))]
    except KeyError:
        return None
    return per_layer_ms * VIDUR_LAYERS * 1e-3


def print_step_table(cache_dir: Path, profile: Path = STEP_PROFILE) -> None:
    tables = load_vidur_predictions(cache_dir)
    rows = pd.read_csv(profile)
    print("| step | measured whole step (ms) | Vidur predicts (ms) | error |")
    print("| --- | ---: | ---: | ---: |")
    errors = []
    for r in rows.itertuples():
        name = (f"{r.kind} prefill {r.prefill_tokens}@{r.prefill_context}" if r.kind == "prefill" else
                f"{r.kind} batch {r.decode_batch} ctx {r.decode_context}" if r.kind == "decode" else
                f"{r.kind} {r.prefill_tokens} + batch {r.decode_batch} ctx {r.decode_context}")
        predicted = vidur_step_s(tables, r.prefill_tokens, r.prefill_context, r.decode_batch, r.decode_context)
        if predicted is None:
            print(f"| {name} | {r.step_s * 1e3:.2f} | outside its tables | - |")
            continue
        errors.append(predicted / r.step_s - 1)
        print(f"| {name} | {r.step_s * 1e3:.2f} | {predicted * 1e3:.2f} | {errors[-1]:+.1%} |")
    a = np.abs(errors)
    print(f"\n{len(errors)} rows: median |error| {np.median(a):.1%}, max {a.max():.1%}")


# --------------------------------------------------------------------------------------------------
# Reporting


def stats(values: list[float]) -> dict:
    a = np.asarray(values, dtype=float)
    return {"mean": float(a.mean()), "p50": float(np.percentile(a, 50)), "p90": float(np.percentile(a, 90)),
            "p99": float(np.percentile(a, 99))}


def uptime() -> str:
    return subprocess.run(["uptime"], check=False, capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("counts", nargs="*", type=int, default=[1_000, 10_000, 100_000])
    parser.add_argument("--vidur-python", default="/work/vidur-venv/bin/python")
    parser.add_argument("--out", default=str(ROOT / "out" / "bench_vidur"))
    parser.add_argument("--core", type=int, default=1, help="the one CPU both simulators are pinned to")
    parser.add_argument("--rate", type=float, default=RATE_PER_S, help="mean arrival rate (req/s)")
    parser.add_argument("--vidur-repeats", type=int, default=1, help="cached Vidur runs per count")
    parser.add_argument("--skip-vidur", action="store_true")
    parser.add_argument("--vidur-grid", choices=sorted(RF_GRIDS), default="small",
                        help="random-forest settings Vidur's first run searches (see RF_GRIDS)")
    parser.add_argument("--vidur-timeout", type=float, default=1200.0,
                        help="seconds after which a cached Vidur run is stopped and reported as such")
    parser.add_argument("--roofline", action="store_true", help="also run ServeSim with the roofline cost model")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    kv_tokens = servesim_kv_capacity_tokens()
    num_blocks = kv_tokens // BLOCK_SIZE
    report: dict = {"vidur_grid": args.vidur_grid, "machine": cpuinfo(), "cpu_count": os.cpu_count(), "core": args.core, "rate_per_s": args.rate,
                    "kv_capacity_tokens": kv_tokens, "runs": []}
    print(f"# {cpuinfo()['cpu_model']}, {os.cpu_count()} hardware threads; both pinned to core {args.core}; "
          f"KV {num_blocks} blocks of {BLOCK_SIZE}; {args.rate} req/s", flush=True)
    fitted = any((out / f"vidur_cache_{args.vidur_grid}" / "predictors").glob("*/*.pkl"))
    for n in args.counts:
        plain, vidur_csv = write_traces(build_trace(n, args.rate), out)
        row: dict = {"requests": n, "uptime_before": uptime()}
        if not args.skip_vidur and not fitted:
            row["vidur_first"] = run_vidur(args.vidur_python, vidur_csv, n, out, args.core, num_blocks, "first",
                                           None, args.vidur_grid)
            fitted = True
            print(f"vidur first run (fits predictors), {n:,} requests: {row['vidur_first']['wall_s']:.1f} s",
                  flush=True)
        # Interleaved: ServeSim, Vidur (cached), ServeSim again, so load changes hit both.
        row["servesim"] = [run_servesim(plain, n, out, args.core, kv_tokens, None, "calibrated")]
        if not args.skip_vidur:
            row["vidur"] = []
            for _ in range(args.vidur_repeats):
                row["vidur"].append(run_vidur(args.vidur_python, vidur_csv, n, out, args.core, num_blocks, "cached",
                                              args.vidur_timeout, args.vidur_grid))
                row["servesim"].append(run_servesim(plain, n, out, args.core, kv_tokens, None, "calibrated"))
        if args.roofline:
            row["servesim_roofline"] = run_servesim(plain, n, out, args.core, kv_tokens, {"kind": "roofline"},
                                                    "roofline")
        row["uptime_after"] = uptime()
        report["runs"].append(row)
        (out / f"results_{'_'.join(map(str, args.counts))}.json").write_text(json.dumps(report, indent=1))
        print_row(row, flush=True)


def print_speed_table(paths: list[Path]) -> None:
    """One Markdown row per request count from results_*.json files: wall times and ratios (min over runs)."""
    print("| requests | ServeSim calibrated: process (simulate) s | ServeSim roofline: process (simulate) s "
          "| Vidur first run s | Vidur cached: process (setup + loop) s | Vidur / ServeSim calibrated: process, loop "
          "| Vidur / ServeSim roofline: process, loop | load (1-min) before, after |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for path in paths:
        for row in json.loads(Path(path).read_text())["runs"]:
            cal = min(row["servesim"], key=lambda r: r["wall_s"])
            roof = row.get("servesim_roofline")
            vid = (row.get("vidur") or [None])[0]
            first = row.get("vidur_first")
            log = Path(path).parent / f"vidur_cached_{row['requests']}.log"
            if vid and "loop_s" not in vid and log.exists():  # results written before the phases were recorded
                vid = vid | vidur_log_phases(log.read_text())
            load = [re.search(r"load average: ([0-9.]+)", row[k]).group(1) for k in ("uptime_before", "uptime_after")]
            cells = [f"{row['requests']:,}", f"{cal['wall_s']:.2f} ({cal['simulate_s']:.2f})",
                     f"{roof['wall_s']:.2f} ({roof['simulate_s']:.2f})" if roof else "-",
                     f"{first['wall_s']:.0f}" if first else "-"]
            if vid and not vid.get("timed_out"):
                cells.append(f"{vid['wall_s']:.1f} ({vid['setup_s']:.0f} + {vid['loop_s']:.0f})")
                cells.append(f"{vid['wall_s'] / cal['wall_s']:.1f}x, {vid['loop_s'] / cal['simulate_s']:.1f}x")
                cells.append(f"{vid['wall_s'] / roof['wall_s']:.1f}x, {vid['loop_s'] / roof['simulate_s']:.1f}x"
                             if roof else "-")
            else:
                cells += [f"stopped after {vid['wall_s']:.0f} s" if vid else "-", "-", "-"]
            cells.append(f"{load[0]}, {load[1]}")
            print("| " + " | ".join(cells) + " |")


def print_row(row: dict, flush: bool = True) -> None:
    n = row["requests"]
    s = row["servesim"]
    s_wall = min(r["wall_s"] for r in s)
    s_sim = min(r["simulate_s"] for r in s)
    print(f"\n## {n:,} requests  (load before: {row['uptime_before']}; after: {row['uptime_after']})")
    line = f"ServeSim wall {s_wall:.2f} s (simulate() {s_sim:.2f} s, {len(s)} runs, min)"
    if "vidur" in row and row["vidur"][0].get("timed_out"):
        line += f"; Vidur stopped after {row['vidur'][0]['wall_s']:.0f} s without finishing"
        row = {k: v for k, v in row.items() if k != "vidur"}
    if "vidur" in row:
        v_wall = min(r["wall_s"] for r in row["vidur"])
        line += f"; Vidur cached wall {v_wall:.1f} s; ratio {v_wall / s_wall:.1f}x (whole process)"
        if "loop_s" in row["vidur"][0]:
            v = row["vidur"][0]
            line += f"; Vidur setup {v['setup_s']:.0f} s + event loop {v['loop_s']:.0f} s"
    if "vidur_first" in row:
        line += f"; Vidur first run {row['vidur_first']['wall_s']:.1f} s"
    print(line)
    sides = [("ServeSim (calibrated)", s[0])]
    if "servesim_roofline" in row:
        sides.append(("ServeSim (roofline)", row["servesim_roofline"]))
    if "vidur" in row:
        sides.append(("Vidur", row["vidur"][0]))
    print("| metric | " + " | ".join(name for name, _ in sides) + " |")
    print("| --- |" + " ---: |" * len(sides))
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        for stat in ("mean", "p50", "p90", "p99"):
            cells = [stats(r[metric])[stat] for _, r in sides]
            print(f"| {metric} {stat} | " + " | ".join(f"{c:.4f}" for c in cells) + " |")
    print("| makespan_s | " + " | ".join(f"{r['makespan_s']:.2f}" for _, r in sides) + " |")
    print("| finished | " + " | ".join(f"{r['num_finished']:,}" for _, r in sides) + " |", flush=flush)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--servesim-child":
        servesim_child(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "--steps":  # --steps OUT/vidur_cache_small
        print_step_table(Path(sys.argv[2]))
    elif len(sys.argv) > 2 and sys.argv[1] == "--report":  # --report OUT/results_*.json ...: the tables again
        print_speed_table([Path(p) for p in sys.argv[2:]])
        for results in sys.argv[2:]:
            for row in json.loads(Path(results).read_text())["runs"]:
                print_row(row)
    else:
        main()
