"""The serving engine's own per-step cost, measured against the real engine.

A kernel profile (`python -m calibrate run`) prices what a step computes; it does not see what vLLM
does around the kernels each step (scheduling, preparing inputs, sampling and detokenising outputs
in Python, dispatching each eager op). Here every recorded vLLM step (`steps.csv`: its measured time
and what it computed) is priced by the kernel profile without its own loop overhead, and the
median remainder per number of sequences becomes the profile's `step_overhead` table. Fit it on a
calibration run whose requests are not the ones compared.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from sim.core.step_plan import StepPlan
from sim.errors import ConfigError

OVERHEAD_SEQS = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # table points; kept where steps of that size were seen
_MIN_STEPS_PER_POINT = 5


def _ints(cell) -> list[int]:
    if cell is None or (isinstance(cell, float) and math.isnan(cell)):
        return []
    return [int(x) for x in str(cell).split()]


def read_steps(run_dirs: list[Path]) -> pd.DataFrame:
    """Every recorded step of the given repeat folders."""
    frames = []
    for d in run_dirs:
        path = d / "steps.csv"
        if not path.is_file():
            raise ConfigError(f"RUN_DIR: '{d}' has no steps.csv; record it again with this version of "
                              "`python -m calibrate.fidelity record`")
        frames.append(pd.read_csv(path, dtype={"prefill_chunk_tokens": str, "prefill_context_tokens": str}))
    return pd.concat(frames, ignore_index=True)


def step_plan(row) -> StepPlan:
    """ServeSim's StepPlan for one recorded vLLM step."""
    chunks, contexts = _ints(row.prefill_chunk_tokens), _ints(row.prefill_context_tokens)
    return StepPlan(prefill_request_ids=list(range(len(chunks))), prefill_chunk_tokens=chunks,
                    prefill_context_tokens=contexts, num_decode_seqs=int(row.num_decode_seqs),
                    decode_context_tokens=int(row.decode_context_tokens), num_sampled_seqs=int(row.num_sampled_seqs))


def priced_steps(steps: pd.DataFrame, cost) -> pd.DataFrame:
    """Per step: measured seconds, the cost model's seconds, and the cost model's loop overhead in them."""
    plans = [step_plan(r) for r in steps.itertuples()]
    out = pd.DataFrame({
        "measured_s": (steps["end_s"] - steps["start_s"]).to_numpy(float),
        "priced_s": [cost.step_time(p) for p in plans],
        "profile_overhead_s": [cost._overhead(max(p.num_seqs, 1)) for p in plans],
        "num_seqs": [p.num_seqs for p in plans],
        "num_tokens": [p.num_tokens for p in plans],
    })
    return out


def fit_step_overhead(priced: pd.DataFrame) -> pd.DataFrame:
    """Median (and p20/p80) of measured minus kernel time, at sequence counts around each table point."""
    remainder = priced["measured_s"] - (priced["priced_s"] - priced["profile_overhead_s"])
    rows = []
    for point in OVERHEAD_SEQS:
        near = (priced["num_seqs"] > point / math.sqrt(2)) & (priced["num_seqs"] <= point * math.sqrt(2))
        values = remainder[near].to_numpy(float)
        if len(values) < _MIN_STEPS_PER_POINT:
            continue
        # Floor at 10 µs: the table is interpolated in log space, and a step never costs nothing.
        p20, median, p80 = (max(float(np.percentile(values, q)), 1e-5) for q in (20, 50, 80))
        rows.append({"num_seqs": point, "median_s": median, "p20_s": p20, "p80_s": p80, "num_steps": len(values)})
    if not rows:
        raise ConfigError(f"RUN_DIR: too few recorded steps to fit an engine overhead (need {_MIN_STEPS_PER_POINT} "
                          "steps near at least one sequence count)")
    return pd.DataFrame(rows)


def write_engine_profile(profile: Path, table: pd.DataFrame, out: Path, source: str) -> Path:
    """A copy of the kernel profile whose step_overhead.csv is the engine's, all written at once."""
    from sim.atomic_files import atomic_dir
    from sim.cost.calibrated import load_profile

    load_profile(profile, field="--profile")  # a complete, readable profile
    with atomic_dir(out) as tmp:
        for f in Path(profile).iterdir():
            if f.is_file():
                shutil.copy2(f, tmp / f.name)
        table[["num_seqs", "median_s", "p20_s", "p80_s"]].to_csv(tmp / "step_overhead.csv", index=False)
        meta = json.loads((tmp / "meta.json").read_text())
        meta["step_overhead_source"] = {"kind": "vllm_engine_steps", "run": source, "kernel_profile": str(profile),
                                        "steps_per_point": dict(zip(table["num_seqs"].astype(int).astype(str),
                                                                    table["num_steps"].astype(int)))}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out


def step_error_table(priced: pd.DataFrame) -> pd.DataFrame:
    """Measured vs priced step time by tokens per step (medians), for the report."""
    edges = [0, 1, 4, 16, 64, 256, 1024, 1 << 20]
    labels = ["1", "2-4", "5-16", "17-64", "65-256", "257-1024", ">1024"]
    bucket = pd.cut(priced["num_tokens"], edges, labels=labels)
    grouped = priced.groupby(bucket, observed=True)
    table = pd.DataFrame({"steps": grouped.size(), "measured_ms": grouped["measured_s"].median() * 1e3,
                          "priced_ms": grouped["priced_s"].median() * 1e3})
    table["error"] = table["priced_ms"] / table["measured_ms"] - 1
    return table.reset_index(names="tokens_per_step")
