"""How the shell finds a running local ``recalld serve`` and knows it is that server.

``recalld serve`` on a loopback address writes a discovery record (its address as bound,
port, process id, the store, and a random secret made for this run) to a file only the
user can read, in a folder only the user can enter. The shell trusts an answer only from a
server that proves it knows the secret: on each connection it first sends a fresh random
challenge, and goes on (sending the secret as ``X-Recalld-Local`` and then its request) only
when the answer is the challenge's HMAC under the secret. Another local user who binds the
advertised port (after the server stopped, or on another loopback address) receives a
challenge and nothing else.

Cheap to import: the standard library only.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HELLO_PATH = "/v1/local/hello"
"""The server's answer to a challenge: ``GET HELLO_PATH?challenge=HEX``."""
SECRET_HEADER = "X-Recalld-Local"
"""The header the shell sends its requests with, once the server proved the secret."""
SECRET_BYTES = 32
CHALLENGE_BYTES = 16


@dataclass(frozen=True)
class Record:
    """A running server as its discovery file describes it."""

    host: str
    port: int
    pid: int
    store: str
    secret: str


def runtime_dir() -> Path:
    """Where discovery files live: ``$XDG_RUNTIME_DIR/recalld``, or a private folder in the
    temporary directory when the system offers no runtime folder."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "recalld"
    return Path(tempfile.gettempdir()) / f"recalld-{os.getuid()}"


def private(path: Path, mode: int = 0o077) -> bool:
    """Whether ``path`` is this user's and grants others none of ``mode``: a file another
    user could read leaks the secret, one they could write (or a folder they made in /tmp
    first) could point the shell at their server."""
    info = path.stat()
    return info.st_uid == os.getuid() and not info.st_mode & mode


def discovery_file(settings: Mapping[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:24]
    return runtime_dir() / f"server-{digest}.json"


def proof(secret: str, challenge: str) -> str:
    """What a server that knows ``secret`` answers to ``challenge``."""
    return hmac.new(secret.encode("ascii"), challenge.encode("ascii"), hashlib.sha256).hexdigest()


def new_secret() -> str:
    return os.urandom(SECRET_BYTES).hex()


def new_challenge() -> str:
    return os.urandom(CHALLENGE_BYTES).hex()


@contextlib.contextmanager
def advertise(
    settings: Mapping[str, Any], host: str, port: int, secret: str
) -> Iterator[Path | None]:
    """Write the discovery file of a server on ``host``:``port`` knowing ``secret`` while the
    block runs (None when it could not be written privately); removed on the way out."""
    path = discovery_file(settings)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not private(path.parent):
            raise PermissionError(f"{path.parent} is not this user's private folder")
        record = {
            "host": host,
            "port": port,
            "pid": os.getpid(),
            "store": settings["db"],
            "tenant": settings.get("tenant", "default"),
            "secret": secret,
        }
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            os.fchmod(out.fileno(), 0o600)
            out.write(json.dumps(record))
        temporary.replace(path)
        written = path.stat().st_ino
    except OSError:
        yield None
        return
    try:
        yield path
    finally:
        # Compared by inode, which needs no descriptor: a server leaving because it ran out
        # of them still removes its own file (and never another server's newer one).
        with contextlib.suppress(OSError):
            if path.stat().st_ino == written:
                path.unlink()


def read(settings: Mapping[str, Any]) -> Record | None:
    """The record of a live server advertised for these settings, if its file is private."""
    try:
        path = discovery_file(settings)
        if not (private(path.parent) and private(path)):
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
        record = Record(
            str(data["host"]),
            int(data["port"]),
            int(data["pid"]),
            str(data["store"]),
            str(data["secret"]),
        )
        os.kill(record.pid, 0)  # a server that died without cleaning up leaves a stale file
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return record if len(record.secret) >= 2 * SECRET_BYTES else None
