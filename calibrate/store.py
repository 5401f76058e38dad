"""A profile folder being written: each measured point is saved at once (the family's CSV rewritten
under a temporary name, then renamed), so an interrupted run resumes where it stopped."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd

from sim.atomic_files import atomic_write_text
from sim.cost.calibrated import FAMILY_KEYS, STAT_COLUMNS
from sim.cost.profile_meta import PROFILE_FORMAT_VERSION
from sim.errors import ConfigError

# meta.json keys that must match for a rerun to resume into an existing folder.
_RESUME_KEYS = ("device", "dtype", "threads", "tensor_parallel", "block_size", "grid", "shard", "paged_decode_impl",
                "prefill_attention_impl")


def _canonical_key(family: str, values: dict) -> tuple:
    return tuple(str(values[k]) for k in FAMILY_KEYS[family])


def open_profile_folder(out: str | Path, meta: dict, resume_keys: tuple[str, ...]) -> tuple[Path, dict]:
    """The profile folder `out`, made or resumed, and `meta` with its start time kept from the run it resumes.

    A folder is resumed only where its meta.json is a profile's measured with the same `resume_keys`; a new or
    empty folder is made; anything else (a user's folder, a damaged meta.json) is refused with one line, since
    the writers replace meta.json and the CSVs by name."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out: '{out}' exists and is not a folder")
    meta = dict(meta)
    if out.is_dir() and any(out.iterdir()):
        try:
            old = json.loads((out / "meta.json").read_text())
        except (OSError, UnicodeDecodeError, ValueError):
            old = None
        if not isinstance(old, dict) or "format_version" not in old:
            raise ConfigError(f"--out: '{out}' holds files and no ServeSim profile meta.json; allowed: a new or "
                              "empty folder, or a profile folder to resume")
        differs = [k for k in resume_keys if old.get(k) != json.loads(json.dumps(meta.get(k)))]
        if differs:
            raise ConfigError(f"--out: '{out}' holds a profile measured with other {', '.join(differs)}; "
                              "allowed: the same options (to resume) or a new folder")
        meta["started"] = old.get("started", meta.get("started"))
    out.mkdir(parents=True, exist_ok=True)
    return out, meta


class ProfileWriter:
    def __init__(self, out: str | Path, meta: dict):
        self.out, meta = open_profile_folder(out, {"format_version": PROFILE_FORMAT_VERSION, **meta, "complete": False},
                                             _RESUME_KEYS)
        self.meta = meta
        self.rows: dict[str, list[dict]] = {}
        for family in FAMILY_KEYS:
            path = self.out / f"{family}.csv"
            self.rows[family] = pd.read_csv(path).to_dict("records") if path.is_file() else []
        self.done = {family: {_canonical_key(family, r) for r in rows} for family, rows in self.rows.items()}
        self._write_meta()

    def _write_meta(self) -> None:
        atomic_write_text(self.out / "meta.json", json.dumps(self.meta, indent=2) + "\n")

    def has(self, family: str, key: dict) -> bool:
        return _canonical_key(family, key) in self.done[family]

    def add(self, family: str, key: dict, timing) -> None:
        row = {**{k: key[k] for k in FAMILY_KEYS[family]},
               **{c: getattr(timing, c) for c in STAT_COLUMNS}}
        self.rows[family].append(row)
        self.done[family].add(_canonical_key(family, key))
        buf = io.StringIO()
        pd.DataFrame(self.rows[family], columns=list(FAMILY_KEYS[family]) + list(STAT_COLUMNS)).to_csv(
            buf, index=False, float_format="%.6e")
        atomic_write_text(self.out / f"{family}.csv", buf.getvalue())

    def finish(self, **extra) -> None:
        self.meta.update(extra, complete=True)
        self._write_meta()
