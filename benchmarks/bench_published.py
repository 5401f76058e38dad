"""ServeSim against the published suite: every run under benchmarks/published/ (issue 12; issue 30, item 5).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_published.py [--engine vllm|sglang|trtllm|lmdeploy]
        [--cost-model NAME] [--cases GLOB] [--csv OUT] [--quick] [--list]

Each case (a published run, its numbers quoted verbatim from a page pinned to a commit) is simulated as its source
describes it: the model, the GPU, TP and dtypes of the run, its engine's defaults for that GPU and version, its
arrival (all at once, a closed loop at the stated concurrency, Poisson at the stated rate) and fixed lengths at
the quoted means where the per-request lengths are not given. benchmarks/published_suite.py does the loading,
the scenarios and the held-out protocol; this file prints the table:

1. the case counts per engine, GPU, TP, dtype and kind (and per source), and any malformed case (one line each);
2. the fitted runs (FIT_RUNS: the runs each engine version's preset may be fitted on) and, separately, the
   held-out runs: measured vs simulated throughput, TTFT and TPOT/ITL with the signed error (simulated / measured
   - 1); the cases ServeSim cannot express yet, each with its reason;
3. per engine, over the held-out runs only: the median and max |error| of each of the three metrics, then, beside
   them and not in the goals, of the median TPOT, the ITL and the peak output rate where a source quotes them;
4. the same medians per source and GPU, per kind of run and per kind of cost model (where the error sits); the CSV
   names each run's cost model (`cost_model_label`);
5. the peak output rate's signed error per source, GPU and engine: the engine's speed at its fullest second, apart
   from how long a run's tail lasts.

`--cost-model` picks one of COST_MODELS (default: "default", the model ServeSim picks when a scenario names none). `--cases` is a glob on the
case names or on the data files' names (`--cases vllm_e2e.yaml`); `--only` a substring of the case names.
`--quick` runs the fitted runs and the first held-out run of each engine version and kind. Two runs' `--csv` files
side by side (what moved, per engine and version): benchmarks/published_diff.py.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import published_suite as ps  # noqa: E402
from published_suite import (  # noqa: E402,F401  (re-exported: tests/unit/test_published_cases.py)
    COST_MODELS,
    FIT_RUNS,
)

CASES = HERE / "published" / "vllm_e2e.yaml"  # the original nine vLLM runs (issue 12)


def scenario(case, cost_model: dict, fitted: dict | None = None) -> dict:
    """The scenario of one case: a PublishedCase, or a raw case of vllm_e2e.yaml (as before the suite)."""
    if isinstance(case, dict):
        case = ps.normalize_case(case, file=CASES.name)
    return ps.scenario(case, cost_model, fitted)


def _value(v: float, unit: str) -> str:
    if not math.isfinite(v):
        return "-"
    if unit == "s":
        return f"{v * 1e3:,.4g} ms" if v < 1 else f"{v:,.4g} s"
    return f"{v:,.5g} {unit}"


def fitted_text(fitted: dict) -> str:
    """One engine version's fitted numbers: each term in ms, x/÷ its 90% factor, or at its bound (or its fit's)."""
    from sim.config.engines import Z90, left_at_a_bound
    parts = []
    for term in ps.CPU_TERMS + ps.FRONTEND_TERMS:
        if term not in fitted:
            continue
        text = f"{term} {fitted[term] * 1e3:.4g} ms"
        if f"{term} at bound" in fitted:
            text += " (at a bound: not used)"
        elif left_at_a_bound(fitted):
            text += " (the fit left another term at a bound: not used)"
        elif f"{term} not pinned" in fitted:
            text += (f" x/÷ {math.exp(Z90 * fitted[f'{term} sigma_log']):.3g} (its 90% range reaches past the fit's "
                     "bound: not pinned, not used)")
        elif f"{term} sigma_log" in fitted:
            text += f" x/÷ {math.exp(Z90 * fitted[f'{term} sigma_log']):.2f}"
        parts.append(text)
    return ", ".join(parts) or "none"


def _err(e: float) -> str:
    return "-" if e is None or not math.isfinite(e) else f"{e:+.0%}"


def print_counts(cases, errors) -> None:
    c = ps.counts(cases)
    print(f"Published suite: {len(cases)} runs from {len(c['file'])} data files, {len(c['source'])} sources "
          f"({', '.join(f'{k} {v}' for k, v in c['source'].most_common())})")
    for dim, label in (("engine", "engine"), ("gpu", "GPU"), ("tp", "TP"), ("dtype", "dtype (weights)"),
                       ("kind", "kind")):
        print(f"  by {label}: " + ", ".join(f"{k} {v}" for k, v in sorted(c[dim].items(), key=lambda kv: str(kv[0]))))
    combo = {}
    for case in cases:
        k = (case.engine.label, case.gpu, case.tensor_parallel, case.weights, case.kind)
        combo[k] = combo.get(k, 0) + 1
    print("\n| engine | GPU | TP | dtype | kind | runs |\n| --- | --- | ---: | --- | --- | ---: |")
    for (e, g, tp, dt, kind), n in sorted(combo.items()):
        print(f"| {e} | {g} | {tp} | {dt} | {kind} | {n} |")
    if errors:
        print(f"\n{len(errors)} malformed (not loaded):")
        for line in errors:
            print(f"  {line}")


def print_rows(results, which: str, title: str) -> None:
    rows = [r for r in results if r.role == which]
    print(f"\n## {title}: {len(rows)} runs, {sum(r.status == 'simulated' for r in rows)} simulated\n")
    print("| case | engine | GPU, TP, dtype | metric | measured | simulated | error |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: |")
    for r in rows:
        c = r.case
        where = f"{c.gpu}, TP{c.tensor_parallel}, {c.weights}"
        if r.status != "simulated":
            print(f"| {c.name} | {c.engine.label} | {where} | not simulated: {r.reason} | | | |")
            continue
        for m in c.headline:
            print(f"| {c.name} | {c.engine.label} | {where} | {ps.GROUP_LABELS[m.group]} ({m.quoted_key}) | "
                  f"{_value(m.measured, m.unit)} | {_value(r.simulated[m.group], m.unit)} | "
                  f"{_err(r.errors[m.group])} |")


def _summary_cells(e: dict, groups: tuple[str, ...] = ps.HEADLINE) -> str:
    cells = ["-" if not e[g]["n"] else f"{e[g]['median']:.0%} / {e[g]['max']:.0%} (n={e[g]['n']})"
             for g in groups]
    return f"{e['runs']} | {e['simulated']} | " + " | ".join(cells)


def print_summary(results, which: str = "held-out") -> None:
    s = ps.summarize(results, which)
    print(f"\n## Per engine, {which} runs only: median / max |error| (n = runs with that metric)\n")
    print("| engine | runs | simulated | throughput | TTFT | TPOT/ITL |\n| --- | ---: | ---: | ---: | ---: | ---: |")
    for key in ("vllm", "sglang", "trtllm", "lmdeploy"):
        if key in s:
            print(f"| {ps.ENGINE_LABELS[key]} | {_summary_cells(s[key])} |")
    print("Goal (issue 30): median |error| <= 10% and max <= 25% on each metric, per engine, held-out runs.")
    beside = ps.summarize(results, which, groups=ps.BESIDE)
    print(f"\n## Beside the headline, not in the goals, {which} runs only: median / max |error| where quoted\n")
    print("| engine | runs | simulated | " + " | ".join(ps.GROUP_LABELS[g] for g in ps.BESIDE) + " |\n"
          "| --- | ---: | ---: | " + " | ".join("---:" for _ in ps.BESIDE) + " |")
    for key in ("vllm", "sglang", "trtllm", "lmdeploy"):
        if key in beside:
            print(f"| {ps.ENGINE_LABELS[key]} | {_summary_cells(beside[key], ps.BESIDE)} |")


def cost_model_kind(label: str) -> str:
    """The kind of cost model a run's label names: "calibrated", "learned roofline", "measured: sglang tables"
    (whose tables; their GPU and version are in the CSV's cost_model_label)."""
    head = label.split(" + ", 1)[0]
    words = head.split()
    if head.startswith("measured (AIConfigurator ") and len(words) > 3:
        return f"measured: {words[3].rstrip(',)')} tables"
    return head.split(" (", 1)[0] or "-"


# Where a run counts as compute-bound in the breakdown: its simulation's MFU at or above this. A split for reading
# the table, not a model parameter (12-03: 0.25 to 0.5 give the same picture).
COMPUTE_BOUND_MFU = 0.3


def _bound(mfu: float) -> str:
    return "-" if not math.isfinite(mfu) else (f">= {COMPUTE_BOUND_MFU:.0%}" if mfu >= COMPUTE_BOUND_MFU
                                               else f"< {COMPUTE_BOUND_MFU:.0%}")


def print_breakdown(results, which: str = "held-out") -> None:
    """Where the error sits: the same medians per source and GPU, per kind of run, and per kind of cost model the runs
    were priced by."""
    by_source = ps.summarize(results, which, key=lambda r: (ps.source_repo(r.case), r.case.gpu))
    print(f"\n## Per source and GPU, {which} runs only: median / max |error| (every engine)\n")
    print("| source | GPU | runs | simulated | throughput | TTFT | TPOT/ITL |\n"
          "| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for (source, gpu), e in sorted(by_source.items()):
        print(f"| {source} | {gpu} | {_summary_cells(e)} |")
    by_bound = ps.summarize(results, which, key=lambda r: (ps.source_repo(r.case), r.case.gpu,
                                                           _bound(r.mfu)))
    print(f"\n## Per source, GPU and how compute-bound the simulated run is (its MFU against "
          f"{COMPUTE_BOUND_MFU:.0%}), {which} runs only\n")
    print("| source | GPU | simulated MFU | runs | simulated | throughput | TTFT | TPOT/ITL |\n"
          "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for (source, gpu, bound), e in sorted(by_bound.items()):
        print(f"| {source} | {gpu} | {bound} | {_summary_cells(e)} |")
    by_kind = ps.summarize(results, which, key=lambda r: r.case.kind)
    print(f"\n## Per kind of run (each case's `kind`), {which} runs only\n")
    print("| kind | runs | simulated | throughput | TTFT | TPOT/ITL |\n| --- | ---: | ---: | ---: | ---: | ---: |")
    for kind, e in sorted(by_kind.items()):
        print(f"| {kind} | {_summary_cells(e)} |")
    by_model = ps.summarize(results, which, key=lambda r: cost_model_kind(r.label))
    print(f"\n## Per cost model (the best available for each run), {which} runs only\n")
    print("| cost model | runs | simulated | throughput | TTFT | TPOT/ITL |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: |")
    for kind, e in sorted(by_model.items(), key=lambda kv: (-kv[1]["runs"], kv[0])):
        print(f"| {kind} | {_summary_cells(e)} |")


def print_peak(results, which: str = "held-out") -> None:
    """The peak output rate beside the headline (not in the goals): the engine's speed at its fullest second, apart
    from how long the run's tail lasts; signed, per source, GPU and engine."""
    by: dict[tuple[str, str, str], list[float]] = {}
    for r in results:
        err = r.errors.get("peak", math.nan)
        if r.role == which and r.status == "simulated" and math.isfinite(err):
            by.setdefault((ps.source_repo(r.case), r.case.gpu, r.case.engine.key), []).append(err)
    if not by:
        return
    print(f"\n## Peak output rate (`vllm bench serve`'s peak output token throughput), {which} runs only: "
          "simulated / measured - 1, beside the headline, not in it\n")
    print("| source | GPU | engine | runs | median | min | max |\n| --- | --- | --- | ---: | ---: | ---: | ---: |")
    for (source, gpu, engine), errs in sorted(by.items()):
        print(f"| {source} | {gpu} | {ps.ENGINE_LABELS[engine]} | {len(errs)} | {statistics.median(errs):+.0%} | "
              f"{min(errs):+.0%} | {max(errs):+.0%} |")


def write_csv(path: Path, results, cost_model: str) -> None:
    fields = ["file", "case", "engine", "version", "gpu", "tp", "weights", "kv_dtype", "kind", "role", "status",
              "reason", "metric", "quoted_key", "unit", "measured", "simulated", "error", "servesim_quantity",
              "definition", "cost_model", "cost_model_label", "simulated_mfu", "url", "assumptions", "approximations",
              "notes"]
    rows = []
    for r in results:
        c = r.case
        base = {"file": c.file, "case": c.name, "engine": c.engine.key, "version": c.engine.version, "gpu": c.gpu,
                "tp": c.tensor_parallel, "weights": c.weights, "kv_dtype": c.kv_dtype, "kind": c.kind,
                "role": r.role, "status": r.status, "reason": r.reason, "cost_model": cost_model,
                "cost_model_label": r.label, "simulated_mfu": r.mfu, "url": c.url,
                "assumptions": "; ".join(c.assumptions), "approximations": "; ".join(r.approximations),
                "notes": r.notes}
        for m in c.metrics:
            rows.append({**base, "metric": m.group, "quoted_key": m.quoted_key, "unit": m.unit,
                         "measured": m.measured, "simulated": r.simulated.get(m.group, math.nan),
                         "error": r.errors.get(m.group, math.nan), "servesim_quantity": ps.SIM_QUANTITIES[m.sim],
                         "definition": m.definition})
    ps.write_csv_rows(path, fields, rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", choices=["vllm", "sglang", "trtllm", "lmdeploy"])
    ap.add_argument("--cost-model", default=ps.DEFAULT_COST_MODEL, choices=list(COST_MODELS))
    ap.add_argument("--cases", metavar="GLOB", help="glob on case names or data-file names")
    ap.add_argument("--only", metavar="TEXT", help="only cases whose name contains TEXT")
    ap.add_argument("--csv", metavar="OUT", type=Path, help="write every case and metric to this CSV")
    ap.add_argument("--quick", action="store_true", help="the fitted runs + the first held-out run per engine "
                    "version and kind")
    ap.add_argument("--list", action="store_true", help="print the counts and the cases; simulate nothing")
    ap.add_argument("--write-terms", action="store_true", help="write the fitted numbers into the engine presets' "
                    "data (sim/config/engine_terms.json); only from a run of every case")
    args = ap.parse_args(argv)
    problem = ps.csv_target_problem(args.csv)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    if args.write_terms and (args.engine or args.cases or args.only or args.quick):
        print("--write-terms: only from a run of every case (no --engine, --cases, --only or --quick)")
        return 2

    suite = ps.load_suite()
    cases = ps.select(suite.cases, engine=args.engine, pattern=args.cases, only=args.only, quick=args.quick)
    print_counts(cases, suite.errors)
    for line in ps.fit_run_problems(suite.cases):
        print(f"FIT_RUNS problem: {line}")
    if args.list:
        print()
        for c in cases:
            w = c.workload
            print(f"{ps.role(c):8} {c.name} | {c.engine.label} | {c.gpu} TP{c.tensor_parallel} {c.weights} | "
                  f"{w.arrival} | {w.input_tokens}/{w.output_tokens} x {w.num_prompts}")
        return 0
    if not cases:
        print("no case selected")
        return 1
    print(f"\nCost model: {args.cost_model} {COST_MODELS[args.cost_model]}")
    t0 = time.perf_counter()
    results, fitted = ps.run_suite(cases, args.cost_model, fit_pool=suite.cases)
    wall = time.perf_counter() - t0
    print("Fitted numbers per engine version (fit_preset; x/÷ the 90% factor of the fit's spread, SPREAD_METHOD): "
          + ", ".join(f"{e} {v}: {fitted_text(f)}" for (e, v), f in fitted.items()))
    if args.write_terms:
        import json
        from datetime import date

        from sim.atomic_files import atomic_write_text
        from sim.config.engines import TERMS_PATH
        atomic_write_text(TERMS_PATH, json.dumps(ps.terms_table(fitted, date.today().isoformat()), indent=1) + "\n")
        print(f"fitted numbers written to {TERMS_PATH.relative_to(HERE.parent)}")
    print_rows(results, "fit", "Fitted runs (FIT_RUNS)")
    print_rows(results, "held-out", "Held-out runs")
    print_summary(results, "held-out")
    print_breakdown(results, "held-out")
    print_peak(results, "held-out")
    not_sim = [r for r in results if r.status != "simulated"]
    if not_sim:
        print(f"\nNot simulated ({len(not_sim)}):")
        for r in not_sim:
            print(f"  {r.case.name}: {r.reason}")
    approx = sorted({a for r in results for a in r.approximations})
    if approx:
        print("\nEngine rule approximated (the preset's stand-in is not the engine's own rule):")
        for a in approx:
            n = sum(a in r.approximations for r in results)
            print(f"  [{n} runs] {a}")
    print("\nEngine presets applied (sim/config/engines/: each engine's own defaults for the GPU and version):")
    from sim.config.engines import PRESETS
    for key in sorted({r.case.engine.key for r in results}):
        preset = PRESETS[key]
        summary = " ".join(preset.derive.__doc__.split("\n\n")[0].split()) if preset.derive.__doc__ else ""
        print(f"  {ps.ENGINE_LABELS[key]}: {summary} Source: {preset.source}.")
    if args.csv:
        write_csv(args.csv, results, args.cost_model)
        print(f"\nCSV: {args.csv}")
    print(f"\n{len(results)} runs in {wall:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
