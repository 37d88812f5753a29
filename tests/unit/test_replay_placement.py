"""A replay's data read by absolute path (issue 39): the run's kept copy placed at that path for
the job alone (``launcher.proc.place_argv``: a bind mount in a mount namespace of its own),
or, where no file can be placed, the file there checked by its hash and refused when it
differs. Real files, real namespaces where this machine allows them; no training."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from launcher import proc
from launcher.run import precheck, runtime
from launcher.verdict import replay

READ = "import sys; sys.stdout.write(open(sys.argv[1]).read())"
REPO = Path(__file__).resolve().parents[2]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _can_mount() -> bool:
    """Root with CAP_SYS_ADMIN: a mount namespace of its own is always allowed."""
    if os.geteuid() != 0:
        return False
    caps = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("CapEff:"))
    return bool(int(caps.split()[1], 16) & (1 << 21))


# ---------------------------------------------------------------- the command (pure)
def test_the_placing_command_wraps_the_job_and_nothing_when_nothing_is_placed():
    job = ["/venv/bin/python", "-P", "-m", "launcher.bootstrap", "/store/run"]
    assert proc.place_argv("/usr/bin/python3", {}, job) == job
    wrapped = proc.place_argv("/usr/bin/python3", {"/data/b.npz": "/w/data/b.npz", "/data/a.npz": "/w/data/a.npz"}, job)
    assert wrapped == [
        "/usr/bin/python3",
        "-P",
        "-m",
        "launcher.proc",
        "place",
        "--bind",
        "/w/data/a.npz",
        "/data/a.npz",
        "--bind",
        "/w/data/b.npz",
        "/data/b.npz",
        "--",
        *job,
    ]
    assert proc._parse_place(wrapped[5:]) == ([("/w/data/a.npz", "/data/a.npz"), ("/w/data/b.npz", "/data/b.npz")], job)
    with pytest.raises(ValueError, match="usage"):
        proc._parse_place(["--bind", "/w/a"])


def test_the_local_runtime_places_what_the_replay_named(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    seen = []
    monkeypatch.setattr(proc, "run_job", lambda argv, **kw: seen.append(argv) or proc.Ended(0))
    job = runtime.Job(run_dir=run_dir, env={}, cwd=str(tmp_path))
    assert runtime.LocalRuntime().run(job) == 0  # no job.json: nothing placed
    (run_dir / "job.json").write_text(json.dumps({"replay": {"placed_data": {"/data/a.npz": "/w/data/a.npz"}}}))
    assert runtime.LocalRuntime().run(job) == 0
    assert seen[0] == runtime.bootstrap_argv(sys.executable, run_dir)
    assert seen[1] == proc.place_argv(sys.executable, {"/data/a.npz": "/w/data/a.npz"}, seen[0])


# ---------------------------------------------------------------- the namespace, measured here
def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def test_a_placed_file_is_what_the_program_reads_and_nothing_outside_sees_it(tmp_path):
    if proc.placing_refused() is not None:
        pytest.skip(f"no file can be placed here: {proc.placing_refused()}")
    kept, there = tmp_path / "kept.npz", tmp_path / "data" / "mnist.npz"
    there.parent.mkdir()
    kept.write_text("what the run read")
    there.write_text("replaced since")
    argv = proc.place_argv(sys.executable, {str(there): str(kept)}, [sys.executable, "-c", READ, str(there)])
    done = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "what the run read"), done.stderr
    assert there.read_text() == "replaced since"
    assert str(there) not in Path("/proc/self/mountinfo").read_text()


def test_a_file_that_cannot_be_placed_stops_the_job_before_it_runs(tmp_path):
    if proc.placing_refused() is not None:
        pytest.skip(f"no file can be placed here: {proc.placing_refused()}")
    marker = tmp_path / "ran"
    argv = proc.place_argv(
        sys.executable,
        {str(tmp_path / "gone.npz"): str(tmp_path / "kept.npz")},
        [sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
    )
    done = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == proc.PLACE_FAILED and "the job did not run" in done.stderr
    assert not marker.exists()


def test_root_with_cap_sys_admin_can_always_place_files():
    """As root (here, and CI) a mount namespace is always allowed: a refusal would be a false one."""
    if not _can_mount():
        pytest.skip("not root with CAP_SYS_ADMIN")
    assert proc.placing_refused() is None


def test_an_unprivileged_user_places_files_in_a_user_namespace_of_its_own():
    """``setpriv --reuid=65534``: the program runs as that user (not as root inside), and reads the placed file."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to become another user")
    nobody = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    home = Path(tempfile.mkdtemp(prefix="launch-nobody-"))  # not below pytest's 0700 base: nobody must enter it
    try:
        shutil.copytree(REPO / "launcher", home / "pkg" / "launcher", ignore=shutil.ignore_patterns("__pycache__"))
        kept, there = home / "kept", home / "there"
        kept.write_text("kept")
        there.write_text("there")
        for path in [home, *home.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        runnable = [
            p
            for p in ("/usr/bin/python3", sys.executable)
            if subprocess.run([*nobody, p, "-c", ""], capture_output=True).returncode == 0
        ]
        if not runnable:
            pytest.skip("no Python the unprivileged user may run")
        python = runnable[0]
        probe = subprocess.run([*nobody, "unshare", "-Urm", "true"], capture_output=True, text=True)
        who = f"import os; print(os.getuid(), open({str(there)!r}).read())"
        argv = proc.place_argv(python, {str(there): str(kept)}, [python, "-c", who])
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(home / "pkg")}
        done = subprocess.run([*nobody, *argv], env=env, capture_output=True, text=True, timeout=60)
    finally:
        shutil.rmtree(home)
    if probe.returncode != 0:  # user namespaces refused to this user: placing refused too, never a job run
        assert done.returncode == proc.PLACE_FAILED, done.stderr
    else:
        assert (done.returncode, done.stdout.split()) == (0, ["65534", "kept"]), done.stderr


# ---------------------------------------------------------------- the decision (pure)
def test_with_placing_refused_every_file_read_by_path_is_checked_where_it_is(tmp_path):
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    a.write_bytes(b"a")
    b.mkdir()  # a directory now: it cannot take a file
    assert replay.placement([str(a), str(b)], {}, None) == ([str(a)], [str(b)])
    assert replay.placement([str(a), str(b)], {}, "unshare: Operation not permitted") == ([], [str(a), str(b)])
    given = tmp_path / "big.npz"
    given.write_bytes(b"big")
    assert replay.placement([str(a)], {str(given): "/copies/big.npz"}, None) == ([str(a), str(given)], [])
    assert replay.placing_refusal("local", None) is None
    assert replay.placing_refusal("local", "unshare: Operation not permitted") == "unshare: Operation not permitted"
    assert replay.placing_refusal("docker", None).startswith("runtime=docker")


def test_which_kept_files_the_job_reads_by_their_absolute_path():
    fp = {
        "data": {
            "/home/u/.keras/datasets/mnist.npz": "1",
            "digits.npz": "2",
            "/data/big.npz": "3",
            "/shared/mnist.npz": "4",
        }
    }
    stored = {
        "launch_dir": "/home/u/project",
        "files": {"/home/u/.keras/datasets/mnist.npz": {}, "/home/u/project/digits.npz": {}, "/shared/mnist.npz": {}},
    }
    script = OmegaConf.create({"train": {"name": "script"}})
    mnist = OmegaConf.create({"train": {"name": "mnist", "data": "/shared/mnist.npz"}})
    # relative names are found in the layout; /data/big.npz was not kept
    assert replay.read_by_path(fp, stored, script) == ["/home/u/.keras/datasets/mnist.npz", "/shared/mnist.npz"]
    # the mnist task's train.data is looked up in the layout by the launcher itself
    assert replay.read_by_path(fp, stored, mnist) == ["/home/u/.keras/datasets/mnist.npz"]


def test_a_changed_file_that_cannot_be_placed_is_refused_by_name_with_both_hashes_and_the_fix(tmp_path):
    run = tmp_path / "store" / "20261126-000000-abcdef"
    then, now = _sha(b"what the run read"), _sha(b"replaced since")
    diffs = [("data./home/u/.keras/datasets/mnist.npz", then, now)]
    text = replay.refusal(
        run, diffs, [], at_own_path=["/home/u/.keras/datasets/mnist.npz"], placing="unshare: Operation not permitted"
    )
    assert text.endswith(
        f"; /home/u/.keras/datasets/mnist.npz is read by its absolute path and is not what the run "
        f"read (recorded {then[:12]}…, now {now[:12]}…), and the run's copy of it cannot be put there "
        f"for the job here (unshare: Operation not permitted): put the file back (cp "
        f"{tmp_path}/store/objects/{then[:2]}/{then} /home/u/.keras/datasets/mnist.npz), or replay "
        "where user namespaces are allowed"
    )
    # one too large to keep: --data places a copy where files can be placed; elsewhere, put it back
    diffs = [("data./data/big.npz", then, now)]
    assert "--data /data/big.npz=PATH" in replay.refusal(run, diffs, ["/data/big.npz"])
    refused = replay.refusal(run, diffs, ["/data/big.npz"], placing="unshare: Operation not permitted")
    assert "--data" not in refused and refused.endswith("(unshare: Operation not permitted): put the file back there")


def test_a_file_read_at_its_own_path_is_hashed_there_not_in_the_layout(tmp_path):
    there = tmp_path / "datasets" / "mnist.npz"
    there.parent.mkdir()
    there.write_bytes(b"replaced since")
    root = tmp_path / "work"
    kept = root / str(there).lstrip("/")
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"what the run read")
    stored = {str(there): _sha(b"what the run read")}
    assert precheck.current_data_hashes(stored, "/cwd", str(root)) == stored  # placed there: the kept copy
    assert precheck.current_data_hashes(stored, "/cwd", str(root), at_own_path=[str(there)]) == {
        str(there): _sha(b"replaced since")
    }


def test_why_no_file_can_be_placed_is_said_in_a_few_words(monkeypatch):
    """The measurement's reason, as a refusal quotes it: the wrapper's own words, not its whole line."""
    if proc.placing_refused() is not None:
        pytest.skip(f"no file can be placed here: {proc.placing_refused()}")
    real = proc.place_argv
    monkeypatch.setattr(
        proc,
        "place_argv",
        lambda python, placed, argv: real(
            python, {target: source + ".gone" for target, source in placed.items()}, argv
        ),
    )
    reason = proc.placing_refused()
    assert reason.startswith("mount ") and reason.endswith(": No such file or directory")
