"""Compare a recorded vLLM run with ServeSim on the same requests and settings.

Runs in the project's `.venv` (no vLLM, no torch). A run directory is one load: either one recorded
repeat (`requests.csv` + `meta.json`) or several under `repeat-*/` (same requests, measured again). The
real value of each metric is the median over repeats; ServeSim is deterministic, so it runs once.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sim.errors import ConfigError

REQUIRED_COLUMNS = ("request_id", "arrival_s", "first_token_s", "finish_s", "prompt_tokens", "output_tokens")
# (key, label, unit): the metrics the issue asks for, in report order.
METRICS: tuple[tuple[str, str, str], ...] = (
    ("makespan_s", "makespan", "s"),
    ("throughput_tok_s", "throughput (output tokens/s)", "tok/s"),
    ("ttft_mean_s", "TTFT mean", "s"),
    ("ttft_p90_s", "TTFT p90", "s"),
    ("tpot_mean_s", "TPOT mean", "s"),
    ("e2e_mean_s", "E2E latency mean", "s"),
    ("e2e_p90_s", "E2E latency p90", "s"),
)


@dataclass(frozen=True)
class RecordedRun:
    """One load: the repeats of the same requests against the real engine."""

    path: Path
    meta: dict  # of the first repeat (model, vLLM settings, machine, versions, workload)
    repeats: list[pd.DataFrame]  # per repeat, one row per request


def _read_repeat(directory: Path, field: str) -> tuple[pd.DataFrame, dict]:
    csv, meta_path = directory / "requests.csv", directory / "meta.json"
    for f in (csv, meta_path):
        if not f.is_file():
            raise ConfigError(f"{field}: '{directory}' has no {f.name}; give a folder written by "
                              "`python -m calibrate.fidelity record` (requests.csv + meta.json, or repeat-*/ of them)")
    try:
        meta = json.loads(meta_path.read_text())
        frame = pd.read_csv(csv)
    except (json.JSONDecodeError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise ConfigError(f"{field}: '{directory}' holds an unreadable requests.csv or meta.json ({type(err).__name__})") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing or frame.empty:
        raise ConfigError(f"{field}: '{csv}' lacks columns {missing or '(no rows)'}; expected: {', '.join(REQUIRED_COLUMNS)}")
    for key in ("model", "vllm"):
        if not isinstance(meta.get(key), dict):
            raise ConfigError(f"{field}: '{meta_path}' has no '{key}' section; expected the meta.json `record` writes")
    if frame[["first_token_s", "finish_s"]].isna().any().any():
        raise ConfigError(f"{field}: '{csv}' has requests without a first token or finish time; "
                          "allowed: complete runs only (every request finished)")
    return frame, meta


def repeat_dirs_of(path: Path) -> list[Path]:
    """A recorded run's repeat folders (repeat-1, repeat-2, ...), or the folder itself when it has none."""
    return sorted(d for d in path.glob("repeat-*") if d.is_dir()) or [path]


def steps_dirs_of(run: RecordedRun) -> list[Path] | None:
    """The run's repeat folders when every one has steps.csv (recordings before the harness saved steps have
    none): None otherwise."""
    dirs = repeat_dirs_of(run.path)
    return dirs if all((d / "steps.csv").is_file() for d in dirs) else None


def load_run(path: str | Path, field: str = "RUN_DIR") -> RecordedRun:
    p = Path(path).expanduser()
    if not p.is_dir():
        raise ConfigError(f"{field}: '{path}' is not a folder; give a run folder written by `python -m calibrate.fidelity record`")
    repeat_dirs = repeat_dirs_of(p)
    frames, metas = zip(*(_read_repeat(d, field) for d in repeat_dirs))
    first = frames[0][["arrival_s", "prompt_tokens", "output_tokens"]].to_numpy()
    for d, f in zip(repeat_dirs[1:], frames[1:]):
        if f.shape[0] != first.shape[0] or not np.allclose(f[["arrival_s", "prompt_tokens", "output_tokens"]].to_numpy(), first):
            raise ConfigError(f"{field}: '{d}' replays different requests than '{repeat_dirs[0]}'; "
                              "allowed: repeats of one schedule")
    return RecordedRun(p, metas[0], list(frames))


def request_metrics(frame: pd.DataFrame) -> dict[str, float]:
    """The report's metrics from per-request times (one definition for real and simulated runs).

    TPOT is (finish - first token) / (output tokens - 1), over requests with more than one token;
    makespan is first arrival to last finish; throughput is output tokens over the makespan.
    """
    arrival, first, finish = (frame[c].to_numpy(float) for c in ("arrival_s", "first_token_s", "finish_s"))
    out = frame["output_tokens"].to_numpy(float)
    ttft, e2e = first - arrival, finish - arrival
    multi = out > 1
    tpot = (finish[multi] - first[multi]) / (out[multi] - 1)
    makespan = float(finish.max() - arrival.min())
    return {
        "makespan_s": makespan,
        "throughput_tok_s": float(out.sum() / makespan) if makespan > 0 else math.nan,
        "ttft_mean_s": float(ttft.mean()),
        "ttft_p90_s": float(np.percentile(ttft, 90)),
        "tpot_mean_s": float(tpot.mean()) if len(tpot) else math.nan,
        "e2e_mean_s": float(e2e.mean()),
        "e2e_p90_s": float(np.percentile(e2e, 90)),
    }


def relative_error(simulated: float, real: float) -> float:
    """(simulated - real) / real: positive when ServeSim overestimates."""
    return (simulated - real) / real if real else math.nan


def error_table(real_repeats: list[dict[str, float]], simulated: dict[str, float]) -> pd.DataFrame:
    """One row per metric: real median and spread over repeats, simulated value, relative error."""
    rows = []
    for key, label, unit in METRICS:
        values = np.array([r[key] for r in real_repeats], dtype=float)
        real = float(np.median(values))
        rows.append({"metric": key, "label": label, "unit": unit, "real": real,
                     "real_min": float(values.min()), "real_max": float(values.max()),
                     "real_spread": float((values.max() - values.min()) / real) if real else math.nan,
                     "repeats": len(values), "simulated": simulated[key],
                     "error": relative_error(simulated[key], real)})
    return pd.DataFrame(rows)


def scenario_dict(meta: dict, num_requests: int) -> dict:
    """The ServeSim scenario mirroring a recorded run's model and vLLM settings."""
    model, vllm = meta["model"], meta["vllm"]
    block_size, num_blocks = int(vllm["block_size"]), int(vllm["num_kv_blocks"])
    return {
        "name": "fidelity-vllm-cpu",
        "description": "ServeSim mirror of a recorded vLLM CPU run (calibrate.fidelity)",
        "model": {"name": "fidelity-llama", "attention": "gqa", **{k: model[k] for k in (
            "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim", "ffn_size",
            "vocab_size", "max_context")}},
        # Arrivals and lengths are passed in as a Workload; this only satisfies the schema.
        "workload": {"arrival": {"kind": "constant", "rate_per_s": 1.0},
                     "lengths": {"kind": "fixed", "input_tokens": 1, "output_tokens": 1}},
        "scheduler": {"batching": "continuous", "max_num_seqs": int(vllm["max_num_seqs"]),
                      "max_num_batched_tokens": int(vllm["max_num_batched_tokens"]),
                      "chunked_prefill": bool(vllm["chunked_prefill"]), "max_model_len": int(model["max_context"]),
                      "preemption": {"mode": "recompute", "victim": "last_admitted"}},
        "kv_cache": {"layout": "paged", "block_size": block_size, "capacity_tokens": num_blocks * block_size,
                     "enable_prefix_caching": bool(vllm.get("enable_prefix_caching", False))},
        "run": {"seed": 0, "num_requests": num_requests},
    }


def simulate_run(run: RecordedRun, profile: str | Path) -> tuple[pd.DataFrame, dict]:
    """ServeSim on the recorded requests with a cost model calibrated on this machine."""
    from sim.config.deployment import model_spec, resolve
    from sim.config.schema import Scenario
    from sim.cost.profiles import make_calibrated_cost_model
    from sim.run import simulate
    from sim.workload.generate import Workload

    frame = run.repeats[0].sort_values("arrival_s", kind="stable")
    scenario = Scenario.model_validate(scenario_dict(run.meta, len(frame)))
    resolve(scenario)
    arrival = frame["arrival_s"].to_numpy(float)
    workload = Workload(arrival_s=arrival - arrival.min(), input_tokens=frame["prompt_tokens"].to_numpy(np.int64),
                        output_tokens=frame["output_tokens"].to_numpy(np.int64))
    cost = make_calibrated_cost_model(profile, model_spec(scenario), kv_layout="paged",
                                      block_size=scenario.kv_cache.block_size)
    result = simulate(scenario, workload, cost_model=cost)
    left = result.requests[~result.requests["finished"]]
    if len(left):
        reasons = [r for r in left["reject_reason"].astype(str) if r]
        raise ConfigError(f"RUN_DIR: ServeSim left {len(left)} of {len(frame)} requests unfinished or rejected "
                          f"({reasons[0] if reasons else 'unfinished'}); check the recorded settings")
    return result.requests, {"scenario": scenario.model_dump(mode="json", exclude_none=True),
                             "cost_model": repr(cost), "scheduler": result.extras.get("scheduler", "")}


def step_check(run: RecordedRun, profile: str | Path) -> pd.DataFrame | None:
    """Measured vs priced time of the recorded vLLM steps (None when the run has no steps.csv)."""
    from sim.config.deployment import model_spec
    from sim.config.schema import Scenario
    from sim.cost.profiles import make_calibrated_cost_model

    from .overhead import priced_steps, read_steps, step_error_table

    repeat_dirs = steps_dirs_of(run)
    if repeat_dirs is None:
        return None
    scenario = Scenario.model_validate(scenario_dict(run.meta, 1))
    cost = make_calibrated_cost_model(profile, model_spec(scenario), block_size=scenario.kv_cache.block_size)
    return step_error_table(priced_steps(read_steps(repeat_dirs), cost))


def calibration_coverage_check(run: RecordedRun, profile: str | Path) -> dict | None:
    """For a step model (`fit-steps`): how many of this run's recorded vLLM steps lie where its calibration
    run had steps (sim.cost.engine_steps.coverage_of). None for other profiles or without steps.csv."""
    from sim.cost.engine_steps import coverage_of

    from .overhead import read_steps, step_plan

    meta_file = Path(profile) / "meta.json"
    coverage = json.loads(meta_file.read_text()).get("coverage") if meta_file.is_file() else None
    repeat_dirs = steps_dirs_of(run)
    if coverage is None or repeat_dirs is None:
        return None
    return coverage_of(coverage, [step_plan(r) for r in read_steps(repeat_dirs).itertuples()])


def recorded_dtype(meta: dict) -> str:
    """The dtype vLLM served a recording in (recordings before `record --dtype` were all bfloat16)."""
    return str(meta.get("vllm", {}).get("dtype") or "bfloat16")


def check_profile_dtype(meta: dict, profile: str | Path) -> str:
    """The recording's dtype; a ConfigError when the profile was measured in another one (a bf16 kernel
    profile prices an fp32 engine ~2x off on a CPU with fast bf16, ~10x on one without)."""
    from .replay_vllm import PROFILE_DTYPES

    served = recorded_dtype(meta)
    meta_file = Path(profile) / "meta.json"
    measured = json.loads(meta_file.read_text()).get("dtype") if meta_file.is_file() else None
    want = PROFILE_DTYPES.get(served, served)
    if measured is not None and measured != want:
        raise ConfigError(f"--profile: '{profile}' was measured in {measured}, but the run was served in {served}; "
                          f"allowed: a profile measured with `calibrate run --dtype {want}`")
    return served


def compare_run(run: RecordedRun, profile: str | Path) -> tuple[pd.DataFrame, dict]:
    import time

    from .machine import machine_info

    dtype = check_profile_dtype(run.meta, profile)
    started = time.perf_counter()
    simulated_requests, info = simulate_run(run, profile)
    info["dtype"] = dtype
    simulated = time.perf_counter()
    steps = step_check(run, profile)
    info["phases_s"] = {"simulate": round(simulated - started, 3),
                        "step_check": round(time.perf_counter() - simulated, 3)}
    info["machine"] = machine_info()  # where the comparison ran (the recording's machine is in the run's meta)
    if steps is not None:
        info["steps"] = steps.to_dict("records")
    coverage = calibration_coverage_check(run, profile)
    if coverage is not None:
        info["calibration_coverage"] = coverage
    from .overhead import kernel_excess
    excess = kernel_excess(profile)
    if excess is not None:
        info["kernel_excess"] = excess
    table = error_table([request_metrics(f) for f in run.repeats], request_metrics(simulated_requests))
    info["num_preemptions_real_median"] = float(np.median([f.get("num_preemptions", pd.Series([0])).sum()
                                                           for f in run.repeats]))
    info["num_preemptions_simulated"] = int(simulated_requests["preemptions"].sum())
    return table, info


def markdown_table(table: pd.DataFrame) -> str:
    lines = ["| metric | real (median) | real spread (min–max) | ServeSim | error |",
             "| --- | --- | --- | --- | --- |"]
    for row in table.itertuples():
        fmt = (lambda v: f"{v:,.1f}") if row.unit == "tok/s" else (lambda v: f"{v:.3f}")
        unit = "" if row.unit == "tok/s" else " s"
        lines.append(f"| {row.label} | {fmt(row.real)}{unit} | {fmt(row.real_min)}–{fmt(row.real_max)} "
                     f"({row.real_spread:.1%}, n={row.repeats}) | {fmt(row.simulated)}{unit} | {row.error:+.1%} |")
    return "\n".join(lines) + "\n"


def report_markdown(run: RecordedRun, table: pd.DataFrame, info: dict) -> str:
    model, vllm, machine = run.meta["model"], run.meta["vllm"], run.meta.get("machine", {})
    shape = (f"Llama {model['num_layers']} layers, hidden {model['hidden_size']}, {model['num_attention_heads']} heads "
             f"/ {model['num_kv_heads']} KV heads × {model['head_dim']}, FFN {model['ffn_size']}, vocab {model['vocab_size']}")
    settings = (f"block size {vllm['block_size']}, max_num_seqs {vllm['max_num_seqs']}, max_num_batched_tokens "
                f"{vllm['max_num_batched_tokens']}, chunked prefill {'on' if vllm['chunked_prefill'] else 'off'}, "
                f"{vllm['num_kv_blocks']} KV blocks, {vllm.get('dtype')}, {vllm.get('threads')} thread(s)")
    n = len(run.repeats[0])
    return (f"# Fidelity: {run.path.name}\n\n"
            f"- requests: {n}; workload: {json.dumps(run.meta.get('workload', {}), sort_keys=True)}\n"
            f"- model: {shape}\n- vLLM: {settings}\n"
            f"- recorded on: {machine_line(machine)}; versions: "
            f"{json.dumps(run.meta.get('versions', {}), sort_keys=True)}\n"
            f"- recording phases: {_phases(run.meta.get('phases_s'))}\n"
            f"- compared on: {machine_line(info.get('machine', {}))}; phases: {_phases(info.get('phases_s'))}\n"
            f"- ServeSim: {info['cost_model']}; preemptions real (median) {info['num_preemptions_real_median']:g}, "
            f"simulated {info['num_preemptions_simulated']}\n\n"
            + _excess_markdown(info.get("kernel_excess")) + _coverage_markdown(info.get("calibration_coverage"))
            + markdown_table(table) + _steps_markdown(info.get("steps")))


def _phases(phases: dict | None) -> str:
    return ", ".join(f"{k} {v:.1f} s" for k, v in phases.items()) if phases else "not recorded"


def machine_line(machine: dict) -> str:
    """CPU model, flags, threads and cores used, one line (older recordings lack some fields)."""
    if not machine:
        return "not recorded"
    flags = [f for f in ("amx_bf16", "avx512_bf16", "avx512f", "avx2") if machine.get(f)]
    return (f"{machine.get('cpu_model', '?')}, {machine.get('cpus', '?')} CPUs, flags {' '.join(flags) or 'none of amx_bf16/avx512'}"
            + (f", {machine['threads']} thread(s) on cores {machine.get('cores', '?')}" if "threads" in machine else ""))


def _excess_markdown(excess: dict | None) -> str:
    """A loud line when the profile's overhead fit found kernels pricing steps above their measured time."""
    if not excess:
        return ""
    points = ", ".join(f"{p['num_seqs']} seqs ({p['median_remainder_s'] * 1e3:+.2f} ms)" for p in excess.get("points", []))
    return (f"**WARNING: kernel prices exceed the measured vLLM steps** in {excess['steps_over']} of "
            f"{excess['num_steps']} calibration steps (median excess {excess['median_excess_fraction']:.0%} of the "
            f"measured time){'; not fitted at ' + points if points else ''}"
            f"{'' if excess.get('overhead_fitted', True) else '; no overhead point fitted, the profile keeps its own'}."
            " The kernel profile does not time this engine's kernels.\n\n")


def _coverage_markdown(coverage: dict | None) -> str:
    """A loud line when the step model prices steps unlike any its calibration run had."""
    if not coverage or coverage["outside_fraction"] == 0:
        return "" if not coverage else "Calibration coverage: every recorded step lies where the calibration run had steps.\n\n"
    cells = "; ".join(f"{c['decode_seqs']} seqs at {c['context_per_seq']} tokens each ({c['steps']} steps)"
                      for c in coverage["uncovered_decode_cells"])
    return (f"**WARNING: {coverage['outside_fraction']:.0%} of this run's {coverage['num_steps']} recorded steps lie "
            f"outside the calibration run's steps** (decode batch and context per sequence: "
            f"{coverage['decode_outside_fraction']:.0%}; prefill tokens: {coverage['prefill_outside_fraction']:.0%})"
            f"{': most often ' + cells if cells else ''}. The step model extrapolates there; "
            "a calibration run covering these steps (calibrate/fidelity/workloads/calibration.yaml) fixes it.\n\n")


def _steps_markdown(steps: list[dict] | None) -> str:
    if not steps:
        return ""
    lines = ["", "Per step, medians over the recorded vLLM steps: measured vs the cost model's price for the same plan.", "",
             "| tokens per step | steps | measured | priced | error |", "| --- | --- | --- | --- | --- |"]
    for r in steps:
        lines.append(f"| {r['tokens_per_step']} | {r['steps']} | {r['measured_ms']:.2f} ms | {r['priced_ms']:.2f} ms "
                     f"| {r['error']:+.1%} |")
    return "\n".join(lines) + "\n"


def write_report(out_dir: str | Path, run: RecordedRun, table: pd.DataFrame, info: dict, profile: str | Path) -> Path:
    """fidelity.md, fidelity.csv and simulation.json, all appearing at once (sim.atomic_files.atomic_dir)."""
    from sim.atomic_files import atomic_dir, write_json

    out = Path(out_dir)
    with atomic_dir(out) as tmp:
        (tmp / "fidelity.md").write_text(report_markdown(run, table, info))
        table.to_csv(tmp / "fidelity.csv", index=False)
        write_json(tmp / "simulation.json", info | {"run_dir": str(run.path), "profile": str(profile)})
    return out
