"""Markdown table and PNG chart (latency vs corpus size) of a scale-benchmark report."""

from __future__ import annotations

import json
from pathlib import Path

from recalld.bench.scale import ScaleReport, SizeResult, growth
from recalld.errors import InvalidInputError

SERIES = (
    ("vector", "recalld vector"),
    ("hybrid", "recalld hybrid"),
    ("numpy", "floor: exact numpy cosine"),
    ("fts5", "floor: plain FTS5"),
    ("embed", "query embedding alone"),
)
"""Latency series: key in each size's search results, and its label."""


def _ms(result: SizeResult, key: str) -> str:
    found = result.search[key]
    return f"{found['p50_ms']:.1f} / {found['p95_ms']:.1f}"


def _mb(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def markdown(report: ScaleReport) -> str:
    """The report as Markdown: one row per size, then growth per 10x, then the setup."""
    lines = [
        "| memories | build s (insert/s) | file MB | ANN index MB |"
        " first search s: fresh / saved index | peak MB build / index / search |"
        " vector p50 / p95 ms | hybrid p50 / p95 ms | numpy floor ms | FTS5 floor ms |"
        " embed ms |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report.results:
        rate = r.size / max(r.build["insert_s"], 1e-9)
        peaks = (r.build.get("peak_build_mb"), r.index.get("peak_index_mb"),
                 r.search.get("peak_search_mb"))  # fmt: skip
        lines.append(
            f"| {r.size:,} | {r.build['build_s']:.1f} ({rate:,.0f}/s) "
            f"| {r.file_bytes / 2**20:,.0f} | {r.index_bytes / 2**20:,.0f} "
            f"| {r.index['first_search_s']:.2f} / {r.search['cold_start_s']:.2f} "
            f"| {' / '.join(_mb(p) for p in peaks)} "
            f"| {_ms(r, 'vector')} | {_ms(r, 'hybrid')} | {_ms(r, 'numpy')} "
            f"| {_ms(r, 'fts5')} | {_ms(r, 'embed')} |"
        )
    if len(report.results) > 1:
        lines += ["", "p50 latency growth per 10x memories (1.0 = flat, 10.0 = linear):", ""]
        for key, label in SERIES[:4]:
            ratios = ", ".join(f"x{g:.2f}" for g in growth(report.results, key))
            lines.append(f"- {label}: {ratios}")
    fidelity = report.corpus["fidelity"]
    lines += [
        "",
        f"Corpus: {report.corpus['pool']} embedded snippets from {report.corpus['turns']:,} "
        f"real turns; derived vectors have mean cosine {fidelity['mean_cosine']:.3f} "
        f"(5th percentile {fidelity['p05_cosine']:.3f}) to the real embedding of their text. "
        f"{report.corpus['questions']} real questions, limit {report.options['limit']}.",
        f"Machine: {report.machine['cpus']} CPUs, {report.machine['platform']}, Python "
        f"{report.machine['python']}, load average before {_load(report.machine['load_before'])}"
        f" and after {_load(report.machine.get('load_after'))}; {report.machine['date']}.",
    ]
    reused = [f"{r.size:,}" for r in report.results if r.reused_build]
    if reused:
        lines.append(f"Build figures for {', '.join(reused)} come from an earlier run's build.")
    loaded = [f"{r.size:,}" for r in report.results if r.index.get("index_was_saved")]
    if loaded:
        lines.append(f"At {', '.join(loaded)} the fresh first search loaded an ANN index saved "
                     "by an earlier run instead of building it.")  # fmt: skip
    return "\n".join(lines) + "\n"


def _load(value: object) -> str:
    if not isinstance(value, list | tuple):
        return "n/a"
    return "/".join(f"{v:.1f}" for v in value)


def chart(report: ScaleReport, path: Path) -> None:
    """A log-log PNG of p50 latency (p95 as a shaded band) against corpus size."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise InvalidInputError("the chart needs matplotlib: pip install 'recalld[bench]'") from exc
    sizes = [r.size for r in report.results]
    figure, axes = plt.subplots(figsize=(7, 4.5), dpi=120)
    for key, label in SERIES:
        p50 = [r.search[key]["p50_ms"] for r in report.results]
        p95 = [r.search[key]["p95_ms"] for r in report.results]
        axes.plot(sizes, p50, marker="o", label=label)
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


def write(report: ScaleReport, folder: Path) -> list[Path]:
    """Write ``scale.md``, ``scale.png`` and ``scale.json`` into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / "scale.md", folder / "scale.png", folder / "scale.json"]
    paths[0].write_text(markdown(report), encoding="utf-8")
    chart(report, paths[1])
    paths[2].write_text(json.dumps(report.to_dict(), indent=2), encoding="utf-8")
    return paths
