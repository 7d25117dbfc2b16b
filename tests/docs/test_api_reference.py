"""docs/api.md is what scripts/api_reference.py makes of the docstrings today."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_api_reference_is_current() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts/api_reference.py"), "--check"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_api_reference_names_the_facade() -> None:
    page = (ROOT / "docs/api.md").read_text(encoding="utf-8")
    for name in ("recalld.open(", "MemoryEngine.search(", "MemoryEngine.supersede(", "NewMemory"):
        assert name in page
