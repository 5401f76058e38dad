"""Output paths checked before any long work: a run must not simulate for minutes and then fail to write."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from sim.atomic_files import check_replaceable_dir, check_replaceable_file
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


def check_output_dir(path: str | Path, option: str = "--out") -> Path:
    """Before any long work: `path` can become an output folder (made, or replaced only if ServeSim wrote it
    and nothing else is in it: `sim.atomic_files`); returns it resolved."""
    target = check_replaceable_dir(path, option)
    _check_parent(target, option)
    return target


def check_output_file(path: str | Path, option: str = "--out", *, must_be_ours: bool = True) -> None:
    """Before any long work: a file can be written at `path` without replacing anything ServeSim did not write
    (`must_be_ours=False`: the caller reads an existing file and checks it itself, as a resumed sweep does).
    The path as typed: a trailing slash names a folder, which a file option refuses."""
    text = str(path)
    if text.endswith(("/", os.sep)) or Path(text).name in ("", ".", ".."):
        raise ConfigError(f"{option}: {text!r} names a folder; allowed: a file path, e.g. out/name"
                          + {"--timeline": ".json", "--report": ".html"}.get(option, ""))
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{option}: {text!r} is a folder; allowed: a file path")
    if must_be_ours:
        check_replaceable_file(path, option)
    _check_parent(path, option)


def check_distinct_outputs(folder: Path | None, files: dict[str, str | Path | None]) -> dict[str, Path | None]:
    """Files asked for beside an output folder: none may be the folder itself or hold it (`--timeline` onto
    `--out`); one inside it is written as part of it (its path relative to the folder is returned, so the run
    writes it into the folder before the rename and the folder's marker lists it)."""
    inside: dict[str, Path | None] = {}
    for option, file in files.items():
        inside[option] = None
        if file is None or folder is None:
            continue
        resolved = Path(file).expanduser().resolve()
        if resolved == folder or resolved in folder.parents:
            raise ConfigError(f"{option}: {str(file)!r} is the --out folder or holds it; allowed: a file outside "
                              "it, or inside it (written with the other outputs)")
        if folder in resolved.parents:
            inside[option] = resolved.relative_to(folder)
    return inside
