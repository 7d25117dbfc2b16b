"""Rows in and out of the PostgreSQL store: the memory codec (lists as ``text[]``, mappings
as ``jsonb``), the ``recalld_meta`` facts, and the sorting of a search statement's rows
into :class:`~recalld.stores.base.SearchRows`."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from recalld.records import Memory, MemoryFilter
from recalld.stores import rows as codec
from recalld.stores.asks import NearestAsk
from recalld.stores.base import (
    CandidateRequest,
    ChannelCandidate,
    SearchRows,
    Vector,
    migration_key,
    near_ids,
)
from recalld.stores.postgres import queries as q

_VALUES = codec.Values(
    list_out=list,
    list_in=tuple,
    mapping_out=lambda mapping: Jsonb(dict(mapping)),
    mapping_in=dict,
)
"""Lists as ``text[]``, mappings as ``jsonb``."""


def row(memory: Memory, namespace: str, position: int | None) -> tuple[Any, ...]:
    return codec.encode(memory, namespace, position, _VALUES)


def memory(r: Sequence[Any]) -> Memory:
    return codec.decode(r, _VALUES)


def get_meta(conn: psycopg.Connection[Any], key: str) -> str | None:
    found = conn.execute("SELECT value FROM recalld_meta WHERE key = %s", (key,)).fetchone()
    return None if found is None else str(found[0])


def set_meta(conn: psycopg.Connection[Any], key: str, value: str) -> None:
    conn.execute(
        "INSERT INTO recalld_meta VALUES (%s, %s) ON CONFLICT (key) DO UPDATE"
        " SET value = excluded.value",
        (key, value),
    )


def unfinished_migration(conn: psycopg.Connection[Any], namespaces: Sequence[str]) -> bool:
    keys = [migration_key(n) for n in namespaces]
    found = conn.execute("SELECT 1 FROM recalld_meta WHERE key = ANY(%s)", (keys,)).fetchone()
    return found is not None


def live_rows_only(filters: MemoryFilter) -> bool:
    """Whether ``filters`` asks for no more than the live memories (a search's default):
    nothing narrows them but which of forgotten and superseded ones it includes."""
    return replace(filters, include_forgotten=False, include_superseded=True) == MemoryFilter()


def asked(request: CandidateRequest, answered: Collection[str] = q.READERS) -> list[str]:
    """The channels of ``request``'s asks that the store answers, in the request's order."""
    return [name for name in request.asks if name in answered]


def plain_vectors(requests: Sequence[CandidateRequest]) -> bool:
    """Whether ``requests`` read a vector channel, and each reads the live rows alone: no
    filter narrower than them (:func:`live_rows_only`), no time window (:mod:`.plans`)."""
    nearest = [
        (r.filters, a) for r in requests for a in r.asks.values() if isinstance(a, NearestAsk)
    ]
    return bool(nearest) and all(live_rows_only(f) and a.window is None for f, a in nearest)


def words_only(requests: Sequence[CandidateRequest]) -> bool:
    """Whether ``requests`` ask no vector channel (none answered by an approximate index)."""
    return not any(isinstance(ask, NearestAsk) for r in requests for ask in r.asks.values())


def channels(request: CandidateRequest) -> dict[str, list[ChannelCandidate]]:
    """The channels a request runs, empty: each is present in the answer even unmatched."""
    return {name: [] for name in asked(request)}


def search_rows(
    requests: Sequence[CandidateRequest],
    ran: Sequence[bool],
    rows: Sequence[Sequence[Any]],
    vectors: bool,
    radius: int,
    depth: int,
) -> SearchRows:
    """Sort the statement's ``hit`` / ``near`` / ``row`` / ``vec`` rows into
    :class:`SearchRows`."""
    sent = [i for i, r in enumerate(ran) if r]  # the statement numbers only requests with SQL
    found_channels = [channels(r) for r in requests]
    memories: dict[str, Memory] = {}
    found: dict[str, Vector] = {}
    neighbors: dict[str, list[tuple[str, int]]] = {}
    # Rows by index, not unpacked: ``*rest`` made a list of 34 values of each of ~170
    # ``hit`` rows a search, whose columns past the score are all NULL.
    for r in rows:
        kind = r[0]  # kind, req, channel, n, id, score, then the memory's row and vector
        if kind == "hit":
            found_channels[sent[r[1]]].setdefault(r[2], []).append(
                ChannelCandidate(r[4], r[3], float(r[5]))
            )
        elif kind == "near":
            neighbors.setdefault(r[2], []).append((r[4], int(r[3])))
        elif kind == "vec":  # a candidate's vector without its row
            found[r[4]] = r[-1]
        else:
            memories[r[4]] = memory(r[6:-1])
            if vectors and r[-1] is not None:
                found[r[4]] = r[-1]  # a float32 array (loaders)
    near = near_ids(found_channels[0], depth) if found_channels and radius > 0 else []
    for memory_id in near:  # in a session with no other live member: no neighbours
        kept = memories.get(memory_id)
        if kept is not None and kept.session_id is not None and kept.forgotten_at is None:
            neighbors.setdefault(memory_id, [])
    result = SearchRows(tuple(found_channels), memories, {}, neighbors, frozenset(near))
    wanted = result.candidate_ids  # a neighbour's vector came along in its row: not asked for
    return replace(result, vectors={i: v for i, v in found.items() if i in wanted})
