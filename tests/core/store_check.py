"""Helpers to prove a store file did not change: a full snapshot of its rows, a file digest."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

Snapshot = dict[str, Any]


def store_snapshot(path: Path) -> Snapshot:
    """Every row recalld keeps in a store file, read through a separate read-only connection."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = ("memories", "memory_tags", "memory_entities", "meta")
        snap: Snapshot = {
            t: db.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in tables
        }
        snap["vectors"] = [
            (pk, hashlib.sha256(blob).hexdigest())
            for pk, blob in db.execute("SELECT pk, vector FROM vectors ORDER BY pk")
        ]
        snap["fts"] = db.execute(
            "SELECT rowid FROM memories_fts WHERE memories_fts MATCH 'a OR the OR x' ORDER BY 1"
        ).fetchall()
        return snap
    finally:
        db.close()


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
