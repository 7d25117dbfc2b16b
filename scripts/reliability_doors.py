"""The reliability run through the doors: HTTP clients of two tenants at once, the load
figure, the bad-input corpus (library, CLI, HTTP, MCP), the tenant, key, namespace and
symlink probes, and the limit-prefix check."""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from reliability_common import Run, engine, memories, serve, text

from recalld.bench import load
from recalld.bench.load import percentile
from recalld.errors import RecalldError
from recalld.keys import create_key

# -- HTTP clients of two tenants -----------------------------------------------------------


def http_clients(run: Run, clients: int, rounds: int) -> None:
    """``clients`` threads, half alice's key and half bob's, adding and searching through
    ``recalld serve``: no 5xx, no hang, every acknowledged add there, no cross-tenant hit."""
    for backend in run.backends:
        _http_clients(run, backend, clients, rounds)


def _http_clients(run: Run, backend: str, clients: int, rounds: int) -> None:
    check = run.check(f"HTTP: {clients} clients of 2 tenants adding and searching", backend)
    walls = run.check("HTTP: a tenant's searches show only its memories", backend)
    db = run.location(backend, "http")
    with engine(db) as root:
        keys = {name: create_key(root.store, name)[1] for name in ("alice", "bob")}
    latencies: list[float] = []
    acked: dict[str, list[str]] = {"alice": [], "bob": []}
    lock = threading.Lock()
    with serve(run, db) as url:

        def client(n: int) -> None:
            tenant = ("alice", "bob")[n % 2]
            headers = {"Authorization": f"Bearer {keys[tenant]}"}
            with httpx.Client(base_url=url, headers=headers, timeout=120) as http:
                for i in range(rounds):
                    for method, path, body in (
                        ("POST", "/v1/memories", {"content": text(f"c{n}", i),
                                                  "id": f"c{n}-{i}"}),
                        ("POST", "/v1/search", {"query": text("c", i)[:40], "limit": 5}),
                    ):  # fmt: skip
                        started = time.monotonic()
                        try:
                            answer = http.request(method, path, json=body)
                        except httpx.HTTPError as exc:
                            check.attempt(False, f"{path}: {exc!r}")
                            continue
                        took = time.monotonic() - started
                        said = f"{path}: {answer.status_code} {answer.text[:200]}"
                        with lock:
                            latencies.append(took)
                            check.attempt(answer.status_code in (200, 201), said)
                            if answer.status_code == 201:
                                acked[tenant].append(body["id"])
                            if path == "/v1/search" and answer.status_code == 200:
                                spaces = {h["memory"]["namespace"]
                                          for h in answer.json()["hits"]}  # fmt: skip
                                walls.attempt(spaces <= {tenant}, f"{tenant} saw {spaces}")

        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(client, range(clients)))
        for tenant, ids in acked.items():
            headers = {"Authorization": f"Bearer {keys[tenant]}"}
            for memory_id in ids:
                got = httpx.get(f"{url}/v1/memories/{memory_id}", headers=headers, timeout=30)
                check.attempt(got.status_code == 200, f"acknowledged {memory_id} lost")
    check.observe(percentile(latencies, 99), f"p99 {percentile(latencies, 99) * 1000:.0f} ms,"
                  f" max {max(latencies, default=0) * 1000:.0f} ms")  # fmt: skip
    run.say(f"{backend}: HTTP clients: {check.failures} failures")


# -- the load figure ------------------------------------------------------------------------


def load_figure(run: Run, size: int, seconds: float, levels: tuple[int, ...],
                p99_ms: float = 150.0, held_at: int = 32) -> None:  # fmt: skip
    """Searches/s and latency percentiles at each client count, adds mixed in (1 in 10);
    then the highest rate ``held_at`` clients on a schedule keep within ``p99_ms``."""
    rng = random.Random(run.seed)
    queries = [f"{rng.choice(text('q', i).split()[3:9])} {text('q', i).split()[5]} berth {i}"
               for i in range(200)]  # fmt: skip
    for backend in run.backends:
        db = run.location(backend, "load")
        started = time.monotonic()
        with engine(db) as filled:
            for start in range(0, size, 1000):
                filled.add_many(memories("load", min(1000, size - start), start))
        if backend == "postgres":  # fresh statistics, as a store in use has them
            import psycopg

            with psycopg.connect(db, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE")
        run.say(f"{backend}: a {size}-memory store built in {time.monotonic() - started:.0f} s")
        with serve(run, db) as url:
            load.warm(url, queries)
            for level in levels:
                run.load.append(_load_level(url, backend, size, level, seconds, queries))
                row = run.load[-1]
                run.say(f"{backend} {level} clients: {row['searches_per_s']:.0f} searches/s, "
                        f"p99 {row['p99_ms']:.0f} ms, errors {row['errors']}")  # fmt: skip
            closed = next((r for r in run.load if r["backend"] == backend
                           and r["clients"] == held_at), None)  # fmt: skip
            if closed is not None:
                ceiling = closed["requests"] / closed["seconds"]
                found = load.capacity(url, held_at, seconds, queries, p99_ms, ceiling,
                                      new_memory=lambda n, i: text(f"c{n}", i))  # fmt: skip
                run.held.append({"backend": backend, "memories": size, **found})
                best = found["best"] or {"searches_per_s": 0.0}
                run.say(f"{backend}: {best['searches_per_s']:.0f} searches/s held within p99 "
                        f"{p99_ms:g} ms at {held_at} clients")  # fmt: skip


def _load_level(url: str, backend: str, size: int, level: int, seconds: float,
                queries: list[str]) -> dict[str, Any]:  # fmt: skip
    row = load.measure(url, level, seconds, queries, lambda n, i: text(f"l{n}", i))
    return {"backend": backend, "memories": size, **row}


# -- the bad-input corpus -------------------------------------------------------------------

TEN_MB = "x" * 10_000_000
QUERIES = ['"unbalanced', "NEAR(crane berth)", "crane AND OR", "*", "content:crane",
           "^crane", "crane & | berth", "!(", "crane:*", "'; DROP TABLE memories; --",
           "crane\x00berth", "lone \ud800 surrogate", "q" * 100_000,
           "what did I do in december 9999", "3000000 years ago", "999999999 days ago"]  # fmt: skip
CONTENTS = ["before\x00after", "lone \ud800 surrogate", TEN_MB, "   "]
SEARCH_ARGS: list[dict[str, Any]] = [
    {"limit": 0}, {"limit": -1}, {"limit": 10**9}, {"limit": 1001}, {"limit": "many"},
    {"as_of": "9999-12-31T23:59:59"}, {"as_of": "0001-01-01"},
    {"filters": {"since": "0001-01-01T00:00:00+01:00"}}, {"filters": {"until": "9999-12-31"}},
]  # fmt: skip
"""Arguments beside ``query: "crane"``."""


def _deep(depth: int) -> str:
    return '{"query": ' + "[" * depth + "]" * depth + "}"


def bad_input(run: Run) -> None:
    """Every input of the corpus through every door: an answer or a clear refusal, never a
    crash, and a refused write changes nothing."""
    for backend in run.backends:
        db = run.location(backend, "corpus")
        with engine(db) as seeded:
            seeded.add_many(memories("corpus", 50))
        cases = _cases()
        _through_library(run, backend, db, cases)
        _through_cli(run, backend, db, cases)
        _through_mcp(run, backend, db, cases)
        with serve(run, db) as url:
            _through_http(run, backend, url, cases)
        run.say(f"{backend}: bad-input corpus done")


Case = tuple[str, str, dict[str, Any]]
"""(label, kind: search or add, arguments)."""


def _cases() -> list[Case]:
    cases: list[Case] = [(f"query {q[:24]!r}", "search", {"query": q}) for q in QUERIES]
    cases += [(f"content {c[:24]!r}", "add", {"content": c}) for c in CONTENTS]
    cases += [(f"search {json.dumps(a)[:40]}", "search", {"query": "crane", **a})
              for a in SEARCH_ARGS]  # fmt: skip
    cases += [("event_time 9999-12-31T23:59:59", "add",
               {"content": "late", "event_time": "9999-12-31T23:59:59"})]  # fmt: skip
    cases += [(f"{field} with a lone surrogate", "add", {"content": "fine text", field: value})
              for field, value in (("metadata", {"note": "lone \ud800"}), ("tags", ["\udfff"]),
                                   ("project", "p\ud800"), ("session_id", "s\udc00"))]  # fmt: skip
    return cases


def _through_library(run: Run, backend: str, db: str, cases: list[Case]) -> None:
    from recalld.requests import AddMemories, SearchQuery, parse

    check = run.check("bad input: library", backend)
    with engine(db) as opened:
        for label, kind, args in cases:
            before = opened.status().store.memories
            try:
                if kind == "search":
                    opened.execute(parse(SearchQuery, args))
                else:
                    opened.execute(parse(AddMemories, {"memories": [args]}))
                ok = True
            except RecalldError:
                ok = opened.status().store.memories == before
            except Exception as exc:  # the crash this check exists to find
                ok = False
                label = f"{label}: {exc!r}"[:300]
            check.attempt(ok, label)


def _through_cli(run: Run, backend: str, db: str, cases: list[Case]) -> None:
    from click.testing import CliRunner

    from recalld.interfaces.cli import cli

    check = run.check("bad input: CLI", backend)
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("RECALLD_")}
    env.update(RECALLD_CONFIG=str(run.folder / "empty.toml"))
    for label, kind, args in cases:
        if kind == "search":
            argv = ["search", args["query"]]
            for name in ("limit", "as_of"):
                if name in args:
                    argv += [f"--{name.replace('_', '-')}", str(args[name])]
            for name, value in args.get("filters", {}).items():
                argv += [f"--{name}", str(value)]
        else:
            argv = ["add", args["content"][:200_000]]
            if "event_time" in args:
                argv += ["--event-time", args["event_time"]]
        done = CliRunner().invoke(cli, ["--db", db, "--embedder", "fake", *argv], env=env)
        crashed = done.exception is not None and not isinstance(done.exception, SystemExit)
        check.attempt(not crashed and done.exit_code in (0, 2) and "Traceback" not in done.output,
                      f"{label}: exit {done.exit_code} {done.exception!r}"[:300])  # fmt: skip


def _through_mcp(run: Run, backend: str, db: str, cases: list[Case]) -> None:
    import anyio
    from mcp import Client

    from recalld.config import Settings
    from recalld.interfaces.mcp import Engines, build_server

    check = run.check("bad input: MCP", backend)
    pool = Engines(Settings(db=db, cache_dir=None, embedder="fake"))

    async def main() -> None:
        async with Client(build_server(lambda ctx: pool.get())) as client:
            for label, kind, args in cases:
                tool = "memory_search" if kind == "search" else "memory_add"
                try:
                    result = await client.call_tool(tool, args)
                except Exception as exc:  # the session itself broke
                    check.attempt(False, f"{label}: {exc!r}"[:300])
                    continue
                said = result.content[0].text if result.content else ""  # type: ignore[union-attr]
                check.attempt(not result.is_error or not said.startswith("Error executing"),
                              f"{label}: {said[:200]}")  # fmt: skip

    try:
        anyio.run(main)
    finally:
        pool.close()


def _through_http(run: Run, backend: str, url: str, cases: list[Case]) -> None:
    check = run.check("bad input: HTTP (no 5xx, no dropped connection)", backend)
    deep = run.check("bad input: HTTP body nested 5000 deep is a 4xx", backend)
    with httpx.Client(base_url=url, timeout=120) as http:
        for label, kind, args in cases:
            path = "/v1/search" if kind == "search" else "/v1/memories"
            try:
                answer = http.post(path, content=json.dumps(args),
                                   headers={"Content-Type": "application/json"})  # fmt: skip
                ok = answer.status_code < 500 and (answer.status_code < 400 or "error" in
                                                   answer.json())  # fmt: skip
                detail = f"{label}: {answer.status_code} {answer.text[:200]}"
            except (httpx.HTTPError, ValueError) as exc:
                ok, detail = False, f"{label}: {exc!r}"
            check.attempt(ok, detail[:300])
        for depth in (100, 5000):
            try:
                answer = http.post("/v1/search", content=_deep(depth),
                                   headers={"Content-Type": "application/json"})  # fmt: skip
                deep.attempt(400 <= answer.status_code < 500, f"depth {depth}: "
                             f"{answer.status_code}")  # fmt: skip
            except httpx.HTTPError as exc:
                deep.attempt(False, f"depth {depth}: {exc!r}")


# -- probes -------------------------------------------------------------------------------


def probes(run: Run) -> None:
    """Cross-tenant reads and writes, keys, a namespace grant and a symlink out."""
    for backend in run.backends:
        _probe(run, backend)
    _symlink_probe(run)


def _probe(run: Run, backend: str) -> None:
    check = run.check("probes: tenant wall, keys, namespace grant", backend)
    db = run.location(backend, "probes")
    with engine(db) as root:
        alice_key = create_key(root.store, "alice")[1]
        bob_key = create_key(root.store, "bob")[1]
        revoked = create_key(root.store, "carol")[1]
        from recalld.keys import revoke_key

        revoke_key(root.store, revoked)
        try:
            create_key(root.store, "eve", shared=["alice"])
            check.attempt(False, "eve was granted alice's namespace without --force")
        except RecalldError:
            check.attempt(True)
    with serve(run, db) as url:
        alice = {"Authorization": f"Bearer {alice_key}"}
        bob = {"Authorization": f"Bearer {bob_key}"}
        made = httpx.post(f"{url}/v1/memories", headers=alice, timeout=30,
                          json={"content": "alice's launch codes are 0000"}).json()  # fmt: skip
        secret = made["id"]
        attempts: list[tuple[str, Callable[[], httpx.Response], Callable[[Any], bool]]] = [
            ("bob GETs alice's id", lambda: httpx.get(
                f"{url}/v1/memories/{secret}", headers=bob), lambda r: r.status_code == 404),
            ("bob DELETEs alice's id", lambda: httpx.delete(
                f"{url}/v1/memories/{secret}", headers=bob), lambda r: r.status_code == 404),
            ("bob PATCHes alice's id", lambda: httpx.patch(
                f"{url}/v1/memories/{secret}", headers=bob, json={"content": "mine"}),
                lambda r: r.status_code == 404),
            ("bob searches for alice's words", lambda: httpx.post(
                f"{url}/v1/search", headers=bob, json={"query": "launch codes"}),
                lambda r: r.status_code == 200 and not r.json()["hits"]),
            ("a revoked key", lambda: httpx.get(f"{url}/v1/status", headers={
                "Authorization": f"Bearer {revoked}"}), lambda r: r.status_code == 401),
            ("a malformed key", lambda: httpx.get(f"{url}/v1/status", headers={
                "Authorization": "Bearer rk_nothing"}), lambda r: r.status_code == 401),
            ("no key while keys exist", lambda: httpx.get(f"{url}/v1/status"),
             lambda r: r.status_code == 401),
            ("alice's memory unchanged", lambda: httpx.get(
                f"{url}/v1/memories/{secret}", headers=alice),
                lambda r: r.json()["content"] == "alice's launch codes are 0000"
                and r.json()["forgotten_at"] is None),
        ]  # fmt: skip
        for label, call, good in attempts:
            try:
                check.attempt(good(call()), label)
            except (httpx.HTTPError, ValueError, KeyError) as exc:
                check.attempt(False, f"{label}: {exc!r}")


def _symlink_probe(run: Run) -> None:
    check = run.check("probes: a symlink out of the workspace is not indexed", "sqlite")
    outside = run.folder / "outside" / "id_ed25519"
    outside.parent.mkdir(parents=True, exist_ok=True)
    outside.write_text("PRIVATE KEY zebrafinch\n", encoding="utf-8")
    workspace = run.folder / "probe-ws"
    (workspace / "memory").mkdir(parents=True, exist_ok=True)
    (workspace / "MEMORY.md").write_text("# Memory\n\nA plain note.\n", encoding="utf-8")
    link = workspace / "memory" / "key.md"
    if not link.is_symlink():
        link.symlink_to(outside)
    with engine(run.location("sqlite", "symlink")) as opened:
        report = opened.index([workspace])
        hits = opened.search("zebrafinch", mode="hybrid").hits
        check.attempt(not any("zebrafinch" in h.memory.content for h in hits),
                      "the linked key was indexed")  # fmt: skip
        check.attempt(any(str(link) == p.path for p in report.problems), "no warning named it")


# -- limit prefix --------------------------------------------------------------------------


def limit_prefix(run: Run, questions: int) -> None:
    """The first 10 of ``limit=50`` equal ``limit=10``: pools are sized for 50 results
    whatever smaller limit a search asks for (``RetrievalConfig.candidates.stable_limit``)."""
    for backend in run.backends:
        check = run.check("top 10 of limit=10 == first 10 of limit=50", backend)
        db = run.location(backend, "prefix")
        top_changed = 0
        with engine(db) as opened:
            opened.add_many(memories("pre", 2000))
            for i in range(questions):
                query = f"{text('q', i * 13).split()[4]} {text('q', i * 7).split()[6]} item {i}"
                ten = [h.memory.id for h in opened.search(query, limit=10).hits]
                fifty = [h.memory.id for h in opened.search(query, limit=50).hits][:10]
                moved = sum(a != b for a, b in zip(ten, fifty, strict=False))
                check.attempt(ten == fifty, f"{query!r}: {moved} of 10 places differ")
                top_changed += ten[:1] != fifty[:1]
        check.observe(top_changed, f"the top hit changes for {top_changed} of {questions}")
