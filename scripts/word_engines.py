"""Word engines side by side on one store (an experiment, not a test): FTS5 as recalld runs
it today, tantivy (block-max WAND over its own index) and bm25s (a sparse matrix in memory).

    PYTHONPATH=src:/path/to/tantivy-and-bm25s .venv/bin/python scripts/word_engines.py \\
        --store scale-bench/scale-100000.db [--questions 200] [--data ../shared/benchmarks] \\
        [--workdir /tmp/word-engines] [--out report.json]

The store is one ``recalld bench scale`` built. Every engine indexes the same memories (the
store's content) and answers the same real questions, as recalld's query analysis turns them
into words (``understand(...).terms``, OR-ed), for the top 10. Reported per engine: p50/p95
ms a query (rounds interleaved, so load hits all alike), how often its top 10 is FTS5's
(FTS5's ``bm25()`` is exact BM25 over every matching row, with recalld's tokenizer: Porter
stems, Unicode folding), the index build rate and size, the cost of one add made durable,
and the installed size. Tantivy's and bm25s's tokenizers are not FTS5's (Snowball English
stems), so their agreement measures tokenizer and formula together.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import sqlite3
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from recalld.bench.report import print_json
from recalld.bench.scale_corpus import read_sources
from recalld.retrieval.query import understand

K1, B = 1.2, 0.75
"""FTS5's BM25 parameters, given to the others too."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data", type=Path, default=Path("../shared/benchmarks"))
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/word-engines"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    load_before = os.getloadavg()
    db = sqlite3.connect(f"file:{args.store}?mode=ro", uri=True)
    rows = db.execute("SELECT pk, content FROM memories WHERE forgotten_at IS NULL ORDER BY pk")
    pks, texts = zip(*rows.fetchall(), strict=True)
    now = datetime.now(UTC)
    questions = read_sources(args.data).questions[: args.questions]
    terms = [understand(q, "hybrid", now).terms for q in questions]
    queries = [(q, t) for q, t in zip(questions, terms, strict=True) if t]
    args.workdir.mkdir(parents=True, exist_ok=True)
    engines = {"fts5": Fts5(db), "tantivy": Tantivy(args.workdir / "tantivy", pks, texts),
               "bm25s": Bm25s(args.workdir / "bm25s", pks, texts)}  # fmt: skip
    tops: dict[str, list[list[int]]] = {name: [] for name in engines}
    times: dict[str, list[float]] = {name: [] for name in engines}
    for round_ in range(args.rounds):
        for _, words in queries:
            for name, engine in engines.items():
                started = time.perf_counter()
                top = engine.top(words, 10)
                times[name].append((time.perf_counter() - started) * 1000)
                if round_ == 0:
                    tops[name].append(top)
    report: dict[str, Any] = {
        "date": now.isoformat(timespec="seconds"), "store": str(args.store),
        "memories": len(pks), "queries": len(queries), "rounds": args.rounds,
        "machine": {"cpus": os.cpu_count(), "load_before": load_before},
        "engines": {},
    }  # fmt: skip
    for name, engine in engines.items():
        agree = [_overlap(top, reference) for top, reference
                 in zip(tops[name], tops["fts5"], strict=True)]  # fmt: skip
        report["engines"][name] = {
            "p50_ms": statistics.median(times[name]),
            "p95_ms": float(np.percentile(times[name], 95)),
            "top10_overlap_with_fts5": statistics.mean(agree),
            "same_top10_as_fts5": sum(a == 1.0 for a in agree) / len(agree),
            "same_top1_as_fts5": sum(t[:1] == r[:1] for t, r
                                     in zip(tops[name], tops["fts5"], strict=True)) / len(agree),
            **engine.facts(),
        }  # fmt: skip
    report["machine"]["load_after"] = os.getloadavg()
    print_json(report, args.out, indent=2)


def _overlap(top: list[int], reference: list[int]) -> float:
    return len(set(top) & set(reference)) / len(reference) if reference else 1.0


def _installed_mb(*distributions: str) -> float:
    total = 0
    for name in distributions:
        for file in importlib.metadata.distribution(name).files or ():
            path = Path(str(file.locate()))
            total += path.stat().st_size if path.is_file() else 0
    return round(total / 2**20, 1)


def _folder_mb(folder: Path) -> float:
    return round(sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20, 1)


class Fts5:
    """The query recalld's word channel runs inside FTS5 (its winners, before the join)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def top(self, words: tuple[str, ...], k: int) -> list[int]:
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        found = self.db.execute(
            "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?"
            " ORDER BY bm25(memories_fts), rowid LIMIT ?", (match, k)
        )  # fmt: skip
        return [pk for (pk,) in found]

    def facts(self) -> dict[str, Any]:
        return {"exact": True, "incremental_writes": "yes (a row of the store's transaction)",
                "installed_mb": 0.0}  # fmt: skip


class Tantivy:
    """An index beside the store: pk (fast field) and content (``en_stem`` tokenizer)."""

    def __init__(self, folder: Path, pks: tuple[int, ...], texts: tuple[str, ...]) -> None:
        import tantivy

        self.tantivy = tantivy
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        builder = tantivy.SchemaBuilder()
        builder.add_integer_field("pk", stored=True, indexed=True, fast=True)
        builder.add_text_field("content", stored=False, tokenizer_name="en_stem")
        self.schema = builder.build()
        self.index = tantivy.Index(self.schema, path=str(folder))
        started = time.perf_counter()
        writer = self.index.writer(heap_size=256_000_000, num_threads=2)
        for pk, text in zip(pks, texts, strict=True):
            writer.add_document(tantivy.Document(pk=pk, content=text))
        writer.commit()
        writer.wait_merging_threads()
        self.build_s = time.perf_counter() - started
        self.size_mb = _folder_mb(folder)
        self.index.reload()
        self.searcher = self.index.searcher()
        self.add_ms = self._durable_add_ms(pks[-1] + 1)
        self.folder = folder

    def _durable_add_ms(self, first_pk: int, adds: int = 30) -> float:
        """One memory added and committed (fsync'd) at a time, as a store's add would."""
        writer = self.index.writer(heap_size=15_000_000, num_threads=1)
        took = []
        for n in range(adds):
            started = time.perf_counter()
            writer.add_document(self.tantivy.Document(pk=first_pk + n, content=f"note {n}"))
            writer.commit()
            took.append((time.perf_counter() - started) * 1000)
        writer.rollback()
        del writer
        return statistics.median(took)

    def top(self, words: tuple[str, ...], k: int) -> list[int]:
        text = " OR ".join('"' + w.replace('"', " ").replace("\\", " ") + '"' for w in words)
        query = self.index.parse_query(text, ["content"])
        hits = self.searcher.search(query, k, count=False).hits
        return [self.searcher.doc(address)["pk"][0] for _, address in hits]

    def facts(self) -> dict[str, Any]:
        return {"exact": True, "build_docs_per_s": round(len_docs(self.searcher) / self.build_s),
                "index_mb": self.size_mb, "durable_add_ms": round(self.add_ms, 2),
                "incremental_writes": "yes (segments; a commit per batch)",
                "installed_mb": _installed_mb("tantivy")}  # fmt: skip


def len_docs(searcher: Any) -> int:
    return int(searcher.num_docs)


class Bm25s:
    """A sparse matrix held in memory (Snowball stems, no stopwords, FTS5's k1 and b)."""

    def __init__(self, folder: Path, pks: tuple[int, ...], texts: tuple[str, ...]) -> None:
        import bm25s
        import Stemmer

        self.bm25s = bm25s
        self.stemmer = Stemmer.Stemmer("english")
        self.pks = np.asarray(pks)
        started = time.perf_counter()
        tokens = bm25s.tokenize(list(texts), stopwords=None, stemmer=self.stemmer,
                                show_progress=False)  # fmt: skip
        self.retriever = bm25s.BM25(k1=K1, b=B)
        self.retriever.index(tokens, show_progress=False)
        self.build_s = time.perf_counter() - started
        shutil.rmtree(folder, ignore_errors=True)
        self.retriever.save(str(folder))
        self.size_mb = _folder_mb(folder)

    def top(self, words: tuple[str, ...], k: int) -> list[int]:
        tokens = self.bm25s.tokenize([" ".join(words)], stopwords=None, stemmer=self.stemmer,
                                     show_progress=False, return_ids=False)  # fmt: skip
        if not tokens[0]:
            return []
        found, scores = self.retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        return [int(self.pks[i]) for i, s in zip(found[0], scores[0], strict=True) if s > 0]

    def facts(self) -> dict[str, Any]:
        return {"exact": True, "build_docs_per_s": round(len(self.pks) / self.build_s),
                "index_mb": self.size_mb, "durable_add_ms": None,
                "incremental_writes": "no (the matrix is rebuilt to add a memory)",
                "installed_mb": _installed_mb("bm25s", "pystemmer")}  # fmt: skip


if __name__ == "__main__":
    main()
