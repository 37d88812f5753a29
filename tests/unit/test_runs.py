import json
import multiprocessing
import os
import stat

import pytest

from launcher.errors import RunNotFound, SealError, StoreError
from launcher.record import hashing
from launcher.record.store import runs


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


@pytest.mark.parametrize("state, hint", [("failed", ""), ("interrupted", "; `launch resume {run_dir}` continues it")])
def test_an_unsealed_run_says_its_state_and_whether_resume_continues_it(tmp_path, state, hint):
    run_dir = _make_run(tmp_path)
    runs.set_status(run_dir, state)
    with pytest.raises(SealError) as info:
        runs.verify_seal(run_dir)
    assert str(info.value) == f"run {run_dir.name} is not complete (state: {state}; no manifest.json)" + hint.format(
        run_dir=run_dir
    )


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


# ---------------------------------------------------------------- the seal covers every file (issue 17)
def _make_run_with_hidden_files(store):
    run_dir = _make_run(store)
    runs.write_bytes(run_dir / "outputs" / ".state", b"step=3\n")  # a job's own hidden file
    runs.write_bytes(run_dir / "outputs" / "manifest.json", b"{}")  # a job's file named like the seal's
    debris = run_dir / "checkpoints" / ".tmp-epoch-000002"  # a checkpoint write a SIGKILL cut short
    debris.mkdir(parents=True)
    (debris / "state.index").write_bytes(b"torn")
    (run_dir / ".config.yaml.k3j2.tmp").write_bytes(b"seed: 1\n")  # an atomic write a SIGKILL cut short
    return run_dir


def test_the_seal_lists_hidden_files_and_leftovers_and_drops_the_reserve(tmp_path):
    run_dir = _make_run_with_hidden_files(tmp_path)
    assert (run_dir / runs.RESERVE).exists()  # every unsealed run has one (disk-full handling)
    manifest = runs.seal(run_dir)
    assert set(manifest["files"]) == {
        "config.yaml",
        "result.json",
        "status.json",
        "outputs/model.bin",
        "outputs/.state",
        "outputs/manifest.json",
        "checkpoints/.tmp-epoch-000002/state.index",
        ".config.yaml.k3j2.tmp",
    }
    assert not (run_dir / runs.RESERVE).exists()  # deleted before the listing: a sealed run has none
    assert manifest["files"]["outputs/.state"] == hashing.file_sha256(run_dir / "outputs" / ".state")
    assert runs.verify_seal(run_dir) == run_dir


@pytest.mark.parametrize(
    "name",
    ["outputs/.state", "outputs/manifest.json", ".config.yaml.k3j2.tmp", "checkpoints/.tmp-epoch-000002/state.index"],
)
def test_a_changed_hidden_file_is_refused(tmp_path, name):
    run_dir = _make_run_with_hidden_files(tmp_path)
    runs.seal(run_dir)
    _tamper(run_dir / name, b"tampered")
    with pytest.raises(SealError, match=f"was modified: {name} changed after sealing") as info:
        runs.verify_seal(run_dir)
    assert info.value.path == name and info.value.exit_code == 4


@pytest.mark.parametrize(
    "name",
    [
        ".added",
        "outputs/.added",
        runs.RESERVE,
        ".status.json.x1y2.tmp",
        "checkpoints/.tmp-epoch-000003/state.index",
        "outputs/sub/.deep",
    ],
)
def test_an_added_hidden_file_is_refused(tmp_path, name):
    run_dir = _make_run_with_hidden_files(tmp_path)
    runs.seal(run_dir)
    for directory in [run_dir, *(p for p in run_dir.rglob("*") if p.is_dir())]:
        directory.chmod(0o755)  # the files stay read-only and unchanged
    target = run_dir / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"x")
    with pytest.raises(SealError, match=f"{name} was added after sealing") as info:
        runs.verify_seal(run_dir)
    assert info.value.path == name


def test_a_removed_hidden_file_is_refused(tmp_path):
    run_dir = _make_run_with_hidden_files(tmp_path)
    runs.seal(run_dir)
    (run_dir / "outputs").chmod(0o755)
    (run_dir / "outputs" / ".state").unlink()
    with pytest.raises(SealError, match=r"outputs/\.state is missing") as info:
        runs.verify_seal(run_dir)
    assert info.value.path == "outputs/.state"


def test_a_run_whose_reserve_was_freed_seals(tmp_path):
    run_dir = _make_run(tmp_path)
    (run_dir / runs.RESERVE).unlink()  # freed on a full disk (set_status), or never made
    assert ".reserve" not in runs.seal(run_dir)["files"]
    assert runs.verify_seal(run_dir) == run_dir


def test_a_manifest_without_a_file_table_is_refused(tmp_path):
    run_dir = _make_run(tmp_path)
    runs.seal(run_dir)
    for manifest in ({"schema": runs.MANIFEST_SCHEMA, "files": ["config.yaml"]}, {"schema": runs.MANIFEST_SCHEMA}):
        _tamper(run_dir / "manifest.json", json.dumps(manifest).encode())
        with pytest.raises(SealError, match="unknown schema") as info:
            runs.verify_seal(run_dir)
        assert info.value.path == "manifest.json"


def test_the_manifest_format_is_schema_1_stored_runs_keep_verifying(tmp_path):
    run_dir = _make_run(tmp_path)
    manifest = runs.seal(run_dir)
    assert manifest["schema"] == 1 and set(manifest) == {"schema", "run", "files"} and manifest["run"] == run_dir.name
    assert json.loads((run_dir / "manifest.json").read_text()) == manifest
    files = {
        name: hashing.file_sha256(run_dir / name)
        for name in ("config.yaml", "outputs/model.bin", "result.json", "status.json")
    }
    _tamper(run_dir / "manifest.json", json.dumps({"schema": 1, "files": files}).encode())  # as a stored run has it
    assert runs.verify_seal(run_dir) == run_dir
