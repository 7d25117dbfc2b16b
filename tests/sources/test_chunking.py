from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings, strategies as st

from recalld.sources.chunking import ChunkParams, chunk_markdown, parse_blocks
from recalld.text import estimate_tokens


def _words(n: int, seed: str = "w") -> str:
    return " ".join(f"{seed}{i}" for i in range(n))


def _body_matches_lines(text: str, chunk) -> bool:  # type: ignore[no-untyped-def]
    lines = text.splitlines()
    return chunk.body == "\n".join(lines[chunk.line_start - 1 : chunk.line_end]).strip("\n")


def test_small_file_is_one_chunk_with_exact_line_range() -> None:
    text = "# Title\n\nOne short note.\n- a list item\n"
    chunks = chunk_markdown(text)
    assert len(chunks) == 1
    assert (chunks[0].line_start, chunks[0].line_end) == (1, 4)
    assert chunks[0].content == "Title\n# Title\n\nOne short note.\n- a list item"


def test_chunks_are_about_target_size_with_overlap() -> None:
    lines = [f"Sentence number {i} says something about topic {i % 7}." for i in range(400)]
    text = "\n".join(lines)
    chunks = chunk_markdown(text)
    assert len(chunks) > 5
    for chunk in chunks[:-1]:
        tokens = estimate_tokens(chunk.body)
        assert 300 <= tokens <= 401, tokens
    for before, after in zip(chunks, chunks[1:], strict=False):
        shared = before.line_end - after.line_start + 1
        assert shared >= 1, "consecutive chunks share lines"
        overlap_text = "\n".join(lines[after.line_start - 1 : before.line_end])
        assert 40 <= estimate_tokens(overlap_text) <= 80
    for chunk in chunks:
        assert _body_matches_lines(text, chunk)
    assert chunks[0].line_start == 1 and chunks[-1].line_end == len(lines)


def test_headings_are_carried_as_context() -> None:
    section = "\n".join(
        f"Detail line {i} about the Berlin move and its paperwork." for i in range(80)
    )
    text = f"# Life\n\n## Moving to Berlin\n\n{section}\n\n## Cooking\n\nI bake bread on Sundays.\n"
    chunks = chunk_markdown(text)
    mid = [c for c in chunks if c.line_start > 5 and "Detail line" in c.body]
    assert mid, "the long section is split"
    assert all(c.headings == ("Life", "Moving to Berlin") for c in mid)
    assert all(c.content.startswith("Life > Moving to Berlin\n") for c in mid)
    cooking = next(c for c in chunks if "bake bread" in c.body)
    assert cooking.body.startswith("## Cooking")
    assert cooking.headings == ("Life", "Cooking")  # its own heading is part of its path
    assert cooking.content.startswith("Life > Cooking\n## Cooking")


def test_heading_starts_new_chunk_once_current_is_half_full() -> None:
    first = "\n".join(_words(12, f"a{i}-") for i in range(15))  # ~ 250 tokens
    text = f"# One\n{first}\n# Two\nshort second section\n"
    chunks = chunk_markdown(text)
    assert len(chunks) == 2
    assert chunks[1].body.startswith("# Two")
    assert "a0-" not in chunks[1].body  # no overlap carried across a heading


def test_code_blocks_are_not_cut_when_they_fit() -> None:
    prose = "\n".join(
        f"Prose line {i} with several words in it to take up space." for i in range(20)
    )
    code = "```python\n" + "\n".join(f"x_{i} = compute({i})" for i in range(40)) + "\n```"
    text = f"{prose}\n\n{code}\n\n{prose}\n"
    chunks = chunk_markdown(text)
    holding = [c for c in chunks if "x_0 = " in c.body or "x_39 = " in c.body]
    assert len(holding) == 1 and "x_0 = " in holding[0].body and "x_39 = " in holding[0].body
    assert holding[0].body.count("```") == 2
    for chunk in chunks:  # no chunk starts inside the code block (overlap skips code)
        assert not chunk.body.startswith("x_")


def test_oversized_code_block_is_split_by_lines() -> None:
    code = "```\n" + "\n".join(f"line_{i} = value_{i} + other_{i}" for i in range(400)) + "\n```"
    chunks = chunk_markdown(code)
    assert len(chunks) > 3
    for chunk in chunks:
        assert estimate_tokens(chunk.body) <= 401
        assert _body_matches_lines(code, chunk)


def test_list_items_are_never_cut() -> None:
    items = [
        f"- item {i}: " + _words(30, f"i{i}w") + f"\n  continued detail of item {i}"
        for i in range(30)
    ]
    text = "\n".join(items)
    for chunk in chunk_markdown(text):
        body_lines = chunk.body.splitlines()
        assert body_lines[0].startswith("- item"), "a chunk starts at an item"
        assert body_lines[-1].startswith("  continued"), "a chunk ends after an item's last line"


def test_blocks_parse_front_matter_fences_lists_and_headings() -> None:
    lines = ["---", "tags: x", "---", "# H", "para", "still para", "", "- a", "  more a", "- b",
             "```", "# not a heading", "```", "## H2"]  # fmt: skip
    kinds = [(b.kind, b.start, b.end) for b in parse_blocks(lines)]
    assert kinds == [("front-matter", 0, 3), ("heading", 3, 4), ("paragraph", 4, 6),
                     ("list-item", 7, 9), ("list-item", 9, 10), ("code", 10, 13),
                     ("heading", 13, 14)]  # fmt: skip
    assert parse_blocks(lines)[-1].context == ("H",)


def test_unclosed_fence_runs_to_end() -> None:
    lines = ["text", "```", "code", "# still code"]
    assert [b.kind for b in parse_blocks(lines)] == ["paragraph", "code"]


def test_cjk_without_newlines_is_split_with_overlap() -> None:
    text = "".join(f"第{i}回の会議は東京で行われました。" for i in range(200))
    chunks = chunk_markdown(text)
    assert len(chunks) > 3
    assert all(c.line_start == c.line_end == 1 for c in chunks)
    for chunk in chunks:
        assert estimate_tokens(chunk.body) <= 401
        assert chunk.body in text
    for before, after in zip(chunks, chunks[1:], strict=False):
        assert before.body[-20:] in after.body, "consecutive pieces overlap"
    rebuilt = chunks[0].body
    for chunk in chunks[1:]:
        k = next(k for k in range(len(chunk.body), 0, -1) if rebuilt.endswith(chunk.body[:k]))
        rebuilt += chunk.body[k:]
    assert rebuilt == text


def test_empty_and_blank_files_have_no_chunks() -> None:
    assert chunk_markdown("") == []
    assert chunk_markdown("\n\n   \n") == []


def test_params_are_validated_and_named() -> None:
    assert ChunkParams().descriptor == "md2/400/80"
    with pytest.raises(ValueError):
        ChunkParams(target_tokens=100, overlap_tokens=60)


_markdown_line = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=120),
    st.sampled_from(["", "# Heading", "## Sub", "```", "- item", "1. first", "---", "> quote"]),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_markdown_line, max_size=80), st.integers(32, 200))
def test_every_nonblank_line_lands_in_some_chunk(lines: list[str], target: int) -> None:
    text = "\n".join(lines)
    params = ChunkParams(target_tokens=target, overlap_tokens=target // 5)
    chunks = chunk_markdown(text, params)
    covered: set[int] = set()
    for chunk in chunks:
        assert 1 <= chunk.line_start <= chunk.line_end <= len(text.splitlines())
        covered.update(range(chunk.line_start, chunk.line_end + 1))
        assert unicodedata.is_normalized("NFC", chunk.body) == unicodedata.is_normalized(
            "NFC", chunk.body
        )
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            assert number in covered, f"line {number} {line!r} is in no chunk"
