"""Edges of a run: same outputs byte for byte across processes, overload without a horizon, a horizon's
unfinished requests, lengths clipped to max_model_len, the SLO share as a percentage, a planner target out
of reach, and the dashboard's upload limits."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers import APP_RUN_TIMEOUT_S, small_scenario

from sim.config.files import validate_scenario
from sim.run import make_workload, simulate
from sim.views.cli import main
from sim.views.report import format_metric
from sim.workload.generate import summarize

REPO = Path(__file__).resolve().parents[2]

SMALL = small_scenario({'name': 'edges',
                        'workload': {'arrival': {'rate_per_s': 20},
                                     'lengths': {'kind': 'uniform',
                                                 'input_min': 20,
                                                 'input_max': 300,
                                                 'output_min': 5,
                                                 'output_max': 60}},
                        'slo': {'ttft_s': 0.5, 'tpot_s': 0.05},
                        'run': {'seed': 3, 'num_requests': 200}})


def write(tmp: Path, data: dict, name: str = "s.yaml") -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_run_in_two_processes_writes_the_same_bytes(tmp_path):
    path = write(tmp_path, SMALL)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for out in ("a", "b"):
        done = subprocess.run([sys.executable, "-m", "sim.views.cli", "run", str(path), "-q", "--out", out],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "b").iterdir())
    assert {"report.html", "summary.json", "requests.parquet", "steps.parquet", "scenario.yaml"} <= set(names)
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    page = (tmp_path / "a" / "report.html").read_text()
    assert 'id="plot-latency"' in page  # the fixed ids that make the page reproducible


def test_an_overloaded_run_without_a_horizon_finishes_and_reports_its_backlog():
    base = dict(SMALL, workload={"arrival": {"kind": "poisson", "rate_per_s": 1.0},
                                 "lengths": {"kind": "fixed", "input_tokens": 200, "output_tokens": 50}},
                scheduler={"max_model_len": 2048, "max_num_seqs": 4}, run={"seed": 0, "num_requests": 1})
    alone = simulate(validate_scenario(base)).requests.iloc[0]
    capacity = 4 / float(alone.finish_s - alone.arrival_s)  # at most 4 requests at a time
    over = copy.deepcopy(base)
    over["workload"]["arrival"]["rate_per_s"] = 10 * capacity
    over["run"] = {"seed": 0, "num_requests": 400}
    result = simulate(validate_scenario(over))
    s, req = result.summary, result.requests
    assert s["num_finished"] == 400 and s["num_unfinished"] == 0  # no horizon: it drains and stops
    assert s["max_num_waiting"] > 200  # the backlog: most requests waited in the queue at once
    first, last = req["queueing_s"].iloc[:40].mean(), req["queueing_s"].iloc[-40:].mean()
    assert last > 10 * first
    assert s["throughput_rps"] < 0.2 * 10 * capacity


def test_a_horizon_reports_unfinished_requests_through_the_cli(tmp_path, monkeypatch, capsys):
    data = dict(SMALL, workload={"arrival": {"kind": "poisson", "rate_per_s": 300},
                                 "lengths": {"kind": "fixed", "input_tokens": 500, "output_tokens": 200}},
                run={"seed": 0, "num_requests": 2000, "horizon_s": 3.0})
    monkeypatch.chdir(tmp_path)
    main(["run", str(write(tmp_path, data)), "-q", "--out", "o"])
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["num_unfinished"] > 0 and summary["elapsed_s"] == 3.0
    assert summary["num_finished"] + summary["num_unfinished"] + summary["num_rejected"] == summary["num_arrived"]
    table = capsys.readouterr().out
    assert "unfinished" in table and f"{summary['num_unfinished']:,}" in table


def test_lengths_clipped_to_max_model_len_are_counted_and_reported(tmp_path, monkeypatch, capsys):
    data = dict(SMALL, scheduler={"max_model_len": 64}, run={"seed": 0, "num_requests": 100})
    scenario = validate_scenario(copy.deepcopy(data))
    workload = make_workload(scenario)
    lengths = workload.input_tokens + workload.output_tokens
    assert lengths.max() <= 64
    # uniform inputs 20..300: about 84% of prompts alone are longer than 63 tokens
    assert 70 <= workload.num_clipped <= 100 and summarize(workload)["num_clipped"] == workload.num_clipped
    monkeypatch.chdir(tmp_path)
    main(["run", str(write(tmp_path, data)), "-q", "--out", "o"])
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["num_requests_clipped"] == workload.num_clipped
    out = capsys.readouterr().out
    assert f"{workload.num_clipped:,} of 100 requests were longer than max_model_len (64 tokens)" in out
    main(["workload", str(tmp_path / "s.yaml")])
    assert "num_clipped" in capsys.readouterr().out
    unclipped = simulate(validate_scenario(dict(SMALL, run={"seed": 0, "num_requests": 20}))).summary
    assert unclipped["num_requests_clipped"] == 0


def test_the_slo_share_is_a_percentage_in_every_view(tmp_path, monkeypatch, capsys):
    assert format_metric("slo_fraction_ok", 0.6625) == "66.25%"
    assert format_metric("slo_fraction_ok", 1.0) == "100%"
    assert format_metric("slo_fraction_ok", float("nan")) == "-"
    assert format_metric("ttft_s_p99", 0.6625) == "0.6625"
    from sim.results import Result
    from sim.views import dashboard as dash
    table = dash.summary_table([Result("a", None, None, None, {"slo_fraction_ok": 0.5}),
                                Result("b", None, None, None, {"slo_fraction_ok": 0.75})])
    assert table.loc["requests meeting every SLO", "a"] == "50%"
    assert table.loc["requests meeting every SLO", "Δ b"] == "+25 pp"
    monkeypatch.chdir(tmp_path)
    main(["run", str(write(tmp_path, SMALL)), "-q", "--out", "o"])
    share = json.loads((tmp_path / "o" / "summary.json").read_text())["slo_fraction_ok"]
    line = next(x for x in capsys.readouterr().out.splitlines() if "requests meeting every SLO" in x)
    assert format_metric("slo_fraction_ok", share) in line and "%" in line
    assert f"<td>{format_metric('slo_fraction_ok', share)}</td>" in (tmp_path / "o" / "report.html").read_text()


def test_a_target_no_candidate_can_reach_is_infeasible_without_searching():
    from sim.tools.planner import plan_settings, run_plan
    raw = copy.deepcopy(SMALL)
    raw["search"] = {"max_replicas": 4, "num_seeds": 1, "min_window_s": 5}
    settings = plan_settings(raw, rate=1e6)
    result = run_plan(raw, settings, backend="serial")
    (outcome,) = result.outcomes
    assert outcome.status == "infeasible" and "out of reach" in outcome.reason
    assert outcome.evaluations == []  # only the saturation probe ran: no simulation at 1e6 req/s
    # Reported: what max_replicas replicas serve at one replica's saturated rate, far below the target.
    assert outcome.reachable_rate_per_s == pytest.approx(4 * outcome.saturated_rate_per_replica)
    assert 0 < outcome.reachable_rate_per_s < 1e6 / 8
    assert result.recommendation is None and result.curves == [] and result.seeds == []


def test_the_upload_widgets_show_their_real_limits():
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    from sim.views import dashboard as dash
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=APP_RUN_TIMEOUT_S)
    at.run()
    assert not at.exception
    scenario = at.file_uploader(key="scenario_upload").proto
    # One uploader takes the scenario and the traces it names: the widget's limit is a trace's, and the YAML's own
    # (the CLI's 1 MiB) is stated in its help and enforced when the YAML is read.
    assert scenario.max_upload_size_mb == dash.MAX_UPLOAD_TRACE_BYTES >> 20 == 200
    assert f"{dash.MAX_UPLOAD_YAML_BYTES:,} bytes" in scenario.help


def test_multi_turn_turns_clipped_to_max_model_len_are_counted():
    """A kept turn whose prompt or output was cut to fit counts; a turn that no longer fits ends its conversation."""
    data = dict(SMALL, scheduler={"max_model_len": 256}, run={"seed": 0, "num_requests": 200},
                workload={"arrival": {"kind": "poisson", "rate_per_s": 5},
                          "lengths": {"kind": "uniform", "input_min": 20, "input_max": 300,
                                      "output_min": 10, "output_max": 100},
                          "prefix": {"kind": "multi_turn", "turns_mean": 3, "think_time_s": 1.0}})
    workload = make_workload(validate_scenario(copy.deepcopy(data)))
    assert (workload.input_tokens + workload.output_tokens).max() <= 256
    # A clipped turn ends exactly at the limit (prompt cut to 255 leaves one output token; an output is cut to fill it)
    at_limit = int(np.count_nonzero(workload.input_tokens + workload.output_tokens == 256))
    assert 0 < workload.num_clipped <= at_limit
    assert summarize(workload)["num_clipped"] == workload.num_clipped
    roomy = dict(data, scheduler={"max_model_len": 100_000})
    assert make_workload(validate_scenario(copy.deepcopy(roomy))).num_clipped == 0
