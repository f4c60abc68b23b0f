"""A named type as one JSON object and back: the one serialiser and parser of the wire's
messages (app/wire/events.py) and of a run's JSONL records (app/conversation/run_records.py).

A named type is a frozen dataclass with a `TYPE` class attribute: its object is
`{"type": TYPE, field: value, ...}` in the order the fields are declared. A field declared
with `omitted_when_none()` is left out while it is None (a record that only sometimes has
it). Reading ignores the fields a type does not know, so either side can grow a field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import MISSING, field, fields, is_dataclass
from typing import Any, ClassVar, Protocol, TypeVar

_OMITTED_WHEN_NONE = "omitted_when_none"


class Named(Protocol):
    TYPE: ClassVar[str]


N = TypeVar("N")


class NamedJsonError(ValueError):
    """An object of a known type that cannot be that type (a field it needs is missing)."""


def omitted_when_none() -> Any:
    """A field that is None by default and then not written."""
    return field(default=None, metadata={_OMITTED_WHEN_NONE: True})


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def to_json_object(message: Any) -> dict[str, Any]:
    """`message` (a named type) as its JSON object."""
    body: dict[str, Any] = {"type": message.TYPE}
    for f in fields(message):
        value = getattr(message, f.name)
        if value is None and f.metadata.get(_OMITTED_WHEN_NONE):
            continue
        body[f.name] = _plain(value)
    return body


def registry(types: Iterable[type[N]]) -> dict[str, type[N]]:
    """type name -> named type; a name given twice is a mistake in the vocabulary."""
    by_name: dict[str, type[N]] = {}
    for cls in types:
        name = cls.TYPE  # type: ignore[attr-defined]
        if name in by_name:
            raise ValueError(f"two types are named {name!r}: {by_name[name]} and {cls}")
        by_name[name] = cls
    return by_name


def from_json_object(obj: Mapping[str, Any], types: Mapping[str, type[N]]) -> N | None:
    """The named type of `obj` (None: its type is not in `types`); NamedJsonError when it
    lacks a field its type needs."""
    cls = types.get(str(obj.get("type", "")))
    if cls is None:
        return None
    declared = fields(cls)  # type: ignore[arg-type]
    known = {f.name for f in declared}
    missing = [f.name for f in declared if f.name not in obj
               and f.default is MISSING and f.default_factory is MISSING]
    if missing:
        raise NamedJsonError(f"a {cls.TYPE!r} object without {', '.join(missing)}")  # type: ignore[attr-defined]
    return cls(**{k: v for k, v in obj.items() if k in known})
