"""Print a benchmark report (results.json from `recalld bench ... --report DIR`) as a
docs/benchmarks.md section: the same tables, headings one level down, a title on top.

Usage: python scripts/bench_figures.py DIR/results.json "LongMemEval_S (real records)" [NOTE]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from recalld.bench.report import markdown_report


def section(report: dict, title: str, note: str = "") -> str:
    body = markdown_report(report).splitlines()[1:]  # drop the report's own title
    shifted = ["#" * 2 + line if line.startswith("## ") else line for line in body]
    day = report["date"][:10]
    lines = [f"### {title}, {day}", *([""] + [note] if note else []), *shifted]
    return "\n".join(lines).replace("\n\n\n", "\n\n")


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    report = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    print(section(report, sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else ""))


if __name__ == "__main__":
    main()
