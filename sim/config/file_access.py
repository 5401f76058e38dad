"""Which files a scenario names, and which of them a front end lets it open.

Every scenario value the simulator opens as a file or folder is listed once, in FILE_FIELDS. Two front ends
treat them differently:

- The CLI runs on the user's machine and reads the user's files: `anchor_file_fields` makes a relative value
  relative to the scenario file (what `sim.config.files.anchor_paths` does).
- The dashboard is a server: a scenario uploaded to it must not reach the server's files. `confine_file_fields`
  replaces every file value by one of the files uploaded with the scenario (`resolve` names them), or refuses it
  with one line. Nothing else (an absolute path, `..`, `~`, `file://`, a symlink) can reach a file, because the
  value is never opened as it is written: it is only a key the uploads are looked up by.

Names that the calibrated cost model turns into folders under calibrate/profiles/ (`cost_model.profile_device`,
an inline GPU's or model's `name`) are not files, but a name like `../..` would walk out of that folder:
`confine_file_fields` accepts only plain names (`plain_name`) for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sim.atomic_files import plain_name
from sim.errors import ConfigError


@dataclass(frozen=True)
class FileField:
    """One file-valued key of a scenario section (the base, or a variant's override)."""

    keys: tuple[str, ...]  # from the section, e.g. ("workload", "arrival", "path")
    what: str  # for messages: "a trace file (CSV or JSONL)"
    anchor: Literal["if_exists", "always"]  # the CLI: relative values anchored when the file exists, or always
    uploadable: bool  # a single file the dashboard can take with a scenario (False: a folder)

    @property
    def name(self) -> str:
        return ".".join(self.keys)


FILE_FIELDS: tuple[FileField, ...] = (
    FileField(("workload", "arrival", "path"), "a trace file (CSV or JSONL)", "if_exists", True),
    FileField(("workload", "lengths", "path"), "a CSV or JSONL file of lengths", "if_exists", True),
    FileField(("cost_model", "profile"), "a calibrated profile folder", "if_exists", False),
    FileField(("model", "hf_config"), "a Hugging Face config.json", "always", True),
    FileField(("speculation", "draft_model", "hf_config"), "a Hugging Face config.json", "always", True),
)

# Names that become folder names under calibrate/profiles/ when cost_model.kind is calibrated.
PROFILE_NAME_FIELDS: tuple[tuple[str, ...], ...] = (
    ("cost_model", "profile_device"),
    ("hardware", "gpu", "name"),
    ("model", "name"),
)


@dataclass
class FileRef:
    """One file value found in a raw scenario mapping (before validation)."""

    field: str  # dotted, as errors name it: "variants.fast.workload.arrival.path"
    container: dict  # the mapping that holds it
    key: str
    spec: FileField

    @property
    def value(self) -> Any:
        return self.container[self.key]


def _sections(raw: dict) -> Iterator[tuple[str, dict]]:
    """The base ("") and each variant's override ("variants.NAME.")."""
    yield "", raw
    variants = raw.get("variants")
    if isinstance(variants, dict):
        for name, override in variants.items():
            if isinstance(override, dict):
                yield f"variants.{name}.", override


def _container(section: dict, keys: tuple[str, ...]) -> dict | None:
    node: Any = section
    for key in keys[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) and keys[-1] in node else None


def file_refs(raw: Any) -> list[FileRef]:
    """Every file value a raw scenario mapping holds, base and variants, in FILE_FIELDS order."""
    if not isinstance(raw, dict):
        return []
    refs = []
    for prefix, section in _sections(raw):
        for spec in FILE_FIELDS:
            holder = _container(section, spec.keys)
            if holder is not None and holder[spec.keys[-1]] is not None:
                refs.append(FileRef(prefix + spec.name, holder, spec.keys[-1], spec))
    return refs


def anchor_file_fields(raw: Any, base_dir: Path) -> None:
    """The CLI's rule, in place: a relative value is relative to the scenario file's folder (`base_dir`); trace,
    lengths and profile values only where that file exists (else the working folder's, as written), config.json
    values always (a missing one is then named where it was looked for)."""
    for ref in file_refs(raw):
        if not isinstance(ref.value, str):
            continue
        p = Path(ref.value).expanduser()
        if p.is_absolute():
            continue
        if ref.spec.anchor == "always" or (base_dir / p).exists():
            ref.container[ref.key] = str((base_dir / p).resolve())





def _uses_calibrated_profiles(raw: dict) -> bool:
    for _, section in _sections(raw):
        cost = section.get("cost_model")
        if isinstance(cost, dict) and cost.get("kind") == "calibrated":
            return True
    return False


def confine_file_fields(raw: Any, resolve: Callable[[str], Path | None], allowed: str) -> None:
    """In place: every file value becomes the file `resolve` gives for it, else one ConfigError line.

    `resolve(value)` returns the stored file the value names (a file uploaded with the scenario), or None.
    `allowed` ends the error line: what the value may be instead. A folder-valued field (a calibrated profile)
    cannot be uploaded, so any value there is refused. When a section uses the calibrated cost model, the names
    in PROFILE_NAME_FIELDS must be plain names."""
    for ref in file_refs(raw):
        value = ref.value
        shown = repr(value) if not isinstance(value, str) else f"'{value}'"
        if not ref.spec.uploadable:
            raise ConfigError(f"{ref.field}: {shown} is {ref.spec.what} on the server, which an uploaded scenario "
                              "cannot name; allowed: leave it out (the shipped profiles: profile_device, engine)")
        found = resolve(value) if isinstance(value, str) else None
        if found is None:
            raise ConfigError(f"{ref.field}: {shown} is not a file uploaded with this scenario, and an uploaded "
                              f"scenario opens no other file; allowed: the name of {ref.spec.what} uploaded "
                              f"with it ({allowed})")
        ref.container[ref.key] = str(found)
    if not isinstance(raw, dict) or not _uses_calibrated_profiles(raw):
        return
    for prefix, section in _sections(raw):
        for keys in PROFILE_NAME_FIELDS:
            holder = _container(section, keys)
            if holder is not None and holder[keys[-1]] is not None and not plain_name(holder[keys[-1]]):
                raise ConfigError(f"{prefix}{'.'.join(keys)}: {holder[keys[-1]]!r} names a folder of shipped "
                                  "profiles, so it must be a plain name; allowed: a name without '/', '\\' "
                                  "that is not '.' or '..'")
