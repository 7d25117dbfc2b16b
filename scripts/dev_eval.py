"""The default-mechanism rule, measured: variants of the pipeline on every dev set at once,
each paired query by query against the default and against plain RRF.

    PYTHONPATH=src .venv/bin/python scripts/dev_eval.py
        [--sets workloads,lme,locomo,scifact,helix,recalld-docs]
        [--variant 'label:NAME=JSON;NAME=JSON'] [--json out.json]
        [--word-index-everywhere]

A mechanism is a default only if it wins more queries than it loses on each dev set and
its net gain is more than two queries somewhere; this prints those counts per set.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import tarfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from recalld.bench.beir import run_beir
from recalld.bench.docs import run_docs
from recalld.bench.runner import run_locomo, run_longmemeval
from recalld.bench.systems import System
from recalld.bench.workloads_run import run_workloads
from recalld.retrieval.config import PRESETS, RetrievalConfig
from recalld.stores.sqlite import word_index

DATA = Path(os.environ.get("RECALLD_BENCH_DATA", "../shared/benchmarks"))
CACHE = Path(os.environ.get("RECALLD_BENCH_CACHE", "/tmp/benchcache"))
LME_LIMIT = int(os.environ["RECALLD_LME_LIMIT"]) if os.environ.get("RECALLD_LME_LIMIT") else None
"""Score only the first N LongMemEval_S questions (a quick run; say so with its figures)."""
METRICS = {
    "workloads": ("hit@1", "mrr@10"),
    "lme": ("session.recall_any@1", "session.ndcg_any@10"),
    "locomo": ("turn.recall_any@1", "turn.recall_any@10"),
    "scifact": ("doc.ndcg@10", "doc.recall@100"),
    "helix": ("section.hit@1", "section.hit@5", "section.hit@10", "section.mrr@10"),
    "recalld-docs": ("section.hit@1", "section.hit@5", "section.hit@10", "section.mrr@10"),
}
HELIX_QUESTIONS = Path(__file__).parent / "data/helix_questions.json"
"""Questions a Helix user asks of its manual, each with the page and heading that answer."""
RECALLD_DOCS_QUESTIONS = Path(__file__).parent / "data/recalld_docs_questions.json"
"""Questions a recalld user asks of its docs/, written before any docs ranking mechanism was
tried: a check that one generalises beyond helix."""
RECALLD_DOCS_COMMIT = "9ea4ff7"
"""The commit whose docs/ the questions were written against (their gold headings): the
folder is taken from git history, so later edits of the docs leave the set unchanged."""


def _recalld_docs() -> Path:
    """docs/ at :data:`RECALLD_DOCS_COMMIT`, extracted once into the bench cache."""
    folder = CACHE / f"recalld-docs-{RECALLD_DOCS_COMMIT}"
    if not (folder / "docs").is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        repo = Path(__file__).resolve().parent.parent
        archive = subprocess.run(
            ["git", "-C", str(repo), "archive", RECALLD_DOCS_COMMIT, "docs"],
            check=True,
            capture_output=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(folder, filter="data")
    return folder / "docs"


def _run_scifact(configs: Mapping[str, RetrievalConfig | System]) -> dict[str, Any]:
    return run_beir(DATA / "scifact", split="train", configs=configs, cache_dir=CACHE,
                    baselines=False)  # fmt: skip


RUNNERS: dict[str, Callable[[Mapping[str, RetrievalConfig | System]], dict[str, Any]]] = {
    "workloads": lambda c: run_workloads(DATA / "workloads/dev.json", configs=c, cache_dir=CACHE,
                                         baselines=False),
    "lme": lambda c: run_longmemeval(DATA / "longmemeval/longmemeval_s.json.gz", configs=c,
                                     cache_dir=CACHE, baselines=False, budgets=(),
                                     limit=LME_LIMIT),
    "locomo": lambda c: run_locomo(DATA / "locomo/locomo.json", configs=c, cache_dir=CACHE,
                                   baselines=False, budgets=()),
    "scifact": _run_scifact,
    "helix": lambda c: run_docs(DATA / "docs/helix", HELIX_QUESTIONS, configs=c, cache_dir=CACHE,
                                baselines=False),
    "recalld-docs": lambda c: run_docs(_recalld_docs(), RECALLD_DOCS_QUESTIONS, configs=c,
                                       cache_dir=CACHE, baselines=False),
}  # fmt: skip


def systems(variants: Mapping[str, RetrievalConfig]) -> dict[str, RetrievalConfig | System]:
    base = PRESETS["balanced"]
    plain = base.plain()
    return {
        "default": base,
        **variants,
        "rrf": System("rrf", plain, "hybrid"),
        "bm25": System("bm25", plain.with_changes(channels=("bm25",)), "hybrid"),
        "vector": System("vector", plain, "vector"),
    }


def paired(probes: list[dict[str, Any]], a: str, b: str, metric: str) -> tuple[int, int]:
    wins = losses = 0
    for p in probes:
        x, y = p["systems"][a]["scores"].get(metric), p["systems"][b]["scores"].get(metric)
        if x is None or y is None:
            continue
        wins += x > y + 1e-9
        losses += y > x + 1e-9
    return wins, losses


def summary(name: str, report: dict[str, Any], names: list[str]) -> list[str]:
    probes = report["probes"]
    lines = [f"== {name} ({len(probes)} queries)"]
    for metric in METRICS[name]:
        row = []
        for s in names:
            vals = [p["systems"][s]["scores"][metric] for p in probes
                    if metric in p["systems"][s]["scores"]]  # fmt: skip
            row.append(f"{s} {sum(vals) / max(len(vals), 1):.3f}")
        lines.append(f"  {metric}: " + " | ".join(row))
        for s in names:
            if s in ("default", "rrf"):
                continue
            against = "default" if s not in ("bm25", "vector") else "rrf"
            w, losses = paired(probes, s, against, metric)
            lines.append(f"    {s} vs {against}: +{w} -{losses}")
        w, losses = paired(probes, "default", "rrf", metric)
        lines.append(f"    default vs rrf: +{w} -{losses}")
    return lines


def parse_variant(text: str) -> tuple[str, RetrievalConfig]:
    label, _, changes = text.partition(":")
    values: dict[str, Any] = {}
    for part in filter(None, changes.split(";")):
        key, _, value = part.partition("=")
        values[key.strip()] = json.loads(value)
    return label, PRESETS["balanced"].with_changes(**values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sets", default="workloads,lme,locomo,scifact,helix,recalld-docs")
    parser.add_argument("--variant", action="append", default=[])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--word-index-everywhere", action="store_true",
                        help="SQLite stores of any size search through the word index")  # fmt: skip
    args = parser.parse_args()
    if args.word_index_everywhere:
        word_index.WORD_INDEX_MIN_ROWS = 0
    variants = dict(parse_variant(v) for v in args.variant)
    chosen = systems(variants)
    names = list(chosen)
    out: dict[str, Any] = {}
    for name in args.sets.split(","):
        started = time.time()
        report = RUNNERS[name](chosen)
        out[name] = {"probes": [{"id": p["id"], "systems": {
            s: {"scores": v["scores"], "top": v.get("top", [])[:10]}
            for s, v in p["systems"].items()}} for p in report["probes"]]}  # fmt: skip
        print("\n".join(summary(name, report, names)), f"({time.time() - started:.0f} s)",
              flush=True)  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
