"""The request objects: one validation, one message, one method per operation."""

from __future__ import annotations

import json
from typing import Any

import pytest

import recalld
from recalld.errors import ConflictError, InvalidInputError, NotFoundError
from recalld.requests import (
    AddMemories,
    ContextQuery,
    ForgetMemories,
    GetMemory,
    ImportRequest,
    ListQuery,
    SearchQuery,
    UpdateMemory,
    parse,
)
from recalld.serialize import search_json, to_json


def message(call: Any) -> str:
    with pytest.raises(InvalidInputError) as caught:
        call()
    return str(caught.value)


@pytest.mark.parametrize(
    ("keywords", "body", "expected"),
    [
        ({"query": "  "}, {"query": "  "}, "the query is empty"),
        (
            {"query": "x", "mode": "fuzzy"},
            {"query": "x", "mode": "fuzzy"},
            "mode must be one of vector, hybrid, auto",
        ),
        (
            {"query": "x", "limit": 0},
            {"query": "x", "limit": 0},
            "limit must be between 1 and 1000",
        ),
        (
            {"query": "x", "types": ["opinion"]},
            {"query": "x", "filters": {"types": ["opinion"]}},
            "unknown type(s) opinion",
        ),
        (
            {"query": "x", "preset": "fastest"},
            {"query": "x", "preset": "fastest"},
            "unknown preset 'fastest'",
        ),
    ],
    ids=repr,
)
def test_the_library_and_a_request_body_get_the_same_message(
    fake_engine: recalld.MemoryEngine,
    keywords: dict[str, Any],
    body: dict[str, Any],
    expected: str,
) -> None:
    query = keywords.pop("query")
    from_library = message(lambda: fake_engine.search(query, **keywords))
    from_body = message(lambda: parse(SearchQuery, body))
    assert expected in from_library
    assert from_library.removeprefix("filters: ") == from_body.removeprefix("filters: ")


def test_unknown_fields_and_missing_ones_are_named() -> None:
    assert message(lambda: parse(SearchQuery, {"query": "x", "colour": 1})) == (
        "unknown field colour"
    )
    assert message(lambda: parse(SearchQuery, {})) == "query is required"
    assert "priority must be between 1.0 and 2.0" in message(
        lambda: parse(AddMemories, {"memories": [{"content": "x", "priority": 3}]})
    )
    assert message(lambda: parse(ImportRequest, {"format": "memories"})) == (
        "give either a path or the content to import, not both"
    )
    assert message(lambda: parse(AddMemories, {"memories": []})) == (
        "memories: needs at least one item"
    )


def test_every_operation_through_execute(fake_engine: recalld.MemoryEngine) -> None:
    added = fake_engine.execute(parse(AddMemories, {"memories": [
        {"content": "the deploy runs on Fridays", "tags": ["ops"], "id": "m1"},
        {"content": "Ana arrives on 14 March", "event_time": "2024-03-14"},
    ]}))  # fmt: skip
    assert [r.created for r in added] == [True, True]
    result = fake_engine.execute(
        parse(SearchQuery, {"query": "deploy", "limit": 2, "filters": {"tags": ["ops"]}})
    )
    assert [h.memory.id for h in result.hits] == ["m1"]
    assert fake_engine.search("deploy", limit=2, tags=["ops"]).hits[0].memory.id == "m1"
    listed = fake_engine.execute(parse(ListQuery, {"filters": {"tags": ["ops"]}}))
    assert [m.id for m in listed] == ["m1"]
    changed = fake_engine.execute(
        parse(UpdateMemory, {"id": "m1", "changes": {"tags": ["ops", "x"]}})
    )
    assert changed.tags == ("ops", "x") and changed.content == "the deploy runs on Fridays"
    assert fake_engine.execute(parse(GetMemory, {"id": "m1"})).tags == ("ops", "x")
    context = fake_engine.execute(parse(ContextQuery, {"query": "deploy", "max_tokens": 50}))
    assert context.tokens <= 50
    assert fake_engine.execute(parse(ForgetMemories, {"ids": ["m1"]})) == 1
    with pytest.raises(NotFoundError):
        fake_engine.execute(parse(ForgetMemories, {"ids": ["nope"]}))
    with pytest.raises(ConflictError):
        fake_engine.execute(parse(AddMemories, {"memories": [{"content": "other", "id": "m1"}]}))


def test_one_import_entry_point_for_every_format(fake_engine: recalld.MemoryEngine) -> None:
    lines = '{"content": "first"}\nnot json\n{"content": "second"}\n'
    report = fake_engine.run_import(parse(ImportRequest, {"content": lines}))
    assert (report.format, report.turns, report.stored, len(report.problems)) == (
        "memories",
        2,
        2,
        1,
    )
    transcript = "\n".join(
        json.dumps({"role": r, "content": c, "session_id": "s1"})
        for r, c in [("user", "hi there"), ("assistant", "hello")]
    )
    turns = fake_engine.run_import(
        parse(ImportRequest, {"format": "jsonl-transcript", "content": transcript})
    )
    assert (turns.format, turns.stored) == ("jsonl-transcript", 2)


def test_the_serializer_gives_plain_json(fake_engine: recalld.MemoryEngine) -> None:
    fake_engine.add("the deploy runs on Fridays")
    result = fake_engine.search("deploy", explain=True)
    data = search_json(result)
    assert json.loads(json.dumps(data)) == data
    hit = data["hits"][0]
    assert hit["memory"]["content"] == "the deploy runs on Fridays"
    assert isinstance(hit["memory"]["created_at"], str) and hit["trace"]["channels"]
    assert to_json(result) == data


def test_wrongly_typed_values_are_refused_not_crashed_on() -> None:
    """Found by schemathesis: a list as the preset used to raise TypeError (a 500)."""
    assert "unknown preset" in message(lambda: parse(SearchQuery, {"query": "x", "preset": []}))
    assert "mode must be one of" in message(
        lambda: parse(SearchQuery, {"query": "x", "mode": ["auto"]})
    )
    assert "type must be one of" in message(
        lambda: parse(AddMemories, {"memories": [{"content": "x", "type": {}}]})
    )


@pytest.mark.parametrize(
    "field",
    [
        "tags",
        "metadata",
        "pinned",
        "evergreen",
        "scope",
        "priority",
        "significance",
        "type",
        "content",
    ],
)
def test_a_null_for_a_field_that_always_has_a_value_is_refused(
    fake_engine: recalld.MemoryEngine, field: str
) -> None:
    """Found by a schemathesis run against a live server: PATCH {"tags": null} was a 500."""
    memory = fake_engine.get(fake_engine.add("keep me as I am", tags=["a"]).id)
    assert f"{field} cannot be null" in message(
        lambda: parse(UpdateMemory, {"id": memory.id, "changes": {field: None}})
    )
    message(lambda: fake_engine.update(memory.id, **{field: None}))
    assert fake_engine.get(memory.id) == memory
