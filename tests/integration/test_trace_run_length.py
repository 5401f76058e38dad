"""How many requests a replayed trace runs: every row where the run sets neither a count nor a duration (or has no run
section), the first num_requests otherwise, and a note where the trace holds fewer than asked."""

from __future__ import annotations

import pytest
import yaml
from helpers import one_error_line, servesim, small_scenario

from sim.config.files import validate_scenario
from sim.errors import ConfigError
from sim.run import make_workload, simulate
from sim.views.cli import trace_short_note

ROWS = 12


def write_trace(folder, rows: int = ROWS):
    path = folder / "t.csv"
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    lines += [f"2023-11-16 18:15:{i * 0.25:09.6f},{100 + i},{8 + i % 3}" for i in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def trace_scenario(path, run: dict | None) -> dict:
    raw = small_scenario()
    raw["workload"] = {"arrival": {"kind": "trace", "path": str(path)}, "lengths": {"kind": "trace"}}
    raw.pop("run", None)
    if run is not None:
        raw["run"] = run
    return raw


@pytest.mark.parametrize("run", [None, {}, {"seed": 3}], ids=["no-run-section", "empty-run", "seed-only"])
def test_a_trace_without_count_or_duration_replays_every_row(tmp_path, run):
    scenario = validate_scenario(trace_scenario(write_trace(tmp_path), run))
    assert scenario.run.num_requests is None and scenario.run.duration_s is None
    workload = make_workload(scenario)
    assert workload.num_requests == ROWS
    assert list(workload.input_tokens) == [100 + i for i in range(ROWS)]
    assert simulate(scenario).summary["num_requests"] == ROWS


def test_a_count_or_duration_still_cuts_the_trace(tmp_path):
    path = write_trace(tmp_path)
    assert make_workload(validate_scenario(trace_scenario(path, {"num_requests": 5}))).num_requests == 5
    # rows at 0, 0.25, ..., 1.0 s arrive before 1.1 s
    assert make_workload(validate_scenario(trace_scenario(path, {"duration_s": 1.1}))).num_requests == 5


def test_other_arrivals_still_need_a_count_or_duration(tmp_path):
    raw = small_scenario()
    raw["run"] = {"seed": 0}
    with pytest.raises(ConfigError, match=r"^run: neither num_requests nor duration_s is set.*arrival kind is "
                                          r"'poisson'"):
        validate_scenario(raw)
    line = one_error_line(servesim("run", _write(tmp_path, raw)))
    assert "run: neither num_requests nor duration_s" in line


def test_other_arrivals_without_a_run_section_keep_the_default_count():
    raw = small_scenario()
    raw.pop("run", None)
    assert validate_scenario(raw).run.num_requests == 1000


def test_a_trace_shorter_than_the_count_asked_is_noted(tmp_path):
    path = write_trace(tmp_path)
    asked = validate_scenario(trace_scenario(path, {"num_requests": 50}))
    assert trace_short_note(asked, ROWS) == (f"the trace '{path}' holds {ROWS} requests, fewer than run.num_requests "
                                             f"50: all {ROWS} were replayed, once")
    assert trace_short_note(asked, 50) is None
    assert trace_short_note(validate_scenario(trace_scenario(path, {"num_requests": 5})), 5) is None
    assert trace_short_note(validate_scenario(trace_scenario(path, {"num_requests": 50, "duration_s": 1.1})),
                            5) is None  # the duration ended it, as asked
    result = servesim("run", _write(tmp_path, trace_scenario(path, {"num_requests": 50})))
    assert result.returncode == 0, result.stderr
    assert f"holds {ROWS} requests, fewer than run.num_requests 50" in result.stdout


def _write(folder, raw: dict):
    out = folder / "s.yaml"
    out.write_text(yaml.safe_dump(raw))
    return out


def test_a_trace_longer_than_a_run_holds_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr("sim.workload.generate.MAX_NUM_REQUESTS", ROWS - 1)
    path = write_trace(tmp_path)
    with pytest.raises(ConfigError, match=rf"^workload\.arrival\.path: '{path}' replays {ROWS} requests, more than "
                                          rf"the limit of {ROWS - 1} per run \(MAX_NUM_REQUESTS\); allowed: "):
        make_workload(validate_scenario(trace_scenario(path, None)))
    with pytest.raises(ConfigError, match=r"replays 12 requests within run.duration_s 60 s, more than"):
        make_workload(validate_scenario(trace_scenario(path, {"duration_s": 60})))
    assert make_workload(validate_scenario(trace_scenario(path, {"num_requests": ROWS - 1}))).num_requests == ROWS - 1


def test_variants_replaying_one_short_trace_share_one_note(tmp_path):
    raw = trace_scenario(write_trace(tmp_path), {"num_requests": 50})
    raw["variants"] = {"a": {}, "b": {"kv_cache": {"block_size": 32}}}
    result = servesim("compare", _write(tmp_path, raw), "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stdout.splitlines() if "fewer than run.num_requests" in line]
    assert len(notes) == 1 and notes[0].startswith("note: a, b: the trace "), notes
