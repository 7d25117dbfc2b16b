"""Indexing throughput: MB/s and chunks/s, embedding included, on a generated workspace.

    PYTHONPATH=src python scripts/bench_index.py --mb 2 [--embedder local] [--out result.json]

Generates a deterministic memory workspace (MEMORY.md plus dated daily notes with headings,
lists, code blocks and some CJK text) of about ``--mb`` megabytes in a temporary folder,
then measures with the packaged model and the embedding cache OFF (every chunk embedded):

1. a cold index of the whole workspace;
2. a re-index with nothing changed (should read and embed nothing);
3. a re-index after editing one file.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

import recalld
from recalld.bench.report import print_json
from recalld.config import Settings

WORDS = [
    "agent",
    "memory",
    "retrieval",
    "index",
    "chunk",
    "vector",
    "query",
    "session",
    "note",
    "meeting",
    "project",
    "deadline",
    "review",
    "design",
    "budget",
    "launch",
    "customer",
    "feedback",
    "latency",
    "cache",
    "model",
    "embedding",
    "search",
    "ranking",
    "release",
    "migration",
    "database",
    "backup",
    "schedule",
    "travel",
    "dinner",
    "family",
    "doctor",
    "garden",
    "bicycle",
    "kitchen",
    "recipe",
    "invoice",
    "contract",
    "hiring",
    "interview",
    "roadmap",
    "incident",
    "postmortem",
]
NAMES = ["Alice", "Bob", "Chen", "Dana", "Eve", "Farid", "Grace", "Hiro", "Ines", "Jonas"]
CJK = ["今日は東京で会議がありました。", "プロジェクトの進捗を確認しました。", "設計した。"]


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(8, 18))]
    words.insert(rng.randint(0, len(words)), rng.choice(NAMES))
    return " ".join(words).capitalize() + "."


def _daily(rng: random.Random, day: date) -> str:
    parts = [f"# {day.isoformat()}\n"]
    for section in range(rng.randint(2, 5)):
        parts.append(f"\n## Section {section + 1}: {rng.choice(WORDS)}\n\n")
        parts.append(" ".join(_sentence(rng) for _ in range(rng.randint(2, 6))) + "\n")
        if rng.random() < 0.6:
            parts.append("\n" + "\n".join(f"- {_sentence(rng)}" for _ in range(rng.randint(2, 6))))
            parts.append("\n")
        if rng.random() < 0.2:
            lines = [f"    step_{i} = run('{rng.choice(WORDS)}')" for i in range(rng.randint(3, 9))]
            parts.append("\n```python\n" + "\n".join(lines) + "\n```\n")
        if rng.random() < 0.1:
            parts.append("\n" + "".join(rng.choice(CJK) for _ in range(rng.randint(3, 12))) + "\n")
    return "".join(parts)


def generate(root: Path, megabytes: float, seed: int = 7) -> tuple[int, int]:
    """Write the workspace; returns (files, bytes)."""
    rng = random.Random(seed)
    (root / "memory").mkdir(parents=True)
    memory = "# Long-term memory\n\n" + "\n".join(f"- {_sentence(rng)}" for _ in range(60))
    (root / "MEMORY.md").write_text(memory + "\n", encoding="utf-8")
    total, files, day = len(memory.encode()), 1, date(2024, 1, 1)
    while total < megabytes * 1e6:
        text = _daily(rng, day)
        (root / "memory" / f"{day.isoformat()}.md").write_text(text, encoding="utf-8")
        total += len(text.encode())
        files += 1
        day += timedelta(days=1)
    return files, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=2.0, help="workspace size (MB)")
    parser.add_argument("--embedder", default="local")
    parser.add_argument("--out", type=Path, help="also write the result as JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        files, size = generate(root, args.mb)
        settings = Settings(db=Path(tmp) / "bench.db", cache_dir=None, embedder=args.embedder)
        with recalld.open(settings=settings) as engine:
            engine.embedder  # load the model outside the timing  # noqa: B018
            load_before = os.getloadavg()[0]
            started, cpu = time.perf_counter(), time.process_time()
            cold = engine.index([root])
            cold_s, cold_cpu = time.perf_counter() - started, time.process_time() - cpu
            load_after = os.getloadavg()[0]
            started = time.perf_counter()
            noop = engine.index([root])
            noop_s = time.perf_counter() - started
            edited = sorted((root / "memory").glob("*.md"))[0]
            edited.write_text(edited.read_text() + "\nOne more line about the launch.\n")
            started = time.perf_counter()
            one = engine.index([root])
            one_s = time.perf_counter() - started
    result = {
        "embedder": args.embedder, "files": files, "mb": round(size / 1e6, 3),
        "chunks": cold.total_chunks, "cold_seconds": round(cold_s, 2),
        "cold_cpu_seconds": round(cold_cpu, 2),
        "mb_per_s": round(size / 1e6 / cold_s, 4),
        "chunks_per_s": round(cold.total_chunks / cold_s, 2),
        "noop_reindex_seconds": round(noop_s, 3), "noop_reindexed_files": len(noop.indexed),
        "one_edit_reindex_seconds": round(one_s, 3), "one_edit_reindexed_files": len(one.indexed),
        "cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version(),
        "load_average_1min": [round(load_before, 2), round(load_after, 2)],
    }  # fmt: skip
    print_json(result, args.out, indent=2)


if __name__ == "__main__":
    main()
