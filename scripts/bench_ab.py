"""One mechanism of a large store's search, on and off, in one run (an experiment, not a test).

    PYTHONPATH=src .venv/bin/python scripts/bench_ab.py --mechanism preselect \\
        --store STORE.db [--questions 200] [--rounds 2] [--data ../shared/benchmarks] \\
        [--two-handles] [--tenant NAME] [--out report.json]

The store is one ``recalld bench scale`` built (past 50,000 memories, with its ANN index),
its SQLite file or its PostgreSQL DSN.
The same real questions go through one engine with the mechanism on and off, alternating
question by question, for ``--rounds`` rounds, after an untimed pass that reads the store's
pages they touch (so neither way pays for the other's cold reads). Mechanisms:

- ``preselect``: a filtered subset searched exactly is first ranked by the ANN index's int8
  copies and only the best few rows are read back (off: every row of the subset is);
- ``near-memory``: the search from a stored memory's vector for the memories near it
  (knowledge updates) caps its beam (off: the beam the index's size calls for);
- ``vector-completion``: memories the ANN index missed that other channels found take
  their exact places (off: the store says it scores every vector, so it stands aside);
- ``postgres-near-memory`` (``--store`` a PostgreSQL DSN): the same search on PostgreSQL
  examines fewer HNSW candidates (off: the handle's number);
- ``copy-reads``: preselection reads the index's copies through usearch's compiled lookup
  (off: its public ``get``);
- ``one-walk``: the same query asked of the ANN index again at the same beam (a time
  window's nearest after the search's own) takes the first walk's answer (off: walks again);
- ``window-share``: a time window holding a large enough share of the rows is checked on the
  index's candidates even when it could be listed (off: only one too large to list is).
- ``vectors-file``: the index's candidates are re-scored from the vectors file mapped beside
  it (off: their vectors are read back from the table, as before that file).
- ``narrow-beam``: a graph built with the wide beam is walked with
  ``EXPANSION_PER_CANDIDATE`` per candidate asked for, where the index is small enough for
  the beam to stay under its cap (off: twice that, what the older, narrower graph needs).
- ``ranked-words`` (``--store`` a PostgreSQL DSN, ``--tenant`` one with word postings
  ranked by a BM25 index: a server with a trusted pg_textsearch, ``ranked.MIN_VERSION``):
  the word channel scores only the winners of the tenant's BM25 index on its postings
  (off: every posting of the question's words);
- ``mapped-store``: every SQLite connection reads the store file through a memory map
  (off: through its own page cache, ``mmap_size`` 0). Fixed when a connection opens, so each
  way searches through a handle of its own (as ``--two-handles``).

With ``--two-handles`` each way searches through a store handle of its own, so that neither
finds the rows the other read (a handle keeps the rows it read between searches while the
store is unchanged: with one handle, the second way of each question reads none of them).

Reports p50 / p95 / mean ms of a default hybrid search (limit 10) each way, the process's CPU
a search, on how many questions the "on" way's median time was the lower, the slowest
questions (the faster of their rounds, each way) and how many top 10s differ. With
``--vector-channel`` it times the vector channel alone instead (the store's 200 nearest
memories with their exact cosines, the default search's pool, each question embedded once
beforehand) and counts the questions whose lists (ids and scores) differ.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np

import recalld
from recalld import heap
from recalld.bench.scale_worker import bench_inputs, latency_ms, store_bench_options, write_report
from recalld.stores.postgres import indexes as postgres_indexes
from recalld.stores.sqlite import ann_beam, lazy_vectors, store as sqlite_store, vector_index

Switch = Callable[[Any, bool], None]
"""Turns a mechanism on or off for an engine."""
OFF = 10**9
"""A setting no search reaches: the mechanism never acts."""


def _setting(module: Any, name: str, off: int = OFF) -> Switch:
    """A module's setting: its own value on, ``off`` off."""
    value = getattr(module, name)
    return lambda engine, on: setattr(module, name, value if on else off)


def _vector_completion(engine: Any, on: bool) -> None:
    if on:
        vars(engine.store).pop("exact_vectors", None)
    else:
        engine.store.exact_vectors = lambda: True


_COMPILED_COPIES = vector_index.AnnIndex.copies


def _public_copies(self: Any, pks: Any) -> list[Any]:
    return list(self._index.get(pks.astype("uint64")))


def _copy_reads(engine: Any, on: bool) -> None:
    vector_index.AnnIndex.copies = _COMPILED_COPIES if on else _public_copies  # type: ignore[method-assign]


_CANDIDATES = vector_index.AnnIndex.candidates


def _walk_each_time(self: Any, *args: Any, **kwargs: Any) -> Any:
    self._last = None
    return _CANDIDATES(self, *args, **kwargs)


def _one_walk(engine: Any, on: bool) -> None:
    vector_index.AnnIndex.candidates = _CANDIDATES if on else _walk_each_time  # type: ignore[method-assign]


_PASSING_ROWS = lazy_vectors.LazyAnn.passing_rows


def _window_share(engine: Any, on: bool) -> None:
    lazy_vectors.LazyAnn.passing_rows = (  # type: ignore[method-assign]
        _PASSING_ROWS if on else (lambda self, limit: OFF)
    )


PER_CANDIDATE = ann_beam.EXPANSION_PER_CANDIDATE


def _narrow_beam(engine: Any, on: bool) -> None:
    """On: the beam per candidate of a graph built wide; off: the older graph's, wider."""
    ann_beam.EXPANSION_PER_CANDIDATE = PER_CANDIDATE if on else ann_beam.LEGACY_PER_CANDIDATE


_HELD: dict[int, Any] = {}


def _vectors_file(engine: Any, on: bool) -> None:
    """On: the lazy index's held vectors; off: none (the table is read)."""
    lazy = engine.store.vector_reads.lazy
    if lazy is None:
        raise SystemExit("the store's search does not go through the saved ANN index")
    if lazy.copies is not None:
        _HELD[id(lazy)] = lazy.copies
    lazy.copies = _HELD.get(id(lazy)) if on else None


_RANKED: dict[int, bool] = {}


def _ranked_words(engine: Any, on: bool) -> None:
    """On: the handle's word postings ranked by the tenant's BM25 index, as it opened with
    them; off: scored whole."""
    store = engine.store
    _RANKED.setdefault(id(store), store._word_ranked)
    store._word_ranked = _RANKED[id(store)] if on else False


PER_HANDLE = {"mapped-store"}
"""Mechanisms fixed when a handle's connections open: each way needs a handle of its own."""

MECHANISMS: dict[str, Switch] = {
    "preselect": _setting(lazy_vectors, "PRESELECT_FACTOR"),
    "near-memory": _setting(ann_beam, "NEAR_MEMORY_EXPANSION"),
    "vector-completion": _vector_completion,
    "postgres-near-memory": _setting(postgres_indexes, "NEAR_MEMORY_EF_SEARCH"),
    "copy-reads": _copy_reads,
    "one-walk": _one_walk,
    "window-share": _window_share,
    "narrow-beam": _narrow_beam,
    "vectors-file": _vectors_file,
    "mapped-store": _setting(sqlite_store, "MAPPED_BYTES", off=0),  # no map
    "ranked-words": _ranked_words,
}


Search = Callable[[str], list[Any]]
"""One timed search of a question: what it found, to compare the two ways."""


def _hybrid(engine: Any) -> Search:
    return lambda question: [h.memory.id for h in engine.search(question, limit=10).hits]


VECTOR_POOL = 200
"""The vector channel's depth in a default search (limit 10)."""


def _vector_channel(engine: Any, model: Any, sample: list[str]) -> Search:
    from recalld.stores.base import CandidateRequest, NearestAsk

    vectors = {question: model.embed_query(question) for question in sample}

    def nearest(question: str) -> list[Any]:
        request = CandidateRequest(asks={"semantic": NearestAsk(VECTOR_POOL, vectors[question])})
        return [(c.memory_id, c.score) for c in engine.store.candidates(request)["semantic"]]

    return nearest


def main() -> None:
    parser = store_bench_options(__doc__.splitlines()[0], rounds=2)
    parser.add_argument("--mechanism", choices=sorted(MECHANISMS), required=True)
    parser.add_argument("--vector-channel", action="store_true",
                        help="time the vector channel alone, not the whole search")  # fmt: skip
    parser.add_argument("--two-handles", action="store_true",
                        help="each way searches through a store handle of its own")  # fmt: skip
    parser.add_argument("--tenant", help="the tenant to search (a PostgreSQL store's)")
    args = parser.parse_args()
    sample, model, settings = bench_inputs(args)
    if args.tenant:
        settings = settings.model_copy(update={"tenant": args.tenant})
    switch = MECHANISMS[args.mechanism]
    values = {"on": True, "off": False}
    engines: dict[str, Any] = {}
    for name, on in values.items():
        if args.two_handles or args.mechanism in PER_HANDLE or not engines:
            if args.mechanism in PER_HANDLE:
                switch(None, on)  # the handle's settings, before its first connection opens
            engine = recalld.open(settings=settings, embedder=model)
        engines[name] = engine
    searches = {
        name: _vector_channel(engine, model, sample) if args.vector_channel else _hybrid(engine)
        for name, engine in engines.items()
    }
    for question in sample:
        for name, on in values.items():
            switch(engines[name], on)
            searches[name](question)
    heap.settle()  # as `recalld serve` does once started
    times: dict[str, list[float]] = {name: [] for name in values}
    cpu: dict[str, list[float]] = {name: [] for name in values}
    tops: dict[str, dict[str, list[str]]] = {name: {} for name in values}
    load_before = os.getloadavg()
    for round_ in range(args.rounds):
        for i, question in enumerate(sample):
            order = list(values) if (round_ + i) % 2 == 0 else list(reversed(values))
            for name in order:
                switch(engines[name], values[name])
                began, used = time.perf_counter(), time.process_time()
                found = searches[name](question)
                times[name].append((time.perf_counter() - began) * 1000)
                cpu[name].append((time.process_time() - used) * 1000)
                tops[name][question] = found
    switch(engines["on"], True)
    count = len(sample)

    def best(name: str, i: int) -> float:
        return round(min(times[name][i::count]), 1)

    def median(name: str, i: int) -> float:
        return float(np.median(times[name][i::count]))

    slowest = sorted(range(count), key=lambda i: -max(best("on", i), best("off", i)))[:10]
    differ = sum(tops["on"][q] != tops["off"][q] for q in sample)
    report = {"store": str(args.store), "mechanism": args.mechanism, "questions": count,
              "timed": "vector channel, 200 deep" if args.vector_channel else "hybrid search",
              "rounds": args.rounds, "handles": len({id(e) for e in engines.values()}),
              "date": datetime.now(UTC).isoformat(timespec="minutes"),
              "load_before": load_before, "load_after": os.getloadavg(),
              **{name: latency_ms(found) for name, found in times.items()},
              "cpu_ms_per_search": {name: round(float(np.mean(used)), 2)
                                    for name, used in cpu.items()},
              "on_lower_on": sum(median("on", i) < median("off", i) for i in range(count)),
              "slowest": [{"question": sample[i][:60], "on": best("on", i), "off": best("off", i)}
                          for i in slowest],
              "top10_differs": differ}  # fmt: skip
    write_report(report, args.out)


if __name__ == "__main__":
    main()
