"""Crafted runs (issue 40): a snapshot that would lay files out anywhere, an object name that is a
path, a link out of the run, a forged snapshot of an unsealed run. Each is refused before
anything is written, in one line with exit 2, and nothing appears outside the destination;
and the store keeps a private file private (no training)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from launcher.cli import main as cli
from launcher.errors import SnapshotError, UnsafeRun
from launcher.record import layout
from launcher.record.store import objects, runs, snapshot
from launcher.run import resume
from tests import factories
from tests.conftest import run_launch

EVIL = b"print('owned')\n"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tree(top: Path) -> dict[str, tuple]:
    """Everything below ``top`` (links not followed): name -> (kind, mode, size, content digest)."""
    out = {}
    for current, dirs, files in os.walk(top):
        for name in [*dirs, *files]:
            path = Path(current) / name
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[str(path.relative_to(top))] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[str(path.relative_to(top))] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                out[str(path.relative_to(top))] = ("file", stat.S_IMODE(st.st_mode), _sha(path.read_bytes()))
    return out


def _store(tmp_path: Path) -> Path:
    """A store holding one object: ``EVIL``'s bytes."""
    store = tmp_path / "store"
    store.mkdir()
    src = tmp_path / "evil-src.py"
    src.write_bytes(EVIL)
    assert objects.put(store, str(src), _sha(EVIL))
    src.unlink()
    return store


def _escape(tmp_path: Path) -> str:
    """A recorded path that, joined onto any destination below ``/``, names ``tmp_path/escape/evil.py``."""
    return "/" + "../" * 40 + str(tmp_path / "escape" / "evil.py").lstrip("/")


def _sealed_run(store: Path, snap: dict) -> Path:
    # a forged run re-seals in one line: the seal proves nothing about its author
    config = "seed: 0\ntrain:\n  name: script\n  script: /w/train.py\n"
    return factories.sealed_run(store, config=config, fingerprint={"schema": 3}, snapshot_json=snap)


def _snap(files: dict, launch_dir: str = "/w") -> dict:
    return {"schema": snapshot.SCHEMA, "launch_dir": launch_dir, "files": files, "left_out": {}}


# ---------------------------------------------------------------- a traversal path
def test_launch_replay_refuses_a_traversal_path_in_one_line_with_exit_2_and_writes_nothing(tmp_path):
    store = _store(tmp_path)
    run_dir = _sealed_run(store, _snap({_escape(tmp_path): {"sha256": _sha(EVIL), "role": "script"}}))
    before = _tree(tmp_path)
    done = run_launch("replay", str(run_dir))
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("launch: error: "), done.stderr
    assert "escape/evil.py" in lines[0] and "not a normalised path" in lines[0]
    assert not (tmp_path / "escape").exists()
    assert _tree(tmp_path) == before  # nothing written anywhere: not even the replay's working directory


@pytest.mark.parametrize(
    "path, why",
    [
        ("w/relative.py", "not an absolute path"),
        ("/w/./train.py", "not a normalised path"),
        ("//w/train.py", "not a normalised path"),
        ("/w/train.py/", "not a normalised path"),
        ("/w/nul\x00.py", "control character"),
        ("/w/new\nline.py", "control character"),
    ],
)
def test_every_path_that_is_not_normalised_and_absolute_is_refused_when_read(tmp_path, path, why):
    (tmp_path / layout.SNAPSHOT).write_text(json.dumps(_snap({path: {"sha256": _sha(EVIL), "role": "module"}})))
    with pytest.raises(UnsafeRun, match=why) as refused:
        snapshot.read(tmp_path)
    assert refused.value.entry == path and refused.value.exit_code == 2
    assert "\n" not in str(refused.value)  # one line, whatever the entry holds


def test_materialize_checks_a_snapshot_given_to_it_directly_and_writes_nothing(tmp_path):
    store = _store(tmp_path)
    dest = tmp_path / "dest"
    dest.mkdir()
    good = {"sha256": _sha(EVIL), "role": "module"}
    before = _tree(tmp_path)
    for files in (
        {"/w/a.py": good, _escape(tmp_path): good},  # the good entry first: still nothing written
        {"/w/a.py": good, "/w/a.py/b.py": good},  # a file and a directory at once
        {"/w/a.py": {"sha256": _sha(EVIL), "role": "root-shell"}},
    ):
        with pytest.raises(UnsafeRun):
            snapshot.materialize(store, _snap(files), dest)
        assert _tree(tmp_path) == before
    with pytest.raises(UnsafeRun, match="launch_dir"):
        snapshot.materialize(store, _snap({"/w/a.py": good}, launch_dir="/w/a.py/x"), dest)
    with pytest.raises(UnsafeRun, match="launch_dir"):
        snapshot.materialize(store, _snap({"/w/a.py": good}, launch_dir="/../../etc"), dest)
    assert _tree(tmp_path) == before


# ---------------------------------------------------------------- an object name that is a path
@pytest.mark.parametrize(
    "sha",
    [
        "../../secret.txt",
        "ab/../../../secret.txt",
        "/etc/passwd",
        _sha(EVIL).upper(),
        _sha(EVIL)[:63],
        _sha(EVIL) + "0",
        7,
    ],
)
def test_a_sha256_that_is_not_64_lowercase_hex_digits_is_refused_before_any_copy(tmp_path, sha):
    store = _store(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"the user's secret\n")
    dest = tmp_path / "dest"
    dest.mkdir()
    snap = _snap(
        {"/w/train.py": {"sha256": _sha(EVIL), "role": "script"}, "/w/stolen.txt": {"sha256": sha, "role": "data"}}
    )
    before = _tree(tmp_path)
    with pytest.raises(UnsafeRun, match="not 64 lowercase hex digits"):
        snapshot.materialize(store, snap, dest)
    assert _tree(tmp_path) == before  # the secret was not copied into the layout, nor anything else
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / layout.SNAPSHOT).write_text(json.dumps(snap))
    with pytest.raises(UnsafeRun, match="stolen.txt"):
        snapshot.read(tmp_path / "run")
    if isinstance(sha, str):
        with pytest.raises(UnsafeRun, match="not a sha256"):
            objects.object_path(store, sha)


def test_launch_replay_refuses_an_object_name_that_is_a_path(tmp_path):
    store = _store(tmp_path)
    (tmp_path / "secret.txt").write_bytes(b"the user's secret\n")
    run_dir = _sealed_run(store, _snap({"/w/secret.txt": {"sha256": "../../secret.txt", "role": "data"}}))
    before = _tree(tmp_path)
    assert cli.main(["replay", str(run_dir)]) == 2
    assert _tree(tmp_path) == before


# ---------------------------------------------------------------- links
def test_a_link_already_in_the_destination_is_never_written_through(tmp_path):
    store = _store(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    (dest / "home").mkdir(parents=True)
    (dest / "home" / "u").symlink_to(outside)  # dest/home/u -> outside
    snap = _snap({"/home/u/.bashrc": {"sha256": _sha(EVIL), "role": "module"}}, launch_dir="/home")
    before = _tree(tmp_path)
    with pytest.raises(UnsafeRun, match="is a link already in the destination"):
        snapshot.materialize(store, snap, dest)
    assert _tree(tmp_path) == before and not (outside / ".bashrc").exists()
    (dest / "home" / "u").unlink()
    (dest / "home" / "u").mkdir()
    (dest / "home" / "u" / ".bashrc").symlink_to(outside / "bashrc")  # the file itself a link
    with pytest.raises(UnsafeRun, match="is a link already in the destination"):
        snapshot.materialize(store, snap, dest)
    assert not (outside / "bashrc").exists()


def test_a_sealed_run_with_a_link_pointing_out_is_refused_by_launch_replay(tmp_path, capsys):
    store = _store(tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"not the run's\n")
    outside.chmod(0o644)
    run_dir = runs.create(store)
    runs.write_bytes(run_dir / "config.yaml", b"seed: 0\n")
    runs.write_json(run_dir / layout.SNAPSHOT, _snap({}))
    (run_dir / "outputs").mkdir()
    (run_dir / "outputs" / "model.keras").symlink_to(outside)
    runs.write_bytes(run_dir / "outputs" / "best.keras", b"weights")
    (run_dir / "outputs" / "inside").symlink_to("best.keras")  # a link inside the run is the run's own
    runs.seal(run_dir)
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644  # the seal made the run read-only, not what it links to
    before = _tree(tmp_path)
    assert cli.main(["replay", str(run_dir)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"outputs/model.keras -> {outside}" in err[0] and "outputs/inside" not in err[0]
    assert _tree(tmp_path) == before
    assert runs.links_out(run_dir) == [("outputs/model.keras", str(outside))]


def test_a_snapshot_json_that_is_a_link_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(_snap({})))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / layout.SNAPSHOT).symlink_to(elsewhere)
    with pytest.raises(UnsafeRun, match="is a link"):
        snapshot.read(tmp_path / "run")


# ---------------------------------------------------------------- an unsealed run: resume
def _interrupted_script_run(tmp_path: Path) -> tuple[Path, Path, dict]:
    """An interrupted run of ``w/train.py`` (importing ``w/helper.py``) as the launcher leaves one:
    its fingerprint, the job's facts and ``snapshot.json`` as ``keep.keep_so_far`` wrote it."""
    from omegaconf import OmegaConf

    from launcher.record.store import keep

    work = tmp_path / "w"
    work.mkdir()
    (work / "train.py").write_bytes(b"import helper\n")
    (work / "helper.py").write_bytes(b"X = 1\n")
    store = tmp_path / "store"
    run_dir = runs.create(store)
    resolved = OmegaConf.create(
        {"seed": 0, "train": {"name": "script", "script": str(work / "train.py")}, "store": {"snapshot_max_mb": 64}}
    )
    runs.write_bytes(run_dir / "config.yaml", OmegaConf.to_yaml(resolved).encode())
    fp = {"schema": 3, "code": {"script_sha256": _sha(b"import helper\n")}, "data": {}, "hardware": {}}
    facts = {
        "software": {},
        "determinism": {},
        "data": {},
        "modules": {"helper": {"path": str(work / "helper.py"), "sha256": _sha(b"X = 1\n")}},
    }
    runs.write_json(run_dir / "fingerprint.json", fp)
    runs.write_json(run_dir / "job-facts.json", facts)
    runs.write_json(run_dir / "job.json", {"launch_dir": str(work), "root": None})
    taken = keep.keep_so_far(run_dir, resolved, fp, facts, str(work))
    runs.set_status(run_dir, "interrupted", error="Ctrl-C", returncode=130)
    return run_dir, work, taken


def test_the_snapshot_an_interrupted_run_kept_is_what_its_record_names(tmp_path):
    run_dir, work, taken = _interrupted_script_run(tmp_path)
    stored = resume._stored_fingerprint(run_dir)
    assert resume.checked_snapshot(run_dir, stored, runs.read_json(run_dir / "job.json")) == taken
    assert set(taken["files"]) == {str(work / "train.py"), str(work / "helper.py")}


@pytest.mark.parametrize("forge", ["added module", "swapped content", "moved launch_dir", "data as code"])
def test_launch_resume_refuses_a_forged_unsealed_snapshot_before_anything_is_written(tmp_path, capsys, forge):
    run_dir, work, taken = _interrupted_script_run(tmp_path)
    store = run_dir.parent
    evil = tmp_path / "evil.py"
    evil.write_bytes(EVIL)
    assert objects.put(store, str(evil), _sha(EVIL))  # the forger's code, in the store
    evil.unlink()
    forged = json.loads(json.dumps(taken))
    if forge == "added module":
        forged["files"][str(work / "sitecustomize.py")] = {"sha256": _sha(EVIL), "role": "module"}
    elif forge == "swapped content":
        forged["files"][str(work / "helper.py")]["sha256"] = _sha(EVIL)
    elif forge == "moved launch_dir":
        forged["launch_dir"] = str(tmp_path)
    else:
        forged["files"][str(work / "helper.py")]["role"] = "data"
    runs.write_json(run_dir / layout.SNAPSHOT, forged)  # unsealed: nothing else to forge
    before = _tree(tmp_path)
    assert cli.main(["resume", str(run_dir)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"launch: error: run {run_dir.name}: snapshot.json: "), err
    assert "refused before anything was written" in err[0]
    assert _tree(tmp_path) == before


def test_launch_resume_refuses_a_traversal_path_and_a_link_out_of_an_unsealed_run(tmp_path, capsys):
    run_dir, work, taken = _interrupted_script_run(tmp_path)
    forged = json.loads(json.dumps(taken))
    forged["files"][_escape(tmp_path)] = forged["files"][str(work / "helper.py")]
    runs.write_json(run_dir / layout.SNAPSHOT, forged)
    before = _tree(tmp_path)
    assert cli.main(["resume", str(run_dir)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "escape/evil.py" in err[0] and "not a normalised path" in err[0]
    assert _tree(tmp_path) == before and not (tmp_path / "escape").exists()

    runs.write_json(run_dir / layout.SNAPSHOT, taken)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "log.txt").write_bytes(b"")
    (outside / "log.txt").chmod(0o444)
    (run_dir / "checkpoints").symlink_to(outside)  # a resume would write, and chmod, through it
    before = _tree(tmp_path)
    assert cli.main(["resume", str(run_dir)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"checkpoints -> {outside}" in err[0]
    assert _tree(tmp_path) == before


# ---------------------------------------------------------------- modes
def test_a_private_files_object_and_layout_are_not_readable_by_others(tmp_path):
    store = tmp_path / "store"
    store.mkdir(mode=0o700)
    store.chmod(0o700)
    private = tmp_path / "private.npz"
    private.write_bytes(b"patient records")
    private.chmod(0o600)
    shared = tmp_path / "train.py"
    shared.write_bytes(b"print(1)\n")
    shared.chmod(0o755)
    taken = snapshot.take(
        store,
        {
            str(private): {"sha256": _sha(b"patient records"), "role": "data"},
            str(shared): {"sha256": _sha(b"print(1)\n"), "role": "script"},
        },
        {},
        str(tmp_path),
    )
    obj = objects.object_path(store, _sha(b"patient records"))
    assert stat.S_IMODE(obj.stat().st_mode) == 0o400  # read by its owner only, written by nobody
    assert stat.S_IMODE(objects.object_path(store, _sha(b"print(1)\n")).stat().st_mode) == 0o555
    for directory in (store / layout.OBJECTS, obj.parent):  # made with the store's mode, whatever the umask
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    dest = tmp_path / "dest"
    snapshot.materialize(store, taken, dest)
    assert stat.S_IMODE((dest / str(private).lstrip("/")).stat().st_mode) == 0o600
    assert stat.S_IMODE((dest / str(shared).lstrip("/")).stat().st_mode) == 0o755
    if os.geteuid() != 0:  # root reads anything: the mode is what is checked above
        assert not os.access(obj, os.W_OK)


def test_a_layout_never_leaves_a_damaged_file_under_its_name(tmp_path):
    store = _store(tmp_path)
    obj = objects.object_path(store, _sha(EVIL))
    obj.chmod(0o644)
    obj.write_bytes(b"tampered")
    dest = tmp_path / "dest"
    with pytest.raises(SnapshotError, match="damaged"):
        snapshot.materialize(store, _snap({"/w/train.py": {"sha256": _sha(EVIL), "role": "script"}}), dest)
    assert [p for p in dest.rglob("*") if p.is_file()] == []  # neither the file nor its temporary copy


def test_linking_a_data_file_into_a_layout_stays_inside_it(tmp_path):
    dest, outside = tmp_path / "dest", tmp_path / "outside"
    (dest / "w").mkdir(parents=True)
    outside.mkdir()
    (dest / "w" / "data").symlink_to(outside)
    before = _tree(tmp_path)
    for original in ("/w/../../../escape.npz", "w/rel.npz", "/w/data/digits.npz"):  # the last through a link
        with pytest.raises(UnsafeRun):
            snapshot.link(dest, original, str(tmp_path / "copy.npz"))
    assert _tree(tmp_path) == before
    snapshot.link(dest, "/w/sub/digits.npz", str(tmp_path / "copy.npz"))
    assert os.readlink(dest / "w" / "sub" / "digits.npz") == str(tmp_path / "copy.npz")
