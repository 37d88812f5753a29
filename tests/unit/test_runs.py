import json
import multiprocessing
import os
import stat

import pytest

from launcher.errors import RunNotFound, SealError, StoreError
from launcher.record import runs


def _make_run(store):
    run_dir = runs.create(store)
    runs.write_bytes(run_dir / "config.yaml", b"seed: 1\n")
    runs.write_json(run_dir / "result.json", {"weights_sha256": "ab"})
    (run_dir / "outputs").mkdir()
    runs.write_bytes(run_dir / "outputs" / "model.bin", b"\x00\x01")
    return run_dir


def _create_many(store, n, queue):
    queue.put([runs.create(store).name for _ in range(n)])


def test_runs_started_at_once_from_many_processes_never_collide(tmp_path):
    queue = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=_create_many, args=(tmp_path, 50, queue)) for _ in range(4)]
    for p in procs:
        p.start()
    names = [name for _ in procs for name in queue.get(timeout=60)]
    for p in procs:
        p.join()
    assert len(names) == 200 and len(set(names)) == 200
    assert len(list(tmp_path.iterdir())) == 200


def test_unwritable_store_is_a_store_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot create store"):
        runs.create(blocker / "store")


def test_atomic_write_leaves_no_temporary_files(tmp_path):
    runs.write_json(tmp_path / "a.json", {"b": 1, "a": 2})
    assert os.listdir(tmp_path) == ["a.json"]
    assert (tmp_path / "a.json").read_text() == '{\n  "a": 2,\n  "b": 1\n}\n'


def test_seal_makes_the_run_complete_and_read_only(tmp_path):
    run_dir = _make_run(tmp_path)
    manifest = runs.seal(run_dir)
    assert set(manifest["files"]) == {"config.yaml", "result.json", "outputs/model.bin", "status.json"}
    assert runs.status(run_dir)["state"] == "complete"
    mode = (run_dir / "result.json").stat().st_mode
    assert not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    assert runs.verify_seal(run_dir) == run_dir


def _tamper(path, data: bytes):
    path.chmod(0o644)
    path.write_bytes(data)


def test_a_changed_file_is_named(tmp_path):
    run_dir = _make_run(tmp_path)
    runs.seal(run_dir)
    _tamper(run_dir / "outputs" / "model.bin", b"\x00\x02")
    with pytest.raises(SealError, match="outputs/model.bin changed after sealing") as info:
        runs.verify_seal(run_dir)
    assert info.value.path == "outputs/model.bin"


def test_a_removed_or_added_file_is_named(tmp_path):
    run_dir = _make_run(tmp_path)
    runs.seal(run_dir)
    run_dir.chmod(0o755)
    (run_dir / "extra.txt").write_text("x")
    with pytest.raises(SealError, match="extra.txt was added"):
        runs.verify_seal(run_dir)
    (run_dir / "extra.txt").unlink()
    (run_dir / "result.json").unlink()
    with pytest.raises(SealError, match="result.json is missing"):
        runs.verify_seal(run_dir)


def test_an_unsealed_run_is_incomplete(tmp_path):
    run_dir = _make_run(tmp_path)
    runs.set_status(run_dir, "failed", error="boom")
    with pytest.raises(SealError, match="not complete .state: failed"):
        runs.verify_seal(run_dir)


def test_not_a_run(tmp_path):
    with pytest.raises(RunNotFound, match="does not exist"):
        runs.verify_seal(tmp_path / "missing")
    with pytest.raises(RunNotFound, match="not a run directory"):
        runs.verify_seal(tmp_path)


def test_a_corrupt_manifest_is_refused(tmp_path):
    run_dir = _make_run(tmp_path)
    runs.seal(run_dir)
    _tamper(run_dir / "manifest.json", b"{not json")
    with pytest.raises(SealError, match="not readable JSON"):
        runs.verify_seal(run_dir)
    _tamper(run_dir / "manifest.json", json.dumps({"schema": 99, "files": {}}).encode())
    with pytest.raises(SealError, match="unknown schema"):
        runs.verify_seal(run_dir)
