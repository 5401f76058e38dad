"""How a scenario's values and what a field allows are put in words, below the schema and its error messages (both
use it): a type's members, an error's "allowed" part, a value as the user wrote it."""

from __future__ import annotations

import json
import math
import types
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel


def annotation_members(annotation: Any) -> list:
    """The alternatives of an annotation: Optional, Union and Annotated unwrapped."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return annotation_members(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return [m for arg in get_args(annotation) for m in annotation_members(arg)]
    return [annotation]


def model_class(tp: Any) -> type[BaseModel] | None:
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


# Errors that only say "the value is not this member of a str | Model union".
UNION_NOISE = {"string_type", "model_type", "model_attributes_type", "dict_type", "is_instance_of"}

_EXPECTED = {  # pydantic error type -> what is allowed, in words
    "int_parsing": "an integer", "int_type": "an integer", "int_from_float": "an integer",
    "float_parsing": "a number", "float_type": "a number", "finite_number": "a finite number",
    "bool_parsing": "true or false", "bool_type": "true or false", "string_type": "a string", "list_type": "a list",
    "dict_type": "a mapping of keys", "model_type": "a mapping of keys",
    "model_attributes_type": "a mapping of keys",
}

_TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string", dict: "a mapping",
               list: "a list of integers"}

_BOUNDS = {"greater_than": ("gt", ">"), "greater_than_equal": ("ge", ">="),
           "less_than": ("lt", "<"), "less_than_equal": ("le", "<=")}


def type_words(kinds: tuple) -> str:
    """Values of these Python types, in words: "an integer or a number"."""
    return " or ".join(_TYPE_WORDS.get(k, f"a {k.__name__}") for k in kinds)


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def allowed_words(error: dict, annotation: Any) -> str | None:
    """What a field declared as `annotation` accepts, from a pydantic error's context, or None when it does not
    say."""
    etype, ctx = error["type"], error.get("ctx") or {}
    if etype in _BOUNDS:
        key, op = _BOUNDS[etype]
        return f"{op} {_number(ctx[key])}"
    if etype == "literal_error":
        return str(ctx.get("expected"))
    if etype in ("too_short", "too_long"):
        bound = ctx.get("min_length") if etype == "too_short" else ctx.get("max_length")
        return f"{'at least' if etype == 'too_short' else 'at most'} {bound} item(s)"
    if etype in UNION_NOISE or etype in _EXPECTED:
        members = [m for m in annotation_members(annotation) if m is not type(None)]
        if len(members) > 1 and any(map(model_class, members)):  # e.g. model: str | ModelSpec
            return union_words(members)
        return _EXPECTED.get(etype)
    return None


def union_words(members: Any) -> str:
    """What a field that takes a catalog name or an inline mapping accepts, e.g. `str | GPUSpec`: "a catalog name
    or an inline GPUSpec mapping"."""
    return " or ".join("a catalog name" if m is str else f"an inline {m.__name__} mapping" if model_class(m)
                       else _TYPE_WORDS.get(m, getattr(m, "__name__", str(m))) for m in members)


def shown(value: Any) -> str:
    """A value as the scenario file would show it, at most 60 characters."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # inf, -inf, nan (JSON would say Infinity)
    text = json.dumps(value, default=str) if not isinstance(value, dict) else "{...}"
    return text if len(text) <= 60 else text[:57] + "..."
