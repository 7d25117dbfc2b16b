"""Importing a conversation transcript: read, check every turn, then store them all.

Stages of :func:`import_transcript`: read the bytes (``.gz`` is decompressed), parse them
in the chosen format (bad lines are reported with their numbers and skipped), check every
turn as a memory (a turn the store would refuse is reported, not fatal), and only then
store the turns. Ids are stable, so a second import of the same transcript stores nothing.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from recalld.errors import InvalidInputError
from recalld.records import AddResult, NewMemory
from recalld.sources.datasets import read_locomo, read_longmemeval
from recalld.sources.transcripts import (
    LineError,
    Parsed,
    read_claude_code,
    read_jsonl_transcript,
    turns_to_memories,
)

TRANSCRIPT_FORMATS: tuple[str, ...] = ("jsonl-transcript", "claude-code", "longmemeval", "locomo")
MAX_IMPORT_BYTES = 2_000_000_000
"""Refuse inputs beyond this (after decompression): they would not fit in memory anyway."""


@dataclass(frozen=True)
class ImportReport:
    """What a transcript import did."""

    format: str
    turns: int
    """Turns read."""
    stored: int
    already_present: int
    """Turns already in the store (a re-import)."""
    undated: int
    """Turns without a timestamp (stored undated)."""
    skipped: int
    """Lines that are not conversation (tool output, summaries, meta lines)."""
    problems: tuple[str, ...]
    """Lines or records that could not be imported (skipped), with their numbers."""
    notes: tuple[str, ...] = ()
    """Lines stored other than as written (an unreadable date: stored undated)."""


@dataclass(frozen=True)
class ImportDeps:
    """What the importer needs from the engine (see ``MemoryEngine.import_transcript``)."""

    validate: Callable[[NewMemory], None]
    add_many: Callable[[Sequence[NewMemory]], list[AddResult]]


def read_source(source: str | os.PathLike[str] | BinaryIO) -> tuple[bytes, str, str | None]:
    """(bytes, session name for sessionless lines, path) of a file or a binary stream."""
    if not isinstance(source, str | os.PathLike):
        data = source.read(MAX_IMPORT_BYTES + 1)
        name, path = "stdin", None
    else:
        file = Path(source)
        try:
            if file.suffix == ".gz":
                with gzip.open(file, "rb") as handle:
                    data = handle.read(MAX_IMPORT_BYTES + 1)
            else:
                data = file.read_bytes()
        except (OSError, EOFError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise InvalidInputError(f"cannot read {file}: {reason}") from exc
        name = file.name.removesuffix(".gz").rsplit(".", 1)[0] or file.name
        path = str(file.absolute())
    if len(data) > MAX_IMPORT_BYTES:
        raise InvalidInputError(f"the input is larger than {MAX_IMPORT_BYTES} bytes")
    return data, name, path


def parse(data: bytes, fmt: str, name: str) -> Parsed:
    """Parse ``data`` in ``fmt`` (one of :data:`TRANSCRIPT_FORMATS`)."""
    try:
        if fmt == "jsonl-transcript":
            return read_jsonl_transcript(data, name)
        if fmt == "claude-code":
            return read_claude_code(data, name)
        if fmt == "longmemeval":
            return read_longmemeval(data)
        if fmt == "locomo":
            return read_locomo(data)
    except LineError as exc:
        raise InvalidInputError(f"cannot import this {fmt} file: {exc}") from exc
    raise InvalidInputError(f"unknown format {fmt!r}; use one of {', '.join(TRANSCRIPT_FORMATS)}")


def transcript_memories(
    data: bytes, fmt: str, name: str, path: str | None = None
) -> tuple[Parsed, list[NewMemory]]:
    """The turns of a transcript and the memories ``recalld import`` stores for them.

    The one way a transcript becomes memories: the import and the benchmarks both use it.
    ``name`` is the session of lines that name none; ``path`` is recorded as the source.
    """
    parsed = parse(data, fmt, name)
    return parsed, list(turns_to_memories(parsed, fmt, path))


def check_problems(problems: Sequence[str], usable: int, fmt: str, strict: bool) -> None:
    """The one policy for bad lines, in every format: each is reported (``problems`` name
    the line or record and why); ``strict`` refuses the whole input, and an input with
    nothing usable is refused too. Otherwise bad lines are skipped and the rest stored.

    Raises:
        ImportRefused: before anything is stored.
    """
    if problems and (strict or not usable):
        why = (
            "--strict refuses a file with bad lines"
            if strict and usable
            else (f"none of its lines could be read as {fmt}")
        )
        raise ImportRefused(
            f"nothing imported: {len(problems)} bad line(s) ({why}); the first: {problems[0]}",
            tuple(problems),
        )
    if not usable:
        raise ImportRefused(f"nothing to import: the input holds nothing in {fmt} format", ())


class ImportRefused(InvalidInputError):
    """An import that stored nothing; ``problems`` lists every bad line."""

    def __init__(self, message: str, problems: tuple[str, ...]) -> None:
        super().__init__(message)
        self.problems = problems


def import_transcript(
    source: str | os.PathLike[str] | BinaryIO,
    fmt: str,
    deps: ImportDeps,
    *,
    strict: bool = False,
) -> ImportReport:
    """Import a transcript (see the module docstring)."""
    if fmt not in TRANSCRIPT_FORMATS:
        raise InvalidInputError(
            f"unknown format {fmt!r}; use one of {', '.join(TRANSCRIPT_FORMATS)}"
        )
    data, name, path = read_source(source)
    parsed, items = transcript_memories(data, fmt, name, path)
    problems = list(parsed.problems)
    valid: list[NewMemory] = []
    for turn, item in zip(parsed.turns, items, strict=True):
        try:
            deps.validate(item)
        except InvalidInputError as exc:
            where = (
                f"line {turn.line}" if turn.line else f"session {turn.session} turn {turn.index}"
            )
            problems.append(f"{where}: {exc}")
            continue
        valid.append(item)
    check_problems(problems, len(valid), fmt, strict)
    results = deps.add_many(valid)
    stored = sum(r.created for r in results)
    return ImportReport(
        format=fmt,
        turns=len(parsed.turns),
        stored=stored,
        already_present=len(results) - stored,
        undated=sum(item.event_time is None for item in valid),
        skipped=parsed.skipped,
        problems=tuple(problems),
        notes=parsed.notes,
    )
