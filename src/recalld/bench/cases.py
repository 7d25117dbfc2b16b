"""What the runner works on, whatever the benchmark: stores to fill and questions to ask.

A :class:`Case` is one fresh store: the memories to put in it (:class:`Doc`) and the
questions asked of it (:class:`Probe`). Gold labels stay here, never in the store.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from recalld.errors import InvalidInputError
from recalld.records import NewMemory

GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class Doc:
    """One memory to store (its ``id`` is set) and the session it belongs to."""

    memory: NewMemory
    session: str


@dataclass(frozen=True)
class Probe:
    """One question to ask a store, with its gold labels."""

    probe_id: str
    group: str
    """The breakdown it is reported under (question type, LoCoMo category)."""
    question: str
    as_of: datetime | None
    """The search's reference time; ``None`` asks as of now (a corpus without dates)."""
    gold_sessions: frozenset[str]
    gold_docs: frozenset[str]
    """Ids of the evidence memories; empty when the benchmark has no turn labels for it."""


@dataclass(frozen=True)
class Case:
    """One store's content and the probes asked of it."""

    case_id: str
    docs: tuple[Doc, ...]
    probes: tuple[Probe, ...]
    skipped_turns: int = 0
    """Turns left out because they hold no text (recalld refuses empty content)."""

    def session_sizes(self) -> dict[str, int]:
        """How many stored memories each session has (the ideal for session NDCG)."""
        sizes: dict[str, int] = {}
        for doc in self.docs:
            sizes[doc.session] = sizes.get(doc.session, 0) + 1
        return sizes


T = TypeVar("T")


def select_by_id(
    items: Sequence[T], ids: Sequence[str], key: Callable[[T], str], noun: str
) -> list[T]:
    """The items whose ``key`` is in ``ids`` (all items when ``ids`` is empty), in file order.

    Raises:
        InvalidInputError: if an id names no item, so a typo is never a silently empty run.
    """
    if not ids:
        return list(items)
    known = {key(item) for item in items}
    missing = [i for i in ids if i not in known]
    if missing:
        raise InvalidInputError(f"no {noun} with id {', '.join(missing)} in the file")
    wanted = set(ids)
    return [item for item in items if key(item) in wanted]


def read_json(path: str | Path) -> Any:
    """A JSON file, plain or gzip-compressed (told by its first bytes, not its name)."""
    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise InvalidInputError(f"cannot read {file}: {exc.strerror}") from exc
    try:
        if raw.startswith(GZIP_MAGIC):
            raw = gzip.decompress(raw)
        return json.loads(raw.decode("utf-8"))
    except (OSError, EOFError) as exc:
        raise InvalidInputError(f"{file} is not a readable gzip file: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{file} is not UTF-8 text: {exc.reason}") from exc
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"{file} is not valid JSON: {exc}") from exc


def require(record: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    """``record[key]``, checked to be of ``kind``; a clear error names the record otherwise."""
    if not isinstance(record, dict):
        raise InvalidInputError(f"{where}: expected an object, found {type(record).__name__}")
    if key not in record:
        raise InvalidInputError(f"{where}: the field {key!r} is missing")
    value = record[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise InvalidInputError(
            f"{where}: the field {key!r} should be {names}, found {type(value).__name__}"
        )
    return value
