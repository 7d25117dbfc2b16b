"""Conversation transcripts as turn memories: JSONL transcripts and Claude Code sessions.

Every reader returns :class:`Turn` records plus the problems it met (with line numbers);
:func:`turns_to_memories` turns them into ``turn`` memories whose ids derive from the
format, the session and the turn, so importing the same transcript again adds nothing.

Formats:

``jsonl-transcript``
    One JSON object a line: ``role`` and ``content`` (a string, or a list of blocks with
    ``text``), optional ``timestamp`` (ISO 8601, or seconds since 1970), optional
    ``session_id`` (also ``session`` or ``sessionId``) and ``id``. Lines without a session
    belong to one session named after the file.
``claude-code``
    Claude Code's session files (``~/.claude/projects/<project>/<session>.jsonl``): lines of
    ``type`` ``user`` or ``assistant`` with ``message.content`` (a string or a list of
    blocks), ``timestamp``, ``sessionId`` and ``uuid``. Only text blocks are kept: tool
    calls, tool results and thinking are not conversation; meta and summary lines are
    skipped. Consecutive lines of one assistant message (same ``message.id``) form one turn.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from recalld.conversation import reply_context
from recalld.records import NewMemory, Source
from recalld.retrieval.adjust import GENERIC_ROLES

REPLY_CONTEXT = True
"""Imported short turns are embedded with the end of the turn before them, in every format.
Measured on 2026-11-24, off against on, through this import path (scripts/reply_context.py):
LoCoMo turn R@1 0.382 -> 0.413 (89 questions won, 56 lost), R@10 0.757 -> 0.795 (67 won,
26 lost), evidence@10 0.690 -> 0.722; workloads dev, its turns given the context an import
would give them, hit@1 0.473 both (3 won, 3 lost), hit@5 0.868 -> 0.874, current_first
0.400 -> 0.457."""


@dataclass(frozen=True)
class Turn:
    """One message of a conversation."""

    session: str
    index: int
    """Position in its session, from 0."""
    role: str
    text: str
    time: datetime | None
    ref: str | None = None
    """A stable id inside the source (a message uuid, a LoCoMo ``dia_id``)."""
    line: int | None = None
    extra: tuple[tuple[str, Any], ...] = ()
    """Format-specific metadata kept with the memory."""


@dataclass(frozen=True)
class Parsed:
    """Turns read from one source, and what could not be read."""

    turns: list[Turn]
    problems: list[str]
    source_kind: str
    skipped: int = 0
    """Lines or records that are not conversation (tool output, summaries ...)."""
    notes: tuple[str, ...] = ()
    """What was stored other than as written (a date that could not be read: undated)."""


class LineError(ValueError):
    """A line or record that cannot be read; the message says why."""


def numbered_lines(data: bytes) -> Iterator[tuple[int, str | None]]:
    """(line number, text) for every non-blank line; text None when it is not UTF-8."""
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            yield number, raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError:
            yield number, None


def parse_time(value: object) -> datetime | None:
    """ISO 8601 text or epoch seconds (milliseconds when huge) as UTC; None when absent."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise LineError("timestamp must be ISO 8601 text or a number of seconds")
    if isinstance(value, int | float):
        seconds = value / 1000 if value > 1e11 else value
        return datetime.fromtimestamp(seconds, UTC)
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError as exc:
            raise LineError(f"timestamp {value!r} is not ISO 8601") from exc
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    raise LineError("timestamp must be ISO 8601 text or a number of seconds")


def block_text(content: object, keep: tuple[str, ...] = ("text",)) -> str:
    """The text of a message's content: a string, or the text of its ``keep`` blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and block.get("type", "text") in keep:
                text = block.get("text")
                if isinstance(text, str):
                    parts.append(text)
        return "\n".join(p for p in parts if p.strip())
    raise LineError("content must be a string or a list of blocks")


class _Sessions:
    """Numbers turns within their session as they arrive."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def index(self, session: str) -> int:
        value = self._next.get(session, 0)
        self._next[session] = value + 1
        return value


def read_jsonl_transcript(data: bytes, default_session: str) -> Parsed:
    """Turns of a generic JSONL transcript (see the module docstring)."""
    turns: list[Turn] = []
    problems: list[str] = []
    sessions = _Sessions()
    for number, line in numbered_lines(data):
        try:
            obj = _object(line)
            role, text = obj.get("role"), block_text(obj.get("content"))
            if not isinstance(role, str) or not role.strip():
                raise LineError("'role' must be a non-empty string")
            if not text.strip():
                raise LineError("'content' is empty")
            session = _session(obj, default_session)
            ref = obj.get("id")
            turns.append(
                Turn(
                    session,
                    sessions.index(session),
                    role.strip(),
                    text,
                    parse_time(obj.get("timestamp")),
                    str(ref) if ref is not None else None,
                    number,
                )
            )
        except LineError as exc:
            problems.append(f"line {number}: {exc}")
    return Parsed(turns, problems, "transcript")


def read_claude_code(data: bytes, default_session: str) -> Parsed:
    """Turns of a Claude Code session file (see the module docstring)."""
    turns: list[Turn] = []
    problems: list[str] = []
    sessions = _Sessions()
    skipped = 0
    last_message: tuple[str, str] | None = None
    for number, line in numbered_lines(data):
        try:
            obj = _object(line)
            turn = _claude_turn(obj, default_session, number)
        except LineError as exc:
            problems.append(f"line {number}: {exc}")
            continue
        if turn is None:
            skipped += 1
            continue
        message_id = dict(turn.extra).get("message_id")
        key = (turn.session, str(message_id)) if message_id else None
        if key is not None and key == last_message and turns[-1].session == turn.session:
            previous = turns[-1]
            turns[-1] = Turn(
                previous.session,
                previous.index,
                previous.role,
                previous.text + "\n" + turn.text,
                previous.time,
                previous.ref,
                previous.line,
                previous.extra,
            )
            continue
        last_message = key
        turns.append(
            Turn(
                turn.session,
                sessions.index(turn.session),
                turn.role,
                turn.text,
                turn.time,
                turn.ref,
                number,
                turn.extra,
            )
        )
    return Parsed(turns, problems, "claude-code", skipped)


def _claude_turn(obj: dict[str, Any], default_session: str, number: int) -> Turn | None:
    if obj.get("type") not in ("user", "assistant") or obj.get("isMeta"):
        return None
    message = obj.get("message")
    if not isinstance(message, dict):
        raise LineError("a user or assistant line needs a 'message' object")
    text = block_text(message.get("content"))
    if not text.strip():
        return None  # tool calls and tool results only
    role = message.get("role") or obj["type"]
    extra: list[tuple[str, Any]] = []
    if message.get("id"):
        extra.append(("message_id", message["id"]))
    if obj.get("isSidechain"):
        extra.append(("sidechain", True))
    ref = obj.get("uuid")
    return Turn(
        _session(obj, default_session),
        0,
        str(role),
        text,
        parse_time(obj.get("timestamp")),
        str(ref) if ref else None,
        number,
        tuple(extra),
    )


def _object(line: str | None) -> dict[str, Any]:
    if line is None:
        raise LineError("not valid UTF-8")
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise LineError(f"not valid JSON ({exc.msg} at column {exc.colno})") from exc
    if not isinstance(obj, dict):
        raise LineError("expected a JSON object")
    return obj


def _session(obj: dict[str, Any], default: str) -> str:
    for key in ("session_id", "sessionId", "session"):
        value = obj.get(key)
        if isinstance(value, str | int) and str(value).strip():
            return str(value).strip()
    return default


def turn_id(fmt: str, turn: Turn, content: str) -> str:
    """A stable id from the format, session, turn and its content.

    The content takes part so that two different sources reusing a session id never
    collide; re-importing the same turn always gives the same id.
    """
    position = turn.ref if turn.ref is not None else str(turn.index)
    key = f"{fmt}\0{turn.session}\0{position}\0{content}".encode()
    return "turn-" + hashlib.sha256(key).hexdigest()[:24]


def turns_to_memories(
    parsed: Parsed,
    fmt: str,
    path: str | None,
    speaker_prefix: bool = True,
    with_reply_context: bool = REPLY_CONTEXT,
) -> Iterable[NewMemory]:
    """One ``turn`` memory per turn, with its session, time and a stable id.

    The content is what was said; a speaker who is a person (LoCoMo's ``Caroline``, not
    ``user`` or ``assistant``) is named before it (``Caroline: ...``), since a name is
    something to search for and a generic role is not. The role is in ``metadata`` either
    way, where ranking reads it.
    With ``with_reply_context``, a short turn is embedded with the end of the turn before
    it in its session (:func:`recalld.conversation.reply_context`).
    """
    previous: dict[str, str] = {}
    for turn in parsed.turns:
        named = speaker_prefix and turn.role.lower() not in GENERIC_ROLES
        content = f"{turn.role}: {turn.text}" if named else turn.text
        context = reply_context(previous.get(turn.session), content) if with_reply_context else None
        previous[turn.session] = content
        metadata: dict[str, Any] = {"role": turn.role, "turn": turn.index, "format": fmt}
        metadata.update(dict(turn.extra))
        ref = f"{turn.session}#{turn.ref if turn.ref is not None else turn.index}"
        yield NewMemory(
            content=content,
            type="turn",
            event_time=turn.time,
            session_id=turn.session,
            source=Source(parsed.source_kind, path, turn.line, turn.line, ref),
            metadata=metadata,
            id=turn_id(fmt, turn, content),
            embed_context=context,
        )
