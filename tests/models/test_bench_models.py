"""The benchmarks run the optional stages a user configures: workloads with a reranker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from model_server import ModelServer, Reply

from recalld.bench.workloads_run import run_workloads
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder

TINY = Path(__file__).parent.parent / "fixtures" / "workloads_tiny.json"
RERANK = "/v1/rerank"


def test_workloads_runs_the_configured_reranker(server: ModelServer, tmp_path: Path) -> None:
    def reverse(path: str, body: dict[str, Any]) -> Reply:
        # Scores the passages in reverse retrieval order: the last one best.
        n = len(body["documents"])
        return Reply({"results": [{"index": i, "relevance_score": i / n} for i in range(n)]})

    server.answer = reverse
    plain = run_workloads(TINY, embedder=FakeEmbedder(), cache_dir=tmp_path, baselines=False)
    assert server.paths(RERANK) == 0
    settings = Settings.model_construct(reranker=f"http:{server.url}{RERANK}", llm_timeout=2.0,
                                        cache_dir=tmp_path)  # fmt: skip
    report = run_workloads(TINY, embedder=FakeEmbedder(), cache_dir=tmp_path, baselines=False,
                           settings=settings)  # fmt: skip
    asked = sum(len(p["systems"]) for p in report["probes"])
    assert server.paths(RERANK) >= 1 and server.paths(RERANK) <= asked
    tops = [p["systems"]["recalld"]["top"] for p in report["probes"]]
    assert tops != [p["systems"]["recalld"]["top"] for p in plain["probes"]]
