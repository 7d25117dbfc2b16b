"""Markdown cells and lines shared by the benchmark reports (:mod:`.report`,
:mod:`.workloads_report`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

LISTED = 12
"""Query ids listed per paired comparison in the Markdown (the JSON has them all)."""


def describe_embedder(value: Any) -> str:
    """A report's embedder for a Markdown line: its setting, model and fingerprint."""
    if not isinstance(value, Mapping):  # reports written before the record existed
        return str(value or "not recorded")
    setting = f"`{value['setting']}`: " if value.get("setting") else ""
    return f"{setting}{value['described']}; fingerprint {value['fingerprint']}"


def fmt_metric(value: float | None) -> str:
    """A metric for a Markdown cell (3 decimals; a dash when absent)."""
    return "–" if value is None else f"{value:.3f}"


def table_lines(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table's lines."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def pair_lines(report: Mapping[str, Any]) -> list[str]:
    """The paired wins and losses of a report, a line per comparison and the ids listed."""
    lines = []
    for c in report.get("comparisons", []):
        counts = f"{len(c['wins'])} won, {len(c['losses'])} lost, {c['ties']} tied"
        lines.append(f"- **{c['system']} vs {c['against']}** at {c['metric']}: {counts}")
        for word, ids in (("won", c["wins"]), ("lost", c["losses"])):
            if ids:
                more = f" and {len(ids) - LISTED} more" if len(ids) > LISTED else ""
                lines.append(f"  - {word}: {', '.join(ids[:LISTED])}{more}")
    return lines


def fmt_ms(value: float | None) -> str:
    """Milliseconds for a Markdown cell (1 decimal; a dash when absent)."""
    return "–" if value is None else f"{value:.1f}"
