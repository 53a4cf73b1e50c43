"""Snapshots and verdicts as plain JSON lists, decoded by field *name* through a per-file schema.

A dataclass becomes the list of its field values (names are not repeated in every row, which
keeps frames small), and the file carries the field names each class had when it was written.
Decoding maps values by those names onto today's classes: a field added since (new fields come
last, with defaults) takes its default, a field removed since is skipped.  So snapshot fields
can grow without a format bump and without losing an old recording.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from typing import Any

from traintop.collectors.snapshot import Snapshot
from traintop.diagnosis.model import Verdict

Schema = dict[str, list[str]]
ROOTS: tuple[type, ...] = (Snapshot, Verdict)


def encode(obj: Any) -> Any:
    """``obj`` as JSON-ready lists: dataclasses by field order, tuples as lists.

    Every value is kept exactly (JSON writes a float's shortest round-trip form): rounding here,
    however fine, moves a value that sits next to a boundary a panel rounds at (850.04999 MB/s
    kept as 850.05 draws "850.1", where live drew "850.0"), so replay would disagree with live.
    Collectors round their derived readings where they make them
    (``traintop.collectors.rates.measured``), which keeps the noise digits out of the file as well.
    """
    if dataclasses.is_dataclass(obj):
        return [encode(getattr(obj, name)) for name in _names(type(obj))]
    if isinstance(obj, tuple | list):
        return [encode(item) for item in obj]
    return obj


@functools.cache
def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def field_names(cls: type) -> list[str]:
    """Today's field order of ``cls``: the positions ``encode`` writes."""
    return list(_names(cls))


def current_schema() -> Schema:
    """Field names of every dataclass reachable from the roots, as written into a new file."""
    found: dict[str, list[str]] = {}
    for root in ROOTS:
        _collect(root, found)
    return found


def _collect(cls: type, found: dict[str, list[str]]) -> None:
    if cls.__qualname__ in found:
        return
    found[cls.__qualname__] = list(_names(cls))
    for hint in typing.get_type_hints(cls).values():
        for inner in _dataclasses_in(hint):
            _collect(inner, found)


def _dataclasses_in(hint: Any) -> list[type]:
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return [hint]
    return [cls for arg in typing.get_args(hint) for cls in _dataclasses_in(arg)]


class Decoder:
    """Turns encoded lists back into dataclasses, reading field order from the file's schema."""

    def __init__(self, schema: Schema) -> None:
        self._schema = schema
        self._cache: dict[type, Callable[[list], Any]] = {}

    def names(self, cls: type) -> list[str]:
        """The field order ``cls`` had when the file was written."""
        return self._schema.get(cls.__qualname__, list(_names(cls)))

    def decode(self, cls: type, value: list) -> Any:
        return self._for_class(cls)(value)

    def _for_class(self, cls: type) -> Callable[[list], Any]:
        if cls not in self._cache:
            self._cache[cls] = self._build(cls)
        return self._cache[cls]

    def _build(self, cls: type) -> Callable[[list], Any]:
        """Pairs of (position in the file's row, converter) for the fields both sides know."""
        hints = typing.get_type_hints(cls)
        written = self.names(cls)
        plan = [(i, name, self._converter(hints[name])) for i, name in enumerate(written)
                if name in hints]  # fmt: skip

        def build(row: list) -> Any:
            return cls(**{name: conv(row[i]) for i, name, conv in plan if i < len(row)})

        return build

    def _converter(self, hint: Any) -> Callable[[Any], Any]:
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            return lambda value: self._for_class(hint)(value)
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (types.UnionType, typing.Union):
            inner = [self._converter(a) for a in args if a is not type(None)]
            return _optional(inner[0]) if len(inner) == 1 else _identity
        if origin is tuple:
            return self._tuple(args)
        return _identity

    def _tuple(self, args: tuple) -> Callable[[Any], Any]:
        if len(args) == 2 and args[1] is Ellipsis:
            item = self._converter(args[0])
            return lambda value: tuple(item(v) for v in value)
        convs = [self._converter(a) for a in args]
        return lambda value: tuple(c(v) for c, v in zip(convs, value, strict=False))


def _identity(value: Any) -> Any:
    return value


def _optional(conv: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else conv(value)
