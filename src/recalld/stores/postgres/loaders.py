"""How the store's connections turn a column's bytes into Python values: pgvector's
adapters, with the two loaders a search runs most replaced by cheaper ones that give the
same values.

A small tenant's search reads about a hundred memory rows, each with a ``jsonb`` metadata
mapping, and a vector for each candidate; decoding them was a sizeable part of the search's
client CPU. A vector arrives as the ``float32`` array the store hands on (not pgvector's
``Vector`` object, which was then converted), and an empty mapping (most memories' metadata)
is recognised by its bytes instead of being parsed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector
from psycopg.abc import Buffer
from psycopg.adapt import Loader
from psycopg.pq import Format
from psycopg.types.json import JsonbBinaryLoader, JsonbLoader

VECTOR_HEADER = 4
"""pgvector's binary vector: its dimension and an unused field (two big-endian uint16),
then the floats."""
_BIG_ENDIAN_FLOAT32 = np.dtype(">f4")
_EMPTY_JSONB_BINARY = b"\x01{}"
"""An empty ``jsonb`` object in the binary format: the format's version byte, then the text."""
_EMPTY_JSON_TEXT = b"{}"


class VectorArrayLoader(Loader):
    """A ``vector`` in the text format as a native ``float32`` array."""

    format = Format.TEXT

    def load(self, data: Buffer) -> np.ndarray[Any, Any]:
        text = bytes(data).decode("utf8")
        return np.asarray(Vector.from_text(text).to_numpy(), dtype=np.float32)


class VectorArrayBinaryLoader(Loader):
    """A ``vector`` in the binary format as a native ``float32`` array, read straight from
    the bytes (the same floats pgvector's ``Vector.from_binary`` reads)."""

    format = Format.BINARY

    def load(self, data: Buffer) -> np.ndarray[Any, Any]:
        dim = int.from_bytes(data[:2], "big")
        floats = np.frombuffer(data, dtype=_BIG_ENDIAN_FLOAT32, count=dim, offset=VECTOR_HEADER)
        return floats.astype(np.float32)


class MappingLoader(JsonbLoader):
    """A ``jsonb`` in the text format; ``{}`` without the JSON parser (a fresh dict)."""

    def load(self, data: Buffer) -> Any:
        if len(data) == len(_EMPTY_JSON_TEXT) and bytes(data) == _EMPTY_JSON_TEXT:
            return {}
        return super().load(data)


class MappingBinaryLoader(JsonbBinaryLoader):
    """A ``jsonb`` in the binary format; ``{}`` without the JSON parser (a fresh dict)."""

    def load(self, data: Buffer) -> Any:
        if len(data) == len(_EMPTY_JSONB_BINARY) and bytes(data) == _EMPTY_JSONB_BINARY:
            return {}
        return super().load(data)


def register(conn: psycopg.Connection[Any]) -> None:
    """Register on ``conn`` pgvector's adapters (a vector or array sent as ``vector``), then the
    loaders above for ``vector`` and ``jsonb`` columns."""
    register_vector(conn)
    adapters = conn.adapters
    info = adapters.types.get("vector")  # registered by register_vector: no round trip
    if info is None:  # register_vector has already refused a database without pgvector
        raise psycopg.ProgrammingError("vector type not found in the database")
    adapters.register_loader(info.oid, VectorArrayLoader)
    adapters.register_loader(info.oid, VectorArrayBinaryLoader)
    adapters.register_loader("jsonb", MappingLoader)
    adapters.register_loader("jsonb", MappingBinaryLoader)
