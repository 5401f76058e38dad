"""Output paths checked before any long work: a run must not simulate for minutes and then fail to write."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from sim.errors import ConfigError


def _nearest_existing(path: Path) -> Path:
    for candidate in [path, *path.parents]:
        if candidate.exists() or candidate.is_symlink():
            return candidate
    return Path(".")


def _check_parent(path: Path, option: str) -> None:
    """The folders above `path` exist or can be made, and the nearest existing one takes new files."""
    parent = _nearest_existing(path.parent if path.parent != path else path)
    if not parent.is_dir():
        raise ConfigError(f"{option}: {str(path)!r} is under {str(parent)!r}, which is a file, not a folder; "
                          "allowed: a path whose parents are folders")
    try:  # os.access says yes to root on a read-only mount: make (and remove) a probe file instead
        fd, probe = tempfile.mkstemp(prefix=".servesim-write-check-", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ConfigError(f"{option}: {str(path)!r} cannot be written: folder {str(parent)!r} does not "
                          f"take new files ({err.strerror or err})") from None


def check_output_dir(path: str | Path, option: str = "--out") -> None:
    """Before any long work: `path` can become an output folder (made, or replaced if it is one)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{option}: {str(path)!r} is a file; allowed: a folder (made, or replaced if it exists)")
    _check_parent(path, option)


def check_output_file(path: str | Path, option: str = "--out") -> None:
    """Before any long work: a file can be written at `path`."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{option}: {str(path)!r} is a folder; allowed: a file path")
    _check_parent(path, option)
