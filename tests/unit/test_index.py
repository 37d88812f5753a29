"""The run index is derived from the run directories; ghost runs show as abandoned (issue 12)."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.errors import SealError
from launcher.record import layout
from launcher.record.store import index, runs
from tests import factories
from tests.conftest import run_launch


def _dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _run(store: Path, state: str = "complete", seed: int = 1, **status) -> Path:
    """A run directory as the launcher leaves it, without training."""
    return factories.sealed_run(
        store,
        config=f"seed: {seed}\ntrain:\n  name: mnist\ndeterminism:\n  level: strict\n",
        job={"replay_of": None},
        result={"weights_sha256": "ab" * 32, "final_metrics": {"loss": 0.5}} if state == "complete" else None,
        state=state,
        status=status,
    )


def _row(run_dir: Path, status: str) -> index.Row:
    return index.Row(run_dir.name, str(run_dir), "2026-01-01T00:00:00+00:00", "mnist", "strict", 1, status)


def test_a_corrupt_index_is_moved_aside_and_rebuilt_by_the_next_write(tmp_path, capsys):
    done = _run(tmp_path)
    (tmp_path / layout.INDEX).write_bytes(b"this is not a database" * 100)
    new = _run(tmp_path, "running", pid=os.getpid())
    index.record(tmp_path, _row(new, "running"))  # must not raise
    assert "was unreadable; moved it aside to index.sqlite.unreadable-" in capsys.readouterr().err
    (aside,) = tmp_path.glob("index.sqlite.unreadable-*")
    assert aside.read_bytes() == b"this is not a database" * 100  # moved, never deleted
    rows = {r.id: r for r in index.query(tmp_path)}
    assert rows[done.name].status == "complete" and rows[done.name].weights_sha256 == "ab" * 32
    assert rows[new.name].status == "running"


def test_a_missing_index_is_rebuilt_by_a_reader(tmp_path):
    runs_made = [_run(tmp_path, seed=s) for s in range(3)]
    notes: list[str] = []
    rows = index.query(tmp_path, notes=notes)
    assert sorted(r.id for r in rows) == sorted(p.name for p in runs_made)
    assert notes == [f"the run index {tmp_path / layout.INDEX} was missing; rebuilt it from 3 run directories"]
    assert (tmp_path / layout.INDEX).exists() and index.query(tmp_path, notes=(again := [])) and again == []


def test_a_new_store_says_nothing(tmp_path, capsys):
    first = _run(tmp_path, "running", pid=os.getpid())
    index.record(tmp_path, _row(first, "running"))
    assert capsys.readouterr().err == ""


def test_a_new_store_whose_first_jobs_start_together_says_nothing(tmp_path, capsys):
    other = _run(tmp_path, "running", pid=os.getpid())  # a sweep's other job, created a moment before
    first = _run(tmp_path, "running", pid=os.getpid())
    index.record(tmp_path, _row(first, "running"))
    assert capsys.readouterr().err == ""
    assert {r.id for r in index.query(tmp_path)} == {other.name, first.name}


def test_an_index_write_that_fails_never_raises_and_the_reader_catches_up(tmp_path, capsys):
    run_dir = _run(tmp_path, "running", pid=os.getpid())
    index.record(tmp_path, _row(run_dir, "running"))
    blocker = sqlite3.connect(tmp_path / layout.INDEX, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")  # another process holds the index
    try:
        index.WRITE_TIMEOUT_S, saved = 0.2, index.WRITE_TIMEOUT_S
        runs.write_json(run_dir / "result.json", {"weights_sha256": "cd" * 32})
        runs.seal(run_dir)
        index.record(tmp_path, _row(run_dir, "complete"))  # the run completes anyway
    finally:
        index.WRITE_TIMEOUT_S = saved
        blocker.execute("ROLLBACK")
        blocker.close()
    assert "was not updated" in capsys.readouterr().err
    (row,) = index.query(tmp_path)
    assert row.status == "complete" and row.weights_sha256 == "cd" * 32


def test_rows_of_removed_runs_go_and_unknown_runs_come(tmp_path):
    a, b = _run(tmp_path, seed=1), _run(tmp_path, seed=2)
    index.query(tmp_path)
    runs.unseal_for_resume(a)
    for path in sorted(a.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    a.rmdir()
    c = _run(tmp_path, seed=3)
    assert sorted(r.id for r in index.query(tmp_path)) == sorted([b.name, c.name])


def test_a_running_run_whose_launcher_died_is_abandoned(tmp_path):
    ghost = _run(tmp_path, "running", pid=_dead_pid())
    alive = _run(tmp_path, "running", pid=os.getpid())
    elsewhere = _run(tmp_path, "running", pid=_dead_pid(), host="another-host")
    status = json.loads((alive / "status.json").read_text())
    assert status["host"] == socket.gethostname() and isinstance(status["pid_start"], int)
    assert runs.effective_status(ghost)["state"] == "abandoned"
    assert runs.effective_status(alive)["state"] == "running"
    assert runs.effective_status(elsewhere)["state"] == "running"  # another host: not ours to judge
    rows = {r.id: r.status for r in index.query(tmp_path)}
    assert rows == {ghost.name: "abandoned", alive.name: "running", elsewhere.name: "running"}
    assert [r.id for r in index.query(tmp_path, status="abandoned")] == [ghost.name]
    with pytest.raises(SealError, match=r"state: abandoned: its launcher \(pid \d+ on .*\) is gone.*launch resume"):
        runs.verify_seal(ghost)
    with pytest.raises(SealError, match="state: running on host another-host"):
        runs.verify_seal(elsewhere)


def test_a_reused_pid_does_not_keep_a_ghost_alive(tmp_path):
    run_dir = _run(tmp_path, "running", pid=os.getpid())
    data = json.loads((run_dir / "status.json").read_text())
    runs.write_json(run_dir / "status.json", {**data, "pid_start": data["pid_start"] - 1})
    assert runs.effective_status(run_dir)["state"] == "abandoned"


def test_launch_runs_shows_abandoned_and_rebuilds_on_demand(tmp_path):
    ghost = _run(tmp_path, "running", pid=_dead_pid())
    _run(tmp_path)
    (tmp_path / layout.INDEX).write_bytes(b"garbage" * 1000)
    done = run_launch("runs", "--store", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "was unreadable; moved it aside" in done.stderr and len(done.stderr.splitlines()) == 1
    line = next(x for x in done.stdout.splitlines() if x.startswith(ghost.name))
    assert " abandoned " in line and "2 run(s)" in done.stdout
    rebuilt = run_launch("runs", "--store", tmp_path, "--reindex", "--status", "abandoned")
    assert rebuilt.returncode == 0 and "rebuilt the run index" in rebuilt.stderr
    assert "1 run(s)" in rebuilt.stdout and len(list(tmp_path.glob("index.sqlite.unreadable-*"))) == 1


def test_set_status_frees_the_reserve_when_the_disk_is_full(tmp_path, monkeypatch):
    run_dir = runs.create(tmp_path)
    assert (run_dir / runs.RESERVE).stat().st_size == runs.RESERVE_BYTES
    real, calls = runs.write_json, []

    def full_then_ok(path, data):
        calls.append(path)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        real(path, data)

    monkeypatch.setattr(runs, "write_json", full_then_ok)
    runs.set_status(run_dir, "failed", error="x")
    assert not (run_dir / runs.RESERVE).exists()
    assert json.loads((run_dir / "status.json").read_text())["disk_full"] is True
