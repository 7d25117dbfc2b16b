"""A real index process killed with SIGKILL mid-run leaves every file fully old or fully new."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sources_helpers import chunk_state, write

import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder
from recalld.sources.chunking import chunk_markdown
from recalld.text import normalize_content

pytestmark = pytest.mark.integration

# The child indexes with a deliberately slow embedder (the FakeEmbedder's vectors, so the
# same fingerprint as the parent's) and prints after every committed file.
CHILD = """
import sys, time
import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder

class Slow(FakeEmbedder):
    batch_size = 4
    def embed_batch(self, texts, *, is_query):
        time.sleep(0.03 * len(texts))
        return super().embed_batch(texts, is_query=is_query)

with recalld.open(settings=Settings(db=sys.argv[1], cache_dir=None), embedder=Slow()) as e:
    e.index([sys.argv[2]], progress=lambda done, total: print(done, total, flush=True))
print("finished", flush=True)
"""


def _note(i: int, version: int) -> str:
    body = "\n".join(
        f"Version {version} line {j}: note {i} about topic {j % 5}." for j in range(40)
    )
    return f"# Note {i} v{version}\n\n{body}\n"


def _expected(text: str) -> list[str]:
    return [normalize_content(c.content) for c in chunk_markdown(text)]


def _stored(engine: recalld.MemoryEngine) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path, _start, _, content in sorted(chunk_state(engine), key=lambda s: (s[0], s[1])):
        out.setdefault(path or "", []).append(content)
    return out


def _run_and_kill(db: Path, ws: Path, after_files: int) -> bool:
    """Start an index process, SIGKILL it once it committed ``after_files`` files.

    Returns whether it was killed (False if it finished first).
    """
    src = str(Path(recalld.__file__).parent.parent)
    env = {**os.environ, "PYTHONPATH": src}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db), str(ws)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert child.stdout is not None
    try:
        deadline = time.monotonic() + 60
        for line in child.stdout:
            if line.startswith("finished"):
                return False
            if int(line.split()[0]) >= after_files:
                os.kill(child.pid, signal.SIGKILL)
                return True
            assert time.monotonic() < deadline
        raise AssertionError(f"child ended early: {child.stderr.read() if child.stderr else ''}")
    finally:
        child.kill()
        child.wait(timeout=30)
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()


def test_sigkill_mid_index_then_resume(tmp_path: Path) -> None:
    ws, db = tmp_path / "ws", tmp_path / "store.db"
    count = 24
    for i in range(count):
        write(ws / "memory" / f"note-{i:02d}.md", _note(i, 1))
    settings = Settings(db=db, cache_dir=None)
    with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
        engine.index([ws])
    old = {str(ws / "memory" / f"note-{i:02d}.md"): _expected(_note(i, 1)) for i in range(count)}
    # Version 2: every file edited, two deleted, three new.
    new: dict[str, list[str]] = {}
    for i in range(2, count + 3):
        path = write(ws / "memory" / f"note-{i:02d}.md", _note(i, 2))
        new[str(path)] = _expected(_note(i, 2))
    for i in range(2):
        (ws / "memory" / f"note-{i:02d}.md").unlink()

    killed = [_run_and_kill(db, ws, after) for after in (3, 6)]
    assert any(killed), "the index process was never caught mid-run"

    with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
        stored = _stored(engine)
        for path in set(old) | set(new):
            versions = [v for v in (old.get(path), new.get(path)) if v is not None]
            if path not in new:  # deleted: removed at the start of the run
                assert path not in stored
                continue
            assert stored.get(path, []) in [*versions, []] and (
                stored.get(path) is not None or path not in old
            ), f"{path} is half-written"
        done_new = [p for p in new if stored.get(p) == new[p]]
        assert 0 < len(done_new) < len(new), "the kill landed mid-run"
        status = engine.status().sources
        assert status is not None and status.pending, "unfinished work is visible"

        report = engine.index([ws])
        assert set(report.indexed) == set(new) - set(done_new)
        assert _stored(engine) == new
        final = engine.status().sources
        assert final is not None and not final.needs_index
        assert engine.status().store.with_vectors == sum(len(v) for v in new.values())
