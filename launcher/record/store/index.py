"""The run index: one SQLite row per run, in ``<store>/index.sqlite``, derived from the runs.

The run directories are the truth; the index is a cache of what they hold, for a
fast ``launch runs``. So no index problem may fail or block a run: ``record`` never
raises (it says once, in one line, that the index will catch up), and a reader
reconciles the index with the directories (``query``). A missing index is rebuilt
from the run directories; an unreadable one (a disk error, a bad copy, a sync tool)
is moved aside, never deleted, and rebuilt, with one line saying so;
``launch runs --reindex`` (``reindex``) does the same on demand.

Several launches may write at once (a sweep, or users in parallel): the database
runs in WAL mode, every write is one short transaction, and writers wait a few
seconds for the lock. Repairs hold ``<store>/.index.lock`` so two processes never
move aside each other's new index.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from launcher import console
from launcher.errors import IndexUnreadable, StoreError
from launcher.record import layout

COLUMNS = (
    "id",
    "path",
    "time",
    "task",
    "level",
    "seed",
    "status",
    "key_sha256",
    "metrics",
    "weights_sha256",
    "replay_of",
)
RUN_NAME = layout.RUN_ID  # runs.create's names: the one rule (layout.is_run_id)
WRITE_TIMEOUT_S = 5  # a run waits at most this long for a busy index, then moves on
READ_TIMEOUT_S = 30
FINAL = ("complete",)  # an index row in these states never changes again
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26


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


def _say(message: str) -> None:
    console.log.info("%s", message)


def _is_unreadable(exc: sqlite3.Error) -> bool:
    """Corrupt or not a database at all (not: locked, read-only, disk full)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    return type(exc) is sqlite3.DatabaseError


@contextmanager
def _connect(store_root: Path, timeout: float) -> Iterator[sqlite3.Connection]:
    """An open index (created when missing); ``IndexUnreadable`` when the file is damaged."""
    try:
        conn = sqlite3.connect(layout.StorePaths(store_root).index, timeout=timeout, isolation_level=None)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open run index in {store_root}: {exc}") from None
    try:
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, path TEXT, time TEXT, task TEXT,"
                " level TEXT, seed INTEGER, status TEXT, key_sha256 TEXT, metrics TEXT,"
                " weights_sha256 TEXT, replay_of TEXT)"
            )
            yield conn
        except sqlite3.DatabaseError as exc:
            if _is_unreadable(exc):
                raise IndexUnreadable(str(exc)) from None
            raise
    finally:
        conn.close()


def _write_rows(conn: sqlite3.Connection, rows: list[Row], replace_all: bool = False) -> None:
    placeholders = ", ".join("?" for _ in COLUMNS)
    conn.execute("BEGIN IMMEDIATE")
    try:
        if replace_all:
            conn.execute("DELETE FROM runs")
        conn.executemany(
            f"INSERT OR REPLACE INTO runs ({', '.join(COLUMNS)}) VALUES ({placeholders})",
            [[asdict(r)[c] for c in COLUMNS] for r in rows],
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _read_rows(conn: sqlite3.Connection) -> list[Row]:
    return [Row(*r) for r in conn.execute(f"SELECT {', '.join(COLUMNS)} FROM runs").fetchall()]


# ---------------------------------------------------------------- derived from the run directories
def run_dirs(store_root: Path) -> list[Path]:
    """The run directories of a store (named as ``runs.create`` names them, with a config)."""
    try:
        entries = list(store_root.iterdir())
    except OSError:
        return []
    return sorted(p for p in entries if RUN_NAME.fullmatch(p.name) and layout.RunPaths(p).config.is_file())


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def row_from_dir(run_dir: Path) -> Row | None:
    """The index row a run directory implies (None: not a readable run directory)."""
    import yaml

    from launcher.record.probe import key
    from launcher.record.store import runs

    paths = layout.RunPaths(run_dir)
    try:
        cfg = yaml.safe_load(paths.config.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(cfg, dict):
        return None
    try:
        started = _dt.datetime.strptime(run_dir.name[:15], "%Y%m%d-%H%M%S").astimezone()
    except ValueError:
        return None
    status = runs.effective_status(run_dir)
    state = status.get("state", "unknown")
    row = Row(
        id=run_dir.name,
        path=str(run_dir.absolute()),
        time=started.isoformat(timespec="seconds"),
        task=str((cfg.get("train") or {}).get("name", "?")),
        level=str((cfg.get("determinism") or {}).get("level", "?")),
        seed=cfg.get("seed") if isinstance(cfg.get("seed"), int) else None,
        status=state,
        replay_of=_json(paths.job).get("replay_of"),
    )
    if state == "complete":
        result = _json(paths.result)
        fp = _json(paths.fingerprint)
        try:
            row.key_sha256 = key.key_sha256(fp) if fp else None
        except (KeyError, TypeError):
            row.key_sha256 = None
        row.metrics = json.dumps(result.get("final_metrics") or {}, sort_keys=True)
        row.weights_sha256 = result.get("weights_sha256")
    return row


def derived_rows(store_root: Path) -> list[Row]:
    """Every run's row, from its directory alone (no index)."""
    return [r for r in map(row_from_dir, run_dirs(store_root)) if r is not None]


# ---------------------------------------------------------------- repair
@contextmanager
def _repair_lock(store_root: Path) -> Iterator[None]:
    from filelock import FileLock, Timeout

    try:
        with FileLock(str(layout.StorePaths(store_root).index_lock), timeout=READ_TIMEOUT_S):
            yield
    except Timeout:
        raise StoreError(f"the run index of {store_root} is being repaired by another process") from None


def _move_aside(store_root: Path) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    index = layout.StorePaths(store_root).index
    aside = store_root / f"{layout.INDEX}.unreadable-{stamp}"
    n = 1
    while aside.exists():
        n += 1
        aside = store_root / f"{layout.INDEX}.unreadable-{stamp}-{n}"
    os.replace(index, aside)
    for suffix in ("-wal", "-shm"):  # a damaged database's journal belongs with it
        side = store_root / (layout.INDEX + suffix)
        if side.exists():
            os.replace(side, Path(str(aside) + suffix))
    return aside


def _readable(store_root: Path) -> bool:
    try:
        with _connect(store_root, READ_TIMEOUT_S) as conn:
            conn.execute("SELECT count(*) FROM runs").fetchone()
        return True
    except IndexUnreadable:
        return False


def repair(store_root: Path, *, quiet_ids: frozenset[str] = frozenset(), force: bool = False) -> str | None:
    """Rebuild the index from the run directories when it is missing or unreadable (or ``force``).

    An unreadable index is moved aside to ``index.sqlite.unreadable-<time>``, never
    deleted. Returns the one line that says what was done (None: nothing was, or
    a new store whose only runs are ``quiet_ids``). Raises ``StoreError``/``OSError``
    /``sqlite3.Error`` when the store cannot be written.
    """
    store_root = Path(store_root)
    with _repair_lock(store_root):
        path = layout.StorePaths(store_root).index
        aside = None
        if path.exists():
            if _readable(store_root) and not force:
                return None  # someone else repaired it meanwhile, or it is fine
            if not _readable(store_root):
                aside = _move_aside(store_root)
        rows = derived_rows(store_root)
        with _connect(store_root, READ_TIMEOUT_S) as conn:
            _write_rows(conn, rows, replace_all=True)
    n = f"{len(rows)} run director{'y' if len(rows) == 1 else 'ies'}"
    if aside is not None:
        return f"the run index {path} was unreadable; moved it aside to {aside.name} and rebuilt it from {n}"
    if force:
        return f"rebuilt the run index {path} from {n}"
    if all(r.id in quiet_ids or r.status == "running" for r in rows):
        return None  # a new store (a sweep's first jobs start together): nothing to say
    return f"the run index {path} was missing; rebuilt it from {n}"


# ---------------------------------------------------------------- write
_warned: set[str] = set()


def record(store_root: Path, row: Row) -> None:
    """Insert or update ``row``; never raises: an index problem must not fail or block a run.

    A missing or unreadable index is rebuilt first. Any other failure (a full disk,
    a read-only store, a lock held too long) is reported once per store in one line;
    the next ``launch runs`` catches the index up from the run directories.
    """
    store_root = Path(store_root)
    try:
        if not layout.StorePaths(store_root).index.exists():
            _announce(repair(store_root, quiet_ids=frozenset({row.id})))
        try:
            with _connect(store_root, WRITE_TIMEOUT_S) as conn:
                _write_rows(conn, [row])
        except IndexUnreadable:
            _announce(repair(store_root))
            with _connect(store_root, WRITE_TIMEOUT_S) as conn:
                _write_rows(conn, [row])
    except (sqlite3.Error, OSError, StoreError, IndexUnreadable) as exc:
        if str(store_root) not in _warned:
            _warned.add(str(store_root))
            _say(
                f"the run index of {store_root} was not updated ({exc}); the run is not affected, "
                "and `launch runs` catches the index up"
            )


def _announce(line: str | None) -> None:
    if line:
        _say(line)


# ---------------------------------------------------------------- read
def query(
    store_root: Path,
    task: str | None = None,
    status: str | None = None,
    key: str | None = None,
    *,
    notes: list[str] | None = None,
) -> list[Row]:
    """Rows newest first, filtered by task, status and comparability-key prefix.

    The index is reconciled with the run directories first: runs it lacks are added,
    rows not yet final are re-read (a run that ended while its index write failed;
    one whose launcher died is ``abandoned``), rows of removed directories dropped.
    When the store is read-only the same answer is derived in memory. What was
    repaired is appended to ``notes`` (one line each).
    """
    store_root = Path(store_root)
    notes = notes if notes is not None else []
    rows = _reconciled(store_root, notes)
    out = [
        r
        for r in rows
        if (not task or r.task == task)
        and (not status or r.status == status)
        and (not key or (r.key_sha256 or "").startswith(key))
    ]
    return sorted(out, key=lambda r: (r.time, r.id), reverse=True)


def _reconciled(store_root: Path, notes: list[str]) -> list[Row]:
    dirs = {p.name: p for p in run_dirs(store_root)}
    try:
        index = layout.StorePaths(store_root).index
        if not index.exists() and not dirs:
            return []
        line = repair(store_root) if not index.exists() else None
        try:
            with _connect(store_root, READ_TIMEOUT_S) as conn:
                indexed = {r.id: r for r in _read_rows(conn)}
        except IndexUnreadable:
            line = repair(store_root)
            with _connect(store_root, READ_TIMEOUT_S) as conn:
                indexed = {r.id: r for r in _read_rows(conn)}
        if line:
            notes.append(line)
    except (sqlite3.Error, OSError, StoreError) as exc:
        notes.append(f"the run index of {store_root} cannot be used ({exc}); listed from the run directories")
        return derived_rows(store_root)
    fresh = []
    for name, run_dir in dirs.items():
        old = indexed.get(name)
        if old is not None and old.status in FINAL:
            continue
        new = row_from_dir(run_dir)
        if new is not None and (old is None or _changed(old, new)):
            if old is not None:
                new.time, new.path = old.time, old.path  # when it was indexed, where it ran
            fresh.append(new)
    gone = [name for name in indexed if name not in dirs]
    if fresh or gone:
        try:
            with _connect(store_root, WRITE_TIMEOUT_S) as conn:
                _write_rows(conn, fresh)
                conn.executemany("DELETE FROM runs WHERE id = ?", [(name,) for name in gone])
        except (sqlite3.Error, OSError, StoreError, IndexUnreadable):
            pass  # a read-only store: the answer below is still right
    rows = {name: row for name, row in indexed.items() if name in dirs}
    rows.update({r.id: r for r in fresh})
    return list(rows.values())


def _changed(old: Row, new: Row) -> bool:
    return (old.status, old.key_sha256, old.weights_sha256) != (new.status, new.key_sha256, new.weights_sha256)


def reindex(store_root: Path) -> str:
    """``launch runs --reindex``: the index recreated from the run directories; the line to print."""
    return repair(Path(store_root), force=True) or ""


def metrics_text(row: Row, limit: int = 2) -> str:
    metrics = json.loads(row.metrics or "{}")
    return " ".join(f"{k}={v:.4f}" for k, v in list(sorted(metrics.items()))[:limit])
