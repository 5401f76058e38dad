"""Writing outputs so that nothing is ever half-written: build under a temporary name, then rename."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from sim.errors import ConfigError


@contextmanager
def atomic_dir(target: str | Path):
    """Yield a temporary directory beside `target`; on success it replaces `target` in one rename."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        target.rename(old)
    tmp.rename(target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=2, default=_json_default, allow_nan=True))


def _json_default(value):
    try:
        return value.item()  # numpy scalars
    except AttributeError:
        return str(value)


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
