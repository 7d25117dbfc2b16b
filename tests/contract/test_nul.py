"""A NUL character (U+0000) anywhere a caller gives text is one clear InvalidInputError on
both backends (PostgreSQL's text cannot hold it; SQLite would have stored it), and nothing
is written."""

from __future__ import annotations

from typing import Any

import pytest

from recalld import InvalidInputError
from recalld.records import NewMemory

from .conftest import Opener

NUL = "\x00"
ADDS: list[dict[str, Any]] = [
    {"content": f"before{NUL}after"},
    {"content": "fine", "scope": f"user{NUL}"},
    {"content": "fine", "id": f"id{NUL}1"},
    {"content": "fine", "project": f"atlas{NUL}"},
    {"content": "fine", "session_id": f"s{NUL}"},
    {"content": "fine", "tags": ("ok", f"t{NUL}")},
    {"content": "fine", "entities": (f"e{NUL}",)},
    {"content": "fine", "metadata": {"k": f"v{NUL}"}},
    {"content": "fine", "metadata": {f"k{NUL}": "v"}},
    {"content": "fine", "metadata": {"deep": [{"k": f"v{NUL}"}]}},
    {"content": "fine", "embed_context": f"ctx{NUL}"},
]


def _named(fields: dict[str, Any]) -> str:
    return next(k for k, v in fields.items() if "\\x00" in repr(v))


@pytest.mark.parametrize("fields", ADDS, ids=_named)
def test_a_nul_in_any_field_of_a_new_memory_is_refused(
    open_as: Opener, fields: dict[str, Any]
) -> None:
    engine = open_as("alice")
    engine.add("a memory that is already there")
    fields = dict(fields)  # the parameter is shared by both backends
    content = fields.pop("content")
    with pytest.raises(InvalidInputError, match="NUL"):
        engine.add_many([NewMemory(content, **fields)])
    assert engine.status().store.memories == 1


def test_reads_and_updates_with_a_nul_are_refused_alike(open_as: Opener) -> None:
    engine = open_as("alice")
    kept = engine.add("the harbour crane is serviced on Mondays")
    for call in (
        lambda: engine.search(f"crane{NUL}"),
        lambda: engine.search("crane", project=f"p{NUL}"),
        lambda: engine.search("crane", tags=[f"t{NUL}"]),
        lambda: engine.context(f"crane{NUL}"),
        lambda: engine.get(f"x{NUL}"),
        lambda: engine.forget([kept.id, f"x{NUL}"]),
        lambda: engine.update(kept.id, content=f"new{NUL}"),
        lambda: engine.update(f"x{NUL}", content="new"),
        lambda: engine.list(session_id=f"s{NUL}"),
    ):
        with pytest.raises(InvalidInputError, match="NUL"):
            call()
    assert engine.get(kept.id).content == "the harbour crane is serviced on Mondays"
    assert engine.get(kept.id).forgotten_at is None
