"""The benchmark runner: fill each store once, ask every probe of every system, score.

For each :class:`~recalld.bench.cases.Case` the runner

1. opens a fresh store in a temporary folder and adds every memory once (``dedupe=False``,
   so a turn repeated in two sessions is kept twice), timing the ingest;
2. asks each probe of each :class:`System` with ``limit`` = the search depth and
   ``as_of`` = the probe's date, timing the search;
3. scores the ranking with the benchmark's scorer;
4. asks ``engine.context`` at each token budget and records the share of evidence inside;
5. closes and deletes the store.

The report (a JSON-ready dict) holds the mean of every metric per system, overall and per
group, search latency percentiles, the ingest rate, the embedding cache hits and misses,
and the peak memory of the process.
"""

from __future__ import annotations

import os
import platform
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import recalld
from recalld.bench.cases import Case, Probe, select_by_id
from recalld.bench.locomo import DEFAULT_CATEGORIES, load_locomo, locomo_case
from recalld.bench.longmemeval import (
    Granularity,
    load_longmemeval,
    longmemeval_case,
    select_questions,
)
from recalld.bench.metrics import (
    context_scores,
    distinct,
    locomo_scores,
    longmemeval_scores,
    percentile,
)
from recalld.bench.report import embedder_record
from recalld.config import Settings, default_cache_dir
from recalld.errors import InvalidInputError
from recalld.providers.cache import CachedEmbedder, EmbeddingCache
from recalld.providers.embedders import Embedder, resolve_embedder
from recalld.records import SEARCH_MODES, SearchMode
from recalld.retrieval.config import RetrievalConfig, get_preset
from recalld.retrieval.models import Models, build_models

DEFAULT_BUDGETS = (1000, 2000, 4000)
"""Context budgets (estimated tokens, as ``engine.context`` counts them) the issue names."""
SEARCH_DEPTH = 50
"""Hits per search: the ranking every metric is computed from (turn metrics go to @50)."""
SESSION_COVERAGE = 10
"""The widest session cut-off; rankings covering fewer distinct sessions are counted."""
MAX_CONTENT_CHARS = 2_000_000
"""Whole LongMemEval sessions (``--granularity session``) can exceed the default limit."""
CACHE_FILE = "embeddings.sqlite"
"""The same file the engine uses under ``cache_dir``, so benchmarks and normal use share it."""
TOP_IDS_KEPT = 10
"""Ranked ids kept per probe and system in the report, for inspection."""

Scorer = Callable[[Sequence[str], Case, Probe], dict[str, float]]
Progress = Callable[[int, int, str], None]
"""``progress(advance, total, label)``: called as probes are answered."""


@dataclass(frozen=True)
class System:
    """One retrieval system to compare: a name, retrieval settings and a search mode."""

    name: str
    config: RetrievalConfig
    mode: SearchMode = "auto"


def build_systems(
    configs: Mapping[str, RetrievalConfig | System] | None = None,
    *,
    mode: SearchMode = "auto",
    baselines: bool = True,
    base: RetrievalConfig | None = None,
) -> list[System]:
    """The systems of a run: the named configs (default: recalld's pipeline) and baselines.

    Baselines are plain RRF (BM25 and vectors fused, hybrid), plain BM25 only
    (``channels=("bm25",)``) and plain vector only (``mode="vector"``): ``base.plain()``, so
    no adjustment, session or neighbour support reorders them; what a user of a plain index
    would get.
    """
    if mode not in SEARCH_MODES:
        raise InvalidInputError(f"mode must be one of {', '.join(SEARCH_MODES)}")
    default = base or get_preset("balanced")
    named = configs if configs is not None else {"recalld": default}
    systems = [c if isinstance(c, System) else System(n, c, mode) for n, c in named.items()]
    if baselines:
        plain = default.plain()
        systems += [
            System("rrf", plain, "hybrid"),
            System("bm25", plain.with_changes(channels=("bm25",)), "hybrid"),
            System("vector", plain, "vector"),
        ]
    names = [s.name for s in systems]
    if len(set(names)) != len(names):
        raise InvalidInputError(f"system names must be unique, got {', '.join(names)}")
    return systems


@dataclass
class _Tally:
    """What accumulates over a run (internal and mutable on purpose)."""

    probes: list[dict[str, Any]] = field(default_factory=list)
    latency_ms: dict[str, list[float]] = field(default_factory=dict)
    first_search_ms: list[float] = field(default_factory=list)
    short_rankings: dict[str, int] = field(default_factory=dict)
    memories: int = 0
    skipped_turns: int = 0
    ingest_s: float = 0.0
    unscored: int = 0


def load_embedder(embedder: Embedder, cache_dir: Path | None) -> Embedder:
    """The embedder, behind the persistent cache when ``cache_dir`` is set."""
    if cache_dir is None or isinstance(embedder, CachedEmbedder):
        return embedder
    return CachedEmbedder(embedder, EmbeddingCache(Path(cache_dir) / CACHE_FILE))


def run_cases(
    cases: Iterable[Case],
    total_probes: int,
    systems: Sequence[System],
    scorer: Scorer,
    *,
    embedder: Embedder,
    cache_dir: Path | None,
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    depth: int = SEARCH_DEPTH,
    progress: Progress | None = None,
    models: Models | None = None,
    embedder_setting: str | None = None,
) -> dict[str, Any]:
    """Run every case and return the aggregated report (see the module docstring).

    ``models``: the optional LLM / reranker every case's engine uses (one for the run);
    ``embedder_setting``: the setting that chose ``embedder``, for the report."""
    if not systems:
        raise InvalidInputError("no system to evaluate")
    if any(b < 1 for b in budgets):
        raise InvalidInputError("context budgets must be positive")
    started, load_before = time.perf_counter(), load_average()
    hits_before, misses_before = _cache_counts(embedder)
    tally = _Tally()
    for case in cases:

        def advance(step: int, label: str = case.case_id) -> None:
            if progress is not None:
                progress(step, total_probes, label)

        _run_case(case, systems, scorer, embedder, cache_dir, budgets, depth, tally, advance,
                  models)  # fmt: skip
    hits, misses = (a - b for a, b in zip(_cache_counts(embedder), (hits_before, misses_before),
                                          strict=True))  # fmt: skip
    return {
        "systems": {s.name: _system_report(s, tally) for s in systems},
        "speed": _speed(tally, hits, misses, time.perf_counter() - started),
        "probes": tally.probes,
        "unscored_probes": tally.unscored,
        "options": {"depth": depth, "budgets": list(budgets)},
        "embedder": embedder_record(embedder, embedder_setting),
        "machine": machine(),
        "load_average": {"start": load_before, "end": load_average()},
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _run_case(
    case: Case,
    systems: Sequence[System],
    scorer: Scorer,
    embedder: Embedder,
    cache_dir: Path | None,
    budgets: Sequence[int],
    depth: int,
    tally: _Tally,
    advance: Callable[[int], None],
    models: Models | None = None,
) -> None:
    with tempfile.TemporaryDirectory(prefix="recalld-bench-") as folder:
        # model_construct: explicit values and defaults only, no RECALLD_* variables read.
        settings = Settings.model_construct(db=Path(folder) / "bench.db", cache_dir=cache_dir,
                                            max_content_chars=MAX_CONTENT_CHARS)  # fmt: skip
        with recalld.open(settings=settings, embedder=embedder, models=models) as engine:
            clock = time.perf_counter()
            engine.add_many([d.memory for d in case.docs], dedupe=False)
            tally.ingest_s += time.perf_counter() - clock
            tally.memories += len(case.docs)
            tally.skipped_turns += case.skipped_turns
            if case.probes:
                # The first search on a fresh store also loads its vectors and warms SQLite's
                # pages: timed apart, so per-system latencies are those of a store in use.
                clock = time.perf_counter()
                engine.search(case.probes[0].question, limit=depth)
                tally.first_search_ms.append((time.perf_counter() - clock) * 1000)
            for probe in case.probes:
                if not probe.gold_docs and not probe.gold_sessions:
                    tally.unscored += 1
                else:
                    record = _ask(engine, case, probe, systems, scorer, budgets, depth, tally)
                    tally.probes.append(record)
                advance(1)


def _ask(
    engine: recalld.MemoryEngine,
    case: Case,
    probe: Probe,
    systems: Sequence[System],
    scorer: Scorer,
    budgets: Sequence[int],
    depth: int,
    tally: _Tally,
) -> dict[str, Any]:
    """One probe through every system: ranking, scores, context evidence."""
    session_of = {d.memory.id or "": d.session for d in case.docs}
    sessions_in_case = len(set(session_of.values()))
    per_system: dict[str, Any] = {}
    for system in systems:
        args: dict[str, Any] = {"as_of": probe.as_of, "mode": system.mode,
                                "config": system.config}  # fmt: skip
        clock = time.perf_counter()
        result = engine.search(probe.question, limit=depth, **args)
        tally.latency_ms.setdefault(system.name, []).append((time.perf_counter() - clock) * 1000)
        ranked = [h.memory.id for h in result.hits]
        covered = len(distinct([session_of[i] for i in ranked]))
        if covered < min(SESSION_COVERAGE, sessions_in_case):
            tally.short_rankings[system.name] = tally.short_rankings.get(system.name, 0) + 1
        scores = scorer(ranked, case, probe)
        if budgets and probe.gold_docs:
            found = {b: {h.memory.id for h in engine.context(probe.question, max_tokens=b,
                                                             **args).hits}
                     for b in budgets}  # fmt: skip
            scores.update(context_scores(found, probe.gold_docs))
        per_system[system.name] = {"scores": scores, "top": ranked[:TOP_IDS_KEPT]}
    return {
        "id": probe.probe_id,
        "group": probe.group,
        "case": case.case_id,
        "gold_sessions": sorted(probe.gold_sessions),
        "gold_memories": sorted(probe.gold_docs),
        "systems": per_system,
    }


def summarize(records: Sequence[Mapping[str, float]]) -> dict[str, Any]:
    """Mean of each metric over the records that have it, and how many had it."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for record in records:
        for name, value in record.items():
            sums[name] = sums.get(name, 0.0) + value
            counts[name] = counts.get(name, 0) + 1
    names = sorted(sums)
    return {
        "n": len(records),
        "metrics": {n: sums[n] / counts[n] for n in names},
        "counts": {n: counts[n] for n in names},
    }


def _system_report(system: System, tally: _Tally) -> dict[str, Any]:
    scores = [p["systems"][system.name]["scores"] for p in tally.probes]
    groups: dict[str, list[Mapping[str, float]]] = {}
    for probe, score in zip(tally.probes, scores, strict=True):
        groups.setdefault(probe["group"], []).append(score)
    latencies = tally.latency_ms.get(system.name, [])
    return {
        "mode": system.mode,
        "config": config_dict(system.config),
        "overall": summarize(scores),
        "by_group": {g: summarize(groups[g]) for g in sorted(groups)},
        "latency_ms": _latency(latencies),
        "short_rankings": tally.short_rankings.get(system.name, 0),
    }


def _latency(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    return {"p50": percentile(values, 50), "p95": percentile(values, 95),
            "mean": sum(values) / len(values), "searches": len(values)}  # fmt: skip


def _speed(tally: _Tally, hits: int, misses: int, wall_s: float) -> dict[str, Any]:
    state = "warm" if misses == 0 else "cold" if hits == 0 else "partly warm"
    rate = tally.memories / tally.ingest_s if tally.ingest_s > 0 else 0.0
    return {
        "memories": tally.memories,
        "skipped_empty_turns": tally.skipped_turns,
        "ingest_s": tally.ingest_s,
        "ingest_memories_per_s": rate,
        "embedding_cache": {"hits": hits, "misses": misses, "state": state},
        "peak_rss_mb": peak_rss_mb(),
        "wall_s": wall_s,
        "first_search_ms": _latency(tally.first_search_ms),
    }


def _cache_counts(embedder: Embedder) -> tuple[int, int]:
    if isinstance(embedder, CachedEmbedder):
        return embedder.hits, embedder.misses
    return 0, 0


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cores": cores, "platform": platform.platform(), "processor": platform.machine(),
            "python": platform.python_version()}  # fmt: skip


def load_average() -> list[float] | None:
    """The machine's 1, 5 and 15 minute load averages (None where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def config_dict(config: RetrievalConfig) -> dict[str, Any]:
    """A retrieval config as plain JSON values."""
    out: dict[str, Any] = {}
    for f in fields(config):
        value = getattr(config, f.name)
        out[f.name] = dict(value) if isinstance(value, Mapping) else (
            list(value) if isinstance(value, tuple) else value)  # fmt: skip
    return out


# -- benchmark entry points ----------------------------------------------------------------


def run_longmemeval(
    path: str | Path,
    *,
    configs: Mapping[str, RetrievalConfig | System] | None = None,
    base: RetrievalConfig | None = None,
    mode: SearchMode = "auto",
    baselines: bool = True,
    granularity: Granularity = "turn",
    roles: Sequence[str] = (),
    limit: int | None = None,
    question_ids: Sequence[str] = (),
    include_abstention: bool = False,
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    depth: int = SEARCH_DEPTH,
    embedder: Embedder | str | None = None,
    cache_dir: Path | None = None,
    settings: Settings | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Evaluate retrieval systems on a LongMemEval file; returns the report dict.

    Args:
        path: the file (plain or gzipped JSON, official schema).
        configs: name -> retrieval settings (or a :class:`System` with its own mode); default
            ``{"recalld": base}``.
        base: recalld's default settings, from which the baselines derive (default: the
            ``balanced`` preset).
        mode: the search mode of the ``configs`` given as plain settings.
        baselines: also run BM25 only and vector only.
        granularity: ``turn`` (a memory per turn) or ``session`` (a memory per session).
        roles: store only turns of these roles (e.g. ``("user",)``, as the official script
            does); empty stores every turn.
        limit: score only the first ``limit`` selected questions.
        question_ids: score only these questions.
        include_abstention: also score ``_abs`` questions (left out by default, as upstream).
        budgets: context budgets for evidence-in-context; ``()`` skips that (faster).
        depth: hits per search.
        embedder: an embedder or a spec such as ``local`` (default: from ``settings``, else
            the packaged local model).
        cache_dir: the embedding cache folder (default: from ``settings``, else the user
            cache dir).
        settings: resolved settings (embedder, cache folder, preset) when not given above.
        progress: called as questions are answered.
    """
    if granularity not in ("turn", "session"):
        raise InvalidInputError("granularity must be 'turn' or 'session'")
    _check_run(limit, depth)
    questions = load_longmemeval(path)
    chosen = select_questions(questions, question_ids=question_ids,
                              include_abstention=include_abstention, limit=limit)  # fmt: skip
    model, resolved_cache, default, setting = resources(embedder, cache_dir, settings, base)
    systems = build_systems(configs, mode=mode, baselines=baselines, base=default)
    turn_level = granularity == "turn"

    def scorer(ranked: Sequence[str], case: Case, probe: Probe) -> dict[str, float]:
        session_of = {d.memory.id or "": d.session for d in case.docs}
        return longmemeval_scores(ranked, session_of, probe.gold_sessions, probe.gold_docs,
                                  case.session_sizes(), turn_level=turn_level)  # fmt: skip

    cases = (longmemeval_case(q, granularity, roles or None) for q in chosen)
    report = run_cases(
        cases, len(chosen), systems, scorer,
        embedder=model, cache_dir=resolved_cache, budgets=budgets, depth=depth,
        progress=progress, models=run_models(settings, resolved_cache), embedder_setting=setting,
    )  # fmt: skip
    abstention = sum(q.abstention for q in questions)
    report["options"].update({"mode": mode, "granularity": granularity,
                              "roles": list(roles) or "all", "limit": limit,
                              "question_ids": list(question_ids),
                              "include_abstention": include_abstention})  # fmt: skip
    report["questions"] = {
        "in_file": len(questions),
        "abstention_in_file": abstention,
        "selected": len(chosen),
        "scored": len(report["probes"]),
        "with_turn_labels": sum(bool(p["gold_memories"]) for p in report["probes"])
        if turn_level
        else 0,
    }
    return ordered_report("longmemeval", path, report)


def run_locomo(
    path: str | Path,
    *,
    configs: Mapping[str, RetrievalConfig | System] | None = None,
    base: RetrievalConfig | None = None,
    mode: SearchMode = "auto",
    baselines: bool = True,
    categories: Sequence[int] = DEFAULT_CATEGORIES,
    limit: int | None = None,
    conversation_ids: Sequence[str] = (),
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    depth: int = SEARCH_DEPTH,
    embedder: Embedder | str | None = None,
    cache_dir: Path | None = None,
    settings: Settings | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Evaluate retrieval systems on a LoCoMo file; returns the report dict.

    ``limit`` and ``conversation_ids`` select conversations (a store per conversation);
    ``categories`` selects questions. Other arguments are those of :func:`run_longmemeval`.
    """
    _check_run(limit, depth)
    conversations = select_by_id(
        load_locomo(path), conversation_ids, lambda c: c.sample_id, "conversation"
    )
    chosen = conversations if limit is None else conversations[:limit]
    cases = [locomo_case(c, categories) for c in chosen]
    model, resolved_cache, default, setting = resources(embedder, cache_dir, settings, base)
    systems = build_systems(configs, mode=mode, baselines=baselines, base=default)

    def scorer(ranked: Sequence[str], case: Case, probe: Probe) -> dict[str, float]:
        session_of = {d.memory.id or "": d.session for d in case.docs}
        return locomo_scores(ranked, session_of, probe.gold_docs, probe.gold_sessions)

    total = sum(len(c.probes) for c in cases)
    models = run_models(settings, resolved_cache)
    report = run_cases(
        cases, total, systems, scorer, embedder=model, cache_dir=resolved_cache,
        budgets=budgets, depth=depth, progress=progress, models=models, embedder_setting=setting,
    )  # fmt: skip
    report["options"].update({"mode": mode, "categories": list(categories), "limit": limit,
                              "conversation_ids": list(conversation_ids)})  # fmt: skip
    report["questions"] = {
        "conversations": len(chosen),
        "in_file": sum(len(c.questions) for c in conversations),
        "selected": total,
        "scored": len(report["probes"]),
        "without_evidence": report["unscored_probes"],
        "unknown_evidence_ids": sum(
            len(q.unknown_evidence) for c in chosen for q in c.questions if q.category in categories
        ),  # fmt: skip
    }
    return ordered_report("locomo", path, report)


REPORT_ORDER = ("benchmark", "file", "date", "machine", "load_average", "embedder",
                "questions", "options", "systems", "comparisons", "speed", "unscored_probes",
                "probes")  # fmt: skip


def ordered_report(benchmark: str, path: str | Path, report: dict[str, Any]) -> dict[str, Any]:
    """The report with its summary keys first and the per-question records last."""
    full = {"benchmark": benchmark, "file": str(path), **report}
    return {k: full[k] for k in REPORT_ORDER if k in full} | {
        k: v for k, v in full.items() if k not in REPORT_ORDER}  # fmt: skip


def _check_run(limit: int | None, depth: int) -> None:
    if limit is not None and limit < 1:
        raise InvalidInputError("limit must be at least 1")
    if not 1 <= depth <= 1000:
        raise InvalidInputError("depth must be between 1 and 1000")


def run_models(settings: Settings | None, cache_dir: Path) -> Models | None:
    """The LLM and reranker the settings name (``--llm``, ``--reranker``), if any, their
    answers cached beside the run's embeddings."""
    if settings is None or not (settings.llm or settings.reranker):
        return None
    return build_models(settings.model_copy(update={"cache_dir": cache_dir}))


class Resources(NamedTuple):
    """What a run is built on, resolved from the call's arguments and the settings."""

    embedder: Embedder
    """The embedder, behind the persistent cache."""
    cache_dir: Path
    base: RetrievalConfig
    """recalld's default settings, from which the baselines derive."""
    embedder_setting: str | None
    """The setting that chose the embedder (``None`` for an object given in code)."""


def resources(
    embedder: Embedder | str | None,
    cache_dir: Path | None,
    settings: Settings | None,
    base: RetrievalConfig | None,
) -> Resources:
    """The embedder (behind the cache), the cache folder and recalld's default settings."""
    folder = cache_dir or (settings.cache_dir if settings else None) or default_cache_dir()
    spec: str | None = None
    if isinstance(embedder, Embedder):
        model = embedder
    else:
        spec = embedder or (settings.embedder if settings else "local")
        model = resolve_embedder(spec, settings)
    preset = get_preset(settings.preset) if settings else get_preset("balanced")
    return Resources(load_embedder(model, Path(folder)), Path(folder), base or preset, spec)
