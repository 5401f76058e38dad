"""Nothing a user has is ever lost: every output path the CLI accepts, planted with a user's files.

An output folder is replaced only when ServeSim's own marker lists everything in it, unchanged; an output
file only when the ledger beside it lists it unchanged. Anything else is refused with one line and exit 2,
before any simulating, and every planted file is byte-identical afterwards.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from helpers import one_error_line, servesim, small_scenario
from sim.atomic_files import OWNER_MARKER, atomic_dir, check_replaceable_dir, foreign_entry
from sim.errors import ConfigError
from sim.views.cli import variant_folders

ROOT = Path(__file__).resolve().parents[2]
SMALL = small_scenario({"workload": {"arrival": {"rate_per_s": 10},
                                     "lengths": {"input_tokens": 100, "output_tokens": 10}},
                        "run": {"num_requests": 20}})
PLAN = small_scenario({"name": "plan-tiny",
                       "workload": {"arrival": {"rate_per_s": 5}, "lengths": {"input_tokens": 100, "output_tokens": 10}},
                       "slo": {"ttft_s": 0.5, "percentile": 90}, "run": {"num_requests": 40},
                       "search": {"gpus": ["l40s"], "tensor_parallel": [1], "max_replicas": 2, "num_seeds": 1,
                                  "min_window_s": 2, "top_k": 1}})



def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (hidden ones too) with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def plant(folder: Path) -> None:
    """A user's results folder: files, a sub-folder, a hidden file."""
    (folder / "sub").mkdir(parents=True)
    (folder / "notes.txt").write_text("my measurements, irreplaceable\n")
    (folder / "sub" / "run.csv").write_text("a,b\n1,2\n")
    (folder / ".hidden").write_bytes(b"\x00\x01")


def assert_refused(proc, *needles):
    err = one_error_line(proc)
    for needle in needles:
        assert needle in err, err


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    return path


@pytest.mark.parametrize("command", ["run", "compare"])
def test_out_onto_a_users_folder_is_refused_and_nothing_is_touched(tmp_path, scenario, command):
    mine = tmp_path / "mydata"
    plant(mine)
    before = snapshot(tmp_path)
    proc = servesim(command, scenario, "--out", mine, "-q")
    assert_refused(proc, "--out", "mydata", "ServeSim did not write it")
    assert snapshot(tmp_path) == before  # no temporary folder left beside it either


def test_plan_out_report_and_cache_onto_a_users_files_are_refused(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(PLAN))
    mine = tmp_path / "mydata"
    plant(mine)
    (tmp_path / "page.html").write_text("<html>my own page</html>")
    before = snapshot(tmp_path)
    assert_refused(servesim("plan", path, "--out", mine, "-q"), "--out", "mydata")
    assert_refused(servesim("plan", path, "--out", tmp_path / "new", "--report", tmp_path / "page.html", "-q"),
                   "--report", "page.html")
    assert_refused(servesim("plan", path, "--out", tmp_path / "new", "--cache", mine, "-q"), "--cache", "mydata")
    assert snapshot(tmp_path) == before and not (tmp_path / "new").exists()


def test_timeline_onto_a_users_file_or_the_out_folder_or_a_folder_spelling_is_refused(tmp_path, scenario):
    (tmp_path / "trace.json").write_text('{"mine": true}')
    before = snapshot(tmp_path)
    assert_refused(servesim("run", scenario, "--timeline", tmp_path / "trace.json", "-q"), "--timeline", "trace.json")
    assert_refused(servesim("run", scenario, "--out", tmp_path / "res", "--timeline", tmp_path / "res", "-q"),
                   "--timeline", "--out folder")
    assert_refused(servesim("run", scenario, "--timeline", f"{tmp_path / 'res'}/", "-q"), "--timeline", "names a folder")
    assert snapshot(tmp_path) == before and not (tmp_path / "res").exists()


def test_sweep_onto_a_users_table_is_refused(tmp_path, scenario):
    table = tmp_path / "mine.csv"
    table.write_text("x,y\n1,2\n")
    before = snapshot(tmp_path)
    assert_refused(servesim("sweep", scenario, "--grid", "rate=1,2", "--out", table, "-q", "--backend", "serial"),
                   "--out", "mine.csv")
    assert snapshot(tmp_path) == before


def test_servesims_own_folder_is_replaced_but_not_once_a_user_adds_to_it(tmp_path, scenario):
    out = tmp_path / "res"
    assert servesim("run", scenario, "--out", out, "-q").returncode == 0
    marker = json.loads((out / OWNER_MARKER).read_text())
    assert set(marker["files"]) == {"requests.parquet", "steps.parquet", "summary.json", "scenario.yaml",
                                    "report.html"}
    assert servesim("run", scenario, "--out", out, "-q", "--set", "run.num_requests=10").returncode == 0
    assert json.loads((out / "summary.json").read_text())["num_requests"] == 10  # replaced
    (out / "my-notes.md").write_text("conclusions")
    before = snapshot(tmp_path)
    assert_refused(servesim("run", scenario, "--out", out, "-q"), "my-notes.md")
    assert snapshot(tmp_path) == before
    (out / "my-notes.md").unlink()
    (out / "summary.json").write_text("{}")  # a file ServeSim wrote, edited since
    assert_refused(servesim("run", scenario, "--out", out, "-q"), "summary.json", "changed since")


def test_a_timeline_inside_the_out_folder_is_written_with_it_and_replaced_with_it(tmp_path, scenario):
    out = tmp_path / "res"
    for _ in range(2):  # the second run replaces the first's folder, timeline included
        proc = servesim("run", scenario, "--out", out, "--timeline", out / "t" / "trace.json", "-q")
        assert proc.returncode == 0, proc.stderr
    assert "t/trace.json" in json.loads((out / OWNER_MARKER).read_text())["files"]
    assert json.loads((out / "t" / "trace.json").read_text())["otherData"]["generator"] == "servesim"
    # A timeline ServeSim wrote elsewhere is replaced too (the ledger beside it lists it).
    for _ in range(2):
        assert servesim("run", scenario, "--timeline", tmp_path / "trace.json", "-q").returncode == 0


@pytest.mark.parametrize("spelling", [".", "..", "./", "../..", "sub/..", "/"])
def test_out_as_the_working_folder_or_above_is_refused_with_nothing_left(tmp_path, scenario, spelling):
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "keep.txt").write_text("x")
    before = snapshot(tmp_path)
    proc = servesim("run", scenario, "--out", spelling, "-q", cwd=work)
    assert_refused(proc, "--out")
    assert snapshot(tmp_path) == before


def test_variants_whose_names_share_a_folder_get_one_each(tmp_path):
    raw = copy.deepcopy(SMALL)
    raw["variants"] = {"tp1/pp1": {"run": {"num_requests": 10}}, "tp1_pp1": {"run": {"num_requests": 20}},
                       "TP1_PP1": {"run": {"num_requests": 30}}, "plain": {}}
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump(raw))
    out = tmp_path / "cmp"
    proc = servesim("compare", path, "--out", out, "-q")
    assert proc.returncode == 0, proc.stderr
    folders = json.loads((out / "folders.json").read_text())
    assert len(set(f.lower() for f in folders.values())) == 4 and folders["plain"] == "plain"
    for name, count in (("tp1/pp1", 10), ("tp1_pp1", 20), ("TP1_PP1", 30)):
        assert json.loads((out / folders[name] / "summary.json").read_text())["num_requests"] == count
    assert proc.stdout.count("shares its folder name") == 3  # each of the three names that share one


def test_a_scenario_without_variants_compares_into_its_folder_without_a_shared_folder_note(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    proc = servesim("compare", path, "--out", tmp_path / "cmp", "-q")
    assert proc.returncode == 0, proc.stderr
    assert "shares its folder name" not in proc.stdout  # the note said so of the only variant
    assert (tmp_path / "cmp" / "summary.json").is_file()


def test_a_variants_folder_does_not_depend_on_the_other_variants():
    alone = variant_folders(["a/b", "c"])
    together = variant_folders(["a/b", "a_b", "c"])
    assert alone["a/b"] == "a_b" and together["a/b"] != together["a_b"]
    assert variant_folders(["a/b", "a_b"]) == {k: together[k] for k in ("a/b", "a_b")}


# ------------------------------------------------------------------ the rule itself, over path spellings

SEGMENTS = st.sampled_from(["a", "b", "mine", ".", "..", "out", "mine/sub", "x.json", "a//b"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(SEGMENTS, min_size=1, max_size=4), trailing=st.booleans(), absolute=st.booleans())
def test_atomic_dir_never_loses_a_users_file_whatever_the_spelling(tmp_path_factory, parts, trailing, absolute):
    root = tmp_path_factory.mktemp("spell")
    work = root / "work"
    plant(work / "mine")
    (work / "a").mkdir()
    (work / "a" / "x.json").write_text("user")
    before = snapshot(root)
    spelling = "/".join(parts) + ("/" if trailing else "")
    target = str(work / spelling) if absolute else spelling
    assume(root in (work / spelling).resolve().parents)  # the test writes nowhere but its own folder
    cwd = os.getcwd()
    os.chdir(work)
    try:
        with atomic_dir(target) as tmp:
            (tmp / "result.txt").write_text("servesim")
        written = check_replaceable_dir(target)
    except ConfigError as err:
        assert "\n" not in str(err)
        written = None
    finally:
        os.chdir(cwd)
    after = snapshot(root)
    for name, data in before.items():  # every user file is still there, unchanged
        assert after.get(name) == data, name
    new = set(after) - set(before)
    if written is None:
        assert not new
    else:
        rel = written.relative_to(root).as_posix()
        assert new == {f"{rel}/result.txt", f"{rel}/{OWNER_MARKER}"}
        assert foreign_entry(written) is None
    assert not [p for p in root.rglob(".*tmp-*")] and not [p for p in root.rglob(".*old-*")]


def test_a_plan_report_inside_its_out_folder_is_part_of_it_and_the_cache_is_marked(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(PLAN))
    out, cache = tmp_path / "plan", tmp_path / "cache"
    for _ in range(2):  # the second run replaces the first's folder and reads the cache it left
        proc = servesim("plan", path, "--out", out, "--report", out / "r.html", "--cache", cache, "-q")
        assert proc.returncode == 0, proc.stderr
    assert "r.html" in json.loads((out / OWNER_MARKER).read_text())["files"]
    assert (out / "r.html").read_text() == (out / "report.html").read_text()
    entries = [p for p in cache.iterdir() if p.suffix == ".json"]
    assert entries and (cache / ".servesim-plan-cache").is_file()
    entries[0].write_text("[1, 2")  # a damaged entry is simulated again, not a traceback
    assert servesim("plan", path, "--out", out, "--cache", cache, "-q").returncode == 0
    assert isinstance(json.loads(entries[0].read_text()), dict)


def test_a_single_output_file_is_replaced_only_while_its_ledger_entry_holds(tmp_path):
    from sim.atomic_files import FILE_LEDGER, write_output_file
    table = tmp_path / "table.csv"
    write_output_file(table, "a,b\n1,2\n")
    write_output_file(table, "a,b\n3,4\n")  # its own, unchanged since: replaced
    assert table.read_text() == "a,b\n3,4\n" and (tmp_path / FILE_LEDGER).is_file()
    table.write_text("a,b\n5,6\n")  # edited by the user since
    with pytest.raises(ConfigError, match="table.csv"):
        write_output_file(table, "x")
    assert table.read_text() == "a,b\n5,6\n"
    (tmp_path / "theirs.csv").write_text("mine")
    with pytest.raises(ConfigError, match="theirs.csv"):
        write_output_file(tmp_path / "theirs.csv", "x")
    assert (tmp_path / "theirs.csv").read_text() == "mine"


def test_fit_engine_out_onto_a_users_yaml_is_refused_before_any_fitting(tmp_path):
    mine = tmp_path / "deploy.yaml"
    mine.write_text("name: my own scenario\n")
    before = snapshot(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "calibrate", "fit-engine", str(tmp_path / "nowhere"),
                           "--scenario", str(ROOT / "scenarios" / "quickstart.yaml"), "--out", str(mine)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert_refused(proc, "--out", "deploy.yaml")
    assert snapshot(tmp_path) == before


def test_a_users_file_that_mentions_servesim_is_still_theirs(tmp_path, scenario):
    notes = tmp_path / "trace.json"
    notes.write_text('{"otherData": {"generator": "servesim"}, "mine": "a copy I edited"}')
    before = snapshot(tmp_path)
    assert_refused(servesim("run", scenario, "--timeline", notes, "-q"), "--timeline", "trace.json")
    assert snapshot(tmp_path) == before
