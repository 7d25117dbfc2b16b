"""Synthetic memories for the scale benchmark, assembled from real benchmark turns.

Method (also in ``docs/benchmarks.md``):

1. Every turn of LongMemEval_S and LoCoMo is split into sentences, and consecutive
   sentences are grouped into *snippets* of :data:`SNIPPET_MIN_CHARS` to
   :data:`SNIPPET_MAX_CHARS` characters.
2. A seeded sample of ``pool_size`` snippets (the *pool*) is embedded once with the real
   embedder; the vectors are cached in the work folder.
3. Synthetic memory ``i`` is the ordered pair of pool snippets ``(a, b)`` that a seeded
   permutation of all ``P x (P - 1)`` ordered pairs assigns to ``i``, so every memory's text
   is distinct, and memory ``i`` is the same whatever the corpus size. Its vector is the
   length-weighted mean of the two snippets' real vectors (mean pooling is roughly that),
   plus seeded Gaussian noise of norm :data:`NOISE_NORM`, renormalised.

The queries are the real benchmark questions, embedded by the real model at search time.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld.entities import extract_entities
from recalld.errors import InvalidInputError
from recalld.providers.embedders import Embedder, l2_normalize
from recalld.records import Memory, Source
from recalld.text import content_hash, states_event

LONGMEMEVAL_FILE = Path("longmemeval") / "longmemeval_s.json.gz"
LOCOMO_FILE = Path("locomo") / "locomo.json"
SNIPPET_MIN_CHARS = 60
"""Shorter sentence runs are joined with the next sentence (a memory says something)."""
SNIPPET_MAX_CHARS = 320
"""About one to three sentences: the size of a typical stored memory or turn chunk."""
NOISE_NORM = 0.25
"""Norm of the noise added to a derived vector before renormalising: cosine ~0.97 to the
noiseless mix, small next to the gap between unrelated texts (cosine ~0.1 in MiniLM)."""
BLOCK = 8192
"""Memories generated (and inserted) per block; noise is seeded per block, so memory ``i``
does not depend on the corpus size."""
SESSION_SIZE = 20
"""Consecutive memories share a session id, like the turns of one conversation."""
START_TIME = datetime(2023, 1, 1, tzinfo=UTC)
SPAN = timedelta(days=730)
"""Event times are spread over two years, so date filters and recency have work to do."""
_GOLDEN = (math.sqrt(5) - 1) / 2
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class SourceText:
    """Real turns to build memories from, and real questions to ask."""

    turns: tuple[str, ...]
    questions: tuple[str, ...]


@dataclass(frozen=True)
class Pool:
    """The embedded snippets every synthetic memory is assembled from."""

    texts: tuple[str, ...]
    vectors: npt.NDArray[np.float32]
    fingerprint: str

    @property
    def digest(self) -> str:
        """Identifies the pool: its embedder and its snippets."""
        blob = "\n".join([self.fingerprint, *self.texts]).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def save(self, path: Path) -> None:
        np.savez(
            path,
            vectors=self.vectors,
            texts=np.array(self.texts, dtype=object),
            fingerprint=np.array(self.fingerprint),
        )

    @classmethod
    def load(cls, path: Path) -> Pool:
        with np.load(path, allow_pickle=True) as data:
            return cls(
                tuple(str(t) for t in data["texts"]),
                data["vectors"].astype(np.float32),
                str(data["fingerprint"]),
            )


def read_sources(data_dir: Path) -> SourceText:
    """Unique turns and questions of LongMemEval_S and LoCoMo, in file order."""
    lme_path, locomo_path = data_dir / LONGMEMEVAL_FILE, data_dir / LOCOMO_FILE
    for path in (lme_path, locomo_path):
        if not path.is_file():
            raise InvalidInputError(f"benchmark file not found: {path} (see --data)")
    with gzip.open(lme_path, "rt", encoding="utf-8") as handle:
        lme: list[dict[str, Any]] = json.load(handle)
    locomo: list[dict[str, Any]] = json.loads(locomo_path.read_text(encoding="utf-8"))
    turns: dict[str, None] = {}
    questions: dict[str, None] = {}
    for record in lme:
        questions.setdefault(record["question"], None)
        for session in record["haystack_sessions"]:
            for turn in session:
                turns.setdefault(turn["content"], None)
    for record in locomo:
        for key, value in record["conversation"].items():
            if key.startswith("session_") and isinstance(value, list):
                for turn in value:
                    turns.setdefault(turn["text"], None)
        for qa in record["qa"]:
            questions.setdefault(qa["question"], None)
    return SourceText(tuple(turns), tuple(questions))


def snippets(turns: Sequence[str]) -> list[str]:
    """Runs of consecutive sentences of :data:`SNIPPET_MIN_CHARS`-:data:`SNIPPET_MAX_CHARS`."""
    found: dict[str, None] = {}
    for turn in turns:
        current = ""
        for sentence in _SENTENCE_END.split(" ".join(turn.split())):
            if len(sentence) > SNIPPET_MAX_CHARS:
                current = ""
                continue
            joined = f"{current} {sentence}".strip()
            current = sentence if len(joined) > SNIPPET_MAX_CHARS else joined
            if len(current) >= SNIPPET_MIN_CHARS:
                found.setdefault(current, None)
                current = ""
    return list(found)


def build_pool(
    texts: Sequence[str], size: int, seed: int, embedder: Embedder, cache: Path | None = None
) -> Pool:
    """Embed a seeded sample of ``size`` snippets (cached under ``cache`` when given)."""
    if size < 2 or size > len(texts):
        raise InvalidInputError(f"the pool needs 2 to {len(texts)} snippets, not {size}")
    rng = np.random.default_rng(seed)
    chosen = tuple(texts[i] for i in sorted(rng.choice(len(texts), size, replace=False)))
    fingerprint = embedder.fingerprint.to_json()
    digest = hashlib.sha256("\n".join([fingerprint, *chosen]).encode()).hexdigest()[:16]
    path = None if cache is None else cache / f"pool-{digest}.npz"
    if path is not None and path.is_file():
        return Pool.load(path)
    vectors = embedder.embed_documents(list(chosen)).vectors
    pool = Pool(chosen, vectors, fingerprint)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        pool.save(path)
    return pool


def max_size(pool: Pool) -> int:
    """How many distinct memories the pool can make (ordered pairs of distinct snippets)."""
    count = len(pool.texts)
    return count * (count - 1)


def _pairs(pool: Pool, start: int, stop: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Snippet indices (a, b) of memories ``start..stop-1``: an affine permutation of pairs."""
    space = max_size(pool)
    multiplier = _coprime_multiplier(space, seed)
    offset = seed * 7919 % space
    index = (np.arange(start, stop, dtype=np.int64) * multiplier + offset) % space
    first, second = np.divmod(index, len(pool.texts) - 1)
    second = second + (second >= first)
    return first, second


def _coprime_multiplier(space: int, seed: int) -> int:
    candidate = int(space * 0.618) + seed % 1000 + 1
    while math.gcd(candidate, space) != 1:
        candidate += 1
    return candidate


def derived_vectors(pool: Pool, start: int, stop: int, seed: int) -> npt.NDArray[np.float32]:
    """Vectors of memories ``start..stop-1`` (see the module docstring)."""
    first, second = _pairs(pool, start, stop, seed)
    lengths = np.array([len(t) for t in pool.texts], dtype=np.float32)
    mixed = (
        pool.vectors[first] * lengths[first, None] + pool.vectors[second] * lengths[second, None]
    )
    mixed = l2_normalize(mixed)
    noise = np.vstack(
        [
            _block_noise(seed, block, pool.vectors.shape[1])
            for block in range(start // BLOCK, (stop - 1) // BLOCK + 1)
        ]
    )
    offset = start - (start // BLOCK) * BLOCK
    return l2_normalize(mixed + noise[offset : offset + stop - start])


def _block_noise(seed: int, block: int, dimension: int) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng([seed, block])
    noise = rng.standard_normal((BLOCK, dimension), dtype=np.float32)
    return noise * np.float32(NOISE_NORM / math.sqrt(dimension))


def memories(pool: Pool, start: int, stop: int, seed: int, fingerprint: str) -> list[Memory]:
    """Memory records ``start..stop-1``: text, session, event time, entities, hash."""
    first, second = _pairs(pool, start, stop, seed)
    created = START_TIME + SPAN
    out = []
    for offset, (a, b) in enumerate(zip(first.tolist(), second.tolist(), strict=True)):
        i = start + offset
        text = f"{pool.texts[a]} {pool.texts[b]}"
        out.append(
            Memory(
                id=f"syn-{i:08d}",
                content=text,
                type="turn",
                created_at=created,
                updated_at=created,
                content_hash=content_hash(text),
                event_time=_event_time(i),
                session_id=f"syn-session-{i // SESSION_SIZE}",
                source=Source("synthetic", ref=f"{a}+{b}"),
                entities=tuple(extract_entities(text)),
                embedding_fingerprint=fingerprint,
                tells_event=states_event(text),  # as the facade sets it (recalld.validation)
            )
        )
    return out


def _event_time(i: int) -> datetime:
    """Sessions land at quasi-random days of the span; turns a minute apart inside one."""
    session, turn = divmod(i, SESSION_SIZE)
    return START_TIME + SPAN * ((session * _GOLDEN) % 1.0) + timedelta(minutes=turn)


def blocks(
    pool: Pool, size: int, seed: int
) -> Iterator[tuple[list[Memory], npt.NDArray[np.float32]]]:
    """The corpus of ``size`` memories, :data:`BLOCK` at a time, with their vectors."""
    if not 1 <= size <= max_size(pool):
        raise InvalidInputError(
            f"a pool of {len(pool.texts)} snippets makes 1 to {max_size(pool)} memories, "
            f"not {size}; use a bigger pool"
        )
    for start in range(0, size, BLOCK):
        stop = min(size, start + BLOCK)
        yield (
            memories(pool, start, stop, seed, pool.fingerprint),
            derived_vectors(pool, start, stop, seed),
        )


def fidelity(pool: Pool, embedder: Embedder, sample: int, seed: int) -> dict[str, float]:
    """How close derived vectors are to the real embeddings of their texts (cosine)."""
    count = min(sample, max_size(pool))
    texts = [m.content for m in memories(pool, 0, count, seed, pool.fingerprint)]
    real = embedder.embed_documents(texts).vectors
    derived = derived_vectors(pool, 0, count, seed)
    cosines = np.sum(real * derived, axis=1)
    return {
        "samples": float(count),
        "mean_cosine": float(cosines.mean()),
        "p05_cosine": float(np.percentile(cosines, 5)),
    }
