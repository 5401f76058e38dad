"""meta.json of a profile folder, per-op or whole-step: one reader, one set of one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

from sim.errors import ConfigError

PROFILE_FORMAT_VERSION = 1


def read_meta(path: str | Path, field: str = "cost_model.profile") -> dict:
    """meta.json of any ServeSim profile folder (per-op or whole-step), with one-line errors."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise ConfigError(f"{field}: '{path}' is not a folder; give a profile written by `python -m calibrate run`, "
                          "`calibrate steps` or `calibrate import-steps`")
    meta_path = p / "meta.json"
    if not meta_path.is_file():
        raise ConfigError(f"{field}: '{path}' has no meta.json; give a profile written by `python -m calibrate run`, "
                          "`calibrate steps` or `calibrate import-steps`")
    try:
        meta = json.loads(meta_path.read_text())
    except (ValueError, UnicodeDecodeError) as err:  # ValueError: JSONDecodeError, or an integer of > 4,300 digits
        raise ConfigError(f"{field}: '{meta_path}' is not valid JSON ({getattr(err, 'msg', err)})") from None
    if not isinstance(meta, dict) or meta.get("format_version") != PROFILE_FORMAT_VERSION or "shard" not in meta:
        raise ConfigError(f"{field}: '{meta_path}' is not a ServeSim profile (format_version "
                          f"{PROFILE_FORMAT_VERSION} with a shard section)")
    return meta
