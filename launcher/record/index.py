"""The run index: one SQLite row per run, in ``<store>/index.sqlite``.

Several launches may write at once (a sweep, or users in parallel): the database
runs in WAL mode, every write is one short transaction, and writers wait for the
lock instead of failing. The index is a cache of what the run directories hold;
``rebuild`` recreates it from them.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from launcher.errors import StoreError

INDEX = "index.sqlite"
COLUMNS = ("id", "path", "time", "task", "level", "seed", "status", "key_sha256",
           "metrics", "weights_sha256", "replay_of")  # fmt: skip


@dataclass
class Row:
    id: str
    path: str
    time: str
    task: str
    level: str
    seed: int | None
    status: str
    key_sha256: str | None = None
    metrics: str = "{}"  # JSON of the final metrics
    weights_sha256: str | None = None
    replay_of: str | None = None


@contextmanager
def _connect(store_root: Path) -> Iterator[sqlite3.Connection]:
    try:
        conn = sqlite3.connect(store_root / INDEX, timeout=60, isolation_level=None)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open run index in {store_root}: {exc}") from None
    try:
        conn.execute("PRAGMA busy_timeout = 60000")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, path TEXT, time TEXT, task TEXT,"
            " level TEXT, seed INTEGER, status TEXT, key_sha256 TEXT, metrics TEXT,"
            " weights_sha256 TEXT, replay_of TEXT)"
        )
        yield conn
    finally:
        conn.close()


def record(store_root: Path, row: Row) -> None:
    """Insert or update ``row`` in one short transaction."""
    values = asdict(row)
    placeholders = ", ".join("?" for _ in COLUMNS)
    with _connect(store_root) as conn:
        conn.execute(
            f"INSERT OR REPLACE INTO runs ({', '.join(COLUMNS)}) VALUES ({placeholders})",
            [values[c] for c in COLUMNS],
        )


def query(
    store_root: Path, task: str | None = None, status: str | None = None, key: str | None = None
) -> list[Row]:
    """Rows newest first, filtered by task, status and comparability-key prefix."""
    if not (store_root / INDEX).exists():
        return []
    where, params = [], []
    for column, value in (("task", task), ("status", status)):
        if value:
            where.append(f"{column} = ?")
            params.append(value)
    if key:
        where.append("key_sha256 LIKE ?")
        params.append(key + "%")
    sql = f"SELECT {', '.join(COLUMNS)} FROM runs"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY time DESC, id DESC"
    with _connect(store_root) as conn:
        return [Row(*r) for r in conn.execute(sql, params).fetchall()]


def metrics_text(row: Row, limit: int = 2) -> str:
    metrics = json.loads(row.metrics or "{}")
    return " ".join(f"{k}={v:.4f}" for k, v in list(sorted(metrics.items()))[:limit])
