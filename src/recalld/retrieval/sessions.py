"""Session evidence: a conversation's turns support each other.

A session in which several turns match the query is more likely to hold the answer than
one with a single lucky match. Each session's support is its best turn's score plus a
share of its next best turns'; every turn then gains a share of its session's support.
This reorders turns (and so the sessions they stand for) without dropping any.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from recalld.records import Memory
from recalld.retrieval.adjust import Scored, make_scored
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.fusion import Fused


def session_support(scored: Sequence[Scored], config: RetrievalConfig) -> dict[str, float]:
    """Support per session id: best score + ``session_support`` x the next best ones."""
    by_session: dict[str, list[float]] = {}
    for item in scored:
        by_session.setdefault(session_key(item.memory), []).append(item.score)
    support: dict[str, float] = {}
    for session, scores in by_session.items():
        scores.sort(reverse=True)
        extra = scores[1 : 1 + config.sessions.session_support_turns]
        support[session] = scores[0] + config.sessions.session_support * sum(extra)
    return support


def session_key(memory: Memory) -> str:
    """The session a memory belongs to; a memory without one is a session of its own, so
    that it is never worse off than a turn for the support a session lends."""
    return memory.session_id if memory.session_id is not None else f"memory:{memory.id}"


def apply_session_support(scored: list[Scored], config: RetrievalConfig) -> list[Scored]:
    """Multiply each memory by 1 + ``session_boost`` x its session's support (over the best
    session's); re-sort.

    Premise: the candidates include sessions (conversations, threads) whose turns can
    support each other; where none has a session (a store of notes or documents) the
    stage stands aside (:func:`sessions_absent`). Beside sessions, a memory without one is
    a session of its own, so a note is never worse off than a lone turn."""
    if config.sessions.session_boost <= 0 or sessions_absent(scored):
        return scored
    support = session_support(scored, config)
    top = max(support.values(), default=0.0) or 1.0
    lift = {s: 1.0 + config.sessions.session_boost * value / top for s, value in support.items()}
    return _lift_sessions(scored, lift, "session_support")


def sessions_absent(scored: Sequence[Scored]) -> bool:
    """Whether no candidate belongs to a session: session evidence has nothing to read."""
    return all(s.memory.session_id is None for s in scored)


def topic_support(
    scored: list[Scored], cosines: Mapping[str, float], config: RetrievalConfig
) -> list[Scored]:
    """Lift each turn by its session's place in a ranking of sessions by topic.

    A session's topic score is the mean of its ``topic_turns`` best query cosines among
    the candidates (missing ones count as 0); a turn of the k-th session (k = 1, 2, ...)
    scores x(1 + ``topic_weight`` / k). The pipeline runs it for queries that ask for
    advice, whose answer is the conversation about the matter rather than one turn.
    Premise: the candidates include sessions; where none has one (notes, documents) the
    stage stands aside. Beside sessions, a memory without one is a session of its own;
    sessions with no candidate from the semantic channel keep their score.
    """
    if config.sessions.topic_weight <= 0 or sessions_absent(scored):
        return scored
    closest: dict[str, list[float]] = {}
    for item in scored:
        cosine = cosines.get(item.memory.id)
        if cosine is not None:
            closest.setdefault(session_key(item.memory), []).append(cosine)
    if not closest:
        return scored
    turns = config.sessions.topic_turns
    topic = {s: sum(sorted(c, reverse=True)[:turns]) / turns for s, c in closest.items()}
    order = sorted(topic, key=lambda s: (-topic[s], s))
    lift = {s: 1.0 + config.sessions.topic_weight / k for k, s in enumerate(order, start=1)}
    return _lift_sessions(scored, lift, "topic_support")


def _lift_sessions(scored: list[Scored], lift: Mapping[str, float], name: str) -> list[Scored]:
    """Multiply each memory of a session in ``lift`` by its factor, recorded as ``name``;
    re-sort. Memories of a session not in ``lift`` keep their score."""
    out = []
    for item in scored:
        factor = lift.get(session_key(item.memory))
        if factor is None:
            out.append(item)
            continue
        factors = {**item.factors, name: factor}
        out.append(make_scored(item.memory, item.fused, item.score * factor, factors))
    return sorted(out, key=lambda s: -s.score)


def _lends_to_reply(memory: Memory, role: str | None, config: RetrievalConfig) -> bool:
    """Whether the reply to ``memory`` may hold the answer: it is the user's turn, and the
    query is not about what the user said."""
    return (
        config.sessions.reply_weight > 0
        and role != "user"
        and memory.metadata.get("role") == "user"
    )


def _speaker(memory: Memory) -> object:
    return memory.metadata.get("speaker") or memory.metadata.get("role")


def group_by_session(scored: Sequence[Scored]) -> list[list[Scored]]:
    """Turns grouped by session in order of each session's best turn (memories without a
    session form groups of one)."""
    groups: dict[str, list[Scored]] = {}
    for item in scored:
        groups.setdefault(session_key(item.memory), []).append(item)
    return list(groups.values())


def neighbor_support(
    scored: list[Scored],
    neighbors: Mapping[str, list[tuple[str, int]]],
    load: Callable[[list[str]], Mapping[str, Memory]],
    config: RetrievalConfig,
    role: str | None = None,
) -> list[Scored]:
    """A turn next to a strong hit gains ``neighbor_weight`` x that hit's score (halved per
    further step): in a conversation the answer is often the reply to the turn that matched
    the question's words. The reply to a turn that only asks gains ``answer_weight`` x the
    question's score before its penalty; so does the reply to any turn of the user's
    (a report of an error, a request) by ``reply_weight``, when the query does not ask what
    the user said (``role``, :func:`~recalld.retrieval.adjust.wanted_role`; the caller
    passes ``user`` where it cannot tell) and the reply is another speaker's. Neighbours
    that were not candidates are loaded and added."""
    lent: dict[str, tuple[float, str]] = {}
    replies: dict[str, tuple[float, str]] = {}
    for item in scored[: config.sessions.neighbor_depth]:
        asks = item.factors.get("only_asks")
        for other, offset in neighbors.get(item.memory.id, ()):
            share = config.sessions.neighbor_weight * item.score * 0.5 ** (abs(offset) - 1)
            if asks is not None and offset == 1:
                # The reply to a question that matched is where its answer is: it gains a
                # share of the question's score as it was before the only-asks penalty.
                share = max(share, config.sessions.answer_weight * item.score / asks)
            elif offset == 1 and _lends_to_reply(item.memory, role, config):
                reply = config.sessions.reply_weight * item.score
                if reply > replies.get(other, (0.0, ""))[0]:
                    replies[other] = (reply, item.memory.id)
            if share > lent.get(other, (0.0, ""))[0]:
                lent[other] = (share, item.memory.id)
    if not lent and not replies:
        return scored
    present = {s.memory.id: s.memory for s in scored}
    fresh = load([i for i in {**lent, **replies} if i not in present])
    known = {**present, **fresh}
    for other, (reply, source) in replies.items():
        memory = known.get(other)
        asker = known.get(source)
        if (
            memory is not None
            and asker is not None
            and _speaker(memory) != _speaker(asker)
            and reply > lent.get(other, (0.0, ""))[0]
        ):
            lent[other] = (reply, source)
    fresh = {i: m for i, m in fresh.items() if i in lent}
    out = []
    for item in scored:
        share, source = lent.get(item.memory.id, (0.0, ""))
        if share:
            factors = {
                **item.factors,
                "neighbor_support": (item.score + share) / item.score if item.score else 1.0,
            }
            item = make_scored(item.memory, item.fused, item.score + share, factors)
        out.append(item)
    for memory_id, memory in fresh.items():
        share, source = lent[memory_id]
        fused = Fused(memory_id, 0.0, {f"neighbor_of:{source}": share})
        out.append(Scored(memory, fused, share, {}))
    return sorted(out, key=lambda s: -s.score)
