"""Readable reports of a benchmark run: Markdown tables, a PNG chart, the JSON itself."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from recalld.bench.markdown import describe_embedder, fmt_metric, fmt_ms, pair_lines, table_lines
from recalld.errors import InvalidInputError, install_hint

if TYPE_CHECKING:
    from recalld.providers.embedders import Embedder

HEADLINES: Mapping[str, tuple[str, ...]] = {
    "longmemeval": (
        "session.recall_any@5",
        "session.recall_any@1",
        "turn.recall_all@10",
        "context.evidence@2000",
    ),
    "locomo": (
        "turn.recall_any@10",
        "turn.evidence_recall@10",
        "session.recall_all@10",
        "context.evidence@2000",
    ),
    "workloads": ("hit@1", "current_first"),
    "beir": ("doc.ndcg@10", "doc.recall@100"),
}
"""The metrics broken down per question type / category (the first two are charted)."""
LEVELS = (
    ("session", "Session level"),
    ("turn", "Turn level"),
    ("doc", "Document level"),
    ("context", "Evidence inside the context budget"),
)
CHART_PANELS = 2
TITLES = {"longmemeval": "LongMemEval", "locomo": "LoCoMo", "beir": "BEIR documents"}


CHART_SKIPPED = f"chart skipped: it needs matplotlib ({install_hint('bench')})"


class Written(NamedTuple):
    """The files a report folder received, and what was left out and why."""

    paths: list[Path]
    skipped: list[str]


def pyplot() -> Any | None:
    """Matplotlib's pyplot drawing to files, or ``None`` without the ``bench`` extra."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def embedder_record(model: Embedder, setting: str | None) -> dict[str, Any]:
    """What a report says of its embedder: the setting that chose it (``local``,
    ``onnx:/folder`` ...; ``None`` for an embedder object given in code), the model, and
    its fingerprint (the key every stored vector is checked against)."""
    fingerprint = model.fingerprint
    return {
        "setting": setting,
        "described": ", ".join(filter(None, [fingerprint.describe(), model.query_path])),
        "fingerprint": fingerprint.key,
        "details": json.loads(fingerprint.to_json()),
    }


def _metric_names(report: Mapping[str, Any], level: str) -> list[str]:
    names: dict[str, None] = {}
    for system in report["systems"].values():
        for name in system["overall"]["metrics"]:
            if name.startswith(level + "."):
                names.setdefault(name, None)
    return sorted(names, key=_metric_order)


def _metric_order(name: str) -> tuple[str, int]:
    base, _, cut = name.partition("@")
    return base, int(cut) if cut.isdigit() else 0


def _overview(report: Mapping[str, Any]) -> list[str]:
    q = report["questions"]
    o = report["options"]
    m = report["machine"]
    load = report.get("load_average") or {}
    lines = [
        f"- file: `{report['file']}`",
        f"- date: {report['date']}; machine: {m['cores']} cores, {m['platform']}, "
        f"Python {m['python']}",
        f"- embedder: {describe_embedder(report.get('embedder'))}",
        f"- load average (1, 5, 15 min) at start {load.get('start')}, at end {load.get('end')}",
        "- questions: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in q.items()),
        "- options: " + ", ".join(f"{k} {v}" for k, v in o.items() if v not in (None, [], ())),
    ]
    if report.get("command"):
        lines.insert(0, f"- command: `{report['command']}`")
    return lines


def _level_table(report: Mapping[str, Any], level: str) -> list[str]:
    names = _metric_names(report, level)
    if not names:
        return []
    rows = []
    for system_name, system in report["systems"].items():
        metrics = system["overall"]["metrics"]
        rows.append([system_name, *(fmt_metric(metrics.get(n)) for n in names)])
    counts = next(iter(report["systems"].values()))["overall"]["counts"]
    n = max((counts.get(name, 0) for name in names), default=0)
    header = ["system", *(name.split(".", 1)[1] for name in names)]
    return [f"({n} questions)", "", *table_lines(header, rows)]


def _group_tables(report: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    systems = report["systems"]
    groups = sorted({g for s in systems.values() for g in s["by_group"]})
    if len(groups) < 2:  # one group is the overall table again
        return []
    for metric in HEADLINES.get(report["benchmark"], ()):
        rows = []
        for group in groups:
            first = next(iter(systems.values()))["by_group"].get(group, {})
            count = first.get("counts", {}).get(metric, 0)
            cells = [
                fmt_metric(s["by_group"].get(group, {}).get("metrics", {}).get(metric))
                for s in systems.values()
            ]
            rows.append([group, str(count), *cells])
        if any(row[1] != "0" for row in rows):
            lines += ["", f"**{metric}**", "", *table_lines(["group", "n", *systems], rows)]
    return lines


def _speed_lines(report: Mapping[str, Any]) -> list[str]:
    s = report["speed"]
    cache = s["embedding_cache"]
    rows = [
        [
            name,
            fmt_ms(system["latency_ms"].get("p50")),
            fmt_ms(system["latency_ms"].get("p95")),
            str(system.get("short_rankings", 0)),
        ]
        for name, system in report["systems"].items()
    ]
    first = s.get("first_search_ms", {})
    first_line = [
        "- first search on each fresh store (loads its vectors; not in the table): "
        f"p50 {fmt_ms(first.get('p50'))} ms, p95 {fmt_ms(first.get('p95'))} ms"
    ]
    return [
        f"- ingest: {s['memories']} memories in {s['ingest_s']:.1f} s "
        f"({s['ingest_memories_per_s']:.1f} memories/s, embedding included)",
        f"- embedding cache: {cache['hits']} hits, {cache['misses']} misses ({cache['state']})",
        f"- peak memory: {s['peak_rss_mb']:.0f} MiB; wall time {s['wall_s']:.1f} s",
        *(first_line if first.get("searches") else []),
        "",
        *table_lines(["system", "search p50 ms", "search p95 ms", "rankings < 10 sessions"], rows),
    ]


def markdown_report(report: Mapping[str, Any]) -> str:
    """The report as Markdown: overview, one table per level, breakdowns, speed."""
    if report["benchmark"] == "workloads":
        from recalld.bench.workloads_report import workloads_markdown

        return workloads_markdown(report)
    title = TITLES.get(report["benchmark"], report["benchmark"])
    lines = [f"# {title} retrieval benchmark", "", *_overview(report)]
    for level, heading in LEVELS:
        table = _level_table(report, level)
        if table:
            lines += ["", f"## {heading}", "", *table]
    breakdown = _group_tables(report)
    if breakdown:
        lines += ["", "## By question type / category", *breakdown]
    pairs = pair_lines(report)
    if pairs:
        lines += ["", "## Paired wins and losses", "", *pairs]
    lines += ["", "## Speed", "", *_speed_lines(report)]
    return "\n".join(lines) + "\n"


def write_chart(report: Mapping[str, Any], path: Path) -> bool:
    """A PNG of the headline metrics per group (and overall), one bar per system; ``False``
    (nothing written) without matplotlib."""
    plt = pyplot()
    if plt is None:
        return False
    systems = report["systems"]
    groups = ["overall", *sorted({g for s in systems.values() for g in s["by_group"]})]
    present = [
        m
        for m in HEADLINES.get(report["benchmark"], ())
        if any(m in s["overall"]["metrics"] for s in systems.values())
    ]
    metrics = present[:CHART_PANELS]
    if not metrics:
        raise InvalidInputError("nothing to chart: the report has no headline metric")
    figure, axes = plt.subplots(len(metrics), 1, figsize=(11, 4 * len(metrics)), squeeze=False)
    width = 0.8 / len(systems)
    for axis, metric in zip(axes[:, 0], metrics, strict=True):
        for i, (name, system) in enumerate(systems.items()):
            values = [_group_value(system, g, metric) for g in groups]
            positions = [x + (i - (len(systems) - 1) / 2) * width for x in range(len(groups))]
            axis.bar(positions, values, width, label=name)
        labels = [f"{g}\n(n={_group_count(systems, g, metric)})" for g in groups]
        axis.set_xticks(range(len(groups)), labels, fontsize=8)
        axis.set_ylim(0, 1.05)
        axis.set_ylabel(metric)
        axis.grid(axis="y", alpha=0.3)
        axis.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    axes[0, 0].set_title(f"{report['benchmark']}: {Path(report['file']).name}")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def _group_count(systems: Mapping[str, Any], group: str, metric: str) -> int:
    first = next(iter(systems.values()))
    summary = first["overall"] if group == "overall" else first["by_group"].get(group, {})
    return int(summary.get("counts", {}).get(metric, 0))


def _group_value(system: Mapping[str, Any], group: str, metric: str) -> float:
    summary = system["overall"] if group == "overall" else system["by_group"].get(group, {})
    return float(summary.get("metrics", {}).get(metric, 0.0))


def print_json(report: Mapping[str, Any], out: Path | None, indent: int = 1) -> None:
    """A script's report: printed as JSON, and written to ``out`` as well when given."""
    text = json.dumps(report, indent=indent)
    print(text)
    if out:
        out.write_text(text + "\n", encoding="utf-8")


def write_json(report: Mapping[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def write_report(report: Mapping[str, Any], folder: Path) -> Written:
    """``report.md``, ``chart.png`` (with matplotlib) and ``results.json`` in ``folder``."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidInputError(f"cannot create the folder {folder}: {exc.strerror}") from exc
    markdown = folder / "report.md"
    markdown.write_text(markdown_report(report), encoding="utf-8")
    chart = folder / "chart.png"
    charted = write_chart(report, chart)
    data = folder / "results.json"
    write_json(report, data)
    if not charted:
        return Written([markdown, data], [CHART_SKIPPED])
    return Written([markdown, chart, data], [])
