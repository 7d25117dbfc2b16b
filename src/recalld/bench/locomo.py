"""LoCoMo (Maharana et al., ACL 2024): conversations and their questions, as typed records.

The public file has known defects this loader survives (see the benchmark README): evidence
strings holding several ids (``"D8:6; D9:17"``, ``"D9:1 D4:4"``), ``"D:11:26"`` meaning
``D11:26``, ``"D30:05"`` meaning ``D30:5``, ids that name no turn, questions without
evidence, adversarial (category 5) questions with ``adversarial_answer`` and no ``answer``,
and ``session_<n>_date_time`` keys without a session (sessions are what is iterated).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from recalld.bench.cases import Case, Doc, Probe, read_json, require
from recalld.errors import InvalidInputError
from recalld.sources.importer import transcript_memories

CATEGORY_NAMES = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
"""The benchmark README's names for the ``category`` numbers."""
DEFAULT_CATEGORIES = (1, 2, 3, 4)
"""Category 5 (adversarial: the answer is not in the conversation) is left out by default."""

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_ID = re.compile(r"^D:?(\d+):(\d+)$")
_ID_SPLIT = re.compile(r"[;,\s]+")
_DATE = re.compile(
    r"^\s*(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*$", re.I
)
_MONTHS = {
    name: n
    for n, name in enumerate(
        (
            "january",
            "february",
            "march",
            "april",
            "may",
            "june",
            "july",
            "august",
            "september",
            "october",
            "november",
            "december",
        ),
        start=1,
    )
}


@dataclass(frozen=True)
class Turn:
    """One utterance as the file gives it (what is stored is the importer's business)."""

    dia_id: str
    speaker: str
    text: str
    session: int


@dataclass(frozen=True)
class LocomoSession:
    """One dated session of a conversation (``date`` is None when the file gives none)."""

    number: int
    date: datetime | None
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class LocomoQuestion:
    """One question with its category and its cleaned evidence."""

    question: str
    answer: str | None
    """``None`` for adversarial items that only have an ``adversarial_answer``."""
    category: int
    evidence: tuple[str, ...]
    """Normalised ids of evidence turns that exist in the conversation."""
    unknown_evidence: tuple[str, ...]
    """Evidence strings (or parts of them) that name no turn of the conversation."""


@dataclass(frozen=True)
class Conversation:
    """One LoCoMo sample: two speakers' sessions and the questions about them."""

    sample_id: str
    speakers: tuple[str, ...]
    sessions: tuple[LocomoSession, ...]
    questions: tuple[LocomoQuestion, ...]
    record: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The sample as the file holds it: what the importer reads to store the conversation."""

    @property
    def last_date(self) -> datetime | None:
        """The latest session date: the ``as_of`` of its questions (they carry no date)."""
        dates = [s.date for s in self.sessions if s.date is not None]
        return max(dates) if dates else None


def parse_date(text: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` as an aware UTC datetime."""
    found = _DATE.match(text)
    month = _MONTHS.get(found.group(5).lower()) if found else None
    if found is None or month is None:
        raise InvalidInputError(f"unrecognised LoCoMo date {text!r}")
    hour, minute, half, day, year = (
        int(found.group(1)),
        int(found.group(2)),
        found.group(3).lower(),
        int(found.group(4)),
        int(found.group(6)),
    )
    if not 1 <= hour <= 12:
        raise InvalidInputError(f"impossible LoCoMo time {text!r}")
    hour = hour % 12 + (12 if half == "pm" else 0)
    try:
        return datetime(year, month, day, hour, minute, tzinfo=UTC)
    except ValueError as exc:
        raise InvalidInputError(f"impossible LoCoMo date {text!r}: {exc}") from exc


def normalize_dia_id(raw: str) -> str | None:
    """``D11:26`` form of one turn id (``D:11:26`` and ``D30:05`` repaired); None if not an id."""
    found = _ID.match(raw.strip())
    return f"D{int(found.group(1))}:{int(found.group(2))}" if found else None


def parse_evidence(entries: Sequence[Any], known: set[str]) -> tuple[list[str], list[str]]:
    """Split evidence strings into known turn ids (deduplicated, in order) and unknown parts."""
    found: dict[str, None] = {}
    unknown: list[str] = []
    for entry in entries:
        for part in _ID_SPLIT.split(str(entry)):
            if not part:
                continue
            dia_id = normalize_dia_id(part)
            if dia_id is not None and dia_id in known:
                found.setdefault(dia_id, None)
            else:
                unknown.append(part)
    return list(found), unknown


def load_locomo(path: str | Path) -> list[Conversation]:
    """Every conversation of a LoCoMo file (a JSON array of samples), in file order."""
    data = read_json(path)
    if not isinstance(data, list):
        raise InvalidInputError(f"{path}: a LoCoMo file is a JSON array of conversations")
    return [_conversation(r, f"{path}: sample #{i + 1}") for i, r in enumerate(data)]


def _conversation(record: Any, where: str) -> Conversation:
    sample_id = str(require(record, "sample_id", (str, int), where))
    where = f"{where} ({sample_id})"
    body = require(record, "conversation", dict, where)
    numbers = sorted(int(m.group(1)) for k in body if (m := _SESSION_KEY.match(k)))
    sessions = tuple(_session(body, n, f"{where} session {n}") for n in numbers)
    known = {t.dia_id for s in sessions for t in s.turns}
    qa = require(record, "qa", list, where)
    questions = tuple(_qa(item, known, f"{where} qa #{i + 1}") for i, item in enumerate(qa))
    speakers = tuple(str(body[k]) for k in ("speaker_a", "speaker_b") if k in body)
    return Conversation(sample_id, speakers, sessions, questions, record)


def _session(body: dict[str, Any], number: int, where: str) -> LocomoSession:
    raw_date = body.get(f"session_{number}_date_time")
    date = parse_date(raw_date) if isinstance(raw_date, str) else None
    turns = require(body, f"session_{number}", list, where)
    parsed = []
    for n, turn in enumerate(turns, start=1):
        at = f"{where} turn {n}"
        dia_id = normalize_dia_id(require(turn, "dia_id", str, at))
        if dia_id is None:
            raise InvalidInputError(f"{at}: unrecognised dia_id {turn['dia_id']!r}")
        text = str(turn.get("text") or "").strip()
        parsed.append(Turn(dia_id, require(turn, "speaker", str, at), text, number))
    return LocomoSession(number, date, tuple(parsed))


def _qa(item: Any, known: set[str], where: str) -> LocomoQuestion:
    category = require(item, "category", int, where)
    raw = item.get("evidence") or []
    if not isinstance(raw, list):
        raise InvalidInputError(f"{where}: evidence should be a list of turn ids")
    evidence, unknown = parse_evidence(raw, known)
    answer = item.get("answer")
    return LocomoQuestion(
        question=require(item, "question", str, where),
        answer=None if answer is None else str(answer),
        category=category,
        evidence=tuple(evidence),
        unknown_evidence=tuple(unknown),
    )


def locomo_case(conversation: Conversation, categories: Sequence[int] = DEFAULT_CATEGORIES) -> Case:
    """One store per conversation, as ``recalld import --format locomo`` stores it.

    The memories are exactly the importer's (:func:`~recalld.sources.importer.
    transcript_memories`): ``speaker: text`` turns (an image's caption appended), dated by
    their session. Evidence ids (``D1:3``) are mapped onto the importer's memory ids by the
    turn reference it keeps. Questions of other categories are left out; questions without
    known evidence turns are kept as probes with empty gold (the runner counts and skips them).
    """
    as_of = conversation.last_date
    if as_of is None:
        raise InvalidInputError(f"conversation {conversation.sample_id} has no dated session")
    parsed, memories = transcript_memories(
        json.dumps([conversation.record]).encode(), "locomo", conversation.sample_id
    )
    docs = [Doc(m, t.session) for t, m in zip(parsed.turns, memories, strict=True)]
    memory_of: dict[str, str] = {}
    session_of: dict[str, str] = {}
    for turn, memory in zip(parsed.turns, memories, strict=True):
        dia_id = normalize_dia_id(turn.ref or "")
        if dia_id is not None:
            memory_of[dia_id] = memory.id or ""
            session_of[dia_id] = turn.session
    probes = []
    for n, q in enumerate(conversation.questions):
        if q.category not in categories:
            continue
        gold = [e for e in q.evidence if e in memory_of]
        probes.append(
            Probe(
                probe_id=f"{conversation.sample_id}#{n + 1}",
                group=f"{q.category} {CATEGORY_NAMES.get(q.category, 'other')}",
                question=q.question,
                as_of=as_of,
                gold_sessions=frozenset(session_of[e] for e in gold),
                gold_docs=frozenset(memory_of[e] for e in gold),
            )
        )
    turns = sum(len(s.turns) for s in conversation.sessions)
    return Case(conversation.sample_id, tuple(docs), tuple(probes), turns - len(docs))
