"""The adversarial run's short version (``scripts/reliability.py --quick``) finds nothing:
every gating check tried at least once and never failed, and the load runs without errors."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import recalld

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.postgres
@pytest.mark.timeout(1200)
def test_the_quick_reliability_run_finds_nothing(tmp_path: Path, pg_admin_dsn: str) -> None:
    report = tmp_path / "reliability.md"
    env = {**os.environ, "PYTHONPATH": str(Path(recalld.__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "reliability.py"), "--quick",
         "--dsn", pg_admin_dsn, "--report", str(report)],
        env=env, capture_output=True, text=True, timeout=1100,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    written = report.read_text()
    rows = [line.split("|")[1:-1] for line in written.splitlines()
            if line.startswith("| ") and not line.startswith(("| check", "| backend"))]  # fmt: skip
    checks = [[cell.strip() for cell in row] for row in rows if len(row) == 6]
    loads = [[cell.strip() for cell in row] for row in rows if len(row) == 9]
    held = [[cell.strip() for cell in row] for row in rows if len(row) == 10]
    gating = [c for c in checks if c[5] == "yes"]
    assert len(gating) >= 30  # every section ran, on both backends
    assert {c[1] for c in gating} == {"sqlite", "postgres"}
    for name, backend, attempts, failures, _, _ in gating:
        assert int(attempts) > 0 and int(failures) == 0, (name, backend, written)
    assert len(loads) == 6, written  # 8, 32 and 64 clients on each backend
    assert all(int(row[8]) == 0 and float(row[3]) > 0 for row in loads), written
    # The capacity search at 32 clients on each backend: four scheduled runs each.
    assert sorted((row[0], row[2]) for row in held) == [("postgres", "32"), ("sqlite", "32")]
    assert all(len(row[9].split(", ")) == 4 for row in held), written
    assert re.search(r"commit `[0-9a-f]+`", written)
