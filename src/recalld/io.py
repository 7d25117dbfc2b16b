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
        if isinstance(data.get(name), list):
            data[name] = tuple(data[name])
    if not isinstance(data.get("content"), str):
        raise ValueError("'content' must be a string")
    return NewMemory(**data)


def read_memories_jsonl(lines: Iterable[str]) -> tuple[list[NewMemory], list[str]]:
    """Parse every line; malformed ones are reported with their line number, the rest kept."""
    items: list[NewMemory] = []
    problems: list[str] = []
    try:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise ValueError("expected a JSON object")
                items.append(memory_from_json(obj))
            except (ValueError, TypeError) as exc:
                problems.append(f"line {number}: {exc}")
    except UnicodeDecodeError as exc:
        problems.append(f"the file is not valid UTF-8 ({exc.reason}); stopped reading there")
    return items, problems
