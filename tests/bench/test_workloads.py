"""The workloads benchmark: loader checks, FORMAT.md's metrics, the runner and its report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import recalld
from recalld.bench.workloads import WorkloadQuery, load_workloads, score_query
from recalld.bench.workloads_report import workloads_markdown
from recalld.bench.workloads_run import fill_store, run_workloads
from recalld.errors import InvalidInputError
from recalld.providers.embedders import FakeEmbedder

FIXTURES = Path(__file__).parent.parent / "fixtures"
TINY = FIXTURES / "workloads_tiny.json"


def _query(**fields: Any) -> WorkloadQuery:
    base: dict[str, Any] = {"query_id": "q", "query": "?", "kind": "fact", "gold": ("g",)}
    return WorkloadQuery(**{**base, **fields})


def _ranked(*hits: str) -> list[frozenset[str]]:
    return [frozenset(h.split("+")) if h else frozenset() for h in hits]


# -- metrics -----------------------------------------------------------------------------------


def test_hits_and_mrr_count_the_first_gold() -> None:
    scores = score_query(_ranked("a", "b", "g", "c"), _query())
    assert scores == {"hit@1": 0.0, "hit@5": 1.0, "hit@10": 1.0, "mrr@10": pytest.approx(1 / 3)}


def test_a_gold_past_ten_counts_as_missing() -> None:
    ranked = _ranked(*[f"x{i}" for i in range(10)], "g")
    assert score_query(ranked, _query()) == {"hit@1": 0.0, "hit@5": 0.0, "hit@10": 0.0,
                                             "mrr@10": 0.0}  # fmt: skip


def test_all_at_10_needs_every_gold() -> None:
    query = _query(gold=("g1", "g2"), need_all=True)
    assert score_query(_ranked("g1", "x", "g2"), query)["all@10"] == 1.0
    assert score_query(_ranked("g1", "x"), query)["all@10"] == 0.0


@pytest.mark.parametrize(
    ("hits", "expected"),
    [(("g", "s"), 1.0), (("s", "g"), 0.0), (("g", "x"), 1.0),  # missing stale counts below
     (("x", "s"), 0.0), (("x", "y"), 0.0),  # no gold in the hits: never current
     (("g+s",), 0.0)],  # one hit that is both cannot rank above itself
)  # fmt: skip
def test_current_first(hits: tuple[str, ...], expected: float) -> None:
    assert score_query(_ranked(*hits), _query(stale=("s",)))["current_first"] == expected


def test_metrics_only_where_the_query_asks_for_them() -> None:
    assert set(score_query(_ranked("g"), _query())) == {"hit@1", "hit@5", "hit@10", "mrr@10"}


# -- loader ------------------------------------------------------------------------------------


def _broken(tmp_path: Path, change: Any) -> Path:
    doc = json.loads(TINY.read_text(encoding="utf-8"))
    change(doc)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_loads_the_fixture() -> None:
    workloads = load_workloads(TINY)
    assert workloads.name == "workloads-tiny" and workloads.query_count == 5
    coding, notes = workloads.scenarios
    assert [m.key for m in workloads.pools["office"]] == ["bg-1", "bg-2", "bg-3", "bg-4"]
    assert coding.memories[1].role == "user" and coding.memories[1].session_id == "s1"
    assert coding.queries[1].as_of is not None and coding.queries[2].need_all
    assert set(notes.files) == {"MEMORY.md", "memory/2026-03-19.md", "memory/2026-04-02.md"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["scenarios"][0]["queries"][0].update(gold=["bg-1"]), "pool memories"),
        (lambda d: d["scenarios"][1]["queries"][0].update(gold=["file:MEMORY.md#nowhere"]),
         "text is not in that file"),
        (lambda d: d["scenarios"][1]["queries"][0].update(gold=["file:other.md"]), "names no file"),
        (lambda d: d["scenarios"][0].update(kind="diary"), "kind 'diary'"),
        (lambda d: d["scenarios"][0]["queries"][0].update(kind="trivia"), "kind 'trivia'"),
        (lambda d: d["scenarios"][0]["memories"][0].update(key="m2"), "used twice: m2"),
        (lambda d: d["scenarios"][0]["memories"][0].update(key="bg-1"), "used twice: bg-1"),
        (lambda d: d["scenarios"][0]["memories"][0].update(type="note"), "type 'note'"),
        (lambda d: d["scenarios"][0].update(as_of="2026-03-01"), "not an ISO 8601"),
        (lambda d: d["scenarios"][0].update(as_of="2026-03-01T12:00:00"), "no timezone"),
        (lambda d: d["scenarios"][0].update(background=["nope"]), "pool 'nope'"),
        (lambda d: d["scenarios"][0]["queries"][0].update(gold=[]), "non-empty"),
        (lambda d: d["scenarios"][0]["queries"][0].update(stale=["m4"]), "both gold and stale"),
        (lambda d: d["scenarios"][1].update(id="coding-tiny-01"), "scenario ids"),
        (lambda d: d.pop("pools"), "'pools' is missing"),
    ],
)  # fmt: skip
def test_bad_files_get_a_clear_error(tmp_path: Path, change: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message.replace("(", r"\(")):
        load_workloads(_broken(tmp_path, change))


# -- runner ------------------------------------------------------------------------------------


def test_fill_store_maps_keys_duplicates_and_file_chunks(tmp_path: Path) -> None:
    workloads = load_workloads(TINY)
    coding, notes = workloads.scenarios
    with recalld.open(tmp_path / "a.db", embedder=FakeEmbedder()) as engine:
        keys_of = fill_store(engine, workloads, coding, tmp_path / "ws-a")
        # m7 repeats m1 word for word in the same project: stored once, answering to both
        assert keys_of["m1"] == {"m1", "m7"}
        assert len(keys_of) == 4 + 6 == engine.status().store.memories
        stored = engine.get("m3")
        assert stored.metadata == {"role": "assistant"} and stored.type == "turn"
        assert stored.session_id == "s1" and stored.project == "acme/billing"
        assert engine.get("m5").pinned and engine.get("m5").priority == 1.5
        assert engine.get("m6").evergreen and engine.get("m4").tags == ("redis",)
    with recalld.open(tmp_path / "b.db", embedder=FakeEmbedder()) as engine:
        keys_of = fill_store(engine, workloads, notes, tmp_path / "ws-b")
        files = {k for keys in keys_of.values() for k in keys if k.startswith("file:")}
        assert {"file:MEMORY.md", "file:memory/2026-03-19.md", "file:memory/2026-04-02.md",
                "file:MEMORY.md#Qualifying exam: 12 May 2026",
                "file:memory/2026-04-02.md#Zoom H5"} <= files  # fmt: skip
        chunk = next(i for i, keys in keys_of.items() if "file:memory/2026-04-02.md" in keys)
        # a daily note is dated by its name, as `recalld index` does for a user
        assert engine.get(chunk).event_time is not None


def test_run_reports_every_system_kind_and_pair(tmp_path: Path) -> None:
    report = run_workloads(TINY, embedder=FakeEmbedder(), cache_dir=tmp_path)
    assert list(report["systems"]) == ["recalld", "rrf", "bm25", "vector"]
    assert report["questions"] == {"name": "workloads-tiny", "scenarios": 2, "queries": 5}
    assert report["systems"]["rrf"]["mode"] == "hybrid"
    assert report["systems"]["rrf"]["config"]["role_boost"] == 1.0
    assert report["systems"]["bm25"]["config"]["channels"] == ["bm25"]
    assert report["systems"]["vector"]["mode"] == "vector"
    recalld_report = report["systems"]["recalld"]
    assert recalld_report["overall"]["counts"] == {"hit@1": 5, "hit@5": 5, "hit@10": 5,
                                                   "mrr@10": 5, "all@10": 1,
                                                   "current_first": 2}  # fmt: skip
    assert set(recalld_report["by_group"]) == {"coding", "notes"}
    assert set(recalld_report["by_query_kind"]) == {"update", "assistant-said", "aggregation",
                                                    "fact"}  # fmt: skip
    assert recalld_report["latency_ms"]["searches"] == 5
    ids = [p["id"] for p in report["probes"]]
    assert ids[0] == "coding-tiny-01/q1" and len(ids) == 5
    pairs = {(c["system"], c["against"], c["metric"]) for c in report["comparisons"]}
    assert pairs == {("recalld", "rrf", "hit@1"), ("recalld", "rrf", "mrr@10")}
    for c in report["comparisons"]:
        assert len(c["wins"]) + len(c["losses"]) + c["ties"] == 5
    # BM25 finds the only note naming the recorder, through the file key with its text
    recorder = report["probes"][-1]["systems"]["bm25"]
    assert recorder["scores"]["hit@1"] == 1.0
    assert recorder["top"][0] == "file:memory/2026-04-02.md"
    # 10 in the first store, the 4 pool memories again in the second
    assert report["speed"]["memories"] == 14 and report["speed"]["file_chunks"] >= 3
    assert report["speed"]["embedding_cache"]["misses"] > 0
    again = run_workloads(TINY, embedder=FakeEmbedder(), cache_dir=tmp_path, baselines=False)
    assert again["speed"]["embedding_cache"]["misses"] == 0
    assert list(again["systems"]) == ["recalld"] and again["comparisons"] == []
    assert len(report["load_average"]["start"]) == 3
    markdown = workloads_markdown(report)
    assert "load average (1, 5, 15 min)" in markdown
    assert "## By scenario kind" in markdown and "| recalld |" in markdown
    assert "**recalld vs rrf** at hit@1" in markdown


def test_a_variant_is_paired_with_the_default(tmp_path: Path) -> None:
    report = run_workloads(TINY, embedder=FakeEmbedder(), cache_dir=tmp_path,
                           variant={"role_boost": 1.0},
                           scenario_ids=["coding-tiny-01"])  # fmt: skip
    assert list(report["systems"]) == ["recalld", "variant", "rrf", "bm25", "vector"]
    assert report["systems"]["variant"]["config"]["role_boost"] == 1.0
    assert report["systems"]["recalld"]["config"]["role_boost"] != 1.0
    pairs = {(c["system"], c["against"]) for c in report["comparisons"]}
    assert pairs == {("recalld", "rrf"), ("variant", "rrf"), ("variant", "recalld")}
    assert report["options"]["variant"] == {"role_boost": 1.0}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"variant": {"no_such_setting": 1}}, "unknown retrieval setting"),
     ({"scenario_ids": ["nope"]}, "no scenario with id nope"),
     ({"limit": 0}, "at least 1"),
     ({"preset": "turbo"}, "unknown preset")],
)  # fmt: skip
def test_bad_runs_are_refused(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        run_workloads(TINY, embedder=FakeEmbedder(), cache_dir=tmp_path, **kwargs)


def test_limit_runs_the_first_scenarios(tmp_path: Path) -> None:
    report = run_workloads(TINY, embedder=FakeEmbedder(), cache_dir=tmp_path, limit=1,
                           baselines=False)  # fmt: skip
    assert report["questions"]["scenarios"] == 1
    assert {p["scenario_kind"] for p in report["probes"]} == {"coding"}


def test_files_outside_the_default_globs_are_indexed_too(tmp_path: Path) -> None:
    doc = json.loads(TINY.read_text(encoding="utf-8"))
    notes = doc["scenarios"][1]
    notes["files"]["notes/plan [v2].md"] = "# Plan\n\nShip the billing export in June.\n"
    notes["queries"].append({"id": "q3", "query": "when do we ship the billing export?",
                             "kind": "fact", "gold": ["file:notes/plan [v2].md"]})  # fmt: skip
    path = tmp_path / "wl.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    report = run_workloads(path, embedder=FakeEmbedder(), cache_dir=tmp_path,
                           scenario_ids=["notes-tiny-02"])  # fmt: skip
    plan = report["probes"][-1]["systems"]["bm25"]
    assert plan["top"][0] == "file:notes/plan [v2].md" and plan["scores"]["hit@1"] == 1.0
