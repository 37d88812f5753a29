"""``launch gc`` removes nothing it cannot account for: a directory it cannot list, a store root that
is a run, a ``snapshot.json`` replay would refuse, a link to a run outside the store, each stops it
with one line (exit 2) before a single object is removed. Real stores on disk; the runs and
objects are made as tests/unit/test_gc.py makes them."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
import traceback
from pathlib import Path

import pytest

from launcher.cli import gc as _cli_gc  # noqa: F401 - imported before a child process drops its privileges
from launcher.cli import main as cli
from launcher.errors import ExitCode, StoreError
from launcher.record import layout
from launcher.record.store import gc, objects, runs
from tests.unit.test_gc import _object, _run, _sha

NOBODY = 65534


def _objects(store: Path) -> list[Path]:
    """Every object file of the store: what "nothing was removed" compares."""
    return sorted(p for p in (store / layout.OBJECTS).rglob("*") if p.is_file())


def _refused(store: Path, capsys, *names: str, code: int = ExitCode.ENVIRONMENT) -> str:
    """Run ``launch gc --store STORE``: it must exit ``code`` (8: what the store holds stops it; 2: what
    was given is no store) with one line naming ``names``, and remove nothing."""
    before = _objects(store)
    assert before, "a test store without objects proves nothing"
    ended = cli.main(["gc", "--store", str(store)])
    captured = capsys.readouterr()
    assert _objects(store) == before, captured.out
    assert ended == code
    err = captured.err.splitlines()
    assert len(err) == 1 and "nothing was removed" in err[0], captured.err
    assert all(name in err[0] for name in names), err[0]
    assert captured.out == ""  # no "removed ..." line either
    return err[0]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    path.mkdir()
    return path


# ---------------------------------------------------------------- 1. a directory the mark cannot list
@pytest.fixture
def open_store():
    """A store another user may enter: not below pytest's 0700 base directory (as root, the gc runs
    as ``nobody``). Every directory is made listable again afterwards, so it can be deleted."""
    home = Path(tempfile.mkdtemp(prefix="launch-gc-"))
    home.chmod(0o755)
    (home / "store").mkdir()
    yield home / "store"
    for current, dirs, _files in os.walk(home, onerror=lambda _exc: None):
        for name in dirs:
            if not os.path.islink(os.path.join(current, name)):
                os.chmod(os.path.join(current, name), 0o755)
    shutil.rmtree(home)


def _gc_as_another_user(store: Path) -> tuple[int, str, str]:
    """``launch gc --store STORE`` in a child process, as user ``nobody`` when this is root (root
    lists any directory whatever its mode): the real ``os.walk`` meets the real EACCES. Returns
    the exit code and what it printed on stdout and on stderr."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: it never returns into pytest
        os.close(read)
        try:
            if os.geteuid() == 0:
                try:
                    os.setgroups([])
                    os.setgid(NOBODY)
                    os.setuid(NOBODY)
                except PermissionError as exc:  # a root without CAP_SETUID: it could only list everything
                    raise SystemExit(f"SKIP cannot become user {NOBODY} here ({exc})") from None
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = cli.main(["gc", "--store", str(store)])
            said = json.dumps([code, out.getvalue(), err.getvalue()])
        except BaseException as exc:  # noqa: BLE001 - whatever happened, the parent reads it
            said = json.dumps([-1, "", str(exc) if isinstance(exc, SystemExit) else traceback.format_exc()])
        data = said.encode()
        while data:
            data = data[os.write(write, data) :]
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        said = f.read()
    os.waitpid(pid, 0)
    code, out, err = json.loads(said)
    if err.startswith("SKIP "):
        pytest.skip(err[len("SKIP ") :])
    return code, out, err


def _open_to_all(store: Path) -> None:
    """Let another user do whatever the store's owner can: list, read, and remove objects."""
    for current, dirs, files in os.walk(store):
        for name in dirs:
            os.chmod(os.path.join(current, name), 0o777)
        for name in files:
            path = os.path.join(current, name)
            os.chmod(path, os.stat(path).st_mode | 0o444)
    store.chmod(0o777)


@pytest.mark.parametrize("private", ["run directory", "snapshot.json"])
def test_a_run_the_gc_user_cannot_read_stops_the_gc(open_store, private):
    """Another user's private run in a shared store: ``os.walk`` skipped the directory in silence
    and every object of the run went, exit 0. A ``snapshot.json`` that cannot be read stops it too."""
    store = open_store
    theirs = _object(store, b"their private helper")
    _object(store, b"orphan")
    mine = _object(store, b"mine")
    _run(store, "interrupted", b"mine")
    private_run = _run(store, "interrupted", b"their private helper")
    _open_to_all(store)
    locked = private_run if private == "run directory" else private_run / layout.SNAPSHOT
    before = _objects(store)
    locked.chmod(0)
    try:
        code, out, err = _gc_as_another_user(store)
    finally:
        locked.chmod(0o755 if locked.is_dir() else 0o644)
    assert _objects(store) == before, out + err
    assert objects.object_path(store, theirs).is_file() and objects.object_path(store, mine).is_file()
    assert code == ExitCode.ENVIRONMENT and out == "", out + err  # the store as found here, not bad input
    assert len(err.splitlines()) == 1 and "nothing was removed" in err, err
    if private == "run directory":
        assert f"cannot list {private_run} (Permission denied)" in err and "a user who can read the whole store" in err
    else:
        assert f"cannot tell what {private_run.name} references" in err and str(locked) in err


def test_any_directory_the_walk_cannot_list_stops_the_gc(store, capsys, monkeypatch):
    """Not only a run: a directory of the store that may hold runs (``archive/``, listed, but not
    entered). The OS's refusal is simulated for that one directory; ``os.walk`` itself is real."""
    _object(store, b"orphan")
    _object(store, b"archived")
    _run(store, "complete", b"kept")
    _object(store, b"kept")
    archive = store / "archive"
    archive.mkdir()
    _run(archive, "interrupted", b"archived", name="old-run")
    real_scandir = os.scandir

    def scandir(path=".", *args):
        if os.fspath(path) == str(archive):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path, *args)

    monkeypatch.setattr(os, "scandir", scandir)
    _refused(store, capsys, f"cannot list {archive} (Permission denied)")


def test_a_run_deleted_while_the_mark_runs_is_no_refusal(store, monkeypatch):
    """A directory that vanished between its parent's listing and its own references nothing."""
    orphan = _object(store, b"orphan")
    kept = _object(store, b"kept")
    _run(store, "complete", b"kept")
    gone = _run(store, "interrupted", b"orphan")
    real_scandir = os.scandir

    def scandir(path=".", *args):
        if os.fspath(path) == str(gone):
            raise FileNotFoundError(2, "No such file or directory", os.fspath(path))
        return real_scandir(path, *args)

    monkeypatch.setattr(os, "scandir", scandir)
    assert [o.sha256 for o in gc.collect(store).removed] == [orphan]
    assert objects.object_path(store, kept).is_file()


def test_an_objects_directory_that_cannot_be_listed_is_one_line(store, capsys, monkeypatch):
    orphan = _object(store, b"orphan")
    fan = objects.object_path(store, orphan).parent
    real_scandir = os.scandir

    def scandir(path=".", *args):
        if os.fspath(path) == str(fan):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path, *args)

    monkeypatch.setattr(os, "scandir", scandir)
    assert cli.main(["gc", "--store", str(store)]) == ExitCode.ENVIRONMENT
    monkeypatch.undo()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"cannot list {fan} (Permission denied); nothing was removed" in err[0]
    assert objects.object_path(store, orphan).is_file()


# ---------------------------------------------------------------- 2. a store root that is a run
@pytest.mark.parametrize("marker", [layout.CONFIG, layout.FINGERPRINT, layout.MANIFEST])
def test_a_store_root_that_looks_like_a_run_is_refused(store, capsys, marker):
    """A ``config.yaml`` at the root made the whole store one run without a snapshot: every
    object went, exit 0."""
    for data in (b"a", b"b", b"orphan"):
        _object(store, data)
    _run(store, "complete", b"a")
    _run(store, "interrupted", b"b")
    (store / marker).write_text("seed: 0\n")
    _refused(
        store,
        capsys,
        repr(str(store)),
        "looks like a run directory, not a store",
        marker,
        "give the store (the directory holding the runs",
        code=ExitCode.USAGE,
    )
    assert not (store / layout.GC_LOCK).exists()


def test_gc_given_a_run_directory_writes_nothing_into_it(store, capsys):
    """``launch gc --store runs/<run>``: refused, naming the store it belongs to, and the sealed run
    is left as it was (no ``.gc.lock`` in it: the seal would no longer hold)."""
    run_dir = _run(store, "complete", b"a")
    _object(store, b"a")
    files = sorted(p.name for p in run_dir.iterdir())
    assert cli.main(["gc", "--store", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "looks like a run directory, not a store" in err and repr(str(store)) in err
    assert sorted(p.name for p in run_dir.iterdir()) == files
    runs.verify_seal(run_dir)


# ---------------------------------------------------------------- 3. a snapshot.json replay would refuse
SHA = _sha(b"helper")
WRONG_SHAPES = {
    "empty object": "{}",
    "files not a mapping": json.dumps({"schema": 1, "launch_dir": "/w", "files": "damaged"}),
    "a list": json.dumps([{"/w/helper.py": {"sha256": SHA, "role": "module"}}]),
    "another schema": json.dumps(
        {"schema": 2, "launch_dir": "/w", "files": [{"path": "/w/helper.py", "sha256": SHA, "role": "module"}]}
    ),
    "sha256 not 64 lowercase hex": json.dumps(
        {
            "schema": 1,
            "launch_dir": "/w",
            "left_out": {},
            "files": {"/w/helper.py": {"sha256": SHA.upper(), "role": "module"}},
        }
    ),
    "sha256 a path": json.dumps(
        {
            "schema": 1,
            "launch_dir": "/w",
            "left_out": {},
            "files": {"/w/helper.py": {"sha256": f"../../{SHA}", "role": "module"}},
        }
    ),
    "an unhashable role": json.dumps(
        {
            "schema": 1,
            "launch_dir": "/w",
            "left_out": {},
            "files": {"/w/helper.py": {"sha256": SHA, "role": ["module"]}},
        }
    ),
    "nested too deep": "[" * 200_000,
}


@pytest.mark.parametrize("content", WRONG_SHAPES.values(), ids=WRONG_SHAPES.keys())
def test_a_snapshot_of_the_wrong_shape_stops_the_gc(store, capsys, content):
    """Read as replay reads it (``snapshot.read``): what it refuses, the gc cannot tell the
    references of. Before, most of these referenced nothing, and the run's helper went."""
    _object(store, b"helper")
    _object(store, b"orphan")
    _object(store, b"kept")
    _run(store, "complete", b"kept")
    damaged = _run(store, "interrupted")
    (damaged / layout.SNAPSHOT).write_text(content)
    _refused(store, capsys, f"cannot tell what {damaged.name} references", "repair or delete that run")


def test_a_snapshot_read_as_replay_reads_it_is_the_mark(store):
    """A snapshot replay accepts still marks exactly its objects (``read_snapshot``)."""
    run_dir = _run(store, "interrupted", b"a", b"b")
    assert gc.references(gc.read_snapshot(run_dir)) == {_sha(b"a"), _sha(b"b")}
    (run_dir / layout.SNAPSHOT).unlink()  # deleted while the mark ran: references nothing
    assert gc.read_snapshot(run_dir) == {}
    (run_dir / layout.SNAPSHOT).write_text("[" * 200_000)
    with pytest.raises(StoreError, match="RecursionError|nested too deeply"):
        gc.read_snapshot(run_dir)


# ---------------------------------------------------------------- links: never followed out of the store
def test_a_snapshot_json_that_is_a_link_stops_the_gc(store, tmp_path, capsys):
    """Its target (outside the store) is never read: the run cannot be told, so nothing goes."""
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(
        json.dumps(
            {
                "schema": 1,
                "launch_dir": "/w",
                "left_out": {},
                "files": {"/w/a.py": {"sha256": _sha(b"a"), "role": "module"}},
            }
        )
    )
    _object(store, b"a")
    _object(store, b"orphan")
    run_dir = _run(store, "interrupted")
    (run_dir / layout.SNAPSHOT).unlink()
    (run_dir / layout.SNAPSHOT).symlink_to(elsewhere)
    _refused(store, capsys, f"cannot tell what {run_dir.name} references", "is a link")


@pytest.mark.parametrize("where", ["outside the store", "in a hidden directory of the store"])
def test_a_run_directory_that_is_a_link_to_a_run_the_mark_does_not_reach_stops_the_gc(store, tmp_path, capsys, where):
    """``<store>/far -> /elsewhere/run``: a replay of ``<store>/far`` reads this store's objects, but
    the gc does not follow the link to read the run's snapshot. Before, the link was skipped in
    silence and the run's objects went."""
    base = tmp_path / "elsewhere" if where == "outside the store" else store / ".stash"
    base.mkdir()
    far = _run(base, "complete", b"far helper", name="20260101-000000-abcdef")
    _object(store, b"far helper")
    _object(store, b"orphan")
    link = store / "far"
    link.symlink_to(far)
    outside_before = sorted(p for p in base.rglob("*"))
    _refused(store, capsys, f"{link} is a link to {os.path.realpath(far)}", "move the run into the store")
    assert sorted(p for p in base.rglob("*")) == outside_before
    runs.verify_seal(far)


def test_an_objects_directory_that_is_a_link_is_never_swept(store, tmp_path, capsys):
    """``<store>/objects -> /other/objects``: the sweep would remove the other store's objects,
    which none of this store's runs name."""
    other = tmp_path / "other"
    other.mkdir()
    _object(other, b"the other store's")
    _run(store, "complete")
    (store / layout.OBJECTS).symlink_to(other / layout.OBJECTS)
    _refused(store, capsys, f"{store / layout.OBJECTS} is a link", "inside the store only")
    assert objects.object_path(other, _sha(b"the other store's")).is_file()


def test_links_the_mark_reaches_or_with_no_run_behind_them_are_left_alone(store, tmp_path):
    """Not every link is refused: one to a run of the store (marked where it is), one to a
    directory that is no run, a dangling one, and the links of a sweep's code layout
    (``sweeps/<id>/code``, which mirror the user's directories) are simply not followed."""
    run_dir = _run(store, "complete", b"kept")
    kept = _object(store, b"kept")
    orphan = _object(store, b"orphan")
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.npz").write_bytes(b"x")
    conf = tmp_path / "project" / "conf"  # the user's Hydra configs: a config.yaml, and no run
    conf.mkdir(parents=True)
    (conf / "config.yaml").write_text("seed: 0\n")
    (store / "latest").symlink_to(run_dir.name)
    (store / "data").symlink_to(data)
    (store / "gone").symlink_to(tmp_path / "nothing")
    (store / "loop").symlink_to("loop")
    mirrored = store / "sweeps" / "20260101-000000-abcdef" / "code" / "project"
    mirrored.mkdir(parents=True)
    (mirrored / "conf").symlink_to(conf)
    report = gc.collect(store)
    assert [o.sha256 for o in report.removed] == [orphan] and report.runs == 1
    assert objects.object_path(store, kept).is_file()
    assert (data / "train.npz").read_bytes() == b"x" and (conf / "config.yaml").is_file()


# ---------------------------------------------------------------- the pure parts
def test_what_looks_like_a_run_and_which_links_the_mark_reaches():
    assert gc.run_marker(["objects", "index.sqlite", "20260101-000000-abcdef"]) is None
    assert gc.run_marker(["objects", "manifest.json", "config.yaml"]) == "config.yaml"
    assert gc.run_marker(iter(["fingerprint.json"])) == "fingerprint.json"
    assert gc.walked("/s", "/s") and gc.walked("/s", "/s/run") and gc.walked("/s", "/s/group/run")
    assert not gc.walked("/s", "/elsewhere/run") and not gc.walked("/s", "/s2/run") and not gc.walked("/s", "/")
    assert not gc.walked("/s", "/s/.stash/run") and not gc.walked("/s", "/s/group/.hidden")
    assert not gc.walked("/s", "/s/objects/ab") and gc.walked("/s", "/s/group/objects")
