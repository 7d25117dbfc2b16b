"""Search results on the test fixtures, recorded so that a refactoring of the store contract
can prove it changes no result: ``python -m tests.retrieval.golden`` rewrites the record
(do that only for an intended ranking change, and say so in the commit)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import recalld
from recalld.records import NewMemory

FIXTURES = Path(__file__).parent.parent / "fixtures"
GOLDEN = FIXTURES / "search_golden.json"
EXTRA_QUERIES = [
    "what did I do in March 2025?",
    "what happened last week?",
    "what did I do before I moved to Porto?",
    "the latest news about my sister",
    "抹茶",
]


def load_corpus(engine: recalld.MemoryEngine) -> tuple[list[str], datetime]:
    data = json.loads((FIXTURES / "eval_corpus.json").read_text(encoding="utf-8"))
    engine.add_many(
        [
            NewMemory(
                **{**m, "type": "turn", "event_time": datetime.fromisoformat(m["event_time"])}
            )
            for m in data["memories"]
        ]  # fmt: skip
    )
    engine.import_transcript(FIXTURES / "longmemeval_tiny.json", "longmemeval")
    lme = json.loads((FIXTURES / "longmemeval_tiny.json").read_text(encoding="utf-8"))
    queries = [q["query"] for q in data["queries"]] + EXTRA_QUERIES
    queries += [q["question"] for q in lme]
    return queries, datetime.fromisoformat(data["as_of"])


def run_all(engine: recalld.MemoryEngine) -> dict[str, Any]:
    """Ids and scores of every fixture query, per preset, mode and granularity."""
    queries, as_of = load_corpus(engine)
    out: dict[str, Any] = {}
    for preset in ("fast", "balanced", "thorough"):
        for mode in ("auto", "vector", "hybrid"):
            for granularity in ("memory", "session"):
                for query in queries:
                    result = engine.search(query, limit=8, as_of=as_of, preset=preset,
                                           mode=mode, granularity=granularity)  # type: ignore[arg-type]  # fmt: skip
                    key = f"{preset}|{mode}|{granularity}|{query}"
                    out[key] = [[h.memory.id, round(h.score, 9)] for h in result.hits]
    return out


if __name__ == "__main__":
    import tempfile

    from recalld.config import Settings

    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(db=Path(folder) / "m.db", cache_dir=None)
        with recalld.open(settings=settings, embedder="local") as engine:
            GOLDEN.write_text(json.dumps(run_all(engine), indent=0, ensure_ascii=False) + "\n",
                              encoding="utf-8")  # fmt: skip
