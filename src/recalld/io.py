"""Readers for memory files (JSONL of memories)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from recalld.records import NewMemory, Source

_FIELDS = set(NewMemory.__dataclass_fields__)


def memory_from_json(obj: dict[str, Any]) -> NewMemory:
    """A :class:`NewMemory` from a JSON object; raises ValueError/TypeError when malformed."""
    unknown = set(obj) - _FIELDS
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(sorted(unknown))}")
    data = dict(obj)
    if isinstance(data.get("event_time"), str):
        data["event_time"] = datetime.fromisoformat(data["event_time"])
    if isinstance(data.get("source"), dict):
        data["source"] = Source(**data["source"])
    for name in ("tags", "entities"):
        if name in data and data[name] is not None:
            if not isinstance(data[name], list) or not all(isinstance(v, str) for v in data[name]):
                raise ValueError(f"'{name}' must be a list of strings")
            data[name] = tuple(data[name])
    if data.get("event_time") is not None and not isinstance(data["event_time"], datetime):
        raise ValueError("'event_time' must be an ISO date or datetime string")
    if not isinstance(data.get("content"), str):
        raise ValueError("'content' must be a string")
    return NewMemory(**data)


def read_memories_jsonl(lines: Iterable[str | bytes]) -> tuple[list[NewMemory], list[str]]:
    """Parse every line; malformed ones are reported with their line number, the rest kept."""
    numbered, problems = read_numbered_memories(lines)
    return [item for _, item in numbered], problems


def read_numbered_memories(
    lines: Iterable[str | bytes],
) -> tuple[list[tuple[int, NewMemory]], list[str]]:
    """Parse every line into (line number, memory); malformed lines are reported with their
    number and why. Blank lines are not memories and not problems.

    Give ``bytes`` lines (a file opened in binary mode) to have invalid UTF-8 reported per
    line; a text stream that fails to decode stops at that point, and says so.
    """
    items: list[tuple[int, NewMemory]] = []
    problems: list[str] = []
    try:
        for number, raw in enumerate(lines, start=1):
            try:
                line = raw.decode("utf-8") if isinstance(raw, bytes) else raw
            except UnicodeDecodeError as exc:
                problems.append(f"line {number}: not valid UTF-8 ({exc.reason})")
                continue
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise ValueError("expected a JSON object")
                items.append((number, memory_from_json(obj)))
            except (ValueError, TypeError) as exc:
                problems.append(f"line {number}: {exc}")
    except UnicodeDecodeError as exc:
        problems.append(f"the file is not valid UTF-8 ({exc.reason}); stopped reading there")
    return items, problems
