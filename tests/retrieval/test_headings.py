"""Heading evidence: chunks of indexed markdown files are also ranked by their heading path,
only where the top candidates are all file chunks (recalld.retrieval.headings)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import recalld
from recalld.records import Memory, Source
from recalld.retrieval.fusion import Fused
from recalld.retrieval.headings import MEANING_LIST, WORDS_LIST, by_words, premise

FILLER = "The option takes a table of values; each entry is described below in turn."


def _docs(folder: Path) -> Path:
    """Two pages: the answer sits under a heading that names it, in a body that never does;
    another page's body repeats the query's words under an unrelated heading."""
    folder.mkdir()
    (folder / "editor.md").write_text(
        "# Editor\n\n## Gutters\n\n" + "\n".join([FILLER] * 14) + "\n\n"
        "## Soft wrap\n\n" + "\n".join([FILLER] * 14) + "\n\n"
        "## Line numbers\n\n" + "\n".join([FILLER] * 14) + "\n",
        encoding="utf-8",
    )
    (folder / "news.md").write_text(
        "# Release notes\n\n## Version 2\n\nSoft wrap was discussed; soft wrap may come, "
        "soft wrap is popular, and wrap settings too.\n",
        encoding="utf-8",
    )
    return folder


def _section(hit: recalld.Hit) -> str:
    return " > ".join(hit.memory.metadata["headings"])


def test_a_section_whose_heading_names_the_query_gains_both_heading_lists(
    fake_engine: recalld.MemoryEngine, tmp_path: Path
) -> None:
    fake_engine.index([_docs(tmp_path / "docs")], globs=["**/*.md"])
    plain = fake_engine.search("soft wrap", limit=5, config=fake_engine.config.plain())
    result = fake_engine.search("soft wrap", limit=5, explain=True)
    assert "heading_evidence" not in result.details["stood_aside"]
    by_section = {_section(h): h for h in result.hits}
    answer, other = by_section["Editor > Soft wrap"], by_section["Editor > Line numbers"]
    assert answer.trace is not None and other.trace is not None
    assert answer.trace.fusion[WORDS_LIST] > 0 and answer.trace.fusion[MEANING_LIST] > 0
    assert WORDS_LIST not in other.trace.fusion  # its path names no word of the query
    assert answer.rank < other.rank
    before = next(h for h in plain.hits if _section(h) == "Editor > Soft wrap")
    assert answer.score > before.score


def test_it_stands_aside_where_memories_that_are_not_file_chunks_compete(
    fake_engine: recalld.MemoryEngine, tmp_path: Path
) -> None:
    fake_engine.index([_docs(tmp_path / "docs")], globs=["**/*.md"])
    fake_engine.add("I turned soft wrap on in my editor yesterday.")
    result = fake_engine.search("soft wrap", limit=5, explain=True)
    why = result.details["stood_aside"]["heading_evidence"]
    assert "not all chunks of indexed files" in why
    for hit in result.hits:
        assert hit.trace is not None
        assert WORDS_LIST not in hit.trace.fusion and MEANING_LIST not in hit.trace.fusion


def test_a_store_of_conversation_is_left_as_it_was(fake_engine: recalld.MemoryEngine) -> None:
    fake_engine.add("We talked about soft wrap in the editor.")
    fake_engine.add("Soft wrap is on now.")
    default = fake_engine.search("soft wrap", limit=5, explain=True)
    off = fake_engine.search(
        "soft wrap", limit=5, config=fake_engine.config.with_changes(heading_weight=0.0)
    )
    assert [(h.memory.id, h.score) for h in default.hits] == [
        (h.memory.id, h.score) for h in off.hits
    ]
    assert "heading_evidence" in default.details["stood_aside"]


def _chunk(mid: str, headings: list[str], kind: str = "file") -> Memory:
    when = datetime(2026, 6, 1, tzinfo=UTC)
    return Memory(
        id=mid,
        created_at=when,
        updated_at=when,
        content_hash=mid,
        content="body",
        type="chunk",
        source=Source(kind, f"/docs/{mid}.md", 1, 2),
        metadata={"headings": headings},
    )


def test_premise_needs_file_chunks_and_two_heading_paths() -> None:
    top = [Fused("a", 0.1), Fused("b", 0.09)]
    both = {"a": _chunk("a", ["Editor", "Soft wrap"]), "b": _chunk("b", ["Editor"])}
    assert premise(top, both) is None
    one = {"a": both["a"], "b": _chunk("b", [])}
    assert premise(top, one) is not None and "heading path" in (premise(top, one) or "")
    mixed = {"a": both["a"], "b": _chunk("b", ["Editor"], kind="direct")}
    assert "not all chunks" in (premise(top, mixed) or "")


def test_by_words_ranks_paths_by_the_query_words_they_name() -> None:
    paths = {"a": "Editor > Gutters", "b": "Editor > Soft wrap", "c": "Themes > Wrapping"}
    ranked = by_words("how do I turn on soft wrapping", ["a", "b", "c"], paths)
    # "soft" and "wrap" (stemmed as the word index stems) in b; "wrap" in c; none in a
    assert [c.memory_id for c in ranked] == ["b", "c"]
    assert [c.rank for c in ranked] == [1, 2]
