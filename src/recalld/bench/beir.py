"""``recalld bench beir``: retrieval over a document collection in BEIR's layout.

A BEIR folder holds ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl``
(``_id``, ``text``) and ``qrels/<split>.tsv`` (a header line, then ``query-id``,
``corpus-id`` and a graded ``score`` per line). The run

1. stores every document in one fresh store through ``engine.add_many``, its content the
   title, a blank line and the text, its BEIR id as the memory id;
2. asks every query that has judgements in the split of recalld's pipeline (and any
   variant) and of plain RRF, BM25 only and vector only, as of now (documents carry no
   dates), through :func:`recalld.bench.runner.run_cases`;
3. scores nDCG@10 (graded), recall@100 and MRR@10 (:func:`recalld.bench.metrics.beir_scores`)
   and counts the paired wins and losses of each pipeline against plain RRF.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recalld.bench.cases import Case, Doc, Probe, select_by_id
from recalld.bench.metrics import beir_scores
from recalld.bench.run_report import ordered_report
from recalld.bench.runner import run_cases
from recalld.bench.systems import Progress, System, resources, run_models
from recalld.bench.workloads_run import comparisons, workload_systems
from recalld.config import Settings
from recalld.errors import InvalidInputError
from recalld.providers.embedders import Embedder
from recalld.records import NewMemory, Source
from recalld.retrieval.config import RetrievalConfig, get_preset

DEPTH = 100
"""Hits per search: recall@100 needs a ranking of 100."""
PAIRED_METRICS = ("doc.ndcg@10", "doc.mrr@10")
TOP_IDS_KEPT = 5
"""Ranked ids kept per query and system in the report (a BEIR run has hundreds of queries)."""
SOURCE_KIND = "beir"


@dataclass(frozen=True)
class BeirSet:
    """A BEIR folder read for one split: documents, the judged queries and their grades."""

    documents: tuple[tuple[str, str], ...]
    """``(id, content)`` of every document with text, in file order."""
    empty_documents: int
    queries: Mapping[str, str]
    """Every query of ``queries.jsonl``, id -> text."""
    qrels: Mapping[str, Mapping[str, int]]
    """Query id -> document id -> grade, for the split, in file order."""


def _jsonl(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, record)`` for each non-blank line of a JSON Lines file."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InvalidInputError(f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{path} is not UTF-8 text: {exc.reason}") from exc
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path.name} line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInputError(f"{where} is not valid JSON: {exc.msg}") from exc
        if not isinstance(record, dict) or "_id" not in record:
            raise InvalidInputError(f"{where}: expected an object with an '_id'")
        yield where, record


def _text(record: Mapping[str, Any], key: str, where: str) -> str:
    value = record.get(key) or ""
    if not isinstance(value, str):
        raise InvalidInputError(f"{where}: the field {key!r} should be text")
    return value.strip()


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InvalidInputError(f"cannot read {path}: {exc.strerror}") from exc
    qrels: dict[str, dict[str, int]] = {}
    for number, line in enumerate(lines[1:], start=2):  # line 1 is the header
        if not line.strip():
            continue
        cells = line.split("\t")
        try:
            query_id, doc_id, grade = cells[0], cells[1], int(cells[2])
        except (IndexError, ValueError) as exc:
            raise InvalidInputError(
                f"{path.name} line {number}: expected query-id, corpus-id and an integer "
                "score separated by tabs"
            ) from exc
        qrels.setdefault(query_id.strip(), {})[doc_id.strip()] = grade
    return qrels


def load_beir(folder: str | Path, split: str = "test") -> BeirSet:
    """Read a BEIR folder's corpus, queries and the qrels of ``split``.

    Raises:
        InvalidInputError: a file is missing or malformed, or a judged query has no text.
    """
    root = Path(folder)
    qrels_path = root / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        found = sorted(p.stem for p in (root / "qrels").glob("*.tsv"))
        raise InvalidInputError(
            f"no qrels/{split}.tsv in {root} (splits found: {', '.join(found) or 'none'})"
        )
    documents: list[tuple[str, str]] = []
    empty = 0
    for where, record in _jsonl(root / "corpus.jsonl"):
        parts = [_text(record, "title", where), _text(record, "text", where)]
        content = "\n\n".join(p for p in parts if p)
        if content:
            documents.append((str(record["_id"]), content))
        else:
            empty += 1
    queries = {str(r["_id"]): _text(r, "text", w) for w, r in _jsonl(root / "queries.jsonl")}
    qrels = _read_qrels(qrels_path)
    missing = [q for q in qrels if not queries.get(q)]
    if missing:
        raise InvalidInputError(
            f"qrels/{split}.tsv judges queries that queries.jsonl lacks "
            f"or leaves empty: {', '.join(missing[:5])}"
        )
    return BeirSet(tuple(documents), empty, queries, qrels)


def beir_case(data: BeirSet, query_ids: Sequence[str], split: str) -> Case:
    """One store of every document, and a probe per judged query (graded ids as gold)."""
    docs = tuple(
        Doc(
            NewMemory(id=doc_id, content=content, source=Source(kind=SOURCE_KIND, ref=doc_id)),
            session=doc_id,
        )
        for doc_id, content in data.documents
    )
    probes = tuple(
        Probe(
            probe_id=q,
            group=split,
            question=data.queries[q],
            as_of=None,
            gold_sessions=frozenset(),
            gold_docs=frozenset(d for d, g in data.qrels[q].items() if g > 0),
        )
        for q in query_ids
    )
    return Case(f"beir-{split}", docs, probes, skipped_turns=data.empty_documents)


def run_beir(
    folder: str | Path,
    *,
    split: str = "test",
    configs: Mapping[str, RetrievalConfig | System] | None = None,
    base: RetrievalConfig | None = None,
    preset: str | None = None,
    variant: Mapping[str, Any] | None = None,
    baselines: bool = True,
    limit: int | None = None,
    query_ids: Sequence[str] = (),
    depth: int = DEPTH,
    embedder: Embedder | str | None = None,
    cache_dir: Path | None = None,
    settings: Settings | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Evaluate retrieval systems on a BEIR folder's ``split``; returns the report dict.

    ``limit`` and ``query_ids`` select judged queries (in qrels order); the other arguments
    are those of :func:`recalld.bench.workloads_run.run_workloads`.
    """
    if limit is not None and limit < 1:
        raise InvalidInputError("limit must be at least 1")
    if not 1 <= depth <= 1000:
        raise InvalidInputError("depth must be between 1 and 1000")
    data = load_beir(folder, split)
    chosen = select_by_id(list(data.qrels), query_ids, lambda q: q, "query")[:limit]
    if base is None and preset is not None:
        base = get_preset(preset)
    model, resolved_cache, default, setting = resources(embedder, cache_dir, settings, base)
    systems = workload_systems(configs, default, baselines, variant)

    def scorer(ranked: Sequence[str], case: Case, probe: Probe) -> dict[str, float]:
        return beir_scores(ranked, data.qrels[probe.probe_id])

    report = run_cases(
        [beir_case(data, chosen, split)],
        len(chosen),
        systems,
        scorer,
        embedder=model,
        cache_dir=resolved_cache,
        budgets=(),
        depth=depth,
        progress=progress,
        models=run_models(settings, resolved_cache),
        embedder_setting=setting,
    )
    report["comparisons"] = comparisons(report["probes"], [s.name for s in systems], PAIRED_METRICS)
    report["probes"] = [_compact(p, data.qrels[p["id"]]) for p in report["probes"]]
    known = {doc_id for doc_id, _ in data.documents}
    report["options"].update(
        {
            "split": split,
            "limit": limit,
            "query_ids": list(query_ids),
            "preset": preset,
            "variant": dict(variant or {}),
        }
    )
    report["questions"] = {
        "documents": len(data.documents),
        "empty_documents": data.empty_documents,
        "queries_in_file": len(data.queries),
        "judged_queries": len(data.qrels),
        "selected": len(chosen),
        "scored": len(report["probes"]),
        "judged_ids_not_in_corpus": sum(d not in known for q in chosen for d in data.qrels[q]),
    }
    return ordered_report("beir", folder, report)


def _compact(record: Mapping[str, Any], grades: Mapping[str, int]) -> dict[str, Any]:
    """A query's record, small enough for hundreds of queries: its grades, and per system
    the scores (4 decimals) and the first ids."""
    return {
        "id": record["id"],
        "gold": dict(grades),
        "systems": {
            name: {
                "scores": {k: round(v, 4) for k, v in s["scores"].items()},
                "top": s["top"][:TOP_IDS_KEPT],
            }
            for name, s in record["systems"].items()
        },
    }
