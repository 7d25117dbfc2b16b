"""The LongMemEval and LoCoMo conversation formats, read as transcripts of turns.

These importers bring a benchmark's conversations into a store as ordinary turn memories
(session by session, with their dates); evaluation itself belongs to ``recalld.bench``.

``longmemeval``
    A JSON array of records with ``haystack_session_ids``, ``haystack_dates``
    (``"2023/05/30 (Tue) 23:40"``) and ``haystack_sessions`` (lists of ``{role, content}``).
    A session shared by several questions is imported once. Answer labels are not stored.
``locomo``
    A JSON array of samples with ``sample_id`` and ``conversation``: ``session_<n>`` lists of
    ``{speaker, dia_id, text, blip_caption?}`` and ``session_<n>_date_time``
    (``"1:56 pm on 8 May, 2023"``). A turn's ``dia_id`` (``D1:3``) is kept as its reference.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from recalld.sources.transcripts import LineError, Parsed, Turn

_LOCOMO_SESSION = re.compile(r"session_(\d+)")


def _records(data: bytes, what: str) -> list[Any]:
    try:
        value = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise LineError(f"the file is not valid UTF-8 (byte {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise LineError(f"not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    if isinstance(value, dict):
        return [value]
    if not isinstance(value, list):
        raise LineError(f"expected a JSON array of {what}")
    return value


def parse_longmemeval_date(text: str) -> datetime:
    """``2023/05/30 (Tue) 23:40`` as UTC."""
    cleaned = re.sub(r"\([^)]*\)", " ", text)
    try:
        return datetime.strptime(" ".join(cleaned.split()), "%Y/%m/%d %H:%M").replace(tzinfo=UTC)
    except ValueError as exc:
        raise LineError(f"date {text!r} is not like '2023/05/30 (Tue) 23:40'") from exc


def read_longmemeval(data: bytes) -> Parsed:
    """Turns of every distinct haystack session (see the module docstring)."""
    turns: list[Turn] = []
    problems: list[str] = []
    notes: list[str] = []
    seen: dict[str, tuple[str, ...]] = {}
    for number, record in enumerate(_records(data, "LongMemEval records"), start=1):
        try:
            sessions = _longmemeval_sessions(record)
        except LineError as exc:
            problems.append(f"record {number}: {exc}")
            continue
        for session_id, when_text, messages in sessions:
            when = _longmemeval_when(when_text, session_id, number, notes)
            signature = tuple(str(m.get("content")) for m in messages)
            if session_id in seen:
                if seen[session_id] != signature:
                    problems.append(
                        f"record {number}: session {session_id} differs from an "
                        "earlier copy; the first copy was kept"
                    )
                continue
            seen[session_id] = signature
            turns.extend(_longmemeval_turns(session_id, when, messages, number, problems))
    return Parsed(turns, problems, "longmemeval", notes=tuple(notes))


def _longmemeval_when(
    text: object, session_id: str, number: int, notes: list[str]
) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return parse_longmemeval_date(text)
    except LineError as exc:
        notes.append(f"record {number}: session {session_id}: {exc}; stored undated")
        return None


def _longmemeval_sessions(record: object) -> list[tuple[str, object, list[Any]]]:
    if not isinstance(record, dict):
        raise LineError("expected a JSON object")
    ids, dates = record.get("haystack_session_ids"), record.get("haystack_dates")
    sessions = record.get("haystack_sessions")
    if not isinstance(ids, list) or not isinstance(sessions, list) or len(ids) != len(sessions):
        raise LineError("needs haystack_session_ids and haystack_sessions of equal length")
    if not isinstance(dates, list) or len(dates) != len(ids):
        dates = [None] * len(ids)
    out = []
    for session_id, when, messages in zip(ids, dates, sessions, strict=True):
        if not isinstance(messages, list):
            raise LineError(f"session {session_id} is not a list of turns")
        out.append((str(session_id), when, messages))
    return out


def _longmemeval_turns(
    session_id: str, when: datetime | None, messages: list[Any], number: int, problems: list[str]
) -> list[Turn]:
    turns = []
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        text = message.get("content") if isinstance(message, dict) else None
        if not isinstance(role, str) or not isinstance(text, str):
            problems.append(
                f"record {number}: session {session_id} turn {index} has no "
                "role and content; skipped"
            )
            continue
        if text.strip():
            turns.append(Turn(session_id, index, role, text, when))
    return turns


def parse_locomo_date(text: str) -> datetime:
    """``1:56 pm on 8 May, 2023`` as UTC."""
    try:
        return datetime.strptime(" ".join(text.split()), "%I:%M %p on %d %B, %Y").replace(
            tzinfo=UTC
        )
    except ValueError as exc:
        raise LineError(f"date {text!r} is not like '1:56 pm on 8 May, 2023'") from exc


def read_locomo(data: bytes) -> Parsed:
    """Turns of every session of every sample (see the module docstring)."""
    turns: list[Turn] = []
    problems: list[str] = []
    for number, sample in enumerate(_records(data, "LoCoMo samples"), start=1):
        conversation = sample.get("conversation") if isinstance(sample, dict) else None
        if not isinstance(conversation, dict):
            problems.append(f"sample {number}: no 'conversation' object; skipped")
            continue
        sample_id = str(sample.get("sample_id") or f"sample-{number}")
        for key in sorted(conversation, key=_session_number):
            if not _LOCOMO_SESSION.fullmatch(key):
                continue
            try:
                turns.extend(_locomo_session(sample_id, key, conversation))
            except LineError as exc:
                problems.append(f"sample {sample_id}, {key}: {exc}")
    return Parsed(turns, problems, "locomo")


def _session_number(key: str) -> int:
    found = _LOCOMO_SESSION.fullmatch(key)
    return int(found.group(1)) if found else -1


def _locomo_session(sample_id: str, key: str, conversation: dict[str, Any]) -> list[Turn]:
    messages = conversation[key]
    if not isinstance(messages, list):
        raise LineError("is not a list of turns")
    when_text = conversation.get(f"{key}_date_time")
    when = parse_locomo_date(when_text) if isinstance(when_text, str) else None
    session = f"{sample_id}:{key}"
    turns = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("text"), str):
            raise LineError(f"turn {index} has no text")
        text = message["text"]
        caption = message.get("blip_caption")
        if isinstance(caption, str) and caption.strip():
            text = f"{text} [shared an image: {caption.strip()}]"
        ref = message.get("dia_id")
        speaker = str(message.get("speaker") or "speaker")
        extra = (("sample_id", sample_id),)
        turns.append(
            Turn(session, index, speaker, text, when, str(ref) if ref else None, None, extra)
        )
    return turns
