"""The runner through its Python entry points (fake embedder: structure, counts, caching)."""

from __future__ import annotations

from pathlib import Path

import pytest

from recalld.bench import System, run_locomo, run_longmemeval
from recalld.bench.systems import build_systems
from recalld.errors import InvalidInputError
from recalld.providers.embedders import FakeEmbedder
from recalld.retrieval.config import get_preset

FIXTURES = Path(__file__).parent.parent / "fixtures"
LME = FIXTURES / "longmemeval_tiny.json"
LOCOMO = FIXTURES / "locomo_tiny.json"


def test_longmemeval_ingests_once_and_caches(tmp_path: Path) -> None:
    first = run_longmemeval(LME, embedder=FakeEmbedder(), cache_dir=tmp_path)
    assert list(first["systems"]) == ["recalld", "rrf", "bm25", "vector"]
    # 8 + 8 turns of the two scored questions, stored once for all three systems
    assert first["speed"]["memories"] == 16
    assert first["speed"]["embedding_cache"] == {"hits": 0, "misses": 16, "state": "cold"}
    second = run_longmemeval(LME, embedder=FakeEmbedder(), cache_dir=tmp_path)
    assert second["speed"]["embedding_cache"] == {"hits": 16, "misses": 0, "state": "warm"}
    assert first["questions"] == {"in_file": 3, "abstention_in_file": 1, "selected": 2,
                                  "scored": 2, "with_turn_labels": 2}  # fmt: skip
    for system in first["systems"].values():
        assert system["latency_ms"]["searches"] == 2
        assert system["latency_ms"]["p50"] <= system["latency_ms"]["p95"]
    assert first["systems"]["bm25"]["config"]["channels"] == ["bm25"]
    # the machine's load is part of every figure's record
    assert set(first["load_average"]) == {"start", "end"}
    assert first["systems"]["vector"]["mode"] == "vector"


def test_custom_configs_without_baselines_or_budgets(tmp_path: Path) -> None:
    base = get_preset("balanced")
    report = run_longmemeval(
        LME,
        configs={"linear": base.with_changes(fusion="linear"),
                 "semantic": System("semantic", base, "vector")},
        baselines=False, budgets=(), embedder=FakeEmbedder(), cache_dir=tmp_path,
        question_ids=["q_bike"],
    )  # fmt: skip
    assert list(report["systems"]) == ["linear", "semantic"]
    assert report["systems"]["linear"]["config"]["fusion"] == "linear"
    metrics = report["systems"]["semantic"]["overall"]["metrics"]
    assert not any(name.startswith("context.") for name in metrics)
    assert report["systems"]["semantic"]["overall"]["n"] == 1
    assert list(report["systems"]["semantic"]["by_group"]) == ["multi-session"]
    # vector search ranks all 8 memories of a 4-session haystack: every session is covered
    assert metrics["session.recall_all@10"] == 1.0


def test_abstention_and_granularity_options(tmp_path: Path) -> None:
    report = run_longmemeval(LME, include_abstention=True, granularity="session",
                             embedder=FakeEmbedder(), cache_dir=tmp_path,
                             baselines=False)  # fmt: skip
    assert report["questions"]["scored"] == 3
    assert report["speed"]["memories"] == 3 + 4 + 2
    metrics = report["systems"]["recalld"]["overall"]["metrics"]
    assert not any(name.startswith("turn.") for name in metrics)
    assert report["systems"]["recalld"]["overall"]["counts"]["context.evidence@1000"] == 3


def test_locomo_runner_counts(tmp_path: Path) -> None:
    report = run_locomo(LOCOMO, embedder=FakeEmbedder(), cache_dir=tmp_path)
    assert report["questions"] == {"conversations": 1, "in_file": 5, "selected": 4, "scored": 3,
                                   "without_evidence": 1, "unknown_evidence_ids": 1}  # fmt: skip
    vector = report["systems"]["vector"]["overall"]
    # six memories: any ranking of them puts every evidence turn in the top 10
    assert vector["metrics"]["turn.evidence_recall@10"] == 1.0
    assert vector["metrics"]["session.recall_all@10"] == 1.0
    assert set(report["systems"]["vector"]["by_group"]) == {"1 multi-hop", "2 temporal",
                                                            "4 single-hop"}  # fmt: skip
    with_adversarial = run_locomo(LOCOMO, embedder=FakeEmbedder(), cache_dir=tmp_path,
                                  categories=(1, 2, 3, 4, 5), baselines=False)  # fmt: skip
    assert with_adversarial["questions"]["scored"] == 4


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="granularity"):
        run_longmemeval(LME, granularity="word", embedder=FakeEmbedder())  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="limit"):
        run_longmemeval(LME, limit=0, embedder=FakeEmbedder())
    with pytest.raises(InvalidInputError, match="no conversation with id"):
        run_locomo(LOCOMO, conversation_ids=["conv-x"], embedder=FakeEmbedder())
    with pytest.raises(InvalidInputError, match="unique"):
        build_systems({"bm25": get_preset("balanced")})
    with pytest.raises(InvalidInputError, match="budgets"):
        run_longmemeval(LME, budgets=(0,), embedder=FakeEmbedder(), cache_dir=tmp_path)
