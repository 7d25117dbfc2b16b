"""LongMemEval_S stores for the latency scripts: each question's haystack stored as
``recalld bench longmemeval`` stores it, and its question searched once untimed.

Imports ``recalld`` only when called, so that a script run with another checkout's ``src``
on ``PYTHONPATH`` times that checkout.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def warm_probes(file: str | Path, questions: int, cache_dir: Path) -> Iterator[tuple[Any, Any]]:
    """(engine, probe) for each probe of the first ``questions`` questions, the probe's
    search run once so that what follows is timed warm; the store is removed after."""
    import recalld
    from recalld.bench.longmemeval import load_longmemeval, longmemeval_case, select_questions
    from recalld.bench.systems import load_embedder
    from recalld.config import Settings
    from recalld.providers.embedders import resolve_embedder

    embedder = load_embedder(resolve_embedder("local"), cache_dir)
    for question in select_questions(load_longmemeval(file), limit=questions):
        case = longmemeval_case(question, "turn", None)
        with tempfile.TemporaryDirectory() as folder:
            settings = Settings.model_construct(db=Path(folder) / "s.db", cache_dir=cache_dir)
            with recalld.open(settings=settings, embedder=embedder) as engine:
                engine.add_many([d.memory for d in case.docs], dedupe=False)
                for probe in case.probes:
                    engine.search(probe.question, limit=10, as_of=probe.as_of)  # warm
                    yield engine, probe
