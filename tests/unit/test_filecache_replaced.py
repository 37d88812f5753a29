"""The file-hash cache across a replaced file (issue 39): a data file replaced by ``mv``, by
``cp``, or rewritten in place with its size and mtime put back is hashed again, never served
the old file's digest. Real files and a real SQLite cache; on a file system with whole-second
timestamps (ext3, HFS+, many NFS exports), simulated by cutting the cache's stat to seconds,
the replacement's stat can equal the old file's, and only not remembering a file hashed in its
first timestamp tick keeps the digest true."""

from __future__ import annotations

import hashlib
import os
import shutil
import time

import pytest

from launcher.record import filecache
from launcher.record.filecache import FileHashes

SIZE = 4096


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _replace_by_mv(path, new: bytes, tmp) -> None:
    """``rm data; make > new; mv new data``: the freed inode is reused (ext4 does at once)."""
    st = os.stat(path)
    os.unlink(path)
    staged = tmp / "staged.bin"
    staged.write_bytes(new)
    os.utime(staged, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(staged, path)


def _replace_by_cp(path, new: bytes, tmp) -> None:
    """``cp -p other data``: the same inode, its content copied over, the mtime put back."""
    st = os.stat(path)
    other = tmp / "other.bin"
    other.write_bytes(new)
    shutil.copyfile(other, path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _replace_in_place(path, new: bytes, tmp) -> None:
    """Rewritten in place (``r+b``), the same size, the mtime put back with ``os.utime``."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.write(new)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


WAYS = {"mv": _replace_by_mv, "cp": _replace_by_cp, "in place": _replace_in_place}


def _replaced_many_times(tmp_path, replace) -> list[tuple[str, str]]:
    """(digest the cache gave, digest of the content) after each of 20 replacements, each
    hashed right after it was made, as a launch right after a data refresh does."""
    path, cache = tmp_path / "data.bin", tmp_path / "filehash.sqlite"
    path.write_bytes(bytes([0]) * SIZE)
    out = []
    for i in range(1, 21):
        with FileHashes(cache) as hashes:
            hashes.sha256(str(path))
        content = bytes([i]) * SIZE
        replace(path, content, tmp_path)
        assert os.stat(path).st_size == SIZE
        with FileHashes(cache) as hashes:
            out.append((hashes.sha256(str(path)), _sha(content)))
    return out


@pytest.mark.parametrize("way", WAYS)
def test_a_replaced_file_is_hashed_again(tmp_path, way):
    """This machine's file system, as it stamps times."""
    got = _replaced_many_times(tmp_path, WAYS[way])
    assert [given for given, _ in got] == [true for _, true in got]


@pytest.mark.parametrize("way", WAYS)
def test_a_replaced_file_is_hashed_again_where_timestamps_are_whole_seconds(tmp_path, monkeypatch, way):
    """The stat the cache sees, cut to whole seconds: a replacement within the same second has
    the same stat key as the file it replaced (same path, inode, size, mtime and ctime)."""
    real = filecache._stat

    def whole_seconds(path: str, resolved: bool = False):
        key = real(path, resolved)
        return None if key is None else (*key[:4], key[4] // 10**9 * 10**9, key[5] // 10**9 * 10**9)

    monkeypatch.setattr(filecache, "_stat", whole_seconds)
    got = _replaced_many_times(tmp_path, WAYS[way])
    assert [given for given, _ in got] == [true for _, true in got]


def test_a_settled_file_is_remembered_and_a_fresh_one_is_not(tmp_path):
    cache = tmp_path / "filehash.sqlite"
    fresh, settled = tmp_path / "fresh.bin", tmp_path / "settled.bin"
    settled.write_bytes(b"settled")
    time.sleep(filecache.RACY_NS / 1e9 + 0.05)
    fresh.write_bytes(b"fresh")
    with FileHashes(cache) as hashes:
        assert hashes.sha256(str(fresh)) == _sha(b"fresh")
        assert hashes.sha256(str(settled)) == _sha(b"settled")
    import sqlite3

    with sqlite3.connect(cache) as db:
        assert [row[0] for row in db.execute("SELECT path FROM files_v2")] == [os.path.realpath(settled)]


def test_which_times_are_too_recent_to_trust():
    second = 10**9
    now = 1_800_000_000 * second + 500_000_000
    assert filecache.racy(now - 10**6, now - 10**6, now)  # written a millisecond ago
    assert not filecache.racy(now - 10**6, now - filecache.RACY_NS, now)
    assert filecache.racy(1_800_000_000 * second, 1_800_000_000 * second, now)  # whole seconds: one may be late
    assert not filecache.racy(1_799_999_990 * second, 1_799_999_990 * second, now)
