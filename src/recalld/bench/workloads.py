"""Agent-memory workloads (``benchmarks/workloads/FORMAT.md``): typed records and scoring.

A workloads file holds scenarios, each a small store of its own (its memories, the
background pools it names, and optionally a markdown workspace of ``files``) with questions
whose gold memories are known. :func:`load_workloads` reads and checks a file;
:func:`score_query` scores one ranking with the format's metrics. Filling the stores and
asking the questions is :mod:`recalld.bench.workloads_run`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from recalld.bench.cases import read_json, require
from recalld.errors import InvalidInputError
from recalld.records import MEMORY_TYPES, MemoryType

SCENARIO_KINDS = ("coding", "notes", "personal", "support", "team", "multilingual", "mixed")
QUERY_KINDS = (
    "fact",
    "update",
    "preference",
    "temporal",
    "identifier",
    "aggregation",
    "assistant-said",
    "multilingual",
    "procedure",
)
HIT_KS = (1, 5, 10)
"""``hit@k`` cut-offs of FORMAT.md."""
DEPTH = 10
"""Hits per search: every metric of FORMAT.md is computed from the first 10."""
FILE_PREFIX = "file:"


@dataclass(frozen=True)
class WorkloadMemory:
    """One memory of a scenario or a pool, as the file gives it."""

    key: str
    content: str
    type: MemoryType = "event"
    session_id: str | None = None
    event_time: datetime | None = None
    role: str | None = None
    project: str | None = None
    tags: tuple[str, ...] = ()
    pinned: bool = False
    priority: float = 1.0
    evergreen: bool = False


@dataclass(frozen=True)
class WorkloadQuery:
    """One question with its gold and stale keys (memory keys or ``file:PATH[#TEXT]``)."""

    query_id: str
    query: str
    kind: str
    gold: tuple[str, ...]
    stale: tuple[str, ...] = ()
    project: str | None = None
    as_of: datetime | None = None
    need_all: bool = False


@dataclass(frozen=True)
class Scenario:
    """One store: its own memories, the pools it draws on, its files and its questions."""

    scenario_id: str
    kind: str
    description: str
    as_of: datetime
    background: tuple[str, ...]
    memories: tuple[WorkloadMemory, ...]
    files: Mapping[str, str]
    queries: tuple[WorkloadQuery, ...]


@dataclass(frozen=True)
class Workloads:
    """A whole workloads file."""

    name: str
    version: int
    pools: Mapping[str, tuple[WorkloadMemory, ...]]
    scenarios: tuple[Scenario, ...]

    @property
    def query_count(self) -> int:
        return sum(len(s.queries) for s in self.scenarios)


def parse_time(value: Any, where: str) -> datetime:
    """An ISO 8601 timestamp with a timezone (``Z`` accepted)."""
    if not isinstance(value, str) or "T" not in value:
        raise InvalidInputError(f"{where}: {value!r} is not an ISO 8601 timestamp")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidInputError(f"{where}: {value!r} is not an ISO 8601 timestamp") from exc
    if moment.utcoffset() is None:
        raise InvalidInputError(f"{where}: {value!r} has no timezone")
    return moment


def _optional(record: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = record.get(key)
    if value is None:
        return None
    return require(record, key, kind, where)


def _memory(record: Any, where: str) -> WorkloadMemory:
    key = require(record, "key", str, where)
    where = f"{where} memory {key}"
    kind = record.get("type", "event")
    if kind not in MEMORY_TYPES:
        raise InvalidInputError(f"{where}: type {kind!r} is not one of {', '.join(MEMORY_TYPES)}")
    tags = record.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise InvalidInputError(f"{where}: tags must be a list of strings")
    when = record.get("event_time")
    priority = record.get("priority", 1.0)
    if isinstance(priority, bool) or not isinstance(priority, int | float):
        raise InvalidInputError(f"{where}: priority must be a number")
    return WorkloadMemory(
        key=key,
        content=require(record, "content", str, where),
        type=kind,
        session_id=_optional(record, "session_id", str, where),
        event_time=None if when is None else parse_time(when, f"{where} event_time"),
        role=_optional(record, "role", str, where),
        project=_optional(record, "project", str, where),
        tags=tuple(tags),
        pinned=bool(_optional(record, "pinned", bool, where)),
        priority=float(priority),
        evergreen=bool(_optional(record, "evergreen", bool, where)),
    )


def _query(record: Any, where: str) -> WorkloadQuery:
    qid = require(record, "id", str, where)
    where = f"{where} query {qid}"
    kind = require(record, "kind", str, where)
    if kind not in QUERY_KINDS:
        raise InvalidInputError(f"{where}: kind {kind!r} is not one of {', '.join(QUERY_KINDS)}")
    gold = require(record, "gold", list, where)
    stale = record.get("stale") or []
    if not gold or not all(isinstance(k, str) for k in [*gold, *stale]):
        raise InvalidInputError(f"{where}: gold must be a non-empty list of keys, stale a list")
    both = sorted(set(gold) & set(stale))
    if both:
        raise InvalidInputError(f"{where}: keys both gold and stale: {', '.join(both)}")
    when = record.get("as_of")
    return WorkloadQuery(
        query_id=qid,
        query=require(record, "query", str, where),
        kind=kind,
        gold=tuple(gold),
        stale=tuple(stale),
        project=_optional(record, "project", str, where),
        as_of=None if when is None else parse_time(when, f"{where} as_of"),
        need_all=bool(_optional(record, "need_all", bool, where)),
    )


def _scenario(record: Any, pools: Mapping[str, tuple[WorkloadMemory, ...]], where: str) -> Scenario:
    sid = require(record, "id", str, where)
    where = f"{where} ({sid})"
    kind = require(record, "kind", str, where)
    if kind not in SCENARIO_KINDS:
        raise InvalidInputError(f"{where}: kind {kind!r} is not one of {', '.join(SCENARIO_KINDS)}")
    background = tuple(record.get("background") or [])
    for name in background:
        if name not in pools:
            raise InvalidInputError(f"{where}: background pool {name!r} is not in the file")
    memories = tuple(_memory(m, where) for m in record.get("memories") or [])
    files = record.get("files") or {}
    if not isinstance(files, dict) or not all(isinstance(t, str) for t in files.values()):
        raise InvalidInputError(f"{where}: files must be an object of path -> text")
    queries = tuple(_query(q, where) for q in require(record, "queries", list, where))
    scenario = Scenario(
        scenario_id=sid,
        kind=kind,
        description=str(record.get("description") or ""),
        as_of=parse_time(require(record, "as_of", str, where), f"{where} as_of"),
        background=background,
        memories=memories,
        files=dict(files),
        queries=queries,
    )
    _check_keys(scenario, pools, where)
    return scenario


def _check_keys(
    scenario: Scenario, pools: Mapping[str, tuple[WorkloadMemory, ...]], where: str
) -> None:
    """Keys unique across the store; every gold and stale key names a memory or a file."""
    keys = [m.key for m in scenario.memories]
    keys += [m.key for name in scenario.background for m in pools[name]]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise InvalidInputError(f"{where}: memory keys used twice: {', '.join(repeated[:5])}")
    own = {m.key for m in scenario.memories}
    qids = [q.query_id for q in scenario.queries]
    if len(set(qids)) != len(qids):
        raise InvalidInputError(f"{where}: query ids are not unique")
    for q in scenario.queries:
        for key in (*q.gold, *q.stale):
            if key.startswith(FILE_PREFIX):
                path, _, text = key[len(FILE_PREFIX) :].partition("#")
                if path not in scenario.files or text not in scenario.files[path]:
                    raise InvalidInputError(
                        f"{where} query {q.query_id}: {key!r} names no file of the scenario, "
                        "or its text is not in that file"
                    )
            elif key not in own:
                raise InvalidInputError(
                    f"{where} query {q.query_id}: {key!r} is not a memory of the scenario "
                    "(pool memories are never gold)"
                )


def load_workloads(path: str | Path) -> Workloads:
    """A workloads file (plain or gzipped JSON), checked; a clear error names what is wrong."""
    data = read_json(path)
    where = str(path)
    raw_pools = require(data, "pools", dict, where)
    pools = {}
    for name, items in raw_pools.items():
        if not isinstance(items, list):
            raise InvalidInputError(f"{where}: pool {name!r} must be a list of memories")
        pools[name] = tuple(_memory(m, f"{where}: pool {name}") for m in items)
    scenarios = tuple(
        _scenario(s, pools, f"{where}: scenario #{i + 1}")
        for i, s in enumerate(require(data, "scenarios", list, where))
    )
    ids = [s.scenario_id for s in scenarios]
    if len(set(ids)) != len(ids):
        raise InvalidInputError(f"{where}: scenario ids are not unique")
    if not scenarios:
        raise InvalidInputError(f"{where}: the file holds no scenario")
    version = data.get("version", 1)
    return Workloads(
        str(data.get("name") or Path(path).stem),
        version if isinstance(version, int) else 1,
        pools,
        scenarios,
    )


# -- scoring ---------------------------------------------------------------------------------


def first_rank(ranked: Sequence[frozenset[str]], key: str) -> int | None:
    """The 1-based position of the first hit that ``key`` names (None when none does)."""
    for position, keys in enumerate(ranked, start=1):
        if key in keys:
            return position
    return None


def score_query(ranked: Sequence[frozenset[str]], query: WorkloadQuery) -> dict[str, float]:
    """FORMAT.md's metrics of one ranking.

    Args:
        ranked: for each hit, top first, the keys it answers to: a memory's key, or for a
            file chunk ``file:PATH`` and every ``file:PATH#TEXT`` of the query it contains.
        query: the question with its gold and stale keys.
    """
    top = ranked[:DEPTH]
    gold_ranks = [r for r in (first_rank(top, k) for k in query.gold) if r is not None]
    first_gold = min(gold_ranks) if gold_ranks else None
    scores = {f"hit@{k}": float(first_gold is not None and first_gold <= k) for k in HIT_KS}
    scores["mrr@10"] = 0.0 if first_gold is None else 1.0 / first_gold
    if query.need_all:
        scores["all@10"] = float(len(gold_ranks) == len(query.gold))
    if query.stale:
        # A stale memory missing from the hits counts as below every hit.
        stale_ranks = [first_rank(top, k) or DEPTH + 1 for k in query.stale]
        scores["current_first"] = float(first_gold is not None and first_gold < min(stale_ranks))
    return scores
