"""Markdown-aware chunking: about 400 tokens a chunk, 80 shared, structure respected.

Stages (:func:`chunk_markdown`):

1. :func:`parse_blocks` splits the file into blocks (front matter, headings, fenced code,
   list items, paragraphs), each a line range carrying the heading path in effect.
2. :func:`_pieces` splits any block larger than a chunk: by lines, and a single line that is
   still too long by characters at grapheme-cluster boundaries (see :mod:`.graphemes`).
3. :func:`_pack` packs pieces greedily into chunks, starting a new chunk at a heading once
   the current one is half full, and carrying whole trailing lines (never part of a code
   block) into the next chunk as overlap.

Token counts are :func:`recalld.text.estimate_tokens` estimates: fast, and "about" is what
the sizes promise. Each chunk keeps its 1-based, inclusive line range.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from recalld.sources.graphemes import split_text
from recalld.text import has_cjk

TARGET_TOKENS = 400
"""Chunk size of OpenClaw's memory indexer (its default), which the spec adopts."""
OVERLAP_TOKENS = 80
"""Tokens repeated at the start of the next chunk (OpenClaw's default), so a fact that
straddles a boundary is whole in at least one chunk."""
HEADING_BREAK_FRACTION = 0.5
"""A heading starts a new chunk once the current chunk is at least this full: sections
stay apart, yet a run of tiny sections is not scattered into tiny chunks."""
CHUNKER_VERSION = "md2"
"""Bumped when chunk boundaries or contents change, so indexed files are re-chunked by the
next ``recalld index`` run (md2: a chunk that opens with a heading has it in its path)."""

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t#]*$")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)")


@dataclass(frozen=True)
class ChunkParams:
    """Chunk sizes; part of every indexed file's record, so a change re-chunks."""

    target_tokens: int = TARGET_TOKENS
    overlap_tokens: int = OVERLAP_TOKENS

    def __post_init__(self) -> None:
        if self.target_tokens < 16:
            raise ValueError("target_tokens must be at least 16")
        if not 0 <= self.overlap_tokens < self.target_tokens // 2:
            raise ValueError("overlap_tokens must be between 0 and half of target_tokens")

    @property
    def descriptor(self) -> str:
        """A short string naming the chunker and its parameters."""
        return f"{CHUNKER_VERSION}/{self.target_tokens}/{self.overlap_tokens}"


@dataclass(frozen=True)
class Block:
    """A structural unit of a markdown file: lines ``start`` to ``end`` (0-based, exclusive)."""

    kind: str
    """``front-matter``, ``heading``, ``code``, ``list-item`` or ``paragraph``."""
    start: int
    end: int
    context: tuple[str, ...]
    """Titles of the headings this block sits under (a heading's own title excluded)."""
    level: int = 0
    """A heading's level (1-6); 0 for other blocks."""


@dataclass(frozen=True)
class _Piece:
    kind: str
    start: int
    end: int
    context: tuple[str, ...]
    tokens: float
    text: str | None = None
    """Set for a piece of one over-long line; otherwise the piece is whole lines."""


@dataclass(frozen=True)
class Chunk:
    """One chunk: its text, its line range (1-based, inclusive) and heading context."""

    body: str
    line_start: int
    line_end: int
    headings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def content(self) -> str:
        """The text to store and embed: the heading path, then the body."""
        if not self.headings:
            return self.body
        return " > ".join(self.headings) + "\n" + self.body


def chunk_markdown(text: str, params: ChunkParams | None = None) -> list[Chunk]:
    """Split markdown ``text`` into chunks (see the module docstring for the stages)."""
    params = params or ChunkParams()
    lines = text.splitlines()
    pieces = [p for block in parse_blocks(lines) for p in _pieces(block, lines, params)]
    return _pack(pieces, lines, params)


# -- 1. blocks ---------------------------------------------------------------------------


def parse_blocks(lines: list[str]) -> list[Block]:
    """The file's blocks in order; blank lines belong to none."""
    blocks: list[Block] = []
    stack: list[tuple[int, str]] = []
    i = _front_matter_end(lines)
    if i:
        blocks.append(Block("front-matter", 0, i, ()))
    while i < len(lines):
        line = lines[i]
        context = tuple(title for _, title in stack)
        if not line.strip():
            i += 1
            continue
        heading = _HEADING.match(line)
        if heading:
            level, title = len(heading.group(1)), (heading.group(2) or "").strip()
            stack = [(lv, t) for lv, t in stack if lv < level]
            blocks.append(Block("heading", i, i + 1, tuple(t for _, t in stack), level))
            if title:
                stack.append((level, title))
            i += 1
            continue
        kind, end = _block_at(lines, i)
        blocks.append(Block(kind, i, end, context))
        i = end
    return blocks


def _front_matter_end(lines: list[str]) -> int:
    if not lines or lines[0].strip() != "---":
        return 0
    for j in range(1, min(len(lines), 200)):
        if lines[j].strip() in ("---", "..."):
            return j + 1
    return 0


def _block_at(lines: list[str], i: int) -> tuple[str, int]:
    """The kind and end of the non-heading block starting at line ``i``."""
    fence = _FENCE.match(lines[i])
    if fence:
        mark = fence.group(1)
        closing = re.compile(rf"^ {{0,3}}{re.escape(mark[0])}{{{len(mark)},}}\s*$")
        for j in range(i + 1, len(lines)):
            if closing.match(lines[j]):
                return "code", j + 1
        return "code", len(lines)
    kind = "list-item" if _LIST_ITEM.match(lines[i]) else "paragraph"
    j = i + 1
    while j < len(lines) and _continues(lines[j], kind):
        j += 1
    return kind, j


def _continues(line: str, kind: str) -> bool:
    """Whether ``line`` still belongs to the list item or paragraph above it."""
    if not line.strip() or _HEADING.match(line) or _FENCE.match(line):
        return False
    if _LIST_ITEM.match(line):
        return False  # each list item (nested ones too) is its own block
    return kind == "paragraph" or kind == "list-item"


# -- 2. pieces ---------------------------------------------------------------------------


def line_tokens(line: str) -> float:
    """Estimated tokens of a line with its line break (as ``estimate_tokens`` counts)."""
    cjk = sum(1 for ch in line if has_cjk(ch)) if has_cjk(line) else 0
    return cjk + (len(line) - cjk + 1) / 4


def _pieces(block: Block, lines: list[str], params: ChunkParams) -> list[_Piece]:
    """The block as one piece, or split by lines (and long lines by characters).

    Split pieces leave room for the overlap the next chunk starts with.
    """
    tokens = [line_tokens(line) for line in lines[block.start : block.end]]
    if sum(tokens) <= params.target_tokens:
        return [_Piece(block.kind, block.start, block.end, block.context, sum(tokens))]
    room = params.target_tokens - params.overlap_tokens
    out: list[_Piece] = []
    start, total = block.start, 0.0
    for offset, count in enumerate(tokens):
        i = block.start + offset
        if count > room:
            if i > start:
                out.append(_Piece(block.kind, start, i, block.context, total))
            out.extend(_split_line(block, i, lines[i], params))
            start, total = i + 1, 0.0
            continue
        if total + count > room and i > start:
            out.append(_Piece(block.kind, start, i, block.context, total))
            start, total = i, 0.0
        total += count
    if block.end > start:
        out.append(_Piece(block.kind, start, block.end, block.context, total))
    return out


def _split_line(block: Block, i: int, line: str, params: ChunkParams) -> list[_Piece]:
    parts = split_text(line, params.target_tokens, params.overlap_tokens)
    return [_Piece(block.kind, i, i + 1, block.context, line_tokens(part), part) for part in parts]


# -- 3. packing --------------------------------------------------------------------------


def _pack(pieces: list[_Piece], lines: list[str], params: ChunkParams) -> list[Chunk]:
    chunks: list[Chunk] = []
    current: list[_Piece] = []
    for piece in pieces:
        size = sum(p.tokens for p in current)
        at_heading = piece.kind == "heading" and size >= params.target_tokens * (
            HEADING_BREAK_FRACTION
        )
        if current and (at_heading or size + piece.tokens > params.target_tokens):
            emitted, carried = _split_trailing_headings(current)
            chunks.append(_chunk(emitted, lines))
            at_section = carried or piece.kind == "heading"  # no overlap into a new section
            overlap = [] if at_section else _overlap(emitted, lines, params)
            if sum(p.tokens for p in overlap) + piece.tokens > params.target_tokens:
                overlap = []
            current = overlap + carried
        current.append(piece)
    if current:
        chunks.append(_chunk(current, lines))
    return [c for c in chunks if c.body.strip()]


def _split_trailing_headings(current: list[_Piece]) -> tuple[list[_Piece], list[_Piece]]:
    """Headings at the end of a full chunk move on to head the next one."""
    cut = len(current)
    while cut > 1 and current[cut - 1].kind == "heading":
        cut -= 1
    return current[:cut], current[cut:]


def _overlap(emitted: list[_Piece], lines: list[str], params: ChunkParams) -> list[_Piece]:
    """Trailing whole lines of ``emitted`` worth at most ``overlap_tokens``.

    Lines are taken from whole pieces first; the last piece is cut by lines only when it is
    prose (a code block's tail alone would be a fragment without its fence).
    """
    taken: list[_Piece] = []
    budget = float(params.overlap_tokens)
    for piece in reversed(emitted):
        if piece.text is not None or piece.kind == "heading":
            break
        if piece.tokens <= budget:
            taken.insert(0, piece)
            budget -= piece.tokens
            continue
        if piece.kind == "paragraph":  # never part of a list item or code block
            start, used = piece.end, 0.0
            while start > piece.start + 1:
                cost = line_tokens(lines[start - 1])
                if used + cost > budget:
                    break
                start, used = start - 1, used + cost
            if start < piece.end:
                taken.insert(0, _Piece(piece.kind, start, piece.end, piece.context, used))
        break
    return taken


def _chunk(pieces: list[_Piece], lines: list[str]) -> Chunk:
    first, last = pieces[0], pieces[-1]
    if all(p.text is None for p in pieces):
        body = "\n".join(lines[first.start : last.end])
    else:
        body = "\n".join(p.text if p.text is not None else _lines(p, lines) for p in pieces)
    return Chunk(body.strip("\n"), first.start + 1, last.end, _path(first, lines))


def _path(first: _Piece, lines: list[str]) -> tuple[str, ...]:
    """The chunk's heading path: a chunk that opens with a heading sits under it too."""
    if first.kind != "heading":
        return first.context
    match = _HEADING.match(lines[first.start])
    title = (match.group(2) or "").strip() if match else ""
    return (*first.context, title) if title else first.context


def _lines(piece: _Piece, lines: list[str]) -> str:
    return "\n".join(lines[piece.start : piece.end])
