"""Write the default pipeline's rankings of the eval corpus as JSON (ids and exact scores).

``tests/retrieval/test_default_unchanged.py`` compares the current code against this file,
so the optional model stages cannot move the zero-LLM default. Regenerate it from main's
code only, when a change on main is meant to move the default ranking:

    PYTHONPATH=/path/to/main/src python scripts/default_ranking.py > \\
        tests/fixtures/default_ranking.json
"""

from __future__ import annotations

import json
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder
from recalld.records import NewMemory

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "eval_corpus.json"
PRESETS = ("fast", "balanced", "thorough")


def rankings() -> dict[str, Any]:
    """preset -> query -> [[id, score], ...] for every eval-corpus query, limit 10."""
    data = json.loads(CORPUS.read_text(encoding="utf-8"))
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(db=Path(folder) / "m.db", cache_dir=None)
        with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
            engine.add_many([
                NewMemory(**{**m, "type": "turn",
                             "event_time": datetime.fromisoformat(m["event_time"])})
                for m in data["memories"]
            ])  # fmt: skip
            as_of = datetime.fromisoformat(data["as_of"])
            for preset in PRESETS:
                out[preset] = {
                    q["query"]: [
                        [h.memory.id, h.score]
                        for h in engine.search(
                            q["query"], limit=10, as_of=as_of, preset=preset
                        ).hits
                    ]  # fmt: skip
                    for q in data["queries"]
                }
    return out


if __name__ == "__main__":
    json.dump(rankings(), sys.stdout, indent=1)
    sys.stdout.write("\n")
