"""A stop is never a completion (issue 42): a job that received the launcher's stop and raised it, but
whose code caught the ``KeyboardInterrupt`` and ended with status 0, ends ``interrupted``, unsealed."""

from __future__ import annotations

import json
import os

from omegaconf import OmegaConf

from launcher.job import interrupts
from launcher.record import layout
from launcher.record.layout import ERROR, JOB_FACTS, RESULT
from launcher.record.store import index, runs
from launcher.run import pipeline


def _ended_with_status_0(tmp_path, stopped: bool):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    runs.write_json(run_dir / RESULT, {"final_metrics": {}})  # the job recorded its end as a complete one would
    runs.write_json(run_dir / JOB_FACTS, {"software": {}, "determinism": {}})
    if stopped:  # written by the job as it raised the stop (interrupts._note_stopped)
        runs.write_json(run_dir / ERROR, {"type": "KeyboardInterrupt", "message": "SIGTERM"})
    row = index.Row(id="run", path=str(run_dir), time="t", task="script", level="strict", seed=0, status="running")
    resolved = OmegaConf.create({"seed": 0})
    return run_dir, pipeline.finish(run_dir, resolved, {}, 0, row, str(tmp_path), None)


def test_a_stopped_job_that_exits_0_ends_interrupted_not_sealed(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "keep_so_far", lambda *args: None)  # the snapshot is not what is tested here
    run_dir, outcome = _ended_with_status_0(tmp_path, stopped=True)
    assert (outcome.status, outcome.returncode, outcome.error) == ("interrupted", 130, "SIGTERM")
    assert not (run_dir / layout.MANIFEST).exists()
    assert json.loads((run_dir / "status.json").read_text())["state"] == "interrupted"


def test_the_stop_is_on_record_as_it_is_raised(tmp_path, monkeypatch):
    monkeypatch.setenv("LAUNCH_RUN_DIR", str(tmp_path))
    monkeypatch.setattr(interrupts, "_requested", 15)
    monkeypatch.setattr(interrupts, "_raised", False)
    assert interrupts.was_stopped(tmp_path) is None
    try:
        interrupts.safe_point()
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the stop was not raised")
    assert interrupts.was_stopped(tmp_path) == "SIGTERM"
    (tmp_path / ERROR).write_text(json.dumps({"type": "SystemExit", "message": "exit status 3"}))
    assert interrupts.was_stopped(tmp_path) is None  # another ending is not a stop
    assert os.environ["LAUNCH_RUN_DIR"] == str(tmp_path)
