"""Reduce a benchmark report to the summary kept in git: every figure, no per-query dump.

    python scripts/summarize_report.py FULL.json SUMMARY.json

The full report (every question's ranking and scores, under ``probes``) stays in the run's
own folder; docs/reports/ keeps what the pages cite: the command, the data file, the date,
the machine and its load, the embedder, each system's settings, means and paired counts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PER_QUERY_KEYS = ("probes",)
"""Keys whose value is one entry per question: the bulk of a report, cited by no page."""


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    summary = {key: value for key, value in report.items() if key not in PER_QUERY_KEYS}
    dropped = {key: len(report[key]) for key in PER_QUERY_KEYS if key in report}
    if dropped:
        summary["per_query_left_out"] = dropped
    return summary


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    source, target = (Path(arg) for arg in argv)
    report = json.loads(source.read_text(encoding="utf-8"))
    text = json.dumps(summarize(report), indent=1, ensure_ascii=False) + "\n"
    target.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
