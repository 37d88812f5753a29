"""sha256 of files by content, remembered so a large data set is not rehashed on every launch.

The cache is a SQLite table in ``$XDG_CACHE_HOME/launch/filehash.sqlite`` (default
``~/.cache/launch``) keyed by the file's real path, device, inode, size, modification time
and status-change time in nanoseconds: a file rewritten in place gets a new mtime and is
hashed again, and so does one rewritten with its old mtime put back (``cp -p``, ``rsync``,
``unzip -o``), which the kernel cannot put back the ctime of.

A stat can only tell two contents apart if a change after the hash gives another ctime,
and timestamps are coarse: a kernel tick (1-10 ms before Linux 6.13's fine-grained
timestamps), a whole second on ext3, HFS+ and many NFS exports, two on FAT. A file whose
ctime was that recent when it was hashed (``RACY_NS``; ``RACY_COARSE_NS`` when its times are
whole seconds) could be replaced within the same tick with the same size and mtime, and the
stat would not change: its digest is not remembered (git's "racily clean" index entries).
Where the cache cannot be opened or written (a read-only home, a container), files are
simply hashed every time; the cache never changes a digest.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from launcher.record.hashing import file_sha256

# How old a file's ctime must be, when hashing starts, for its digest to be remembered: a change
# after that gets another ctime however coarse the clock (a 100 Hz tick is 10 ms; margin for a
# clock that is read late). Whole-second timestamps (ext3, HFS+, NFS; FAT's are 2 s) need more.
RACY_NS = 100_000_000
RACY_COARSE_NS = 3_000_000_000


def cache_path() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "launch" / "filehash.sqlite"


def stat_key(path: str, resolved: bool = False) -> tuple[str, int, int, int, int] | None:
    """What identifies a file's content without reading it; None when it cannot be stat'ed.
    ``resolved``: ``path`` is known to be real already (the native-read watch's), so it is not
    resolved again."""
    key = _stat(path, resolved)
    return None if key is None else key[:5]


def _stat(path: str, resolved: bool = False) -> tuple[str, int, int, int, int, int] | None:
    """``stat_key`` and the ctime, which no copy that keeps an mtime can keep (the cache's key)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    real = path if resolved else os.path.realpath(path)
    return real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def racy(mtime_ns: int, ctime_ns: int, now_ns: int) -> bool:
    """Whether a file with these times, hashed at ``now_ns``, could still change without its stat
    changing: its ctime is within one timestamp tick of now (``RACY_NS``, or ``RACY_COARSE_NS``
    where both times are whole seconds, so the file system keeps no finer ones)."""
    coarse = mtime_ns % 1_000_000_000 == 0 and ctime_ns % 1_000_000_000 == 0
    return now_ns - ctime_ns < (RACY_COARSE_NS if coarse else RACY_NS)


class FileHashes:
    """Content digests of files, cached by stat. Use as a context manager, or call ``close``."""

    def __init__(self, path: Path | None = None) -> None:
        self._db: sqlite3.Connection | None = None
        target = path or cache_path()
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(target, timeout=30, isolation_level=None)
            db.execute("PRAGMA journal_mode = WAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS files_v2 (path TEXT, dev INTEGER, ino INTEGER, size INTEGER,"
                " mtime_ns INTEGER, ctime_ns INTEGER, sha256 TEXT,"
                " PRIMARY KEY (path, dev, ino, size, mtime_ns, ctime_ns))"
            )
            self._db = db
        except (OSError, sqlite3.Error):
            self._db = None  # no cache: hash every time

    def sha256(self, path: str) -> str | None:
        """The file's sha256, or None when it is not a readable regular file."""
        started = time.time_ns()  # before the stat: "how recent" errs on the safe side
        key = _stat(path)
        if key is None or not os.path.isfile(path):
            return None
        cached = self._lookup(key)
        if cached:
            return cached
        try:
            digest = file_sha256(path)
        except OSError:
            return None
        if _stat(path) == key and not racy(key[4], key[5], started):  # unchanged while read, and settled
            self._store(key, digest)
        return digest

    def _lookup(self, key: tuple) -> str | None:
        if self._db is None:
            return None
        try:
            row = self._db.execute(
                "SELECT sha256 FROM files_v2 WHERE path=? AND dev=? AND ino=? AND size=? AND mtime_ns=? AND ctime_ns=?",
                key,
            ).fetchone()
        except sqlite3.Error:
            return None
        return row[0] if row else None

    def _store(self, key: tuple, digest: str) -> None:
        if self._db is None:
            return
        try:
            self._db.execute("DELETE FROM files_v2 WHERE path=?", key[:1])
            self._db.execute("INSERT OR REPLACE INTO files_v2 VALUES (?, ?, ?, ?, ?, ?, ?)", (*key, digest))
        except sqlite3.Error:
            pass

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> FileHashes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
