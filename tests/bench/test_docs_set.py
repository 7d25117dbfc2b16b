"""The docs-set runner: a folder indexed as `recalld index` does, hits scored by section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recalld.bench.docs import Located, line_sections, load_questions, run_docs, score
from recalld.errors import InvalidInputError
from recalld.providers.embedders import FakeEmbedder

PAGE = """# Editor

Intro text.

## Soft wrap

Long lines wrap with `soft-wrap.enable`.

### Indicator

The wrap indicator character.

## Auto save

Saves when focus is lost.
"""


def make_docs(root: Path) -> tuple[Path, Path]:
    (root / "guide").mkdir(parents=True)
    (root / "editor.md").write_text(PAGE, encoding="utf-8")
    (root / "guide" / "themes.md").write_text("# Themes\n\nPalette colours here.\n")
    questions = root.parent / "questions.json"
    questions.write_text(json.dumps([
        {"id": "q1", "question": "autosave focus lost saves", "gold": [["editor.md", "Auto save"]]},
        {"id": "q2", "question": "palette colours", "gold": [["guide/themes.md", None]]},
    ]))  # fmt: skip
    return root, questions


def test_line_sections_include_a_heading_line_and_everything_below_it() -> None:
    per_line = line_sections(PAGE)
    assert per_line[4] == {"editor", "soft wrap"}  # the heading line itself
    assert per_line[10] == {"editor", "soft wrap", "indicator"}
    assert per_line[14] == {"editor", "auto save"}


def test_a_hit_is_a_chunk_of_the_gold_page_under_the_gold_heading() -> None:
    gold = [("editor.md", "`Soft wrap`")]
    wrong_section = Located("editor.md", frozenset({"editor", "auto save"}))
    right = Located("editor.md", frozenset({"editor", "soft wrap", "indicator"}))
    scores = score([wrong_section, right], gold)
    assert scores["section.hit@1"] == 0.0 and scores["section.hit@5"] == 1.0
    assert scores["section.mrr@10"] == 0.5 and scores["page.hit@1"] == 1.0


def test_run_indexes_the_folder_and_scores_each_system(tmp_path: Path) -> None:
    folder, questions = make_docs(tmp_path / "docs")
    report = run_docs(folder, questions, embedder=FakeEmbedder(), cache_dir=tmp_path / "c")
    assert report["pages"] == 2 and report["chunks"] >= 2
    assert list(report["systems"]) == ["recalld", "rrf", "bm25", "vector"]
    bm25 = {p["id"]: p["systems"]["bm25"]["scores"] for p in report["probes"]}
    assert bm25["q1"]["section.hit@10"] == 1.0 and bm25["q2"]["page.hit@1"] == 1.0


def test_a_gold_heading_that_is_not_on_its_page_is_refused(tmp_path: Path) -> None:
    folder, questions = make_docs(tmp_path / "docs")
    questions.write_text(json.dumps([{"id": "q", "question": "x",
                                      "gold": [["editor.md", "Nowhere"]]}]))  # fmt: skip
    assert load_questions(questions)[0].gold == (("editor.md", "Nowhere"),)
    with pytest.raises(InvalidInputError, match="no heading 'Nowhere' in editor.md"):
        run_docs(folder, questions, embedder=FakeEmbedder(), cache_dir=tmp_path / "c")
