"""Outputs get the permissions any new file gets (0o666, a folder 0o777, less the umask), not tempfile's private
0o600 / 0o700, and an output written again keeps the permissions its owner gave it (sim/atomic_files.py)."""

import os
import stat
from pathlib import Path

import pytest

from sim.atomic_files import atomic_dir, atomic_write_text, new_temporary, write_output_file


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    yield
    os.umask(old)


def test_a_new_output_folder_and_its_files_take_the_umask(tmp_path, umask_027):
    out = tmp_path / "out"
    with atomic_dir(out) as tmp:
        (tmp / "report.html").write_text("<html></html>")
    assert mode(out) == 0o750 and mode(out / "report.html") == 0o640
    single = tmp_path / "timeline.json"
    write_output_file(single, "{}", "--timeline")
    assert mode(single) == 0o640
    assert mode(new_temporary(tmp_path / "x")) == 0o640 and mode(new_temporary(tmp_path / "y", folder=True)) == 0o750


def test_an_output_written_again_keeps_its_owners_permissions(tmp_path, umask_027):
    out = tmp_path / "out"
    with atomic_dir(out) as tmp:
        (tmp / "summary.json").write_text("{}")
    out.chmod(0o705)
    with atomic_dir(out) as tmp:
        (tmp / "summary.json").write_text("{ }")
    assert mode(out) == 0o705 and (out / "summary.json").read_text() == "{ }"
    single = tmp_path / "timeline.json"
    write_output_file(single, "{}", "--timeline")
    single.chmod(0o604)
    write_output_file(single, "{ }", "--timeline")
    assert mode(single) == 0o604 and single.read_text() == "{ }"
    text = tmp_path / "table.txt"
    atomic_write_text(text, "a")
    assert mode(text) == 0o640


def test_a_failed_write_leaves_no_temporary_behind(tmp_path):
    with pytest.raises(RuntimeError):
        with atomic_dir(tmp_path / "out") as tmp:
            (tmp / "partial").write_text("x")
            raise RuntimeError("the work failed")
    assert list(tmp_path.iterdir()) == []
