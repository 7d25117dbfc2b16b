"""docs/ holds pages a user reads and small report summaries, not per-query dumps."""

import json
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
MAX_DOCS_BYTES = 3 * 1024 * 1024
"""The whole docs/ folder: pages, pictures and report summaries fit well under this."""


def test_docs_stay_small() -> None:
    total = sum(path.stat().st_size for path in DOCS.rglob("*") if path.is_file())
    assert total < MAX_DOCS_BYTES, f"docs/ holds {total:,} bytes"


def test_committed_reports_are_summaries() -> None:
    reports = sorted(DOCS.glob("reports/*.json"))
    assert reports
    carrying = [p.name for p in reports if "probes" in json.loads(p.read_text(encoding="utf-8"))]
    assert carrying == [], "per-query rankings belong in the run folder, not docs/reports"
