"""Trace files through the real command line (issue 28): time zones on one timeline or one refusal line, absurd
numbers refused with the cell and its range; exit 2 and one `error:` line, never a traceback."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from helpers import one_error_line, servesim, small_scenario
from sim.workload.traces import MAX_TRACE_TOKENS

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"




def trace_scenario(folder: Path, trace_text: str, name: str = "trace.csv", **arrival) -> Path:
    (folder / name).write_text(trace_text)
    # The SimPy engine: a handful of requests, and the arrival times under test do not depend on the engine.
    data = small_scenario({"workload": {"arrival": {"kind": "trace", "path": name, **arrival},
                                        "lengths": {"kind": "trace"}},
                           "run": {"num_requests": 10, "compiled_core": False}})
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_trace_with_different_utc_offsets_runs_on_the_utc_timeline(tmp_path):
    rows = ["2023-11-16 18:15:46.000+00:00,100,5",  # 18:15:46Z
            "2023-11-16 19:15:46.250+01:00,101,5",  # 18:15:46.25Z
            "2023-11-16T13:15:47.000-05:00,102,5",  # 18:15:47Z
            "2023-11-16 18:15:49.5Z,103,5",  # 18:15:49.5Z
            "2023-11-17 00:00:49.5+05:45,104,5"]  # 18:15:49.5Z
    scenario = trace_scenario(tmp_path, AZURE_HEADER + "\n".join(rows) + "\n")
    done = servesim("run", str(scenario), "-q", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    requests = pd.read_parquet(tmp_path / "out" / "requests.parquet").sort_values("arrival_s")
    np.testing.assert_allclose(np.diff(requests["arrival_s"]), [0.25, 0.75, 2.5, 0.0], atol=1e-9)
    assert requests["prompt_tokens"].tolist() == [100, 101, 102, 103, 104]


@pytest.mark.parametrize("command", ["run", "workload", "compare"])
def test_offsets_on_some_lines_only_is_one_error_line(tmp_path, command):
    rows = ["2023-11-16 18:15:46,100,5", "2023-11-16 18:15:47,100,5", "2023-11-16 19:15:48+01:00,100,5"]
    scenario = trace_scenario(tmp_path, AZURE_HEADER + "\n".join(rows) + "\n")
    args = [command, str(scenario)] + (["-q", "--out", str(tmp_path / "out")] if command != "workload" else [])
    line = one_error_line(servesim(*args, cwd=tmp_path))
    for words in ("workload.arrival.path:", "trace.csv' line 4:", "TIMESTAMP='2023-11-16 19:15:48+01:00' has a UTC "
                  "offset", "line 2 ('2023-11-16 18:15:46') has none", "allowed: "):
        assert words in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("row, words", [
    ("2023-11-16 18:15:47,1e20,5", ["line 3:", "ContextTokens=1e+20", f"from 0 to {MAX_TRACE_TOKENS:,}"]),
    ("2023-11-16 18:15:47,7,-1e300", ["line 3:", "GeneratedTokens=-1e+300", f"from 0 to {MAX_TRACE_TOKENS:,}"]),
    ("9999-12-31 00:00:00,7,5", ["line 3:", "TIMESTAMP='9999-12-31 00:00:00'", "from 1700-01-01 to 2200-01-01"]),
], ids=["huge-prompt", "huge-negative-output", "year-9999"])
def test_an_absurd_cell_is_one_error_line_naming_it_and_its_range(tmp_path, row, words):
    scenario = trace_scenario(tmp_path, AZURE_HEADER + "2023-11-16 18:15:46,100,5\n" + row + "\n")
    line = one_error_line(servesim("run", str(scenario), "-q", "--out", str(tmp_path / "out"), cwd=tmp_path))
    for needle in ["workload.arrival.path:", "trace.csv'", "allowed: "] + words:
        assert needle in line, (needle, line)


def test_an_absurd_numeric_time_in_a_generic_table_is_one_error_line(tmp_path):
    scenario = trace_scenario(tmp_path, "t,i,o\n0,10,2\n1e300,10,2\n", "t.csv",
                              columns={"arrival": "t", "input": "i", "output": "o"})
    line = one_error_line(servesim("workload", str(scenario), cwd=tmp_path))
    assert "t.csv' line 3: t=1e+300 is not allowed; allowed: a number from -1e+10 to 1e+10" in line, line
