"""Speculative decoding against published runs (benchmarks/published/speculative/): SGLang's EAGLE3.

The runs leave two numbers unstated: the acceptance (SGLang's accept length, which `vllm bench serve` does not print)
and the draft head's cost. Both are fitted on the run each file names `role: fit` (the speculation section's
`acceptance: {kind: accept_length}` and `draft_cost_ratio`), on its mean TPOT and mean ITL (their log errors, by
the main suite's Gauss-Newton: `fit_speculation`), and every other run is simulated with them and reported held
out. Everything else is the main suite's (benchmarks/published_suite.py): the engine
preset with its shipped CPU and front-end terms (sim/config/engine_terms.json, fitted on FIT_RUNS), the client, the
ShareGPT lengths scaled to the quoted means, the default cost model. The peak output rate is left out: with
speculation `vllm bench serve` counts a streamed chunk (a step's accepted tokens) where ServeSim counts tokens.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_published_speculative.py [--csv OUT]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import published_suite as ps  # noqa: E402

SPECULATIVE_DIR = ps.DATA_DIR / "speculative"
FIT_METRICS = ("tpot_itl", "itl")  # mean TPOT and mean ITL, the figures the two unknowns move most
REPORTED = ("throughput", "ttft", "tpot_itl", "itl", "tpot_median", "duration")  # the suite's groups but the peak
# The fit's start and bounds (calibrate/engine_fit.py fit_terms, Gauss-Newton in [0, hi]): the accept length less
# the verification's own token, at most γ (the drafts it verifies), and the draft's cost a draft step as a share of
# the target's step, at most 1; started at 2.5 tokens and the shipped scenarios' 0.1.
START = (1.5, 0.1)
SCALE = (0.05, 0.005)
DRAFT_RATIO_MAX = 1.0


@dataclass
class SpeculativeRun:
    case: ps.PublishedCase
    role: str  # fit or held-out, as the file names it
    errors: dict[str, float] = field(default_factory=dict)
    simulated: dict[str, float] = field(default_factory=dict)


def load_runs(directory: Path = SPECULATIVE_DIR) -> list[SpeculativeRun]:
    """Every run of the folder's files, parsed as the main suite parses its own (model files from the main suite's
    folder, benchmarks/published/)."""
    runs = []
    for path in sorted(directory.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        for i, raw in enumerate(data["cases"]):
            case = ps.normalize_case(raw, file=path.name, index=i, sources=data.get("sources") or {},
                                     file_unstated=data.get("unstated") or ())
            role = raw.get("role")
            if role not in ("fit", "held-out"):
                raise ValueError(f"{path.name} case {case.name!r}: role {role!r}; allowed: fit, held-out")
            runs.append(SpeculativeRun(case, role))
    return runs


def simulate_run(case: ps.PublishedCase, accept_length: float, draft_cost_ratio: float,
                 num_requests: int | None = None) -> dict[str, float]:
    """The case's figures (the suite's metric groups) simulated with this acceptance and draft cost."""
    from sim.config.files import validate_scenario
    from sim.run import simulate
    raw = ps.scenario(case, ps.COST_MODELS[ps.DEFAULT_COST_MODEL], None, num_requests)
    raw["speculation"] = {"draft_cost_ratio": draft_cost_ratio,
                          "acceptance": {"kind": "accept_length", "tokens_per_step": accept_length}}
    measured = ps.measure(simulate(validate_scenario(raw)), case.workload.requests)
    return {m.group: measured[m.sim] for m in case.metrics}


def errors_of(case: ps.PublishedCase, simulated: dict[str, float]) -> dict[str, float]:
    return {m.group: simulated[m.group] / m.measured - 1 for m in case.metrics if m.group in REPORTED}


def fit_speculation(case: ps.PublishedCase) -> tuple[float, float, float, list[str]]:
    """(accept length, draft cost ratio, squared log error, notes) fitted on `case`'s FIT_METRICS by the suite's
    Gauss-Newton (`fit_terms`, the best point it evaluated in bounds); a term left at a bound is said in the notes,
    never clamped silently."""
    import numpy as np

    from calibrate.engine_fit import fit_terms
    gamma = int(case.flags["speculative_num_steps"])  # SGLang's drafts a chain verifies (topk 1), a tree's depth

    def residuals(theta: np.ndarray) -> np.ndarray:
        errors = errors_of(case, simulate_run(case, 1.0 + float(theta[0]), float(theta[1])))
        return np.array([math.log1p(errors[g]) for g in FIT_METRICS])

    hi = np.array([float(gamma), DRAFT_RATIO_MAX])
    theta, _ = fit_terms(residuals, np.array(START), np.array(SCALE), hi)
    r = residuals(theta)
    notes = [f"{name} at its bound {bound:g}" for name, value, bound in
             (("accept length - 1", theta[0], 0.0), ("accept length - 1", theta[0], hi[0]),
              ("draft cost ratio", theta[1], 0.0), ("draft cost ratio", theta[1], hi[1])) if value == bound]
    return 1.0 + float(theta[0]), float(theta[1]), float(r @ r), notes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv", type=Path, help="write one row per run and figure here")
    args = ap.parse_args(argv)
    problem = ps.csv_target_problem(args.csv)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    runs = load_runs()
    fit_runs = [r for r in runs if r.role == "fit"]
    if len(fit_runs) != 1:
        print(f"error: expected one fit run, found {len(fit_runs)}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    accept, ratio, loss, notes = fit_speculation(fit_runs[0].case)
    print(f"Fitted on {fit_runs[0].case.name!r} (mean TPOT and ITL): accept length {accept:g} tokens a verification, "
          f"draft cost ratio {ratio:g} (loss {loss:.2e}){'; ' + '; '.join(notes) if notes else ''}")
    for run in runs:
        run.simulated = simulate_run(run.case, accept, ratio)
        run.errors = errors_of(run.case, run.simulated)
    print(f"{len(runs)} runs in {time.perf_counter() - t0:.0f} s\n")
    print(f"| run | role | {' | '.join(REPORTED)} |")
    print(f"| --- | --- | {' | '.join('---:' for _ in REPORTED)} |")
    for run in runs:
        cells = " | ".join(f"{run.errors[g] * 100:+.1f}%" if g in run.errors else "-" for g in REPORTED)
        print(f"| {run.case.name} | {run.role} | {cells} |")
    held = [r for r in runs if r.role == "held-out"]
    medians = {g: statistics.median(abs(r.errors[g]) for r in held) * 100 for g in REPORTED}
    maxima = {g: max(abs(r.errors[g]) for r in held) * 100 for g in REPORTED}
    print(f"\nHeld out ({len(held)}), median / max |error|: "
          + ", ".join(f"{g} {medians[g]:.0f} / {maxima[g]:.0f}%" for g in REPORTED))
    if args.csv:
        fields = ["case", "role", "metric", "measured", "simulated", "error", "accept_length", "draft_cost_ratio",
                  "url"]
        ps.write_csv_rows(args.csv, fields, (
            {"case": run.case.name, "role": run.role, "metric": m.group, "measured": m.measured,
             "simulated": run.simulated[m.group], "error": run.errors[m.group], "accept_length": accept,
             "draft_cost_ratio": ratio, "url": run.case.url}
            for run in runs for m in run.case.metrics if m.group in run.errors))
    return 0


if __name__ == "__main__":
    sys.exit(main())
