"""Markdown table and PNG chart (latency vs corpus size) of a scale-benchmark report."""

from __future__ import annotations

import json
from pathlib import Path

from recalld.bench.markdown import describe_embedder
from recalld.bench.report import CHART_SKIPPED, Written, pyplot
from recalld.bench.scale import ScaleReport, SizeResult, growth

SERIES = (
    ("vector", "recalld vector"),
    ("hybrid", "recalld hybrid"),
    ("numpy", "floor: exact numpy cosine"),
    ("fts5", "floor: plain FTS5"),
    ("embed", "query embedding alone"),
)
"""Latency series: key in each size's search results, and its label."""
FLOORS = {"sqlite": ("numpy", "fts5"), "postgres": ("vector_floor", "text_floor")}
"""Each backend's floors: its plain vector query and its plain text query (see
``scale_worker``): exact numpy cosine and FTS5 alone; the HNSW index and the word index
alone."""


def _ms(result: SizeResult, key: str) -> str:
    found = result.search.get(key)
    return "-" if found is None else f"{found['p50_ms']:.1f} / {found['p95_ms']:.1f}"


def _floors(result: SizeResult) -> str:
    vector, text = FLOORS.get(result.backend, FLOORS["sqlite"])
    return f"{_ms(result, vector)} | {_ms(result, text)}"


def _backends(report: ScaleReport) -> list[str]:
    return list(dict.fromkeys(r.backend for r in report.results))


def _mb(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def markdown(report: ScaleReport) -> str:
    """The report as Markdown: one row per size, then growth per 10x, then the setup."""
    lines = [
        "| memories | backend | build s (insert/s) | store MB | ANN / word index MB |"
        " first search s: fresh / saved index | peak MB build / index / search |"
        " vector p50 / p95 ms | hybrid p50 / p95 ms | vector floor ms | text floor ms |"
        " embed ms |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report.results:
        rate = r.size / max(r.build["insert_s"], 1e-9)
        peaks = (
            r.build.get("peak_build_mb"),
            r.index.get("peak_index_mb"),
            r.search.get("peak_search_mb"),
        )
        bulk = (
            f", vector index {r.build['vector_index_s']:.1f} s of it"
            if r.build.get("bulk_load")
            else ""
        )
        lines.append(
            f"| {r.size:,} | {r.backend} | {r.build['build_s']:.1f} ({rate:,.0f}/s{bulk}) "
            f"| {r.file_bytes / 2**20:,.0f} | {r.index_bytes / 2**20:,.0f} / "
            f"{r.words_bytes / 2**20:,.0f} "
            f"| {r.index['first_search_s']:.2f} / {r.search['cold_start_s']:.2f} "
            f"| {' / '.join(_mb(p) for p in peaks)} "
            f"| {_ms(r, 'vector')} | {_ms(r, 'hybrid')} | {_floors(r)} | {_ms(r, 'embed')} |"
        )
    for backend in _backends(report):
        results = [r for r in report.results if r.backend == backend]
        if len(results) < 2:
            continue
        lines += [
            "",
            f"p50 latency growth per 10x memories, {backend} (1.0 = flat, 10.0 = linear):",
            "",
        ]
        for key, label in (("vector", "recalld vector"), ("hybrid", "recalld hybrid")):
            ratios = ", ".join(f"x{g:.2f}" for g in growth(results, key))
            lines.append(f"- {label}: {ratios}")
    lines += _agreement(report)
    lines += _stages(report)
    lines += _load_table(report)
    fidelity = report.corpus["fidelity"]
    lines += [
        "",
        f"Corpus: {report.corpus['pool']} embedded snippets from {report.corpus['turns']:,} "
        f"real turns; derived vectors have mean cosine {fidelity['mean_cosine']:.3f} "
        f"(5th percentile {fidelity['p05_cosine']:.3f}) to the real embedding of their text. "
        f"{report.corpus['questions']} real questions, limit {report.options['limit']}. "
        "Floors: SQLite exact numpy cosine and plain FTS5; PostgreSQL the HNSW index alone "
        "and the word index alone. Peaks are resident sizes: they count the pages of mapped "
        "files a process touched (a SQLite store and its ANN files: the system's page cache, "
        "shared between processes). PostgreSQL peaks are the client process's (the server's "
        "memory is not counted).",
        f"Embedder: {describe_embedder(report.embedder)}.",
        f"Machine: {report.machine['cpus']} CPUs, {report.machine['platform']}, Python "
        f"{report.machine['python']}, load average before {_load(report.machine['load_before'])}"
        f" and after {_load(report.machine.get('load_after'))}; {report.machine['date']}.",
    ]
    lines += _searched_as(report)
    reused = [f"{r.size:,}" for r in report.results if r.reused_build]
    if reused:
        lines.append(f"Build figures for {', '.join(reused)} come from an earlier run's build.")
    loaded = [
        f"{r.size:,}"
        for r in report.results
        if r.backend == "sqlite" and r.index.get("index_was_saved")
    ]
    if loaded:
        lines.append(
            f"At {', '.join(loaded)} the fresh first search loaded an ANN index saved "
            "by an earlier run instead of building it."
        )
    return "\n".join(lines) + "\n"


def _searched_as(report: ScaleReport) -> list[str]:
    """Which role PostgreSQL's searches ran as, and whether the tenant wall bound it."""
    seen = {
        (r.searched_as.get("role"), r.searched_as.get("row_security"))
        for r in report.results
        if r.backend == "postgres" and r.searched_as
    }
    return [
        f"PostgreSQL searched as role {role}: "
        + (
            "Row-Level Security binds it, as it binds a user's server."
            if walled
            else "Row-Level Security does not bind it (a superuser or BYPASSRLS); a user's "
            "server connects as an application role that it binds."
        )
        for role, walled in sorted(seen, key=str)
    ]


def _agreement(report: ScaleReport) -> list[str]:
    found = [
        (r, r.search["exact_agreement"]) for r in report.results if r.search.get("exact_agreement")
    ]
    if not found:
        return []
    lines = [
        "",
        "Hybrid results against exact search (FTS5 BM25 over every matching row and "
        "cosine over every vector), same questions:",
        "",
        "| memories | backend | same list | same set | same top hit |",
        "|---:|---|---:|---:|---:|",
    ]
    for r, a in found:
        lines.append(
            f"| {r.size:,} | {r.backend} | {a['same_list']:.1%} | {a['same_set']:.1%} "
            f"| {a['same_top1']:.1%} |"
        )
    return lines


def _stages(report: ScaleReport) -> list[str]:
    """Where a hybrid search's time goes: each stage's p50, as ``--explain`` measures it."""
    found = [(r, r.search["stages"]) for r in report.results if r.search.get("stages")]
    if not found:
        return []
    names = list(dict.fromkeys(s for _, stages in found for s in stages if s != "took"))
    lines = [
        "",
        "Where a hybrid search's time goes: p50 ms of each stage (`--explain`'s"
        " `stage_ms`; the embedding apart from reading the candidates), and of the whole"
        " search, same questions:",
        "",
        f"| memories | backend | {' | '.join(names)} | whole search |",
        f"|---:|---|{'---:|' * (len(names) + 1)}",
    ]
    for r, stages in found:
        cells = [f"{stages[n]['p50_ms']:.2f}" if n in stages else "-" for n in names]
        whole = stages.get("took", {}).get("p50_ms")
        lines.append(
            f"| {r.size:,} | {r.backend} | {' | '.join(cells)} | "
            f"{'-' if whole is None else f'{whole:.1f}'} |"
        )
    return lines


def _load_table(report: ScaleReport) -> list[str]:
    rows = [(r, row) for r in report.results for row in r.load]
    if not rows:
        return []
    lines = [
        "",
        f"Load through `recalld serve` (searches only, limit {report.options['limit']},"
        f" each client count for {report.options['load_seconds']:g} s, clients on this "
        "machine; CPU: the server's processes' CPU time per search, and the clients' own, "
        "taken from the same cores; per worker: the answers each worker gave):",
        "",
        "| memories | backend | round | workers | clients | searches/s | p50 ms | p95 ms "
        "| p99 ms | CPU ms/search | client CPU ms/search | errors | per worker |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r, row in rows:
        cpu = _one_ms(row.get("server_cpu_ms_per_search"))
        lines.append(
            f"| {r.size:,} | {r.backend} | {row.get('round', 1)} | {row.get('workers', 1)} "
            f"| {row['clients']} "
            f"| {row['searches_per_s']:.1f} | {row['p50_ms']:.0f} | {row['p95_ms']:.0f} "
            f"| {row['p99_ms']:.0f} | {cpu} | {_one_ms(row.get('client_cpu_ms_per_search'))} "
            f"| {row['errors']} | {'/'.join(map(str, row.get('per_worker', []))) or '-'} |"
        )
    held = [(r, c) for r in report.results for c in r.capacity]
    if held:
        lines += [
            "",
            "The highest rate of searches held with p99 within the target (clients "
            "sending on a schedule, latency counted from each request's moment; each try's "
            "answers per worker in brackets: how evenly the schedule fell on the workers; a "
            "worker holding more than its share of the connections asks clients to reconnect):",
            "",
            "| memories | backend | workers | clients | p99 target ms | searches/s | p50 ms "
            "| p99 ms | tries |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r, c in held:
            best = c["best"] or {}
            tries = ", ".join(
                f"{t['rate']:.0f}/s {'held' if t['held'] else 'missed'}"
                + (
                    f" ({'/'.join(map(str, t['per_worker']))})"
                    if len(t.get("per_worker", [])) > 1
                    else ""
                )
                for t in c["tries"]
            )
            lines.append(
                f"| {r.size:,} | {r.backend} | {c.get('workers', 1)} | {c['clients']} "
                f"| {c['p99_target_ms']:g} | {best.get('searches_per_s', 0):.1f} "
                f"| {best.get('p50_ms', 0):.0f} | {best.get('p99_ms', 0):.0f} | {tries} |"
            )
    return lines


def _one_ms(value: object) -> str:
    return f"{value:.1f}" if isinstance(value, int | float) else "-"


def _load(value: object) -> str:
    if not isinstance(value, list | tuple):
        return "n/a"
    return "/".join(f"{v:.1f}" for v in value)


def chart(report: ScaleReport, path: Path) -> bool:
    """A log-log PNG of p50 latency (p95 as a shaded band) against corpus size; ``False``
    (nothing written) without matplotlib."""
    plt = pyplot()
    if plt is None:
        return False
    figure, axes = plt.subplots(figsize=(7, 4.5), dpi=120)
    backends = _backends(report)
    for backend in backends:
        results = [r for r in report.results if r.backend == backend]
        sizes = [r.size for r in results]
        vector, text = FLOORS.get(backend, FLOORS["sqlite"])
        labels = {
            "numpy": "floor: exact numpy cosine",
            "fts5": "floor: plain FTS5",
            "vector_floor": "floor: HNSW index alone",
            "text_floor": "floor: word index alone",
        }
        for key, label in (*SERIES[:2], (vector, labels[vector]), (text, labels[text]), SERIES[4]):
            if any(key not in r.search for r in results):
                continue
            p50 = [r.search[key]["p50_ms"] for r in results]
            p95 = [r.search[key]["p95_ms"] for r in results]
            name = f"{backend}: {label}" if len(backends) > 1 else label
            axes.plot(sizes, p50, marker="o", label=name)
            axes.fill_between(sizes, p50, p95, alpha=0.15)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("memories in the store")
    axes.set_ylabel("latency per query, ms (line p50, band to p95)")
    axes.set_title("recalld search latency vs corpus size")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return True


def write(report: ScaleReport, folder: Path) -> Written:
    """Write ``scale.md``, ``scale.png`` (with matplotlib) and ``scale.json`` into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / "scale.md", folder / "scale.png", folder / "scale.json"]
    paths[0].write_text(markdown(report), encoding="utf-8")
    charted = chart(report, paths[1])
    paths[2].write_text(json.dumps(report.to_dict(), indent=2), encoding="utf-8")
    if not charted:
        return Written([paths[0], paths[2]], [CHART_SKIPPED])
    return Written(paths, [])
