"""The planner's simulations kept on disk between runs (`servesim plan --cache DIR`, issue 15).

A plan asked again (the dashboard redrawing, a report rewritten, a price changed with `--price`) runs the same
simulations as before. Each one is stored under a key that names everything its answer depends on: the exact
scenario it simulated (rate, replicas, seed and request count included), whether it could stop early, and a
fingerprint of the code and data that simulate it (every file of the `sim` package and the kernel tables
under `calibrate/measured` and `calibrate/profiles`). Change any of them and the key changes, so a stale
answer is never read; old entries are simply never asked for again (delete the folder to reclaim the space).
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

from sim.atomic_files import atomic_write_text
from sim.errors import ConfigError

_ROOT = Path(__file__).resolve().parents[2]
CACHE_MARKER = ".servesim-plan-cache"
FINGERPRINTED = (_ROOT / "sim", _ROOT / "calibrate" / "measured", _ROOT / "calibrate" / "profiles")


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """SHA-256 over the path and bytes of every file that can change a simulation's answer."""
    digest = hashlib.sha256()
    for folder in FINGERPRINTED:
        if not folder.is_dir():
            continue
        for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            digest.update(str(path.relative_to(_ROOT)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


class PlanCache:
    """One JSON file per simulation answer, named by its key."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        if self.folder.exists() and not self.folder.is_dir():
            raise ConfigError(f"--cache: {str(folder)!r} is a file; give a folder (it is created if missing)")
        marker = self.folder / CACHE_MARKER
        if self.folder.is_dir() and any(self.folder.iterdir()) and not marker.is_file():
            # Entries are written by name into this folder: one that a user keeps other files in is not ours.
            raise ConfigError(f"--cache: {str(folder)!r} holds files and is not a ServeSim plan cache (no "
                              f"{CACHE_MARKER}); allowed: a new or empty folder, or a cache ServeSim made")
        self.folder.mkdir(parents=True, exist_ok=True)
        if not marker.is_file():
            atomic_write_text(marker, "servesim plan cache: one JSON answer per simulation key\n")
        self.hits = 0
        self.misses = 0

    def key(self, kind: str, raw: dict, **details) -> str:
        text = json.dumps({"code": code_fingerprint(), "kind": kind, "raw": raw, **details}, sort_keys=True,
                          default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, key: str) -> dict | None:
        path = self.folder / f"{key}.json"
        if not path.is_file():
            self.misses += 1
            return None
        try:
            value = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError):
            value = None
        if not isinstance(value, dict):  # a damaged entry is asked again (and rewritten), never trusted
            self.misses += 1
            return None
        self.hits += 1
        return value

    def put(self, key: str, value: dict) -> None:
        # JSON keeps floats exactly (shortest repr round-trips) and writes NaN and Infinity, which it reads back.
        atomic_write_text(self.folder / f"{key}.json", json.dumps(value))  # in order: metrics keep their column order
