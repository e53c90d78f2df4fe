"""Readable problems from a pydantic `ValidationError` of a spec: one line each, with a hint.

Each error becomes ``<key path>: <what is wrong>; <hint>``, the key path as the user
wrote it (``topology.paths[0].bw``, union tags dropped) and the hint built from the given
value::

    topology.paths[0].bw: "10 mbps" is not a rate; did you mean "10Mbit"?
    topology.paths[0].delya: unknown key; did you mean 'delay'?
    name: "my experiment" is not a valid name; did you mean "my-experiment"? (...)
"""

from __future__ import annotations

import difflib
import math
import re
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from testbed.spec.experiment import Experiment
from testbed.spec.model import (
    CC_RE,
    KEY_WORDS,
    PATH_RE,
    PATTERN_WORDS,
    WORKLOAD_KINDS,
    CustomTopology,
)
from testbed.spec.quantities import show_value


def data_path(loc: tuple[Any, ...] | list[Any], data: Any) -> list[str | int]:
    """The keys and indices of a pydantic error location inside data, union tags dropped.

    loc: the error's ``loc``; data: the input it refers to (to tell keys from tags).
    """
    out: list[str | int] = []
    node = data
    for n, part in enumerate(loc):
        last = n == len(loc) - 1
        if isinstance(part, int):
            out.append(part)
            node = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
            continue
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif not last and (node is None or isinstance(node, dict)):
            continue  # a union tag pydantic adds to the location, not a key
        else:
            node = None
        out.append(part)
    return out


def show_parts(parts: list[str | int]) -> str:
    """Keys and indices as the user writes them: ``["topology", "paths", 0]`` ->
    ``topology.paths[0]``."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def dotted(loc: tuple[Any, ...] | list[Any], data: Any) -> str:
    """Turn a pydantic error location into ``a.b[1].c``, dropping union tags.

    loc: the error's ``loc``; data: the input it refers to (to tell keys from tags).
    """
    return show_parts(data_path(loc, data))


def unknown_key_hint(loc: tuple[Any, ...] | list[Any], data: Any) -> str:
    """``did you mean 'delay'?`` (or the allowed keys) for an unknown key at loc.

    loc: the location of the unknown key (its last part); data: the validated input.
    """
    model = _model_at(data_path(loc, data)[:-1], data)
    if model is None:
        return "remove it"
    allowed = sorted([*model.model_fields, *getattr(model, "other_keys", ())])
    close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
    return f"did you mean {close[0]!r}?" if close else "allowed: " + ", ".join(allowed)


def _model_at(parts: list[str | int], data: Any) -> type[BaseModel] | None:
    """The spec model that validates the table at parts (keys/indices) of data."""
    tp: Any = Experiment
    node: Any = data
    for part in parts:
        tp = _resolve(tp, node)
        if isinstance(part, int):
            args = get_args(tp) if get_origin(tp) is list else ()
            if not args:
                return None
            tp = args[0]
            node = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
        elif isinstance(tp, type) and issubclass(tp, BaseModel) and part in tp.model_fields:
            tp = tp.model_fields[part].annotation
            node = node.get(part) if isinstance(node, dict) else None
        else:
            return None
    tp = _resolve(tp, node)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _resolve(tp: Any, node: Any) -> Any:
    """Strip Annotated and Optional; pick a union's member by the table's ``kind``."""
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    if get_origin(tp) in (Union, types.UnionType):
        members = [_resolve(m, node) for m in get_args(tp) if m is not type(None)]
        if len(members) == 1:
            return members[0]
        kind = node.get("kind") if isinstance(node, dict) else None
        for m in members:
            if isinstance(m, type) and issubclass(m, BaseModel) and "kind" in m.model_fields:
                ann = m.model_fields["kind"].annotation
                if get_origin(ann) is Literal and kind in get_args(ann):
                    return m
        if isinstance(kind, str) and ":" in kind:
            return CustomTopology
        return None
    return tp


_TYPE_WORDS = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number",
    "bool_type": "true or false", "bool_parsing": "true or false",
    "string_type": "a string", "list_type": "a list", "dict_type": "a table",
    "model_type": "a table", "model_attributes_type": "a table",
}


def validation_problems(exc: ValidationError, data: Any) -> list[str]:
    """One ``key path: what is wrong; hint`` line per error of a pydantic `ValidationError`.

    exc: the error; data: the dict that was validated. Duplicates are dropped.
    """
    out: list[str] = []
    for err in exc.errors(include_url=False):
        line = describe_error(err, data)
        if line not in out:
            out.append(line)
    return out


def describe_validation_error(exc: ValidationError, data: Any) -> str:
    """Every problem of a pydantic `ValidationError`, one line each (see `validation_problems`)."""
    return "\n".join(validation_problems(exc, data))


def suggest_name(value: Any, pattern: str) -> str | None:
    """value made to match pattern (spaces and other characters -> '-' or '_', lower case
    where required), or None when that does not work.  ``"my experiment"`` ->
    ``"my-experiment"``, path ``"WiFi"`` -> ``"wifi"``."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if pattern in (PATH_RE, CC_RE):
        text = re.sub(r"[^a-z0-9_]+", "_", text.lower())
    else:
        text = re.sub(r"[^A-Za-z0-9_-]+", "-", text)
    text = text.strip("-_")
    return text if text != value and re.fullmatch(pattern, text) else None


def _choice_hint(value: Any, expected: str) -> str:
    """``did you mean 'mptcp'?`` when value is close to one of the quoted choices, else
    ``use <expected>``."""
    choices = re.findall(r"'([^']*)'", expected)
    close = difflib.get_close_matches(value, choices, n=1) if isinstance(value, str) else []
    return f"did you mean {close[0]!r}?" if close else f"use {expected}"


def describe_error(err: Any, data: Any) -> str:
    """One line for one pydantic error (an item of ``exc.errors()``): key path and remedy.

    err: the error dict; data: the dict that was validated.
    """
    loc = list(err["loc"])
    etype = err["type"]
    ctx = err.get("ctx") or {}
    value = err.get("input")
    if etype == "extra_forbidden":
        return f"{dotted(loc, data)}: unknown key; {unknown_key_hint(loc, data)}"
    path = dotted(loc, data) or "(top level)"
    if etype == "missing":
        return f"{path}: missing; this key is required"
    if etype in ("union_tag_invalid", "union_tag_not_found", "unknown_kind"):
        expected = ctx.get("expected_tags") or ctx.get("expected") or WORKLOAD_KINDS
        kind = value.get("kind") if isinstance(value, dict) else None
        if path.endswith(".kind") or path == "kind":
            path = path.rsplit(".", 1)[0] if "." in path else ""
        prefix = f"{path}.kind" if path else "kind"
        if kind is None:
            return f"{prefix}: missing; use {expected}"
        return f"{prefix}: unknown kind {show_value(kind)}; {_choice_hint(kind, expected)}"
    if etype == "literal_error":
        return f"{path}: {show_value(value)} is not allowed; " \
               f"{_choice_hint(value, str(ctx.get('expected')))}"
    if etype == "string_pattern_mismatch":
        pattern = ctx.get("pattern", "")
        key = loc[-1] if loc else None
        form = KEY_WORDS[key] if pattern == CC_RE and key in KEY_WORDS else \
            PATTERN_WORDS.get(pattern, f"match {pattern}")
        guess = suggest_name(value, pattern)
        hint = f"did you mean {show_value(guess)}? ({form})" if guess else form
        return f"{path}: {show_value(value)} is not a valid name; {hint}"
    if etype in _TYPE_WORDS:
        line = f"{path}: {show_value(value)} is not {_TYPE_WORDS[etype]}"
        if etype == "string_type" and not isinstance(value, (dict, list)):
            line += f"; put it in quotes: \"{show_value(value)}\""  # TOML read a number/date
        return line
    if etype == "too_short":
        return f"{path}: needs at least {ctx.get('min_length')} entr" \
               f"{'y' if ctx.get('min_length') == 1 else 'ies'}"
    if etype == "too_long":
        return f"{path}: has more than the {ctx.get('max_length')} entries allowed"
    msg = err["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    if msg.startswith("Input should be"):
        msg = f"{show_value(value)} must be" + msg[len("Input should be"):]
    if etype == "finite_number" and isinstance(value, float) and math.isinf(value):
        # TOML reads 1e400 as infinity: the user never wrote "inf"
        msg += " (a number beyond 1.8e308, such as 1e400, reads as infinity)"
    return f"{path}: {msg}"

