"""The Markdown report of a workloads run: overall, per scenario kind, per query kind, pairs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from recalld.bench.markdown import describe_embedder, fmt_metric, fmt_ms, pair_lines, table_lines

METRICS = ("hit@1", "hit@5", "hit@10", "mrr@10", "all@10", "current_first")
"""Columns of the tables, in FORMAT.md's order."""
BREAKDOWN_METRICS = ("hit@1", "hit@5", "mrr@10", "current_first")


def _overall(systems: Mapping[str, Any]) -> list[str]:
    first = next(iter(systems.values()))["overall"]
    header = ["system", *(f"{m} (n={first['counts'].get(m, 0)})" for m in METRICS)]
    rows = [
        [name, *(fmt_metric(s["overall"]["metrics"].get(m)) for m in METRICS)]
        for name, s in systems.items()
    ]
    return table_lines(header, rows)


def _breakdown(systems: Mapping[str, Any], key: str, metric: str) -> list[str]:
    groups = sorted({g for s in systems.values() for g in s[key]})
    first = next(iter(systems.values()))[key]
    rows = []
    for group in groups:
        count = first.get(group, {}).get("counts", {}).get(metric, 0)
        if not count:
            continue
        cells = [
            fmt_metric(s[key].get(group, {}).get("metrics", {}).get(metric))
            for s in systems.values()
        ]
        rows.append([group, str(count), *cells])
    return table_lines(["group", "n", *systems], rows) if rows else []


def _speed(report: Mapping[str, Any]) -> list[str]:
    s = report["speed"]
    cache = s["embedding_cache"]
    load = report.get("load_average") or {}
    rows = [
        [name, fmt_ms(sys["latency_ms"].get("p50")), fmt_ms(sys["latency_ms"].get("p95"))]
        for name, sys in report["systems"].items()
    ]
    return [
        f"- stored: {s['memories']} memories and {s['file_chunks']} file chunks in "
        f"{s['ingest_s']:.1f} s (embedding included)",
        f"- embedding cache: {cache['hits']} hits, {cache['misses']} misses",
        f"- load average (1, 5, 15 min) at start {load.get('start')}, at end {load.get('end')}",
        f"- peak memory: {s['peak_rss_mb']:.0f} MiB; wall time {s['wall_s']:.1f} s",
        "",
        *table_lines(["system", "search p50 ms", "search p95 ms"], rows),
    ]


def workloads_markdown(report: Mapping[str, Any]) -> str:
    """The report of :func:`recalld.bench.workloads_run.run_workloads` as Markdown."""
    q = report["questions"]
    m = report["machine"]
    systems = report["systems"]
    lines = ["# Agent-memory workloads retrieval benchmark", ""]
    if report.get("command"):
        lines.append(f"- command: `{report['command']}`")
    lines += [
        f"- file: `{report['file']}` ({q['name']}: {q['scenarios']} scenarios, "
        f"{q['queries']} queries)",
        f"- date: {report['date']}; machine: {m['cores']} cores, {m['platform']}, "
        f"Python {m['python']}",
        f"- embedder: {describe_embedder(report.get('embedder'))}",
        "",
        "## Overall",
        "",
        *_overall(systems),
    ]
    for key, title in (("by_group", "scenario kind"), ("by_query_kind", "query kind")):
        lines += ["", f"## By {title}"]
        for metric in BREAKDOWN_METRICS:
            table = _breakdown(systems, key, metric)
            if table:
                lines += ["", f"**{metric}**", "", *table]
    pairs = pair_lines(report)
    if pairs:
        lines += ["", "## Paired wins and losses", "", *pairs]
    lines += ["", "## Speed", "", *_speed(report)]
    return "\n".join(lines) + "\n"
