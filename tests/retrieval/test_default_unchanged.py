"""With no LLM and no reranker configured, rankings are exactly main's (ids, order, scores).

``tests/fixtures/default_ranking.json`` was written by ``scripts/default_ranking.py`` run on
main's code; the optional model stages must not move a single score of the default.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_zero_llm_default_ranks_exactly_as_main() -> None:
    script = ROOT / "scripts" / "default_ranking.py"
    spec = importlib.util.spec_from_file_location("default_ranking", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    expected = json.loads((ROOT / "tests" / "fixtures" / "default_ranking.json").read_text())
    current = json.loads(json.dumps(module.rankings()))
    assert set(current) == set(expected) == {"fast", "balanced", "thorough"}
    for preset, queries in expected.items():
        assert len(queries) >= 20
        for query, ranked in queries.items():
            assert current[preset][query] == ranked, (preset, query)
