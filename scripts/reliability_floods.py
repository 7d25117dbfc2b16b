"""The reliability run against the server's own resources: a flood of idle and half-sent
connections, a foreign listener on the port the shell's discovery advertises, and the cost
of the largest request the server accepts (with the sizes just over each cap refused)."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import subprocess
import threading
import time
from urllib.parse import urlsplit

import httpx
from reliability_common import Check, Run, cli_env, engine, memories, recalld_command, serve

from recalld.bench.floods import closed_by_server, healthz, open_connections
from recalld.interfaces import discovery, local_server
from recalld.interfaces.connections import HEADER_TIMEOUT_S
from recalld.request_limits import (
    MAX_EMBED_CHARS,
    MAX_EMBED_CONTEXT_CHARS,
    MAX_METADATA_BYTES,
    MAX_RESPONSE_BYTES,
    MAX_TAGS,
    MAX_WINDOWS,
)

FLOOD = 2000
HEALTHZ_WITHIN_S = 1.0


# -- connection floods -----------------------------------------------------------------------


def connection_flood(run: Run) -> None:
    """2,000 connections, half silent and half stopped inside a request head: the server
    answers ``/healthz`` within a second meanwhile, and closes them after the head time."""
    check = run.check(f"floods: {FLOOD} idle and half-sent connections, /healthz within "
                      f"{HEALTHZ_WITHIN_S:g} s", "sqlite")  # fmt: skip
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = FLOOD + 256
    if hard != resource.RLIM_INFINITY and hard < wanted:
        check.attempt(False, f"the run needs {wanted} descriptors; the hard limit is {hard}")
        return
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    db = run.location("sqlite", "flood")
    with engine(db) as seeded:
        seeded.add_many(memories("flood", 20))
    try:
        with serve(run, db) as url:
            _flood(run, check, urlsplit(url).port or 0)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    run.say(f"connection flood: {check.failures} failures")


def _flood(run: Run, check: Check, port: int) -> None:
    for round_ in range(1 if run.quick else 3):
        held = open_connections(port, FLOOD)
        try:
            started = time.monotonic()
            answer = healthz(port)
            took = time.monotonic() - started
            check.attempt(answer.startswith(b"HTTP/1.1 200") and took < HEALTHZ_WITHIN_S,
                          f"round {round_}: /healthz {answer[:20]!r} in {took:.2f} s")  # fmt: skip
            check.observe(took, f"/healthz in {took * 1000:.0f} ms beside {len(held)} "
                          "connections")  # fmt: skip
            time.sleep(HEADER_TIMEOUT_S + 1.5)
            still = [c for c in held[-100:] if not closed_by_server(c)]
            check.attempt(not still, f"round {round_}: {len(still)} of the last 100 idle "
                          f"connections still open after {HEADER_TIMEOUT_S + 1.5:g} s")  # fmt: skip
        finally:
            for connection in held:
                connection.close()


# -- discovery capture -----------------------------------------------------------------------


class _Listener:
    """Another user's listener: keeps every byte and answers each request with a forged 200."""

    def __init__(self, port: int) -> None:
        self.received = b""
        self.server = socket.create_server(("127.0.0.1", port))
        self.server.settimeout(0.2)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        forged = json.dumps({"proof": "0" * 64, "hits": [], "store": {}}).encode()
        reply = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(forged), forged)
        while not self.stop.is_set():
            try:
                connection, _ = self.server.accept()
            except TimeoutError:
                continue
            with connection:
                connection.settimeout(1.0)
                with contextlib.suppress(OSError):
                    while chunk := connection.recv(65536):
                        self.received += chunk
                        connection.sendall(reply)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.server.close()


def discovery_capture(run: Run) -> None:
    """A foreign listener on the port a discovery record advertises (as after the server
    stopped and another user bound it): the shell's add and search send it nothing of the
    request, and run in-process with the right answer."""
    check = run.check("discovery: a foreign listener on the advertised port receives nothing",
                      "sqlite")  # fmt: skip
    runtime = run.folder / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    db = run.location("sqlite", "discovery")
    env = cli_env(run, RECALLD_DB=db, XDG_RUNTIME_DIR=str(runtime))
    settings = local_server.search_settings({}, environ=env)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    listener = _Listener(port)
    secret = "PIN 9321"
    mine = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = str(runtime)  # where this process writes the record
    try:
        with discovery.advertise(settings, "127.0.0.1", port, discovery.new_secret()) as path:
            check.attempt(path is not None and path.stat().st_mode & 0o077 == 0,
                          "the discovery file is readable by others")  # fmt: skip
            for argv in (["add", f"my new {secret}"], ["--json", "search", "what is my PIN"]):
                done = subprocess.run([*recalld_command(), *argv], env=env, text=True,
                                      capture_output=True, timeout=300)  # fmt: skip
                check.attempt(done.returncode == 0, f"{argv[0]}: exit {done.returncode} "
                              f"{done.stderr[-200:]}")  # fmt: skip
            check.attempt(secret in done.stdout, "the search's answer was forged or empty")
    finally:
        listener.close()
        if mine is None:
            os.environ.pop("XDG_RUNTIME_DIR", None)
        else:
            os.environ["XDG_RUNTIME_DIR"] = mine
    check.attempt(bool(listener.received), "the shell never dialled the advertised port")
    leaked = secret.encode() in listener.received or b"what is my" in listener.received
    check.attempt(not leaked, f"the listener received the request: {listener.received[:200]!r}")
    check.observe(len(listener.received), f"the listener received {len(listener.received)} "
                  "bytes, challenges only")  # fmt: skip
    run.say(f"discovery capture: {check.failures} failures")


# -- the cost of the largest accepted request ------------------------------------------------


def largest_request(run: Run) -> None:
    """The largest add the caps accept (characters to embed at the limit, every field at
    its cap) is stored; a search of 1,000 hits over it answers under the answer limit; one
    step over each cap is a 422 and stores nothing."""
    check = run.check("costs: the largest accepted request, and one over each cap", "sqlite")
    db = run.location("sqlite", "costs")
    per = (MAX_EMBED_CHARS - 10 * MAX_EMBED_CONTEXT_CHARS) // 10
    memory = {"content": "w " * (per // 2), "embed_context": "c" * MAX_EMBED_CONTEXT_CHARS,
              "tags": [f"t{i}" for i in range(MAX_TAGS)],
              "metadata": {"note": "m" * (MAX_METADATA_BYTES - 100)}}  # fmt: skip
    with serve(run, db) as url, httpx.Client(base_url=url, timeout=600) as http:
        started = time.monotonic()
        batch = [{**memory, "content": f"{i} {memory['content']}"[:per]} for i in range(10)]
        added = http.post("/v1/memories", json={"memories": batch})
        took = time.monotonic() - started
        check.attempt(added.status_code == 201, f"largest add: {added.status_code} "
                      f"{added.text[:200]}")  # fmt: skip
        check.observe(took, f"{MAX_EMBED_CHARS:,} characters (at most {MAX_WINDOWS:,} model "
                      f"windows) added in {took:.1f} s (fake embedder)")  # fmt: skip
        for i in range(0, 200, 10):
            http.post("/v1/memories", json={"memories": [{**memory, "content": f"{j} w w"}
                                                          for j in range(i, i + 10)]})  # fmt: skip
        found = http.post("/v1/search", json={"query": "w", "limit": 1000})
        size = len(found.content)
        check.attempt(found.status_code in (200, 422) and size <= MAX_RESPONSE_BYTES + 1000,
                      f"search of 1000: {found.status_code}, {size:,} bytes")  # fmt: skip
        before = http.get("/v1/status").json()["store"]["memories"]
        for label, body in _over_each_cap(memory, per):
            answer = http.post("/v1/memories", json=body)
            check.attempt(answer.status_code == 422, f"{label}: {answer.status_code}")
        after = http.get("/v1/status").json()["store"]["memories"]
        check.attempt(after == before, f"refused adds stored {after - before} memories")
    run.say(f"largest request: {check.failures} failures")


def _over_each_cap(memory: dict[str, object], per: int) -> list[tuple[str, dict[str, object]]]:
    one = {"content": "x"}
    return [
        ("characters to embed + 1", {"memories": [{**memory, "content": "w" * per}] * 10
                                     + [{"content": "w"}]}),
        ("embed_context + 1", {**one, "embed_context": "c" * (MAX_EMBED_CONTEXT_CHARS + 1)}),
        ("tags + 1", {**one, "tags": [f"t{i}" for i in range(MAX_TAGS + 1)]}),
        ("metadata + 1 byte", {**one, "metadata": {"m": "m" * MAX_METADATA_BYTES}}),
        ("session id 513", {**one, "session_id": "s" * 513}),
    ]  # fmt: skip
