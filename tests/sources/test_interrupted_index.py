"""Ctrl-C during ``index`` of a large file (whose chunks are stored together, in one
transaction, when all are embedded) keeps the embeddings it finished: the next run embeds
only the rest. A real process, interrupted by SIGINT once it has embedded part of the file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from index_slowly import INTERRUPTED_AFTER  # the helper slows down from there on

import recalld
from recalld.config import Settings
from recalld.providers.cache import CACHE_COMMIT_TEXTS
from recalld.providers.embedders import EmbeddingBatch, FakeEmbedder

HELPER = Path(__file__).with_name("index_slowly.py")
SECTIONS = 8000


class CountingEmbedder(FakeEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.texts = 0

    def embed_batch(self, texts: Sequence[str], *, is_query: bool) -> EmbeddingBatch:
        self.texts += len(texts)
        return super().embed_batch(texts, is_query=is_query)


def big_workspace(folder: Path) -> Path:
    folder.mkdir()
    text = "\n\n".join(
        f"## Day {i}\n\nWe paddled the kayak past marker {i} and counted "
        f"{i * 7} herons on the far bank of the river."
        for i in range(SECTIONS)
    )
    (folder / "MEMORY.md").write_text(f"# Log\n\n{text}\n")  # fmt: skip
    return folder


def test_an_interrupted_index_keeps_what_it_embedded(tmp_path: Path) -> None:
    workspace = big_workspace(tmp_path / "workspace")
    db, cache = tmp_path / "memory.db", tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": str(Path(recalld.__file__).parents[1])}
    # A suite started in the background (``nohup ... &``) runs with SIGINT ignored, which
    # the helper would inherit, and Python then installs no handler: the index would finish
    # and exit 0. The default restored, Python's own handler raises KeyboardInterrupt.
    process = subprocess.Popen(
        [sys.executable, str(HELPER), str(db), str(cache), str(workspace)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        assert process.stdout is not None
        embedded, deadline = 0, time.monotonic() + 120
        while embedded < INTERRUPTED_AFTER and time.monotonic() < deadline:
            line = process.stdout.readline()
            assert line, (
                f"the indexer ended early: {process.stderr.read() if process.stderr else ''}"
            )
            assert line != "finished\n", "the index ended before it was interrupted"
            embedded += int(line.split()[1])
        process.send_signal(signal.SIGINT)
        _, errors = process.communicate(timeout=60)
        assert process.returncode != 0 and "KeyboardInterrupt" in errors
    finally:
        if process.poll() is None:  # (a failed check above)
            process.kill()
            process.communicate()

    counting = CountingEmbedder()
    with recalld.open(settings=Settings(db=db, cache_dir=cache), embedder=counting) as engine:
        report = engine.index([workspace])
    total = report.chunks_added
    assert total > 3 * CACHE_COMMIT_TEXTS and report.total_chunks == total
    # Every whole span embedded before the interrupt was kept: the re-run embedded the rest.
    assert counting.texts <= total - CACHE_COMMIT_TEXTS, (counting.texts, total, embedded)
    assert counting.texts >= total - embedded
