"""Stage 2: query expansion by an LLM, with QMD's guardrails (only with ``llm`` configured).

The model answers typed expansions: 1-3 ``lex`` (keyword queries, run on BM25), 1-3 ``vec``
(paraphrases, run on the vector channel) and at most one ``hyde`` (a hypothetical answer,
run on the vector channel). Anything else is a malformed answer and means no expansion.
CEMS's prompt variants: preference queries see the user's own top memories as profile
context; temporal queries are told to keep the time they ask about. A query whose BM25 top
hit is already strong and clear (the strong-signal probe) is not expanded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from recalld.providers.embedders import Embedder
from recalld.providers.llm import CallFailed, Usage, ask
from recalld.records import MemoryFilter
from recalld.retrieval.channels import Need, channel_lists, request as channel_request
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.fusion import RankedList
from recalld.retrieval.models import Models, StageNote
from recalld.retrieval.query import QueryPlan
from recalld.stores.base import CandidateRequest, NearestAsk, Store, Vector
from recalld.text import keywords

PROMPT_VERSION = "expand-v1"
MAX_EXPANSION_CHARS = 400
"""A longer line is not a query (a hyde passage included); the answer is refused."""
PROFILE_MEMORIES = 5
"""How many of the user's own closest memories a preference prompt shows."""
PROFILE_CHARS = 200

_BASE = """You expand a search query over a person's memories (notes and conversation \
turns). Reply with JSON only, of this shape:
{{"lex": ["1-3 short keyword queries"], "vec": ["1-3 paraphrases of the question"], \
"hyde": "one sentence that would answer it, or null"}}
{extra}
Query: {query}"""
_PREFERENCE = """The query asks about the user's tastes or wants advice. What they said \
about themselves:
{profile}
Use it: the expansions should name the kinds of things they mentioned."""
_TEMPORAL = """The query is about time. Keep every date, period and event it names in each \
expansion; do not invent dates."""


@dataclass(frozen=True)
class Expansion:
    """Validated typed expansions of one query."""

    lex: tuple[str, ...]
    vec: tuple[str, ...]
    hyde: str | None = None


@dataclass(frozen=True)
class Expanded:
    """What stage 2 hands on: extra ranked lists and the original query's vector (embedded
    in the same batch as the expansions), or nothing."""

    lists: tuple[RankedList, ...]
    query_vector: Vector | None
    note: StageNote


def parse_expansion(answer: str, query: str) -> Expansion | None:
    """The typed expansions in ``answer``, or ``None`` when it is not exactly the asked shape."""
    found = re.search(r"\{.*\}", answer, re.DOTALL)
    if found is None:
        return None
    try:
        data = json.loads(found.group(0))
    except ValueError:
        return None
    if not isinstance(data, dict) or set(data) - {"lex", "vec", "hyde"}:
        return None
    lex, vec, hyde = data.get("lex"), data.get("vec"), data.get("hyde")
    lines = _lines(lex), _lines(vec)
    if lines[0] is None or lines[1] is None:
        return None
    if hyde is not None and (not isinstance(hyde, str) or not _fits(hyde)):
        return None
    same = " ".join(query.lower().split())

    def fresh(items: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(i for i in items if i.lower() != same))

    return Expansion(fresh(lines[0]), fresh(lines[1]), " ".join(hyde.split()) if hyde else None)


def _lines(value: object) -> tuple[str, ...] | None:
    if not isinstance(value, list) or not 1 <= len(value) <= 3:
        return None
    if not all(isinstance(v, str) and _fits(v) for v in value):
        return None
    return tuple(" ".join(v.split()) for v in value)


def _fits(text: str) -> bool:
    return bool(text.strip()) and len(text) <= MAX_EXPANSION_CHARS


def strong_signal(
    store: Store, plan: QueryPlan, request_filters: MemoryFilter, config: RetrievalConfig
) -> tuple[float, float] | None:
    """QMD's probe: the BM25 top score and its gap to the second (both 0-1) when they say
    the query is already answered (top >= ``strong_signal_score``, gap >=
    ``strong_signal_gap``); else ``None``."""
    if not plan.terms:
        return None
    raw = store.candidates(
        channel_request(Need({"bm25": 2}, plan.terms, plan.text), request_filters)
    )
    found = channel_lists(raw, 2).get("bm25", [])  # the store's raw BM25, made 0-1
    if not found:
        return None
    top = found[0].score
    gap = top - (found[1].score if len(found) > 1 else 0.0)
    if top >= config.expansion.strong_signal_score and gap >= config.expansion.strong_signal_gap:
        return top, gap
    return None


def prompt(plan: QueryPlan, profile: Sequence[str]) -> str:
    """CEMS's variants: preference (with profile context), temporal, or plain."""
    extra = ""
    if plan.query_type == "preference" or plan.advice:
        listing = "\n".join(f"- {' '.join(p.split())[:PROFILE_CHARS]}" for p in profile)
        extra = _PREFERENCE.format(profile=listing or "- (nothing yet)")
    elif plan.query_type == "temporal" or plan.time_window is not None:
        extra = _TEMPORAL
    return _BASE.format(extra=extra, query=plan.text)


def expand(
    store: Store,
    embedder: Embedder,
    plan: QueryPlan,
    filters: MemoryFilter,
    config: RetrievalConfig,
    models: Models,
    pool: int,
) -> Expanded:
    """Stage 2: probe, ask, validate, embed every query vector in one batch, retrieve."""
    if models.llm is None or not config.expansion.expand:
        return _skipped("no LLM configured" if models.llm is None else "expand is off")
    signal = strong_signal(store, plan, filters, config)
    if signal is not None:
        return _skipped(f"strong BM25 signal (top {signal[0]:.2f}, gap {signal[1]:.2f})")
    query_vector, profile = None, []
    if plan.query_type == "preference" or plan.advice:
        query_vector = embedder.embed_query(plan.text)
        profile = _profile(store, query_vector, filters)
    messages = [{"role": "user", "content": prompt(plan, profile)}]
    try:
        answer, usage = ask(models.llm, messages, PROMPT_VERSION, models.cache)
    except CallFailed as exc:
        return _skipped(f"LLM failed: {exc}", exc.usage)
    expansion = parse_expansion(answer, plan.text)
    if expansion is None:
        return _skipped("malformed expansion answer", usage)
    texts = [*expansion.vec, *([expansion.hyde] if expansion.hyde else [])]
    if query_vector is None:
        vectors = _embed_queries(embedder, [plan.text, *texts])
        query_vector, vectors = vectors[0], vectors[1:]
    else:
        vectors = _embed_queries(embedder, texts)
    lists = _lists(store, plan, filters, config, expansion, vectors, pool)
    counts = f"{len(expansion.lex)} lex, {len(expansion.vec)} vec, {int(bool(expansion.hyde))} hyde"
    return Expanded(tuple(lists), query_vector, StageNote("expand", True, counts, usage))


def _skipped(reason: str, usage: Usage | None = None) -> Expanded:
    return Expanded((), None, StageNote("expand", False, reason, usage or Usage()))


def _lists(
    store: Store,
    plan: QueryPlan,
    filters: MemoryFilter,
    config: RetrievalConfig,
    expansion: Expansion,
    vectors: np.ndarray,
    pool: int,
) -> list[RankedList]:
    """One store call per expansion; lists weigh ``expansion_weight`` (the original x2)."""
    weight = config.expansion.expansion_weight
    requests: list[tuple[str, CandidateRequest]] = []
    if plan.mode != "vector" and "bm25" in config.candidates.channels:
        for i, line in enumerate(expansion.lex, start=1):
            terms = tuple(keywords(line))
            if terms:
                need = Need({"bm25": pool}, terms, line)
                requests.append((f"bm25:lex{i}", channel_request(need, filters)))
    if len(vectors):
        names = [f"semantic:vec{i}" for i in range(1, len(expansion.vec) + 1)]
        names += ["semantic:hyde"] if expansion.hyde else []
        for name, vector in zip(names, vectors, strict=True):
            nearest = NearestAsk(pool, vector)
            requests.append((name, CandidateRequest(filters, {"semantic": nearest})))
    lists = []
    for name, request in requests:
        found = channel_lists(store.candidates(request), pool).get(name.split(":")[0], [])
        if found:
            channel = config.fusion.channel_weights.get(name.split(":")[0], 1.0)
            lists.append(RankedList(name, found, weight * channel, original=False))
    return lists


def _embed_queries(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    rows = []
    for start in range(0, len(texts), embedder.batch_size):
        rows.append(
            embedder.embed_batch(texts[start : start + embedder.batch_size], is_query=True).vectors
        )
    return np.vstack(rows).astype(np.float32, copy=False)


def _profile(store: Store, query_vector: Vector, filters: MemoryFilter) -> list[str]:
    """The user's own memories closest to the query (turns of other roles left out)."""
    found = store.candidates(
        CandidateRequest(filters, {"semantic": NearestAsk(PROFILE_MEMORIES * 3, query_vector)})
    ).get("semantic", [])
    by_id = {m.id: m for m in store.get_many([c.memory_id for c in found])}
    own = [
        by_id[c.memory_id].content
        for c in found
        if c.memory_id in by_id and by_id[c.memory_id].metadata.get("role") in (None, "user")
    ]
    return own[:PROFILE_MEMORIES]
