"""The code snapshot: which files a run keeps, how they are stored and laid out again (no training)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from launcher.errors import SnapshotError
from launcher.record import layout
from launcher.record.store import objects, snapshot


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fp(**code) -> dict:
    return {
        "code": {
            "script_sha256": _sha(b"script"),
            **code,
            "modules": {"helper": {"path": "/w/helper.py", "sha256": _sha(b"helper")}},
        },
        "config_files": {"conf/train/mine.yaml": _sha(b"conf")},
        "data": {
            "digits.npz": _sha(b"small"),
            "/big/all.npz": _sha(b"big"),
            "launcher/data/mnist-sample.npz": _sha(b"sample"),
            "moving.csv": "changed while the job ran (r)",
        },
    }


def test_plan_keeps_code_config_and_small_data_and_says_why_not_the_rest():
    kept, left_out = snapshot.plan(
        _fp(),
        "/w",
        "/w/train.py",
        "/w/conf",
        {"/w/digits.npz": 5, "/big/all.npz": 100, "/w/moving.csv": 1},
        max_bytes=10,
    )
    assert {p: e["role"] for p, e in kept.items()} == {
        "/w/train.py": "script",
        "/w/helper.py": "module",
        "/w/conf/conf/train/mine.yaml": "config",
        "/w/digits.npz": "data",
    }
    assert kept["/w/digits.npz"]["sha256"] == _sha(b"small")
    assert "over store.snapshot_max_mb" in left_out["/big/all.npz"]
    assert "changed while the job ran" in left_out["/w/moving.csv"]  # never a copy of something else
    assert "/w/launcher/data/mnist-sample.npz" not in kept  # the launcher's own data


def test_rooted_and_unrooted_are_inverse_inside_the_layout(tmp_path):
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "train.py").write_text("x")
    root = str(tmp_path)
    assert snapshot.rooted("/w/train.py", root) == f"{root}/w/train.py"
    assert snapshot.rooted("/w/absent.py", root) == "/w/absent.py"  # not laid out: where it was
    assert snapshot.rooted("relative.py", root) == "relative.py"
    assert snapshot.rooted("/w/train.py", None) == "/w/train.py"
    assert snapshot.unrooted(f"{root}/w/train.py", root) == "/w/train.py"
    assert snapshot.unrooted(f"{root}x/w/train.py", root) == f"{root}x/w/train.py"  # a sibling is not inside
    facts = {"modules": {"h": {"path": f"{root}/w/h.py", "sha256": "1"}}, "data": {f"{root}/d.npz": "2", "r.npz": "3"}}
    out = snapshot.unroot_facts(facts, root)
    assert out["modules"]["h"]["path"] == "/w/h.py" and out["data"] == {"/d.npz": "2", "r.npz": "3"}
    assert snapshot.rooted_pythonpath(f"/w:/lib:{root}", root, keep=[root]) == f"{root}/w:/lib:{root}"


def test_objects_are_stored_once_checked_and_laid_out(tmp_path):
    store, work = tmp_path / "store", tmp_path / "work"
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_bytes(b"print(1)\n")
    digest = _sha(b"print(1)\n")
    assert objects.put(store, str(src / "train.py"), digest)
    assert objects.put(store, str(src / "train.py"), digest)  # already there: nothing written twice
    assert not objects.put(store, str(src / "train.py"), _sha(b"what ran"))  # changed since: not kept
    assert len([p for p in store.rglob("*") if p.is_file()]) == 1
    taken = snapshot.take(
        store,
        {
            str(src / "train.py"): {"sha256": digest, "role": "script"},
            str(src / "gone.py"): {"sha256": _sha(b"gone"), "role": "module"},
        },
        {},
        str(src),
    )
    assert list(taken["files"]) == [str(src / "train.py")] and str(src / "gone.py") in taken["left_out"]
    snapshot.materialize(store, taken, work)
    assert (work / str(src / "train.py").lstrip("/")).read_bytes() == b"print(1)\n"

    obj = objects.object_path(store, digest)
    obj.chmod(0o644)
    obj.write_bytes(b"tampered")
    with pytest.raises(SnapshotError, match="damaged"):
        snapshot.materialize(store, taken, tmp_path / "again")
    obj.unlink()
    with pytest.raises(SnapshotError, match="missing"):
        snapshot.materialize(store, taken, tmp_path / "third")


def test_a_sweep_lays_out_code_and_links_the_rest(tmp_path):
    project = tmp_path / "p"
    (project / "pkg").mkdir(parents=True)
    (project / ".venv").mkdir()
    (project / ".venv" / "x.py").write_text("")
    (project / "runs").mkdir()
    (project / "train.py").write_text("a")
    (project / "pkg" / "mod.py").write_text("b")
    (project / "pkg" / "table.csv").write_text("c")
    (project / "data.npz").write_text("d")
    dest = tmp_path / "code"
    copied = snapshot.lay_out_code(dest, [str(project)], str(project), skip=[project / "runs"])
    inside = dest / str(project).lstrip("/")
    assert copied == 2
    assert not (inside / "train.py").is_symlink() and (inside / "train.py").read_text() == "a"
    assert os.readlink(inside / "data.npz") == str(project / "data.npz")
    assert os.readlink(inside / "pkg" / "table.csv") == str(project / "pkg" / "table.csv")
    assert not os.path.lexists(inside / "runs")  # never the store itself
    (project / "train.py").write_text("edited")
    assert (inside / "train.py").read_text() == "a"


def test_code_tree_is_bounded(tmp_path):
    for i in range(5):
        (tmp_path / f"m{i}.py").write_text("")
        (tmp_path / f"d{i}").mkdir()
        (tmp_path / f"d{i}" / "x.py").write_text("")
    assert len(snapshot.code_tree(str(tmp_path), max_files=3)) == 3
    assert len(snapshot.code_tree(str(tmp_path), max_dirs=2)) == 6  # the top directory's five, one below


def test_remove_deletes_a_layout_the_job_made_read_only(tmp_path):
    dest = tmp_path / "w"
    (dest / "a").mkdir(parents=True)
    (dest / "a" / "f").write_text("x")
    (dest / "a").chmod(0o555)
    snapshot.remove(dest)
    assert not dest.exists()


def test_read_refuses_a_damaged_snapshot_file(tmp_path):
    assert snapshot.read(tmp_path) is None
    (tmp_path / layout.SNAPSHOT).write_text("{not json")
    with pytest.raises(SnapshotError):
        snapshot.read(tmp_path)
    (tmp_path / layout.SNAPSHOT).write_text('{"schema": 99, "files": {}}')
    with pytest.raises(SnapshotError, match="unknown schema"):
        snapshot.read(Path(tmp_path))


def test_changed_since_names_kept_files_edited_or_deleted_since(tmp_path):
    same, edited, gone = tmp_path / "same.py", tmp_path / "edited.py", tmp_path / "gone.py"
    same.write_bytes(b"a")
    edited.write_bytes(b"b, edited")
    files = {str(same): {"sha256": _sha(b"a")}, str(edited): {"sha256": _sha(b"b")}, str(gone): {"sha256": _sha(b"c")}}
    assert snapshot.changed_since(files) == sorted([str(edited), str(gone)])


def test_an_unfinished_run_keeps_its_code_only_when_the_job_named_its_modules(tmp_path):
    """keep_so_far: user code's facts (with modules) keep a snapshot; the mnist task's none; a store
    the job cannot write leaves none, without failing the job."""
    from omegaconf import OmegaConf

    from launcher.record.store import keep

    work, store = tmp_path / "w", tmp_path / "store"
    work.mkdir()
    (work / "train.py").write_bytes(b"script")
    (work / "helper.py").write_bytes(b"helper")
    run_dir = store / "20261125-000000-abcdef"
    run_dir.mkdir(parents=True)
    resolved = OmegaConf.create(
        {"train": {"name": "script", "script": str(work / "train.py")}, "store": {"snapshot_max_mb": 64}}
    )
    fp = {"code": {"script_sha256": _sha(b"script")}, "data": {}, "hardware": {}}
    facts = {
        "software": {},
        "determinism": {},
        "data": {},
        "modules": {"helper": {"path": str(work / "helper.py"), "sha256": _sha(b"helper")}},
    }
    assert keep.keep_so_far(run_dir, resolved, fp, {**facts, "modules": None}, str(work)) is None
    assert not (run_dir / layout.SNAPSHOT).exists()
    taken = keep.keep_so_far(run_dir, resolved, fp, facts, str(work))
    assert {p: e["role"] for p, e in taken["files"].items()} == {
        str(work / "train.py"): "script",
        str(work / "helper.py"): "module",
    }
    assert snapshot.read(run_dir) == taken
    (run_dir / layout.SNAPSHOT).unlink()
    snapshot.remove(store / layout.OBJECTS)
    (store / layout.OBJECTS).write_text("not a directory")  # a store the job cannot write (even as root)
    assert keep.keep_so_far(run_dir, resolved, fp, facts, str(work)) is None
    assert not (run_dir / layout.SNAPSHOT).exists()
