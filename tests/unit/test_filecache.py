"""The file-hash cache (launcher.record.filecache): real files, a real SQLite cache."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time

from launcher.record.filecache import FileHashes


def test_an_unchanged_file_is_read_from_the_cache(tmp_path):
    data, cache = tmp_path / "small.npz", tmp_path / "cache" / "filehash.sqlite"
    data.write_bytes(b"v1")
    time.sleep(0.2)  # older than a timestamp tick: a just-written file is not remembered (filecache.RACY_NS)
    with FileHashes(cache) as hashes:
        assert hashes.sha256(str(data)) == hashlib.sha256(b"v1").hexdigest()
    with sqlite3.connect(cache) as db:
        db.execute("UPDATE files_v2 SET sha256 = 'from the cache'")
    with FileHashes(cache) as hashes:
        assert hashes.sha256(str(data)) == "from the cache"


def test_a_file_rewritten_with_its_size_and_mtime_put_back_is_hashed_again(tmp_path):
    """``cp -p``, ``rsync`` and ``unzip -o`` put an mtime back; the ctime cannot be put back.
    A stale digest here was a false "determinism bug" and a replay of the wrong data."""
    data, cache = tmp_path / "small.npz", tmp_path / "filehash.sqlite"
    data.write_bytes(b"v1")
    os.utime(data, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    with FileHashes(cache) as hashes:
        assert hashes.sha256(str(data)) == hashlib.sha256(b"v1").hexdigest()
    data.write_bytes(b"v2")  # same size, same inode
    os.utime(data, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    with FileHashes(cache) as hashes:
        assert hashes.sha256(str(data)) == hashlib.sha256(b"v2").hexdigest()
