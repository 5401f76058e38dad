"""Which model to calibrate: a catalog name, or a YAML/JSON file holding an inline architecture
(the keys of an inline `model:` in a scenario)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from pydantic import ValidationError

from sim.errors import ConfigError
from sim.model.catalog import get_model
from sim.model.specs import ModelSpec


def load_model(name_or_file: str) -> ModelSpec:
    path = Path(name_or_file).expanduser()
    if path.suffix.lower() not in (".yaml", ".yml", ".json"):
        return get_model(name_or_file, "--model")
    if not path.is_file():
        raise ConfigError(f"--model: file '{name_or_file}' not found; allowed: a catalog model or a YAML/JSON file")
    try:
        raw = json.loads(path.read_text()) if path.suffix.lower() == ".json" else yaml.safe_load(path.read_text())
    except (yaml.YAMLError, json.JSONDecodeError, UnicodeDecodeError):
        raise ConfigError(f"--model: '{name_or_file}' is not valid {path.suffix[1:].upper()}") from None
    if isinstance(raw, dict) and set(raw) == {"model"}:  # a scenario-style `model:` section
        raw = raw["model"]
    if isinstance(raw, str):
        return get_model(raw, f"--model ({name_or_file})")
    if not isinstance(raw, dict):
        raise ConfigError(f"--model: '{name_or_file}' must hold a mapping of architecture keys "
                          f"({', '.join(ModelSpec.model_fields)})")
    try:
        return ModelSpec.model_validate(raw)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        where = ".".join(map(str, first["loc"])) or "(top level)"
        value = first.get("input")
        shown = "" if isinstance(value, dict) else f" {value!r}"
        raise ConfigError(f"--model: '{name_or_file}' field {where}:{shown} {first['msg']}") from None
