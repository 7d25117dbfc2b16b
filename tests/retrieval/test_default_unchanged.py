"""With no LLM and no reranker configured, rankings are exactly main's (ids, order, scores).

``tests/fixtures/default_ranking.json`` was written by ``scripts/default_ranking.py`` run on
main's code; the optional model stages must not move a single score of the default.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from pathlib import Path
from typing import Any

import pytest

import recalld.threads
from recalld.stores.sqlite import store as sqlite_store

ROOT = Path(__file__).resolve().parents[2]


def _assert_rankings_are_mains() -> None:
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


def test_the_zero_llm_default_ranks_exactly_as_main() -> None:
    _assert_rankings_are_mains()


def test_word_channels_read_on_a_second_thread_rank_exactly_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The eval corpus is far below the size from which a store reads its word channels on
    # a second thread; lowering the threshold (and calling the machine idle, whatever its
    # load) sends every search down that path.
    monkeypatch.setattr(sqlite_store, "PARALLEL_READS_MIN_ROWS", 0)
    monkeypatch.setattr(recalld.threads, "machine_busy", lambda: False)
    threads: list[str] = []
    search_rows = sqlite_store.SQLiteStore.search_rows

    def recording(self: Any, *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return search_rows(self, *args, **kwargs)

    monkeypatch.setattr(sqlite_store.SQLiteStore, "search_rows", recording)
    _assert_rankings_are_mains()
    assert any(name.startswith("recalld-words") for name in threads)
    assert threading.current_thread().name in threads  # the vector channels: this thread

    threads.clear()  # on a busy machine the search stays on its own thread
    monkeypatch.setattr(recalld.threads, "machine_busy", lambda: True)
    _assert_rankings_are_mains()
    assert set(threads) == {threading.current_thread().name}
