"""A run larger than the memory the process is granted: one `error:` line and exit 2, never a traceback, whether
numpy or the compiled core's own mapped buffers (`sim.machine.plain_pages`) run out."""

import errno
import mmap

import numpy as np
import pytest
import typer

from sim import machine
from sim.views.cli import run_app


def test_a_mapping_the_os_refuses_is_a_memory_error_naming_the_array(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError(errno.ENOMEM, "Cannot allocate memory")
    monkeypatch.setattr(mmap, "mmap", refuse)
    with pytest.raises(MemoryError, match=r"^Unable to allocate 81,920 bytes for an array with shape \(1024, 10\) "
                                          r"and data type float64$"):
        machine.plain_pages((1024, 10), np.float64)


def test_another_os_error_of_a_mapping_is_not_taken_for_memory(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError(errno.EACCES, "Permission denied")
    monkeypatch.setattr(mmap, "mmap", refuse)
    with pytest.raises(PermissionError):
        machine.plain_pages((4,), np.int64)


def test_the_command_line_says_out_of_memory_in_one_line_and_exits_2(capsys):
    app = typer.Typer()

    @app.command()
    def run():
        np.zeros((1 << 59,), dtype=np.int64)  # numpy's own MemoryError, as an array sized by replicas would raise

    @app.command()
    def other():  # (a second command, so that typer keeps the command's name)
        pass

    with pytest.raises(SystemExit) as exit_:
        run_app(app, ["run"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("error: out of memory: this run needs more memory than the machine grants (Unable to "
                          "allocate ")
    assert "(576460752303423488,)" in err and "); allowed: fewer replicas (hardware.num_replicas)" in err
