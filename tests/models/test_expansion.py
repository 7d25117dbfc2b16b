"""Stage 2 (expansion) and ``auto`` routing against the loopback chat server."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from model_server import ModelServer, Reply, chat

from conftest import open_corpus, ranking
from recalld.providers.embedders import FakeEmbedder
from recalld.providers.llm import FakeLLM, ModelCache
from recalld.retrieval.config import BALANCED
from recalld.retrieval.expand import parse_expansion, prompt, strong_signal
from recalld.retrieval.models import Models
from recalld.retrieval.query import understand
from recalld.retrieval.routing import parse_route

NOW = datetime(2026, 1, 1, tzinfo=UTC)
VALID = {"lex": ["sister visit Porto"], "vec": ["when is Ana coming"],
         "hyde": "My sister arrives on Friday."}  # fmt: skip
CHAT = "/v1/chat/completions"


def llm_settings(server: ModelServer, **more: Any) -> dict[str, Any]:
    return {"llm": "openai:tiny", "llm_base_url": server.url + "/v1", "llm_timeout": 0.5,
            **more}  # fmt: skip


def test_a_valid_answer_parses_into_typed_expansions() -> None:
    parsed = parse_expansion("```json\n" + json.dumps(VALID) + "\n```", "when is she here?")
    assert parsed is not None
    assert parsed.lex == ("sister visit Porto",) and parsed.vec == ("when is Ana coming",)
    assert parsed.hyde == "My sister arrives on Friday."
    no_hyde = parse_expansion(json.dumps({"lex": ["a b"], "vec": ["c d"], "hyde": None}), "q")
    assert no_hyde is not None and no_hyde.hyde is None


@pytest.mark.parametrize(
    "answer",
    [
        "",
        "lex: sister\nvec: when is she coming",
        '{"lex": ["sister"], "vec": ["when"',
        json.dumps({"lex": "sister", "vec": ["when"]}),
        json.dumps({"lex": ["sister"], "vec": [3]}),
        json.dumps({"lex": [], "vec": ["when"]}),
        json.dumps({"lex": ["a", "b", "c", "d"], "vec": ["when"]}),
        json.dumps({"lex": ["a"], "vec": ["when"], "hyde": ["one", "two"]}),
        json.dumps({"lex": ["a"], "vec": ["when"], "extra": "x"}),
        json.dumps({"lex": ["a"], "vec": ["x" * 500]}),
        json.dumps(["lex", "vec"]),
    ],
    ids=[
        "empty",
        "plain-lines",
        "malformed-json",
        "lex-not-list",
        "vec-number",
        "no-lex",
        "four-lex",
        "two-hyde",
        "unknown-key",
        "too-long",
        "not-object",
    ],  # fmt: skip
)
def test_anything_but_the_typed_shape_means_no_expansion(answer: str) -> None:
    assert parse_expansion(answer, "when is she here?") is None


def test_preference_prompts_carry_the_users_profile_and_temporal_prompts_keep_time() -> None:
    preference = understand("can you recommend a tea for me?", "auto", NOW)
    text = prompt(preference, ["I prefer green tea over coffee in the morning."])
    assert "green tea" in text and "tastes" in text
    temporal = understand("what did I do last week?", "auto", NOW)
    assert "date" in prompt(temporal, []) and "green tea" not in prompt(temporal, [])
    plain = understand("zebrafish experiment new incubator", "auto", NOW)
    assert "tastes" not in prompt(plain, []) and "date" not in prompt(plain, [])


def test_the_profile_is_the_users_own_memories(tmp_path: Path) -> None:
    seen: list[str] = []

    def answer(text: str) -> str:
        seen.append(text)
        return json.dumps(VALID)

    engine = open_corpus(tmp_path)
    engine._models = Models(FakeLLM(answer), None, ModelCache(None))
    engine.search("can you recommend a tea for me?", mode="hybrid", as_of=NOW)
    assert "green tea over coffee" in seen[0]
    assert "jasmine" not in seen[0]  # the assistant's turn is not the user's profile
    engine.close()


def test_expansions_run_on_their_channels_weighted_below_the_original(
    server: ModelServer, tmp_path: Path
) -> None:
    server.queue(CHAT, chat({"complexity": "complex", "domains": 1}), chat(VALID))
    engine = open_corpus(tmp_path, **llm_settings(server))
    result = engine.search("when does my sibling come?", explain=True, as_of=NOW)
    stages = {n["stage"]: n for n in result.details["stages"]}
    assert stages["route"]["status"] == "ran" and result.mode == "hybrid"
    assert stages["expand"]["status"] == "ran" and stages["expand"]["calls"] == 1
    assert stages["expand"]["reason"] == "1 lex, 1 vec, 1 hyde"
    assert stages["rerank"]["reason"] == "no reranker configured"
    lists = {name for h in result.hits if h.trace for name in h.trace.fusion}
    assert {"bm25:lex1", "semantic:vec1", "semantic:hyde", "semantic"} <= lists
    top = result.hits[0].trace
    assert top is not None
    for name, share in top.fusion.items():
        rank = next((c.rank for c in top.channels if c.channel == name), None)
        if rank is not None and name == "semantic":
            assert share == pytest.approx(2.0 / (60 + rank))  # original x2
        elif rank is not None and name.startswith("semantic:"):
            assert share == pytest.approx(1.0 / (60 + rank))  # expansion x1, no bonus
    # The same search again costs no call: routing and expansion come from the cache.
    again = engine.search("when does my sibling come?", as_of=NOW)
    assert all(n["calls"] == 0 for n in again.details["stages"])
    assert ranking(again) == ranking(result)
    assert server.paths(CHAT) == 2
    engine.close()


def test_all_query_vectors_are_embedded_in_one_batch(server: ModelServer, tmp_path: Path) -> None:
    server.queue(CHAT, chat(VALID))
    engine = open_corpus(tmp_path, **llm_settings(server))
    embedder = engine.embedder
    assert isinstance(embedder, FakeEmbedder)
    before = embedder.calls
    engine.search("when does my sibling come?", mode="hybrid", as_of=NOW)
    assert embedder.calls - before == 1  # original + vec + hyde in one embed_batch
    engine.close()


def test_a_strong_bm25_signal_skips_expansion(server: ModelServer, tmp_path: Path) -> None:
    engine = open_corpus(tmp_path, **llm_settings(server))
    plan = understand("zebrafish experiment new incubator", "hybrid", NOW)
    signal = strong_signal(engine.store, plan, engine_filters(), BALANCED)
    assert signal is not None and signal[0] >= BALANCED.expansion.strong_signal_score
    result = engine.search("zebrafish experiment new incubator", mode="hybrid", as_of=NOW)
    note = result.details["stages"][0]
    assert note["stage"] == "expand" and note["status"] == "skipped"
    assert note["reason"].startswith("strong BM25 signal")
    assert server.paths(CHAT) == 0
    strict = BALANCED.with_changes(strong_signal_score=1.0)
    assert strong_signal(engine.store, plan, engine_filters(), strict) is None
    engine.close()


def engine_filters():  # type: ignore[no-untyped-def]
    from recalld.records import MemoryFilter

    return MemoryFilter()


SCENARIOS = {
    "malformed-json": [chat('{"lex": ["a"')],
    "wrong-types": [chat({"lex": "a", "vec": 3})],
    "empty": [chat("")],
    "slow": [Reply(chat(VALID).body, delay_s=1.5)],
    "500": [Reply({"error": "down"}, 500)],
    "429-then-success": [
        Reply({"error": "later"}, 429, headers={"Retry-After": "0"}),
        chat(VALID),
    ],  # fmt: skip
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_failure_falls_back_to_the_unexpanded_search(
    server: ModelServer, tmp_path: Path, scenario: str
) -> None:
    baseline_engine = open_corpus(tmp_path / "plain")
    baseline = ranking(baseline_engine.search("when does my sibling come?", mode="hybrid",
                                              as_of=NOW))  # fmt: skip
    baseline_engine.close()
    server.queue(CHAT, *SCENARIOS[scenario])
    engine = open_corpus(tmp_path / "llm", **llm_settings(server, cache_dir=None))
    result = engine.search("when does my sibling come?", mode="hybrid", as_of=NOW)
    note = result.details["stages"][0]
    if scenario == "429-then-success":
        assert note["status"] == "ran" and note["calls"] == 2
        return
    assert note["status"] == "skipped", note
    assert ranking(result) == baseline  # the search still answers, exactly as without an LLM
    expected = "malformed" if scenario in ("malformed-json", "wrong-types", "empty") else "failed"
    assert expected in note["reason"]
    engine.close()


def test_an_unreachable_llm_still_answers(tmp_path: Path) -> None:
    engine = open_corpus(tmp_path, llm="openai:tiny", llm_base_url="http://127.0.0.1:9/v1")
    result = engine.search("when does my sibling come?", as_of=NOW)
    assert result.hits
    assert [n["status"] for n in result.details["stages"]] == ["skipped", "skipped", "skipped"]
    assert "unreachable" in result.details["stages"][0]["reason"]
    engine.close()


@pytest.mark.parametrize(
    ("answer", "mode"),
    [
        ({"complexity": "simple", "domains": 1}, "vector"),
        ({"complexity": "simple", "domains": 3}, "hybrid"),
        ({"complexity": "reasoning", "domains": 1}, "hybrid"),
        ({"complexity": "complex", "domains": 2}, "hybrid"),
        ({"complexity": "easy", "domains": 1}, None),
        ({"complexity": "simple", "domains": "1"}, None),
        ({"complexity": "simple", "domains": True}, None),
        ({"complexity": "simple"}, None),
    ],
)
def test_routing_answers(answer: dict[str, Any], mode: str | None) -> None:
    assert parse_route(json.dumps(answer)) == mode
    assert parse_route("not json") is None


def test_routing_applies_to_auto_only_and_fails_soft(server: ModelServer, tmp_path: Path) -> None:
    expand_off = {"expand": False}
    server.queue(CHAT, chat({"complexity": "simple", "domains": 1}))
    engine = open_corpus(tmp_path, **llm_settings(server))
    config = engine.config.with_changes(**expand_off)
    routed = engine.search("when does my sibling come?", config=config, as_of=NOW)
    assert routed.mode == "vector"
    assert routed.details["stages"][0]["reason"] == "routed to vector"
    explicit = engine.search("when does my sibling come?", mode="hybrid", config=config)
    assert explicit.mode == "hybrid" and [n["stage"] for n in explicit.details["stages"]] == [
        "expand", "rerank"]  # fmt: skip
    server.queue(CHAT, chat("I think it is simple"))
    fallback = engine.search("who is my sibling?", config=config, as_of=NOW)
    assert fallback.mode == "hybrid"  # the offline rule: the query has lexical terms
    assert fallback.details["stages"][0]["reason"] == "malformed routing answer"
    engine.close()


@pytest.mark.parametrize(
    "reply",
    [
        chat(""),
        chat({"complexity": 3, "domains": "two"}),
        Reply({"error": "down"}, 500),
        Reply(chat({"complexity": "simple", "domains": 1}).body, delay_s=1.5),
    ],
    ids=["empty", "wrong-types", "500", "slow"],
)
def test_routing_failures_keep_the_offline_mode(server: ModelServer, tmp_path: Path,
                                                reply: Reply) -> None:  # fmt: skip
    server.queue(CHAT, reply)
    engine = open_corpus(tmp_path, **llm_settings(server, cache_dir=None))
    result = engine.search("who is my sibling?", config=engine.config.with_changes(expand=False))
    assert result.mode == "hybrid" and result.hits
    note = result.details["stages"][0]
    assert note["stage"] == "route" and note["status"] == "skipped"
    engine.close()
