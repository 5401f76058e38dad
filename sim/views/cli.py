"""The `servesim` command line. Bad input: one line on stderr naming field, value and what is allowed; exit 2."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from sim.errors import ServeSimError
from sim.views.output_paths import check_distinct_outputs, check_output_dir, check_output_file

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="ServeSim: simulate LLM serving systems and compare policies before buying GPUs.")
# Piped output (make demo, CI logs) gets wide tables instead of rich's 80-column default.
console = Console(width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True)

SetOption = typer.Option(None, "--set", help="override a scenario key: path.to.key=value (repeatable)")
BandOption = typer.Option(None, "--band", help="a band of this level (percent, in (0, 100)) on every headline "
                          "figure, from replications (sets run.band; sim/bands.py)")


def _with_band(overrides: Optional[list[str]], band: Optional[float]) -> Optional[list[str]]:
    """--band LEVEL as the override run.band=LEVEL: the schema checks it like any other value."""
    return overrides if band is None else [*(overrides or []), f"run.band={band!r}"]


def _load(path: str, overrides: Optional[list[str]]):
    from sim.config.files import load_scenario_set
    return load_scenario_set(path, overrides or [])


def _progress_callback(progress: Progress, task):
    def update(now_s: float, num_done: int) -> None:
        progress.update(task, completed=num_done, description=f"t={now_s:,.1f}s simulated")
    return update


def _simulate_with_progress(scenario, workload, label: str, quiet: bool, workloads: dict | None = None):
    """`workloads`: the replications' workloads, shared by the variants of a comparison (sim/bands.py)."""
    from functools import partial

    from sim.bands import simulate_with_band
    simulate = partial(simulate_with_band, workloads=workloads)  # the run, and its band when run.band asks for one
    if quiet:
        return simulate(scenario, workload)
    progress = Progress(TextColumn(f"[bold]{label}[/bold]"), TextColumn("{task.description}"), BarColumn(),
                        TextColumn("{task.completed:,}/{task.total:,} requests done"), TimeElapsedColumn(),
                        console=err_console, transient=False)
    update = _progress_callback(progress, progress.add_task("starting", total=workload.num_requests))
    started = []

    def update_shown(now_s: float, num_done: int) -> None:
        # The bar shows from the run's first progress on: a scenario its cost model refuses stops before it, and
        # its one error line is all that is printed.
        if not started:
            progress.start()
            started.append(True)
        update(now_s, num_done)
    try:
        result = simulate(scenario, workload, progress=update_shown)
    finally:
        if started:
            progress.stop()
    if not started:  # a run too short to report progress: its bar once, as it ended
        progress.start()
        progress.stop()
    return result


def _summary_table(results) -> Table:
    from sim.views.report import (
        COST_MODEL_LABEL,
        DEPLOYMENT_LABEL,
        cost_model_labels,
        deployment_label,
        format_banded,
        format_value,
        summary_rows,
    )
    table = Table(title="Summary", show_lines=False)
    table.add_column("metric")
    for r in results:
        table.add_column(r.name, justify="right")
    for key, label in summary_rows(results):
        table.add_row(label, *[format_banded(key, r.summary) for r in results])
    table.add_row(DEPLOYMENT_LABEL, *[deployment_label(r.scenario) for r in results])
    table.add_row(COST_MODEL_LABEL, *cost_model_labels(results))
    if any(r.summary.get("slo_met") is not None for r in results):
        table.add_row("SLOs met", *[format_value(r.summary.get("slo_met")) for r in results])
    return table


# scheduler.too_long's rules in words, for the notes on clipped and rejected requests
TOO_LONG_WORDS = {"clip": "clipped to fit", "refuse": "refused, not clipped",
                  "clip_output": "their output cut to what the prompt leaves, a prompt of max_model_len or more "
                                 "refused"}


def _too_long_rule(scenario) -> str:
    """The rule a run's over-long requests went by, for its notes (scheduler.too_long), and whose rule it is; ""
    for clip, ServeSim's own default, which the notes' words already say."""
    rule = scenario.scheduler.too_long
    if rule == "clip":
        return ""
    whose = f", engine {scenario.engine.name} {scenario.engine.version}'s" if scenario.engine is not None else ""
    return f" (scheduler.too_long: {rule}{whose}: {TOO_LONG_WORDS[rule]})"


def _clipping_notes(results, differences=None):
    """One line per result whose generated lengths were cut to fit the model: its numbers are for shorter requests.
    Returns the verdict printed first (`differences`: the band of each difference, sim/bands.py)."""
    from sim.config.cost_choice import measured_refused
    from sim.model.catalog import resolve_model
    from sim.run import seed_draws
    from sim.views.report import band_note
    from sim.views.verdict import verdict_of  # first, the verdict under the summary table (issue 32)
    verdict = verdict_of(results, differences=differences)
    console.print(verdict.text(), markup=False, highlight=False)
    why = dict(verdict.why)  # {variant: the verdict's sentence on it}
    basis = {r.name: _basis_notes(r, resolve_model, measured_refused) for r in results}
    sharing: dict[str, list[str]] = {}  # each basis note -> the variants it is for, printed once for them all
    for name, lines in basis.items():
        for line in dict.fromkeys(lines):
            sharing.setdefault(line, []).append(name)
    for r in results:
        note = band_note(r.name, r.summary, seed_draws(r.scenario))
        if note:
            console.print(note, markup=False, highlight=False)
        if r.summary.get("window_note"):
            console.print(f"note: {r.name}: {r.summary['window_note']}", markup=False, highlight=False)
        for line in basis[r.name]:
            names = sharing.pop(line, None)  # None: printed with an earlier variant
            if names is not None:
                console.print(f"note: {', '.join(names)}: {line}", markup=False, highlight=False)
        rejected = r.summary.get("num_rejected") or 0
        if rejected:  # the table counts them; say why (a KV cache of a few blocks rejects every request, exit 0)
            reason = r.first_reject_reason()
            first = (" (the first as the verdict says)" if reason and reason in why.get(r.name, "") else
                     f" (the first: {reason})" if reason else "")
            slo = "; each counts over every SLO limit" if r.summary.get("slo_met") is not None else ""
            rule = _too_long_rule(r.scenario)
            console.print(f"note: {r.name}: {rejected:,} of {r.summary.get('num_requests', 0):,} requests were "
                          f"rejected, as they can never run here{first}{rule}{slo}; requests.parquet's reject_reason "
                          "says why for each", markup=False, highlight=False)
        clipped = r.summary.get("num_requests_clipped") or 0
        if clipped:
            console.print(f"note: {r.name}: {clipped:,} of {r.summary.get('num_requests', 0):,} requests were longer "
                          f"than max_model_len ({r.summary.get('max_model_len')} tokens) and were clipped to fit"
                          f"{_too_long_rule(r.scenario)}",
                          markup=False, highlight=False)
    return verdict


def trace_short_note(scenario, num_generated: int | None) -> str | None:
    """A replayed trace with fewer rows than run.num_requests asks for (and no duration to end it first): every row
    ran, and the figures are of that many requests, which the user should not take for the count they asked."""
    run, arrival = scenario.run, scenario.workload.arrival
    if arrival.kind != "trace" or run.num_requests is None or run.duration_s is not None or num_generated is None:
        return None
    if num_generated >= run.num_requests:
        return None
    return (f"the trace '{arrival.path}' holds {num_generated:,} requests, fewer than run.num_requests "
            f"{run.num_requests:,}: all {num_generated:,} were replayed, once")


def _basis_notes(r, resolve_model, measured_refused) -> list[str]:
    """What a result's figures rest on that was not measured as such, one line each (without the variant's name):
    what its engine preset and cost model approximate, what its model's architecture leaves out, why a default
    model is not the measured tables, and a trace that held fewer requests than asked."""
    lines = [f"engine {r.extras['engine']}: {line}" for line in r.extras.get("engine_notes", ())]
    for key, pool in (("cost_model_notes", ""), ("prefill_cost_model_notes", "prefill ")):
        lines += [f"{pool}cost model: {line}" for line in r.extras.get(key, ())]  # sim/cost/labels.py
    model = resolve_model(r.scenario.model)
    if model.not_modelled:  # what the config.json reader leaves out of the architecture (a shipped one's too)
        lines.append(f"model {model.name}: not modelled: {model.not_modelled}")
    refused = measured_refused(r.extras.get("cost_model_choice"))
    if refused:  # a default below the measured tables: why not them
        lines.append(f"default cost model: not the measured kernel tables: {refused}")
    short = trace_short_note(r.scenario, r.summary.get("num_requests"))
    if short:  # (the variants replaying one trace share it)
        lines.append(short)
    return lines


def _folder_name(variant: str) -> str:
    """A variant name as one safe folder name ("multi-turn/on" -> "multi-turn_on")."""
    return re.sub(r"[^A-Za-z0-9._+()-]", "_", variant).strip(".") or "variant"


def variant_folders(names: list[str]) -> dict[str, str]:
    """One distinct folder per variant. Names that map to the same safe name ("tp1/pp1" and "tp1_pp1"; also
    the same but for case, as a case-blind file system sees them) each get a suffix from their own name, so
    no variant's records overwrite another's and a name keeps its folder whatever the other variants are."""
    safe = {name: _folder_name(name) for name in names}
    counts: dict[str, int] = {}
    for folder in safe.values():
        counts[folder.lower()] = counts.get(folder.lower(), 0) + 1
    return {name: folder if counts[folder.lower()] == 1
            else f"{folder}-{hashlib.sha1(name.encode()).hexdigest()[:8]}" for name, folder in safe.items()}


def _write_outputs(out: Path, results, title: str, scenario_yaml: str, extra_files=None,
                   differences=None) -> dict[str, str]:
    """Every result's records, summary and scenario, and the report, in `out` at once (`atomic_dir`: never over
    a folder ServeSim did not write); `extra_files` {relative path: writer(path)} go in with them. Returns the
    folder of each variant."""
    from sim.atomic_files import atomic_dir, write_json
    from sim.views.report import render_report
    folders = variant_folders([r.name for r in results]) if len(results) > 1 else {results[0].name: ""}
    with atomic_dir(out) as tmp:
        for r in results:
            sub = tmp / folders[r.name] if folders[r.name] else tmp
            sub.mkdir(exist_ok=True)
            r.requests.to_parquet(sub / "requests.parquet", index=False)
            r.steps.to_parquet(sub / "steps.parquet", index=False)
            write_json(sub / "summary.json", r.summary)
            (sub / "scenario.yaml").write_text(r.scenario.to_yaml())
        if len(results) > 1:
            write_json(tmp / "summary.json", {r.name: r.summary for r in results})
            write_json(tmp / "folders.json", folders)
        (tmp / "report.html").write_text(render_report(results, title, scenario_yaml, differences=differences))
        for relative, writer in (extra_files or {}).items():
            (tmp / relative).parent.mkdir(parents=True, exist_ok=True)
            writer(tmp / relative)
    return folders


@app.command()
def run(scenario: str = typer.Argument(..., help="scenario YAML file"),
        set_: Optional[list[str]] = SetOption,
        variant: Optional[str] = typer.Option(None, help="run this variant instead of the base"),
        out: Optional[Path] = typer.Option(None, help="write requests/steps Parquet, summary.json, report.html here"),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
        timeline: Optional[str] = typer.Option(None, "--timeline", help="write a Chrome trace-event JSON here "
                                                "(open in ui.perfetto.dev or chrome://tracing)"),
        timeline_window: Optional[str] = typer.Option(None, "--timeline-window", help="START:END seconds: only "
                                                      "steps and requests in this window"),
        timeline_max_requests: Optional[int] = typer.Option(None, "--timeline-max-requests", help="at most N "
                                                            "requests, evenly spaced in arrival order"),
        band: Optional[float] = BandOption):
    """Simulate one scenario and print its summary."""
    from sim.compiled.engine import prefer_simpy_while_cold
    from sim.run import make_workload
    prefer_simpy_while_cold()  # one command: a small run does not wait for a cold core to compile
    from sim.views.timeline import check_timeline_options, write_timeline
    window = check_timeline_options(timeline, timeline_window, timeline_max_requests)
    from sim.config.files import load_one_scenario
    chosen = load_one_scenario(scenario, _with_band(set_, band), variant)  # only it: another variant may not run
    # Before simulating, not after: the folder, and where the timeline goes relative to it.
    timeline_inside = None
    if out is not None:
        timeline_inside = check_distinct_outputs(check_output_dir(out), {"--timeline": timeline})["--timeline"]
    result = _simulate_with_progress(chosen, make_workload(chosen), chosen.name, quiet)
    console.print(_summary_table([result]))
    _clipping_notes([result])
    written: dict = {}

    def timeline_writer(path) -> None:
        written.update(write_timeline(result, path, window, timeline_max_requests))
    if out is not None:
        _write_outputs(out, [result], f"ServeSim run: {chosen.name}", chosen.to_yaml(),
                       {timeline_inside: timeline_writer} if timeline_inside is not None else None)
        console.print(f"Outputs written to {out}/ (report: {out / 'report.html'})")
    if timeline is not None:
        if timeline_inside is None:
            timeline_writer(timeline)
        console.print(f"Timeline written to {timeline} ({written['bytes'] / 1e6:,.2f} MB: {written['steps']:,} steps, "
                      f"{written['requests']:,} requests); open it in ui.perfetto.dev")


@app.command()
def compare(scenario: str = typer.Argument(..., help="scenario YAML file with variants"),
            set_: Optional[list[str]] = SetOption,
            out: Optional[Path] = typer.Option(None, help="output folder (default: out/<scenario name>)"),
            quiet: bool = typer.Option(False, "--quiet", "-q"),
            band: Optional[float] = BandOption):
    """Run every variant of a scenario on the same generated workload and compare them."""
    from sim.compiled.engine import prefer_simpy_while_cold
    from sim.run import make_workload
    prefer_simpy_while_cold()  # one command: small runs do not wait for a cold core to compile
    scenario_set = _load(scenario, _with_band(set_, band))
    out = out or Path("out") / Path(scenario).stem
    check_output_dir(out)  # before simulating, not after
    results = []
    workloads: dict = {}  # each replication's workload, generated once for every variant that shares it
    for name, variant in scenario_set.items():
        results.append(_simulate_with_progress(variant, make_workload(variant), name, quiet, workloads))
    console.print(_summary_table(results))
    differences = _pair_differences(results)
    verdict = _clipping_notes(results, differences)
    extra = None
    if differences is not None:  # the band of each variant's difference from the winner (issue 31)
        from sim.atomic_files import write_json
        from sim.bands import difference_bands
        from sim.views.report import difference_lines
        table = difference_bands(results, verdict.winner)
        for line in difference_lines(table):
            console.print(line, markup=False, highlight=False)
        extra = {"band_differences.json": lambda path: write_json(path, table)}
    from sim.views.attention_whatif import attention_rows
    attention = attention_rows(results)  # None unless a variant materializes the attention scores
    if attention is not None:
        console.print("attention kernel:\n" + attention.to_string(index=False), markup=False, highlight=False)
    folders = _write_outputs(out, results, f"ServeSim comparison: {scenario_set.base.name}",
                             Path(scenario).read_text(), extra, differences)
    for name, folder in folders.items():
        if folder and folder != _folder_name(name):  # "": a scenario without variants writes in `out` itself
            console.print(f"note: variant {name!r} shares its folder name with another; its records are in "
                          f"{out / folder}/", markup=False, highlight=False)
    console.print(f"Outputs written to {out}/ — open {out / 'report.html'} in a browser.")


def _pair_differences(results):
    """The band of B − A for every pair of banded variants (sim/bands.py `pair_differences`), what the verdict
    reads; None where fewer than two variants have a band."""
    if sum(1 for r in results if "band_values" in r.extras) < 2:
        return None
    from sim.bands import pair_differences
    return pair_differences(results)


def _csv_list(option: str, text: Optional[str], cast=str) -> Optional[list]:
    if text is None:
        return None
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise ServeSimError(f"{option}: {text!r} is empty; give a comma-separated list")
    try:
        return [cast(x) for x in items]
    except ValueError:
        raise ServeSimError(f"{option}: {text!r} is not a comma-separated list of {cast.__name__} values") from None


def _read_raw(path: str, overrides: Optional[list[str]], resolve: bool = True, check: bool = True) -> dict:
    """The scenario file as a mapping (relative paths anchored, overrides applied), validated once (unless the
    caller checks it itself: `check` false)."""
    from sim.config.files import (
        anchor_paths,
        apply_overrides,
        build_scenario_set,
        read_yaml,
    )
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ServeSimError(f"{path}: expected a YAML mapping at the top level")
    anchor_paths(raw, Path(path).resolve().parent)
    raw = apply_overrides(raw, overrides or [])
    if check:
        build_scenario_set(dict(raw), path, resolve=resolve)  # every variant valid before anything runs
    return raw


def _task_progress(label: str):
    return Progress(TextColumn(f"[bold]{label}[/bold]"), TextColumn("{task.description}"), BarColumn(),
                    MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                    console=err_console, transient=False)


BackendOption = typer.Option("process", "--backend", help="process (local pool, every core), ray, or serial")
# A plan's searches are short: a process pool's start-up (every worker imports the simulator and loads the compiled
# core, once for the searches and again for the details) costs more than it saves on a few cores
# (scenarios/capacity_plan.yaml on the 2-core development machine: 4.4 s serial, 7.0 s in a pool).
PlanBackendOption = typer.Option("serial", "--backend", help="serial (the default: a plan's searches are short), "
                                 "process (local pool, every core) or ray, for plans of long simulations")
WorkersOption = typer.Option(None, "--workers", help="parallel workers (default: every core this process may use)")
AddressOption = typer.Option(None, "--address", help="ray: address of an existing cluster (default: start a local one)")


@app.command()
def sweep(scenario: str = typer.Argument(..., help="scenario YAML file"),
          grid: list[str] = typer.Option(..., "--grid", help="key=v1,v2,... (repeatable; `rate` sets the arrival rate)"),
          set_: Optional[list[str]] = SetOption,
          variant: Optional[list[str]] = typer.Option(None, "--variant", help="variants to sweep (default: all)"),
          out: Optional[str] = typer.Option(None, help="output .parquet or .csv (default: out/<name>-sweep.parquet)"),
          backend: str = BackendOption, workers: Optional[int] = WorkersOption,
          address: Optional[str] = AddressOption,
          quiet: bool = typer.Option(False, "--quiet", "-q"),
          band: Optional[float] = BandOption):
    """Simulate the cross product of scenario keys; one row per point. Resumable: done points are skipped.
    With --band (run.band) each row gets <metric>_lo / <metric>_hi columns; the band is part of the sweep's
    identity (a table of another band is not resumed)."""
    from sim.tools.sweep import check_sweep_scenario, parse_grid, plan_sweep, run_point
    raw = _read_raw(scenario, _with_band(set_, band), check=False)
    axes = parse_grid(grid)
    names = list((raw.get("variants") or {}).keys())
    if variant:
        unknown = [v for v in variant if v not in names]
        if unknown:
            raise ServeSimError(f"--variant: {unknown[0]!r} is not in {scenario}; allowed: {', '.join(names) or '(none)'}")
    try:
        check_sweep_scenario(raw, axes, scenario)  # a point that cannot run gets its reason in its row
    except ServeSimError:
        if not variant:
            raise
        from sim.config.files import check_every_part  # only the variants swept must take the --set
        check_every_part(_read_raw(scenario, None, check=False), scenario, _with_band(set_, band))
        check_sweep_scenario(raw, axes, scenario, variant)
    chosen: list = list(variant) if variant else (names or [None])
    if workers is not None and workers < 1:
        raise ServeSimError(f"--workers: {workers} must be >= 1")
    out = out or str(Path("out") / f"{Path(scenario).stem}-sweep.parquet")
    check_output_file(out, must_be_ours=False)  # an existing table is resumed: SweepOutput checks it is a sweep's
    out = Path(out)
    plan = plan_sweep(raw, axes, out, chosen)
    shared = plan.tasks[0].cost_model_choice if plan.tasks else None
    if shared and not quiet:
        err_console.print(f"Points that name no cost model are priced alike ({shared}; sim/config/cost_choice.py)")
    skipped = len(plan.tasks) - len(plan.todo)
    if skipped:
        err_console.print(f"{skipped} of {len(plan.tasks)} points already in {out}; running the other {len(plan.todo)}")
    from sim.tools.sweep import run_tasks
    runner = run_tasks(plan.todo, run_point, backend=backend, workers=workers, address=address)
    if quiet:
        for _, row in runner:
            plan.output.append(row)
    else:
        with _task_progress("sweep") as progress:
            task = progress.add_task(f"{len(plan.todo)} points on {backend}", total=len(plan.todo))
            for _, row in runner:
                plan.output.append(row)
                progress.advance(task)
    frame = plan.output.finish(plan.tasks)
    errors = int((frame["error"].astype("string").fillna("") != "").sum()) if "error" in frame else 0
    console.print(f"{len(frame)} points written to {out}" + (f" ({errors} could not run: see the error column)"
                                                              if errors else ""))


@app.command()
def plan(scenario: str = typer.Argument(..., help="scenario YAML file (its search: section is the search space)"),
         set_: Optional[list[str]] = SetOption,
         rate: Optional[float] = typer.Option(None, "--rate", help="target load in req/s (default: the workload's)"),
         gpus: Optional[str] = typer.Option(None, "--gpus", help="candidate GPUs, comma-separated"),
         tp: Optional[str] = typer.Option(None, "--tp", help="candidate tensor-parallel degrees, comma-separated"),
         pp: Optional[str] = typer.Option(None, "--pp", help="candidate pipeline depths, comma-separated "
                                          "(each with every --tp; default: hardware.pipeline_parallel)"),
         ep: Optional[str] = typer.Option(None, "--ep", help="candidate expert-parallel degrees, comma-separated "
                                          "(a mixture-of-experts model; each with every --tp it divides; default: "
                                          "hardware.expert_parallel)"),
         policies: Optional[str] = typer.Option(None, "--policies", help="variants to try, comma-separated"),
         max_replicas: Optional[int] = typer.Option(None, "--max-replicas"),
         seeds: Optional[int] = typer.Option(None, "--seeds", help="seeds the recommendation is repeated with"),
         price: Optional[list[str]] = typer.Option(None, "--price", help="GPU=USD per GPU-hour (repeatable)"),
         out: Optional[Path] = typer.Option(None, help="output folder (default: out/plan-<scenario>)"),
         report: Optional[str] = typer.Option(None, "--report", help="also write the HTML report here"),
         backend: str = PlanBackendOption, workers: Optional[int] = WorkersOption,
         address: Optional[str] = AddressOption,
         exhaustive: bool = typer.Option(False, "--exhaustive", help="run every simulation to its end, from "
                                         "scratch, each search from its own start (slower; the same answer where "
                                         "verdicts are monotone in rate: the reference for the shortcuts)"),
         cache: Optional[Path] = typer.Option(None, "--cache", help="keep each simulation's answer in this folder "
                                              "and reuse it when the same simulation is asked again"),
         quiet: bool = typer.Option(False, "--quiet", "-q"),
         band: Optional[float] = typer.Option(None, "--band", help="meet the SLOs at this band's pessimistic edge "
                                              "(percent, in (0, 100); sets run.band): checked at each candidate's "
                                              "fewest replicas, from replications (sim/bands.py)"),
         shared_cost_model: Optional[bool] = typer.Option(
             None, "--shared-cost-model/--own-cost-models", help="price every candidate that names no cost model "
             "by the best kind all of them can have, so the ranking compares them on one kind / each hardware by its "
             "own most accurate (sets search.shared_cost_model; default: the file's, else its own)")):
    """Find the cheapest deployment that serves the target load within the SLOs."""
    from sim.tools.planner import plan_settings, run_plan
    from sim.views.plan_report import (
        candidates_frame,
        cost_model_groups,
        engine_groups,
        recommendation_text,
        seed_summary,
        write_plan_outputs,
    )
    raw = _read_raw(scenario, _with_band(set_, band), resolve=False)  # candidates bring their own hardware
    prices = {}
    for item in price or []:
        name, sep, value = item.partition("=")
        try:
            prices[name.strip()] = float(value)
            if not sep or prices[name.strip()] < 0:
                raise ValueError
        except ValueError:
            raise ServeSimError(f"--price: {item!r} is not GPU=USD with a non-negative number") from None
    for option, value in (("--max-replicas", max_replicas), ("--seeds", seeds), ("--workers", workers)):
        if value is not None and value < 1:
            raise ServeSimError(f"{option}: {value} must be >= 1")
    from sim.workload.arrivals import MAX_RATE_PER_S
    if rate is not None and not 0 < rate <= MAX_RATE_PER_S:
        raise ServeSimError(f"--rate: {rate} must be > 0 and <= {MAX_RATE_PER_S:g} (requests per second)")
    out = out or Path("out") / f"plan-{Path(scenario).stem}"
    if report is not None:
        check_output_file(report, "--report")
    report_inside = check_distinct_outputs(check_output_dir(out), {"--report": report})["--report"]
    settings = plan_settings(raw, rate=rate, gpus=_csv_list("--gpus", gpus), tensor_parallel=_csv_list("--tp", tp, int),
                             policies=_csv_list("--policies", policies), max_replicas=max_replicas,
                             num_seeds=seeds, prices=prices, pipeline_parallel=_csv_list("--pp", pp, int),
                             expert_parallel=_csv_list("--ep", ep, int),
                             exhaustive=exhaustive, cache_dir=str(cache) if cache is not None else None,
                             shared_cost_model=shared_cost_model)
    command = "servesim " + " ".join(sys.argv[1:]) if sys.argv and "servesim" in sys.argv[0] else f"servesim plan {scenario}"
    if quiet:
        result = run_plan(raw, settings, backend=backend, workers=workers, address=address, command=command)
    else:
        with _task_progress("plan") as progress:
            tasks: dict = {}

            def update(phase: str, done: int, total: int) -> None:
                if phase not in tasks:
                    tasks[phase] = progress.add_task(phase, total=total)
                progress.update(tasks[phase], completed=done, total=total)
            result = run_plan(raw, settings, backend=backend, workers=workers, address=address, command=command,
                              progress=update)
    df = candidates_frame(result)
    table = Table(title=f"Candidates at {settings.target_rate_per_s:g} req/s, cheapest first")
    shown = ["rank", "candidate", "status", "num_replicas", "cost_per_hour", "cost_per_million_tokens",
             "max_rate_per_replica"] + [c for c in df.columns if c.endswith("_s") and "_p" in c]
    if "num_rejected" in df.columns:  # where a candidate refuses requests
        shown.append("num_rejected")
    from sim.views.report import format_value
    for col in shown:
        table.add_column(col, justify="left" if col in ("candidate", "status") else "right")
    for row in df[shown].itertuples(index=False):
        table.add_row(*[v if isinstance(v, str) else format_value(None if v is None or v != v else v) for v in row])
    console.print(table)
    console.print(recommendation_text(result))
    for o in result.outcomes:  # where the verdict flips inside the band (issue 31)
        if o.band_flip:
            console.print(f"band: {o.candidate.name}: {o.band_flip}", markup=False, highlight=False)
    # what the engine preset and the cost model approximate, as `run` says it; a line several candidates share, once
    sharing: dict[str, dict[str, None]] = {}  # each note -> the candidates it is for
    for kind, groups in (("engine", engine_groups(result)), ("cost model", cost_model_groups(result))):
        for of, names, notes in groups:
            what = f"engine {of}" if kind == "engine" else "cost model"  # (its label: the candidates table's)
            for line in notes:
                sharing.setdefault(f"{what}: {line}", {}).update(dict.fromkeys(names))
    for text, names in sharing.items():
        whose = ("every candidate" if len(names) == len(result.outcomes) else ", ".join(names)
                 if len(names) <= 2 else f"{len(names)} candidates (named in plan.md)")
        console.print(f"note: {whose}: {text}", markup=False, highlight=False)
    spread = seed_summary(result)
    if spread and result.seeds_draw_nothing:
        from sim.views.plan_report import SEEDS_DRAW_NOTHING
        console.print(SEEDS_DRAW_NOTHING)
    elif spread:
        from sim.views.plan_report import band_caveat
        console.print(f"Under {spread['num_seeds']} seeds: SLOs met {spread['seeds_meeting_slo']}/{spread['num_seeds']}; "
                      f"fewest replicas per seed {spread['min_replicas']}. {band_caveat(result)}".rstrip(". ") + ".")
    write_plan_outputs(result, out, None if report_inside is not None else report, report_inside)
    console.print(f"Outputs written to {out}/ (report.html, plan.md, candidates.csv, simulations.csv)"
                  + (f"; report also at {report}" if report else ""))


@app.command("plan-pools")
def plan_pools(scenario: str = typer.Argument(..., help="scenario YAML file"),
               gpus: int = typer.Option(..., "--gpus", help="GPU budget shared by the pools"),
               variant: Optional[str] = typer.Option(
                   None, "--variant", help="variant whose hardware.disaggregation (GPUs, TP, link) the splits use "
                   "(default: the first variant that has one, else the base scenario)"),
               set_: Optional[list[str]] = SetOption, quiet: bool = typer.Option(False, "--quiet", "-q"),
               out: Optional[Path] = typer.Option(None, "--out", help="write splits.csv (every split's summary), "
                                                  "recommendation.txt, scenario.yaml and report.html here")):
    """Colocated or disaggregated: simulate every prefill/decode split of a GPU budget and recommend one."""
    from sim.tools.pool_split import plan_pool_split
    from sim.views.plan_report import POOL_SPLIT_COLUMNS, pool_split_report, pool_split_rows
    if variant is not None:  # only it is simulated, as `run --variant` runs it
        from sim.config.files import load_one_scenario
        chosen = load_one_scenario(scenario, set_, variant)
    else:
        scenario_set = _load(scenario, set_)
        chosen = next((sc for sc in scenario_set.variants.values() if sc.hardware.disaggregation is not None),
                      scenario_set.base)
    if out is not None:
        check_output_dir(out)  # before simulating, not after
    progress = None if quiet else (lambda label: err_console.print(f"simulating {label}"))
    result = plan_pool_split(chosen, gpus, progress=progress)
    table = Table(title=f"Prefill/decode splits of {gpus} GPUs")
    for col in POOL_SPLIT_COLUMNS:
        table.add_column(col, justify="left" if col == "candidate" else "right")
    for row in pool_split_rows(result):
        table.add_row(*row)
    console.print(table)
    console.print(result.recommendation())
    if out is not None:
        from sim.atomic_files import atomic_dir
        with atomic_dir(out) as tmp:
            result.table().to_csv(tmp / "splits.csv", index=False)
            (tmp / "recommendation.txt").write_text(result.recommendation() + "\n")
            (tmp / "scenario.yaml").write_text(chosen.to_yaml())
            (tmp / "report.html").write_text(pool_split_report(
                result, f"Prefill/decode splits of {gpus} GPUs: {chosen.name}", chosen.to_yaml()))
        console.print(f"Outputs written to {out}/ (splits.csv, recommendation.txt, scenario.yaml, report: "
                      f"{out}/report.html)")


@app.command()
def validate(scenario: str = typer.Argument(...), set_: Optional[list[str]] = SetOption):
    """Check a scenario file (and its variants) without running it."""
    from sim.views.report import deployment_label
    scenario_set = _load(scenario, set_)
    names = ", ".join(scenario_set.variants)
    console.print(f"{scenario}: valid ({len(scenario_set.variants)} variant(s): {names})")
    for name, variant in scenario_set.items():  # what each would run: defaults and launch commands resolved
        engine = f"; engine {variant.engine.name} {variant.engine.version}" if variant.engine is not None else ""
        console.print(f"  {name}: {deployment_label(variant)}{engine}", markup=False, highlight=False)


@app.command()
def schema():
    """Print the JSON schema of scenario files."""
    from sim.config.schema import json_schema
    print(json.dumps(json_schema(), indent=2))


@app.command()
def catalog(kind: str = typer.Argument(..., help="models, gpus, engines, tables, or import (with a config.json)"),
            config: Optional[str] = typer.Argument(None, help="import: a Hugging Face config.json"),
            name: Optional[str] = typer.Option(None, "--name", help="import: the model's name")):
    """Print the model, GPU or engine-preset catalog as a table, or `tables`: what each GPU's measured kernel tables
    price, per engine; `catalog import config.json` prints a Hugging Face model."""
    if kind == "import":
        from sim.views.hf_import import import_text
        if config is None:
            raise ServeSimError("catalog import: missing the config.json path; usage: servesim catalog import "
                                "config.json [--name NAME]")
        print(import_text(config, name), end="")
        return
    from sim.views.tables import engines_table, gpus_table, measured_tables_table, models_table
    tables = {"models": models_table, "gpus": gpus_table, "engines": engines_table, "tables": measured_tables_table}
    if kind not in tables:
        raise ServeSimError(f"catalog: {kind!r} is not a catalog; allowed: {', '.join(tables)}, import")
    if config is not None or name is not None:
        raise ServeSimError(f"catalog {kind}: takes no config.json or --name (only `catalog import` does)")
    import pandas as pd
    df = tables[kind]()
    table = Table(title=f"{kind} catalog")
    for col in df.columns:  # words to the left, numbers to the right
        table.add_column(str(col), justify="right" if pd.api.types.is_numeric_dtype(df[col]) else "left")
    from sim.views.report import format_value
    for row in df.itertuples(index=False):
        table.add_row(*[format_value(v) if not isinstance(v, str) else v for v in row])
    console.print(table)


@app.command()
def workload(scenario: str = typer.Argument(...), set_: Optional[list[str]] = SetOption,
             variant: Optional[str] = typer.Option(None)):
    """Summarize the workload a scenario generates (check it before simulating)."""
    from sim.run import make_workload
    from sim.views.report import format_value
    from sim.workload.generate import summarize
    scenario_set = _load(scenario, set_)
    chosen = scenario_set.variants.get(variant) if variant else scenario_set.base
    if chosen is None:
        raise ServeSimError(f"--variant: {variant!r} is not in {scenario}; allowed: "
                            + ", ".join(scenario_set.variants))
    stats = summarize(make_workload(chosen))
    table = Table(title=f"Workload of {chosen.name}")
    table.add_column("statistic")
    table.add_column("value", justify="right")
    for key, value in stats.items():
        table.add_row(str(key), format_value(value))
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: exits 2 with one line for any input error."""
    return run_app(app, argv)


def run_app(typer_app: typer.Typer, argv: list[str] | None = None) -> int:
    """Run a typer app the ServeSim way: bad input is one `error:` line and exit 2, never a traceback."""
    try:
        typer_app(args=argv, standalone_mode=False)
    except ServeSimError as err:
        err_console.print(f"error: {err}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except MemoryError as err:
        # A run larger than the memory this process is granted (its arrays are sized by the replicas, the requests
        # and the KV pool): one line, as for any input this machine cannot take; each output is written whole
        # (sim/atomic_files.py), so none is left half-written
        why = f" ({err})" if str(err) else ""
        err_console.print(f"error: out of memory: this run needs more memory than the machine grants{why}; allowed: "
                          "fewer replicas (hardware.num_replicas), requests (run.num_requests) or KV blocks "
                          "(kv_cache.capacity_tokens, kv_cache.block_size), or more memory",
                          markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except typer.Abort:
        err_console.print("aborted", markup=False)
        sys.exit(130)
    except typer.Exit as exit_:
        sys.exit(exit_.exit_code)
    except typer.TyperException as err:
        err_console.print(f"error: {err.format_message()}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    return 0


if __name__ == "__main__":
    main()
