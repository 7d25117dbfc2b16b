from __future__ import annotations

import gzip
import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

import recalld
from recalld.errors import InvalidInputError
from recalld.sources.datasets import parse_locomo_date, parse_longmemeval_date

FIXTURES = Path(__file__).parent.parent / "fixtures" / "sources"


def _turns(engine: recalld.MemoryEngine) -> list[recalld.Memory]:
    return engine.list(types=["turn"], limit=1000, newest_first=False)


def test_jsonl_transcript_turn_by_turn(eng: recalld.MemoryEngine) -> None:
    report = eng.import_transcript(FIXTURES / "transcript.jsonl", "jsonl-transcript")
    assert report.turns == 7 and report.stored == 7 and report.already_present == 0
    assert report.problems == (
        "line 4: not valid JSON (Expecting value at column 65)",
        "line 5: 'role' must be a non-empty string",
    )
    turns = _turns(eng)
    first = turns[0]
    # a generic role is metadata, not content (a named speaker is prefixed: LoCoMo)
    assert first.content == "I just adopted a cat named Miso."
    assert first.session_id == "s1" and first.type == "turn"
    assert first.event_time == datetime(2026, 2, 1, 9, 0, tzinfo=UTC)
    assert first.source.kind == "transcript" and first.source.line_start == 1
    assert first.metadata["role"] == "user" and first.metadata["turn"] == 0
    by_line = {m.source.line_start: m for m in turns}
    assert by_line[3].content == "Miso only eats salmon kibble."
    assert by_line[6].event_time == datetime.fromtimestamp(1772701200, UTC)
    assert by_line[6].session_id == "s2" and by_line[6].metadata["turn"] == 0
    # The same words twice in one session are two turns, both kept.
    assert [m.content for m in turns].count("ok") == 2


def test_reimport_adds_nothing(eng: recalld.MemoryEngine) -> None:
    for fmt, name in [("jsonl-transcript", "transcript.jsonl"),
                      ("claude-code", "claude_code_session.jsonl"),
                      ("longmemeval", "longmemeval_mini.json"),
                      ("locomo", "locomo_mini.json")]:  # fmt: skip
        first = eng.import_transcript(FIXTURES / name, fmt)
        count = len(_turns(eng))
        second = eng.import_transcript(FIXTURES / name, fmt)
        assert second.stored == 0 and second.already_present == first.stored > 0, fmt
        assert len(_turns(eng)) == count, fmt


def test_claude_code_session(eng: recalld.MemoryEngine) -> None:
    report = eng.import_transcript(FIXTURES / "claude_code_session.jsonl", "claude-code")
    assert report.problems == () and report.turns == 3
    assert report.skipped == 5  # summary, tool result, meta, snapshot, the tool-call line
    turns = _turns(eng)
    assert [m.metadata["role"] for m in turns] == ["user", "assistant", "assistant"]
    assert turns[0].session_id == "9b2f0c1e-4d1a-4c55-9a57-3f1e2d0c7a11"
    assert turns[0].source.ref == "9b2f0c1e-4d1a-4c55-9a57-3f1e2d0c7a11#u-1"
    assert turns[1].content == "I'll look at the upload fixture first."
    assert "Probably a race" not in " ".join(m.content for m in turns)  # thinking is dropped
    assert turns[2].event_time == datetime(2026, 5, 2, 14, 0, 20, tzinfo=UTC)
    hit = eng.search("shared temp folder between parallel workers", limit=1).hits[0]
    assert hit.memory.id == turns[2].id


def test_longmemeval_sessions_once_with_dates(eng: recalld.MemoryEngine) -> None:
    report = eng.import_transcript(FIXTURES / "longmemeval_mini.json", "longmemeval")
    assert report.turns == 5 and report.stored == 5
    assert report.problems == () and report.notes == (
        "record 2: session sess_c: date 'not a date' is not like '2023/05/30 (Tue) 23:40'; "
        "stored undated",
    )
    turns = _turns(eng)
    sessions = [m.session_id for m in turns]
    assert sessions.count("sess_b") == 2 and sessions.count("sess_a") == 2
    bike = next(m for m in turns if "teal bike" in m.content)
    assert bike.event_time == datetime(2023, 5, 30, 23, 40, tzinfo=UTC)
    assert "has_answer" not in bike.metadata  # benchmark labels are not stored
    assert bike.source.kind == "longmemeval"


def test_locomo_sessions_speakers_and_captions(eng: recalld.MemoryEngine) -> None:
    report = eng.import_transcript(FIXTURES / "locomo_mini.json", "locomo")
    assert report.turns == 3 and report.problems == ()
    turns = _turns(eng)
    assert turns[0].content == "Ana: I signed up for a marathon in October!"
    assert turns[0].session_id == "conv-x:session_1"
    assert turns[0].source.ref == "conv-x:session_1#D1:1"
    assert turns[0].event_time == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert turns[1].content.endswith("[shared an image: a photo of a wooden birdhouse]")
    assert turns[2].event_time == datetime(2023, 6, 27, 10, 37, tzinfo=UTC)


def test_gzip_and_stream_inputs(eng: recalld.MemoryEngine, tmp_path: Path) -> None:
    packed = tmp_path / "lme.json.gz"
    packed.write_bytes(gzip.compress((FIXTURES / "longmemeval_mini.json").read_bytes()))
    assert eng.import_transcript(packed, "longmemeval").stored == 5
    stream = io.BytesIO(b'{"role": "user", "content": "from a pipe"}\n')
    report = eng.import_transcript(stream, "jsonl-transcript")
    assert report.stored == 1 and report.undated == 1
    assert _turns(eng)[-1].session_id == "stdin"


def test_transcript_without_timestamps_is_imported_undated(
    eng: recalld.MemoryEngine, tmp_path: Path
) -> None:
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(json.dumps({"role": r, "content": c}) for r, c in
                              [("user", "hello"), ("assistant", "hi there")]))  # fmt: skip
    report = eng.import_transcript(path, "jsonl-transcript")
    assert report.stored == 2 and report.undated == 2 and report.problems == ()
    assert {m.session_id for m in _turns(eng)} == {"chat"}  # named after the file
    assert all(m.event_time is None for m in _turns(eng))


def test_unusable_inputs_change_nothing(eng: recalld.MemoryEngine, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"not json\n\xff\xfe\n[1, 2]\n")
    with pytest.raises(InvalidInputError, match=r"3 bad line\(s\) \(none of its") as caught:
        eng.import_transcript(bad, "jsonl-transcript")
    assert "line 1: not valid JSON" in str(caught.value)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(InvalidInputError, match="holds nothing in claude-code format"):
        eng.import_transcript(empty, "claude-code")
    with pytest.raises(InvalidInputError, match="cannot read"):
        eng.import_transcript(tmp_path / "missing.jsonl", "jsonl-transcript")
    with pytest.raises(InvalidInputError, match="not valid UTF-8"):
        eng.import_transcript(bad, "locomo")
    truncated = tmp_path / "truncated.json"
    truncated.write_text('[{"sample_id": "x", "conversation": {')
    with pytest.raises(InvalidInputError, match="not valid JSON"):
        eng.import_transcript(truncated, "locomo")
    with pytest.raises(InvalidInputError, match="unknown format"):
        eng.import_transcript(bad, "csv")
    assert _turns(eng) == []


def test_oversized_turn_is_reported_and_the_rest_imported(tmp_path: Path) -> None:
    from recalld.config import Settings
    from recalld.providers.embedders import FakeEmbedder

    settings = Settings(db=tmp_path / "s.db", cache_dir=None, max_content_chars=100)
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"role": "user", "content": "x" * 200}) + "\n"
                    + json.dumps({"role": "user", "content": "short"}) + "\n")  # fmt: skip
    with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
        report = engine.import_transcript(path, "jsonl-transcript")
        assert report.stored == 1
        assert report.problems[0].startswith("line 1: content has 200 characters")


def test_date_parsers() -> None:
    assert parse_longmemeval_date("2023/05/30 (Tue) 23:40") == datetime(2023, 5, 30, 23, 40,
                                                                        tzinfo=UTC)  # fmt: skip
    assert parse_locomo_date("10:37 am on 27 June, 2023") == datetime(2023, 6, 27, 10, 37,
                                                                      tzinfo=UTC)  # fmt: skip
