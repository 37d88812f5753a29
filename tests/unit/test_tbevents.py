"""TensorBoard event files written by the launcher: the format (read back by TensorBoard's own
reader), incremental appending as a job writes, resume, the live follower and a sweep's links."""

from __future__ import annotations

import json
import os
import struct
import sys
import time
import types
from pathlib import Path

import pytest

from launcher.record import layout, tbevents


@pytest.fixture(autouse=True, scope="module")
def _tensorboard_without_tensorflow():
    """TensorBoard's reader on its pure-Python TF stub (its own switch for that: a module
    ``tensorboard.compat.notf``), so these unit tests do not import TensorFlow."""
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    yield


def scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the run's event directory, as TensorBoard's EventAccumulator reads it."""
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(str(run_dir / layout.TENSORBOARD))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def append(path: Path, *items: dict, tail: str = "") -> None:
    with open(path, "a") as f:
        f.write("".join(json.dumps(i) + "\n" for i in items) + tail)


def test_crc32c_and_record_framing_match_tensorboards_own():
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    assert tbevents.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    data = b"any event bytes \x00\xff" * 7
    rec = tbevents.record(data)
    assert struct.unpack("<Q", rec[:8])[0] == len(data)
    assert struct.unpack("<I", rec[8:12])[0] == masked_crc32c(rec[:8])
    assert rec[12:-4] == data and struct.unpack("<I", rec[-4:])[0] == masked_crc32c(data)


def test_epoch_metrics_and_traced_loss_read_back_by_tensorboard(tmp_path):
    append(
        tmp_path / "metrics.jsonl",
        {"epoch": 1, "loss": 0.5, "accuracy": 0.75, "note": "text", "flag": True},
        {"epoch": 2, "loss": 0.25, "accuracy": 0.875},
    )
    append(
        tmp_path / "trace.jsonl",
        {"step": 0, "epoch": 0, "loss": None},
        {"step": 10, "epoch": 1, "loss": 1.5},
        {"step": 20, "epoch": 2, "loss": float("nan")},
    )
    tbevents.EventLog(tmp_path).start()
    got = scalars(tmp_path)
    assert sorted(got) == ["epoch/accuracy", "epoch/loss", "trace/loss"]  # text and bools are not scalars
    assert got["epoch/loss"] == [(1, 0.5), (2, 0.25)] and got["epoch/accuracy"] == [(1, 0.75), (2, 0.875)]
    assert got["trace/loss"][0] == (10, 1.5) and got["trace/loss"][1][0] == 20  # step 0 has no loss: skipped
    assert got["trace/loss"][1][1] != got["trace/loss"][1][1]  # NaN stays NaN


def test_only_whole_new_lines_are_appended_and_start_rewrites(tmp_path):
    log = tbevents.EventLog(tmp_path)
    log.start()  # nothing recorded yet: just the file-version header
    assert scalars(tmp_path) == {}
    append(tmp_path / "metrics.jsonl", {"epoch": 1, "loss": 2.0}, tail='{"epoch": 2, "lo')  # the job mid-write
    assert log.sync() == 1
    assert scalars(tmp_path) == {"epoch/loss": [(1, 2.0)]}
    append(tmp_path / "metrics.jsonl", tail='ss": 1.0}\n')  # the line is complete now
    assert log.sync() == 1 and log.sync() == 0  # nothing is written twice
    assert scalars(tmp_path) == {"epoch/loss": [(1, 2.0), (2, 1.0)]}
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"epoch": 1, "loss": 2.0}) + "\n")  # resume cut it back
    log.start()
    assert scalars(tmp_path) == {"epoch/loss": [(1, 2.0)]}


def test_follow_keeps_the_file_current_while_the_job_runs_and_catches_up_at_the_end(tmp_path):
    with tbevents.follow(tmp_path, poll_s=0.05):
        append(tmp_path / "metrics.jsonl", {"epoch": 1, "loss": 2.0})
        deadline = time.monotonic() + 10
        while "epoch/loss" not in scalars(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert scalars(tmp_path) == {"epoch/loss": [(1, 2.0)]}  # live, before the job ended
        append(tmp_path / "trace.jsonl", {"step": 5, "epoch": 1, "loss": 1.0})
    assert scalars(tmp_path) == {"epoch/loss": [(1, 2.0)], "trace/loss": [(5, 1.0)]}
    assert [p.name for p in (tmp_path / layout.TENSORBOARD).iterdir()] == [tbevents.FILE]  # no temporary left


def test_follow_never_fails_the_job_it_watches(tmp_path, capsys):
    ran = []
    with tbevents.follow(tmp_path / "no such run"):
        ran.append(True)
    assert ran == [True]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("[launch] warning: TensorBoard event file not written")


def test_a_sweep_links_each_job_by_its_swept_values(tmp_path):
    store = tmp_path / "store"
    run = store / "20261123-000000-abcdef"
    (run / layout.TENSORBOARD).mkdir(parents=True)
    sweep = store / "sweeps" / "20261123-000000-012345"
    sweep.mkdir(parents=True)
    tbevents.link_sweep_job(sweep, 3, "+seed=3 train.learning_rate=0.01", run)
    tbevents.link_sweep_job(sweep, 3, "+seed=3 train.learning_rate=0.01", run)  # again: replaced, not an error
    (link,) = (sweep / tbevents.SWEEP_DIR).iterdir()
    assert link.name == "003 +seed=3_train.learning_rate=0.01"
    assert link.is_symlink() and not os.path.isabs(os.readlink(link))  # relative: the store can move
    assert link.resolve() == (run / layout.TENSORBOARD).resolve()
    assert tbevents.job_link_name(0, "(no sweep)") == "000"
