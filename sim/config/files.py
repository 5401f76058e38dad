"""Scenario files: YAML read once, `--set` overrides, variants deep-merged into the base, paths anchored.

A file holds a base scenario and optional `variants:`, named partial overrides deep-merged into the
base, so one file describes a comparison. `--set path.to.key=value` overrides apply to the raw YAML
before validation, winning over a variant's own keys (`variants.NAME.<key>` sets one variant's).

This is the one home of two things every front end needs: `parse_yaml` (the only reader of scenario
YAML, file or upload, with line-numbered errors) and `set_path` (the only dotted-path setter, used by
`--set`, sweep grids and the dashboard, with one error for a path through a non-mapping).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from sim.config.deployment import resolve as resolve_deployment
from sim.config.disaggregation import resolve_disaggregated
from sim.config.messages import format_validation_error
from sim.config.schema import Scenario, ScenarioSet
from sim.errors import ConfigError, ServeSimError
from sim.workload.arrivals import Arrival

MAX_SCENARIO_BYTES = 1 << 20
_ARRIVAL = TypeAdapter(Arrival)
# The most digits an integer in scenario YAML may have. No setting needs more than an int64's 19; Python refuses
# to convert one of more than 4,300 digits to or from text (a traceback, not an answer), so a longer one is
# refused where it is read, with its line.
MAX_INT_DIGITS = 100


class _ScenarioLoader(yaml.SafeLoader):
    """yaml.SafeLoader (data only, no code) that refuses what safe_load lets through silently or with a traceback:
    a key given twice in one mapping (safe_load keeps the last value without a word) and an integer of more than
    MAX_INT_DIGITS digits."""

    def compose_mapping_node(self, anchor):
        # Checked as written, before construction: merging (`<<: *base`, whose keys an explicit key may override)
        # rewrites a mapping's pairs in place.
        node = super().compose_mapping_node(anchor)
        first_line: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self.construct_object(key_node)  # 1 and 0x1 are one key; memoized for construction
            if key in first_line:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice in one mapping (first on line {first_line[key] + 1}), "
                    "so one of its values would be dropped; allowed: each key once per mapping", key_node.start_mark)
            first_line[key] = key_node.start_mark.line
        return node

    def construct_yaml_int(self, node):
        digits = sum(ch.isdigit() for ch in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer of {digits:,} digits is not allowed; allowed: at most {MAX_INT_DIGITS} "
                "digits", node.start_mark)
        return super().construct_yaml_int(node)


_ScenarioLoader.add_constructor("tag:yaml.org,2002:int", _ScenarioLoader.construct_yaml_int)


def load_yaml_text(text: str) -> Any:
    """YAML text as data: yaml.safe_load, refusing duplicate keys and overlong integers (yaml.YAMLError with
    the line). Every reader of scenario YAML (files, uploads, `--set` values) goes through here."""
    return yaml.load(text, Loader=_ScenarioLoader)  # noqa: S506 - a SafeLoader subclass: data only


def deep_merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in override.items():
        # A mapping that switches `kind` (e.g. poisson -> trace) replaces the base's: the old kind's
        # keys would be unknown keys of the new one.
        switches_kind = (isinstance(value, dict) and isinstance(out.get(key), dict)
                         and "kind" in value and value["kind"] != out[key].get("kind"))
        if isinstance(value, dict) and isinstance(out.get(key), dict) and not switches_kind:
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_override(text: str) -> tuple[list[str], Any]:
    if "=" not in text:
        raise ConfigError(f"--set: {text!r} is not of the form path.to.key=value")
    path, raw = text.split("=", 1)
    keys = [k for k in path.strip().split(".") if k]
    if not keys:
        raise ConfigError(f"--set: {text!r} has an empty key path")
    try:
        value = load_yaml_text(raw) if raw.strip() else ""
    except yaml.constructor.ConstructorError as err:  # a duplicate key, an overlong integer: not plain text
        raise ConfigError(f"--set: {path.strip()}: {err.problem}") from None
    except yaml.YAMLError:
        value = raw
    return keys, value


def get_path(mapping: dict, path: str, default: Any = None) -> Any:
    """The value at a dotted path ("workload.arrival.rate_per_s"), or `default` where any key is missing."""
    node: Any = mapping
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


def set_path(mapping: dict, path: str, value: Any, *, source: str = "--set", none_removes: bool = False) -> None:
    """Set the key at a dotted path in place, creating the missing (or null) mappings on the way.

    A path through a value that is not a mapping (`model.num_layers` while `model` is a catalog name) is
    an error naming `source`, never a silent replacement. `none_removes`: None deletes the key, so its
    default applies (the dashboard's "no limit"); otherwise None is stored (`--set speculation=null`).
    """
    keys = path.split(".")
    if not all(keys):
        raise ConfigError(f"{source}: {path!r} has an empty key; allowed: dot-separated keys such as a.b.c")
    node = mapping
    for depth, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        elif not isinstance(child, dict):
            through = ".".join(keys[: depth + 1])
            raise ConfigError(f"{source}: {path!r} goes through {through}, which is {child!r}, not a mapping; "
                              f"allowed: a path through mappings only (set {through} itself to replace it)")
        node = child
    if value is None and none_removes:
        node.pop(keys[-1], None)
    else:
        node[keys[-1]] = copy.deepcopy(value)


# Top-level keys that name the file rather than configure a run: `--set name=...` renames the base alone.
_FILE_KEYS = ("name", "description", "variants")


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """`overrides` applied to a copy of the file: to the base and, so that the command line wins over what a variant
    gives (`--variant vllm-0.6.3 --set engine.num_scheduler_steps=4`), to every variant giving anything under the
    key's first part, unless it replaces the key's section by a value (`_settable`); `variants.NAME.<key>` sets one
    variant's key."""
    raw = copy.deepcopy(raw)
    for text in overrides:
        keys, value = parse_override(text)
        variants = raw.get("variants")
        named = _named_variant(variants, keys)
        if named is not None:
            name, rest = named
            set_path(variants[name], ".".join(rest), value, source=f"--set (variants.{name})")
            continue
        path = ".".join(keys)
        set_path(raw, path, value, source="--set")
        if keys[0] in _FILE_KEYS or not isinstance(variants, dict):
            continue
        for name, variant in variants.items():
            if isinstance(variant, dict) and keys[0] in variant and _settable(variant, keys):
                set_path(variant, path, value, source=f"--set (variants.{name})")
    return raw


def _settable(mapping: dict, keys: list[str]) -> bool:
    """Whether the path `keys` goes through mappings (or missing keys) in `mapping`: a variant that replaces the key's
    section by a value (`model: llama-3.1-8b` where the base's model is written out) has no such key to set."""
    node: Any = mapping
    for key in keys[:-1]:
        node = node.get(key)
        if node is None:
            return True
        if not isinstance(node, dict):
            return False
    return True


def _named_variant(variants: Any, keys: list[str]) -> tuple[str, list[str]] | None:
    """(NAME, the key within it) where `keys` read variants.NAME.<key> of a variant the file has, its name matched
    whole, dots and all (`variants.sglang-0.5.3.post3.engine.max_running_requests`); None otherwise."""
    if keys[0] != "variants" or not isinstance(variants, dict):
        return None
    for end in range(len(keys) - 1, 1, -1):  # the longest name first
        name = ".".join(keys[1:end])
        if isinstance(variants.get(name), dict):
            return name, keys[end:]
    return None


def validate_scenario(raw: Any, prefix: str = "", resolve: bool = True) -> Scenario:
    """Validate one scenario; `resolve=False` checks the schema only, not that the hardware holds the model
    (the planner's base hardware is only a default: its candidates bring their own)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix or 'scenario'}: expected a mapping of sections, got {type(raw).__name__}")
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, prefix)) from None
    except ConfigError as err:
        raise ConfigError(f"{prefix}{err}") from None
    if not resolve:
        return scenario
    try:
        if scenario.hardware.disaggregation is not None:
            # Each pool brings its own hardware: the pools must hold the model, not the top-level defaults.
            resolve_disaggregated(scenario)
        else:
            resolve_deployment(scenario)
        return scenario
    except ConfigError as err:
        from sim.config.engines import as_flag_error
        raise ConfigError(f"{prefix}{as_flag_error(err, scenario)}") from None


def validates(raw: dict) -> bool:
    """Whether validation takes this raw scenario (a copy: ~1-2 ms), for a choice that a scenario which cannot run
    must not decide (sim/config/cost_choice.py `shared_choice`'s `runs`)."""
    try:
        validate_scenario(copy.deepcopy(raw))
    except ServeSimError:
        return False
    return True


def validate_arrival(raw: Any) -> Arrival:
    """Validate a raw `workload.arrival` mapping on its own (a sweep sets its rate before the whole scenario
    is validated); errors read as they would for the whole file."""
    try:
        return _ARRIVAL.validate_python(raw)
    except ValidationError as err:
        rooted = ValidationError.from_exception_data(err.title, [
            {"type": e["type"], "loc": ("workload", "arrival", *e["loc"]), "input": e["input"],
             **({"ctx": e["ctx"]} if "ctx" in e else {})} for e in err.errors(include_url=False)])
        raise ConfigError(format_validation_error(rooted)) from None


def _shared_cost_tier(raw: dict, variants_raw: dict, runs=None) -> str | None:
    """Variants that name no cost model get the same kind of default model (sim/config/cost_choice.py
    `shared_choice`, `runs` its predicate); None when they would all get the same anyway (or there are no
    variants)."""
    if not variants_raw:
        return None
    from sim.config.cost_choice import shared_choice
    return shared_choice([deep_merge(raw, v) for v in variants_raw.values() if isinstance(v, dict)], runs)


def _split_variants(raw: Any, source: str, overrides: list[str] | None) -> tuple[dict, dict]:
    """(the base's raw scenario with `overrides` applied, its variants' raw overrides by name)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a YAML mapping at the top level")
    raw = apply_overrides(raw, overrides or [])
    variants_raw = raw.pop("variants", None) or {}
    if not isinstance(variants_raw, dict):
        raise ConfigError(f"variants: expected a mapping of name -> overrides, got {type(variants_raw).__name__}")
    return raw, variants_raw


def _variant(raw: dict, name: Any, override: Any, shared: str | None, resolve: bool) -> Scenario:
    """One variant validated: the base's raw scenario with its overrides, the shared kind of default model where it
    names no cost model, its name unless it gives its own."""
    if not isinstance(override, dict):
        raise ConfigError(f"variants.{name}: expected a mapping of overrides, got {type(override).__name__}")
    from sim.config.cost_choice import with_shared_choice
    merged = with_shared_choice(deep_merge(raw, override), shared)
    if "name" not in override:
        merged["name"] = str(name)
    return validate_scenario(merged, prefix=f"variants.{name}.", resolve=resolve)


def build_scenario_set(raw: Any, source: str = "<scenario>", overrides: list[str] | None = None,
                       resolve: bool = True) -> ScenarioSet:
    try:
        return _scenario_set(raw, source, overrides, resolve)
    except ConfigError as err:
        raise _with_set_hint(err, raw, overrides or []) from None


def _with_set_hint(err: ConfigError, raw: Any, overrides: list[str]) -> ConfigError:
    """`err`, where it names a key a `--set` gave a file with variants, some of which take it, saying how to set it in
    one variant only (an SGLang flag set for a compare of vLLM and SGLang variants)."""
    variants = raw.get("variants") if isinstance(raw, dict) else None
    if not isinstance(variants, dict) or not variants or not _some_variant_takes(raw, overrides):
        return err
    field = str(err).split(":", 1)[0]
    field = next((field[len(f"variants.{name}."):] for name in sorted(variants, key=len, reverse=True)
                  if field.startswith(f"variants.{name}.")), field)  # the longest name first: v0.6.3 before v0
    for text in overrides:
        try:
            keys = parse_override(text)[0]
        except ConfigError:  # (the error itself, then)
            return err
        path = ".".join(keys)
        if keys[0] not in _FILE_KEYS and (field == path or field.startswith(f"{path}.")):
            return ConfigError(f"{err} (--set {path} is set in the base and in every variant giving {keys[0]}; "
                               f"--set variants.NAME.{path}=... sets one variant's)")
    return err


def _some_variant_takes(raw: dict, overrides: list[str]) -> bool:
    """Whether any variant of the file is well-formed with `overrides` (on the error path only)."""
    try:
        base, variants = _split_variants(raw, "", overrides)
    except ConfigError:
        return False
    for name, override in variants.items():
        try:
            _variant(base, name, override, None, False)
            return True
        except ConfigError:
            continue
    return False


def _scenario_set(raw: Any, source: str, overrides: list[str] | None, resolve: bool) -> ScenarioSet:
    raw, variants_raw = _split_variants(raw, source, overrides)
    shared = _shared_cost_tier(raw, variants_raw)
    base = validate_scenario(raw, resolve=resolve)
    variants: dict[str, Scenario] = {}
    for name, override in variants_raw.items():
        variants[str(name)] = _variant(raw, name, override, shared, resolve)
        _same_ranking(base, variants[str(name)], str(name))
    return ScenarioSet(base, variants or {base.name: base}, source)


def one_scenario(raw: Any, source: str, overrides: list[str] | None, variant: str | None) -> Scenario:
    """The one scenario of a file that `servesim run` simulates: the base, or `variant`. Every variant is checked
    against the schema (a typo or a bad value in any is the file's error), but only the one run must fit its
    hardware: another that cannot (a model a --set GPU cannot hold) does not stop it, and decides nothing of the kind
    of default model the file's variants share (`shared_choice`'s `runs`), which is the one `compare` gives them
    wherever every variant runs."""
    raw, variants_raw = check_every_part(raw, source, overrides)
    if variant is None:
        return validate_scenario(raw)
    names = {str(name): name for name in variants_raw}
    if variant not in names:
        base_name = raw.get("name")
        if not variants_raw and variant == base_name:  # a file without variants is its own only one
            return validate_scenario(raw)
        raise ConfigError(f"--variant: {variant!r} is not in {source}; allowed: "
                          + ", ".join(names or [str(base_name)]))
    shared = _shared_cost_tier(raw, variants_raw, runs=validates)
    return _variant(raw, variant, variants_raw[names[variant]], shared, True)


def check_every_part(raw: Any, source: str, overrides: list[str] | None) -> tuple[dict, dict]:
    """The base and every variant of a file checked against the schema, each with `overrides` or else as written
    (`_as_run_or_written`), for a command that runs only some of them (`run --variant`, `sweep --variant`): only
    those must take the `--set`. Returns (the base's raw with `overrides`, the variants' raw overrides by name)."""
    aimed = [text for text in overrides or [] if parse_override(text)[0][0] == "variants"]
    written, written_variants = _split_variants(raw, source, aimed)
    raw, variants_raw = _split_variants(raw, source, overrides)
    base = _as_run_or_written(lambda base_raw: validate_scenario(base_raw, resolve=False), raw, written)
    for name, override in variants_raw.items():
        _same_ranking(base, _as_run_or_written(lambda pair: _variant(pair[0], name, pair[1], None, False),
                                               (raw, override), (written, written_variants.get(name, override))),
                      str(name))
    return raw, variants_raw


def _as_run_or_written(check, as_run, as_written):
    """`check(as_run)`, or where that fails `check(as_written)`: a part of the file `servesim run` does not run may
    be refused by the run's `--set` (an SGLang flag set for the SGLang variant, the base naming vLLM) and still be
    well-formed as written, with only the `--set` aimed at a variant (`variants.NAME.<key>`). Failing both raises
    the error as run."""
    try:
        return check(as_run)
    except ConfigError as err:
        try:
            return check(as_written)
        except ConfigError:
            raise err from None


def load_one_scenario(path: str | Path, overrides: list[str] | None, variant: str | None) -> Scenario:
    """`one_scenario` of the file at `path`."""
    raw = read_yaml(path)
    anchor_paths(raw, Path(path).resolve().parent)
    return one_scenario(raw, str(path), overrides, variant)


def _same_ranking(base: Scenario, variant: Scenario, name: str) -> None:
    """The verdict ranks a file's variants together, so by one order (`slo.rank_by`)."""
    if variant.slo.rank_by != base.slo.rank_by:
        def shown(order: list[str] | None) -> str:
            return f"[{', '.join(order)}]" if order else "default order"
        raise ConfigError(f"variants.{name}.slo.rank_by: {shown(variant.slo.rank_by)} differs from the file's "
                          f"{shown(base.slo.rank_by)}; allowed: one order for every variant (set it at the top level)")


MAX_YAML_VALUES = 100_000  # values a scenario file may expand to once its aliases are followed


def _expanded_size(node: Any, memo: dict[int, int], depth: int = 0) -> int:
    """How many values `node` stands for with every alias expanded (aliases share objects: memoized by id)."""
    if depth > 200:
        return MAX_YAML_VALUES + 1
    key = id(node)
    if key in memo:
        return memo[key]
    if isinstance(node, dict):
        size = 1 + sum(_expanded_size(k, memo, depth + 1) + _expanded_size(v, memo, depth + 1)
                       for k, v in node.items())
    elif isinstance(node, list):
        size = 1 + sum(_expanded_size(v, memo, depth + 1) for v in node)
    else:
        return 1
    memo[key] = size
    return size


def parse_yaml_bytes(data: bytes, source: str) -> Any:
    """YAML text as data (safe_load: no code), refusing what is not a scenario file: binary, non-UTF-8,
    empty, syntax errors, and alias bombs that expand beyond MAX_YAML_VALUES values."""
    if not data.strip():
        raise ConfigError(f"{source}: the file is empty; allowed: a YAML mapping of scenario sections")
    nul = data.find(b"\x00")
    if nul >= 0:
        raise ConfigError(f"{source}: contains NUL bytes (offset {nul}), so it is binary, "
                          "not YAML; allowed: a UTF-8 text file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{source}: not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start}); "
                          "allowed: a UTF-8 text file") from None
    try:
        value = load_yaml_text(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(err, "problem", None) or getattr(err, "reason", None) or "invalid YAML"
        raise ConfigError(f"{source}{where}: {problem}") from None
    except RecursionError:
        raise ConfigError(f"{source}: nested too deeply; allowed: a YAML mapping of scenario sections") from None
    if value is None:
        raise ConfigError(f"{source}: the file holds no YAML values (only comments?); "
                          "allowed: a YAML mapping of scenario sections")
    if _expanded_size(value, {}) > MAX_YAML_VALUES:
        raise ConfigError(f"{source}: its YAML aliases or nesting expand to more than {MAX_YAML_VALUES:,} values; "
                          "allowed: a scenario file of at most that many")
    return value


def parse_yaml(data: bytes | str, source: str) -> Any:
    """The one YAML reader for scenario text, from a file or an upload: data only (yaml.safe_load, no
    code), within MAX_SCENARIO_BYTES, and a syntax error is one line with its line number."""
    raw_bytes = data.encode() if isinstance(data, str) else data
    if len(raw_bytes) > MAX_SCENARIO_BYTES:
        raise ConfigError(f"{source}: {len(raw_bytes):,} bytes is larger than the limit of "
                          f"{MAX_SCENARIO_BYTES:,} bytes for a scenario file")
    return parse_yaml_bytes(raw_bytes, source)


def read_yaml(path: str | Path) -> Any:
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"scenario: '{path}' is a directory; allowed: a YAML file")
    if not p.is_file():
        raise ConfigError(f"scenario: file '{path}' not found")
    if p.stat().st_size > MAX_SCENARIO_BYTES:
        raise ConfigError(f"scenario: file '{path}' is larger than {MAX_SCENARIO_BYTES} bytes")
    try:
        data = p.read_bytes()
    except OSError as err:
        raise ConfigError(f"scenario: '{path}' cannot be read ({err.strerror or err})") from None
    return parse_yaml(data, f"scenario: '{path}'")


def anchor_paths(raw: Any, base_dir: Path) -> None:
    """Relative file values are relative to the scenario file, not the working folder: one list of the fields
    that name files, shared with the dashboard's confinement (sim.config.file_access.FILE_FIELDS)."""
    from sim.config.file_access import anchor_file_fields
    anchor_file_fields(raw, base_dir)


def load_scenario_set(path: str | Path, overrides: list[str] | None = None) -> ScenarioSet:
    raw = read_yaml(path)
    anchor_paths(raw, Path(path).resolve().parent)
    scenario_set = build_scenario_set(raw, str(path), overrides)
    return scenario_set
