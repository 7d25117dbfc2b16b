"""The fixture searches return the recorded ids, in order, with the recorded scores.

A refactoring must leave this green. An intended ranking change fails it: then rewrite the
record with ``python -m tests.retrieval.golden`` and say so in the commit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import recalld
from recalld.config import Settings
from recalld.providers.embedders import Embedder

from .golden import GOLDEN, run_all


def test_fixture_searches_match_the_record(tmp_path: Path, local_embedder: Embedder) -> None:
    expected = json.loads(GOLDEN.read_text(encoding="utf-8"))
    settings = Settings(db=tmp_path / "m.db", cache_dir=None)
    with recalld.open(settings=settings, embedder=local_embedder) as engine:
        found = run_all(engine)
    hint = "results changed; if intended, run: python -m tests.retrieval.golden"
    assert found.keys() == expected.keys(), hint
    for key, hits in expected.items():
        assert [h[0] for h in found[key]] == [h[0] for h in hits], (key, hint)
        assert [h[1] for h in found[key]] == pytest.approx([h[1] for h in hits], abs=1e-6), (
            key, hint)  # fmt: skip
