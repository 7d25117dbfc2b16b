"""Time SQLite BM25 candidates at 200k synthetic memories: the full join (every match joined
with ``memories``, then ranked) against ranking the winners inside FTS5 first.

    python scripts/bench_bm25_join.py
"""

from __future__ import annotations

import random
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from recalld.records import Memory, MemoryFilter
from recalld.stores.sqlite import SQLiteStore, queries as q
from recalld.text import content_hash

WORDS = ("kayak", "river", "trip", "club", "meeting", "lisbon", "sister", "dinner", "project",
         "deploy", "bug", "fix", "tea", "garden")  # fmt: skip
SIZE = 200_000


def best_ms(store: SQLiteStore, sql: str, args: list[object]) -> tuple[float, list[str]]:
    best, rows = 1e9, []
    for _ in range(5):
        started = time.perf_counter()
        rows = store._db.execute(sql, args).fetchall()
        best = min(best, time.perf_counter() - started)
    return best * 1000, [r[0] for r in rows]


def main() -> None:
    random.seed(1)
    store = SQLiteStore(Path(tempfile.mkdtemp()) / "b.db")
    now = datetime.now(UTC)
    for start in range(0, SIZE, 5000):
        batch = []
        for i in range(start, start + 5000):
            text = " ".join(random.choices(WORDS, k=12)) + f" note {i}"
            batch.append(Memory(id=f"m{i}", content=text, type="event", created_at=now,
                                updated_at=now, content_hash=content_hash(text)))  # fmt: skip
        store.insert(batch, None)
    where, params = q.filter_sql(MemoryFilter(), store.tenancy.visible)
    limit = 160
    for terms in (("kayak",), ("lisbon", "sister")):
        match = q.fts_match(terms)
        full, a = best_ms(store, q.bm25_sql("memories_fts", where), [match, *params, limit])
        winners, b = best_ms(store, q.bm25_winners_sql("memories_fts", where),
                             [match, limit * q.BM25_PREFETCH, *params, limit])  # fmt: skip
        print(f"{terms}: full join {full:.1f} ms, winners first {winners:.1f} ms,"
              f" same ids {a == b}")  # fmt: skip


if __name__ == "__main__":
    main()
