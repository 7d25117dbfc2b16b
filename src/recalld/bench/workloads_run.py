"""``recalld bench workloads``: fill each scenario's store as a user would, ask, score.

For each scenario of a workloads file (:mod:`recalld.bench.workloads`) the runner

1. opens a fresh store in a temporary folder and adds the background pools' memories and
   the scenario's own through ``engine.add_many`` (``role`` into metadata; type, session,
   event time, project, tags, pinned, priority and evergreen onto the public fields);
2. writes the scenario's ``files`` into a folder and indexes it with ``engine.index``;
3. asks every query of every system (recalld's pipeline, any variants, and the plain
   baselines: RRF of BM25 and vectors, BM25 only, vector only) with ``limit`` 10,
   ``as_of`` = the query's (else the scenario's) and ``boost_project`` = the query's
   project (FORMAT.md: the caller's project is a boost, not a filter);
4. scores each ranking (:func:`~recalld.bench.workloads.score_query`).

The report holds each system's means overall, per scenario kind and per query kind, the
paired wins and losses of each pipeline against plain RRF (and of each variant against
the default) at hit@1 and mrr@10, per query id, and the speed of the run.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import recalld
from recalld.bench.cases import select_by_id
from recalld.bench.metrics import percentile
from recalld.bench.report import embedder_record
from recalld.bench.run_report import (
    config_dict,
    load_average,
    machine,
    peak_rss_mb,
    summarize,
)
from recalld.bench.systems import Progress, System, build_systems, resources, run_models
from recalld.bench.workloads import (
    DEPTH,
    FILE_PREFIX,
    Scenario,
    WorkloadMemory,
    Workloads,
    load_workloads,
    score_query,
)
from recalld.config import Settings
from recalld.errors import InvalidInputError
from recalld.providers.cache import CachedEmbedder
from recalld.providers.embedders import Embedder
from recalld.records import Memory, NewMemory, Source
from recalld.retrieval.config import RetrievalConfig, get_preset
from recalld.retrieval.models import Models

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: runs of one scenario must not overlap
    fcntl = None  # type: ignore[assignment]

PAIRED_METRICS = ("hit@1", "mrr@10")
"""Metrics on which paired wins and losses are counted."""
BASELINE_NAMES = ("rrf", "bm25", "vector")
EVERY_FILE = ("**/*",)
"""The folder holds only the scenario's files, so every one of them is indexed, wherever it
lies (``recalld index``'s default globs would only take ``MEMORY.md`` and ``memory/``)."""


@dataclass
class _Tally:
    """What accumulates over a run (internal and mutable on purpose)."""

    queries: list[dict[str, Any]] = field(default_factory=list)
    latency_ms: dict[str, list[float]] = field(default_factory=dict)
    memories: int = 0
    chunks: int = 0
    ingest_s: float = 0.0


def workload_systems(
    configs: Mapping[str, RetrievalConfig | System] | None,
    base: RetrievalConfig,
    baselines: bool,
    variant: Mapping[str, Any] | None = None,
) -> list[System]:
    """The pipeline (recalld's, or the named configs), then the plain baselines, RRF first.

    ``variant`` (settings to change, not with ``configs``) makes the pipelines ``recalld``
    (``base``) and ``variant`` (``base`` with those changes), paired with each other."""
    if variant:
        if configs is not None:
            raise InvalidInputError("give either configs or a variant, not both")
        configs = {"recalld": base, "variant": base.with_changes(**variant)}
    return build_systems(configs, base=base, baselines=baselines)


def run_workloads(
    path: str | Path,
    *,
    configs: Mapping[str, RetrievalConfig | System] | None = None,
    base: RetrievalConfig | None = None,
    preset: str | None = None,
    variant: Mapping[str, Any] | None = None,
    baselines: bool = True,
    scenario_ids: Sequence[str] = (),
    limit: int | None = None,
    embedder: Embedder | str | None = None,
    cache_dir: Path | None = None,
    settings: Settings | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Evaluate retrieval systems on a workloads file; returns the report dict.

    Args:
        path: the workloads file (FORMAT.md; plain or gzipped JSON).
        configs: name -> retrieval settings (or a :class:`System` with its own mode); default
            ``{"recalld": base}``. The first is "the default" that variants are paired with.
        base: recalld's default settings, from which the baselines derive (default: the
            preset in ``settings``, else ``balanced``).
        preset: a preset name for ``base`` (ignored when ``base`` is given).
        variant: retrieval settings to change (``{"event_boost": 1.0}``): the run then has
            ``recalld`` (the default) and ``variant`` (the default with these changes), so
            their paired wins and losses show what the change does. Not with ``configs``.
        baselines: also run plain RRF, BM25 only and vector only on the same stores.
        scenario_ids: run only these scenarios.
        limit: run only the first ``limit`` (selected) scenarios.
        embedder: an embedder or a spec such as ``local`` (default: from ``settings``).
        cache_dir: the embedding cache folder (default: from ``settings``, else the user cache).
        settings: resolved settings (embedder, cache folder, preset) when not given above.
        progress: called as queries are answered.
    """
    if limit is not None and limit < 1:
        raise InvalidInputError("limit must be at least 1")
    workloads = load_workloads(path)
    chosen = select_by_id(workloads.scenarios, scenario_ids, lambda s: s.scenario_id, "scenario")
    chosen = chosen if limit is None else chosen[:limit]
    if base is None and preset is not None:
        base = get_preset(preset)
    model, folder, default, setting = resources(embedder, cache_dir, settings, base)
    systems = workload_systems(configs, default, baselines, variant)
    models = run_models(settings, folder)
    total = sum(len(s.queries) for s in chosen)
    started, load_before = time.perf_counter(), load_average()
    hits_before, misses_before = _cache_counts(model)
    tally = _Tally()
    for scenario in chosen:

        def advance(label: str = scenario.scenario_id) -> None:
            if progress is not None:
                progress(1, total, label)

        _run_scenario(workloads, scenario, systems, model, folder, tally, advance, models)
    hits, misses = _cache_counts(model)
    speed = {
        "memories": tally.memories,
        "file_chunks": tally.chunks,
        "ingest_s": tally.ingest_s,
        "embedding_cache": {"hits": hits - hits_before, "misses": misses - misses_before},
        "peak_rss_mb": peak_rss_mb(),
        "wall_s": time.perf_counter() - started,
    }
    return {
        "benchmark": "workloads",
        "file": str(path),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_average": {"start": load_before, "end": load_average()},
        "embedder": embedder_record(model, setting),
        "questions": {"name": workloads.name, "scenarios": len(chosen), "queries": total},
        "options": {
            "depth": DEPTH,
            "scenario_ids": list(scenario_ids),
            "limit": limit,
            "preset": preset,
            "variant": dict(variant or {}),
        },
        "systems": {s.name: _system_report(s, tally) for s in systems},
        "comparisons": comparisons(tally.queries, [s.name for s in systems]),
        "speed": speed,
        "probes": tally.queries,
    }


def _run_scenario(
    workloads: Workloads,
    scenario: Scenario,
    systems: Sequence[System],
    embedder: Embedder,
    cache_dir: Path,
    tally: _Tally,
    advance: Callable[[], None],
    models: Models | None = None,
) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="recalld-workloads-") as folder,
        workspace_folder(scenario.scenario_id) as workspace,
    ):
        # model_construct: explicit values and defaults only, no RECALLD_* variables read.
        settings = Settings.model_construct(db=Path(folder) / "bench.db", cache_dir=cache_dir)
        with recalld.open(settings=settings, embedder=embedder, models=models) as engine:
            clock = time.perf_counter()
            keys_of = fill_store(engine, workloads, scenario, workspace)
            tally.ingest_s += time.perf_counter() - clock
            tally.memories += sum(1 for k in keys_of.values() if not _is_file(k))
            tally.chunks += sum(1 for k in keys_of.values() if _is_file(k))
            for query in scenario.queries:
                per_system: dict[str, Any] = {}
                for system in systems:
                    clock = time.perf_counter()
                    result = engine.search(
                        query.query,
                        limit=DEPTH,
                        mode=system.mode,
                        config=system.config,
                        as_of=query.as_of or scenario.as_of,
                        boost_project=query.project,
                    )
                    elapsed = (time.perf_counter() - clock) * 1000
                    tally.latency_ms.setdefault(system.name, []).append(elapsed)
                    ranked = [keys_of.get(h.memory.id, frozenset()) for h in result.hits]
                    per_system[system.name] = {
                        "scores": score_query(ranked, query),
                        "top": [
                            _label(keys, h.memory.id)
                            for keys, h in zip(ranked, result.hits, strict=True)
                        ],
                    }
                tally.queries.append(
                    {
                        "id": f"{scenario.scenario_id}/{query.query_id}",
                        "scenario_kind": scenario.kind,
                        "query_kind": query.kind,
                        "query": query.query,
                        "gold": list(query.gold),
                        "stale": list(query.stale),
                        "systems": per_system,
                    }
                )
                advance()


@contextmanager
def workspace_folder(scenario_id: str) -> Iterator[Path]:
    """An empty folder for a scenario's files, at the same path on every run.

    A file chunk's id is a hash of its path, and ties in a ranking are broken by id: in a
    random temporary folder, the same run could rank tied chunks differently each time.
    A lock keeps two runs of the same scenario (another process) out of each other's way.
    """
    user = getattr(os, "getuid", lambda: "user")()
    root = Path(tempfile.gettempdir()) / f"recalld-workloads-{user}"
    name = re.sub(r"[^A-Za-z0-9._-]", "_", scenario_id)
    root.mkdir(exist_ok=True)
    with open(root / f"{name}.lock", "w") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        folder = root / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def fill_store(
    engine: recalld.MemoryEngine, workloads: Workloads, scenario: Scenario, workspace: Path
) -> dict[str, frozenset[str]]:
    """Store a scenario through the public API; returns memory id -> the keys it answers to.

    Pool memories come first (the store's background), then the scenario's own. A memory
    that ``add_many`` folds into an identical one answers to both keys. File chunks answer
    to ``file:PATH`` and to each ``file:PATH#TEXT`` of the scenario's queries they contain.
    """
    items = [m for name in scenario.background for m in workloads.pools[name]]
    items += scenario.memories
    results = engine.add_many([new_memory(m) for m in items]) if items else []
    keys_of: dict[str, set[str]] = {}
    for item, result in zip(items, results, strict=True):
        keys_of.setdefault(result.duplicate_of or result.id, set()).add(item.key)
    if scenario.files:
        for rel, text in scenario.files.items():
            target = workspace / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        engine.index([workspace], globs=EVERY_FILE)
        wanted = {k for q in scenario.queries for k in (*q.gold, *q.stale) if _is_file(k)}
        root = os.path.normpath(os.path.abspath(workspace))
        for memory in _file_chunks(engine):
            rel = os.path.relpath(memory.source.path or "", root).replace(os.sep, "/")
            keys_of.setdefault(memory.id, set()).update(
                _chunk_keys(rel, memory, scenario.files.get(rel, ""), wanted)
            )
    return {i: frozenset(k) for i, k in keys_of.items()}


def new_memory(m: WorkloadMemory) -> NewMemory:
    """A workloads memory as a user would add it (its key is its id, for stable reruns)."""
    return NewMemory(
        id=m.key,
        content=m.content,
        type=m.type,
        event_time=m.event_time,
        priority=m.priority,
        pinned=m.pinned,
        evergreen=m.evergreen,
        project=m.project,
        session_id=m.session_id,
        tags=m.tags,
        source=Source(kind="workloads"),
        metadata={"role": m.role} if m.role else {},
    )


def _file_chunks(engine: recalld.MemoryEngine) -> list[Memory]:
    chunks: list[Memory] = []
    page = 1000
    while True:
        batch = engine.list(types=["chunk"], limit=page, offset=len(chunks))
        chunks += batch
        if len(batch) < page:
            return [c for c in chunks if c.source.kind == "file"]


def _chunk_keys(rel: str, memory: Memory, text: str, wanted: set[str]) -> set[str]:
    """``file:REL`` and the wanted ``file:REL#TEXT`` keys whose TEXT the chunk holds."""
    keys = {FILE_PREFIX + rel}
    start, end = memory.source.line_start, memory.source.line_end
    lines = "\n".join(text.splitlines()[(start or 1) - 1 : end]) if start else ""
    for key in wanted:
        path, _, needle = key[len(FILE_PREFIX) :].partition("#")
        if path == rel and needle and (needle in memory.content or needle in lines):
            keys.add(key)
    return keys


def _is_file(key: str | frozenset[str]) -> bool:
    if isinstance(key, str):
        return key.startswith(FILE_PREFIX)
    return any(k.startswith(FILE_PREFIX) for k in key)


def _label(keys: frozenset[str], memory_id: str) -> str:
    """A short name for a hit in the report: its key, its file, or its id."""
    if not keys:
        return memory_id
    plain = sorted(k for k in keys if "#" not in k)
    return ",".join(plain) if plain else sorted(keys)[0]


def comparisons(
    queries: Sequence[Mapping[str, Any]],
    names: Sequence[str],
    metrics: Sequence[str] = PAIRED_METRICS,
) -> list[dict[str, Any]]:
    """Paired wins and losses: each pipeline against plain RRF, each variant against the first."""
    pipelines = [n for n in names if n not in BASELINE_NAMES]
    pairs = [(n, "rrf") for n in pipelines if "rrf" in names]
    pairs += [(n, pipelines[0]) for n in pipelines[1:]]
    out = []
    for system, against in pairs:
        for metric in metrics:
            wins, losses = [], []
            for q in queries:
                a = q["systems"][system]["scores"][metric]
                b = q["systems"][against]["scores"][metric]
                if a > b:
                    wins.append(q["id"])
                elif a < b:
                    losses.append(q["id"])
            out.append(
                {
                    "system": system,
                    "against": against,
                    "metric": metric,
                    "wins": wins,
                    "losses": losses,
                    "ties": len(queries) - len(wins) - len(losses),
                }
            )
    return out


def _system_report(system: System, tally: _Tally) -> dict[str, Any]:
    scores = [q["systems"][system.name]["scores"] for q in tally.queries]

    def grouped(field_name: str) -> dict[str, Any]:
        groups: dict[str, list[Mapping[str, float]]] = {}
        for q, s in zip(tally.queries, scores, strict=True):
            groups.setdefault(q[field_name], []).append(s)
        return {g: summarize(groups[g]) for g in sorted(groups)}

    latencies = tally.latency_ms.get(system.name, [])
    latency = (
        {
            "p50": percentile(latencies, 50),
            "p95": percentile(latencies, 95),
            "searches": len(latencies),
        }
        if latencies
        else {}
    )
    return {
        "mode": system.mode,
        "config": config_dict(system.config),
        "overall": summarize(scores),
        "by_group": grouped("scenario_kind"),
        "by_query_kind": grouped("query_kind"),
        "latency_ms": latency,
    }


def _cache_counts(embedder: Embedder) -> tuple[int, int]:
    if isinstance(embedder, CachedEmbedder):
        return embedder.hits, embedder.misses
    return 0, 0
