"""The one JSON shape of recalld's results, for every interface that speaks JSON.

The CLI's ``--json``, the HTTP API and the MCP server's structured results all come from
these functions, so the same search gives the same bytes whichever door it went through.
Records become objects with their dataclass field names, datetimes ISO 8601 strings, tuples
lists; nothing is renamed or dropped.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import fields, is_dataclass
from datetime import date, datetime
from pathlib import PurePath
from types import UnionType
from typing import TYPE_CHECKING, Any, TypeVar, Union, cast, get_args, get_origin, get_type_hints

from recalld.records import AddResult, Context, Hit, Memory, SearchResult

if TYPE_CHECKING:
    from recalld.engine import Status
    from recalld.sources.importer import ImportReport


_PLAIN = frozenset({str, int, float, bool, type(None)})
"""Types written as they are. Looked up by exact type first: a search's answer holds about
450 values, and most are of these (subclasses, such as numpy's float64, take the general
path below, which writes them the same)."""


def to_json(value: Any) -> Any:
    """``value`` as plain JSON data (dicts, lists, str, int, float, bool, None)."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    names = _field_names(kind)
    if names is not None:
        return {n: v if type(v := getattr(value, n)) in _PLAIN else to_json(v) for n in names}
    if kind is list or kind is tuple:
        return [v if type(v) in _PLAIN else to_json(v) for v in value]
    if kind is dict:
        return {str(k): v if type(v) in _PLAIN else to_json(v) for k, v in value.items()}
    return _other_json(value)


_FIELDS: dict[type, tuple[str, ...] | None] = {}
"""The fields instances of a type are written with, in order, read once per type; None for
a type that is not a dataclass (a dataclass *class*, whose type is ``type``, is not written
as one). Filled as types are met: the record types and the few others results hold."""


def _field_names(kind: type) -> tuple[str, ...] | None:
    if kind not in _FIELDS:
        _FIELDS[kind] = tuple(f.name for f in fields(kind)) if is_dataclass(kind) else None
    return _FIELDS[kind]


def _other_json(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item) and getattr(value, "ndim", None) == 0:
        return to_json(item())
    if isinstance(value, Sequence | set | frozenset) or hasattr(value, "tolist"):
        values = value.tolist() if hasattr(value, "tolist") else value
        return [to_json(v) for v in values]
    raise TypeError(f"cannot serialise {type(value).__name__} as JSON")


def memory_json(memory: Memory) -> dict[str, Any]:
    """A memory: every field of :class:`~recalld.records.Memory`."""
    result: dict[str, Any] = to_json(memory)
    return result


def memories_json(memories: Sequence[Memory]) -> list[dict[str, Any]]:
    return [memory_json(m) for m in memories]


def hit_json(hit: Hit) -> dict[str, Any]:
    """A hit: its memory, score, rank, trace (``null`` unless explained) and related."""
    result: dict[str, Any] = to_json(hit)
    return result


def search_json(result: SearchResult) -> dict[str, Any]:
    """A search result: query, hits (best first), mode, query type, time, details."""
    data: dict[str, Any] = to_json(result)
    return data


def context_json(context: Context) -> dict[str, Any]:
    """A context block: its text, the hits it holds, tokens used and the budget."""
    data: dict[str, Any] = to_json(context)
    return data


def add_results_json(results: Sequence[AddResult]) -> list[dict[str, Any]]:
    return [to_json(r) for r in results]


def status_json(status: Status) -> dict[str, Any]:
    data: dict[str, Any] = to_json(status)
    return data


def import_json(report: ImportReport) -> dict[str, Any]:
    data: dict[str, Any] = to_json(report)
    return data


Record = TypeVar("Record")


def from_json(kind: type[Record], data: Any) -> Record:
    """The record ``to_json`` made ``data`` from, rebuilt (datetimes, tuples and nested
    records included): how the shell reads a local server's answers as the records its
    output is printed from."""
    return cast(Record, _value(kind, data))


def _value(kind: Any, data: Any) -> Any:
    if data is None or kind is Any:
        return data
    if is_dataclass(kind) and isinstance(kind, type):
        hints = _hints(kind)
        return kind(
            **{f.name: _value(hints[f.name], data[f.name]) for f in fields(kind) if f.name in data}
        )
    origin, args = get_origin(kind), get_args(kind)
    if origin in (Union, UnionType):
        present = [a for a in args if a is not type(None)]
        return _value(present[0], data) if len(present) == 1 else data
    if kind is datetime:
        return datetime.fromisoformat(data)
    if origin is tuple:
        return tuple(_value(args[0], v) for v in data)
    if origin in (Mapping, dict):
        return {k: _value(args[1], v) for k, v in data.items()}
    return data


@functools.cache
def _hints(kind: type) -> dict[str, Any]:
    return get_type_hints(kind)
