"""A cost model fitted to a real engine's recorded steps: `profile_kind: "engine_steps"`.

The fidelity harness records every step vLLM runs (what it computed and how long it took,
`calibrate/fidelity` `steps.csv`). Here a step's time is a non-negative sum of a few features of
its plan, chosen by K-fold cross-validation among nested feature sets and fitted with
non-negative least squares on relative error (`python -m calibrate.fidelity fit-steps`):

    step_s = Σ_f β_f · f(plan),   β_f >= 0

Features (FEATURES): a per-step constant, tokens, prefill tokens, prefill chunks, decode sequences,
the decode context they read (Σ C), causal prefill attention pairs (Σ c · (x + (c + 1) / 2) for a
chunk of c tokens after x cached ones), sampled rows, and the step's tokens piecewise (a slope per
doubling of the tokens, `token_segments`).

Why a new kind rather than a whole-step table (`profile_kind: "steps"`): that format holds a grid of
pure prefill and pure decode shapes and prices other steps through the roofline of the device's own
rows; an engine's recorded steps are whatever the workload produced (mostly mixed, ragged contexts),
and what they carry beyond kernels is host work that no roofline scales. Resampling the fitted
model onto a grid and fitting the roofline ratios on it again would price the same steps through
two fits. So the coefficients are the profile.

The profile was measured on one engine instance (one CPU shard, tensor_parallel 1): it carries no
communication, and swaps are not priced (the harness runs vLLM with recompute preemption).
numpy and pandas only.

No compiled form: the compiled engine core hands runs priced by this model to the SimPy engine. Its price is
written once, here, in Python (a sum of fitted features); `decode_step_costs` prices a run's context-free terms
once and repeats `step_cost`'s remaining operations per step, which tests/unit/test_decode_step_costs.py checks
bit for bit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from sim.core.step_plan import StepPlan
from sim.cost.calibrated import shard_shapes
from sim.core.step_plan import plain_decode_plan
from sim.cost.profile_meta import PROFILE_FORMAT_VERSION
from sim.cost.roofline import StepCost
from sim.errors import ConfigError
from sim.model.specs import ModelSpec

PROFILE_KIND = "engine_steps"
COEFFICIENTS_CSV = "coefficients.csv"


def _prefill_pairs(plan: StepPlan) -> float:
    return float(sum(c * (x + (c + 1) / 2) for c, x in zip(plan.prefill_chunk_tokens, plan.prefill_context_tokens)))


# name -> (feature of a plan, unit of its coefficient)
FEATURES: dict[str, tuple[Callable[[StepPlan], float], str]] = {
    "const": (lambda p: 1.0, "s per step"),
    "tokens": (lambda p: float(p.num_tokens), "s per token"),
    "prefill_tokens": (lambda p: float(p.num_prefill_tokens), "s per prefill token"),
    "prefill_chunks": (lambda p: float(len(p.prefill_chunk_tokens)), "s per prefill chunk"),
    "decode_seqs": (lambda p: float(p.num_decode_seqs), "s per decoding sequence"),
    "decode_context": (lambda p: float(p.decode_context_tokens), "s per cached token read by a decode"),
    "prefill_attention": (_prefill_pairs, "s per causal query-key pair of prefill attention"),
    "sampled_seqs": (lambda p: float(p.num_sampled_seqs), "s per sampled row"),
}

# A step's tokens priced piecewise: one slope per doubling (1-2, 2-4, 4-8, ... tokens per step), each >= 0,
# so the price is monotone and piecewise-linear in the GEMMs' M. Why: a CPU GEMM library switches kernels
# and blocking with M, so the price of a token is not one constant; one straight line priced the fidelity
# study's 5-16-token steps 7.5% low (benchmarks/RESULTS.md, "How much of the error is the host").
TOKEN_KNOTS = tuple(2 ** i for i in range(17))  # 1 .. 65,536 tokens per step


def _tokens_between(low: int, high: int) -> Callable[[StepPlan], float]:
    return lambda p: float(min(max(p.num_tokens - low, 0), high - low))


def _tokens_over(low: int) -> Callable[[StepPlan], float]:
    return lambda p: float(max(p.num_tokens - low, 0))


for _low in TOKEN_KNOTS:
    FEATURES[f"tokens_{_low}_to_{2 * _low}"] = (_tokens_between(_low, 2 * _low),
                                                f"s per step token beyond {_low}, up to {2 * _low}")
    FEATURES[f"tokens_over_{_low}"] = (_tokens_over(_low), f"s per step token beyond {_low}")

# Nested candidates, simplest first (the CV picks the simplest within noise of the best).
CANDIDATES: dict[str, tuple[str, ...]] = {
    "const": ("const",),
    "const+tokens": ("const", "tokens"),
    "const+prefill+decode": ("const", "prefill_tokens", "decode_seqs"),
    "+decode_context": ("const", "prefill_tokens", "decode_seqs", "decode_context"),
    "+prefill_attention": ("const", "prefill_tokens", "decode_seqs", "decode_context", "prefill_attention"),
    "+chunks+sampled": ("const", "prefill_tokens", "decode_seqs", "decode_context", "prefill_attention",
                        "prefill_chunks", "sampled_seqs"),
}


def token_segments(plans: list[StepPlan], min_steps: int | None = None) -> tuple[str, ...]:
    """The piecewise token features a set of steps can fit: a closed segment per doubling while at least
    `min_steps` (default COVERAGE_MIN_STEPS) steps have more tokens than its top, then one open-ended segment
    (so no slope is left unfitted, and beyond the data the price grows at the last fitted slope rather than
    stopping)."""
    min_steps = COVERAGE_MIN_STEPS if min_steps is None else min_steps
    tokens = np.array([p.num_tokens for p in plans])
    names, low = [], 1
    while 2 * low < TOKEN_KNOTS[-1] and int((tokens > 2 * low).sum()) >= min_steps:
        names.append(f"tokens_{low}_to_{2 * low}")
        low *= 2
    return (*names, f"tokens_over_{low}")


def candidates_for(plans: list[StepPlan]) -> dict[str, tuple[str, ...]]:
    """CANDIDATES, then the most flexible: the token price piecewise over these steps' range."""
    return {**CANDIDATES, "+token_segments": ("const", *token_segments(plans), "decode_seqs", "decode_context",
                                              "prefill_attention")}


def feature_matrix(plans: list[StepPlan], names: tuple[str, ...]) -> np.ndarray:
    """One row per plan, one column per named feature."""
    return np.array([[FEATURES[n][0](p) for n in names] for p in plans], dtype=float).reshape(len(plans), len(names))


def fit_relative(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative coefficients minimising Σ ((x β − y) / y)²: relative error, so short and long
    steps weigh alike. Columns are scaled to unit norm for the solve and the scale undone after."""
    a = x / y[:, None]
    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0
    from scipy.optimize import nnls  # Lawson and Hanson's active-set method
    return nnls(a / scale, np.ones(len(y)))[0] / scale


@dataclass(frozen=True)
class CrossValidation:
    """Held-out error of each candidate feature set and the one chosen."""

    table: pd.DataFrame  # candidate, features, folds, heldout_mean_abs, heldout_se, heldout_median_abs, heldout_bias, insample_mean_abs
    chosen: str  # the simplest candidate whose held-out mean |error| is within one standard error of the best
    folds: list[np.ndarray]  # row indices held out in each fold (contiguous runs of steps)


def kfold_indices(n: int, k: int) -> list[np.ndarray]:
    """K contiguous blocks of rows in recorded order: consecutive steps are alike (the same requests,
    one token further), so a held-out block is not a near-copy of rows the fit saw."""
    if k < 2 or n < k:
        raise ConfigError(f"--folds: {k} is not allowed for {n} steps; allowed: 2 <= folds <= number of steps")
    return [idx for idx in np.array_split(np.arange(n), k)]


def cross_validate(plans: list[StepPlan], measured_s: np.ndarray, folds: int = 5,
                   candidates: dict[str, tuple[str, ...]] = CANDIDATES) -> CrossValidation:
    y = np.asarray(measured_s, dtype=float)
    if (y <= 0).any() or not np.isfinite(y).all():
        raise ConfigError("RUN_DIR: steps.csv has a step with a non-positive or missing duration; allowed: end_s > start_s")
    blocks = kfold_indices(len(y), folds)
    rows = []
    for name, features in candidates.items():
        x = feature_matrix(plans, features)
        fold_errors, all_errors = [], np.empty(len(y))
        for held in blocks:
            train = np.setdiff1d(np.arange(len(y)), held)
            beta = fit_relative(x[train], y[train])
            err = x[held] @ beta / y[held] - 1
            all_errors[held] = err
            fold_errors.append(float(np.mean(np.abs(err))))
        insample = x @ fit_relative(x, y) / y - 1
        rows.append({"candidate": name, "features": " ".join(features), "folds": len(blocks),
                     "heldout_mean_abs": float(np.mean(np.abs(all_errors))),
                     "heldout_se": float(np.std(fold_errors, ddof=1) / np.sqrt(len(blocks))),
                     "heldout_median_abs": float(np.median(np.abs(all_errors))),
                     "heldout_bias": float(np.mean(all_errors)),
                     "insample_mean_abs": float(np.mean(np.abs(insample)))})
    table = pd.DataFrame(rows)
    best = table.loc[table["heldout_mean_abs"].idxmin()]
    within = table[table["heldout_mean_abs"] <= best["heldout_mean_abs"] + best["heldout_se"]]
    return CrossValidation(table, str(within.iloc[0]["candidate"]), blocks)


# --- coverage: where the calibration run's steps lie -------------------------------------------------

COVERAGE_MIN_STEPS = 5  # a (batch, context) cell with fewer calibration steps than this is not covered


def _log2_bin(x: float) -> int:
    return int(np.floor(np.log2(x))) if x >= 1 else -1


def _decode_cell(plan: StepPlan) -> tuple[int, int] | None:
    """(log2 bin of the decoding sequences, log2 bin of their mean cached context), or None without decodes."""
    if plan.num_decode_seqs <= 0:
        return None
    return _log2_bin(plan.num_decode_seqs), _log2_bin(plan.decode_context_tokens / plan.num_decode_seqs)


def calibration_coverage(plans: list[StepPlan]) -> dict:
    """What the fit saw: prefill tokens per step (range) and decode steps by (batch, context per sequence)
    in powers of two. A step model fitted on one run separates the price of a decoding sequence from the
    price of its cached tokens only where the run has both short and long contexts at a batch size; a
    step in a cell the run never (or barely) visited is an extrapolation, which `coverage_of` counts."""
    cells: dict[tuple[int, int], int] = {}
    prefill = [p.num_prefill_tokens for p in plans if p.num_prefill_tokens > 0]
    for p in plans:
        cell = _decode_cell(p)
        if cell is not None:
            cells[cell] = cells.get(cell, 0) + 1
    return {"decode_cells": [[b, c, n] for (b, c), n in sorted(cells.items())],
            "decode_cell_bins": "floor(log2(decoding sequences)), floor(log2(cached tokens per decoding sequence))",
            "min_steps_per_cell": COVERAGE_MIN_STEPS,
            "prefill_tokens_min": int(min(prefill)) if prefill else None,
            "prefill_tokens_max": int(max(prefill)) if prefill else None,
            "num_steps": len(plans)}


def coverage_of(coverage: dict, plans: list[StepPlan]) -> dict:
    """How many of these steps the calibration run covered: decode steps whose (batch, context) cell had at
    least `min_steps_per_cell` calibration steps, prefill steps within its range of prefill tokens."""
    seen = {(b, c) for b, c, n in coverage.get("decode_cells", []) if n >= coverage.get("min_steps_per_cell", 1)}
    low, high = coverage.get("prefill_tokens_min"), coverage.get("prefill_tokens_max")
    outside_decode = outside_prefill = outside_any = 0
    uncovered: dict[tuple[int, int], int] = {}
    for p in plans:
        cell = _decode_cell(p)
        bad_decode = cell is not None and cell not in seen
        bad_prefill = p.num_prefill_tokens > 0 and (low is None or not low <= p.num_prefill_tokens <= high)
        outside_decode += bad_decode
        outside_prefill += bad_prefill
        outside_any += bad_decode or bad_prefill
        if bad_decode:
            uncovered[cell] = uncovered.get(cell, 0) + 1
    n = len(plans)
    worst = sorted(uncovered.items(), key=lambda kv: -kv[1])[:3]
    return {"num_steps": n, "outside_fraction": outside_any / n if n else 0.0,
            "decode_outside_fraction": outside_decode / n if n else 0.0,
            "prefill_outside_fraction": outside_prefill / n if n else 0.0,
            "uncovered_decode_cells": [{"decode_seqs": f"{2 ** b}-{2 ** (b + 1) - 1}",
                                        "context_per_seq": f"{2 ** c}-{2 ** (c + 1) - 1}" if c >= 0 else "<1",
                                        "steps": k} for (b, c), k in worst]}


# --- profiles -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class EngineStepProfile:
    path: Path
    meta: dict
    model: ModelSpec
    coefficients: dict[str, float]  # feature -> seconds per unit


def load_engine_step_profile(path: str | Path, field: str = "cost_model.profile") -> EngineStepProfile:
    from sim.cost.profile_meta import read_meta

    p = Path(path).expanduser()
    meta = read_meta(p, field)
    if meta.get("profile_kind") != PROFILE_KIND:
        raise ConfigError(f"{field}: '{path}' is not an engine-steps profile (profile_kind "
                          f"{meta.get('profile_kind')!r}); allowed: profile_kind '{PROFILE_KIND}'")
    csv = p / COEFFICIENTS_CSV
    if not meta.get("complete") or not csv.is_file():
        raise ConfigError(f"{field}: '{path}' lacks {COEFFICIENTS_CSV} or is incomplete; write it again with "
                          "`python -m calibrate.fidelity fit-steps`")
    try:
        model = ModelSpec.model_validate(meta.get("model"))
        frame = pd.read_csv(csv)
        coefficients = {str(f): float(c) for f, c in zip(frame["feature"], frame["seconds_per_unit"])}
    except (ValueError, KeyError, TypeError, pd.errors.ParserError, pd.errors.EmptyDataError):
        raise ConfigError(f"{field}: '{csv}' is not a table of feature,seconds_per_unit with a valid model in "
                          "meta.json") from None
    unknown = [f for f in coefficients if f not in FEATURES]
    bad = [f for f, c in coefficients.items() if not (c >= 0 and np.isfinite(c))]
    if unknown or bad or not coefficients:
        raise ConfigError(f"{field}: '{csv}' has {'unknown features ' + ', '.join(unknown) if unknown else 'negative, missing or no coefficients'}; "
                          f"allowed: features {', '.join(FEATURES)} with coefficients >= 0")
    return EngineStepProfile(p, meta, model, coefficients)


def check_engine_step_matches(profile: EngineStepProfile, model: ModelSpec, tensor_parallel: int,
                              field: str = "cost_model.profile") -> None:
    """Fitted on one engine serving this model on one device: same shard, same layers, tensor_parallel 1."""
    if tensor_parallel != 1:
        raise ConfigError(f"{field}: '{profile.path}' was fitted on one engine instance (tensor_parallel 1); "
                          f"allowed: tensor_parallel 1, not {tensor_parallel}")
    if shard_shapes(profile.model, 1) != shard_shapes(model, 1) or profile.model.num_layers != model.num_layers:
        raise ConfigError(f"{field}: '{profile.path}' was fitted for {profile.model.name} "
                          f"({profile.model.num_layers} layers, hidden {profile.model.hidden_size}), not for "
                          f"{model.name} ({model.num_layers} layers, hidden {model.hidden_size})")


def write_engine_step_profile(out: str | Path, model: ModelSpec, coefficients: dict[str, float], meta: dict) -> Path:
    """meta.json + coefficients.csv, appearing at once."""
    from sim.atomic_files import atomic_dir

    with atomic_dir(Path(out)) as tmp:
        pd.DataFrame({"feature": list(coefficients), "seconds_per_unit": list(coefficients.values()),
                      "unit": [FEATURES[f][1] for f in coefficients]}).to_csv(tmp / COEFFICIENTS_CSV, index=False,
                                                                             float_format="%.6e")
        full = {"format_version": PROFILE_FORMAT_VERSION, "profile_kind": PROFILE_KIND,
                "model": model.model_dump(mode="json"), "tensor_parallel": 1, "shard": shard_shapes(model, 1),
                **meta, "complete": True}
        (tmp / "meta.json").write_text(json.dumps(full, indent=2) + "\n")
    return Path(out)


class EngineStepCostModel:
    """Step time = the fitted non-negative feature sum (module docstring). No FLOP or byte counts:
    the features are fitted seconds, not work."""

    def __init__(self, profile_dir: str | Path, model: ModelSpec, *, tensor_parallel: int = 1, **_ignored):
        self.profile = load_engine_step_profile(profile_dir)
        check_engine_step_matches(self.profile, model, tensor_parallel)
        self.model = model
        self._names = tuple(self.profile.coefficients)
        self._beta = np.array([self.profile.coefficients[n] for n in self._names])

    def __repr__(self) -> str:
        terms = " + ".join(f"{c:.3g}·{n}" for n, c in self.profile.coefficients.items())
        return (f"EngineStepCostModel({self.model.name}, fitted on {self.profile.meta.get('engine', '?')} steps "
                f"'{self.profile.path}': {terms} s)")

    def step_time(self, plan: StepPlan) -> float:
        if plan.num_tokens == 0:
            return 0.0
        return float(sum(b * FEATURES[n][0](plan) for n, b in zip(self._names, self._beta)))

    def step_cost(self, plan: StepPlan) -> StepCost:
        return StepCost(self.step_time(plan), 0.0, 0.0)

    def decode_step_costs(self, num_seqs: int, context_tokens: int, num_steps: int) -> list[StepCost]:
        """Costs of a run of decode-only steps (`sim.core.step_plan.decode_step_costs`), bit-identical to `step_cost` of
        each: every feature term but the decode context's is the same in all steps of the run, so only that
        product is recomputed, and the terms are summed in `step_time`'s order."""
        first = plain_decode_plan(num_seqs, context_tokens)
        if first.num_tokens == 0:
            return [StepCost(0.0, 0.0, 0.0)] * num_steps
        terms = [b * FEATURES[n][0](first) for n, b in zip(self._names, self._beta)]
        varying = [i for i, n in enumerate(self._names) if n == "decode_context"]
        out = []
        ctx = context_tokens
        for _ in range(num_steps):
            for i in varying:
                terms[i] = self._beta[i] * float(ctx)
            out.append(StepCost(float(sum(terms)), 0.0, 0.0))
            ctx += num_seqs
        return out
