"""A new channel is its module's :class:`Channel` in the registry and one reader per
backend, nothing else: a toy channel added that way is asked, answered and fused.

The toy finds memories holding the query's text anywhere inside a word (``plug`` in
``xyzzyplugh``), which neither the word channel (whole tokens) nor the fake embedder (whole
words) can; it feeds the word list, filling in what the word channels did not find."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from recalld.retrieval import channels
from recalld.retrieval.channels.base import Channel, Need, as_found
from recalld.stores.asks import Ask, ChannelCandidate, ranked
from recalld.stores.postgres import queries as pg_queries
from recalld.stores.sqlite import readers as sqlite_readers
from recalld.stores.sqlite.readers import Scope

from .conftest import Opener


@dataclass(frozen=True)
class InsideAsk(Ask):
    """Memories whose content holds ``text`` anywhere."""

    text: str


def _ask(need: Need) -> InsideAsk | None:
    limit = need.limit("bm25")
    return InsideAsk(limit, need.text) if limit and need.text else None


TOY = Channel("inside", _ask, "bm25", as_found, merge="fill")


def _sqlite_inside(ask: InsideAsk, scope: Scope) -> list[ChannelCandidate]:
    rows = scope.db.execute(
        f"SELECT m.id FROM memories m WHERE instr(lower(m.content), lower(?)) > 0 AND "
        f"{scope.where} ORDER BY m.id LIMIT ?",
        [ask.text, *scope.params, ask.limit],
    )
    return ranked((memory_id, 0.5) for (memory_id,) in rows)


def _postgres_inside(ask: InsideAsk, where: str) -> tuple[str, dict[str, Any]]:
    sql = ("inside AS (SELECT m.id, 0.5::float8 AS score, m.ref_time, m.pk FROM memories m"
           f" WHERE strpos(lower(m.content), lower(%(inside_text)s)) > 0 AND {where}"
           " ORDER BY m.id LIMIT %(inside_limit)s)")  # fmt: skip
    return sql, {"inside_text": ask.text, "inside_limit": ask.limit}


@pytest.fixture
def toy_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The toy's three registrations: the channel, the SQLite reader, the PostgreSQL one."""
    monkeypatch.setattr(channels, "CHANNELS", (*channels.CHANNELS, TOY))
    monkeypatch.setattr(channels, "BY_NAME", {**channels.BY_NAME, TOY.name: TOY})
    monkeypatch.setitem(sqlite_readers.READERS, TOY.name, _sqlite_inside)
    monkeypatch.setitem(pg_queries.READERS, TOY.name, _postgres_inside)
    monkeypatch.setitem(pg_queries.TIES, TOY.name, "id")
    monkeypatch.setitem(pg_queries.LIMITS, TOY.name, "inside_limit")


@pytest.mark.usefixtures("toy_registered")
def test_a_channel_added_through_the_registry_is_asked_answered_and_fused(
    open_as: Opener,
) -> None:
    engine = open_as()
    assert TOY.name in engine.store.channels
    wanted = engine.add("the password is xyzzyplugh, written nowhere else").id
    for n in range(5):
        engine.add(f"an unrelated note number {n} about the garden")
    asked = channels.request(Need({"bm25": 10}, ("plug",), "plug"))
    assert asked.asks[TOY.name] == InsideAsk(10, "plug")
    found = engine.store.candidates(asked)
    assert [c.memory_id for c in found[TOY.name]] == [wanted]
    assert found["bm25"] == []  # no whole token "plug": only the toy finds it
    result = engine.search("plug", explain=True)
    hit = next(h for h in result.hits if h.memory.id == wanted)
    assert hit.rank == 1
    assert hit.trace is not None
    assert "bm25" in {c.channel for c in hit.trace.channels}
