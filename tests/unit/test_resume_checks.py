"""What ``launch resume`` refuses before touching a run: a tampered sealed run, a run still running."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from launcher.cli import main as cli
from launcher.errors import ResumeError
from launcher.record.store import runs
from launcher.run import resume
from tests import factories


def _stored_run(store: Path) -> Path:
    """A run with a result and an output file, neither sealed nor given a state (the test's to say)."""
    return factories.sealed_run(
        store, result={"weights_sha256": "ab" * 32}, outputs={".state": b"step=3\n"}, state=None
    )


def _writable(run_dir: Path) -> None:
    for path in [run_dir, *run_dir.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)


def test_resume_refuses_a_changed_sealed_run_with_exit_4(tmp_path, capsys):
    run_dir = _stored_run(tmp_path)
    runs.seal(run_dir)
    assert cli.main(["resume", str(run_dir)]) == 2  # intact: complete, nothing to resume
    assert "is complete; nothing to resume" in capsys.readouterr().err
    _writable(run_dir)
    (run_dir / "outputs" / ".state").write_bytes(b"step=4\n")
    assert cli.main(["resume", str(run_dir)]) == 4
    err = capsys.readouterr().err
    assert err == f"launch: error: run {run_dir.name} was modified: outputs/.state changed after sealing\n"
    (run_dir / "outputs" / ".state").write_bytes(b"step=3\n")
    (run_dir / ".added").write_bytes(b"")
    assert cli.main(["resume", str(run_dir)]) == 4
    assert ".added was added after sealing" in capsys.readouterr().err


@pytest.fixture
def live_process():
    """A live process whose command line names ``launch``, as a running launcher's does."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "launch"])
    yield proc
    proc.kill()
    proc.wait()


def test_resume_refuses_a_run_whose_launcher_still_runs(tmp_path, live_process, capsys):
    run_dir = _stored_run(tmp_path)
    runs.set_status(run_dir, "running", pid=live_process.pid)  # with this host and the pid's start time
    before = (run_dir / "status.json").read_bytes()
    with pytest.raises(ResumeError, match=rf"run {run_dir.name} is still running \(launcher pid {live_process.pid}\)"):
        resume.check_resumable(run_dir)
    assert cli.main(["resume", str(run_dir)]) == 2
    assert "is still running" in capsys.readouterr().err
    assert (run_dir / "status.json").read_bytes() == before  # untouched
    live_process.kill()
    live_process.wait()
    with pytest.raises(ResumeError, match="no checkpoints"):  # its launcher is gone: resumable, but from what?
        resume.check_resumable(run_dir)


def test_a_status_without_host_is_judged_by_the_pid_and_its_command_line(tmp_path, live_process):
    run_dir = _stored_run(tmp_path)
    runs.write_json(run_dir / "status.json", {"state": "running", "pid": live_process.pid})  # an older launcher
    with pytest.raises(ResumeError, match="still running"):
        resume.check_resumable(run_dir)
    other = subprocess.Popen(["sleep", "120"])  # a live pid that is no launcher: the pid was reused
    try:
        runs.write_json(run_dir / "status.json", {"state": "running", "pid": other.pid})
        with pytest.raises(ResumeError, match="no checkpoints"):
            resume.check_resumable(run_dir)
    finally:
        other.kill()
        other.wait()


def test_a_run_running_on_another_host_is_left_to_that_host(tmp_path, live_process):
    run_dir = _stored_run(tmp_path)
    runs.set_status(run_dir, "running", pid=live_process.pid, host="another-host")
    with pytest.raises(ResumeError, match="running on host another-host .*resume it on another-host"):
        resume.check_resumable(run_dir)


def test_an_interrupted_run_of_users_code_says_why_it_has_no_checkpoints(tmp_path):
    run_dir = _stored_run(tmp_path)
    runs.write_bytes(run_dir / "config.yaml", b"seed: 0\ntrain:\n  name: script\n")
    runs.set_status(run_dir, "interrupted")
    why = r"no checkpoints \(the launcher checkpoints the epochs of your code's Keras fit .*a custom loop: use "
    with pytest.raises(ResumeError, match=why + r"launcher\.Checkpointer\)"):
        resume.check_resumable(run_dir)
