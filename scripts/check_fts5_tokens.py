"""One-off check: the tokens the PostgreSQL store writes (``recalld.lexical``) equal those
the SQLite store indexes, over every turn of LongMemEval_S and LoCoMo.

    python scripts/check_fts5_tokens.py longmemeval_s.json.gz locomo.json

The reference is a table created with the SQLite store's own migration DDL (the
``memories_fts`` external-content FTS5 table and its triggers), read back through
``fts5vocab`` (``instance``); prints the texts, tokens and mismatches counted.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import sys
import time
from pathlib import Path

from recalld import lexical


def turns(path: Path) -> list[str]:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    data = json.loads(raw)
    out: list[str] = []
    for record in data:
        if "haystack_sessions" in record:  # LongMemEval
            out.extend(t["content"] for s in record["haystack_sessions"] for t in s)
        else:  # LoCoMo
            conv = record["conversation"]
            out.extend(t["text"] for key, value in conv.items()
                       if key.startswith("session_") and isinstance(value, list)
                       for t in value)  # fmt: skip
    return list(dict.fromkeys(t for t in out if t.strip()))


def main() -> None:
    texts = [t for arg in sys.argv[1:] for t in turns(Path(arg))]
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE memories (pk INTEGER PRIMARY KEY, content TEXT)")
    db.execute("CREATE VIRTUAL TABLE memories_fts USING fts5(content, content='memories',"
               f" content_rowid='pk', tokenize='{lexical.FTS5_TOKENIZE}')")  # fmt: skip
    db.execute("CREATE VIRTUAL TABLE vocab USING fts5vocab(memories_fts, instance)")
    started = time.perf_counter()
    mine = lexical.tokenize_many(texts)
    took = time.perf_counter() - started
    with db:
        db.executemany("INSERT INTO memories (pk, content) VALUES (?, ?)", enumerate(texts))
        db.execute("INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')")
    found: dict[int, dict[int, str]] = {}
    for doc, offset, term in db.execute("SELECT doc, offset, term FROM vocab"):
        found.setdefault(doc, {})[offset] = term
    mismatches = 0
    for i, tokens in enumerate(mine):
        expected = [lexical.stored(t) for _, t in sorted(found.get(i, {}).items())]
        if tokens != expected:
            mismatches += 1
            if mismatches <= 5:
                print("MISMATCH", repr(texts[i][:80]), tokens[:10], expected[:10])
    vocabulary = {t for tokens in mine for t in tokens}
    print(json.dumps({"texts": len(texts), "tokens": sum(map(len, mine)),
                      "vocabulary": len(vocabulary), "mismatched_texts": mismatches,
                      "tokenize_s": round(took, 1),
                      "us_per_text": round(took / max(len(texts), 1) * 1e6, 1)}))  # fmt: skip


if __name__ == "__main__":
    main()
