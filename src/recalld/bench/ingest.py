"""``recalld bench ingest``: how fast memories are stored, against the bare model.

:func:`run_ingest` measures, in one process and on the same texts of each corpus:

1. ``model``: the embedder alone (``embed_documents``) on the texts sorted by token count;
2. ``add_many``: a fresh store, embedding cache off, one memory per text, no dedup;
3. ``add_many_reply_context`` (conversation corpora): the same, short turns embedded with
   the tail of the turn before (:func:`recalld.conversation.reply_context`), as the
   LoCoMo and LongMemEval benchmarks store them;
4. ``model_input_order``: the model on batches of ``LEGACY_BATCH`` texts cut in input order,
   how every bulk path fed it before batches were sorted.

A noisy machine slows whatever runs while it is busy, so the measurements alternate, round
after round, and each ratio is the median of the per-round ratios. The machine's load
average is recorded before and after.
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

import recalld
from recalld.bench.markdown import describe_embedder
from recalld.bench.report import embedder_record
from recalld.config import Settings
from recalld.conversation import reply_context
from recalld.errors import InvalidInputError
from recalld.providers.embedders import Embedder, resolve_embedder
from recalld.records import NewMemory

LEGACY_BATCH = 32
"""Texts per model call of the input-order path (the batch size before this benchmark)."""
GENERATED_WORDS = (120, 320)
"""Word counts of the generated abstracts (BEIR SciFact's abstracts run ~200-300 words)."""

PATHS = ("model", "add_many", "model_input_order")
"""What every corpus is measured on; conversation turns add ``add_many_reply_context``."""
Progress = Callable[[int, int, str], None]
"""``progress(advance, total, label)``, as the other benchmarks report."""


@dataclass(frozen=True)
class Corpus:
    """Texts to store, in input order, with the context each would be embedded with."""

    name: str
    kind: str
    """``turns`` (conversation turns, in order) or ``documents``."""
    texts: list[str]
    contexts: list[str | None]


def load_corpus(path: Path, limit: int | None) -> Corpus:
    """Turns of a LoCoMo or LongMemEval JSON file (``.gz`` too), or markdown chunks of a
    ``.md`` file or of every ``.md`` file under a folder."""
    if path.is_dir() or path.suffix.lower() == ".md":
        return _markdown_corpus(path, limit)
    from recalld.sources.datasets import read_locomo, read_longmemeval

    try:
        raw = path.read_bytes()
        data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        first = json.loads(data)[0]
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise InvalidInputError(
            f"{path} is not a LoCoMo or LongMemEval JSON file, a .md file or a folder: {exc}"
        ) from exc
    is_locomo = isinstance(first, dict) and "conversation" in first
    parsed = read_locomo(data) if is_locomo else read_longmemeval(data)
    turns = [t for t in parsed.turns if t.text.strip()][:limit]
    if not turns:
        raise InvalidInputError(f"{path} holds no conversation turns")
    contexts: list[str | None] = []
    for n, turn in enumerate(turns):
        before = turns[n - 1] if n else None
        same = before is not None and before.session == turn.session
        contexts.append(reply_context(before.text if same and before else None, turn.text))
    return Corpus(path.name, "turns", [t.text for t in turns], contexts)


def _markdown_corpus(path: Path, limit: int | None) -> Corpus:
    from recalld.sources.chunking import chunk_markdown

    files = sorted(path.rglob("*.md")) if path.is_dir() else [path]
    texts = [c.content for f in files for c in chunk_markdown(f.read_text(encoding="utf-8"))]
    texts = [t for t in texts if t.strip()][:limit]
    if not texts:
        raise InvalidInputError(f"{path} holds no markdown text")
    return Corpus(f"{path.name} (markdown chunks)", "documents", texts, [None] * len(texts))


def generated_abstracts(count: int, seed: int = 19) -> Corpus:
    """``count`` deterministic abstract-length texts: words of the packaged tokenizer's
    vocabulary, drawn with a fixed seed, in sentences of 8-24 words."""
    tokenizer = resources.files("recalld") / "data/tokenizers/all-MiniLM-L6-v2/tokenizer.json"
    vocab = json.loads(tokenizer.read_text(encoding="utf-8"))["model"]["vocab"]
    words = sorted(w for w in vocab if w.isalpha() and w.isascii() and len(w) >= 3)
    rng = np.random.default_rng(seed)
    texts = []
    for _ in range(count):
        total = int(rng.integers(*GENERATED_WORDS))
        sentences, used = [], 0
        while used < total:
            size = min(int(rng.integers(8, 25)), total - used)
            picked = [words[i] for i in rng.integers(0, len(words), size)]
            sentences.append(" ".join(picked).capitalize() + ".")
            used += size
        texts.append(" ".join(sentences))
    return Corpus(f"{count} generated abstracts", "documents", texts, [None] * count)


def run_ingest(
    corpora: Sequence[Corpus],
    settings: Settings,
    *,
    rounds: int = 3,
    embedder: Embedder | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Measure every corpus (see the module docstring); returns the JSON-ready report."""
    if rounds < 1:
        raise InvalidInputError("rounds must be at least 1")
    model = embedder or resolve_embedder(settings.embedder, settings)
    model.embed_documents(["warm up the model", "and its sessions"])
    load_before, date = os.getloadavg(), datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    started = time.perf_counter()
    total = sum(rounds * (len(PATHS) + any(c.contexts)) for c in corpora)

    def advance(label: str) -> None:
        if progress is not None:
            progress(1, total, label)

    results = [_measure(c, model, rounds, advance) for c in corpora]
    return {
        "benchmark": "ingest",
        "date": date,
        "embedder": embedder_record(model, None if embedder else settings.embedder),
        "batching": {
            "batch_size": model.batch_size,
            "batch_tokens": model.batch_tokens,
            "threads": settings.embed_threads,
        },
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
        },
        "rounds": rounds,
        "seconds": round(time.perf_counter() - started, 1),
        "corpora": results,
    }


def _measure(
    corpus: Corpus, model: Embedder, rounds: int, advance: Callable[[str], None]
) -> dict[str, Any]:
    costs = model.token_counts(corpus.texts)
    order = sorted(range(len(costs)), key=costs.__getitem__)
    ordered = [corpus.texts[i] for i in order]
    with_context = [
        f"{c}\n{t}" if c else t for t, c in zip(corpus.texts, corpus.contexts, strict=True)
    ]
    runs: dict[str, Callable[[], object]] = {
        "model": lambda: model.embed_documents(ordered),
        "add_many": lambda: _add_many(model, corpus.texts, None),
    }
    tokens = {"model": sum(costs), "add_many": sum(costs)}
    if any(corpus.contexts):
        runs["add_many_reply_context"] = lambda: _add_many(model, corpus.texts, corpus.contexts)
        tokens["add_many_reply_context"] = sum(model.token_counts(with_context))
    runs["model_input_order"] = lambda: _input_order(model, corpus.texts)
    tokens["model_input_order"] = sum(costs)
    seconds: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            wall, cpu = time.perf_counter(), time.process_time()
            run()
            seconds[name].append((time.perf_counter() - wall, time.process_time() - cpu))
            advance(f"{corpus.name}: {name}")
    count = len(corpus.texts)
    rates = {name: _rates(count, tokens[name], s) for name, s in seconds.items()}
    ratios = {
        name: round(
            statistics.median(m[0] / s[0] for m, s in zip(seconds["model"], taken, strict=True)), 3
        )
        for name, taken in seconds.items()
        if name != "model"
    }
    return {
        "corpus": corpus.name,
        "kind": corpus.kind,
        "texts": count,
        "tokens": sum(costs),
        "mean_tokens": round(sum(costs) / count, 1),
        "max_tokens": max(costs),
        "rates": rates,
        "ratio_to_model": ratios,
    }


def _rates(count: int, tokens: int, seconds: list[tuple[float, float]]) -> dict[str, float]:
    """Median rates over the rounds: wall-clock texts and tokens a second, and texts per
    CPU-second of this process (every thread's), which a busy machine moves less."""
    wall = statistics.median(s[0] for s in seconds)
    cpu = statistics.median(s[1] for s in seconds)
    return {
        "texts_per_s": round(count / wall, 1),
        "tokens_per_s": round(tokens / wall),
        "texts_per_cpu_s": round(count / max(cpu, 1e-9), 1),
    }


def _add_many(model: Embedder, texts: list[str], contexts: list[str | None] | None) -> None:
    with tempfile.TemporaryDirectory(prefix="recalld-ingest-") as folder:
        settings = Settings(db=Path(folder) / "ingest.db", cache_dir=None)
        items = [
            NewMemory(content=t, embed_context=c)
            for t, c in zip(texts, contexts or [None] * len(texts), strict=True)
        ]
        with recalld.open(settings=settings, embedder=model) as engine:
            engine.add_many(items, dedupe=False)


def _input_order(model: Embedder, texts: list[str]) -> None:
    for start in range(0, len(texts), LEGACY_BATCH):
        model.embed_batch(texts[start : start + LEGACY_BATCH], is_query=False)


def markdown_table(report: dict[str, Any]) -> str:
    """The report as a short markdown section."""
    machine = report["machine"]
    lines = [
        "# recalld bench ingest",
        "",
        f"Started {report['date']}, {report['seconds']} s; "
        f"{describe_embedder(report['embedder'])}; "
        f"{machine['cpus']} CPUs, load average {machine['load_before'][0]} before and "
        f"{machine['load_after'][0]} after; batching {report['batching']}; medians of "
        f"{report['rounds']} rounds.",
        "",
        "| corpus | texts | mean tokens | path | texts/s | tokens/s | texts/CPU-s | x model |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for c in report["corpora"]:
        for name, rate in c["rates"].items():
            ratio = c["ratio_to_model"].get(name, 1.0)
            lines.append(
                f"| {c['corpus']} | {c['texts']} | {c['mean_tokens']} | {name} | "
                f"{rate['texts_per_s']} | {rate['tokens_per_s']} | {rate['texts_per_cpu_s']} "
                f"| {ratio:.2f} |"
            )
    return "\n".join(lines)
