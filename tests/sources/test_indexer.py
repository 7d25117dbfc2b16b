from __future__ import annotations

import os
from pathlib import Path

import pytest
from sources_helpers import chunk_state, make_workspace, write

import recalld
from recalld.config import Settings
from recalld.errors import EmbedderMismatchError, InvalidInputError
from recalld.providers.embedders import FakeEmbedder
from recalld.sources.indexer import IndexOptions, index_sources


def test_first_index_stores_chunks_with_sources_and_dates(
    eng: recalld.MemoryEngine, workspace: Path
) -> None:
    report = eng.index([workspace])
    assert report.files == 6 and len(report.indexed) == 6 and not report.problems
    assert report.total_chunks == report.chunks_added > 0 and not report.empty
    chunks = eng.list(types=["chunk"], limit=1000)
    assert len(chunks) == report.total_chunks
    by_name = {Path(m.source.path or "").name: m for m in chunks}
    daily = by_name["2026-03-10.md"]
    assert daily.type == "chunk" and daily.source.kind == "file"
    assert daily.event_time is not None and daily.event_time.date().isoformat() == "2026-03-10"
    assert not daily.evergreen
    assert by_name["MEMORY.md"].evergreen and by_name["MEMORY.md"].event_time is None
    assert by_name["recalld.md"].evergreen
    lines = (workspace / "memory" / "2026-03-10.md").read_text().splitlines()
    src = daily.source
    assert src.line_start == 1 and src.line_end == len(lines)
    # the heading path (the page opens with its own heading), then the lines themselves
    assert daily.content == "2026-03-10\n" + "\n".join(lines[src.line_start - 1 : src.line_end])


def test_reindex_of_unchanged_workspace_reads_and_embeds_nothing(
    eng: recalld.MemoryEngine, workspace: Path, fake: FakeEmbedder
) -> None:
    eng.index([workspace])
    before, calls = chunk_state(eng), fake.calls
    report = eng.index([workspace])
    assert report.indexed == () and report.unchanged == 6 and report.chunks_added == 0
    assert fake.calls == calls and chunk_state(eng) == before


def test_touched_file_with_same_content_is_not_reembedded(
    eng: recalld.MemoryEngine, workspace: Path, fake: FakeEmbedder
) -> None:
    eng.index([workspace])
    calls = fake.calls
    note = workspace / "MEMORY.md"
    os.utime(note, ns=(1_000_000_000, 1_000_000_000))
    report = eng.index([workspace])
    assert report.indexed == () and report.unchanged == 6 and fake.calls == calls
    record = {f.path: f for f in eng.store.source_files()}[str(note)]
    assert record.mtime_ns == 1_000_000_000 and record.status == "indexed"


def test_edit_replaces_only_that_files_chunks(eng: recalld.MemoryEngine, workspace: Path) -> None:
    eng.index([workspace])
    before = {m.id: m for m in eng.list(types=["chunk"], limit=1000)}
    edited = workspace / "memory" / "2026-03-11.md"
    edited.write_text("# 2026-03-11\n\nThe billing rollout was cancelled by Zed.\n")
    report = eng.index([workspace])
    assert report.indexed == (str(edited),) and report.unchanged == 5
    after = {m.id: m for m in eng.list(types=["chunk"], limit=1000)}
    untouched = {i for i, m in before.items() if m.source.path != str(edited)}
    assert untouched <= set(after)  # other files' chunks kept, same ids
    texts = [m.content for m in after.values() if m.source.path == str(edited)]
    assert texts == ["2026-03-11\n# 2026-03-11\n\nThe billing rollout was cancelled by Zed."]
    hits = eng.search("billing migration script Bob", mode="hybrid", limit=20).hits
    assert all("Paired with Bob" not in h.memory.content for h in hits)


def test_delete_and_rename(eng: recalld.MemoryEngine, workspace: Path) -> None:
    eng.index([workspace])
    gone = workspace / "memory" / "2026-03-12.md"
    gone.unlink()
    old = workspace / "memory" / "projects" / "recalld.md"
    new = workspace / "memory" / "projects" / "recalld-engine.md"
    old.rename(new)
    report = eng.index([workspace])
    assert set(report.removed) == {str(gone), str(old)}
    assert report.indexed == (str(new),)
    paths = {p for p, *_ in chunk_state(eng)}
    assert str(gone) not in paths and str(old) not in paths and str(new) in paths
    assert {f.path for f in eng.store.source_files()} == paths
    fresh = recalld.open(settings=Settings(db=eng.settings.db.parent / "fresh.db",
                                           cache_dir=None), embedder=FakeEmbedder())  # fmt: skip
    with fresh:
        fresh.index([workspace])
        assert chunk_state(fresh) == chunk_state(eng)


def test_force_rebuilds_everything(
    eng: recalld.MemoryEngine, workspace: Path, fake: FakeEmbedder
) -> None:
    eng.index([workspace])
    before, calls = chunk_state(eng), fake.calls
    report = eng.index([workspace], force=True)
    assert len(report.indexed) == 6 and fake.calls > calls
    assert report.chunks_removed == report.chunks_added
    assert chunk_state(eng) == before


def test_changed_chunk_parameters_rechunk_every_file(
    eng: recalld.MemoryEngine, workspace: Path
) -> None:
    eng.index([workspace])
    from recalld.sources.chunking import ChunkParams

    options = IndexOptions(chunking=ChunkParams(target_tokens=20, overlap_tokens=4))
    report = index_sources([str(workspace)], options, eng._index_deps())
    assert len(report.indexed) == 6 and report.total_chunks > 6
    assert {f.chunker for f in eng.store.source_files()} == {"md2/20/4"}


def test_bad_files_are_reported_and_the_rest_indexed(
    eng: recalld.MemoryEngine, workspace: Path
) -> None:
    memory = workspace / "memory"
    (memory / "binary.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (memory / "latin1.md").write_bytes("caf\xe9 au lait".encode("latin-1"))
    write(memory / "huge.md", "x" * 3000)
    write(memory / "empty.md", "")
    report = eng.index([workspace], max_file_bytes=2000)
    messages = {Path(p.path).name: p.message for p in report.problems}
    assert messages["binary.md"].startswith("binary file")
    assert messages["latin1.md"].startswith("not UTF-8 text (invalid byte at offset 3)")
    assert messages["huge.md"].startswith("too large (3000 bytes, over the 2000 bytes limit)")
    assert len(report.indexed) == 7  # the 6 good files and the empty one (0 chunks)
    records = {Path(f.path).name: f for f in eng.store.source_files()}
    assert records["binary.md"].status == "error" and records["binary.md"].chunks == 0
    assert records["empty.md"].status == "indexed" and records["empty.md"].chunks == 0
    status = eng.status().sources
    assert status is not None and len(status.errors) == 3
    assert not any(Path(p).name == "binary.md" for p, *_ in chunk_state(eng))


def test_file_turning_bad_keeps_its_last_good_chunks(
    eng: recalld.MemoryEngine, workspace: Path
) -> None:
    eng.index([workspace])
    note = workspace / "memory" / "2026-03-10.md"
    kept = {s for s in chunk_state(eng) if s[0] == str(note)}
    note.write_bytes(b"\xff\xfe garbage \x00")
    report = eng.index([workspace])
    assert "last good version are kept" in report.problems[0].message
    assert {s for s in chunk_state(eng) if s[0] == str(note)} == kept


def test_bad_paths_and_globs_change_nothing(eng: recalld.MemoryEngine, tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="no such file or folder"):
        eng.index([tmp_path / "missing"])
    with pytest.raises(InvalidInputError, match="must be relative"):
        eng.index([tmp_path], globs=["/abs/*.md"])
    write(tmp_path / "docs" / "guide.md", "# Guide\n")
    with pytest.raises(InvalidInputError, match=r"nothing to index.*1 other \.md file"):
        eng.index([tmp_path / "docs"])
    with pytest.raises(InvalidInputError, match="no workspace is indexed yet"):
        eng.index([])
    assert eng.store.source_roots() == [] and eng.store.source_files() == []
    assert eng.status().sources is None


def test_custom_globs_and_single_files(eng: recalld.MemoryEngine, tmp_path: Path) -> None:
    write(tmp_path / "docs" / "guide.md", "# Guide\n\nRun the tests with pytest.\n")
    write(tmp_path / "docs" / "skip.txt", "not markdown")
    report = eng.index([tmp_path / "docs"], globs=["**/*.md"])
    assert [Path(p).name for p in report.indexed] == ["guide.md"]
    single = write(tmp_path / "elsewhere" / "2026-01-02-retro.md", "Retro: ship smaller.\n")
    report = eng.index([single])
    memory = next(m for m in eng.list(types=["chunk"]) if m.source.path == str(single))
    assert memory.event_time is not None and memory.event_time.day == 2
    # With no path, every registered root is refreshed, each with its own globs.
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n\nRun the tests with tox.\n")
    report = eng.index()
    assert [Path(p).name for p in report.indexed] == ["guide.md"]
    assert {r.globs for r in eng.store.source_roots()} == {("**/*.md",), ("MEMORY.md",
                                                           "memory/**/*.md")}  # fmt: skip


def test_interrupted_run_leaves_pending_work_that_the_next_run_finishes(
    eng: recalld.MemoryEngine, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    eng.index([workspace])
    for note in sorted((workspace / "memory").glob("2026-*.md")):
        note.write_text(note.read_text() + "\nEvening: wrote the retro.\n")
    real = eng.store.replace_file_chunks
    written: list[str] = []

    def dying(file, memories, vectors, text=None):  # type: ignore[no-untyped-def]
        if len(written) == 2:
            raise KeyboardInterrupt  # as if the user pressed Ctrl-C mid-run
        written.append(file.path)
        real(file, memories, vectors, text)

    monkeypatch.setattr(eng.store, "replace_file_chunks", dying)
    with pytest.raises(KeyboardInterrupt):
        eng.index([workspace])
    monkeypatch.undo()
    status = eng.status().sources
    assert status is not None and len(status.pending) == 2 and status.needs_index
    records = {f.path: f for f in eng.store.source_files()}
    for path in written:  # finished files are fully new
        assert records[path].status == "indexed"
        assert any("wrote the retro" in c for p, _, _, c in chunk_state(eng) if p == path)
    for path in status.pending:  # unfinished files are fully old
        assert not any("wrote the retro" in c for p, _, _, c in chunk_state(eng) if p == path)
    report = eng.index([workspace])
    assert sorted(report.indexed) == sorted(status.pending)
    after = eng.status().sources
    assert after is not None and not after.needs_index and after.pending == ()


def test_embedder_change_is_refused_before_any_write(tmp_path: Path) -> None:
    workspace = make_workspace(tmp_path / "ws", days=1)
    settings = Settings(db=tmp_path / "s.db", cache_dir=None)
    with recalld.open(settings=settings, embedder=FakeEmbedder(64)) as first:
        first.index([workspace])
        state = chunk_state(first)
    (workspace / "MEMORY.md").write_text("# changed\n")
    with recalld.open(settings=settings, embedder=FakeEmbedder(32, "other")) as second:
        with pytest.raises(EmbedderMismatchError):
            second.index([workspace])
        assert chunk_state(second) == state
        assert all(f.status == "indexed" for f in second.store.source_files())


def test_status_reports_stale_unindexed_and_missing(
    eng: recalld.MemoryEngine, workspace: Path
) -> None:
    eng.index([workspace])
    clean = eng.status().sources
    assert clean is not None and not clean.needs_index and clean.chunks > 0
    assert clean.indexed == clean.files == 6
    (workspace / "MEMORY.md").write_text("# new content\n")
    write(workspace / "memory" / "2026-04-01.md", "April.\n")
    (workspace / "memory" / "2026-03-10.md").unlink()
    src = eng.status().sources
    assert src is not None and src.needs_index
    assert [Path(p).name for p in src.stale] == ["MEMORY.md"]
    assert [Path(p).name for p in src.unindexed] == ["2026-04-01.md"]
    assert [Path(p).name for p in src.missing] == ["2026-03-10.md"]


def test_cjk_notes_are_found(eng: recalld.MemoryEngine, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    write(
        ws / "memory" / "2026-03-14.md", "# 会議\n\n今日は東京でプロジェクトの会議がありました。\n"
    )
    write(ws / "memory" / "ko.md", "서울에서 회의가 있었습니다.\n")
    write(ws / "MEMORY.md", "I like tea.\n")
    eng.index([ws])
    hit = eng.search("東京", mode="hybrid", limit=3).hits[0].memory
    assert hit.source.path == str(ws / "memory" / "2026-03-14.md")
    assert eng.search("서울에서", mode="hybrid", limit=3).hits[0].memory.source.path == str(
        ws / "memory" / "ko.md"
    )


def test_progress_counts_chunks_from_the_first_call(
    eng: recalld.MemoryEngine, workspace: Path
) -> None:
    """The bar knows its total before the first file is embedded (no `0/?`), in chunks."""
    calls: list[tuple[int, int]] = []
    report = eng.index([workspace], progress=lambda done, total: calls.append((done, total)))
    assert calls[0] == (0, report.chunks_added) and report.chunks_added > 0
    assert calls[-1] == (report.chunks_added, report.chunks_added)
    assert all(total == report.chunks_added for _, total in calls)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    write(workspace / "memory" / "2026-01-01.md", "# New day\n\nOne more note.\n")
    calls.clear()
    again = eng.index([workspace], progress=lambda done, total: calls.append((done, total)))
    assert again.chunks_added == 1 and calls == [(0, 1), (1, 1)]
