"""Stage 5 (rerank) and the rerankers: a generated ONNX cross-encoder, the LLM reranker and
the ``/v1/rerank`` client against the loopback server, MaxSim on the packaged MiniLM."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from model_server import ModelServer, Reply, chat

from conftest import MEMORIES, open_corpus, ranking
from recalld.errors import InvalidInputError, ModelError
from recalld.interfaces.cli import cli
from recalld.providers import llm as llm_module
from recalld.providers.llm import ModelCache, OpenAIChat
from recalld.providers.rerankers import (
    FakeReranker,
    HttpReranker,
    LLMReranker,
    MaxSimReranker,
    OnnxCrossEncoder,
    resolve_reranker,
)
from recalld.retrieval.config import BALANCED
from recalld.retrieval.models import Models
from recalld.retrieval.rerank import best_chunk, retrieval_weight

NOW = datetime(2026, 1, 1, tzinfo=UTC)
QUERY = "when does my sibling come?"
RERANK = "/v1/rerank"


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llm_module, "BACKOFF_S", 0.01)


def with_reranker(tmp_path: Path, reranker: FakeReranker, **config: object):  # type: ignore[no-untyped-def]
    engine = open_corpus(tmp_path)
    engine._models = Models(None, reranker, ModelCache(None))
    if config:
        engine.config = engine.config.with_changes(**config)
    return engine


# -- the stage ----------------------------------------------------------------------------


def test_best_chunk_is_the_window_with_most_query_terms() -> None:
    filler = " ".join(f"w{i}" for i in range(300))
    content = f"{filler} the sister arrives friday sister {filler}"
    chunk = best_chunk(content, ["sister", "friday"], 100)
    assert "sister arrives friday" in chunk and len(chunk.split()) == 100
    assert best_chunk("short text", ["sister"], 100) == "short text"


def test_the_blend_follows_the_fused_position(tmp_path: Path) -> None:
    plain = open_corpus(tmp_path / "plain")
    fused_order = [h.memory.id for h in plain.search(QUERY, limit=8, config=BALANCED.plain(),
                                                      as_of=NOW).hits]  # fmt: skip
    plain.close()
    # The reranker prefers the candidate retrieval ranked last.
    last = fused_order[-1]
    engine = with_reranker(tmp_path / "r", FakeReranker(lambda q, p: 1.0 if p == content(last)
                                                        else 0.0))  # fmt: skip
    config = BALANCED.plain().with_changes(rerank_depth=40)  # plain() alone skips stage 5
    result = engine.search(QUERY, limit=8, config=config, explain=True, as_of=NOW)
    for hit in result.hits:
        assert hit.trace is not None
        blend = hit.trace.rerank
        position = int(blend["position"])
        weight = retrieval_weight(position, BALANCED)
        assert blend["blended"] == pytest.approx(weight / position + (1 - weight)
                                                 * blend["reranker"])  # fmt: skip
        assert hit.score == pytest.approx(blend["blended"])  # plain(): no adjustments
    assert (retrieval_weight(1, BALANCED), retrieval_weight(4, BALANCED),
            retrieval_weight(11, BALANCED)) == (0.75, 0.60, 0.40)  # fmt: skip
    moved = [h.memory.id for h in result.hits]
    assert moved.index(last) < fused_order.index(last)
    engine.close()


def content(memory_id: str) -> str:
    return next(m.content for m in MEMORIES if m.id == memory_id)


def test_candidates_past_the_depth_keep_their_retrieval_order(tmp_path: Path) -> None:
    plain = open_corpus(tmp_path / "plain")
    fused_order = [h.memory.id for h in plain.search(QUERY, limit=8, config=BALANCED.plain(),
                                                      as_of=NOW).hits]  # fmt: skip
    plain.close()
    reverse = {memory_id: i / 10 for i, memory_id in enumerate(fused_order)}
    engine = with_reranker(tmp_path / "r", FakeReranker(
        lambda q, p: reverse[next(m.id for m in MEMORIES if m.content == p)]))  # fmt: skip
    config = BALANCED.plain().with_changes(rerank_depth=3)
    result = engine.search(QUERY, limit=8, config=config, explain=True, as_of=NOW)
    ids = [h.memory.id for h in result.hits]
    assert sorted(ids[:3]) == sorted(fused_order[:3])  # the scored head stays above
    assert ids[3:] == fused_order[3:]  # the rest keep their order
    assert all("reranker" not in h.trace.rerank for h in result.hits[3:] if h.trace)
    engine.close()


def test_scores_are_cached(tmp_path: Path) -> None:
    reranker = FakeReranker(lambda q, p: len(p) / 100)
    engine = with_reranker(tmp_path, reranker)
    first = engine.search(QUERY, as_of=NOW)
    second = engine.search(QUERY, as_of=NOW)
    assert reranker.calls == 1
    note = second.details["stages"][-1]
    assert note["stage"] == "rerank" and note["calls"] == 0 and note["cache_hits"] > 0
    assert ranking(first) == ranking(second)
    engine.close()


def test_a_failing_reranker_leaves_the_fused_order(tmp_path: Path) -> None:
    plain = open_corpus(tmp_path / "plain")
    expected = ranking(plain.search(QUERY, as_of=NOW))
    assert "stages" not in plain.search(QUERY, as_of=NOW).details  # nothing configured
    plain.close()

    def broken(query: str, passage: str) -> float:
        raise ModelError("the model fell over")

    engine = with_reranker(tmp_path / "r", FakeReranker(broken))
    result = engine.search(QUERY, as_of=NOW)
    assert ranking(result) == expected
    note = result.details["stages"][-1]
    assert note["status"] == "skipped" and "fell over" in note["reason"]
    engine.close()


# -- the /v1/rerank endpoint --------------------------------------------------------------


def test_http_reranker_reads_cohere_and_tei_shapes(server: ModelServer) -> None:
    reranker = HttpReranker(server.url + RERANK, model="rerank-tiny", timeout=1.0)
    server.queue(RERANK, Reply({"results": [{"index": 1, "relevance_score": 0.2},
                                            {"index": 0, "relevance_score": 0.9}]}))  # fmt: skip
    assert reranker.score("q", ["a", "b"]) == [0.9, 0.2]
    assert server.requests[0][1] == {"query": "q", "documents": ["a", "b"], "top_n": 2,
                                     "model": "rerank-tiny"}  # fmt: skip
    server.queue(RERANK, Reply([{"index": 0, "score": 2.0}, {"index": 1, "score": -2.0}]))
    logits = reranker.score("q", ["a", "b"])
    assert logits == pytest.approx([1 / (1 + math.exp(-2)), 1 / (1 + math.exp(2))])


@pytest.mark.parametrize(
    "reply",
    [
        Reply("{not json"),
        Reply(
            {
                "results": [
                    {"index": 0, "relevance_score": "high"},
                    {"index": 1, "relevance_score": 1},
                ]
            }
        ),
        Reply({"results": [{"index": 0, "relevance_score": 0.5}]}),
        Reply({"results": []}),
        Reply({"error": "down"}, 500),
        Reply({"results": [{"index": 0, "relevance_score": 0.5}]}, delay_s=1.5),
    ],
    ids=["malformed-json", "wrong-types", "missing-score", "empty", "500", "slow"],
)
def test_http_reranker_failures_are_model_errors_and_the_search_fails_soft(
    server: ModelServer, tmp_path: Path, reply: Reply
) -> None:
    server.queue(RERANK, reply)
    with pytest.raises(ModelError):
        HttpReranker(server.url + RERANK, timeout=0.5).score("q", ["a", "b"])
    plain = open_corpus(tmp_path / "plain")
    expected = ranking(plain.search(QUERY, as_of=NOW))
    plain.close()
    engine = open_corpus(tmp_path / "r", reranker=f"http:{server.url}{RERANK}", llm_timeout=0.5,
                         cache_dir=None)  # fmt: skip
    result = engine.search(QUERY, as_of=NOW)
    assert ranking(result) == expected
    assert result.details["stages"][-1]["status"] == "skipped"
    engine.close()


def test_http_reranker_retries_a_429(server: ModelServer) -> None:
    server.queue(RERANK, Reply({"error": "later"}, 429, headers={"Retry-After": "0"}),
                 Reply({"results": [{"index": 0, "relevance_score": 0.7}]}))  # fmt: skip
    assert HttpReranker(server.url + RERANK).score("q", ["a"]) == [0.7]
    assert server.paths(RERANK) == 2


def test_the_cli_reranks_and_explains_the_blend(server: ModelServer, tmp_path: Path) -> None:
    engine = open_corpus(tmp_path)
    engine.close()

    def answer(path: str, body: dict[str, object]) -> Reply:
        documents = body["documents"]
        assert isinstance(documents, list)
        return Reply({"results": [{"index": i, "relevance_score": 0.5}
                                  for i in range(len(documents))]})  # fmt: skip

    server.answer = answer
    env = {"RECALLD_CONFIG": str(tmp_path / "none.toml"), "RECALLD_CACHE_DIR": str(tmp_path)}
    (tmp_path / "none.toml").write_text("")
    done = CliRunner().invoke(cli, ["--db", str(tmp_path / "m.db"), "--embedder", "fake",
                                    "--reranker", f"http:{server.url}{RERANK}", "search", QUERY,
                                    "--explain"], env=env)  # fmt: skip
    assert done.exit_code == 0, done.output
    assert "rerank ran" in done.output and "x reranker 0.5000" in done.output
    bad = CliRunner().invoke(cli, ["--db", str(tmp_path / "m.db"), "--embedder", "fake",
                                   "--reranker", "magic", "search", QUERY], env=env)  # fmt: skip
    assert bad.exit_code == 2 and "unknown reranker" in bad.output


# -- the LLM reranker ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ({"scores": [9, 2.5]}, [0.9, 0.25]),
        ('{"scores": [9, ', None),
        ({"scores": ["9", "2"]}, None),
        ({"scores": [9]}, None),
        ({"scores": [11, 2]}, None),
        ({"scores": [True, 2]}, None),
        ("", None),
    ],
    ids=["valid", "malformed-json", "wrong-types", "too-few", "out-of-range", "bool", "empty"],
)
def test_llm_reranker_validates_scores(server: ModelServer, content: object,
                                       expected: list[float] | None) -> None:  # fmt: skip
    server.queue("/v1/chat/completions", chat(content))
    reranker = LLMReranker(OpenAIChat("tiny", server.url + "/v1", timeout=1.0))
    if expected is None:
        with pytest.raises(ModelError):
            reranker.score(QUERY, ["Ana arrives Friday", "tea"])
    else:
        assert reranker.score(QUERY, ["Ana arrives Friday", "tea"]) == pytest.approx(expected)
        prompt = server.requests[0][1]["messages"][0]["content"]
        assert "[1] Ana arrives Friday" in prompt and "[2] tea" in prompt


def test_reranker_specs(tmp_path: Path) -> None:
    from recalld.config import Settings

    base = {"db": tmp_path / "m.db"}
    assert resolve_reranker(Settings(**base), None) is None
    with pytest.raises(InvalidInputError, match="needs an LLM"):
        resolve_reranker(Settings(**base, reranker="llm"), None)
    with pytest.raises(InvalidInputError, match="not found"):
        resolve_reranker(Settings(**base, reranker=f"onnx:{tmp_path}"), None)
    http = resolve_reranker(Settings(**base, reranker="http:http://127.0.0.1:1/v1/rerank#m"), None)
    assert http is not None and http.model_id == "http:http://127.0.0.1:1/v1/rerank#m"


# -- the ONNX cross-encoder, on a tiny graph built here ------------------------------------

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "when", "does", "my", "sister", "come", "ana",
         "arrives", "friday", "i", "like", "tea"]  # fmt: skip
WEIGHTS = {"sister": 2.0, "ana": 1.5, "arrives": 1.0, "friday": 1.0, "tea": -1.0}
BIAS = -1.0


def tiny_cross_encoder(folder: Path) -> Path:
    """A cross-encoder whose logit is the bias plus the weights of the *passage's* tokens
    (token type 1, inside the attention mask): it only works if pairs are encoded right."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    folder.mkdir(parents=True, exist_ok=True)
    ids = {word: i for i, word in enumerate(VOCAB)}
    tokenizer = Tokenizer(models.WordLevel(ids, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
    )  # fmt: skip
    tokenizer.save(str(folder / "tokenizer.json"))
    table = np.zeros((len(VOCAB), 1), dtype=np.float32)
    for word, weight in WEIGHTS.items():
        table[ids[word], 0] = weight
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"])
              for n in ("input_ids", "attention_mask", "token_type_ids")]  # fmt: skip
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["gathered"]),  # [B, S, 1]
        helper.make_node("Cast", ["token_type_ids"], ["types"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["types", "mask"], ["passage"]),
        helper.make_node("Unsqueeze", ["passage", "axis2"], ["passage3"]),
        helper.make_node("Mul", ["gathered", "passage3"], ["weighted"]),
        helper.make_node("ReduceSum", ["weighted", "axis1"], ["summed"], keepdims=0),
        helper.make_node("Add", ["summed", "bias"], ["logits"]),  # [B, 1]
    ]
    graph = helper.make_graph(
        nodes, "tiny-cross-encoder", inputs,
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1])],
        initializer=[numpy_helper.from_array(table, "table"),
                     numpy_helper.from_array(np.array([2], dtype=np.int64), "axis2"),
                     numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
                     numpy_helper.from_array(np.array([BIAS], dtype=np.float32), "bias")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(folder / "model.onnx"))
    return folder


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def test_the_onnx_cross_encoder_scores_pairs(tmp_path: Path) -> None:
    reranker = OnnxCrossEncoder(tiny_cross_encoder(tmp_path / "ce"))
    scores = reranker.score("when does my sister come", ["Ana arrives Friday", "I like tea"])
    assert scores == pytest.approx([sigmoid(BIAS + 1.5 + 1 + 1), sigmoid(BIAS - 1.0)], abs=1e-6)
    # The query's own words carry token type 0: "sister" in the query adds nothing.
    assert reranker.score("sister sister", ["I like"]) == pytest.approx([sigmoid(BIAS)])
    assert reranker.score("q", []) == []


def test_the_onnx_cross_encoder_reranks_a_search(tmp_path: Path) -> None:
    folder = tiny_cross_encoder(tmp_path / "ce")
    engine = open_corpus(tmp_path, reranker=f"onnx:{folder}")
    result = engine.search(QUERY, explain=True, as_of=NOW)
    note = result.details["stages"][-1]
    assert note["status"] == "ran" and note["reason"].endswith("scored by onnx:ce")
    scored = {h.memory.id: h.trace.rerank.get("reranker") for h in result.hits if h.trace}
    assert scored["sister"] == pytest.approx(sigmoid(BIAS + 2 + 1.5 + 1 + 1), abs=1e-6)
    engine.close()


# -- MaxSim on the packaged model ---------------------------------------------------------


def test_maxsim_prefers_the_passage_that_shares_meaning() -> None:
    reranker = MaxSimReranker()
    assert reranker.calibrated is False
    scores = reranker.score("when does my sister arrive?",
                            ["My sister Ana lands on Friday.", "Green tea is good."])  # fmt: skip
    assert scores[0] > scores[1]
    assert all(-1.0 <= s <= 1.0 for s in scores)
    # Passages come back from the in-memory cache, scored the same.
    assert reranker.score("when does my sister arrive?", ["Green tea is good."]) == pytest.approx(
        [scores[1]], abs=1e-5)  # fmt: skip


# -- recalld bench with the model stages --------------------------------------------------


def test_bench_runs_with_an_llm_and_a_reranker(server: ModelServer, tmp_path: Path) -> None:
    def answer(path: str, body: dict[str, object]) -> Reply:
        if path == RERANK:
            documents = body["documents"]
            assert isinstance(documents, list)
            return Reply({"results": [{"index": i, "relevance_score": 0.5}
                                      for i in range(len(documents))]})  # fmt: skip
        return chat({"lex": ["iguana"], "vec": ["what pet lizard"], "hyde": None})

    server.answer = answer
    (tmp_path / "empty.toml").write_text("")
    out = tmp_path / "lme.json"
    lme = Path(__file__).parent.parent / "fixtures" / "longmemeval_tiny.json"
    done = CliRunner().invoke(cli, [
        "bench", "longmemeval", str(lme), "--cache-dir", str(tmp_path / "c"), "--budget", "1000",
        "--llm", "openai:tiny", "--llm-base-url", server.url + "/v1",
        "--reranker", f"http:{server.url}{RERANK}", "--json", str(out),
    ], env={"RECALLD_CONFIG": str(tmp_path / "empty.toml"),
            "RECALLD_EMBEDDER": "fake"})  # fmt: skip
    assert done.exit_code == 0, done.output
    report = json.loads(out.read_text())
    assert "--llm openai:tiny" in report["command"] and "--reranker" in report["command"]
    assert server.paths(RERANK) >= 2 and server.paths("/v1/chat/completions") >= 2
    assert set(report["systems"]) == {"recalld", "rrf", "bm25", "vector"}


def test_bench_runs_with_a_local_onnx_reranker(tmp_path: Path) -> None:
    folder = tiny_cross_encoder(tmp_path / "ce")
    (tmp_path / "empty.toml").write_text("")
    out = tmp_path / "lme.json"
    lme = Path(__file__).parent.parent / "fixtures" / "longmemeval_tiny.json"
    done = CliRunner().invoke(cli, [
        "bench", "longmemeval", str(lme), "--cache-dir", str(tmp_path / "c"), "--budget", "1000",
        "--reranker", f"onnx:{folder}", "--json", str(out),
    ], env={"RECALLD_CONFIG": str(tmp_path / "empty.toml"),
            "RECALLD_EMBEDDER": "fake"})  # fmt: skip
    assert done.exit_code == 0, done.output
    assert f"--reranker onnx:{folder}" in json.loads(out.read_text())["command"]
    assert (tmp_path / "c" / "models.sqlite").is_file()  # scores cached beside the embeddings


def test_the_llm_reranker_in_the_pipeline(server: ModelServer, tmp_path: Path) -> None:
    def answer(path: str, body: dict[str, object]) -> Reply:
        messages = body["messages"]
        assert isinstance(messages, list)
        prompt = messages[-1]["content"]
        if "Rate how well" in prompt:
            count = prompt.count("\n[")
            return chat({"scores": [10 if "Ana arrives" in line else 0
                                    for line in prompt.split("\n[")[1:]][:count]})  # fmt: skip
        return chat("no expansion today")

    server.answer = answer
    engine = open_corpus(tmp_path, llm="openai:tiny", llm_base_url=server.url + "/v1",
                         reranker="llm")  # fmt: skip
    result = engine.search(QUERY, explain=True, as_of=NOW)
    stages = {n["stage"]: n for n in result.details["stages"]}
    assert stages["expand"]["reason"] == "malformed expansion answer"
    assert stages["rerank"]["status"] == "ran" and stages["rerank"]["calls"] == 1
    sister = next(h for h in result.hits if h.memory.id == "sister")
    assert sister.trace is not None and sister.trace.rerank["reranker"] == 1.0
    engine.close()
