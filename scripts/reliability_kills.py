"""SIGKILL trials (add_many, import, index, reindex, migrate) and concurrent writer and reader
processes: after each, the store is intact, every acknowledged write is there, nothing is
half-written, and the same operation run again completes."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from reliability_common import (
    Run,
    cli_env,
    engine,
    memories,
    recalld_command,
    text,
)

from recalld.migration import checksum

ADD_WORKER = """
import os, sys
import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder
from recalld.records import NewMemory
sys.path.insert(0, sys.argv[6])
from reliability_common import memories
db, ack, prefix, count, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), \\
    int(sys.argv[5])
settings = Settings(db=db, cache_dir=os.environ["RECALLD_CACHE_DIR"])
with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine, open(ack, "a") as out:
    for start in range(0, count, batch):
        items = memories(prefix, min(batch, count - start), start)
        engine.add_many(items)
        out.write("".join(m.id + "\\n" for m in items))
        out.flush()
        os.fsync(out.fileno())
print("done")
"""
REINDEX_WORKER = """
import os, sys
import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder
settings = Settings(db=sys.argv[1], cache_dir=os.environ["RECALLD_CACHE_DIR"])
with recalld.open(settings=settings,
                  embedder=FakeEmbedder(dimension=32, model_id="fake-other")) as engine:
    engine.reindex()
print("done")
"""
READ_WORKER = """
import sys, time
import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder
from pathlib import Path
stop, deadline = Path(sys.argv[2]), time.monotonic() + 600
with recalld.open(settings=Settings(db=sys.argv[1], cache_dir=None),
                  embedder=FakeEmbedder()) as engine:
    reads = 0
    while not stop.exists() and time.monotonic() < deadline:
        engine.search("crane at berth %d" % (reads % 97), limit=5)
        engine.list(limit=5)
        reads += 1
print("done", reads)
"""
SCRIPTS = str(Path(__file__).resolve().parent)


@dataclass(frozen=True)
class Operation:
    """One killable operation: how to start it on a store, and what it must leave."""

    name: str
    start: Callable[[Run, str, Path], subprocess.Popen[bytes]]
    expected: int
    """Memories (of the default tenant) the finished operation leaves."""


def _popen(run: Run, argv: list[str], **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, env=cli_env(run, **env), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)  # fmt: skip


def _operations(run: Run, backend: str, count: int) -> dict[str, tuple[Operation, str]]:
    """Each operation with the seed store its trials start from (copied per trial)."""
    folder = run.folder
    empty = run.location(backend, "empty")
    engine(empty).close()  # the schema exists: a copy of it is a fresh store
    lines = [json.dumps({"content": text("imp", i), "id": f"imp-{i}"}) for i in range(count)]
    jsonl = folder / "import.jsonl"
    jsonl.write_text("\n".join(lines) + "\n", encoding="utf-8")
    workspace = folder / "workspace"
    for n in range(max(4, count // 100)):
        note = "\n\n".join(f"## Entry {k}\n\n{text(f'ws{n}', k)}" for k in range(40))
        (workspace / "memory").mkdir(parents=True, exist_ok=True)
        (workspace / "memory" / f"day-{n:03d}.md").write_text(note, encoding="utf-8")
    seeded = run.location(backend, "seeded")
    with engine(seeded) as filled:
        filled.add_many(memories("seed", count))
    source = run.location("sqlite", "migrate-source")
    with engine(source) as filled:
        filled.add_many(memories("mig", count))

    def add(run: Run, db: str, ack: Path) -> subprocess.Popen[bytes]:
        return _popen(run, [sys.executable, "-c", ADD_WORKER, db, str(ack), "add", str(count),
                            "100", SCRIPTS])  # fmt: skip

    def import_(run: Run, db: str, ack: Path) -> subprocess.Popen[bytes]:
        return _popen(run, [*recalld_command(), "--db", db, "import", str(jsonl)])

    def index(run: Run, db: str, ack: Path) -> subprocess.Popen[bytes]:
        return _popen(run, [*recalld_command(), "--db", db, "index", str(workspace)])

    def reindex(run: Run, db: str, ack: Path) -> subprocess.Popen[bytes]:
        return _popen(run, [sys.executable, "-c", REINDEX_WORKER, db])

    def migrate(run: Run, db: str, ack: Path) -> subprocess.Popen[bytes]:
        return _popen(run, [*recalld_command(), "migrate", source, db])

    return {
        "add_many": (Operation("add_many", add, count), empty),
        "import": (Operation("import", import_, count), empty),
        "index": (Operation("index", index, -1), empty),
        "reindex": (Operation("reindex", reindex, count), seeded),
        "migrate": (Operation("migrate", migrate, count), empty),
    }


def _state(db: str, backend: str, ack: Path) -> tuple[list[str], dict[str, object]]:
    """What is wrong with the store after a kill (empty: nothing), and its figures."""
    wrong: list[str] = []
    if backend == "sqlite" and Path(db).exists():
        with sqlite3.connect(db) as conn:
            verdict = conn.execute("PRAGMA integrity_check").fetchone()[0]
        if verdict != "ok":
            wrong.append(f"integrity_check: {verdict}")
    with engine(db) as opened:
        stats = opened.status().store
        stored = stats.memories + stats.forgotten
        if stored != stats.with_vectors:
            wrong.append(f"half-written: {stored} memories, {stats.with_vectors} with vectors")
        acked = [line for line in ack.read_text().split("\n") if line] if ack.exists() else []
        if acked:
            found = {m.id for m in opened.store.get_many(acked)}
            lost = [i for i in acked if i not in found]
            if lost:
                wrong.append(f"{len(lost)} acknowledged writes lost (first {lost[0]})")
        files = opened.store.source_files() if hasattr(opened.store, "source_files") else []
        for f in files:
            if f.status == "indexed" and f.chunks == 0:
                wrong.append(f"{f.path} marked indexed without chunks")
    figures = {"memories": stored, "unfinished": stats.unfinished_migration,
               "fingerprint": (stats.fingerprint or "")[:60], "files": len(files)}  # fmt: skip
    return wrong, figures


def _finished(db: str, op: Operation, reference: dict[str, object] | None) -> list[str]:
    """What is wrong with the store after the operation ran again to its end."""
    wrong: list[str] = []
    with engine(db) as opened:
        stats = opened.status().store
        if op.expected >= 0 and stats.memories != op.expected:
            wrong.append(f"{stats.memories} memories after the re-run, not {op.expected}")
        if stats.memories + stats.forgotten != stats.with_vectors:
            wrong.append("memories without vectors after the re-run")
        if stats.unfinished_migration:
            wrong.append("still marked unfinished after the re-run")
        if op.name == "reindex" and "fake-other" not in (stats.fingerprint or ""):
            wrong.append("the re-run reindex did not switch embedders")
        copied = checksum(opened.store, "default")[0] if op.name == "migrate" else None
        if reference is not None and copied is not None and copied != reference["checksum"]:
            wrong.append("the migrated copy's checksum differs from the source's")
        if op.name == "index":
            files = opened.store.source_files()  # type: ignore[attr-defined]
            pending = [f.path for f in files if f.status != "indexed"]
            if pending or (reference and stats.memories != reference["memories"]):
                wrong.append(f"index incomplete: {len(pending)} files not indexed, "
                             f"{stats.memories} chunks")  # fmt: skip
    return wrong


def kill_trials(run: Run, trials: int, count: int) -> None:
    """``trials`` seeded SIGKILLs per operation and backend, at a uniform moment of the
    operation's own (measured) duration."""
    rng = random.Random(run.seed)
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "import recalld.interfaces.cli, recalld.stores"],
                   env=cli_env(run), check=True)  # fmt: skip
    startup = time.monotonic() - started  # a kill before it only ever meets imports
    for backend in run.backends:
        operations = _operations(run, backend, count)
        for name, (op, seed) in operations.items():
            check = run.check(f"SIGKILL during {name}", backend)
            durations = run.check(f"re-run after a kill completes: {name}", backend)
            reference_db = run.copy_of(backend, seed)
            started = time.monotonic()
            process = op.start(run, reference_db, run.folder / "reference.ack")
            _, err = process.communicate(timeout=600)
            took = time.monotonic() - started
            if process.returncode != 0:
                check.attempt(False, f"the uninterrupted run failed: {err.decode()[-300:]}")
                continue
            reference: dict[str, object] = {}
            with engine(reference_db) as opened:
                reference["memories"] = opened.status().store.memories
                if name == "migrate":
                    reference["checksum"] = checksum(opened.store, "default")[0]
            run.say(f"{backend} {name}: one uninterrupted run takes {took:.1f} s")
            midway = 0
            for trial in range(trials):
                db = run.copy_of(backend, seed)
                ack = run.folder / f"{backend}-{name}-{trial}.ack"
                # Within the uninterrupted run's own time (a loaded machine's runs vary:
                # a kill that comes after the end is counted apart, not as mid-operation).
                delay = rng.uniform(min(startup, took / 2), 0.9 * took)
                process = op.start(run, db, ack)
                time.sleep(delay)
                killed = process.poll() is None
                process.send_signal(signal.SIGKILL)
                process.communicate(timeout=60)
                wrong, figures = _state(db, backend, ack)
                check.attempt(not wrong, f"trial {trial} (kill at {delay:.2f} s): {wrong}")
                midway += killed
                again_started = time.monotonic()
                again = op.start(run, db, ack)
                _, err = again.communicate(timeout=600)
                again_took = time.monotonic() - again_started
                problems = [err.decode()[-300:]] if again.returncode != 0 else _finished(
                    db, op, reference)  # fmt: skip
                durations.attempt(not problems, f"trial {trial}: {problems}")
                durations.observe(again_took, f"re-run {again_took:.1f} s")
                partial = 0 < int(figures["memories"]) < max(op.expected, 1)  # type: ignore[call-overload]
                if partial or figures["unfinished"]:
                    left = figures["memories"]
                    marked = ", marked unfinished" if figures["unfinished"] else ""
                    check.observe(delay, f"a kill at {delay:.2f} s left {left} memories{marked}")
            check.worst = (f"{midway} of {trials} kills mid-operation"
                           f"{'; ' + check.worst if check.worst else ''}")  # fmt: skip
            run.say(f"{backend} {name}: {check.attempts} kills ({midway} mid-operation), "
                    f"{check.failures} failures")  # fmt: skip


def writers_and_readers(run: Run, writers: int, readers: int, per_writer: int) -> None:
    """``writers`` processes adding (cache on) and ``readers`` searching one store at once."""
    for backend in run.backends:
        check = run.check(f"{writers} writer + {readers} reader processes", backend)
        db = run.location(backend, "concurrent")
        engine(db).close()
        started = time.monotonic()
        acks = [run.folder / f"{backend}-writer-{n}.ack" for n in range(writers)]
        procs = [_popen(run, [sys.executable, "-c", ADD_WORKER, db, str(acks[n]), f"w{n}",
                              str(per_writer), "20", SCRIPTS]) for n in range(writers)]  # fmt: skip
        stop = run.folder / f"{backend}-stop-reading"
        reading = [_popen(run, [sys.executable, "-c", READ_WORKER, db, str(stop)])
                   for _ in range(readers)]  # fmt: skip
        for process in [*procs, *reading]:
            if process is reading[0]:
                stop.touch()  # the writers are done: the readers stop after their next read
            _, err = process.communicate(timeout=600)
            check.attempt(process.returncode == 0, err.decode()[-300:])
        with engine(db) as opened:
            for ack in acks:
                ids = [line for line in ack.read_text().split("\n") if line]
                found = {m.id for m in opened.store.get_many(ids)}
                check.attempt(len(found) == len(ids) == per_writer,
                              f"{ack.name}: {len(found)} of {len(ids)} acknowledged")  # fmt: skip
            stats = opened.status().store
            whole = stats.memories == stats.with_vectors == writers * per_writer
            check.attempt(whole, f"{stats.memories} memories, {stats.with_vectors} vectors")
        took = time.monotonic() - started
        check.observe(took, f"{writers * per_writer} adds in {took:.1f} s")
        run.say(f"{backend}: writers and readers: {check.failures} failures")
