"""``recalld bench scale``: build synthetic stores of growing size and time searches on them.

For each size: build time (inserting through ``SQLiteStore.insert`` with precomputed
vectors, in :data:`~recalld.bench.scale_corpus.BLOCK`-row transactions), file size, the
first search of a new process (loading vectors, building or loading the ANN index; then
again once the index is saved), p50/p95
latency of ``vector`` and ``hybrid`` searches through the facade with the query embedded
by the real model inside each timed call, the same queries through plain FTS5 and plain
exact numpy cosine as floors, and peak memory of the build and of the search process.
Then load: ``recalld serve`` on the store, N client threads searching at once for a fixed
time (:mod:`recalld.bench.load`; searches only, so the store stays as built), searches/s
and p50/p95/p99 at each client count; then, at the most clients, the highest rate of searches
the server holds with p99 within ``p99_ms`` (:func:`recalld.bench.load.capacity`).
How the corpus is made: :mod:`recalld.bench.scale_corpus`.

With ``postgres`` (an admin DSN), every size is also built and searched on PostgreSQL, in
one database per size on that server (``recalld_scale_<size>``), through
``PostgresStore.insert`` and the same facade calls: the two backends side by side in one
run, under the same load. The admin builds; the searches and the load connect as
``postgres_role`` (the application's role by default), as a user's server does.
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import queue
import shutil
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from recalld.bench import scale_corpus as sc
from recalld.bench.report import embedder_record
from recalld.bench.scale_postgres import APP_ROLE
from recalld.errors import InvalidInputError, RecalldError
from recalld.providers.embedders import resolve_embedder
from recalld.stores.sqlite.vector_index import ann_available
from recalld.stores.sqlite.vectors import ANN_MIN_ROWS

DEFAULT_SIZES = (10_000, 100_000, 1_000_000)
BACKENDS = ("sqlite", "postgres")
FIDELITY_SAMPLE = 200
"""Synthetic memories whose real embedding is compared with their derived vector."""
CHILD_POLL_S = 0.5

Progress = Callable[[str, int, int], None]
"""``progress(phase, done, total)``; ``total`` 0 means the phase has no count."""


class ScaleBenchError(RecalldError):
    """A benchmark child process failed."""


@dataclass(frozen=True)
class ScaleOptions:
    """What to run; every field has the CLI's default."""

    sizes: tuple[int, ...] = DEFAULT_SIZES
    queries: int = 50
    workdir: Path = Path("scale-bench")
    embedder: str = "local"
    pool_size: int = 3000
    seed: int = 7
    limit: int = 10
    rebuild: bool = False
    """Rebuild stores that a previous run left in ``workdir`` for the same corpus."""
    backends: tuple[str, ...] = ("sqlite",)
    """Which backends to build and search at every size (``sqlite``, ``postgres``)."""
    clients: tuple[int, ...] = (8, 32)
    """Client counts of the load through ``recalld serve``; none skips it."""
    workers: tuple[int, ...] = (1,)
    """Worker processes of ``recalld serve`` (``--workers``): one server per count on the
    same store, their load runs taking turns."""
    load_rounds: int = 1
    """How many times every client count runs on every worker count, in turns."""
    load_seconds: float = 10.0
    """How long each client count runs."""
    p99_ms: float = 150.0
    """The p99 target of the capacity search at the most clients (0 skips it)."""
    capacity_steps: int = 4
    """Tries of the capacity search, ``load_seconds`` each."""
    postgres: str | None = None
    """Admin DSN of the PostgreSQL server that holds one database per size (a role that
    may create databases); needed when ``backends`` names ``postgres``."""
    postgres_role: str = APP_ROLE
    """The role PostgreSQL's searches and load connect as: by default the application's,
    which a user's server connects as and the tenant wall binds (created and granted the
    tables when missing); empty for the admin DSN's own user. Building stays the admin's."""


@dataclass(frozen=True)
class SizeResult:
    """Everything measured at one corpus size (latencies in ms: p50, p95, mean)."""

    size: int
    build: dict[str, Any]
    index: dict[str, Any]
    search: dict[str, Any]
    file_bytes: int
    index_bytes: int
    ann: bool
    reused_build: bool
    backend: str = "sqlite"
    load: tuple[dict[str, Any], ...] = ()
    """One row per worker count and client count: searches/s, p50/p95/p99 ms, errors, the
    server's CPU ms a search (:func:`recalld.bench.load.measure`), ``workers``."""
    capacity: tuple[dict[str, Any], ...] = ()
    """Per worker count, the highest rate held within the p99 target at the most clients,
    with every try (:func:`recalld.bench.load.capacity`) and ``workers``."""
    words_bytes: int = 0
    """The word index beside the store (``<db>.words``, SQLite past its threshold)."""
    searched_as: dict[str, Any] = field(default_factory=dict)
    """PostgreSQL: the role the searches ran as (``current_user`` seen from the store's
    connection) and whether Row-Level Security bound it (``row_security``)."""


@dataclass(frozen=True)
class ScaleReport:
    """A whole run: options, corpus facts, machine, and one result per size."""

    options: dict[str, Any]
    corpus: dict[str, Any]
    machine: dict[str, Any]
    results: tuple[SizeResult, ...] = field(default_factory=tuple)
    embedder: dict[str, Any] = field(default_factory=dict)
    """The embedder's setting and fingerprint (:func:`recalld.bench.report.embedder_record`)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_scale(
    options: ScaleOptions, source: sc.SourceText, progress: Progress | None = None
) -> ScaleReport:
    """Run the benchmark at every size of ``options``; returns the report.

    Raises:
        InvalidInputError: for sizes the pool cannot make, or too few questions.
        ScaleBenchError: when a build or search process fails.
    """
    _validate(options, source)
    note = progress or (lambda phase, done, total: None)
    options.workdir.mkdir(parents=True, exist_ok=True)
    note("embedding the snippet pool", 0, 0)
    embedder = resolve_embedder(options.embedder)
    pool = sc.build_pool(
        sc.snippets(source.turns), options.pool_size, options.seed, embedder, options.workdir
    )
    if max(options.sizes) > sc.max_size(pool):
        raise InvalidInputError(
            f"a pool of {options.pool_size} snippets makes at most "
            f"{sc.max_size(pool)} memories; raise --pool"
        )
    pool_path = options.workdir / "pool.npz"
    pool.save(pool_path)
    rng = np.random.default_rng(options.seed)
    picked = rng.choice(len(source.questions), options.queries, replace=False)
    questions = [source.questions[i] for i in sorted(picked)]
    corpus = {
        "turns": len(source.turns),
        "pool": len(pool.texts),
        "questions": len(questions),
        "fidelity": sc.fidelity(pool, embedder, FIDELITY_SAMPLE, options.seed),
    }
    machine = _machine()
    results = tuple(
        _one_size(options, size, pool, pool_path, questions, note)
        if backend == "sqlite"
        else _one_size_postgres(options, size, pool, pool_path, questions, note)
        for size in sorted(options.sizes)
        for backend in options.backends
    )
    machine["load_after"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    opts = {
        **asdict(options),
        "workdir": str(options.workdir),
        "postgres": _redacted(options.postgres),
    }
    return ScaleReport(opts, corpus, machine, results, embedder_record(embedder, options.embedder))


def _validate(options: ScaleOptions, source: sc.SourceText) -> None:
    if not options.sizes or min(options.sizes) < 1:
        raise InvalidInputError("sizes must be positive integers")
    if not 1 <= options.queries <= len(source.questions):
        raise InvalidInputError(f"--queries must be 1 to {len(source.questions)}")
    if any(c < 1 for c in options.clients) or options.load_seconds <= 0:
        raise InvalidInputError(
            "--clients takes positive counts and --load-seconds a positive time"
        )
    if options.p99_ms < 0 or options.capacity_steps < 1:
        raise InvalidInputError("--p99-ms takes a time in ms (0 skips the capacity search)")
    if options.pool_size < 2:
        raise InvalidInputError("the pool needs at least 2 snippets")
    unknown = set(options.backends) - set(BACKENDS)
    if unknown or not options.backends:
        raise InvalidInputError(
            f"--backends takes {', '.join(BACKENDS)}, not {', '.join(sorted(unknown)) or 'nothing'}"
        )
    if "postgres" in options.backends and not options.postgres:
        raise InvalidInputError(
            "the postgres backend needs --postgres DSN (an admin DSN; "
            "`recalld postgres start` prints one)"
        )


def _machine() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_before": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }


def _one_size(
    options: ScaleOptions,
    size: int,
    pool: sc.Pool,
    pool_path: Path,
    questions: list[str],
    note: Progress,
) -> SizeResult:
    db = options.workdir / f"scale-{size}.db"
    marker = options.workdir / f"scale-{size}.build.json"
    stamp = f"{pool.digest}-{options.seed}-{size}"
    reused = False
    if not options.rebuild and marker.is_file() and db.is_file():
        saved = _read_marker(marker)
        reused = saved.get("stamp") == stamp
    if reused:
        build = saved["build"]
    else:
        _remove_store(db)
        build = _child(
            "build", note, db=str(db), pool_path=str(pool_path), size=size, seed=options.seed
        )
        _write_marker(marker, {"stamp": stamp, "build": build})
    indexed = _child("index", note, db=str(db), pool_path=str(pool_path))
    searched = _child(
        "search",
        note,
        db=str(db),
        embedder=options.embedder,
        questions=questions,
        limit=options.limit,
    )
    loaded, capacity = _load(options, str(db), f"sqlite-{size}", questions, note)
    return SizeResult(
        size=size,
        build=build,
        index=indexed,
        search=searched,
        file_bytes=_size(db, "", "-wal"),
        index_bytes=_tree_size(Path(f"{db}.ann")),
        words_bytes=_tree_size(Path(f"{db}.words")),
        ann=size >= ANN_MIN_ROWS and ann_available(),
        reused_build=reused,
        load=loaded,
        capacity=capacity,
    )


def _one_size_postgres(
    options: ScaleOptions,
    size: int,
    pool: sc.Pool,
    pool_path: Path,
    questions: list[str],
    note: Progress,
) -> SizeResult:
    """The same three steps on PostgreSQL, in the database ``recalld_scale_<size>``."""
    from recalld.bench import scale_postgres as sp

    assert options.postgres is not None
    name = f"recalld_scale_{size}"
    dsn = sp.database_dsn(options.postgres, name)
    marker = options.workdir / f"scale-pg-{size}.build.json"
    stamp = f"{pool.digest}-{options.seed}-{size}"
    reused = False
    if not options.rebuild and marker.is_file() and sp.exists(options.postgres, name):
        saved = _read_marker(marker)
        reused = saved.get("stamp") == stamp
    if reused:
        build = saved["build"]
    else:
        sp.recreate(options.postgres, name)
        build = _child(
            "build", note, db=dsn, pool_path=str(pool_path), size=size, seed=options.seed
        )
        _write_marker(marker, {"stamp": stamp, "build": build})
    indexed = _child("index", note, db=dsn, pool_path=str(pool_path))
    searcher = sp.role_dsn(options.postgres, name, options.postgres_role)
    searched = _child(
        "search",
        note,
        db=searcher,
        embedder=options.embedder,
        questions=questions,
        limit=options.limit,
        floor_db=dsn,
    )
    loaded, capacity = _load(options, searcher, f"postgres-{size}", questions, note)
    table, index = sp.sizes(dsn)
    return SizeResult(
        size=size,
        build=build,
        index=indexed,
        search=searched,
        file_bytes=table,
        index_bytes=index,
        ann=True,
        reused_build=reused,
        backend="postgres",
        load=loaded,
        capacity=capacity,
        searched_as=searched.pop("searched_as", {}),
    )


def _load(
    options: ScaleOptions, db: str, name: str, questions: list[str], note: Progress
) -> tuple[tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]]:
    """Searches through ``recalld serve`` on the store at each client count of ``options``
    and each worker count (in turns, ``load_rounds`` times), then the capacity search at the
    most clients for each worker count."""
    from recalld.bench import load

    if not options.clients:
        return (), ()
    note(f"starting recalld serve for the load ({name})", 0, 0)
    env = load.server_env(
        db,
        options.embedder,
        options.workdir,
        RECALLD_CACHE_DIR=str(options.workdir / "serve-cache"),
    )
    rows: list[dict[str, Any]] = []
    found: list[dict[str, Any]] = []
    with ExitStack() as stack:
        # One server per worker count, all up at once: their runs take turns, so that a
        # change in the machine's load falls on every count alike.
        urls = {
            workers: stack.enter_context(
                load.served(env, options.workdir / f"serve-{name}-w{workers}.log", workers)
            )
            for workers in options.workers
        }
        for workers, url in urls.items():
            load.warm(url, questions, workers=workers)
        for turn in range(1, options.load_rounds + 1):
            for done, clients in enumerate(options.clients):
                for workers, url in urls.items():
                    note(
                        f"load: {clients} clients for {options.load_seconds:g} s, {workers} "
                        f"worker(s), round {turn} ({name})",
                        done,
                        len(options.clients),
                    )
                    row = load.measure(
                        url, clients, options.load_seconds, questions, limit=options.limit
                    )  # searches only: the store stays as built
                    rows.append({**row, "workers": workers, "round": turn})
        for workers, url in urls.items() if options.p99_ms else ():
            top = max(
                (r for r in rows if r["workers"] == workers),
                key=lambda r: (r["clients"], r["searches_per_s"]),
            )
            note(
                f"load: the rate {top['clients']} clients hold within p99 "
                f"{options.p99_ms:g} ms, {workers} worker(s) ({name})",
                0,
                0,
            )
            held = load.capacity(
                url,
                top["clients"],
                options.load_seconds,
                questions,
                options.p99_ms,
                top["searches_per_s"],
                options.capacity_steps,
                limit=options.limit,
            )
            found.append({**held, "workers": workers})
    return tuple(rows), tuple(found)


def _redacted(dsn: str | None) -> str | None:
    """A DSN without its password, for the report."""
    if dsn is None:
        return None
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(dsn)
    if parts.password is None:
        return dsn
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


def _child(target: str, note: Progress, **kwargs: Any) -> dict[str, Any]:
    """Run a worker in a fresh process, relaying its progress; returns its result."""
    from recalld.bench.scale_worker import run_child

    context = multiprocessing.get_context("spawn")
    channel: Any = context.Queue()
    process = context.Process(target=run_child, args=(target, channel, kwargs), daemon=True)
    process.start()
    phase, done, total = target, 0, 0
    try:
        while True:
            try:
                kind, value = channel.get(timeout=CHILD_POLL_S)
            except queue.Empty:
                if not process.is_alive():
                    raise ScaleBenchError(
                        f"the {target} process died (exit code {process.exitcode}); "
                        "out of memory? try smaller --sizes"
                    ) from None
                continue
            if kind == "done":
                return dict(value)
            if kind == "error":
                raise ScaleBenchError(f"the {target} process failed:\n{value}")
            if kind == "phase":
                phase, done, total = str(value), 0, 0
            elif kind == "total":
                total = int(value)
            elif kind == "advance":
                done += int(value)
            note(phase, done, total)
    finally:
        process.join(timeout=60)
        if process.is_alive():
            process.terminate()


def _remove_store(db: Path) -> None:
    for suffix in ("", "-wal", "-shm", ".words.lock"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    shutil.rmtree(f"{db}.ann", ignore_errors=True)
    shutil.rmtree(f"{db}.words", ignore_errors=True)


def _size(db: Path, *suffixes: str) -> int:
    return sum(Path(f"{db}{s}").stat().st_size for s in suffixes if Path(f"{db}{s}").exists())


def _tree_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*") if p.is_file()) if folder.is_dir() else 0


def _read_marker(path: Path) -> dict[str, Any]:
    import json

    try:
        loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return loaded
    except (OSError, ValueError):
        return {}


def _write_marker(path: Path, value: dict[str, Any]) -> None:
    import json

    path.write_text(json.dumps(value, indent=2), encoding="utf-8")


def parse_sizes(text: str) -> tuple[int, ...]:
    """``"10000,100k,1M"`` -> ``(10000, 100000, 1000000)``."""
    sizes = []
    for part in text.split(","):
        word = part.strip().lower().replace("_", "")
        scale = {"k": 1_000, "m": 1_000_000}.get(word[-1:], 1)
        digits = word[:-1] if scale > 1 else word
        if not digits.isdigit() or int(digits) * scale < 1:
            raise InvalidInputError(f"not a corpus size: {part!r} (use e.g. 10000,100k,1M)")
        sizes.append(int(digits) * scale)
    return tuple(dict.fromkeys(sizes))


def parse_workers(text: str) -> tuple[int, ...]:
    """``"1,2"`` -> ``(1, 2)``: the worker counts of ``recalld serve`` under load."""
    counts = []
    for part in filter(str.strip, text.split(",")):
        if not part.strip().isdigit() or int(part) < 1:
            raise InvalidInputError(f"not a worker count: {part!r} (use e.g. 1,2)")
        counts.append(int(part))
    return tuple(dict.fromkeys(counts)) or (1,)


def parse_clients(text: str) -> tuple[int, ...]:
    """``"8,32"`` -> ``(8, 32)``; ``"0"`` or ``""`` -> no load."""
    counts = []
    for part in filter(str.strip, text.split(",")):
        if not part.strip().isdigit():
            raise InvalidInputError(f"not a client count: {part!r} (use e.g. 8,32, or 0)")
        counts.append(int(part))
    return tuple(c for c in dict.fromkeys(counts) if c > 0)


def growth(results: Sequence[SizeResult], key: str) -> list[float]:
    """Latency (p50) ratio from each size to the next, per 10x more memories (give the
    results of one backend)."""
    out = []
    for small, big in zip(results, results[1:], strict=False):
        ratio = big.search[key]["p50_ms"] / max(small.search[key]["p50_ms"], 1e-9)
        out.append(ratio ** (1 / np.log10(big.size / small.size)))
    return out
