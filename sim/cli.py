"""The `servesim` command line. Bad input: one line on stderr naming field, value and what is allowed; exit 2."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .errors import ServeSimError

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="ServeSim: simulate LLM serving systems and compare policies before buying GPUs.")
# Piped output (make demo, CI logs) gets wide tables instead of rich's 80-column default.
console = Console(width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True)

SetOption = typer.Option(None, "--set", help="override a scenario key: path.to.key=value (repeatable)")


def _load(path: str, overrides: Optional[list[str]]):
    from .scenario import load_scenario_set
    return load_scenario_set(path, overrides or [])


def _progress_callback(progress: Progress, task):
    def update(now_s: float, num_done: int) -> None:
        progress.update(task, completed=num_done, description=f"t={now_s:,.1f}s simulated")
    return update


def _simulate_with_progress(scenario, workload, label: str, quiet: bool):
    from .api import simulate
    if quiet:
        return simulate(scenario, workload)
    total = workload.num_requests
    with Progress(TextColumn(f"[bold]{label}[/bold]"), TextColumn("{task.description}"), BarColumn(),
                  TextColumn("{task.completed:,}/{task.total:,} requests done"), TimeElapsedColumn(),
                  console=err_console, transient=False) as progress:
        task = progress.add_task("starting", total=total)
        return simulate(scenario, workload, progress=_progress_callback(progress, task))


def _summary_table(results) -> Table:
    from .report import SUMMARY_ROWS, format_value
    table = Table(title="Summary", show_lines=False)
    table.add_column("metric")
    for r in results:
        table.add_column(r.name, justify="right")
    for key, label in SUMMARY_ROWS:
        table.add_row(label, *[format_value(r.summary.get(key)) for r in results])
    if any(r.summary.get("slo_met") is not None for r in results):
        table.add_row("SLOs met", *[format_value(r.summary.get("slo_met")) for r in results])
    return table


def _folder_name(variant: str) -> str:
    """A variant name as one safe folder name ("multi-turn/on" -> "multi-turn_on")."""
    return re.sub(r"[^A-Za-z0-9._+()-]", "_", variant).strip(".") or "variant"


def _write_outputs(out: Path, results, title: str, scenario_yaml: str) -> None:
    from .output import atomic_dir, write_json
    from .report import render_report
    with atomic_dir(out) as tmp:
        for r in results:
            sub = tmp if len(results) == 1 else tmp / _folder_name(r.name)
            sub.mkdir(exist_ok=True)
            r.requests.to_parquet(sub / "requests.parquet", index=False)
            r.steps.to_parquet(sub / "steps.parquet", index=False)
            write_json(sub / "summary.json", r.summary)
            (sub / "scenario.yaml").write_text(r.scenario.to_yaml())
        if len(results) > 1:
            write_json(tmp / "summary.json", {r.name: r.summary for r in results})
        (tmp / "report.html").write_text(render_report(results, title, scenario_yaml))


@app.command()
def run(scenario: str = typer.Argument(..., help="scenario YAML file"),
        set_: Optional[list[str]] = SetOption,
        variant: Optional[str] = typer.Option(None, help="run this variant instead of the base"),
        out: Optional[Path] = typer.Option(None, help="write requests/steps Parquet, summary.json, report.html here"),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar")):
    """Simulate one scenario and print its summary."""
    from .api import make_workload
    scenario_set = _load(scenario, set_)
    if variant is None:
        chosen = scenario_set.base
    elif variant in scenario_set.variants:
        chosen = scenario_set.variants[variant]
    else:
        raise ServeSimError(f"--variant: {variant!r} is not in {scenario}; allowed: "
                            + ", ".join(scenario_set.variants))
    result = _simulate_with_progress(chosen, make_workload(chosen), chosen.name, quiet)
    console.print(_summary_table([result]))
    if out is not None:
        _write_outputs(out, [result], f"ServeSim run: {chosen.name}", chosen.to_yaml())
        console.print(f"Outputs written to {out}/ (report: {out / 'report.html'})")


@app.command()
def compare(scenario: str = typer.Argument(..., help="scenario YAML file with variants"),
            set_: Optional[list[str]] = SetOption,
            out: Optional[Path] = typer.Option(None, help="output folder (default: out/<scenario name>)"),
            quiet: bool = typer.Option(False, "--quiet", "-q")):
    """Run every variant of a scenario on the same generated workload and compare them."""
    from .api import make_workload
    scenario_set = _load(scenario, set_)
    results = []
    for name, variant in scenario_set.items():
        results.append(_simulate_with_progress(variant, make_workload(variant), name, quiet))
    console.print(_summary_table(results))
    out = out or Path("out") / Path(scenario).stem
    _write_outputs(out, results, f"ServeSim comparison: {scenario_set.base.name}",
                   Path(scenario).read_text())
    console.print(f"Outputs written to {out}/ — open {out / 'report.html'} in a browser.")


@app.command()
def validate(scenario: str = typer.Argument(...), set_: Optional[list[str]] = SetOption):
    """Check a scenario file (and its variants) without running it."""
    scenario_set = _load(scenario, set_)
    names = ", ".join(scenario_set.variants)
    console.print(f"{scenario}: valid ({len(scenario_set.variants)} variant(s): {names})")


@app.command()
def schema():
    """Print the JSON schema of scenario files."""
    from .scenario import json_schema
    print(json.dumps(json_schema(), indent=2))


@app.command()
def catalog(kind: str = typer.Argument(..., help="models or gpus")):
    """Print the model or GPU catalog as a table."""
    from .catalog import gpus_table, models_table
    tables = {"models": models_table, "gpus": gpus_table}
    if kind not in tables:
        raise ServeSimError(f"catalog: {kind!r} is not a catalog; allowed: models, gpus")
    df = tables[kind]()
    table = Table(title=f"{kind} catalog")
    for col in df.columns:
        table.add_column(str(col), justify="left" if df[col].dtype == object else "right")
    from .report import format_value
    for row in df.itertuples(index=False):
        table.add_row(*[format_value(v) if not isinstance(v, str) else v for v in row])
    console.print(table)


@app.command()
def workload(scenario: str = typer.Argument(...), set_: Optional[list[str]] = SetOption,
             variant: Optional[str] = typer.Option(None)):
    """Summarize the workload a scenario generates (check it before simulating)."""
    from .api import make_workload
    from .report import format_value
    from .workload import summarize
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
    try:
        app(args=argv, standalone_mode=False)
    except ServeSimError as err:
        err_console.print(f"error: {err}", markup=False, highlight=False, soft_wrap=True)
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
