"""A memory as a row of the SQLite store's ``memories`` table and back: the shared codec
(:mod:`recalld.stores.rows`), with lists and mappings kept as JSON text."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from recalld.records import Memory
from recalld.stores import rows as codec

COLUMNS = codec.COLUMNS
MARKS = ",".join("?" * len(COLUMNS.split(",")))
"""One ``?`` per column of :data:`COLUMNS`."""


@functools.lru_cache(maxsize=4096)
def _json_tuple(text: str) -> tuple[Any, ...]:
    """Tags and entities: immutable once parsed, so one parse serves every row that has
    the same list (many do: ``["user"]``, the same few entities)."""
    return () if text == "[]" else tuple(json.loads(text))


@functools.lru_cache(maxsize=4096)
def _flat_json(text: str) -> tuple[tuple[str, Any], ...] | None:
    """A metadata object's items when every value is a scalar (most rows: ``{"role":
    "user"}``), else None; cached, since a search decodes a hundred rows that share a few."""
    value = json.loads(text)
    flat = isinstance(value, dict) and all(
        v is None or isinstance(v, str | int | float | bool) for v in value.values()
    )
    return tuple(value.items()) if flat else None


def _metadata(text: str) -> dict[str, Any]:
    """A fresh dict each row (callers may change it); nested values parsed anew."""
    if text == "{}":
        return {}
    items = _flat_json(text)
    return dict(items) if items is not None else dict(json.loads(text))


VALUES = codec.Values(
    list_out=lambda items: json.dumps(list(items)),
    list_in=_json_tuple,
    mapping_out=lambda mapping: json.dumps(dict(mapping), ensure_ascii=False),
    mapping_in=_metadata,
)
"""Lists and mappings as JSON text (tags, entities, metadata)."""


def row(memory: Memory, namespace: str, position: int | None) -> tuple[Any, ...]:
    """The memory as the values of :data:`COLUMNS`."""
    return codec.encode(memory, namespace, position, VALUES)


def memory(r: Sequence[Any]) -> Memory:
    """The memory of a row of :data:`COLUMNS`."""
    return codec.decode(r, VALUES)
