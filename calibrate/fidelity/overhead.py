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
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sim.core.step_plan import StepPlan
from sim.errors import ConfigError

OVERHEAD_SEQS = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # table points; kept where steps of that size were seen
_MIN_STEPS_PER_POINT = 5


def token_counts(cell) -> list[int]:
    """A recorded step's cell of space-separated token counts, one a prompt chunk (empty: none)."""
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
    chunks, contexts = token_counts(row.prefill_chunk_tokens), token_counts(row.prefill_context_tokens)
    return StepPlan(prefill_request_ids=list(range(len(chunks))), prefill_chunk_tokens=chunks,
                    prefill_context_tokens=contexts, num_decode_seqs=int(row.num_decode_seqs),
                    decode_context_tokens=int(row.decode_context_tokens), num_sampled_seqs=int(row.num_sampled_seqs))


def priced_steps(steps: pd.DataFrame, cost) -> pd.DataFrame:
    """Per step: measured seconds, the cost model's seconds, and the cost model's loop overhead in them."""
    plans = [step_plan(r) for r in steps.itertuples()]
    out = pd.DataFrame({
        "measured_s": (steps["end_s"] - steps["start_s"]).to_numpy(float),
        "priced_s": [cost.step_time(p) for p in plans],
        # A fitted step model (engine_steps, steps) has no separable loop overhead: 0.
        "profile_overhead_s": [cost._overhead(max(p.num_seqs, 1)) if hasattr(cost, "_overhead") else 0.0
                               for p in plans],
        "num_seqs": [p.num_seqs for p in plans],
        "num_tokens": [p.num_tokens for p in plans],
    })
    return out


class KernelExcessWarning(UserWarning):
    """The kernel profile prices recorded steps above their measured time: it is not this engine's."""


@dataclass(frozen=True)
class OverheadFit:
    """vLLM's per-step overhead: what the engine spends beyond the kernel profile's price of a step."""

    table: pd.DataFrame  # num_seqs, median_s, p20_s, p80_s, num_steps: points with a positive median remainder
    excess: pd.DataFrame  # the same columns for points where the kernels alone exceed the measured steps
    steps_over: int  # recorded steps whose kernel price alone exceeds their measured time
    num_steps: int  # recorded steps in all
    median_excess_fraction: float  # median over those steps of (kernel price - measured) / measured; NaN if none

    @property
    def fitted(self) -> bool:
        """False when no point has a positive remainder: the profile keeps its own loop overhead."""
        return not self.table.empty

    def summary(self) -> dict:
        """The `kernel_excess` field of the engine profile's meta.json and of `fit-overhead`'s output."""
        return {"steps_over": self.steps_over, "num_steps": self.num_steps,
                "fraction_of_steps": self.steps_over / self.num_steps if self.num_steps else math.nan,
                "median_excess_fraction": self.median_excess_fraction,
                "points": [{"num_seqs": int(r.num_seqs), "median_remainder_s": float(r.median_s),
                            "num_steps": int(r.num_steps)} for r in self.excess.itertuples()],
                "overhead_fitted": self.fitted}

    def message(self) -> str | None:
        """One warning line when kernel prices exceed measured steps at any table point, else None."""
        if self.excess.empty:
            return None
        points = ", ".join(f"{int(r.num_seqs)} seqs: {r.median_s * 1e3:+.2f} ms over {int(r.num_steps)} steps"
                           for r in self.excess.itertuples())
        kept = ("the other points are fitted" if self.fitted
                else "no point is fitted: the profile keeps its own loop overhead, and its prices stay too high")
        return (f"kernel prices exceed the measured vLLM steps: {self.steps_over} of {self.num_steps} steps "
                f"(median excess {self.median_excess_fraction:.0%} of the measured time); median measured - kernel "
                f"is <= 0 at {points}; these points are left out of step_overhead.csv ({kept}). The kernel "
                "profile does not time this engine's kernels: calibrate in the fidelity venv "
                "(vLLM's own attention) or fit the steps (`fit-steps`)")


def fit_step_overhead(priced: pd.DataFrame) -> OverheadFit:
    """Median (and p20/p80) of measured minus kernel time, at sequence counts around each table point.

    Nothing is floored: a point whose median remainder is not positive (the kernels alone cost more
    than the measured steps) goes to `excess`, with its size, and a KernelExcessWarning says so."""
    remainder = priced["measured_s"] - (priced["priced_s"] - priced["profile_overhead_s"])
    rows = []
    for point in OVERHEAD_SEQS:
        near = (priced["num_seqs"] > point / math.sqrt(2)) & (priced["num_seqs"] <= point * math.sqrt(2))
        values = remainder[near].to_numpy(float)
        if len(values) < _MIN_STEPS_PER_POINT:
            continue
        p20, median, p80 = (float(np.percentile(values, q)) for q in (20, 50, 80))
        rows.append({"num_seqs": point, "median_s": median, "p20_s": p20, "p80_s": p80, "num_steps": len(values)})
    if not rows:
        raise ConfigError(f"RUN_DIR: too few recorded steps to fit an engine overhead (need {_MIN_STEPS_PER_POINT} "
                          "steps near at least one sequence count)")
    all_rows = pd.DataFrame(rows)
    over = remainder < 0
    measured = priced["measured_s"].to_numpy(float)
    excess_fraction = (-remainder[over].to_numpy(float) / measured[over.to_numpy()])
    fit = OverheadFit(table=all_rows[all_rows["median_s"] > 0].reset_index(drop=True),
                      excess=all_rows[all_rows["median_s"] <= 0].reset_index(drop=True),
                      steps_over=int(over.sum()), num_steps=len(priced),
                      median_excess_fraction=float(np.median(excess_fraction)) if len(excess_fraction) else math.nan)
    message = fit.message()
    if message:
        warnings.warn(message, KernelExcessWarning, stacklevel=2)
    return fit


def write_engine_profile(profile: Path, fit: OverheadFit, out: Path, source: str) -> Path:
    """A copy of the kernel profile whose step_overhead.csv is the engine's, all written at once.

    Where no point could be fitted (kernels exceed every measured step) the profile's own table is kept
    and meta.json's `step_overhead_source.kernel_excess.overhead_fitted` is false."""
    from sim.atomic_files import atomic_dir
    from sim.cost.calibrated import load_profile

    load_profile(profile, field="--profile")  # a complete, readable profile
    table = fit.table
    with atomic_dir(out) as tmp:
        for f in Path(profile).iterdir():
            if f.is_file():
                shutil.copy2(f, tmp / f.name)
        if fit.fitted:
            table[["num_seqs", "median_s", "p20_s", "p80_s"]].to_csv(tmp / "step_overhead.csv", index=False)
        meta = json.loads((tmp / "meta.json").read_text())
        meta["step_overhead_source"] = {"kind": "vllm_engine_steps", "run": source, "kernel_profile": str(profile),
                                        "steps_per_point": dict(zip(table["num_seqs"].astype(int).astype(str),
                                                                    table["num_steps"].astype(int))),
                                        "kernel_excess": fit.summary()}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out


def kernel_excess(profile: Path | str) -> dict | None:
    """The `kernel_excess` a profile's overhead fit recorded, if kernels exceeded measured steps (else None)."""
    try:
        meta = json.loads((Path(profile) / "meta.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    excess = (meta.get("step_overhead_source") or {}).get("kernel_excess")
    return excess if excess and (excess.get("points") or not excess.get("overhead_fitted", True)) else None


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
