"""Stage 5: rerank the top of the fused list (only with a ``reranker`` configured).

QMD's guardrails: only the top ``rerank_depth`` fused candidates are scored, a long memory
by its best chunk (the window with the most query-term hits); the reranker's score is
blended with the retrieval position by how high that position is (the top of a good
fusion is rarely wrong); candidates it did not score keep their retrieval order below the
scored ones; scores are cached; any failure or timeout leaves the fused order as it was.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

from recalld.errors import ModelError
from recalld.providers.llm import ModelCache, Usage
from recalld.providers.rerankers import Reranker
from recalld.records import Memory
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.fusion import Fused
from recalld.retrieval.models import Models, StageNote
from recalld.text import keywords

PROMPT_VERSION = "rerank-v1"


def best_chunk(content: str, terms: Sequence[str], size: int) -> str:
    """``content`` itself when it has at most ``size`` words, else the ``size``-word window
    (half-overlapping) with the most query-term hits (the first of equals)."""
    tokens = content.split()
    if len(tokens) <= size:
        return content
    wanted = set(terms)
    best, best_hits = 0, -1
    for start in range(0, len(tokens) - size // 2, max(1, size // 2)):
        hits = sum(1 for w in keywords(" ".join(tokens[start : start + size])) if w in wanted)
        if hits > best_hits:
            best, best_hits = start, hits
    return " ".join(tokens[best : best + size])


def retrieval_weight(position: int, config: RetrievalConfig) -> float:
    """The retrieval side's share of the blend at a fused position (1-based)."""
    if position <= 3:
        return config.rerank.rerank_weight_top3
    if position <= 10:
        return config.rerank.rerank_weight_top10
    return config.rerank.rerank_weight_rest


def blend(fused: Sequence[Fused], scores: Sequence[float], config: RetrievalConfig) -> list[Fused]:
    """Position-aware blend: ``w * 1/position + (1 - w) * score`` for the scored head; the
    rest score ``w * 1/position`` (a reranker score of 0), which keeps them in their order
    below every scored candidate."""
    out = []
    for position, item in enumerate(fused, start=1):
        weight = retrieval_weight(position, config)
        scored = position <= len(scores)
        value = weight / position + ((1 - weight) * scores[position - 1] if scored else 0.0)
        trace = {
            "position": float(position),
            "retrieval_weight": weight,
            "retrieval": 1.0 / position,
            "blended": value,
        }
        if scored:
            trace["reranker"] = scores[position - 1]
        out.append(replace(item, score=value, rerank=trace))
    order = sorted(range(len(out)), key=lambda i: (-out[i].score, i))
    return [out[i] for i in order]


def rerank(
    fused: list[Fused],
    memories: Mapping[str, Memory],
    query: str,
    terms: Sequence[str],
    models: Models,
    config: RetrievalConfig,
) -> tuple[list[Fused], StageNote]:
    """Stage 5: the reranked list and the stage's note; the fused list unchanged on failure."""
    reranker = models.reranker
    if reranker is None or config.rerank.rerank_depth <= 0 or not fused:
        reason = "no reranker configured" if reranker is None else "nothing to rerank"
        return fused, StageNote("rerank", False, reason)
    head = [f for f in fused[: config.rerank.rerank_depth] if f.memory_id in memories]
    chosen = {f.memory_id for f in head}
    rest = [f for f in fused if f.memory_id not in chosen]
    passages = [
        best_chunk(memories[f.memory_id].content, terms, config.rerank.rerank_chunk_words)
        for f in head
    ]
    started = time.perf_counter()
    try:
        scores, usage = _scores(reranker, models.cache, query, passages)
    except ModelError as exc:
        spent = Usage(calls=1, latency_ms=(time.perf_counter() - started) * 1000)
        return fused, StageNote("rerank", False, f"reranker failed: {exc}", spent)
    if not reranker.calibrated:
        low, high = min(scores), max(scores)
        scores = [(s - low) / (high - low) if high > low else 0.5 for s in scores]
    note = StageNote("rerank", True, f"{len(head)} scored by {reranker.model_id}", usage)
    return blend([*head, *rest], scores, config), note


def _scores(
    reranker: Reranker, cache: ModelCache | None, query: str, passages: list[str]
) -> tuple[list[float], Usage]:
    """Cached scores, the reranker asked only for the passages not seen with this query."""
    keys = [ModelCache.key([query, p]) for p in passages]
    known = {} if cache is None else cache.get_many(reranker.model_id, PROMPT_VERSION, keys)
    found = {i: float(known[k]) for i, k in enumerate(keys) if k in known}
    missing = [i for i in range(len(passages)) if i not in found]
    usage = Usage(cache_hits=len(found))
    if missing:
        started = time.perf_counter()
        fresh = reranker.score(query, [passages[i] for i in missing])
        if len(fresh) != len(missing):
            raise ModelError(f"the reranker returned {len(fresh)} scores for {len(missing)}")
        usage += Usage(calls=1, latency_ms=(time.perf_counter() - started) * 1000)
        found.update(zip(missing, fresh, strict=True))
        if cache is not None:
            items = [(keys[i], repr(v)) for i, v in zip(missing, fresh, strict=True)]
            cache.put_many(reranker.model_id, PROMPT_VERSION, items)
    return [found[i] for i in range(len(passages))], usage
