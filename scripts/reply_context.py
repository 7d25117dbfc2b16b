"""Reply context on or off in the import path, measured on the same benchmarks back to back.

    PYTHONPATH=src .venv/bin/python scripts/reply_context.py locomo FILE [--limit N]
    PYTHONPATH=src .venv/bin/python scripts/reply_context.py longmemeval FILE [--limit N]
    PYTHONPATH=src .venv/bin/python scripts/reply_context.py workloads FILE
    PYTHONPATH=src .venv/bin/python scripts/reply_context.py speed LOCOMO_FILE

For LoCoMo and LongMemEval the import path's converter runs once with reply context and
once without (everything else the same); the workloads variant gives each ``turn`` with a
session the reply context ``recalld import`` would give it (the previous turn of its
session, by event time), as if its sessions had been imported as transcripts. ``speed``
times the embedding of LoCoMo's turns with and without their context, uncached.
Prints one JSON line per variant: the headline metrics and the paired wins and losses.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from dataclasses import replace
from typing import Any

import recalld.bench.workloads_run as workloads_run
import recalld.sources.importer as importer
from recalld.bench.locomo import load_locomo, locomo_case
from recalld.bench.runner import run_locomo, run_longmemeval
from recalld.config import load_settings
from recalld.conversation import reply_context
from recalld.providers.embedders import resolve_embedder
from recalld.sources.transcripts import turns_to_memories

HEADLINES = {
    "locomo": ("turn.recall_any@1", "turn.recall_any@10", "turn.evidence_recall@10"),
    "longmemeval": ("session.recall_any@1", "session.recall_any@5", "turn.recall_all@10"),
    "workloads": ("hit@1", "hit@5", "mrr@10", "current_first"),
}


def with_context(on: bool) -> None:
    """Make the import path's converter give reply context (or not)."""
    importer.turns_to_memories = functools.partial(  # type: ignore[assignment]
        turns_to_memories, with_reply_context=on
    )


def workloads_context(on: bool) -> None:
    """Give workloads turns the reply context an import would (or none)."""
    original = workloads_run.fill_store.__wrapped__ if hasattr(
        workloads_run.fill_store, "__wrapped__") else workloads_run.fill_store  # fmt: skip

    @functools.wraps(original)
    def fill(engine: Any, workloads: Any, scenario: Any, workspace: Any) -> Any:
        if on:
            ordered = sorted(
                (m for m in scenario.memories if m.type == "turn" and m.session_id),
                key=lambda m: (m.event_time is None, m.event_time),
            )
            previous: dict[str, str] = {}
            contexts: dict[str, str | None] = {}
            for m in ordered:
                contexts[m.key] = reply_context(previous.get(m.session_id or ""), m.content)
                previous[m.session_id or ""] = m.content
            base = workloads_run.new_memory

            def new(m: Any) -> Any:
                return replace(base(m), embed_context=contexts.get(m.key))

            workloads_run.new_memory = new  # type: ignore[assignment]
            try:
                return original(engine, workloads, scenario, workspace)
            finally:
                workloads_run.new_memory = base  # type: ignore[assignment]
        return original(engine, workloads, scenario, workspace)

    workloads_run.fill_store = fill  # type: ignore[assignment]


def summary(report: dict[str, Any], bench: str, name: str) -> dict[str, Any]:
    metrics = report["systems"]["recalld"]["overall"]["metrics"]
    return {"variant": name, **{m: round(metrics[m], 4) for m in HEADLINES[bench] if m in metrics}}


def paired(a: dict[str, Any], b: dict[str, Any], metric: str) -> dict[str, list[str]]:
    wins, losses = [], []
    for pa, pb in zip(a["probes"], b["probes"], strict=True):
        x = pa["systems"]["recalld"]["scores"].get(metric)
        y = pb["systems"]["recalld"]["scores"].get(metric)
        if x is None or y is None or x == y:
            continue
        (wins if x > y else losses).append(pa["id"])
    return {"on_wins": wins, "on_losses": losses}


def speed(path: str) -> None:
    """Texts per second embedding LoCoMo's turns without and with context (no cache)."""
    embedder = resolve_embedder("local", load_settings({}))
    docs = [d.memory for c in load_locomo(path)[:1] for d in locomo_case(c).docs][:400]
    for label, texts in (("content", [m.content for m in docs]),
                         ("context+content", [f"{m.embed_context}\n{m.content}"
                                              if m.embed_context else m.content
                                              for m in docs])):  # fmt: skip
        started = time.perf_counter()
        embedder.embed_documents(texts)
        elapsed = time.perf_counter() - started
        print(json.dumps({"texts": len(texts), "embedded": label,
                          "texts_per_s": round(len(texts) / elapsed, 1),
                          "load": os.getloadavg()}))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("bench", choices=["locomo", "longmemeval", "workloads", "speed"])
    parser.add_argument("file")
    parser.add_argument("--limit", type=int)
    args = parser.parse_args()
    if args.bench == "speed":
        speed(args.file)
        return
    reports = {}
    for on in (False, True):
        started, load = time.time(), os.getloadavg()
        if args.bench == "workloads":
            workloads_context(on)
            report = workloads_run.run_workloads(args.file, baselines=False, limit=args.limit)
        else:
            with_context(on)
            run = run_locomo if args.bench == "locomo" else run_longmemeval
            report = run(args.file, baselines=False, budgets=(), limit=args.limit)
        name = "reply context" if on else "no reply context"
        reports[on] = report
        print(json.dumps({**summary(report, args.bench, name), "file": args.file,
                          "seconds": round(time.time() - started), "load_start": load,
                          "load_end": os.getloadavg(),
                          "cache": report["speed"]["embedding_cache"]}))  # fmt: skip
    for metric in HEADLINES[args.bench]:
        if metric in reports[True]["systems"]["recalld"]["overall"]["metrics"]:
            print(json.dumps({"metric": metric, **paired(reports[True], reports[False], metric)}))


if __name__ == "__main__":
    main()
