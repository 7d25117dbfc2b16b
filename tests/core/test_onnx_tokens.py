"""ONNX models whose tokenizer is not BERT's: special tokens and prefixes from the folder.

The model built here is one Gather (a token's vector is its row of a table), so a text's
embedding is the mean of its tokens' rows: which tokens the embedder fed is read off it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from recalld.config import Settings
from recalld.errors import EmbedderError
from recalld.providers.embedders import Fingerprint, resolve_embedder
from recalld.providers.onnx import OnnxEmbedder

WORDS = ["<pad>", "<s>", "</s>", "<unk>", "query", "passage", ":", "hello", "world", "iguana"]
VOCAB = {w: i for i, w in enumerate(WORDS)}
TABLE = np.random.default_rng(3).normal(size=(len(WORDS), 8)).astype(np.float32)


def _tokenizer(post_processor: bool = True, words: list[str] = WORDS) -> Tokenizer:
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    if post_processor:
        tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 1))
    return tokenizer


def make_folder(folder: Path, tokenizer: Tokenizer | None = None) -> Path:
    """A model folder: ``model.onnx`` (a lookup table) and ``tokenizer.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "input_ids"], ["last_hidden_state"])],
        "lookup",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "t"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "t"])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["b", "t", 8])],
        [numpy_helper.from_array(TABLE, "table")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(model, str(folder / "model.onnx"))
    (tokenizer or _tokenizer()).save(str(folder / "tokenizer.json"))
    return folder


def expected(*tokens: str) -> np.ndarray:
    vector = TABLE[[VOCAB[t] for t in tokens]].mean(axis=0)
    return vector / np.linalg.norm(vector)


def test_special_tokens_come_from_the_tokenizer(tmp_path: Path) -> None:
    embedder = OnnxEmbedder.from_folder(make_folder(tmp_path / "m"))
    vector = embedder.embed_documents(["hello world"]).vectors[0]
    np.testing.assert_allclose(vector, expected("<s>", "hello", "world", "</s>"), atol=1e-6)
    assert embedder.token_counts(["hello world"]) == [4]
    assert (
        embedder.fingerprint.query_prefix == ""
        and "prefixes" not in embedder.fingerprint.describe()
    )


def test_a_tokenizer_without_post_processor_falls_back_to_its_vocabulary(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "m", _tokenizer(post_processor=False))
    vector = OnnxEmbedder.from_folder(folder).embed_query("iguana")
    np.testing.assert_allclose(vector, expected("<s>", "iguana", "</s>"), atol=1e-6)


def test_a_tokenizer_with_no_special_tokens_is_refused(tmp_path: Path) -> None:
    plain = [w for w in WORDS if w not in ("<s>", "</s>")]
    folder = make_folder(tmp_path / "m", _tokenizer(post_processor=False, words=plain))
    with pytest.raises(EmbedderError, match="adds no special tokens"):
        OnnxEmbedder.from_folder(folder)


def test_prefixes_go_before_queries_and_documents(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "m")
    settings = Settings(embed_query_prefix="query: ", embed_document_prefix="passage: ")
    embedder = resolve_embedder(f"onnx:{folder}", settings)
    query = expected("<s>", "query", ":", "hello", "</s>")
    np.testing.assert_allclose(embedder.embed_query("hello"), query, atol=1e-6)
    document = expected("<s>", "passage", ":", "hello", "</s>")
    np.testing.assert_allclose(embedder.embed_documents(["hello"]).vectors[0], document, atol=1e-6)
    plain = resolve_embedder(f"onnx:{folder}", Settings())
    assert embedder.fingerprint.key != plain.fingerprint.key
    assert "'query: ' / 'passage: '" in embedder.fingerprint.describe()


def test_a_folder_declares_its_own_prompts(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "m")
    prompts = {"prompts": {"query": "query: ", "passage": "passage: "}}
    (folder / "config_sentence_transformers.json").write_text(json.dumps(prompts))
    fingerprint = OnnxEmbedder.from_folder(folder).fingerprint
    assert (fingerprint.query_prefix, fingerprint.document_prefix) == ("query: ", "passage: ")
    # the setting wins over the folder's own, an empty one included
    mine = OnnxEmbedder.from_folder(folder, query_prefix="", document_prefix="passage: ")
    assert (mine.fingerprint.query_prefix, mine.fingerprint.document_prefix) == ("", "passage: ")


def test_a_fingerprint_without_prefixes_reads_as_before() -> None:
    fingerprint = Fingerprint("m", 8, "mean", True, 256, "window-mean/32")
    assert json.loads(fingerprint.to_json()) == {
        "model_id": "m", "dimension": 8, "pooling": "mean", "normalized": True,
        "max_tokens": 256, "long_text": "window-mean/32"}  # fmt: skip
    prefixed = Fingerprint("m", 8, "mean", True, 256, "window-mean/32", query_prefix="q: ")
    assert Fingerprint.from_json(prefixed.to_json()) == prefixed
    assert prefixed.key != fingerprint.key
