"""docs/memory-fields.md lists every field a memory may be given, and its example imports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import recalld
from recalld.records import NewMemory
from recalld.requests import ImportRequest, MemoryIn

PAGE = Path(__file__).resolve().parents[2] / "docs" / "memory-fields.md"


def test_every_settable_field_has_a_row() -> None:
    rows = set(re.findall(r"^\| `(\w+)` \|", PAGE.read_text(encoding="utf-8"), flags=re.M))
    assert rows == set(NewMemory.__dataclass_fields__) | set(MemoryIn.model_fields)


def test_the_example_lines_import_cleanly(tmp_path: Path) -> None:
    block = PAGE.read_text(encoding="utf-8").split("```json\n")[1].split("```")[0]
    assert all(json.loads(line) for line in block.splitlines())
    source = tmp_path / "example.jsonl"
    source.write_text(block, encoding="utf-8")
    settings = recalld.Settings(db=tmp_path / "m.db", cache_dir=None, embedder="fake")
    with recalld.open(settings=settings) as memory:
        report = memory.run_import(ImportRequest(path=str(source)))
        assert (report.stored, report.problems) == (3, ())
        assert {m.project for m in memory.list()} == {None, "billing"}
