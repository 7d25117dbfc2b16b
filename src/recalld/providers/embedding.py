"""The embedder interface and a fake (the registry that resolves ``"provider:model"``
strings, which imports the implementations, is :mod:`recalld.providers.embedders`)."""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from recalld.errors import EmbedderError
from recalld.text import estimate_tokens, words
from recalld.timing import timed

if TYPE_CHECKING:
    pass

Vectors = npt.NDArray[np.float32]

_sharing_cores: ContextVar[bool] = ContextVar("recalld_sharing_cores", default=False)


@contextmanager
def sharing_cores() -> Iterator[None]:
    """Embed on one thread inside this block: the caller runs other work on another thread
    meanwhile (a search reading its word channels), so an embedder with a choice of thread
    pools leaves the other cores to it."""
    token = _sharing_cores.set(True)
    try:
        yield
    finally:
        _sharing_cores.reset(token)


def cores_shared() -> bool:
    """Whether this thread is inside :func:`sharing_cores`."""
    return _sharing_cores.get()


@dataclass(frozen=True)
class Fingerprint:
    """What makes two embedders' vectors comparable; stored with the vectors."""

    model_id: str
    dimension: int
    pooling: str
    normalized: bool
    max_tokens: int
    long_text: str
    """How text longer than ``max_tokens`` is handled (e.g. ``window-mean``)."""
    query_prefix: str = ""
    """Text put before every query (e5's ``"query: "``): the model was trained with it."""
    document_prefix: str = ""
    """Text put before every stored text (e5's ``"passage: "``)."""

    def _fields(self) -> dict[str, object]:
        # Without prefixes, a fingerprint reads as it did before they existed, so stores
        # and caches made then still match.
        return {k: v for k, v in asdict(self).items() if v != "" or k not in _PREFIX_FIELDS}

    @property
    def key(self) -> str:
        """A short stable digest, used as the embedding-cache key prefix."""
        blob = json.dumps(self._fields(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def to_json(self) -> str:
        return json.dumps(self._fields(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Fingerprint:
        return cls(**json.loads(text))

    def prefix(self, *, is_query: bool) -> str:
        """The text put before a query or a stored text."""
        return self.query_prefix if is_query else self.document_prefix

    def describe(self) -> str:
        prefixes = (
            f", prefixes {self.query_prefix!r} / {self.document_prefix!r}"
            if self.query_prefix or self.document_prefix
            else ""
        )
        return f"{self.model_id} ({self.dimension}-d, {self.pooling} pooling{prefixes})"


_PREFIX_FIELDS = ("query_prefix", "document_prefix")


@dataclass(frozen=True)
class EmbeddingBatch:
    """Vectors for a batch of texts, row i for text i, and how many windows each took."""

    vectors: Vectors
    windows: tuple[int, ...]


class Embedder(ABC):
    """Turns texts into L2-normalised vectors. Subclasses implement :meth:`embed_batch`."""

    batch_size: int = 32
    """Capability: the most texts one call to :meth:`embed_batch` takes."""
    batch_tokens: int = 0
    """Capability: the most padded tokens (texts x the longest one's tokens) one call to
    :meth:`embed_batch` takes; 0 bounds batches by ``batch_size`` alone."""

    @property
    @abstractmethod
    def fingerprint(self) -> Fingerprint: ...

    @abstractmethod
    def embed_batch(self, texts: Sequence[str], *, is_query: bool) -> EmbeddingBatch:
        """Embed at most ``batch_size`` texts."""

    @property
    def query_path(self) -> str:
        """How queries are embedded where that differs from documents; ``""`` if it does not."""
        return ""

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """What each text costs the model in tokens; the default is an estimate from its
        characters. Batches are cut from the texts sorted by it."""
        return [estimate_tokens(t) for t in texts]

    def embed_documents(
        self, texts: Sequence[str], progress: Callable[[int], None] | None = None
    ) -> EmbeddingBatch:
        """Embed any number of stored texts: shortest first, in batches bounded by
        ``batch_size`` and ``batch_tokens``; row i of the result is text i."""
        return self._embed_all(texts, is_query=False, progress=progress)

    def embed_query(self, text: str) -> Vectors:
        """Embed one query; returns a 1-D vector."""
        with timed("embed"):  # a stage of the search that runs it (recalld.timing)
            vector: Vectors = self._embed_all([text], is_query=True, progress=None).vectors[0]
        return vector

    def _embed_all(
        self, texts: Sequence[str], *, is_query: bool, progress: Callable[[int], None] | None
    ) -> EmbeddingBatch:
        dim = self.fingerprint.dimension
        vectors = np.zeros((len(texts), dim), dtype=np.float32)
        windows = [0] * len(texts)
        # Each batch is padded to its longest text: sorted by length, short texts travel
        # with short ones. One text (a query) needs no sorting, nor its tokens counted.
        costs = self.token_counts(texts) if len(texts) > 1 else [1] * len(texts)
        order = sorted(range(len(texts)), key=costs.__getitem__)
        for span in plan_batches([costs[i] for i in order], self.batch_size, self.batch_tokens):
            rows = order[span.start : span.stop]
            batch = self.embed_batch([texts[i] for i in rows], is_query=is_query)
            if batch.vectors.shape != (len(rows), dim) or len(batch.windows) != len(rows):
                raise EmbedderError(
                    f"embedder returned vectors of shape {batch.vectors.shape} and "
                    f"{len(batch.windows)} window counts, expected ({len(rows)}, {dim})"
                )
            vectors[rows] = batch.vectors
            for row, count in zip(rows, batch.windows, strict=True):
                windows[row] = count
            if progress is not None:
                progress(len(rows))
        return EmbeddingBatch(vectors, tuple(windows))


def plan_batches(costs: Sequence[int], max_texts: int, max_tokens: int = 0) -> list[range]:
    """Cut ``costs`` (tokens per text, ascending) into consecutive batches of at most
    ``max_texts`` texts and, when ``max_tokens`` is set, at most ``max_tokens`` padded tokens
    (texts x the last, longest, cost). A text over the token bound gets a batch to itself."""
    spans: list[range] = []
    start = 0
    for end in range(1, len(costs) + 1):
        size = end - start
        over = max_tokens > 0 and size > 1 and size * costs[end - 1] > max_tokens
        if over or size > max_texts:
            spans.append(range(start, end - 1))
            start = end - 1
    if start < len(costs):
        spans.append(range(start, len(costs)))
    return spans


def l2_normalize(matrix: Vectors) -> Vectors:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    normalized: Vectors = (matrix / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)
    return normalized


class FakeEmbedder(Embedder):
    """A deterministic bag-of-words hashing embedder for tests: no model, no network.

    Texts sharing words get similar vectors, so ranking tests mean something.
    """

    def __init__(self, dimension: int = 64, model_id: str = "fake-hash") -> None:
        self._fingerprint = Fingerprint(model_id, dimension, "hash-bow", True, 10_000, "none")
        self.calls = 0

    @property
    def fingerprint(self) -> Fingerprint:
        return self._fingerprint

    def embed_batch(self, texts: Sequence[str], *, is_query: bool) -> EmbeddingBatch:
        self.calls += 1
        dim = self._fingerprint.dimension
        out = np.zeros((len(texts), dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in words(text) or [""]:
                digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
                out[row, int.from_bytes(digest[:4], "little") % dim] += 1.0
        return EmbeddingBatch(l2_normalize(out), (1,) * len(texts))
