"""``launch gc``: the objects no run references are removed, every other one kept, also while
other launches write to the store (no training; the replay after a gc is in
tests/integration/test_store_gc.py)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from launcher.cli import main as cli
from launcher.errors import ExitCode
from launcher.record import layout
from launcher.record.store import gc, objects, snapshot
from tests import factories

HOUR_AGO = time.time() - 3600


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _object(store: Path, data: bytes, age: float | None = HOUR_AGO) -> str:
    """Store ``data`` as an object, its mtime ``age`` (an hour ago: stored by some earlier run)."""
    src = store.parent / f"src-{_sha(data)[:8]}"
    src.write_bytes(data)
    assert objects.put(store, str(src), _sha(data))
    src.unlink()
    if age is not None:
        os.utime(objects.object_path(store, _sha(data)), (age, age))
    return _sha(data)


def _run(store: Path, state: str, *kept: bytes, name: str | None = None) -> Path:
    """A run directory in ``state`` whose snapshot names ``kept`` (sealed when complete; the objects
    are the test's to store, or not)."""
    files = {f"/w/f{n}.py": {"sha256": _sha(data), "role": "module"} for n, data in enumerate(kept)}
    snap = {"schema": 1, "launch_dir": "/w", "files": files, "left_out": {}}
    return factories.sealed_run(
        store, name, config="seed: 0\n", snapshot_json=snap, state=state, status={"pid": os.getpid()}
    )


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    path.mkdir()
    return path


def test_gc_removes_what_no_run_references_and_keeps_what_any_run_does(store, capsys):
    kept = {state: _object(store, state.encode()) for state in ("complete", "failed", "interrupted", "running")}
    for state in kept:
        _run(store, state, state.encode())
    renamed = _object(store, b"renamed")
    _run(store, "complete", b"renamed", name="baseline")  # a run the user renamed still counts
    orphan = _object(store, b"x" * 3000)
    deleted_run = _run(store, "complete", b"x" * 3000)
    snapshot.remove(deleted_run)  # deleting a run leaves its objects behind
    assert cli.main(["gc", "--store", str(store)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"removed {orphan} (2.9 KiB)"
    assert out[1] == "launch gc: removed 1 object(s), freed 2.9 KiB; 5 object(s) kept, the snapshots of 5 run(s) read"
    assert not objects.object_path(store, orphan).exists()
    for sha in [*kept.values(), renamed]:
        assert objects.object_path(store, sha).is_file()
    assert cli.main(["gc", "--store", str(store)]) == 0
    assert capsys.readouterr().out.startswith("launch gc: removed 0 object(s), freed 0 B")


def test_dry_run_removes_nothing_and_says_what_it_would(store, capsys):
    orphan = _object(store, b"orphan")
    _run(store, "complete", b"kept")
    _object(store, b"kept")
    assert cli.main(["gc", "--store", str(store), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"would remove {orphan} (6 B)",
        "launch gc: would remove 1 object(s), would free 6 B; 1 object(s) kept, the snapshots of 1 run(s) read",
    ]
    assert objects.object_path(store, orphan).is_file()


def test_an_object_stored_after_the_mark_started_survives(store, monkeypatch):
    old = _object(store, b"old orphan")
    real_mark = gc.mark
    new: list[str] = []

    def mark_while_a_run_stores(store_root: Path):
        if not new:  # another launch stores an object while the mark reads the runs
            new.append(_object(store, b"stored during the gc", age=None))
        return real_mark(store_root)

    monkeypatch.setattr(gc, "mark", mark_while_a_run_stores)
    report = gc.collect(store)
    assert [o.sha256 for o in report.removed] == [old]
    assert objects.object_path(store, new[0]).is_file()


def test_an_object_a_run_reuses_or_names_while_the_gc_runs_survives(store, monkeypatch):
    reused, named, orphan = (_object(store, data) for data in (b"reused", b"named", b"orphan"))
    source = store.parent / "reused.py"
    source.write_bytes(b"reused")
    real_list = gc.stored_objects

    def listed_then_a_run_writes(store_root: Path):
        listed = real_list(store_root)
        # after the listing: one run takes its snapshot (reusing an object), another writes its snapshot.json
        snapshot.take(store, {str(source): {"sha256": reused, "role": "module"}}, {}, "/w")
        _run(store, "running", b"named")
        return listed

    monkeypatch.setattr(gc, "stored_objects", listed_then_a_run_writes)
    report = gc.collect(store)
    assert [o.sha256 for o in report.removed] == [orphan]
    assert objects.object_path(store, reused).is_file() and objects.object_path(store, named).is_file()


def test_a_run_whose_reused_object_a_gc_removed_meanwhile_stores_it_again(store, monkeypatch):
    sha = _object(store, b"helper")
    source = store.parent / "helper.py"
    source.write_bytes(b"helper")
    real_put = objects.put
    calls = []

    def put_then_a_gc_removes_it(store_root, path, digest):
        calls.append(digest)
        kept = real_put(store_root, path, digest)  # already there: reused, nothing written...
        if len(calls) == 1:
            objects.object_path(store, digest).unlink()  # ...and a gc removes it before the snapshot is written
        return kept

    monkeypatch.setattr(objects, "put", put_then_a_gc_removes_it)
    taken = snapshot.take(store, {str(source): {"sha256": sha, "role": "module"}}, {}, "/w")
    assert list(taken["files"]) == [str(source)] and objects.object_path(store, sha).is_file()
    assert calls == [sha, sha]


def test_a_snapshot_that_cannot_be_read_stops_the_gc_before_anything_is_removed(store, capsys):
    orphan = _object(store, b"orphan")
    run_dir = _run(store, "interrupted")
    (run_dir / layout.SNAPSHOT).write_text("{truncated")
    assert cli.main(["gc", "--store", str(store)]) == ExitCode.ENVIRONMENT  # the store as found, not what was typed
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"cannot tell what {run_dir.name} references" in err[0] and "nothing was removed" in err[0]
    assert objects.object_path(store, orphan).is_file()


def test_only_objects_are_swept(store):
    _object(store, b"orphan")
    fans = store / layout.OBJECTS
    (fans / "ab").mkdir(exist_ok=True)
    strays = [fans / "ab" / ".obj.x.tmp", fans / "ab" / ("cd" * 32), fans / "README", store / "notes.txt"]
    for stray in strays:  # a write in progress, a misplaced name, the user's own files
        stray.write_text("x")
        os.utime(stray, (HOUR_AGO, HOUR_AGO))
    (store / ".replay-abc" / "w").mkdir(parents=True)  # a replay's layout holds no references
    (store / ".replay-abc" / "w" / layout.SNAPSHOT).write_text("not json")
    assert len(gc.collect(store).removed) == 1
    assert all(stray.exists() for stray in strays)


def test_gc_refuses_a_missing_store_and_a_second_gc(store, tmp_path, capsys, monkeypatch):
    assert cli.main(["gc", "--store", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    monkeypatch.setattr(gc, "WAIT_S", 0.2)  # how long it waits for the other to end
    with gc.store_lock(store, shared=False, wait_s=0):
        assert cli.main(["gc", "--store", str(store)]) == ExitCode.ENVIRONMENT  # busy: try again
    err = capsys.readouterr().err
    assert "is busy" in err and "another launch gc" in err


def test_gc_says_a_store_that_is_a_file_is_not_a_directory(store, tmp_path, capsys):
    """Not "does not exist": it does, and is the wrong thing. Left as it was."""
    file = tmp_path / "runs.tar"
    file.write_bytes(b"an archive, not a store")
    assert cli.main(["gc", "--store", str(file)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"store {str(file)!r} is not a directory" in err[0] and "does not exist" not in err[0]
    assert "give the store (the directory holding the runs)" in err[0]
    assert file.read_bytes() == b"an archive, not a store"
    assert cli.main(["gc", "--store", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_the_pure_parts():
    sha = _sha(b"a")
    assert gc.references({"files": {"/a": {"sha256": sha}, "/b": {"sha256": "../x"}, "/c": "junk"}}) == {sha}
    assert gc.references({"files": []}) == set()
    now = time.time()
    objs = [gc.StoredObject(s, Path(s), 1, t) for s, t in ((sha, now - 10), (_sha(b"b"), now - 10), (_sha(b"c"), now))]
    assert [o.sha256 for o in gc.unreferenced(objs, {sha}, now)] == [_sha(b"b")]
    assert [gc.human(n) for n in (0, 1023, 1536, 5 << 20, 3 << 40)] == [
        "0 B",
        "1023 B",
        "1.5 KiB",
        "5.0 MiB",
        "3.0 TiB",
    ]
