"""Pydantic validation errors turned into one line in the words of the scenario file: field, value, what is allowed."""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ValidationError

from sim.config.schema import Scenario, annotation_members


@dataclass(frozen=True)
class _Where:
    """Where a pydantic error points, in the words of the scenario file."""

    path: str  # dotted keys the user wrote, e.g. "workload.arrival.rate_per_s" ("" for the top level)
    container: type[BaseModel] | None  # the model whose key is the path's last part
    kind: str | None  # the `kind` of the union member chosen on the way (e.g. "trace"), if any
    annotation: Any  # the declared type at the path (before any union member is chosen)
    ends_in_tag: bool  # the loc ends in a union-member tag: an "it is not this member" error


def _model_class(tp: Any) -> type[BaseModel] | None:
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


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
        cls = _model_class(member)
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
            cls = _model_class(member)
            if cls is not None and _kind_of(cls) is not None:
                kind = _kind_of(cls)
            continue
        parts.append(("." if parts else "") + item)
        models = [c for c in map(_model_class, members) if c is not None]
        container = next((c for c in models if item in c.model_fields), models[0] if models else None)
        field = container.model_fields.get(item) if container is not None else None
        tp = annotation = field.annotation if field is not None else Any
    return _Where("".join(parts), container, kind, annotation, tag_last)


# Errors that only say "the value is not this member of a str | Model union".
_UNION_NOISE = {"string_type", "model_type", "model_attributes_type", "dict_type", "is_instance_of"}

_EXPECTED = {  # pydantic error type -> what is allowed, in words
    "int_parsing": "an integer", "int_type": "an integer", "int_from_float": "an integer",
    "float_parsing": "a number", "float_type": "a number", "finite_number": "a finite number", "bool_parsing": "true or false",
    "bool_type": "true or false", "string_type": "a string", "list_type": "a list",
    "dict_type": "a mapping of keys", "model_type": "a mapping of keys",
    "model_attributes_type": "a mapping of keys",
}

_TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}

_BOUNDS = {"greater_than": ("gt", ">"), "greater_than_equal": ("ge", ">="),
           "less_than": ("lt", "<"), "less_than_equal": ("le", "<=")}


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _allowed(error: dict, where: _Where) -> str | None:
    """What the field accepts, from the error's context, or None when pydantic does not say."""
    etype, ctx = error["type"], error.get("ctx") or {}
    if etype in _BOUNDS:
        key, op = _BOUNDS[etype]
        return f"{op} {_number(ctx[key])}"
    if etype == "literal_error":
        return str(ctx.get("expected"))
    if etype in ("too_short", "too_long"):
        bound = ctx.get("min_length") if etype == "too_short" else ctx.get("max_length")
        return f"{'at least' if etype == 'too_short' else 'at most'} {bound} item(s)"
    if etype in _UNION_NOISE or etype in _EXPECTED:
        members = [m for m in annotation_members(where.annotation) if m is not type(None)]
        if len(members) > 1 and any(map(_model_class, members)):  # e.g. model: str | ModelSpec
            words = ["a catalog name" if m is str else f"an inline {m.__name__} mapping" if _model_class(m)
                     else _TYPE_WORDS.get(m, getattr(m, "__name__", str(m))) for m in members]
            return " or ".join(words)
        return _EXPECTED.get(etype)
    return None


def _shown(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # inf, -inf, nan (JSON would say Infinity)
    shown = json.dumps(value, default=str) if not isinstance(value, dict) else "{...}"
    return shown if len(shown) <= 60 else shown[:57] + "..."


def format_validation_error(err: ValidationError, prefix: str = "") -> str:
    """One line: field path, the value given, what is allowed."""
    errors = err.errors(include_url=False)
    located = [(e, _locate(e["loc"])) for e in errors]
    # Prefer an error on a field the user wrote over "not a string" noise from str | Model unions, and
    # an unknown key over a missing one (a misspelt key causes both).
    located.sort(key=lambda pair: (pair[0]["type"] in _UNION_NOISE and pair[1].ends_in_tag,
                                   pair[0]["type"] != "extra_forbidden"))
    first, where = located[0]
    rest = [(e, w) for e, w in located[1:] if not (e["type"] in _UNION_NOISE and w.ends_in_tag)]
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
            close = difflib.get_close_matches(key, allowed, n=1)
            line += (f" (did you mean {close[0]!r}?)" if close else "") + f"; allowed: {', '.join(allowed)}"
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
        tags = [k for k in (_kind_of(m) for m in annotation_members(where.annotation) if _model_class(m)) if k]
        allowed = ", ".join(tags) or str(ctx.get("expected_tags", ""))
        if etype == "union_tag_invalid":
            line = f"{field}.{discriminator}: {_shown(ctx.get('tag'))} is not allowed; allowed: {allowed}"
        else:
            line = f"{field}.{discriminator}: missing; allowed: {allowed}"
    elif etype in ("value_error", "assertion_error"):
        msg = first["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
        value = first.get("input")
        line = f"{field}: {msg}" if isinstance(value, dict) else f"{field}: {_shown(value)} is not allowed: {msg}"
    else:
        allowed = _allowed(first, where)
        shown = _shown(first.get("input"))
        line = (f"{field}: {shown} is not allowed{for_kind}; allowed: {allowed}" if allowed
                else f"{field}: {shown} is invalid: {first['msg']}")
    if rest:
        line += f" (and {len(rest)} more error{'s' if len(rest) > 1 else ''})"
    return line
