"""Pydantic validation errors turned into one line in the words of the scenario file: field, value, what is allowed."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ValidationError

from sim.config.schema import Scenario
from sim.config.words import UNION_NOISE, allowed_words, annotation_members, model_class, shown
from sim.errors import did_you_mean


@dataclass(frozen=True)
class _Where:
    """Where a pydantic error points, in the words of the scenario file."""

    path: str  # dotted keys the user wrote, e.g. "workload.arrival.rate_per_s" ("" for the top level)
    container: type[BaseModel] | None  # the model whose key is the path's last part
    kind: str | None  # the `kind` of the union member chosen on the way (e.g. "trace"), if any
    annotation: Any  # the declared type at the path (before any union member is chosen)
    ends_in_tag: bool  # the loc ends in a union-member tag: an "it is not this member" error


def _kind_of(cls: type[BaseModel]) -> str | None:
    field = cls.model_fields.get("kind")
    if field is None or get_origin(field.annotation) is not Literal:
        return None
    return get_args(field.annotation)[0]


def _union_member(members: list, item: str) -> Any:
    """The member a pydantic loc tag names: "poisson", "str", "function-after[_check(), ModelSpec]"."""
    name = item
    if "[" in item and item.endswith("]"):
        name = item[item.index("[") + 1:-1].rsplit(",", 1)[-1].strip()
    for member in members:
        cls = model_class(member)
        if cls is not None and name in (cls.__name__, _kind_of(cls)):
            return member
        if isinstance(member, type) and name in (member.__name__, "none" if member is type(None) else None):
            return member
    return None


def _locate(loc: tuple) -> _Where:
    """Follow a pydantic loc through the Scenario model, dropping the union tags pydantic inserts."""
    parts: list[str] = []
    tp: Any = Scenario
    container, kind, annotation, tag_last = None, None, Scenario, False
    for item in loc:
        members = annotation_members(tp)
        tag_last = False
        if isinstance(item, int):
            parts.append(f"[{item}]")
            seq = next((m for m in members if get_origin(m) in (list, tuple)), None)
            tp = get_args(seq)[0] if seq is not None and get_args(seq) else Any
            annotation = tp
            continue
        item = str(item)
        member = _union_member(members, item) if len(members) > 1 else None
        if member is None and "[" in item:  # a validator wrapper around a single model
            member = _union_member(members, item) or tp
        if member is not None:
            tp, tag_last = member, True
            cls = model_class(member)
            if cls is not None and _kind_of(cls) is not None:
                kind = _kind_of(cls)
            continue
        parts.append(("." if parts else "") + item)
        models = [c for c in map(model_class, members) if c is not None]
        container = next((c for c in models if item in c.model_fields), models[0] if models else None)
        field = container.model_fields.get(item) if container is not None else None
        tp = annotation = field.annotation if field is not None else Any
    return _Where("".join(parts), container, kind, annotation, tag_last)


# Words other tools use for a key's part (vLLM's bench and genai-perf say "prompt", the scenario file "input").
_OTHER_WORDS = {"prompt": "input", "completion": "output", "generation": "output"}


def _meant(key: str, allowed: list[str], path: str) -> str | None:
    """The key a user most likely meant: `key` in the file's words, else the closest allowed spelling, else the same
    key in another top-level section ('run.num_requests' for 'workload.num_requests' or a top-level
    'num_requests'); None if none is near."""
    for word, ours in _OTHER_WORDS.items():
        if word in key and key.replace(word, ours) in allowed:
            return key.replace(word, ours)
    close = difflib.get_close_matches(key, allowed, n=1)
    if close:
        return close[0]
    section = path.split(".", 1)[0]
    for name, field in Scenario.model_fields.items():
        classes = [model_class(m) for m in annotation_members(field.annotation)]
        if name != section and any(c is not None and key in c.model_fields for c in classes):
            return f"{name}.{key}"
    return None


def format_validation_error(err: ValidationError, prefix: str = "") -> str:
    """One line: field path, the value given, what is allowed."""
    errors = err.errors(include_url=False)
    located = [(e, _locate(e["loc"])) for e in errors]
    # Prefer an error on a field the user wrote over "not a string" noise from str | Model unions, and
    # an unknown key over a missing one (a misspelt key causes both).
    located.sort(key=lambda pair: (pair[0]["type"] in UNION_NOISE and pair[1].ends_in_tag,
                                   pair[0]["type"] != "extra_forbidden"))
    first, where = located[0]
    rest = [(e, w) for e, w in located[1:] if not (e["type"] in UNION_NOISE and w.ends_in_tag)]
    field = prefix + where.path if where.path else (prefix.rstrip(".") or "(top level)")
    for_kind = f" for kind {where.kind!r}" if where.kind else ""
    etype = first["type"]

    if etype == "extra_forbidden":
        line = f"{field}: unknown key{for_kind}"
        if where.container is not None:
            allowed = list(where.container.model_fields)
            if where.container is Scenario and not prefix:
                allowed.append("variants")
            key = where.path.rsplit(".", 1)[-1]
            close = _meant(key, allowed, where.path)
            line += did_you_mean(*([close] if close else [])) + f"; allowed: {', '.join(allowed)}"
        else:
            line += " (check the spelling; `servesim schema` lists the allowed keys)"
    elif etype == "missing":
        parent = where.path.rsplit(".", 1)[0] if "." in where.path else ""
        siblings = [w for e, w in rest if e["type"] == "missing" and w.path.rsplit(".", 1)[0] == parent
                    and "." in w.path]
        if siblings and parent:
            names = [where.path.rsplit(".", 1)[-1]] + [w.path.rsplit(".", 1)[-1] for w in siblings]
            rest = [(e, w) for e, w in rest if not any(w is s for s in siblings)]
            line = f"{prefix}{parent}: missing required keys{for_kind}: {', '.join(names)}"
        else:
            line = f"{field}: missing{for_kind}; it is required"
    elif etype in ("union_tag_invalid", "union_tag_not_found"):
        ctx = first.get("ctx") or {}
        discriminator = str(ctx.get("discriminator", "kind")).strip("'")
        tags = [k for k in (_kind_of(m) for m in annotation_members(where.annotation) if model_class(m)) if k]
        allowed = ", ".join(tags) or str(ctx.get("expected_tags", ""))
        if etype == "union_tag_invalid":
            line = f"{field}.{discriminator}: {shown(ctx.get('tag'))} is not allowed; allowed: {allowed}"
        else:
            line = f"{field}.{discriminator}: missing; allowed: {allowed}"
    elif etype in ("value_error", "assertion_error"):
        msg = first["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
        value = first.get("input")
        line = f"{field}: {msg}" if isinstance(value, dict) else f"{field}: {shown(value)} is not allowed: {msg}"
    else:
        allowed = allowed_words(first, where.annotation)
        given = shown(first.get("input"))
        line = (f"{field}: {given} is not allowed{for_kind}; allowed: {allowed}" if allowed
                else f"{field}: {given} is invalid: {first['msg']}")
    if rest:
        line += f" (and {len(rest)} more error{'s' if len(rest) > 1 else ''})"
    return line
