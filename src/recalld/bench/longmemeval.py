"""LongMemEval (Wu et al., ICLR 2025): the official JSON schema, as typed records.

Each question carries its own haystack of dated sessions. :func:`longmemeval_case` turns
one question into a :class:`~recalld.bench.cases.Case`: its haystack stored exactly as
``recalld import --format longmemeval`` stores it, its question and gold labels as the probe.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from recalld.bench.cases import Case, Doc, Probe, read_json, require, select_by_id
from recalld.errors import InvalidInputError
from recalld.records import NewMemory
from recalld.sources.importer import transcript_memories

Granularity = Literal["turn", "session"]
ABSTENTION_SUFFIX = "_abs"
"""Question ids ending in this are abstention questions (the official report skips them)."""

_DATE = re.compile(r"^\s*(\d{4})/(\d{1,2})/(\d{1,2})(?:\s*\([A-Za-z]+\))?\s+(\d{1,2}):(\d{2})\s*$")


@dataclass(frozen=True)
class Turn:
    """One message of a haystack session."""

    role: str
    content: str
    has_answer: bool | None
    """The official turn-level label; ``None`` where the file has no mark."""


@dataclass(frozen=True)
class Session:
    """One dated chat session of a haystack."""

    session_id: str
    date: datetime
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Question:
    """One LongMemEval record: the question and its own haystack."""

    question_id: str
    question_type: str
    question: str
    answer: str
    question_date: datetime
    sessions: tuple[Session, ...]
    answer_session_ids: tuple[str, ...]
    record: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The record as the file holds it: what the importer reads to store the haystack."""

    @property
    def abstention(self) -> bool:
        return self.question_id.endswith(ABSTENTION_SUFFIX)

    @property
    def has_turn_labels(self) -> bool:
        """Whether any turn is marked ``has_answer: true`` (the turn-level gold)."""
        return any(t.has_answer for s in self.sessions for t in s.turns)


def parse_date(text: str) -> datetime:
    """``"2023/05/30 (Tue) 23:40"`` as an aware UTC datetime (the weekday is optional)."""
    found = _DATE.match(text)
    if found is None:
        raise InvalidInputError(f"unrecognised LongMemEval date {text!r}")
    year, month, day, hour, minute = (int(g) for g in found.groups())
    try:
        return datetime(year, month, day, hour, minute, tzinfo=UTC)
    except ValueError as exc:
        raise InvalidInputError(f"impossible LongMemEval date {text!r}: {exc}") from exc


def load_longmemeval(path: str | Path) -> list[Question]:
    """Every record of a LongMemEval file (plain or gzipped JSON array), in file order."""
    data = read_json(path)
    if not isinstance(data, list):
        raise InvalidInputError(f"{path}: a LongMemEval file is a JSON array of questions")
    questions = [_question(record, f"{path}: question #{i + 1}") for i, record in enumerate(data)]
    seen: set[str] = set()
    for q in questions:
        if q.question_id in seen:
            raise InvalidInputError(f"{path}: question id {q.question_id!r} appears twice")
        seen.add(q.question_id)
    return questions


def _question(record: Any, where: str) -> Question:
    qid = require(record, "question_id", str, where)
    where = f"{where} ({qid})"
    ids = require(record, "haystack_session_ids", list, where)
    dates = require(record, "haystack_dates", list, where)
    sessions = require(record, "haystack_sessions", list, where)
    if not len(ids) == len(dates) == len(sessions):
        raise InvalidInputError(
            f"{where}: haystack_session_ids, haystack_dates and haystack_sessions differ in "
            f"length ({len(ids)}, {len(dates)}, {len(sessions)})"
        )
    return Question(
        question_id=qid,
        question_type=require(record, "question_type", str, where),
        question=require(record, "question", str, where),
        answer=str(require(record, "answer", (str, int, float), where)),
        question_date=parse_date(require(record, "question_date", str, where)),
        sessions=tuple(
            _session(str(sid), str(date), turns, f"{where} session {sid}")
            for sid, date, turns in zip(ids, dates, sessions, strict=True)
        ),
        answer_session_ids=tuple(
            str(s) for s in require(record, "answer_session_ids", list, where)
        ),
        record=record,
    )


def _session(session_id: str, date: str, turns: Any, where: str) -> Session:
    if not isinstance(turns, list):
        raise InvalidInputError(f"{where}: a session is a list of turns")
    parsed = []
    for n, turn in enumerate(turns, start=1):
        mark = turn.get("has_answer") if isinstance(turn, dict) else None
        parsed.append(
            Turn(
                role=require(turn, "role", str, f"{where} turn {n}"),
                content=require(turn, "content", str, f"{where} turn {n}"),
                has_answer=mark if isinstance(mark, bool) else None,
            )
        )
    return Session(session_id, parse_date(date), tuple(parsed))


def select_questions(
    questions: Sequence[Question],
    *,
    question_ids: Sequence[str] = (),
    include_abstention: bool = False,
    limit: int | None = None,
) -> list[Question]:
    """The questions to score: the named ones (all if none), abstention left out, first ``limit``.

    Raises:
        InvalidInputError: if a named id is not in the file.
    """
    chosen = select_by_id(questions, question_ids, lambda q: q.question_id, "question")
    if not include_abstention:
        chosen = [q for q in chosen if not q.abstention]
    return chosen if limit is None else chosen[:limit]


def longmemeval_case(
    question: Question, granularity: Granularity = "turn", roles: Collection[str] | None = None
) -> Case:
    """One store for one question: its haystack as ``recalld import --format longmemeval``
    stores it, and the question as the probe.

    The memories are exactly the importer's (:func:`~recalld.sources.importer.
    transcript_memories`): ``role: text`` turns with the session's id and date, a session
    that appears twice in the haystack stored once, empty turns left out. The gold turns
    (``has_answer``) are mapped onto the importer's ids by session and position.
    ``roles`` keeps only the turns of those roles (``("user",)`` is what the official
    script indexes). ``session`` granularity joins each session's stored turns into one
    memory (a view of the same ingestion, for session-level retrieval).
    """
    parsed, memories = transcript_memories(
        json.dumps([question.record]).encode(), "longmemeval", question.question_id
    )
    gold_turns = {
        (s.session_id, i) for s in question.sessions for i, t in enumerate(s.turns) if t.has_answer
    }
    docs: list[Doc] = []
    gold_docs: set[str] = set()
    for turn, memory in zip(parsed.turns, memories, strict=True):
        if roles is not None and turn.role not in roles:
            continue
        docs.append(Doc(memory, turn.session))
        if (turn.session, turn.index) in gold_turns:
            gold_docs.add(memory.id or "")
    if granularity == "session":
        docs = _sessions(docs)
        gold_docs = {d.memory.id or "" for d in docs if d.session in question.answer_session_ids}
    skipped = sum(
        not t.content.strip()
        for s in question.sessions
        for t in s.turns
        if roles is None or t.role in roles
    )
    probe = Probe(
        probe_id=question.question_id,
        group=question.question_type,
        question=question.question,
        as_of=question.question_date,
        gold_sessions=frozenset(question.answer_session_ids),
        gold_docs=frozenset(gold_docs),
    )
    return Case(question.question_id, tuple(docs), (probe,), skipped)


def _sessions(turns: list[Doc]) -> list[Doc]:
    """One memory per session: its stored turns joined by newlines, in order."""
    grouped: dict[str, list[NewMemory]] = {}
    for doc in turns:
        grouped.setdefault(doc.session, []).append(doc.memory)
    docs = []
    for session, memories in grouped.items():
        first = memories[0]
        memory = replace(
            first,
            id=f"session-{session}",
            content="\n".join(m.content for m in memories),
            metadata={"turns": len(memories)},
            embed_context=None,
        )
        docs.append(Doc(memory, session))
    return docs
