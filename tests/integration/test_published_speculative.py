"""The speculative published runs' harness (benchmarks/bench_published_speculative.py): the runs load and cite as
the main suite's do, one is named for the fit, and a run simulates with the acceptance it is given. Not the accuracy
(benchmarks/RESULTS.md has it)."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_published_speculative as bps  # noqa: E402
import published_suite as ps  # noqa: E402

PINNED = re.compile(r"^https://github\.com/[^/]+/[^/]+/blob/[0-9a-f]{40}/")


def test_the_runs_load_cite_a_pinned_page_and_name_one_fit_run():
    runs = bps.load_runs()
    assert len(runs) == 5 and [r.role for r in runs].count("fit") == 1
    for run in runs:
        assert PINNED.match(run.case.url) and run.case.unstated
        assert run.case.flags["speculative_algorithm"] == "EAGLE3"
    quoted = {run.case.workload.concurrency: run.case.quoted for run in runs if run.role == "held-out"}
    assert sorted(quoted) == [1, 2, 4, 8]
    assert quoted[1]["mean_tpot_ms"] == 2.67 and quoted[8]["mean_itl_ms"] == 13.06  # the page's lines 749 and 831


def test_the_speculative_runs_stay_out_of_the_main_suite():
    assert not {run.case.name for run in bps.load_runs()} & {c.name for c in ps.load_suite().cases}


def test_a_run_simulates_with_the_acceptance_it_is_given():
    case = next(run.case for run in bps.load_runs() if run.case.workload.concurrency == 2)
    none_accepted = bps.simulate_run(case, 1.0, 0.2, num_requests=12)
    three_a_step = bps.simulate_run(case, 3.0, 0.2, num_requests=12)
    for figures in (none_accepted, three_a_step):
        assert all(math.isfinite(figures[g]) for g in bps.REPORTED)
    # the same steps' cost, three times the tokens a verification: about a third of the time a token
    assert three_a_step["tpot_itl"] < 0.5 * none_accepted["tpot_itl"]
    errors = bps.errors_of(case, three_a_step)
    tpot = next(m for m in case.metrics if m.group == "tpot_itl")
    assert errors["tpot_itl"] == three_a_step["tpot_itl"] / tpot.measured - 1 and "peak" not in errors


def test_a_csv_path_holding_a_file_servesim_did_not_write_is_refused_before_any_work(tmp_path, capsys):
    import bench_published
    theirs = tmp_path / "theirs.csv"
    theirs.write_text("keep me\n")
    for main in (bps.main, bench_published.main):
        assert main(["--csv", str(theirs)]) == 2
        assert "--csv:" in capsys.readouterr().err and theirs.read_text() == "keep me\n"
