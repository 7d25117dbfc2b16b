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

import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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
)
from recalld.bench.report import embedder_record
from recalld.bench.run_report import (
    Tally,
    cache_counts,
    load_average,
    machine,
    ordered_report,
    speed,
    system_report,
)
from recalld.bench.systems import (
    Progress,
    System,
    build_systems,
    check_run,
    resources,
    run_models,
)
from recalld.config import Settings
from recalld.errors import InvalidInputError
from recalld.providers.embedders import Embedder
from recalld.records import SearchMode
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.models import Models

DEFAULT_BUDGETS = (1000, 2000, 4000)
"""Context budgets (estimated tokens, as ``engine.context`` counts them) the issue names."""
SEARCH_DEPTH = 50
"""Hits per search: the ranking every metric is computed from (turn metrics go to @50)."""
SESSION_COVERAGE = 10
"""The widest session cut-off; rankings covering fewer distinct sessions are counted."""
MAX_CONTENT_CHARS = 2_000_000
"""Whole LongMemEval sessions (``--granularity session``) can exceed the default limit."""
TOP_IDS_KEPT = 10
"""Ranked ids kept per probe and system in the report, for inspection."""

Scorer = Callable[[Sequence[str], Case, Probe], dict[str, float]]


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
    hits_before, misses_before = cache_counts(embedder)
    tally = Tally()
    for case in cases:

        def advance(step: int, label: str = case.case_id) -> None:
            if progress is not None:
                progress(step, total_probes, label)

        _run_case(
            case, systems, scorer, embedder, cache_dir, budgets, depth, tally, advance, models
        )
    hits, misses = (
        a - b for a, b in zip(cache_counts(embedder), (hits_before, misses_before), strict=True)
    )
    return {
        "systems": {s.name: system_report(s, tally) for s in systems},
        "speed": speed(tally, hits, misses, time.perf_counter() - started),
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
    tally: Tally,
    advance: Callable[[int], None],
    models: Models | None = None,
) -> None:
    with tempfile.TemporaryDirectory(prefix="recalld-bench-") as folder:
        # model_construct: explicit values and defaults only, no RECALLD_* variables read.
        settings = Settings.model_construct(
            db=Path(folder) / "bench.db", cache_dir=cache_dir, max_content_chars=MAX_CONTENT_CHARS
        )
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
    tally: Tally,
) -> dict[str, Any]:
    """One probe through every system: ranking, scores, context evidence."""
    session_of = {d.memory.id or "": d.session for d in case.docs}
    sessions_in_case = len(set(session_of.values()))
    per_system: dict[str, Any] = {}
    for system in systems:
        args: dict[str, Any] = {"as_of": probe.as_of, "mode": system.mode, "config": system.config}
        clock = time.perf_counter()
        result = engine.search(probe.question, limit=depth, **args)
        tally.latency_ms.setdefault(system.name, []).append((time.perf_counter() - clock) * 1000)
        ranked = [h.memory.id for h in result.hits]
        covered = len(distinct([session_of[i] for i in ranked]))
        if covered < min(SESSION_COVERAGE, sessions_in_case):
            tally.short_rankings[system.name] = tally.short_rankings.get(system.name, 0) + 1
        scores = scorer(ranked, case, probe)
        if budgets and probe.gold_docs:
            found = {
                b: {h.memory.id for h in engine.context(probe.question, max_tokens=b, **args).hits}
                for b in budgets
            }
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
    check_run(limit, depth)
    questions = load_longmemeval(path)
    chosen = select_questions(
        questions, question_ids=question_ids, include_abstention=include_abstention, limit=limit
    )
    model, resolved_cache, default, setting = resources(embedder, cache_dir, settings, base)
    systems = build_systems(configs, mode=mode, baselines=baselines, base=default)
    turn_level = granularity == "turn"

    def scorer(ranked: Sequence[str], case: Case, probe: Probe) -> dict[str, float]:
        session_of = {d.memory.id or "": d.session for d in case.docs}
        return longmemeval_scores(
            ranked,
            session_of,
            probe.gold_sessions,
            probe.gold_docs,
            case.session_sizes(),
            turn_level=turn_level,
        )

    cases = (longmemeval_case(q, granularity, roles or None) for q in chosen)
    report = run_cases(
        cases,
        len(chosen),
        systems,
        scorer,
        embedder=model,
        cache_dir=resolved_cache,
        budgets=budgets,
        depth=depth,
        progress=progress,
        models=run_models(settings, resolved_cache),
        embedder_setting=setting,
    )
    abstention = sum(q.abstention for q in questions)
    report["options"].update(
        {
            "mode": mode,
            "granularity": granularity,
            "roles": list(roles) or "all",
            "limit": limit,
            "question_ids": list(question_ids),
            "include_abstention": include_abstention,
        }
    )
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
    check_run(limit, depth)
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
        cases,
        total,
        systems,
        scorer,
        embedder=model,
        cache_dir=resolved_cache,
        budgets=budgets,
        depth=depth,
        progress=progress,
        models=models,
        embedder_setting=setting,
    )
    report["options"].update(
        {
            "mode": mode,
            "categories": list(categories),
            "limit": limit,
            "conversation_ids": list(conversation_ids),
        }
    )
    report["questions"] = {
        "conversations": len(chosen),
        "in_file": sum(len(c.questions) for c in conversations),
        "selected": total,
        "scored": len(report["probes"]),
        "without_evidence": report["unscored_probes"],
        "unknown_evidence_ids": sum(
            len(q.unknown_evidence) for c in chosen for q in c.questions if q.category in categories
        ),
    }
    return ordered_report("locomo", path, report)
