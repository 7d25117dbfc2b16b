"""A small labelled corpus with per-class thresholds: a quality floor the suite enforces.

Hit@3 = share of queries with a relevant memory in the top 3. The corpus is tiny and
hand-written, so the floors guard against regressions; benchmark figures live in
docs/benchmarks.md.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import pytest

import recalld
from recalld.config import Settings
from recalld.providers.embedders import Embedder
from recalld.records import NewMemory

CORPUS = Path(__file__).parent.parent / "fixtures" / "eval_corpus.json"
# Floors are what the default pipeline reaches with the packaged MiniLM; its two paraphrase
# misses ("how do I get to work?" vs a commuting bike, "where do I live these days?" vs a
# lease) are the model's, kept in the corpus so an improvement shows. The preference miss
# ("suggest a snack ...") is neighbour support's known cost: the assistant's restaurant
# suggestion ranks first and lends its neighbour (the book club turn) enough to pass the
# allergy note; on LoCoMo and LongMemEval the mechanism is a net gain (docs/benchmarks.md).
FLOORS = {"paraphrase": 0.66, "keyword": 1.0, "temporal": 0.66, "preference": 0.5,
          "update": 1.0, "cjk": 1.0}  # fmt: skip


@pytest.fixture(scope="module")
def corpus_engine(tmp_path_factory: pytest.TempPathFactory, local_embedder: Embedder):  # type: ignore[no-untyped-def]
    data = json.loads(CORPUS.read_text(encoding="utf-8"))
    folder = tmp_path_factory.mktemp("eval")
    engine = recalld.open(
        settings=Settings(db=folder / "m.db", cache_dir=None), embedder=local_embedder
    )
    engine.add_many(
        [
            NewMemory(
                **{**m, "type": "turn", "event_time": datetime.fromisoformat(m["event_time"])}
            )
            for m in data["memories"]
        ]  # fmt: skip
    )
    yield engine, data
    engine.close()


@pytest.mark.parametrize("preset", ["balanced", "thorough"])
def test_hit_at_3_per_class(corpus_engine, preset: str) -> None:  # type: ignore[no-untyped-def]
    engine, data = corpus_engine
    as_of = datetime.fromisoformat(data["as_of"])
    hits: dict[str, list[bool]] = defaultdict(list)
    misses = []
    for item in data["queries"]:
        result = engine.search(item["query"], limit=3, as_of=as_of, preset=preset)
        found = {h.memory.id for h in result.hits} & set(item["relevant"])
        hits[item["class"]].append(bool(found))
        if not found:
            misses.append((item["query"], [h.memory.id for h in result.hits]))
    for name, floor in FLOORS.items():
        rate = sum(hits[name]) / len(hits[name])
        assert rate >= floor, f"{name}: Hit@3 {rate:.2f} < {floor}; misses: {misses}"


def test_vector_mode_finds_paraphrases(corpus_engine) -> None:  # type: ignore[no-untyped-def]
    engine, data = corpus_engine
    result = engine.search("which code editor do I use at my job?", mode="vector", limit=3)
    assert "editor" in [h.memory.id for h in result.hits]


def test_session_granularity_groups_turns(corpus_engine) -> None:  # type: ignore[no-untyped-def]
    engine, _ = corpus_engine
    result = engine.search("Brompton bike", limit=5, granularity="session")
    sessions = [h.memory.session_id for h in result.hits]
    assert len(sessions) == len(set(sessions))
    assert {"s04", "s07", "s09"} <= set(sessions)
