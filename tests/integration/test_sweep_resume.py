"""Resuming a sweep from whatever an interrupt, an older run or a user left at --out.

A resumed sweep holds each point exactly once and equals the same sweep run from scratch, or it is refused
with one line naming the file, changing nothing. The classes: torn, damaged, duplicated, stale or foreign
journals and tables (property tests over random damage), a sweep killed with SIGKILL many times, and the
refusals as the command line gives them.
"""

from __future__ import annotations

import errno
import io
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from helpers import SUBPROCESS_TIMEOUT_S, small_scenario
from sim.errors import ConfigError
from sim.tools.sweep import (
    journal_line,
    journal_path,
    parse_grid,
    plan_sweep,
    read_journal,
    read_table_rows,
    run_point,
    run_tasks,
    sweep_hash,
)
from sim.views.cli import main

REPO = Path(__file__).resolve().parents[2]

SCENARIO = small_scenario({"run": {"num_requests": 20},
                           "variants": {"paged": {},
                                        "contiguous": {"kv_cache": {"layout": "contiguous", "reserve": "max_len"}}}})
GRID = ["rate=4,8,16", "scheduler.max_num_seqs=8,64"]
AXES = parse_grid(GRID)
VARIANTS = ["paged", "contiguous"]
HASH = sweep_hash(SCENARIO, AXES)
SUFFIXES = (".csv", ".parquet")
PROPERTY_SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                             suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@dataclass(frozen=True)
class FreshSweep:
    """The sweep run once from scratch: each point's row, and the table it gives in each format."""

    point_ids: list[str]  # grid order
    rows: dict[str, dict]
    tables: dict[str, bytes]

    def __repr__(self) -> str:  # hypothesis prints the arguments of a failing example
        return f"FreshSweep({len(self.point_ids)} points)"


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> FreshSweep:
    folder = tmp_path_factory.mktemp("fresh")
    plan = plan_sweep(SCENARIO, AXES, folder / "t.csv", VARIANTS)
    rows = {task.point_id: row for task, row in run_tasks(plan.todo, run_point, backend="serial")}
    tables = {}
    for suffix in SUFFIXES:
        out = folder / f"t{suffix}"
        plan = plan_sweep(SCENARIO, AXES, out, VARIANTS)
        for task in plan.todo:
            plan.output.append(rows[task.point_id])
        plan.output.finish(plan.tasks)
        tables[suffix] = out.read_bytes()
    return FreshSweep([t.point_id for t in plan.tasks], rows, tables)


def resume(out: Path, fresh: FreshSweep) -> list[str]:
    """Resume the sweep at `out` as the CLI does, each point's simulation replaced by its row from the fresh
    run (the simulation is deterministic); returns the points that ran."""
    plan = plan_sweep(SCENARIO, AXES, out, VARIANTS)
    for task in plan.todo:
        plan.output.append(fresh.rows[task.point_id])
    plan.output.finish(plan.tasks)
    return [t.point_id for t in plan.todo]


def read_back(path: Path) -> pd.DataFrame:
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    return pd.read_csv(path, dtype={"point_id": str, "scenario_hash": str}, keep_default_na=False)


def assert_same_as_fresh(out: Path, fresh: FreshSweep) -> None:
    """Each point once, in grid order, every cell as the sweep from scratch has it (the file byte for byte)."""
    table = read_back(out)
    assert list(table["point_id"]) == fresh.point_ids
    assert out.read_bytes() == fresh.tables[out.suffix]
    assert not journal_path(out).exists()


def journal_lines(fresh: FreshSweep, point_ids: list[str], scenario_hash: str = HASH) -> list[bytes]:
    return [journal_line({"scenario_hash": scenario_hash, **fresh.rows[pid]}) for pid in point_ids]


def partial_table(out: Path, fresh: FreshSweep, point_ids: list[str]) -> None:
    """The table a sweep that finished `point_ids` (and only those) wrote."""
    plan = plan_sweep(SCENARIO, AXES, out, VARIANTS)
    for pid in point_ids:
        plan.output.append(fresh.rows[pid])
    plan.output.finish(plan.tasks)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every plain file under `folder` (hidden ones too) with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def assert_one_line_naming(err: ConfigError, path: Path) -> None:
    message = str(err)
    assert "\n" not in message and message.startswith("--out: "), message
    assert str(path) in message, message


# ------------------------------------------------------------------------------- resumed = from scratch

@pytest.mark.parametrize("suffix", SUFFIXES)
@pytest.mark.parametrize("in_table, in_journal", [
    (0, 0), (12, 0), (0, 12), (5, 0), (0, 5), (4, 3), (12, 12), (6, 12),
])
def test_a_resumed_sweep_equals_one_from_scratch(tmp_path, fresh, suffix, in_table, in_journal):
    """A table of the first points and a journal of some points (overlapping it, as after a kill between the
    table's rename and the journal's removal): what was done is not run again, and the result is the same."""
    out = tmp_path / f"sweep{suffix}"
    ids = fresh.point_ids
    if in_table:
        partial_table(out, fresh, ids[:in_table])
    journal_path(out).write_bytes(b"".join(journal_lines(fresh, ids[-in_journal:] if in_journal else [])))
    ran = resume(out, fresh)
    assert sorted(ran) == sorted(set(ids) - set(ids[:in_table]) - set(ids[-in_journal:] if in_journal else []))
    assert_same_as_fresh(out, fresh)


@given(data=st.data())
@PROPERTY_SETTINGS
def test_benign_journal_states_always_resume_to_the_fresh_result(fresh, data):
    """Any mix of a table and journal lines in any order, duplicated, with the last line torn at any byte (what
    interrupts, reruns and a kill between rename and journal removal leave): always the fresh result."""
    n = len(fresh.point_ids)
    suffix = data.draw(st.sampled_from(SUFFIXES))
    in_table = data.draw(st.integers(0, n))
    journal_ids = data.draw(st.lists(st.sampled_from(fresh.point_ids), max_size=2 * n))
    journal = b"".join(journal_lines(fresh, journal_ids))
    torn = data.draw(st.sampled_from(fresh.point_ids))
    journal += journal_lines(fresh, [torn])[0][:data.draw(st.integers(0, 200))]
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / f"sweep{suffix}"
        if in_table:
            partial_table(out, fresh, fresh.point_ids[:in_table])
        journal_path(out).write_bytes(journal)
        resume(out, fresh)
        assert_same_as_fresh(out, fresh)


def _other_sweeps_line(fresh: FreshSweep) -> bytes:
    return journal_lines(fresh, fresh.point_ids[:1], scenario_hash="0" * 16)[0]


def _line_with_a_wrong_digest(fresh: FreshSweep) -> bytes:
    record = json.loads(journal_lines(fresh, fresh.point_ids[:1])[0])
    record["digest"] = "f" * 16
    return json.dumps(record).encode() + b"\n"


JUNK_LINES = [b"null\n", b"[]\n", b"42\n", b'"text"\n', b"{}\n", b"true\n", b"\n", b"{\n", b"\xff\xfe\xfa\n",
              b'{"point_id": "0123456789abcdef", "scenario_hash": "0123456789abcdef"}\n',
              journal_line({"scenario_hash": HASH}), b"[" * 5000 + b"\n"]


@st.composite
def damage(draw):
    """One change to a journal's bytes: cut at a byte, bytes put in anywhere, a line repeated or moved, a line of
    junk (JSON of the wrong kind, not UTF-8, a record of another sweep or with a wrong digest) put in anywhere."""
    kind = draw(st.sampled_from(["cut", "insert", "repeat", "move", "junk", "other-sweep", "wrong-digest"]))
    where = draw(st.floats(0, 1))
    if kind == "insert":
        return kind, where, draw(st.binary(min_size=1, max_size=6))
    if kind == "junk":
        return kind, where, draw(st.sampled_from(JUNK_LINES))
    return kind, where, draw(st.floats(0, 1))


def apply_damage(journal: bytes, change, fresh: FreshSweep) -> bytes:
    kind, where, extra = change
    lines = journal.splitlines(keepends=True)
    at = round(where * len(lines))
    if kind == "cut":
        return journal[:round(where * len(journal))]
    if kind == "insert":
        at = round(where * len(journal))
        return journal[:at] + extra + journal[at:]
    if kind in ("repeat", "move") and lines:
        line = lines[min(at, len(lines) - 1)]
        if kind == "move":
            lines.remove(line)
        lines.insert(round(extra * len(lines)), line)
    elif kind in ("junk", "other-sweep", "wrong-digest"):
        lines.insert(at, {"junk": extra, "other-sweep": _other_sweeps_line(fresh),
                          "wrong-digest": _line_with_a_wrong_digest(fresh)}.get(kind, extra))
    return b"".join(lines)


@given(in_table=st.integers(0, 12), in_journal=st.integers(0, 12), changes=st.lists(damage(), min_size=1, max_size=3),
       suffix=st.sampled_from(SUFFIXES))
@PROPERTY_SETTINGS
def test_a_damaged_journal_is_refused_in_one_line_or_resumes_to_the_fresh_result(fresh, in_table, in_journal,
                                                                                  changes, suffix):
    journal = b"".join(journal_lines(fresh, fresh.point_ids[len(fresh.point_ids) - in_journal:]))
    for change in changes:
        journal = apply_damage(journal, change, fresh)
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / f"sweep{suffix}"
        if in_table:
            partial_table(out, fresh, fresh.point_ids[:in_table])
        journal_path(out).write_bytes(journal)
        before = snapshot(Path(folder))
        try:
            resume(out, fresh)
        except ConfigError as err:
            event("refused: " + re.sub(r"line \d+ ", "", str(err).split("' ", 1)[1].split(";")[0]))
            assert_one_line_naming(err, journal_path(out))
            assert snapshot(Path(folder)) == before  # refused: nothing changed
        else:
            event("resumed")
            assert_same_as_fresh(out, fresh)


CUTS = st.one_of(st.just(("whole", 0)), st.tuples(st.just("after-row"), st.integers(0, 13)),
                 st.tuples(st.just("at-byte"), st.floats(0, 1)))


def cut_table(data: bytes, cut) -> bytes:
    kind, where = cut
    if kind == "after-row":  # a CSV cut between rows (or a Parquet file cut at such a place)
        lines = data.splitlines(keepends=True)
        return b"".join(lines[:1 + where])
    return data[:round(where * len(data))] if kind == "at-byte" else data


@given(in_table=st.integers(1, 12), cut=CUTS, repeat=st.integers(0, 11), suffix=st.sampled_from(SUFFIXES))
@PROPERTY_SETTINGS
def test_a_cut_short_or_repeating_table_is_refused_in_one_line_or_resumes_to_the_fresh_result(
        fresh, in_table, cut, repeat, suffix):
    """A table cut at any byte (a copy interrupted, a full disk): a CSV cut between rows loses only those rows,
    which run again; cut mid-row, or a Parquet file cut anywhere, it is refused. A row twice is kept once."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / f"sweep{suffix}"
        partial_table(out, fresh, fresh.point_ids[:in_table])
        data = out.read_bytes()
        if suffix == ".csv":
            lines = data.splitlines(keepends=True)
            data += lines[1 + min(repeat, len(lines) - 2)]  # a row repeated at the end
        out.write_bytes(cut_table(data, cut))
        before = snapshot(Path(folder))
        try:
            resume(out, fresh)
        except ConfigError as err:
            event("refused")
            assert_one_line_naming(err, out)
            assert snapshot(Path(folder)) == before
        else:
            event("resumed")
            assert_same_as_fresh(out, fresh)


@given(position=st.floats(0, 1), junk=st.one_of(st.binary(min_size=1, max_size=4),
                                                 st.text(min_size=1, max_size=4).map(str.encode)))
@PROPERTY_SETTINGS
def test_bytes_put_into_a_csv_tables_rows_never_give_a_point_twice_or_lose_a_cell(fresh, position, junk):
    """A table has no digest (a user may edit it): bytes put into its rows may change a value, but a resume
    still holds each point once and fills every cell the sweep from scratch fills, or it is refused in one line.
    (Its header is trusted past the ids and grid keys: a result column renamed stays renamed.)"""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "sweep.csv"
        partial_table(out, fresh, fresh.point_ids[:6])
        data = out.read_bytes()
        header = data.index(b"\n") + 1
        at = header + round(position * (len(data) - header))
        out.write_bytes(data[:at] + junk + data[at:])
        try:
            resume(out, fresh)
        except ConfigError as err:
            event("refused")
            assert_one_line_naming(err, out)
            return
        event("resumed")
        table = read_back(out)
        expected = pd.read_csv(io.BytesIO(fresh.tables[".csv"]), dtype=str, keep_default_na=False)
        current = table[table["point_id"].isin(fresh.point_ids)]
        assert sorted(current["point_id"]) == sorted(fresh.point_ids)
        filled = current.set_index("point_id").astype(str).ne("")
        assert (filled | ~expected.set_index("point_id").ne("")).all().all()


# ----------------------------------------------------------------------------------- rules, one by one

def test_a_torn_last_line_is_cut_before_the_next_append_and_its_point_runs_again(tmp_path, fresh):
    out = tmp_path / "sweep.csv"
    whole = journal_lines(fresh, fresh.point_ids[:2])
    torn = journal_lines(fresh, fresh.point_ids[2:3])[0][:-1]  # all but its line end
    journal_path(out).write_bytes(b"".join(whole) + torn)
    plan = plan_sweep(SCENARIO, AXES, out, VARIANTS)
    assert fresh.point_ids[2] in {t.point_id for t in plan.todo}
    plan.output.append(fresh.rows[fresh.point_ids[2]])
    assert read_journal(journal_path(out), HASH).rows[-1]["point_id"] == fresh.point_ids[2]
    assert journal_path(out).read_bytes().count(b"\n") == 3


def test_a_users_file_at_the_journal_path_is_never_appended_to_or_removed(tmp_path):
    out = tmp_path / "sweep.csv"
    journal_path(out).write_bytes(b"my notes, no line end")
    with pytest.raises(ConfigError, match="line 1 is not a record ServeSim wrote") as err:
        plan_sweep(SCENARIO, AXES, out, VARIANTS)
    assert_one_line_naming(err.value, journal_path(out))
    assert journal_path(out).read_bytes() == b"my notes, no line end"


def test_a_grid_extended_or_narrowed_keeps_the_points_it_had_once_each(tmp_path, fresh):
    out = tmp_path / "sweep.csv"
    narrow = parse_grid(["rate=4,8", "scheduler.max_num_seqs=8,64"])
    plan = plan_sweep(SCENARIO, narrow, out, VARIANTS)
    for task in plan.todo:
        plan.output.append(fresh.rows[task.point_id])
    plan.output.finish(plan.tasks)
    ran = resume(out, fresh)  # extended: rate 16 added
    assert len(ran) == 4
    assert_same_as_fresh(out, fresh)
    plan = plan_sweep(SCENARIO, narrow, out, VARIANTS)  # narrowed again: nothing runs, nothing is lost
    assert plan.todo == []
    frame = plan.output.finish(plan.tasks)
    assert len(frame) == 12 and frame["point_id"].is_unique
    assert list(frame["rate"]) == [4, 4, 8, 8] * 2 + [16] * 4  # the grid's points first, then the others


def test_a_table_of_other_grid_keys_is_refused(tmp_path, fresh):
    out = tmp_path / "sweep.parquet"
    partial_table(out, fresh, fresh.point_ids[:3])
    with pytest.raises(ConfigError, match="different scenario or over other --grid keys"):
        plan_sweep(SCENARIO, parse_grid(["rate=4,8,16"]), out, VARIANTS)


def test_a_point_id_of_digits_only_stays_text_in_a_csv_table(tmp_path):
    table = tmp_path / "sweep.csv"
    table.write_text(f"scenario_hash,point_id,variant,rate,error\n{HASH},0123456789012345,,NA,\n")
    rows = read_table_rows(table, HASH)
    assert rows[0]["point_id"] == "0123456789012345" and rows[0]["rate"] == "NA" and rows[0]["error"] == ""


def test_a_grid_value_of_mixed_kinds_writes_and_resumes_as_parquet(tmp_path):
    """scheduler.max_num_seqs over 8 and 'abc': Parquet holds one type per column, so the column is text."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(small_scenario()))
    out = tmp_path / "sweep.parquet"
    assert run_cli("sweep", str(path), *sweep_args(out, ["scheduler.max_num_seqs=8,abc"])) == 0
    first = pd.read_parquet(out)
    assert list(first["scheduler.max_num_seqs"]) == ["8", "abc"] and first.loc[1, "error"] != ""
    assert run_cli("sweep", str(path), *sweep_args(out, ["scheduler.max_num_seqs=8,abc,16"])) == 0
    assert list(pd.read_parquet(out)["scheduler.max_num_seqs"]) == ["8", "abc", "16"]


@pytest.mark.parametrize("failure, raised", [
    (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), ConfigError),  # a full disk: one line
    (KeyboardInterrupt(), KeyboardInterrupt),  # Ctrl-C while writing: goes on up as it is
])
def test_a_failed_write_leaves_the_table_removes_its_temporary_file_and_keeps_the_journal(tmp_path, fresh,
                                                                                         monkeypatch, failure, raised):
    out = tmp_path / "sweep.csv"
    partial_table(out, fresh, fresh.point_ids[:3])
    plan = plan_sweep(SCENARIO, AXES, out, VARIANTS)
    plan.output.append(fresh.rows[plan.todo[0].point_id])
    before = snapshot(tmp_path)

    def fail_half_way(self, path, *args, **kwargs):
        Path(path).write_text("half a tab")
        raise failure
    monkeypatch.setattr(pd.DataFrame, "to_csv", fail_half_way)
    with pytest.raises(raised) as err:
        plan.output.finish(plan.tasks)
    if raised is ConfigError:
        assert_one_line_naming(err.value, out)
        assert "No space left on device" in str(err.value)
    assert snapshot(tmp_path) == before  # the table as it was, the journal kept, no temporary file


def test_a_table_changed_while_the_sweep_ran_is_left_alone(tmp_path, fresh):
    out = tmp_path / "sweep.csv"
    partial_table(out, fresh, fresh.point_ids[:3])
    plan = plan_sweep(SCENARIO, AXES, out, VARIANTS)
    plan.output.append(fresh.rows[plan.todo[0].point_id])
    out.write_text("a user's table now\n")
    with pytest.raises(ConfigError, match="changed while the sweep ran"):
        plan.output.finish(plan.tasks)
    assert out.read_text() == "a user's table now\n" and journal_path(out).exists()


def test_a_rewritten_table_keeps_its_permissions(tmp_path, fresh):
    out = tmp_path / "sweep.csv"
    partial_table(out, fresh, fresh.point_ids[:3])
    out.chmod(0o640)
    resume(out, fresh)
    assert out.stat().st_mode & 0o777 == 0o640


# ------------------------------------------------------------------------------------ the command line

def run_cli(*args: str) -> int:
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
        raise SystemExit(0)
    return exit_info.value.code


@pytest.fixture
def swept(tmp_path) -> tuple[Path, Path]:
    """A scenario file and the finished CSV sweep of it, made through the command line."""
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "sweep.csv"
    assert run_cli("sweep", str(scenario), *sweep_args(out)) == 0
    return scenario, out


def sweep_args(out: Path, grid: list[str] = GRID) -> list[str]:
    return [a for g in grid for a in ("--grid", g)] + ["--backend", "serial", "--out", str(out), "-q"]


def _table_cut_mid_row(out: Path) -> Path:
    out.write_bytes(out.read_bytes()[:-40])
    return out


def _table_not_utf8(out: Path) -> Path:
    out.write_bytes(out.read_bytes().replace(b"paged", b"p\xe4ged", 1))
    return out


def _table_header_only(out: Path) -> Path:
    out.write_bytes(out.read_bytes().splitlines(keepends=True)[0])
    return out


def _table_row_short_in_the_middle(out: Path) -> Path:
    lines = out.read_bytes().splitlines(keepends=True)
    lines[3] = b",".join(lines[3].split(b",")[:10]) + b"\n"
    out.write_bytes(b"".join(lines))
    return out


def _table_as_a_link(out: Path) -> Path:
    target = out.with_name("elsewhere.csv")
    out.rename(target)
    out.symlink_to(target.name)
    return out


def _table_as_a_pipe(out: Path) -> Path:
    out.unlink()
    os.mkfifo(out)
    return out


def _journal_holding(data: bytes):
    def make(out: Path) -> Path:
        journal_path(out).write_bytes(data)
        return journal_path(out)
    return make


ANOTHER_SWEEPS_LINE = journal_line({"scenario_hash": "0" * 16, "point_id": "0" * 16})


def _journal_as_a_folder(out: Path) -> Path:
    journal_path(out).mkdir()
    (journal_path(out) / "inside").write_text("kept")
    return journal_path(out)


REFUSALS = [
    # (id, what to do to the finished sweep at `out` -> the file the one line must name, words the line must have)
    ("table-cut-mid-row", _table_cut_mid_row, ["ends mid-row"]),
    ("table-not-utf8", _table_not_utf8, ["not UTF-8"]),
    ("table-header-only", _table_header_only, ["no rows"]),
    ("table-row-short", _table_row_short_in_the_middle, ["row 3 has 10 of its"]),
    ("table-is-a-link", _table_as_a_link, ["symbolic link"]),
    ("table-is-a-pipe", _table_as_a_pipe, ["not a plain file"]),
    ("journal-is-a-folder", _journal_as_a_folder, ["is a folder"]),
    ("journal-null", _journal_holding(b"null\n"), ["line 1 is null"]),
    ("journal-list", _journal_holding(b"[]\n"), ["line 1 is a list"]),
    ("journal-number", _journal_holding(b"42\n"), ["line 1 is a number"]),
    ("journal-not-utf8", _journal_holding(b"\xff\xfe\n"), ["line 1 is not UTF-8"]),
    ("journal-no-point-id", _journal_holding(b'{"scenario_hash": "x"}\n'), ["line 1 is an object"]),
    ("journal-other-sweep", _journal_holding(ANOTHER_SWEEPS_LINE), ["line 1 belongs to a sweep of a different"]),
    ("journal-garbage-then-torn", _journal_holding(b"garbage\n{\"digest"), ["line 1 is not JSON"]),
    ("journal-users-file", _journal_holding(b"my notes, no line end"), ["line 1 is not a record ServeSim wrote"]),
]


@pytest.mark.parametrize("make, needles", [c[1:] for c in REFUSALS], ids=[c[0] for c in REFUSALS])
def test_the_command_line_refuses_in_one_line_and_changes_nothing(swept, capsys, make, needles):
    scenario, out = swept
    named = make(out)
    folder = out.parent
    before = snapshot(folder)
    capsys.readouterr()
    code = run_cli("sweep", str(scenario), *sweep_args(out))
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --out: ") and "Traceback" not in err, err
    assert str(named) in lines[0], lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert snapshot(folder) == before  # the user's files byte for byte; no temporary file left


def test_an_unreadable_table_is_refused_in_one_line(swept, capsys, monkeypatch):
    # Run as root here, where a chmod cannot make a file unreadable: the read itself is made to fail.
    scenario, out = swept
    real = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self == out:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        return real(self)
    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    capsys.readouterr()
    assert run_cli("sweep", str(scenario), *sweep_args(out)) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: --out: {str(out)!r} cannot be read (Permission denied); allowed: a new file, or a sweep " \
                  "table ServeSim wrote (to resume it)"


def test_the_command_line_resumes_a_torn_and_repeating_journal_to_each_point_once(swept, capsys):
    scenario, out = swept
    complete = read_back(out)
    rows = read_table_rows(out, HASH)
    out.unlink()
    # Half the points, one of them twice, and a line torn by a kill.
    journal_path(out).write_bytes(b"".join(journal_line(r) for r in rows[:6] + rows[2:3]) + journal_line(rows[6])[:50])
    capsys.readouterr()
    assert run_cli("sweep", str(scenario), *sweep_args(out)) == 0
    assert "6 of 12 points already in" in capsys.readouterr().err
    pd.testing.assert_frame_equal(read_back(out), complete)


# ---------------------------------------------------------------------------------------- kill -9

def journal_line_count(journal: Path) -> int:
    try:
        return journal.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def kill_at_a_random_moment(proc: subprocess.Popen, journal: Path, rng: random.Random, lines: int | None) -> bool:
    """SIGKILL `proc` once its journal has `lines` lines, a random fraction of a point's time later (None: at a
    random moment from its start). True if it was still running when killed."""
    if lines is None:
        time.sleep(rng.uniform(0.0, 1.0))
    else:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline and journal_line_count(journal) < lines:
            time.sleep(0.001)
        time.sleep(rng.uniform(0.0, 0.02))
    alive = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    _, stderr = proc.communicate(timeout=60)
    assert b"Traceback" not in stderr, stderr.decode()
    return alive


def test_a_sweep_killed_many_times_resumes_to_each_point_once(tmp_path):
    """SIGKILL at random moments (seeded): while starting, between and during points' journal writes, while
    writing the table. Each rerun goes on from what the last one left; the end is the sweep from scratch."""
    scenario = tmp_path / "scenario.yaml"
    # 2000 requests: a point takes some milliseconds, so a kill lands among the points, not only around them.
    scenario.write_text(yaml.safe_dump(small_scenario({"run": {"num_requests": 2000}, "variants": {
        "paged": {}, "contiguous": {"kv_cache": {"layout": "contiguous", "reserve": "max_len"}}}})))
    grid = ["rate=2,4,6,8,10,12", "scheduler.max_num_seqs=8,16,32,64,128"]  # 60 points with the two variants
    reference = tmp_path / "reference.csv"
    assert run_cli("sweep", str(scenario), *sweep_args(reference, grid)) == 0
    out = tmp_path / "killed.csv"
    journal = journal_path(out)
    command = [sys.executable, "-m", "sim.views.cli", "sweep", str(scenario), *sweep_args(out, grid)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    rng = random.Random(20240928)
    # A kill at a random moment (most often while it starts), seven a random few points in, then two as the last
    # point is written: into the writing of the table.
    waits = [None] + [rng.randint(1, 8) for _ in range(7)] + ["last", "last"]
    alive_when_killed = []
    for wait in waits:
        proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        lines = journal_line_count(journal)
        target = None if wait is None else lines + wait if wait != "last" else 60 - _rows_in(out)
        alive_when_killed.append(kill_at_a_random_moment(proc, journal, rng, target))
    assert sum(alive_when_killed) >= 7, alive_when_killed
    final = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    assert final.returncode == 0 and "Traceback" not in final.stderr, final.stderr
    table = read_back(out)
    assert table["point_id"].is_unique and len(table) == 60
    pd.testing.assert_frame_equal(table, read_back(reference))
    assert not journal.exists()


def _rows_in(table: Path) -> int:
    return len(read_back(table)) if table.exists() else 0
