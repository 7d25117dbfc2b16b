"""LongMemEval (Wu et al., ICLR 2025): the official JSON schema, as typed records.

Each question carries its own haystack of dated sessions. :func:`longmemeval_case` turns
one question into a :class:`~recalld.bench.cases.Case`: one memory per turn (or per
session), with the session id, the session's date as event time and the role in metadata.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from recalld.bench.cases import Case, Doc, Probe, read_json, require, select_by_id
from recalld.conversation import reply_context
from recalld.errors import InvalidInputError
from recalld.records import NewMemory, Source

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
    """One store for one question: its haystack as memories, the question as the probe.

    Memory ids are ``s{session}t{turn}`` (``s{session}`` at session granularity), positions
    in the haystack, so a session id that appears twice keeps both copies. ``roles`` keeps
    only the turns of those roles (``("user",)`` is what the official script indexes);
    turn-level gold is then the kept ``has_answer`` turns.
    """
    docs: list[Doc] = []
    gold_turns: set[str] = set()
    skipped = 0
    for s_index, session in enumerate(question.sessions):
        kept = [(t_index, turn) for t_index, turn in enumerate(session.turns)
                if roles is None or turn.role in roles]  # fmt: skip
        empty = [i for i, turn in kept if not turn.content.strip()]
        skipped += len(empty)
        kept = [(i, turn) for i, turn in kept if i not in empty]
        if granularity == "session":
            if kept:
                text = "\n".join(f"{turn.role}: {turn.content.strip()}" for _, turn in kept)
                docs.append(_doc(f"s{s_index}", text, session, {"turns": len(kept)}))
            continue
        previous: str | None = None
        for t_index, turn in kept:
            doc_id = f"s{s_index}t{t_index}"
            meta = {"role": turn.role, "turn": t_index}
            context = reply_context(previous, turn.content)
            docs.append(_doc(doc_id, turn.content, session, meta, context))
            previous = turn.content
            if turn.has_answer:
                gold_turns.add(doc_id)
    gold_docs = gold_turns
    if granularity == "session":
        gold_docs = {d.memory.id or "" for d in docs if d.session in question.answer_session_ids}
    probe = Probe(
        probe_id=question.question_id,
        group=question.question_type,
        question=question.question,
        as_of=question.question_date,
        gold_sessions=frozenset(question.answer_session_ids),
        gold_docs=frozenset(gold_docs),
    )
    return Case(question.question_id, tuple(docs), (probe,), skipped)


def _doc(
    doc_id: str,
    text: str,
    session: Session,
    metadata: dict[str, Any],
    context: str | None = None,
) -> Doc:
    memory = NewMemory(
        embed_context=context,
        id=doc_id,
        content=text,
        type="turn",
        event_time=session.date,
        session_id=session.session_id,
        source=Source(kind="longmemeval", ref=f"{session.session_id}#{doc_id}"),
        metadata=metadata,
    )
    return Doc(memory, session.session_id)
