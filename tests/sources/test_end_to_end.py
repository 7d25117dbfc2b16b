"""The whole workflow with the real packaged embedding model."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sources_helpers import write

import recalld
from recalld.config import Settings
from recalld.providers.embedders import Embedder

FIXTURES = Path(__file__).parent.parent / "fixtures" / "sources"


@pytest.fixture
def real(tmp_path: Path, local_embedder: Embedder) -> Iterator[recalld.MemoryEngine]:
    settings = Settings(db=tmp_path / "real.db", cache_dir=tmp_path / "cache")
    with recalld.open(settings=settings, embedder=local_embedder) as engine:
        yield engine


def _workspace(root: Path) -> Path:
    about = (
        "# About me\n\n## Preferences\n\n- I prefer green tea to coffee.\n"
        "- I am allergic to peanuts.\n\n## Family\n\n- My sister Maya lives in Lisbon.\n"
    )
    write(root / "MEMORY.md", about)
    write(root / "memory" / "2026-03-14.md", "# Saturday\n\nRepaired the bicycle's rear brake "
          "and replaced the chain.\n")  # fmt: skip
    write(root / "memory" / "2026_03_20.md", "# Work\n\nThe quarterly planning meeting moved "
          "to Thursday afternoon.\n")  # fmt: skip
    write(
        root / "memory" / "travel" / "japan.md",
        "# 旅行\n\n京都で紅葉を見て、温泉旅館に泊まりました。\n",
    )
    return root


def _lines(memory: recalld.Memory) -> list[str]:
    path = memory.source.path
    assert path is not None and memory.source.line_start and memory.source.line_end
    text = Path(path).read_text(encoding="utf-8").splitlines()
    return text[memory.source.line_start - 1 : memory.source.line_end]


def test_index_edit_and_find_with_the_real_model(
    real: recalld.MemoryEngine, tmp_path: Path
) -> None:
    ws = _workspace(tmp_path / "ws")
    report = real.index([ws])
    assert len(report.indexed) == 4 and not report.problems and report.total_chunks >= 4
    fingerprint = real.status().store.fingerprint
    assert fingerprint is not None and "MiniLM" in fingerprint

    drink = real.search("which hot beverage do I like?", mode="vector", limit=1).hits[0].memory
    assert Path(drink.source.path or "").name == "MEMORY.md"
    assert any("green tea" in line for line in _lines(drink))  # opens at the right lines

    bike = real.search("fixing my bike", mode="vector", limit=1).hits[0].memory
    assert Path(bike.source.path or "").name == "2026-03-14.md"
    assert bike.event_time == datetime(2026, 3, 14, tzinfo=UTC) and not bike.evergreen

    trip = real.search("京都の旅行", limit=1).hits[0].memory
    assert Path(trip.source.path or "").name == "japan.md" and trip.evergreen

    later = datetime(2026, 9, 1, tzinfo=UTC)
    decaying = real.config.with_changes(decay="hyperbolic")
    hits = real.search("meeting and bicycle and tea", limit=10, as_of=later, explain=True,
                       config=decaying).hits  # fmt: skip
    factors = {Path(h.memory.source.path or "").name: h.trace.adjustments for h in hits if h.trace}
    assert factors["2026-03-14.md"].get("decay", 1.0) < 1.0  # dated notes decay
    assert "decay" not in factors["MEMORY.md"]  # evergreen notes do not

    note = ws / "memory" / "2026-03-14.md"
    note.write_text("# Saturday\n\nBaked sourdough bread with rye flour.\n", encoding="utf-8")
    report = real.index([ws])
    assert report.indexed == (str(note),)
    baking = real.search("making bread at home", mode="vector", limit=1).hits[0].memory
    assert Path(baking.source.path or "").name == "2026-03-14.md"
    assert not any("chain" in m.content for m in real.list(types=["chunk"], limit=50))


def test_unicode_survives_into_the_store(real: recalld.MemoryEngine, tmp_path: Path) -> None:
    text = "".join(f"{i}: Zoë e\u0301 😀 👩\u200d💻 🇩🇪 क्ष 漢字 " for i in range(120))
    write(tmp_path / "ws" / "MEMORY.md", text + "\n")
    report = real.index([tmp_path / "ws"])
    assert report.total_chunks > 2
    stored = real.list(types=["chunk"], limit=100)
    for memory in stored:
        content = memory.content
        content.encode("utf-8")  # no lone surrogate
        assert content.count("👩") == content.count("\u200d") == content.count("💻")
        assert content.count("👩\u200d💻") == content.count("\u200d")  # sequences whole
        assert content.count("\U0001f1e9") == content.count("\U0001f1ea")  # flags whole
        assert unicodedata.category(content[0]) not in ("Mn", "Mc")
    joined = "".join(m.content for m in stored)
    assert "🇩🇪" in joined and "क्ष" in joined and "é" in joined  # NFC keeps é whole


def test_transcript_import_and_search_with_the_real_model(real: recalld.MemoryEngine) -> None:
    first = real.import_transcript(FIXTURES / "transcript.jsonl", "jsonl-transcript")
    second = real.import_transcript(FIXTURES / "transcript.jsonl", "jsonl-transcript")
    assert first.stored == 7 and second.stored == 0 and second.already_present == 7
    hit = real.search("what does my pet eat?", mode="vector", limit=1).hits[0].memory
    assert hit.content == "Miso only eats salmon kibble." and hit.session_id == "s1"
