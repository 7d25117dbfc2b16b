"""A benchmark run's report: what accumulates over the run (:class:`Tally`), the mean of
every metric per system (overall and per group), latency percentiles, the ingest rate,
the embedding cache's hits and misses, the machine, and the order of the report's keys."""

from __future__ import annotations

import os
import platform
import resource
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recalld.bench.metrics import percentile
from recalld.bench.systems import System
from recalld.providers.cache import CachedEmbedder
from recalld.providers.embedders import Embedder
from recalld.retrieval.config import RetrievalConfig


@dataclass
class Tally:
    """What accumulates over a run (internal and mutable on purpose)."""

    probes: list[dict[str, Any]] = field(default_factory=list)
    latency_ms: dict[str, list[float]] = field(default_factory=dict)
    first_search_ms: list[float] = field(default_factory=list)
    short_rankings: dict[str, int] = field(default_factory=dict)
    memories: int = 0
    skipped_turns: int = 0
    ingest_s: float = 0.0
    unscored: int = 0


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


def system_report(system: System, tally: Tally) -> dict[str, Any]:
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
        "latency_ms": latency(latencies),
        "short_rankings": tally.short_rankings.get(system.name, 0),
    }


def latency(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "mean": sum(values) / len(values),
        "searches": len(values),
    }


def speed(tally: Tally, hits: int, misses: int, wall_s: float) -> dict[str, Any]:
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
        "first_search_ms": latency(tally.first_search_ms),
    }


def cache_counts(embedder: Embedder) -> tuple[int, int]:
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
    return {
        "cores": cores,
        "platform": platform.platform(),
        "processor": platform.machine(),
        "python": platform.python_version(),
    }


def load_average() -> list[float] | None:
    """The machine's 1, 5 and 15 minute load averages (None where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def config_dict(config: RetrievalConfig) -> dict[str, Any]:
    """A retrieval config as plain JSON values, by flat setting name (one key a setting)."""
    out: dict[str, Any] = {}
    for name, value in config.flat().items():
        out[name] = (
            dict(value)
            if isinstance(value, Mapping)
            else (list(value) if isinstance(value, tuple) else value)
        )
    return out


REPORT_ORDER = (
    "benchmark",
    "file",
    "date",
    "machine",
    "load_average",
    "embedder",
    "questions",
    "options",
    "systems",
    "comparisons",
    "speed",
    "unscored_probes",
    "probes",
)


def ordered_report(benchmark: str, path: str | Path, report: dict[str, Any]) -> dict[str, Any]:
    """The report with its summary keys first and the per-question records last."""
    full = {"benchmark": benchmark, "file": str(path), **report}
    return {k: full[k] for k in REPORT_ORDER if k in full} | {
        k: v for k, v in full.items() if k not in REPORT_ORDER
    }
