"""The adversarial run, kept as the project's own: every later change is held to it.

On SQLite and on PostgreSQL (a local server it starts, or ``--dsn``), loopback only and
bounded in time, it runs:

1. seeded SIGKILL trials during ``add_many``, ``recalld import``, ``recalld index``,
   ``reindex`` and ``recalld migrate``; after each kill: the store's integrity, every
   acknowledged write present, nothing half-written (a memory without its vector, a file
   marked indexed without chunks, a partial copy not marked unfinished), and the same
   operation run again completes (a migration verifies against the source);
2. writer processes and reader processes on one store at once;
3. ``recalld serve`` under concurrent HTTP clients of two tenants adding and searching
   (the embedding cache on): no 5xx, no hang, every acknowledged add there, no hit of the
   other tenant;
4. the bad-input corpus (FTS5 and tsquery syntax, NUL, lone surrogates, 10 MB content,
   100k-character queries, deep JSON, out-of-range dates and limits) through the library,
   the CLI, HTTP and MCP: an answer or a clear refusal, never a crash;
5. probes: another tenant's ids, revoked and malformed keys, a grant of another tenant's
   namespace, a symlink out of an indexed workspace;
6. whether the top 10 of ``limit=10`` is the first 10 of ``limit=50``;
7. the store's files (SQLite; ``scripts/reliability_files.py``): a store restored from a
   backup beside the word and ANN indexes that followed it further (the new memory found by
   the word and the vector channels), the modes of every file and folder a store, its
   indexes and cache create under umask 022, and a store from a newer schema (read; every
   write refused, the file as it was);
8. the server's own resources: 2,000 idle and half-sent connections (``/healthz`` within a
   second, each closed after the head time), a foreign listener on the port the shell's
   discovery advertises (it receives nothing of a request), and the largest request the
   caps accept (stored; one over each cap refused, nothing stored);
9. the load figure: searches/s and p50/p95/p99 at 8, 32 and 64 clients through
   ``recalld serve`` on a 10k-memory store, one request in ten an add; then the highest
   rate 32 clients sending on a schedule keep within a p99 of 150 ms.

It writes a table (check, backend, attempts, failures, worst case) to ``docs/reliability.md``
with the date, commit, machine and load, and exits 1 if a gating check failed::

    PYTHONPATH=src .venv/bin/python scripts/reliability.py            # the full run
    PYTHONPATH=src .venv/bin/python scripts/reliability.py --quick    # a few of each, < 3 min
    PYTHONPATH=src .venv/bin/python scripts/reliability.py --only load --report OUT.md

The fake embedder (a deterministic hash) stands in for the model throughout: the run is
about the store, the server and the doors, and the load figure is then the pipeline's own
cost without a model's inference.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reliability_common import Run  # noqa: E402
from reliability_doors import bad_input, http_clients, limit_prefix, load_figure, probes  # noqa: E402
from reliability_files import file_checks  # noqa: E402
from reliability_floods import connection_flood, discovery_capture, largest_request  # noqa: E402
from reliability_kills import kill_trials, writers_and_readers  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
QUICK = {"trials": 2, "count": 300, "writers": 2, "readers": 2, "per_writer": 40,
         "clients": 16, "rounds": 3, "size": 1000, "seconds": 2.0, "questions": 10,
         "restores": 3}  # fmt: skip
FULL = {"trials": 20, "count": 2000, "writers": 4, "readers": 4, "per_writer": 300,
        "clients": 64, "rounds": 15, "size": 10_000, "seconds": 15.0, "questions": 20,
        "restores": 20}  # fmt: skip
LEVELS = (8, 32, 64)


def main() -> int:
    args = _arguments()
    plan = {**(QUICK if args.quick else FULL)}
    if args.trials is not None:
        plan["trials"] = args.trials
    backends = tuple(args.backends.split(","))
    with tempfile.TemporaryDirectory(prefix="recalld-reliability-") as scratch:
        folder = Path(scratch)
        admin = args.dsn
        if "postgres" in backends and admin is None:
            from recalld import local_postgres

            admin = local_postgres.start(folder / "pg").admin_dsn
        run = Run(folder, backends, admin, args.quick, args.seed, drop_databases=bool(args.dsn))
        load_before = os.getloadavg()
        try:
            _sections(run, plan, set((args.only or "").split(",")) - {""})
        finally:
            run.close()
            if "postgres" in backends and args.dsn is None:
                from recalld import local_postgres

                run.say("stopping the run's PostgreSQL server")
                local_postgres.stop(folder / "pg")
        run.say("removing the scratch folder")
    report = _report(run, plan, load_before, " ".join(sys.argv[1:]))
    args.report.write_text(report, encoding="utf-8")
    run.say(f"wrote {args.report}")
    failed = [c for c in run.checks if c.gating and c.failures]
    for check in failed:
        print(f"FAILED {check.name} [{check.backend}]: {check.notes}", file=sys.stderr)
    return 1 if failed else 0


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few trials of each (< 3 min)")
    parser.add_argument("--trials", type=int, help="SIGKILL trials per operation and backend")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--dsn", help="an admin DSN of a PostgreSQL server to use")
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--report", type=Path, default=ROOT / "docs" / "reliability.md")
    parser.add_argument("--only", help="comma-separated sections to run: " + ", ".join(SECTIONS))
    args = parser.parse_args()
    unknown = set((args.only or "").split(",")) - set(SECTIONS) - {""}
    if unknown:
        parser.error(f"unknown section {', '.join(sorted(unknown))}: choose from "
                     f"{', '.join(SECTIONS)}")  # fmt: skip
    return args


SECTIONS = (
    "kills",
    "writers",
    "http",
    "bad-input",
    "probes",
    "limit",
    "files",
    "floods",
    "discovery",
    "costs",
    "load",
)


def _sections(run: Run, plan: dict[str, float], only: set[str]) -> None:
    i = int
    steps: dict[str, Callable[[], None]] = {
        "kills": lambda: kill_trials(run, i(plan["trials"]), i(plan["count"])),
        "writers": lambda: writers_and_readers(
            run, i(plan["writers"]), i(plan["readers"]), i(plan["per_writer"])
        ),  # fmt: skip
        "http": lambda: http_clients(run, i(plan["clients"]), i(plan["rounds"])),
        "bad-input": lambda: bad_input(run),
        "probes": lambda: probes(run),
        "limit": lambda: limit_prefix(run, i(plan["questions"])),
        "files": lambda: file_checks(run, i(plan["restores"])),
        "floods": lambda: connection_flood(run),
        "discovery": lambda: discovery_capture(run),
        "costs": lambda: largest_request(run),
        "load": lambda: load_figure(run, i(plan["size"]), plan["seconds"], LEVELS),
    }
    for name, step in steps.items():
        if not only or name in only:
            step()


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _report(run: Run, plan: dict[str, float], load_before: tuple[float, float, float],
            argv: str) -> str:  # fmt: skip
    took = time.monotonic() - run.started
    load_after = os.getloadavg()
    lines = [
        "# Reliability: the adversarial run",
        "",
        "Written by `scripts/reliability.py` (see its docstring for what each check does);",
        "re-run it after any change to the store, the server or the doors. A row fails when",
        "any attempt broke the property; non-gating rows report a known defect another change",
        "fixes, and do not fail the run.",
        "",
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; commit `{_commit()}`",
        f"- command: `scripts/reliability.py {argv}`".rstrip(),
        f"- machine: {platform.platform()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; load (1/5/15 min) {_load(load_before)} before, "
        f"{_load(load_after)} after",
        f"- plan: {', '.join(f'{k} {v:g}' for k, v in plan.items())}; {took / 60:.1f} min",
        "",
        "| check | backend | attempts | failures | worst case | gating |",
        "|---|---|---:|---:|---|---|",
    ]
    for c in run.checks:
        lines.append(f"| {c.name} | {c.backend} | {c.attempts} | {c.failures} | "
                     f"{c.worst or '-'} | {'yes' if c.gating else 'no'} |")  # fmt: skip
    noted = [c for c in run.checks if c.notes]
    if noted:
        lines += ["", "## Failures and notes", ""]
        for c in noted:
            lines += [f"- **{c.name}** ({c.backend}): " + "; ".join(c.notes).replace("|", "/")]
    lines += [
        "",
        "## Load: searches through `recalld serve`, adds mixed in",
        "",
        "Searches (`POST /v1/search`, limit 10, hybrid) and one add in ten, from N client",
        "threads on this machine for a fixed time each, fake embedder. Latencies are the",
        "searches'; errors count every request that was not a 2xx.",
        "",
        "| backend | memories | clients | searches/s | p50 ms | p95 ms | p99 ms | adds | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in run.load:
        lines.append(f"| {r['backend']} | {r['memories']} | {r['clients']} | "
                     f"{r['searches_per_s']:.1f} | {r['p50_ms']:.0f} | {r['p95_ms']:.0f} | "
                     f"{r['p99_ms']:.0f} | {r['adds']} | {r['errors']} |")  # fmt: skip
    if run.held:
        lines += ["", "The highest rate the clients keep within the p99 target, sending on a "
                  "schedule (each", "request's latency counted from its scheduled moment, so "
                  "time queued behind a slow", "answer counts), found in four runs bisecting "
                  "below the free-running rate:", "",
                  "| backend | memories | clients | p99 target ms | searches/s | p50 ms | "
                  "p99 ms | adds | errors | tries |", "|---|---:|---:|---:|---:|---:|---:|---:"
                  "|---:|---|"]  # fmt: skip
        for h in run.held:
            b = h["best"] or {"searches_per_s": 0.0, "p50_ms": 0.0, "p99_ms": 0.0, "adds": 0,
                              "errors": 0}  # fmt: skip
            tries = ", ".join(f"{t['rate']:.0f}/s {'held' if t['held'] else 'missed'}"
                              for t in h["tries"])  # fmt: skip
            lines.append(f"| {h['backend']} | {h['memories']} | {h['clients']} | "
                         f"{h['p99_target_ms']:g} | {b['searches_per_s']:.1f} | "
                         f"{b['p50_ms']:.0f} | {b['p99_ms']:.0f} | {b['adds']} | "
                         f"{b['errors']} | {tries} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _load(values: tuple[float, float, float]) -> str:
    return "/".join(f"{v:.1f}" for v in values)


if __name__ == "__main__":
    sys.exit(main())
