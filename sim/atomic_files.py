"""Writing outputs so that nothing is half-written and nothing ServeSim did not write is ever replaced.

A folder of outputs is built under a temporary name and renamed into place. Each such folder holds
`OWNER_MARKER`, which lists every file ServeSim put there with its size and digest. A later run may
replace an existing folder only when it is empty, or when it holds exactly what its marker lists,
unchanged (a sub-folder with its own valid marker counts as ServeSim's too). Anything else in it, a
user's notes, a file edited since, a folder ServeSim never wrote, and the run is refused with one line
before any simulating (`check_replaceable_dir`), and checked again just before the rename.

A single output file (a timeline, a plan report, a calibrate table) is replaced only where `FILE_LEDGER` in its
folder lists it, unchanged (`check_replaceable_file`; `write_output_file` writes the file and its ledger entry).
No word inside a file decides: a user's own notes may well mention ServeSim.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sim.errors import ConfigError

OWNER_MARKER = ".servesim-output.json"
FILE_LEDGER = ".servesim-files.json"  # single output files ServeSim wrote into a folder it does not own
GENERATOR_TAG = "servesim"


_SEPARATORS = ("/", "\\", "\x00")


def plain_name(value: Any) -> bool:
    """A name that is one folder name and nothing else: no separator, not `.` or `..`, not empty."""
    return (isinstance(value, str) and value.strip() not in ("", ".", "..")
            and not any(sep in value for sep in _SEPARATORS))


def _digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "blake2b").hexdigest()[:32]


def _listing(folder: Path) -> dict[str, dict]:
    """{relative path: {size, digest}} of every file under `folder` but the marker."""
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != OWNER_MARKER):
        files[path.relative_to(folder).as_posix()] = {"bytes": path.stat().st_size, "digest": _digest(path)}
    return files


def _write_marker(folder: Path) -> None:
    text = json.dumps({"generator": GENERATOR_TAG, "files": _listing(folder)}, indent=1)
    (folder / OWNER_MARKER).write_text(text)


def foreign_entry(folder: Path) -> str | None:
    """The first entry under `folder` that ServeSim did not write (or that changed since), as a relative path
    with the reason; None where every entry is ServeSim's own (or the folder is empty)."""
    entries = sorted(folder.iterdir())
    if not entries:
        return None
    marker = folder / OWNER_MARKER
    try:
        recorded = json.loads(marker.read_text())["files"] if marker.is_file() else None
        if recorded is not None and not isinstance(recorded, dict):
            recorded = None
    except (OSError, ValueError, KeyError, TypeError):
        recorded = None
    if recorded is None:
        first = next((e for e in entries if e.name != OWNER_MARKER), entries[0])
        return f"{first.name!r} (the folder has no valid {OWNER_MARKER}: ServeSim did not write it)"
    return _unlisted(folder, folder, recorded)


def _unlisted(root: Path, folder: Path, recorded: dict) -> str | None:
    """The first entry under `folder` that `root`'s marker does not list as it is now; a sub-folder with a
    marker of its own is judged by that marker (a run written inside another's folder)."""
    for path in sorted(folder.iterdir()):
        rel = path.relative_to(root).as_posix()
        if path.name == OWNER_MARKER and folder == root:
            continue
        if path.is_dir() and not path.is_symlink():
            if (path / OWNER_MARKER).is_file():
                nested = foreign_entry(path)
                nested = None if nested is None else f"{nested} in {rel!r}"
            else:
                nested = _unlisted(root, path, recorded)
            if nested is not None:
                return nested
            continue
        if path.is_symlink() or not path.is_file():
            return f"{rel!r} (not a file ServeSim writes)"
        if path.name == FILE_LEDGER or _ledger(path.parent).get(path.name) == _fingerprint(path):
            continue  # a single output file written into this folder later (`write_output_file`)
        entry = recorded.get(rel)
        if not isinstance(entry, dict):
            return f"{rel!r} (ServeSim did not write it)"
        if path.stat().st_size != entry.get("bytes") or _digest(path) != entry.get("digest"):
            return f"{rel!r} (changed since ServeSim wrote it)"
    return None


def _refuse_unless_replaceable(target: Path, option: str, shown: str) -> None:
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        kind = "a link" if target.is_symlink() else "a file" if target.is_file() else "a special file"
        raise ConfigError(f"{option}: {shown!r} is {kind}, not a folder ServeSim may replace; allowed: a new "
                          "folder, an empty one, or one ServeSim wrote")
    if target.is_dir():
        foreign = foreign_entry(target)
        if foreign is not None:
            raise ConfigError(f"{option}: {shown!r} already holds {foreign}; ServeSim never replaces what "
                              "it did not write; allowed: a new folder, an empty one, or one ServeSim wrote")


def output_dir_target(path: str | Path, option: str = "--out") -> Path:
    """`path` as the folder a rename will replace: absolute, `.` and `..` resolved, never the working folder
    or one above it (replacing it would pull the floor from under the shell that ran us)."""
    target = Path(path).expanduser()
    target = target.parent.resolve() / target.name if target.name not in ("", ".", "..") else target.resolve()
    cwd = Path.cwd().resolve()
    if target == cwd or target in cwd.parents or target.parent == target:
        raise ConfigError(f"{option}: {str(path)!r} is the current folder or one above it; allowed: a folder "
                          "below the current one, e.g. out/run1")
    return target


def check_replaceable_dir(path: str | Path, option: str = "--out") -> Path:
    """Before any long work: `path` names a folder ServeSim may create or replace; returns it resolved."""
    target = output_dir_target(path, option)
    above = next(p for p in target.parents if p.exists() or p.is_symlink())
    if not above.is_dir():
        raise ConfigError(f"{option}: {str(path)!r} is under {str(above)!r}, which is a file, not a folder; "
                          "allowed: a path whose parents are folders")
    _refuse_unless_replaceable(target, option, str(path))
    return target


def check_replaceable_file(path: str | Path, option: str) -> None:
    """`path` is absent, or a file ServeSim wrote there and nobody changed since (its folder's `FILE_LEDGER` lists
    its size and digest); else one line."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_file():
        raise ConfigError(f"{option}: {str(path)!r} exists and is not a plain file; allowed: a new file or one "
                          "ServeSim wrote")
    if _ledger(path.parent).get(path.name) == _fingerprint(path) or _listed_by_its_folder(path):
        return
    raise ConfigError(f"{option}: {str(path)!r} already exists and ServeSim did not write it (or it changed "
                      "since); ServeSim never overwrites what it did not write; allowed: a new file or one "
                      "ServeSim wrote")


def _listed_by_its_folder(path: Path) -> bool:
    """`path` lies in an output folder whose marker lists it unchanged (a report written with `--out`'s folder)."""
    for folder in path.resolve().parents:
        marker = folder / OWNER_MARKER
        if marker.is_file():
            try:
                recorded = json.loads(marker.read_text())["files"]
            except (OSError, ValueError, KeyError, TypeError):
                return False
            entry = recorded.get(path.resolve().relative_to(folder).as_posix()) if isinstance(recorded, dict) else None
            return entry == _fingerprint(path)
    return False


def _fingerprint(path: Path) -> dict:
    return {"bytes": path.stat().st_size, "digest": _digest(path)}


def _ledger(folder: Path) -> dict:
    try:
        files = json.loads((folder / FILE_LEDGER).read_text()).get("files")
    except (OSError, ValueError, AttributeError):
        return {}
    return files if isinstance(files, dict) else {}


def write_output_file(path: str | Path, data: bytes | str, option: str = "--out") -> None:
    """Write one output file atomically, never over a file ServeSim did not write, and record it in its
    folder's ledger so a later run may replace it."""
    path = Path(path)
    check_replaceable_file(path, option)
    atomic_write_bytes(path, data.encode() if isinstance(data, str) else data)
    files = _ledger(path.parent) | {path.name: _fingerprint(path)}
    atomic_write_text(path.parent / FILE_LEDGER, json.dumps({"generator": GENERATOR_TAG, "files": files}, indent=1))


def new_temporary(beside: Path, label: str = "tmp", folder: bool = False) -> Path:
    """A new, uniquely named empty file (or folder) beside `beside`, with the permissions any new one gets: 0o666
    (0o777) less the umask. tempfile's would make every output private to its owner."""
    for _ in range(100):
        tmp = beside.with_name(f".{beside.name}.{label}-{secrets.token_hex(6)}")
        try:
            if folder:
                os.mkdir(tmp, 0o777)
            else:
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(f"no free temporary name beside {str(beside)!r}")


def keep_permissions(old: Path, new: Path) -> None:
    """An output written again keeps the permissions its owner gave it (nothing where there was none)."""
    try:
        os.chmod(new, stat.S_IMODE(os.stat(old).st_mode))
    except FileNotFoundError:
        pass


@contextmanager
def atomic_dir(target: str | Path, option: str = "--out"):
    """Yield a temporary folder beside `target`; on success it replaces `target` in one rename, carrying the
    marker that lets a later run replace it. A `target` holding anything ServeSim did not write is refused,
    before the work (the caller may check earlier with `check_replaceable_dir`) and again before the rename."""
    shown = str(target)
    target = check_replaceable_dir(target, option)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = new_temporary(target, folder=True)
    except OSError as err:
        raise ConfigError(f"{option}: {shown!r} cannot be written ({err.strerror or err})") from None
    try:
        yield tmp
        _write_marker(tmp)
        _refuse_unless_replaceable(target, option, shown)  # the folder may have changed while the work ran
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if target.exists():
        keep_permissions(target, tmp)
        old = new_temporary(target, "old", folder=True)
        target.rename(old / target.name)
    tmp.rename(target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = new_temporary(path)
    try:
        tmp.write_bytes(data)
        keep_permissions(path, tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
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
