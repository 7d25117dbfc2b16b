"""Loaders: the official schemas, LoCoMo's known defects, and clear errors on bad input."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

import recalld
from recalld.bench.cases import Case, read_json
from recalld.bench.locomo import (
    load_locomo,
    locomo_case,
    normalize_dia_id,
    parse_date as locomo_date,
    parse_evidence,
)
from recalld.bench.longmemeval import (
    load_longmemeval,
    longmemeval_case,
    parse_date as lme_date,
    select_questions,
)
from recalld.errors import InvalidInputError
from recalld.providers.embedders import FakeEmbedder
from recalld.records import Memory, NewMemory
from recalld.sources.transcripts import REPLY_CONTEXT

FIXTURES = Path(__file__).parent.parent / "fixtures"
LME = FIXTURES / "longmemeval_tiny.json"
LOCOMO = FIXTURES / "locomo_tiny.json"


# -- LoCoMo ids and dates ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("D1:3", "D1:3"), (" D1:3 ", "D1:3"), ("D:11:26", "D11:26"), ("D30:05", "D30:5"),
     ("D", None), ("X1:2", None), ("D1", None), ("", None)],
)  # fmt: skip
def test_normalize_dia_id(raw: str, expected: str | None) -> None:
    assert normalize_dia_id(raw) == expected


def test_parse_evidence_splits_repairs_and_drops_unknown_ids() -> None:
    known = {"D8:6", "D9:17", "D9:1", "D4:4", "D4:6", "D11:26", "D30:5"}
    found, unknown = parse_evidence(
        ["D8:6; D9:17", "D9:1 D4:4 D4:6", "D:11:26", "D30:05", "D10:19", "D", "D8:6"], known
    )
    assert found == ["D8:6", "D9:17", "D9:1", "D4:4", "D4:6", "D11:26", "D30:5"]
    assert unknown == ["D10:19", "D"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
     ("12:06 am on 11 November, 2022", datetime(2022, 11, 11, 0, 6, tzinfo=UTC)),
     ("12:30 pm on 1 January 2024", datetime(2024, 1, 1, 12, 30, tzinfo=UTC))],
)  # fmt: skip
def test_locomo_dates(text: str, expected: datetime) -> None:
    assert locomo_date(text) == expected


@pytest.mark.parametrize(
    "text", ["8 May 2023", "13:10 pm on 8 May, 2023", "1:00 pm on 8 Mai, 2023"]
)
def test_bad_locomo_dates_are_refused(text: str) -> None:
    with pytest.raises(InvalidInputError):
        locomo_date(text)


# -- LoCoMo file ------------------------------------------------------------------------------


def test_locomo_fixture_survives_every_defect() -> None:
    [conversation] = load_locomo(LOCOMO)
    # session_3_date_time has no session: only the two sessions are read
    assert [s.number for s in conversation.sessions] == [1, 2]
    assert conversation.last_date == datetime(2023, 4, 20, 16, 30, tzinfo=UTC)
    assert conversation.sessions[0].turns[2].text == "Here is my first bowl."
    by_question = {q.question: q for q in conversation.questions}
    assert by_question["When did Ben run the marathon?"].evidence == ("D1:2", "D2:1")
    clara = by_question["Where does Clara live and who is her brother?"]
    assert clara.evidence == ("D2:3",)  # "D:2:3" and "D2:03" are the same turn
    assert clara.unknown_evidence == ("D9:9",)
    assert by_question["What hobby does Ana have?"].evidence == ()
    adversarial = by_question["What did Ben glaze?"]
    assert adversarial.answer is None and adversarial.category == 5


def test_locomo_case_memories_and_probes() -> None:
    [conversation] = load_locomo(LOCOMO)
    case = locomo_case(conversation)
    assert len(case.docs) == 6 and case.skipped_turns == 0
    first = case.docs[0].memory
    assert first.content == "Ana: Ben, I finally started pottery classes on Tuesdays!"
    assert first.event_time == datetime(2023, 3, 3, 9, 5, tzinfo=UTC)
    assert first.session_id == "conv-tiny:session_1" and first.metadata["role"] == "Ana"
    image = case.docs[2].memory
    assert image.content.endswith("[shared an image: a photo of a lopsided blue ceramic bowl]")
    by_ref = {d.memory.source.ref: d.memory.id for d in case.docs}
    # categories 1-4 by default: the adversarial question is left out
    assert len(case.probes) == 4
    assert all(p.as_of == conversation.last_date for p in case.probes)
    marathon = case.probes[1]
    assert marathon.gold_docs == {by_ref["conv-tiny:session_1#D1:2"],
                                  by_ref["conv-tiny:session_2#D2:1"]}  # fmt: skip
    assert marathon.gold_sessions == {"conv-tiny:session_1", "conv-tiny:session_2"}
    assert marathon.group == "2 temporal"
    assert case.probes[3].gold_docs == frozenset()
    assert len(locomo_case(conversation, (1, 2, 3, 4, 5)).probes) == 5


def _imported(path: Path, fmt: str, tmp_path: Path) -> list[Memory]:
    """What ``recalld import`` stores for a file, through the engine's public method."""
    with recalld.open(tmp_path / f"{fmt}.db", embedder=FakeEmbedder()) as engine:
        engine.import_transcript(path, fmt)
        return engine.list(limit=1000, newest_first=False)


def _stored(memory: NewMemory | Memory) -> tuple[object, ...]:
    return (memory.id, memory.content, memory.type, memory.event_time, memory.session_id,
            dict(memory.metadata), memory.embed_context)  # fmt: skip


def test_locomo_case_stores_what_recalld_import_stores(tmp_path: Path) -> None:
    [conversation] = load_locomo(LOCOMO)
    case = locomo_case(conversation)
    imported = _imported(LOCOMO, "locomo", tmp_path)
    assert sorted(map(_stored, imported), key=str) == sorted(
        (_stored(d.memory) for d in case.docs), key=str)  # fmt: skip


def test_longmemeval_case_stores_what_recalld_import_stores(tmp_path: Path) -> None:
    question = load_longmemeval(LME)[0]
    single = tmp_path / "one.json"
    single.write_text(json.dumps([question.record]), encoding="utf-8")
    imported = _imported(single, "longmemeval", tmp_path)
    case = longmemeval_case(question)
    assert sorted(map(_stored, imported), key=str) == sorted(
        (_stored(d.memory) for d in case.docs), key=str)  # fmt: skip
    # a short reply is embedded with the end of the turn it answers, as imported
    assert any(m.embed_context for m in imported) == REPLY_CONTEXT


def test_locomo_bad_files(tmp_path: Path) -> None:
    not_a_list = tmp_path / "x.json"
    not_a_list.write_text('{"sample_id": 1}')
    with pytest.raises(InvalidInputError, match="JSON array"):
        load_locomo(not_a_list)
    missing = tmp_path / "y.json"
    missing.write_text('[{"sample_id": "c1", "qa": []}]')
    with pytest.raises(InvalidInputError, match="'conversation' is missing"):
        load_locomo(missing)


# -- LongMemEval ------------------------------------------------------------------------------


def test_lme_dates() -> None:
    assert lme_date("2023/05/30 (Tue) 23:40") == datetime(2023, 5, 30, 23, 40, tzinfo=UTC)
    assert lme_date("2023/05/30 23:40") == datetime(2023, 5, 30, 23, 40, tzinfo=UTC)
    for bad in ("30/05/2023 23:40", "2023/02/30 (Thu) 10:00"):
        with pytest.raises(InvalidInputError):
            lme_date(bad)


def test_lme_fixture_loads_and_selects() -> None:
    questions = load_longmemeval(LME)
    assert [q.question_id for q in questions] == ["q_iguana", "q_bike", "q_bike_abs"]
    assert [q.abstention for q in questions] == [False, False, True]
    assert questions[1].answer == "65"
    assert [q.question_id for q in select_questions(questions)] == ["q_iguana", "q_bike"]
    assert len(select_questions(questions, include_abstention=True)) == 3
    assert [q.question_id for q in select_questions(questions, limit=1)] == ["q_iguana"]
    only = select_questions(questions, question_ids=["q_bike_abs"], include_abstention=True)
    assert [q.question_id for q in only] == ["q_bike_abs"]
    with pytest.raises(InvalidInputError, match="no question with id nope"):
        select_questions(questions, question_ids=["nope"])


def _by_text(case: Case, start: str) -> NewMemory:
    return next(d.memory for d in case.docs if d.memory.content.startswith(start))


def test_lme_case_turns() -> None:
    question = load_longmemeval(LME)[0]
    case = longmemeval_case(question)
    assert len(case.docs) == 8
    assert case.case_id == "q_iguana"
    gold = _by_text(case, "I just adopted a green iguana")
    assert gold.session_id == "answer_pets"
    assert gold.event_time == datetime(2023, 5, 10, 18, 30, tzinfo=UTC)
    assert gold.metadata["role"] == "user" and gold.type == "turn"
    [probe] = case.probes
    assert probe.gold_docs == {gold.id} and probe.gold_sessions == {"answer_pets"}
    assert probe.as_of == datetime(2023, 6, 1, 10, 0, tzinfo=UTC)
    assert case.session_sizes() == {"chat_cooking": 2, "answer_pets": 4, "chat_travel": 2}


def test_lme_case_stores_a_repeated_session_once_and_skips_empty_turns(tmp_path: Path) -> None:
    record = json.loads(LME.read_text())[0]
    record["haystack_session_ids"].append("chat_travel")
    record["haystack_dates"].append("2023/05/25 (Thu) 10:00")
    record["haystack_sessions"].append(record["haystack_sessions"][2])
    record["haystack_session_ids"].append("chat_new")
    record["haystack_dates"].append("2023/05/26 (Fri) 10:00")
    record["haystack_sessions"].append(
        [{"role": "user", "content": "A new chat about knitting."},
         {"role": "assistant", "content": "   "}]
    )  # fmt: skip
    path = tmp_path / "lme.json.gz"
    path.write_bytes(gzip.compress(json.dumps([record]).encode()))
    case = longmemeval_case(load_longmemeval(path)[0])
    # as `recalld import` does: the second copy of chat_travel is the same session
    assert len(case.docs) == 9 and case.skipped_turns == 1
    assert case.docs[-1].session == "chat_new"
    assert case.session_sizes()["chat_travel"] == 2


def test_lme_session_granularity() -> None:
    question = load_longmemeval(LME)[1]
    case = longmemeval_case(question, "session")
    sessions = ["answer_ride_1", "chat_books", "answer_ride_2", "chat_garden"]
    assert [d.memory.id for d in case.docs] == [f"session-{s}" for s in sessions]
    assert case.docs[0].memory.content.startswith("This morning I cycled 40 kilometres")
    assert "\nGreat ride!" in case.docs[0].memory.content
    assert case.probes[0].gold_docs == {"session-answer_ride_1", "session-answer_ride_2"}


def test_lme_bad_files(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("[{")
    with pytest.raises(InvalidInputError, match="not valid JSON"):
        load_longmemeval(broken)
    record = json.loads(LME.read_text())[0]
    del record["question_date"]
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps([record]))
    with pytest.raises(InvalidInputError, match=r"q_iguana.*'question_date' is missing"):
        load_longmemeval(missing)
    record = json.loads(LME.read_text())[0]
    record["haystack_dates"].pop()
    uneven = tmp_path / "uneven.json"
    uneven.write_text(json.dumps([record]))
    with pytest.raises(InvalidInputError, match="differ in length"):
        load_longmemeval(uneven)
    with pytest.raises(InvalidInputError, match="cannot read"):
        read_json(tmp_path / "absent.json")


def test_lme_user_turns_only() -> None:
    question = load_longmemeval(LME)[0]
    case = longmemeval_case(question, roles=("user",))
    assert [d.memory.metadata["role"] for d in case.docs] == ["user"] * 4
    assert case.probes[0].gold_docs == {_by_text(case, "I just adopted").id}
    sessions = longmemeval_case(question, "session", roles=("user",))
    assert sessions.docs[1].memory.content == (
        "I just adopted a green iguana and I called him Ziggy.\n"
        "What vegetables are safe for reptiles to eat?"
    )
