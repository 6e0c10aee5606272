"""The text grammar of fedcond's names, in one place: one `key=value` parser, one coercion.

Three shapes use it:
- a method with hyper-parameters, `NAME(key=value,...)`: `FedProx(mu=0.1)` (algorithms.names);
- a plug-in over a base, `BASE+PLUGIN(key=value,...)`: `SCAFFOLD+jdfl-random(M=3)` (algorithms.names);
- a protocol variant, `PRESET[key=value,...]`: `paper[lr=0.02,groups=0,1|2,3]` (experiments).
A value is read as the type the target dataclass declares for its field (`typing.get_type_hints`):
numbers must be numbers, flags true/false, None (`none`, `null`) only where the field allows it.
Every malformed name is one line of FedcondError.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from typing import Iterator

from .errors import FedcondError

CALL = re.compile(r"^\s*([\w-]+)\s*\((.*)\)\s*$")  # NAME(args)
COMPOSITE = re.compile(r"^\s*([\w-]+)\s*\+\s*([\w-]+)\s*(?:\((.*)\))?\s*$")  # BASE+PLUGIN or BASE+PLUGIN(args)
_NAMED = {"int": "a whole number", "float": "a number", "bool": "true or false", "str": "text"}


def split_list(spec: str) -> list[str]:
    """A comma list's items, stripped and non-empty, keeping commas inside parentheses."""
    out, depth, cur = [], 0, ""
    for ch in spec:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [m.strip() for m in out if m.strip()]


def key_values(args: str | None, runs_on: tuple[str, ...] = ()) -> Iterator[tuple[str, str, str]]:
    """(item, key, value) for each `key=value` of a comma list, stripped; empty items are skipped.
    The value of a key in `runs_on` may hold commas: it runs on up to the next item with an `=`
    (`groups=0,1|2,3,lr=0.02`). Any other item without `=` comes out with an empty value."""
    pending: list[str] | None = None  # the pieces of a `runs_on` value still open
    for piece in (args or "").split(","):
        if pending is not None and "=" not in piece:
            pending[1] += "," + piece
            continue
        if pending is not None:
            yield pending[0], pending[0].partition("=")[0].strip(), pending[1].strip()
            pending = None
        item = piece.strip()
        if not item:
            continue
        key, _, value = (t.strip() for t in item.partition("="))
        if key in runs_on:
            pending = [item, value]
            continue
        yield item, key, value
    if pending is not None:
        yield pending[0], pending[0].partition("=")[0].strip(), pending[1].strip()


@functools.cache
def field_types(cls: type) -> dict[str, object]:
    """The dataclass's fields and their declared types (resolved, not the annotation text)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def coerce(cls: type, key: str, text: str, label: str | None = None):
    """`text` as a value of `cls`'s field `key`, by the field's declared type; errors name the key as
    `label` (the name's own spelling, e.g. a plug-in's `M` for `slots`). A type that is not bool,
    int, float, str or None (a tuple, an object) gets the literal as read, and the class judges."""
    hint, label = field_types(cls)[key], label or key
    kinds = set(typing.get_args(hint)) if typing.get_origin(hint) in (typing.Union, types.UnionType) else {hint}
    lowered = text.lower()
    if lowered in ("none", "null"):
        if type(None) in kinds:
            return None
        raise FedcondError(f"{label} must not be None")
    if bool in kinds and lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        if kind in kinds:
            try:
                return kind(text)
            except ValueError:
                pass
    if str in kinds:
        return text
    basic = [k for k in (int, float, bool, str) if k in kinds]
    if not basic:
        return _literal(text)
    want = _NAMED["float" if float in kinds else basic[0].__name__]
    raise FedcondError(f"{label} must be {want}, got '{text}'")


def _literal(text: str):
    """A value whose type the grammar does not know: true/false, none, a number, else the text."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if text.lower() in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_variant(
    name: str, cls: type, options: tuple[str, ...], text_options: tuple[str, ...] = ()
) -> tuple[str, dict]:
    """`PRESET[key=value,...]` -> (preset, changes): keys in `options` read as `cls`'s fields, keys in
    `text_options` kept as text (they may hold commas). No brackets: (name, {})."""
    preset, _, rest = name.partition("[")
    changes: dict = {}
    if not rest:
        return preset, changes
    if not rest.endswith("]") or not re.match(r"^\w+=", rest):
        raise FedcondError(f"bad protocol name '{name}'")
    for item, key, value in key_values(rest[:-1], runs_on=text_options):
        if key in text_options:
            changes[key] = value
        elif key in options:
            try:
                changes[key] = coerce(cls, key, value)
            except FedcondError as e:
                raise FedcondError(f"bad protocol name '{name}': {e}") from None
        else:
            raise FedcondError(f"bad protocol name '{name}': unknown option '{key or item}'")
    return preset, changes
