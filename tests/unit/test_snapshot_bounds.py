"""What a run keeps is bounded (issue 40): at most ``store.snapshot_max_files`` files and
``store.snapshot_max_total_mb`` per run, chosen in one fixed order (code first, then data, each by
path); the job's checkpoints keep code only; and a run holds ``.gc.lock`` shared while it stores its
snapshot, so a ``launch gc`` never marks between its objects and its ``snapshot.json`` (no training:
the job reading 3,000 files that replays is tests/integration/test_snapshot_bounds.py)."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from launcher.errors import StoreBusy
from launcher.record import layout
from launcher.record.store import gc, keep, objects, snapshot

HOUR_AGO = time.time() - 3600
MB = 1 << 20


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _entry(role: str, n: int = 0) -> dict:
    return {"sha256": _sha(f"{role}{n}".encode()), "role": role}


def test_fit_keeps_code_first_then_data_by_path_under_the_file_cap():
    kept = {
        "/w/data/b.bin": _entry("data", 1),
        "/w/z_helper.py": _entry("module"),
        "/w/data/a.bin": _entry("data"),
        "/w/train.py": _entry("script"),
        "/w/conf/x.yaml": _entry("config"),
        "/w/data/c.bin": _entry("data", 2),
    }
    sizes = dict.fromkeys(kept, 10)
    chosen, left_out = snapshot.fit(kept, sizes, max_files=5, max_bytes=None)
    assert list(chosen) == ["/w/train.py", "/w/conf/x.yaml", "/w/z_helper.py", "/w/data/a.bin", "/w/data/b.bin"]
    assert left_out == {"/w/data/c.bin": "over store.snapshot_max_files (5 files kept per run)"}
    assert chosen["/w/data/a.bin"] == kept["/w/data/a.bin"]  # the entries as plan made them
    # the same files in another order: the same set (two runs keep the same files)
    again, _ = snapshot.fit(dict(reversed(list(kept.items()))), sizes, max_files=5, max_bytes=None)
    assert again == chosen
    assert snapshot.fit(kept, sizes, None, None) == (kept, {})  # no caps: everything
    nothing, out = snapshot.fit(kept, sizes, 0, None)
    assert nothing == {} and set(out) == set(kept)


def test_fit_leaves_out_what_would_take_the_total_past_its_cap_and_still_tries_smaller_files():
    kept = {
        "/w/train.py": _entry("script"),
        "/d/a.bin": _entry("data"),
        "/d/b.bin": _entry("data", 1),
        "/d/c.bin": _entry("data", 2),
        "/d/gone.bin": _entry("data", 3),
    }
    sizes = {"/w/train.py": MB, "/d/a.bin": 2 * MB, "/d/b.bin": 2 * MB, "/d/c.bin": MB // 2}  # gone.bin: no size
    chosen, left_out = snapshot.fit(kept, sizes, max_files=None, max_bytes=4 * MB)
    assert list(chosen) == ["/w/train.py", "/d/a.bin", "/d/c.bin", "/d/gone.bin"]
    assert left_out == {
        "/d/b.bin": f"{2 * MB} bytes, over store.snapshot_max_total_mb (4 MiB per run, {MB} bytes left)"
    }
    # both caps: a.bin and b.bin do not fit the bytes, c.bin does and is the second file, gone.bin the third
    chosen, left_out = snapshot.fit(kept, sizes, max_files=2, max_bytes=3 * MB // 2)
    assert list(chosen) == ["/w/train.py", "/d/c.bin"]
    assert {p: why.split(" (")[0].split(", ")[-1] for p, why in left_out.items()} == {
        "/d/a.bin": "over store.snapshot_max_total_mb",
        "/d/b.bin": "over store.snapshot_max_total_mb",
        "/d/gone.bin": "over store.snapshot_max_files",
    }


@pytest.fixture
def project(tmp_path: Path) -> dict:
    """A script, a helper and 12 data files of 100 bytes on disk, a run directory in a store, and the
    run's config and fingerprint as keep gets them."""
    work, store = tmp_path / "w", tmp_path / "store"
    (work / "data").mkdir(parents=True)
    (work / "train.py").write_bytes(b"script")
    (work / "helper.py").write_bytes(b"helper")
    data = {}
    for n in range(12):
        content = bytes([n]) * 100
        (work / "data" / f"f{n:02d}.bin").write_bytes(content)
        data[f"data/f{n:02d}.bin"] = _sha(content)
    run_dir = store / "20261126-000000-abcdef"
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text("seed: 0\n")
    fp = {
        "code": {
            "script_sha256": _sha(b"script"),
            "modules": {"helper": {"path": str(work / "helper.py"), "sha256": _sha(b"helper")}},
        },
        "data": data,
        "hardware": {},
    }
    return {"work": work, "store": store, "run_dir": run_dir, "fp": fp}


def _resolved(work: Path, **store) -> OmegaConf:
    return OmegaConf.create(
        {"train": {"name": "script", "script": str(work / "train.py")}, "store": {"snapshot_max_mb": 64, **store}}
    )


def test_a_run_keeps_at_most_its_caps_and_records_the_rest_as_left_out(project):
    work, run_dir = project["work"], project["run_dir"]
    taken = keep.keep_snapshot(run_dir, _resolved(work, snapshot_max_files=5), project["fp"], str(work))
    assert snapshot.read(run_dir) == taken
    assert set(taken["files"]) == {
        str(work / p) for p in ("train.py", "helper.py", "data/f00.bin", "data/f01.bin", "data/f02.bin")
    }
    assert taken["left_out"] == {
        str(work / f"data/f{n:02d}.bin"): "over store.snapshot_max_files (5 files kept per run)" for n in range(3, 12)
    }
    stored = [p for p in (project["store"] / layout.OBJECTS).rglob("*") if p.is_file()]
    assert len(stored) == 5  # nothing left out was stored
    # a cap of 0 MiB: nothing fits, not even the script
    taken = keep.keep_snapshot(run_dir, _resolved(work, snapshot_max_total_mb=0), project["fp"], str(work))
    assert taken["files"] == {} and len(taken["left_out"]) == 14
    assert "over store.snapshot_max_total_mb (0 MiB per run, 0 bytes left)" in taken["left_out"][str(work / "train.py")]
    # a run from before the caps existed: the defaults, which keep all 14 files
    taken = keep.keep_snapshot(
        run_dir,
        OmegaConf.create({"train": {"name": "script", "script": str(work / "train.py")}, "store": {}}),
        project["fp"],
        str(work),
    )
    assert len(taken["files"]) == 14 and taken["left_out"] == {}
    assert keep.caps(OmegaConf.create({"store": {"snapshot_max_files": None, "snapshot_max_total_mb": None}})) == (
        64 * MB,
        None,
        None,
    )


def test_the_jobs_checkpoints_keep_code_only(project):
    """What the job keeps before a checkpoint (code_only): its script and modules, never its data, which
    the launcher keeps after the job (a checkpoint does not wait for a dataset's copy)."""
    work, run_dir = project["work"], project["run_dir"]
    facts = {
        "software": {},
        "determinism": {},
        "data": project["fp"]["data"],
        "modules": project["fp"]["code"]["modules"],
    }
    fp = {**project["fp"], "data": {}}
    taken = keep.keep_so_far(run_dir, _resolved(work), fp, facts, str(work), code_only=True, wait_s=0)
    assert {p: e["role"] for p, e in taken["files"].items()} == {
        str(work / "train.py"): "script",
        str(work / "helper.py"): "module",
    }
    assert taken["left_out"] == {}
    assert len([p for p in (project["store"] / layout.OBJECTS).rglob("*") if p.is_file()]) == 2
    taken = keep.keep_so_far(run_dir, _resolved(work), fp, facts, str(work))  # the launcher, after the job
    assert len(taken["files"]) == 14


def test_the_job_never_waits_for_a_gc_and_the_launcher_waits_for_it_to_end(project):
    work, run_dir, store = project["work"], project["run_dir"], project["store"]
    facts = {"software": {}, "determinism": {}, "data": {}, "modules": project["fp"]["code"]["modules"]}
    with gc.store_lock(store, shared=False, wait_s=0):  # a gc runs
        started = time.monotonic()
        with pytest.raises(StoreBusy):
            keep.keep_so_far(run_dir, _resolved(work), project["fp"], facts, str(work), code_only=True, wait_s=0)
        assert time.monotonic() - started < 1
        assert not (run_dir / layout.SNAPSHOT).exists() and not (store / layout.OBJECTS).exists()
        taken: list[dict] = []
        launcher = threading.Thread(
            target=lambda: taken.append(keep.keep_snapshot(run_dir, _resolved(work), project["fp"], str(work)))
        )
        launcher.start()
        launcher.join(timeout=0.5)
        assert launcher.is_alive() and not (run_dir / layout.SNAPSHOT).exists()  # waiting for the gc
    launcher.join(timeout=10)
    assert len(taken[0]["files"]) == 14 and snapshot.read(run_dir) == taken[0]


def test_a_gc_never_marks_between_a_runs_objects_and_its_snapshot_json(project, monkeypatch):
    """The window issue 40 left: a run stored and refreshed its objects before a gc started, and writes
    its snapshot.json only after the gc's mark. With the run's shared hold of .gc.lock, the gc waits
    until snapshot.json is written, and keeps what it names."""
    work, run_dir, store = project["work"], project["run_dir"], project["store"]
    real_take = snapshot.take
    reports: list[gc.Report] = []
    collector: list[threading.Thread] = []

    def take_then_a_gc_starts(store_root, kept, left_out, launch_dir, root=None):
        taken = real_take(store_root, kept, left_out, launch_dir, root)
        for entry in taken["files"].values():  # stored and refreshed well before the gc started
            os.utime(objects.object_path(store_root, entry["sha256"]), (HOUR_AGO, HOUR_AGO))
        thread = threading.Thread(target=lambda: reports.append(gc.collect(store)))
        thread.start()
        thread.join(timeout=2)  # long enough for a whole gc of this store, were it not held off
        collector.append(thread)
        return taken

    monkeypatch.setattr(snapshot, "take", take_then_a_gc_starts)
    taken = keep.keep_snapshot(run_dir, _resolved(work), project["fp"], str(work))
    collector[0].join(timeout=10)
    assert reports and reports[0].removed == [] and reports[0].runs == 1
    for entry in taken["files"].values():
        assert objects.object_path(store, entry["sha256"]).is_file()


def test_a_run_stores_its_snapshot_without_the_hold_where_it_cannot_open_the_lock(project, monkeypatch):
    """A store the run may write objects to but whose lock file it cannot open: the hold is best effort."""
    work, run_dir, store = project["work"], project["run_dir"], project["store"]
    (store / layout.GC_LOCK).mkdir()  # cannot be opened as a file (even by root)
    taken = keep.keep_snapshot(run_dir, _resolved(work), project["fp"], str(work))
    assert len(taken["files"]) == 14


def test_a_refused_replay_names_the_cap_a_differing_unkept_file_was_over():
    from launcher.verdict import replay

    diffs = [("data.data/f1.bin", "a" * 64, "b" * 64), ("data.big.npz", "c" * 64, "d" * 64)]
    why = {
        "data/f1.bin": "over store.snapshot_max_files (1000 files kept per run)",
        "big.npz": "70000000 bytes, over store.snapshot_max_mb (64 MiB)",
    }
    text = replay.refusal(Path("/s/run"), diffs[:1], ["data/f1.bin"], left_out=why)
    assert text.endswith(
        "; data/f1.bin was not kept in the run (over store.snapshot_max_files): point the replay at "
        "a copy with --data data/f1.bin=PATH"
    )
    text = replay.refusal(Path("/s/run"), diffs, ["data/f1.bin", "big.npz"], left_out=why)
    assert "(over store.snapshot_max_files, store.snapshot_max_mb)" in text
    assert "(over store.snapshot_max_mb)" in replay.refusal(Path("/s/run"), diffs[1:], ["big.npz"])  # as before
    assert snapshot.cap_named("12 bytes, over store.snapshot_max_total_mb (0 MiB per run, 0 bytes left)") == (
        "store.snapshot_max_total_mb"
    )
