"""Fault injection: what the user sees when the store, the launcher or the machine fails (issue 12).

Each case injects one real fault (a damaged or deleted index, a SIGKILLed job process
and a torn checkpoint, a disk that fills during a checkpoint, a read-only store, an
empty cache) and checks three things: what the user sees is one line (never a
traceback); nothing incomplete is sealed; nothing that was complete is lost.
A SIGKILLed launcher (an abandoned run) is tested in test_resume.py, on the run it kills.
The disk and read-only cases mount a small tmpfs and need root; elsewhere they are
skipped with that reason.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from launcher.errors import ExitCode
from tests.conftest import QUICK, REPO, THREE_EPOCHS, copy_store, run_launch
from tests.integration.resumed import trained_only_after

STRICT = ("train=mnist", "determinism=strict")
ROOT = os.geteuid() == 0


def _new_runs(store: Path, before: set[Path] = frozenset()) -> list[Path]:
    if not store.is_dir():
        return []
    return sorted(p for p in set(store.iterdir()) - set(before) if p.is_dir() and p.name[0].isdigit())


def _status(run: Path) -> dict:
    return json.loads((run / "status.json").read_text())


def _no_traceback(done: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr[-3000:]


def _sealed_intact(run: Path) -> None:
    """A sealed run still verifies: every file it listed is there, unchanged."""
    from launcher.record.store import runs

    runs.verify_seal(run)


@contextmanager
def _mounted(path: Path, *options: str) -> Iterator[Path]:
    """A tmpfs at ``path`` (root only), unmounted afterwards."""
    if not ROOT:
        pytest.skip("needs root to mount a tmpfs (mount -t tmpfs)")
    path.mkdir(exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(path)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


# ---------------------------------------------------------------- a fresh cache (no training)
def test_a_first_image_build_on_a_fresh_cache_makes_its_own_directories(tmp_path, monkeypatch):
    """~/.cache/launch does not exist: downloading the locked wheels must not fail on a log path."""
    from launcher.docker import imagebuild, images
    from launcher.errors import ImageError

    home = tmp_path / "empty home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "xdg cache"))
    hash_a = "sha256:" + "a" * 64
    lockfile = f"pip==26 --hash={hash_a}\nnumpy==2 --hash={hash_a}\n"
    entries = images.parse_lockfile(lockfile)
    inputs = imagebuild.BuildInputs("tf-cpu", "FROM x", lockfile, "local", "x", "sha256:b", "0", entries)
    from omegaconf import OmegaConf

    config = OmegaConf.to_container(OmegaConf.load(REPO / "launcher/configs/image/tf-cpu.yaml"))
    spec = images.spec_from_config({**config, "base": "local", "wheelhouse": None})
    # pip itself, offline: it prints and fetches nothing, so the hash check below fails as it should.
    monkeypatch.setattr(images, "pip_download_argv", lambda *a: [sys.executable, "-c", "print('pip ran')"])
    with pytest.raises(ImageError, match="no file with a locked hash"):
        imagebuild.fill_wheelhouse(spec, inputs)
    cache = home / "xdg cache" / "launch"
    assert "pip ran" in (cache / "logs" / "download.log").read_text()
    assert (cache / "wheels").is_dir()
    assert imagebuild.cache_dir("locks").is_dir()


# ---------------------------------------------------------------- fixtures: real runs
@pytest.fixture
def reference(three_epoch_run) -> dict:
    """An uninterrupted 3-epoch strict run (shared, ``THREE_EPOCHS``): what a resumed run must equal, bit for bit."""
    return three_epoch_run


@pytest.fixture
def one_run_store(tiny_runs) -> Path:
    """A store holding one complete quick run (shared: copy it before damaging it)."""
    return tiny_runs[0]["store"]


def _start(store: Path, npz: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "launcher", *THREE_EPOCHS, f"train.data={npz}", f"store.root={store}"],
        cwd=store.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def _wait_for_checkpoint(store: Path, proc: subprocess.Popen, epoch: int = 1) -> Path:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        runs_now = _new_runs(store)
        if runs_now and (runs_now[0] / "checkpoints" / f"epoch-{epoch:06d}").is_dir():
            return runs_now[0]
        assert proc.poll() is None, "the run ended before its checkpoint: " + proc.stderr.read()[-2000:]
        time.sleep(0.02)
    raise AssertionError("no checkpoint appeared")


def _job_pid(run: Path) -> int:
    """The job process (``python -m launcher.bootstrap RUN``) of a local run."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"launcher.bootstrap" in argv and str(run).encode() in argv:
            return int(cmdline.parent.name)
    raise AssertionError(f"no job process for {run}")


def _resumed_to_reference(run: Path, reference: dict) -> subprocess.CompletedProcess:
    done = run_launch("resume", run)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    _no_traceback(done)
    _sealed_intact(run)
    result = json.loads((run / "result.json").read_text())
    assert result["weights_sha256"] == reference["result"]["weights_sha256"]  # nothing complete was lost
    trained_only_after(done.stdout, result["resumed_from_epoch"], 3)  # not a restart that ended on the same bits
    return done


# ---------------------------------------------------------------- the index
# The run a checkpoint_every/checkpoint_keep test needs (4 epochs of 3 steps, saved after
# epochs 2 and 4, the newest kept): made by the corrupted index's test (was test_resume.py's).
CHECKPOINT_EVERY_2_KEEP_1 = (
    *STRICT,
    "train.epochs=4",
    "train.batch_size=100",
    "train.max_samples=300",
    "train.checkpoint_every=2",
    "train.checkpoint_keep=1",
)


@pytest.mark.slow
def test_a_corrupted_index_never_stops_a_run_and_checkpoint_every_and_keep(tmp_path, one_run_store, mnist_npz):
    """A run into a store whose index is garbage completes, the index moved aside. That run
    (``checkpoint_every=2``, ``checkpoint_keep=1``, 4 epochs) also checks those settings: saved after
    epochs 2 and 4, and only the newest kept. (One run for what were two tests.)"""
    store = copy_store(one_run_store, tmp_path / "store")
    (first,) = _new_runs(store)
    garbage = b"\x00garbage, as a bad copy or a sync tool leaves it" * 200
    (store / "index.sqlite").write_bytes(garbage)
    done = run_launch(*CHECKPOINT_EVERY_2_KEEP_1, f"train.data={mnist_npz}", f"store.root={store}")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    _no_traceback(done)
    notes = [line for line in done.stderr.splitlines() if "index" in line]
    assert len(notes) == 1 and "was unreadable; moved it aside to index.sqlite.unreadable-" in notes[0]
    (aside,) = store.glob("index.sqlite.unreadable-*")
    assert aside.read_bytes() == garbage  # moved aside, never deleted
    second = _new_runs(store, {first})[0]
    _sealed_intact(first)
    _sealed_intact(second)
    listed = run_launch("runs", "--store", store)
    assert listed.returncode == 0 and listed.stderr == ""
    assert "2 run(s)" in listed.stdout and listed.stdout.count(" complete ") == 2
    # checkpoint_every=2, checkpoint_keep=1 (was test_resume.py's test_checkpoint_every_and_keep)
    assert len(json.loads((second / "result.json").read_text())["timings"]["checkpoint_s"]) == 2  # epochs 2 and 4
    assert sorted(p.name for p in (second / "checkpoints").iterdir()) == ["epoch-000004"]  # only the newest kept
    assert json.loads((second / "checkpoints" / "epoch-000004" / "checkpoint.json").read_text())["epoch"] == 4


@pytest.mark.slow  # its store holds a trained run
def test_a_deleted_index_is_rebuilt_from_the_run_directories(tmp_path, one_run_store):
    store = copy_store(one_run_store, tmp_path / "store")
    (run,) = _new_runs(store)
    weights = json.loads((run / "result.json").read_text())["weights_sha256"]
    (store / "index.sqlite").unlink()
    listed = run_launch("runs", "--store", store)
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr.strip() == (
        f"[launch] the run index {store / 'index.sqlite'} was missing; rebuilt it from 1 run directory"
    )
    line = next(x for x in listed.stdout.splitlines() if x.startswith(run.name))
    assert " complete " in line and weights[:12] in line
    _sealed_intact(run)


# ---------------------------------------------------------------- killed processes
# A SIGKILLed launcher (its run abandoned, then resumed): test_resume.py's
# test_a_killed_strict_run_is_abandoned_refused_elsewhere_and_resumes_to_the_same_bits, on its killed run.


@pytest.mark.slow
def test_a_sigkilled_job_process_ends_interrupted_and_resumes_past_a_torn_checkpoint(tmp_path, mnist_npz, reference):
    """The job process SIGKILLed after checkpoint 2: its launcher ends the run INTERRUPTED in one
    line. Its newest checkpoint then torn mid-write (half its data file): the resume says so and
    falls back to checkpoint 1, trains epochs 2-3 only, and ends on the uninterrupted run's bits.
    (Was also test_resume.py's torn-checkpoint test: one killed run for both.)"""
    store = tmp_path / "store"
    proc = _start(store, mnist_npz)
    run = _wait_for_checkpoint(store, proc, 2)
    os.kill(_job_pid(run), signal.SIGKILL)  # the job only; its launcher sees it die
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert "Traceback" not in err
    assert out.strip().splitlines()[-1] == (
        f"[launch] run {run} INTERRUPTED: job killed by signal 9; continue it with: launch resume {run}"
    )
    status = _status(run)
    assert status["state"] == "interrupted" and not (run / "manifest.json").exists()
    newest = run / "checkpoints" / "epoch-000002"
    data = next(newest.glob("state.data-*"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])  # torn mid-write
    done = _resumed_to_reference(run, reference)
    assert "checkpoint epoch-000002 is incomplete" in done.stderr and "falling back" in done.stderr  # a note: stderr
    assert json.loads((run / "result.json").read_text())["resumed_from_epoch"] == 1
    trained_only_after(done.stdout, 1, 3)


# ---------------------------------------------------------------- the disk, the store
def _fill(path: Path, leave: int) -> Path:
    """Fill the filesystem of ``path`` until ``leave`` bytes are free; the filler file."""
    filler = path / "filler"
    free = os.statvfs(path).f_bavail * os.statvfs(path).f_frsize
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


@pytest.mark.slow
def test_a_disk_that_fills_during_a_checkpoint_fails_the_run_and_resume_continues_it(tmp_path, mnist_npz, reference):
    with _mounted(tmp_path / "small disk", "size=16m") as disk:
        store = disk / "store"
        proc = _start(store, mnist_npz)
        run = _wait_for_checkpoint(store, proc)
        filler = _fill(disk, leave=48 * 1024)  # room for a log line, not for a checkpoint (~190 KB)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 1, out[-3000:] + err[-3000:]
        assert "Traceback" not in err and "internal error" not in err, err[-3000:]
        last = out.strip().splitlines()[-1]
        assert last == (
            f"[launch] run {run} FAILED: checkpoint epoch-000002 could not be written: "
            f"no space left on the device of {run / 'checkpoints'}"
        ), last
        assert _status(run)["state"] == "failed" and not (run / "manifest.json").exists()
        assert [p.name for p in (run / "checkpoints").iterdir()] == ["epoch-000001"]  # the partial one is gone
        from launcher.record import checkpoints

        assert checkpoints.verify(run / "checkpoints" / "epoch-000001") is None  # the complete one is intact
        filler.unlink()  # space is back
        _resumed_to_reference(run, reference)
        listed = run_launch("runs", "--store", store)
        assert listed.stdout.count(" complete ") == 1, listed.stdout


@pytest.mark.slow  # its store holds a trained run
def test_a_read_only_store_reads_and_refuses_writes_in_one_line(tmp_path, one_run_store, mnist_npz):
    with _mounted(tmp_path / "ro", "size=8m") as disk:
        store = copy_store(one_run_store, disk / "store")
        (run,) = _new_runs(store)
        before = sorted(p.name for p in store.rglob("*"))
        remount = subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True, text=True)
        if remount.returncode != 0:
            pytest.skip(f"cannot remount the tmpfs read-only: {remount.stderr.strip()}")
        listed = run_launch("runs", "--store", store)
        assert listed.returncode == 0 and run.name in listed.stdout and " complete " in listed.stdout
        same = run_launch("compare", run, run)
        assert same.returncode == 0 and same.stdout.startswith("IDENTICAL"), same.stdout + same.stderr
        for args, message in [
            ((*STRICT, f"train.data={mnist_npz}", f"store.root={store}", *QUICK), f"store '{store}' is not writable"),
            (("replay", "--allow-mismatch", run), "is not writable"),
            (("runs", "--store", store, "--reindex"), "cannot rebuild the run index"),
        ]:
            done = run_launch(*args)
            assert done.returncode == ExitCode.ENVIRONMENT, (args, done.stdout[-2000:], done.stderr[-2000:])
            assert done.stderr.startswith("launch: error: ") and len(done.stderr.strip().splitlines()) == 1, done.stderr
            assert message in done.stderr, done.stderr
        assert sorted(p.name for p in store.rglob("*")) == before  # nothing written, nothing lost
        _sealed_intact(run)


# ---------------------------------------------------------------- Docker as root
@pytest.fixture
def docker_daemon():
    from launcher.docker import containers
    from launcher.errors import DockerUnavailable

    try:
        containers.client(timeout=600)
    except DockerUnavailable as exc:
        if os.environ.get("LAUNCH_REQUIRE_DOCKER"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.skipif(not ROOT, reason="the job container runs as uid 1000 only when launch runs as root")
def test_docker_as_root_with_the_store_in_a_private_directory(docker_daemon, mnist_npz):
    """The issue's case: root, in /tmp, the store in a mktemp -d directory (0700)."""
    import tempfile

    private = Path(tempfile.mkdtemp())  # mode 0700, under /tmp (the working directory)
    data = private / "mnist.npz"  # seen through the working directory, under the private one
    data.write_bytes(mnist_npz.read_bytes())
    store = private / "store"
    try:
        done = run_launch(
            "runtime=docker",
            "image.base=local",
            *STRICT,
            f"train.data={data}",
            *QUICK,
            f"store.root={store}",
            cwd=Path(tempfile.gettempdir()),
            timeout=1800,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        (run,) = _new_runs(store)
        _sealed_intact(run)
        assert (private.stat().st_mode & 0o777) == 0o700  # nothing of the user's was opened up
        assert {p.stat().st_uid for p in run.rglob("*")} == {0}  # the run is root's again
    finally:
        subprocess.run(["rm", "-rf", str(private)], check=False)


@pytest.mark.docker
@pytest.mark.skipif(not ROOT, reason="the job container runs as uid 1000 only when launch runs as root")
def test_docker_as_root_from_a_private_working_dir_refuses_before_building(docker_daemon, tmp_path, mnist_npz):
    import tempfile

    cwd = Path(tempfile.mkdtemp())  # mode 0700: uid 1000 cannot enter it
    try:
        done = run_launch(
            "runtime=docker",
            "image.base=local",
            *STRICT,
            f"train.data={mnist_npz}",
            *QUICK,
            f"store.root={tmp_path / 'store'}",
            cwd=cwd,
        )
        assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
        assert done.stderr.strip() == (
            f"launch: error: the job container runs as uid 1000, which cannot enter and read '{cwd}' "
            f"(mode 0700, owner uid 0): chmod o+rx '{cwd}', or run launch from a directory it can read"
        )
        assert "building image" not in done.stdout + done.stderr and "exists" not in done.stdout  # before any image
        assert not any((tmp_path / "store").glob("2*")), "a refused job leaves no run directory"
    finally:
        cwd.rmdir()
