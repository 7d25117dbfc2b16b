"""Questions over a folder of markdown documentation, scored at the section level.

A docs set is a folder of markdown pages and a JSON file of questions, each a list of
``[page, heading]`` pairs that answer it (``page`` relative to the folder; ``heading`` the
title of the section, or ``null`` when any part of the page answers). The run

1. indexes the folder into a fresh store through ``engine.index`` (what ``recalld index
   FOLDER --glob '**/*.md'`` does), so chunking, ids and timestamps are the user's;
2. asks every question of each system (recalld's pipeline, any variant, plain RRF, BM25
   only, vector only) with ``limit`` = :data:`DEPTH`;
3. scores each ranking: a hit is a chunk of a gold page whose lines lie, at least in part,
   under the gold heading (at any depth below it); ``section.hit@1/5/10`` and
   ``section.mrr@10``, and the same per page (``page.*``) to tell a wrong section of the right
   page from a wrong page.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import recalld
from recalld.bench.run_report import summarize
from recalld.bench.systems import Progress, System, resources, run_models
from recalld.bench.workloads_run import comparisons, workload_systems
from recalld.config import Settings
from recalld.errors import InvalidInputError
from recalld.providers.embedders import Embedder
from recalld.records import Memory
from recalld.retrieval.config import RetrievalConfig
from recalld.sources.chunking import parse_blocks

DEPTH = 10
"""Hits per search: what a user reads, and the deepest cut-off scored."""
CUTOFFS = (1, 5, 10)
GLOBS = ("**/*.md",)
"""Every markdown page of the folder, as ``recalld index --glob '**/*.md'``."""
PAIRED_METRICS = ("section.hit@1", "section.mrr@10")


@dataclass(frozen=True)
class DocQuestion:
    """One question and the sections that answer it."""

    id: str
    question: str
    gold: tuple[tuple[str, str | None], ...]
    """``(page, heading)`` pairs; a ``None`` heading accepts any chunk of the page."""


def load_questions(path: str | Path) -> list[DocQuestion]:
    """Read a questions file (a JSON list of ``{id, question, gold}``)."""
    try:
        rows = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidInputError(f"cannot read questions from {path}: {exc}") from exc
    out = []
    for row in rows:
        gold = tuple((str(page), None if h is None else str(h)) for page, h in row["gold"])
        if not gold or not str(row.get("question", "")).strip():
            raise InvalidInputError(f"question {row.get('id')!r} needs text and a gold section")
        out.append(DocQuestion(str(row["id"]), str(row["question"]), gold))
    return out


def normalize_heading(title: str) -> str:
    """A heading as compared: no code ticks, case or repeated spaces."""
    return " ".join(title.replace("`", "").lower().split())


def line_sections(text: str) -> list[frozenset[str]]:
    """For each line (0-based) of a page, the headings it sits under, its own included."""
    lines = text.splitlines()
    out: list[frozenset[str]] = [frozenset()] * len(lines)
    for block in parse_blocks(lines):
        path = list(block.context)
        if block.kind == "heading":
            title = lines[block.start].strip().lstrip("#").strip().rstrip("#").strip()
            path.append(title)
        for i in range(block.start, block.end):
            out[i] = frozenset(normalize_heading(t) for t in path)
    return out


@dataclass(frozen=True)
class Located:
    """Where a hit sits: its page (relative) and the headings its lines sit under."""

    page: str
    sections: frozenset[str]

    @property
    def label(self) -> str:
        return self.page + (" > " + " | ".join(sorted(self.sections)) if self.sections else "")


def locate(memory: Memory, root: Path, pages: Mapping[str, list[frozenset[str]]]) -> Located:
    """The page and sections of an indexed chunk, from its source path and line range."""
    source = memory.source
    path = Path(source.path or "")
    page = path.relative_to(root).as_posix() if path.is_absolute() else path.as_posix()
    per_line = pages.get(page, [])
    start = (source.line_start or 1) - 1
    end = source.line_end or len(per_line)
    sections: frozenset[str] = frozenset().union(*per_line[start:end]) if per_line else frozenset()
    return Located(page, sections)


def is_answer(hit: Located, gold: Sequence[tuple[str, str | None]]) -> bool:
    """Whether the hit is a chunk of a gold page under a gold heading."""
    return any(
        hit.page == page and (heading is None or normalize_heading(heading) in hit.sections)
        for page, heading in gold
    )


def rank_scores(relevant: Sequence[bool], prefix: str) -> dict[str, float]:
    """hit@k for each cut-off and MRR@10 of one ranking, given which hits are answers."""
    first = next((i for i, ok in enumerate(relevant[:DEPTH]) if ok), None)
    scores = {f"{prefix}.hit@{k}": float(first is not None and first < k) for k in CUTOFFS}
    scores[f"{prefix}.mrr@10"] = 0.0 if first is None else 1.0 / (first + 1)
    return scores


def score(hits: Sequence[Located], gold: Sequence[tuple[str, str | None]]) -> dict[str, float]:
    """Section-level and page-level scores of one ranking."""
    pages = {page for page, _ in gold}
    return {
        **rank_scores([is_answer(h, gold) for h in hits], "section"),
        **rank_scores([h.page in pages for h in hits], "page"),
    }


def run_docs(
    folder: str | Path,
    questions: str | Path,
    *,
    configs: Mapping[str, RetrievalConfig | System] | None = None,
    base: RetrievalConfig | None = None,
    baselines: bool = True,
    embedder: Embedder | str | None = None,
    cache_dir: Path | None = None,
    settings: Settings | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Index ``folder``, ask every question of ``questions`` of each system, and score.

    The arguments after ``questions`` are those of
    :func:`recalld.bench.workloads_run.run_workloads`.
    """
    root = Path(folder).resolve()
    if not root.is_dir():
        raise InvalidInputError(f"{folder} is not a folder")
    asked = load_questions(questions)
    model, cache, default, _ = resources(embedder, cache_dir, settings, base)
    systems = workload_systems(configs, default, baselines)
    pages = {
        p.relative_to(root).as_posix(): line_sections(p.read_text(encoding="utf-8"))
        for p in sorted(root.rglob("*.md"))
    }
    _check_gold(asked, pages)
    probes: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="recalld-docs-") as tmp:
        store = Settings.model_construct(db=Path(tmp) / "docs.db", cache_dir=cache)
        with recalld.open(
            settings=store, embedder=model, models=run_models(settings, cache)
        ) as engine:
            indexed = engine.index([root], globs=list(GLOBS))
            for q in asked:
                per_system: dict[str, Any] = {}
                for system in systems:
                    result = engine.search(
                        q.question, limit=DEPTH, mode=system.mode, config=system.config
                    )
                    hits = [locate(h.memory, root, pages) for h in result.hits]
                    per_system[system.name] = {
                        "scores": score(hits, q.gold),
                        "top": [h.label for h in hits],
                    }
                probes.append(
                    {
                        "id": q.id,
                        "question": q.question,
                        "systems": per_system,
                        "gold": [list(g) for g in q.gold],
                    }
                )
                if progress is not None:
                    progress(1, len(asked), q.id)
    names = [s.name for s in systems]
    return {
        "folder": str(root),
        "pages": indexed.files,
        "chunks": indexed.total_chunks,
        "systems": {s: summarize([p["systems"][s]["scores"] for p in probes]) for s in names},
        "comparisons": comparisons(probes, names, PAIRED_METRICS),
        "probes": probes,
    }


def _check_gold(asked: Sequence[DocQuestion], pages: Mapping[str, list[frozenset[str]]]) -> None:
    """Every gold page exists and every gold heading is one of its headings."""
    for q in asked:
        for page, heading in q.gold:
            if page not in pages:
                raise InvalidInputError(f"question {q.id}: no page {page}")
            if heading is not None and not any(
                normalize_heading(heading) in s for s in pages[page]
            ):
                raise InvalidInputError(f"question {q.id}: no heading {heading!r} in {page}")
