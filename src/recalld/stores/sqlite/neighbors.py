"""Session neighbours in the SQLite store: the turns either side of given memories, read
around them rather than their sessions whole.

A memory's neighbours are the members of its session up to ``radius`` places either side in
storage order (``position``, then ``pk``; forgotten members skipped), as
:func:`~recalld.stores.base.neighbors_in_sessions` counts them from a session's rows. A
search asks for the neighbours of its top 20, and reading their sessions whole read every
turn of each (20 sessions of 20 turns: 400 rows for 40 neighbours, about 0.9 ms of a
search's CPU at 100k). Here each session is read between its first centre's position less
``radius`` and its last centre's plus ``radius`` (the ``(namespace, session_id,
position)`` index serves both bounds), which is the slice of the whole session the
neighbours lie in unless the positions leave holes: a forgotten member, a position given
twice or skipped, one without a position. So the read is checked against the session's
lowest and highest positions (forgotten members included, one index seek each) and whether
any member lacks a position; where the slice cannot be shown to hold every neighbour, that
session is read whole, as before. The answer is the same either way.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from recalld.stores.base import neighbors_in_sessions
from recalld.stores.sqlite import queries as q

IDS_PER_STATEMENT = 500
"""Centres looked up per statement (SQLite's bound parameters are limited)."""
SESSIONS_PER_STATEMENT = 200
"""Sessions per statement of the window and whole-session reads (4 parameters each)."""

Session = tuple[str, str]
"""A session as the store keys it: (namespace, session id)."""
Row = tuple[str, str, str]
"""A member of a session as :func:`neighbors_in_sessions` reads it: (id, namespace, session)."""


def session_neighbors(
    db: sqlite3.Connection, visible: Sequence[str], ids: Sequence[str], radius: int
) -> dict[str, list[tuple[str, int]]]:
    """:meth:`~recalld.stores.base.Store.session_neighbors` over ``db``, confined to the
    ``visible`` namespaces (the sessions of the memories the tenant sees)."""
    if not ids or radius < 1:
        return {}
    positions = _centres(db, visible, ids)
    spans: dict[Session, tuple[int, int]] = {}
    for session, found in positions.items():
        placed = [p for p in found if p is not None]
        if len(placed) == len(found):  # a centre without a position: the session whole
            spans[session] = (min(placed) - radius, max(placed) + radius)
    read = _windows(db, spans)
    wanted = set(ids)
    whole = sorted(
        session
        for session in positions
        if session not in spans or not _holds_neighbours(read, spans, session, wanted, radius)
    )
    whole_set = set(whole)
    rows = {s: members for s, (members, _) in read.items() if s not in whole_set}
    rows.update((s, members) for s, (members, _) in _whole_sessions(db, whole).items())
    return neighbors_in_sessions([r for s in sorted(rows) for r in rows[s]], ids, radius)


def _centres(
    db: sqlite3.Connection, visible: Sequence[str], ids: Sequence[str]
) -> dict[Session, list[int | None]]:
    """The sessions of the memories of ``ids`` and their positions there (memories without
    a session have no neighbours; forgotten ones count: they only widen a window)."""
    wall, wall_params = q.namespace_sql(visible)
    found: dict[Session, list[int | None]] = {}
    for start in range(0, len(ids), IDS_PER_STATEMENT):
        chunk = list(ids[start : start + IDS_PER_STATEMENT])
        marks = ",".join("?" * len(chunk))
        for namespace, session, position in db.execute(
            f"SELECT m.namespace, m.session_id, m.position FROM memories m"
            f" WHERE m.id IN ({marks}) AND {wall}",
            [*chunk, *wall_params],
        ):
            if session is not None:
                found.setdefault((namespace, session), []).append(position)
    return found


Read = dict[Session, tuple[list[Row], tuple[int | None, int | None, bool]]]
"""Per session: its members read (in storage order), and its lowest and highest position
and whether a member has none (None for a session read whole)."""


def _windows(db: sqlite3.Connection, spans: dict[Session, tuple[int, int]]) -> Read:
    """Each session's live members with a position in its span, and its bounds."""
    read: Read = {}
    keys = sorted(spans)
    for start in range(0, len(keys), SESSIONS_PER_STATEMENT):
        chunk = keys[start : start + SESSIONS_PER_STATEMENT]
        values = ",".join(["(?, ?, ?, ?)"] * len(chunk))
        params = [v for key in chunk for v in (*key, *spans[key])]
        spans_sql = f"WITH x(namespace, session_id, lo, hi) AS (VALUES {values})"
        members: dict[Session, list[Row]] = {key: [] for key in chunk}
        for memory_id, namespace, session in db.execute(
            spans_sql + " SELECT m.id, m.namespace, m.session_id FROM x CROSS JOIN memories m"
            " ON m.namespace = x.namespace AND m.session_id = x.session_id"
            " AND m.position BETWEEN x.lo AND x.hi"
            " WHERE m.forgotten_at IS NULL"
            " ORDER BY m.namespace, m.session_id, m.position, m.pk",
            params,
        ):
            members[(namespace, session)].append((memory_id, namespace, session))
        member = "b.namespace = x.namespace AND b.session_id = x.session_id"
        for namespace, session, low, high, unplaced in db.execute(
            spans_sql + " SELECT x.namespace, x.session_id,"
            f" (SELECT min(b.position) FROM memories b WHERE {member}),"
            f" (SELECT max(b.position) FROM memories b WHERE {member}),"
            f" EXISTS (SELECT 1 FROM memories b WHERE {member} AND b.position IS NULL)"
            " FROM x",
            params,
        ):
            key = (namespace, session)
            read[key] = (members[key], (low, high, bool(unplaced)))
    return read


def _holds_neighbours(
    read: Read,
    spans: dict[Session, tuple[int, int]],
    session: Session,
    wanted: set[str],
    radius: int,
) -> bool:
    """Whether the window read of ``session`` holds every neighbour of its centres: it is
    a run of the session's members in storage order, so it does unless a centre lies
    within ``radius`` of the run's end where the session goes on (a member placed beyond
    the span, or one without a position, which sorts before every other)."""
    members, (low, high, unplaced) = read[session]
    if unplaced:
        return False
    lo, hi = spans[session]
    first_whole = low is None or low >= lo  # no member placed before the span
    last_whole = high is None or high <= hi  # nor after it
    last = len(members) - 1
    return all(
        (first_whole or i >= radius) and (last_whole or last - i >= radius)
        for i, (memory_id, _, _) in enumerate(members)
        if memory_id in wanted
    )


def _whole_sessions(db: sqlite3.Connection, sessions: Sequence[Session]) -> Read:
    """Every live member of these sessions, in storage order (the ``(namespace,
    session_id, position)`` index serves each)."""
    read: Read = {}
    for start in range(0, len(sessions), SESSIONS_PER_STATEMENT):
        chunk = sessions[start : start + SESSIONS_PER_STATEMENT]
        values = ",".join(["(?, ?)"] * len(chunk))
        for memory_id, namespace, session in db.execute(
            f"WITH x(namespace, session_id) AS (VALUES {values})"
            " SELECT m.id, m.namespace, m.session_id FROM x CROSS JOIN memories m"
            " ON m.namespace = x.namespace AND m.session_id = x.session_id"
            " WHERE m.forgotten_at IS NULL"
            " ORDER BY m.namespace, m.session_id, m.position, m.pk",
            [v for pair in chunk for v in pair],
        ):
            key = (namespace, session)
            read.setdefault(key, ([], (None, None, False)))[0].append(
                (memory_id, namespace, session)
            )
    return read
