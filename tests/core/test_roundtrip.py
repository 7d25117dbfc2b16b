"""Round trips through the facade on a real SQLite file: add, get, update, forget, reopen."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

import recalld
from recalld.config import Settings
from recalld.errors import InvalidInputError, NotFoundError
from recalld.providers.embedders import FakeEmbedder
from recalld.stores.rows import moment
from recalld.text import content_hash, normalize_content

# Printable text with some CJK, accents, emoji and control-free whitespace.
ALPHABET = st.characters(codec="utf-8", exclude_categories=("Cs", "Cc"), include_characters="\n\t ")
CONTENT = st.text(ALPHABET, min_size=1, max_size=200).filter(lambda s: normalize_content(s) != "")
TAG = st.text(st.characters(codec="ascii", categories=("L", "N")), min_size=1, max_size=12)
FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["insight", "event", "raw", "turn", "chunk"]),
        "tags": st.lists(TAG, max_size=4).map(tuple),
        "priority": st.floats(1.0, 2.0),
        "significance": st.floats(0.0, 1.0),
        "pinned": st.booleans(),
        "evergreen": st.booleans(),
        "project": st.none() | TAG,
        "session_id": st.none() | TAG,
        "event_time": st.none()
        | st.datetimes(datetime(1990, 1, 1), datetime(2090, 1, 1), timezones=st.just(UTC)),
        # NUL and lone surrogates are refused everywhere (tests/contract/test_nul.py and
        # add_unstorable below), so the model sends neither here.
        "metadata": st.dictionaries(
            TAG,
            st.integers()
            | st.text(
                st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=10
            ),
            max_size=3,
        ),
    },
)


def expected_fields(content: str, fields: dict[str, object]) -> dict[str, object]:
    tags = tuple(dict.fromkeys(fields.get("tags", ())))  # type: ignore[arg-type]
    return {
        "content": normalize_content(content),
        "content_hash": content_hash(content),
        "type": fields.get("type", "event"),
        "tags": tags,
        "priority": fields.get("priority", 1.0),
        "significance": fields.get("significance", 0.5),
        "pinned": fields.get("pinned", False),
        "evergreen": fields.get("evergreen", False),
        "project": fields.get("project"),
        "session_id": fields.get("session_id"),
        "event_time": fields.get("event_time"),
        "metadata": fields.get("metadata", {}),
    }


def assert_matches(memory: recalld.Memory, expected: dict[str, object]) -> None:
    actual = {name: getattr(memory, name) for name in expected}
    if actual["event_time"] is not None:
        # Stored as float seconds: microsecond rounding is the only allowed difference.
        assert abs(actual["event_time"] - expected["event_time"]).total_seconds() < 1e-5  # type: ignore[operator]
        actual["event_time"] = expected["event_time"]
    assert actual == expected


class MemoryModel(RuleBasedStateMachine):
    """The store against a dict: every operation's outcome is predicted by the model."""

    ids = Bundle("ids")

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.TemporaryDirectory()
        self.path = Path(self.folder.name) / "memory.db"
        self.engine = self._open()
        self.model: dict[str, dict[str, object]] = {}
        self.forgotten: set[str] = set()

    def _open(self) -> recalld.MemoryEngine:
        return recalld.open(
            settings=Settings(db=self.path, cache_dir=None), embedder=FakeEmbedder(dimension=32)
        )

    def _live_duplicate(self, content: str, fields: dict[str, object]) -> str | None:
        key = (content_hash(content), fields.get("project"), fields.get("session_id"))
        for memory_id, known in self.model.items():
            if memory_id in self.forgotten:
                continue
            if (known["content_hash"], known["project"], known["session_id"]) == key:
                return memory_id
        return None

    @rule(target=ids, content=CONTENT, fields=FIELDS)
    def add(self, content: str, fields: dict[str, object]) -> str:
        duplicate = self._live_duplicate(content, fields)
        result = self.engine.add(content, **fields)
        if duplicate is not None:
            # Never silently dropped: the result names the memory that already holds it.
            assert (result.created, result.duplicate_of) == (False, duplicate)
            return duplicate
        assert result.created and result.duplicate_of is None
        self.model[result.id] = expected_fields(content, fields)
        return result.id

    @rule(memory_id=ids, content=CONTENT, fields=FIELDS)
    def update(self, memory_id: str, content: str, fields: dict[str, object]) -> None:
        if memory_id not in self.model:
            with pytest.raises(NotFoundError):
                self.engine.update(memory_id, content=content, **fields)
            return
        before = self.engine.get(memory_id)
        updated = self.engine.update(memory_id, content=content, **fields)
        merged = {**self.model[memory_id], **expected_fields(content, fields)}
        for name in ("type", "priority", "significance", "pinned", "evergreen", "project",
                     "session_id", "event_time", "metadata", "tags"):  # fmt: skip
            if name not in fields:
                merged[name] = self.model[memory_id][name]
        self.model[memory_id] = merged
        assert_matches(updated, merged)
        assert updated.created_at == before.created_at
        assert (updated.forgotten_at is None) == (memory_id not in self.forgotten)

    @rule(memory_id=ids, hard=st.booleans())
    def forget(self, memory_id: str, hard: bool) -> None:
        if memory_id not in self.model:
            with pytest.raises(NotFoundError):
                self.engine.forget(memory_id, hard=hard)
            return
        changed = self.engine.forget(memory_id, hard=hard)
        assert changed == (1 if hard or memory_id not in self.forgotten else 0)
        if hard:
            del self.model[memory_id]
            self.forgotten.discard(memory_id)
        else:
            self.forgotten.add(memory_id)

    @rule(content=st.sampled_from(["", "   ", "\n\t ", "\u3000"]))
    def add_blank(self, content: str) -> None:
        with pytest.raises(InvalidInputError):
            self.engine.add(content)

    @rule(field=st.sampled_from(["metadata", "tags", "project", "session_id", "scope"]),
          bad=st.sampled_from(["\ud800", "ok \udfff", "\x00"]))  # fmt: skip
    def add_unstorable(self, field: str, bad: str) -> None:
        """Text no store can hold is refused with a message naming the field; nothing is
        stored (the model's next check would see it)."""
        value = {"metadata": {"note": bad}, "tags": [bad]}.get(field, bad)
        with pytest.raises(InvalidInputError, match=field):
            self.engine.add("a memory with one bad field", **{field: value})

    @rule()
    def reopen(self) -> None:
        self.engine.close()
        self.engine = self._open()

    @invariant()
    def store_matches_model(self) -> None:
        for memory_id, expected in self.model.items():
            memory = self.engine.get(memory_id)
            assert_matches(memory, expected)
            assert (memory.forgotten_at is not None) == (memory_id in self.forgotten)
        listed = self.engine.list(limit=1000, include_forgotten=True)
        assert {m.id for m in listed} == set(self.model)
        live = self.engine.list(limit=1000)
        assert {m.id for m in live} == set(self.model) - self.forgotten
        stats = self.engine.status().store
        assert stats.with_vectors == len(self.model)

    def teardown(self) -> None:
        self.engine.close()
        self.folder.cleanup()


TestMemoryModel = MemoryModel.TestCase
TestMemoryModel.settings = settings(
    max_examples=25,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_a_memory_read_back_is_whole_and_frozen(
    open_store: Callable[..., recalld.MemoryEngine],
) -> None:
    # The store builds memories without the dataclass __init__ (for speed): each field must
    # still be there, equal to what __init__ would make, and the instance must stay frozen.
    engine = open_store()
    added = engine.add(
        "Met Ana in Lisbon.", tags=("trip",), metadata={"k": 1}, session_id="s1",
        event_time=datetime(2024, 5, 1, tzinfo=UTC), pinned=True,
    )  # fmt: skip
    memory = engine.get(added.id)
    names = [f.name for f in dataclasses.fields(recalld.Memory)]
    assert set(vars(memory)) == set(names)
    rebuilt = recalld.Memory(**{name: getattr(memory, name) for name in names})
    assert rebuilt == memory
    assert (memory.tags, memory.metadata, memory.pinned) == (("trip",), {"k": 1}, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        memory.content = "changed"  # type: ignore[misc]
    assert set(vars(memory.source)) == {f.name for f in dataclasses.fields(recalld.Source)}
    with pytest.raises(dataclasses.FrozenInstanceError):
        memory.source.kind = "file"  # type: ignore[misc]


def test_decoded_times_are_utc_moments_shared_by_value() -> None:
    # The row decoder keeps decoded times by value: equal to fromtimestamp's, aware (UTC),
    # and one object for one value (datetimes are immutable, so sharing is safe).
    for value in (0.0, 1735603200.0, 1722886237.122767, -86400.5):
        assert moment(value) == datetime.fromtimestamp(value, UTC)
        assert moment(value).tzinfo is UTC
        assert moment(value) is moment(value)
