"""Choosing the checkpoint to resume from, without TensorFlow."""

import json

from launcher.record import checkpoints, hashing
from launcher.record.store import runs
from launcher.run.resume import keep_metrics_through


def _checkpoint(run_dir, epoch, payload=b"weights"):
    path = run_dir / "checkpoints" / checkpoints.name(epoch)
    path.mkdir(parents=True)
    (path / "state.index").write_bytes(payload)
    files = {"state.index": hashing.file_sha256(path / "state.index")}
    runs.write_json(path / checkpoints.MANIFEST, {"epoch": epoch, "files": files})
    return path


def test_newest_complete_checkpoint_wins(tmp_path):
    _checkpoint(tmp_path, 1)
    _checkpoint(tmp_path, 2)
    path, epoch, notes = checkpoints.latest_complete(tmp_path)
    assert (path.name, epoch, notes) == ("epoch-000002", 2, [])


def test_torn_or_unfinished_checkpoints_are_skipped_and_said(tmp_path):
    _checkpoint(tmp_path, 1)
    torn = _checkpoint(tmp_path, 2)
    (torn / "state.index").write_bytes(b"wei")
    unfinished = tmp_path / "checkpoints" / checkpoints.name(3)
    unfinished.mkdir()
    path, epoch, notes = checkpoints.latest_complete(tmp_path)
    assert epoch == 1
    assert notes == [
        "checkpoint epoch-000003 is incomplete (no checkpoint.json); falling back to an earlier one",
        "checkpoint epoch-000002 is incomplete (state.index does not match its hash (torn write?));"
        " falling back to an earlier one",
    ]


def test_no_checkpoint(tmp_path):
    assert checkpoints.latest_complete(tmp_path) == (None, 0, [])


def test_metrics_after_the_checkpoint_are_dropped(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"epoch": e, "loss": e}) + "\n" for e in (1, 2, 3)))
    keep_metrics_through(tmp_path, 2)
    assert [json.loads(x)["epoch"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2]


def test_the_trace_count_a_checkpoint_kept_is_read_only_when_it_is_one(tmp_path):
    path = _checkpoint(tmp_path, 1)
    assert checkpoints.trace_points(path) is None  # a checkpoint from before the count
    for kept, read in ((7, 7), (0, 0), (-1, None), (True, None), ("7", None), (2.5, None)):
        manifest = json.loads((path / checkpoints.MANIFEST).read_text())
        runs.write_json(path / checkpoints.MANIFEST, {**manifest, "trace_points": kept})
        assert checkpoints.trace_points(path) == read, kept
    (path / checkpoints.MANIFEST).write_text("[]")  # a crafted manifest that is not an object
    assert checkpoints.trace_points(path) is None


def test_a_restore_names_the_first_variable_that_does_not_match():
    """By name, not by position (issue 46): the checkpoint's record of each variable against the resumed
    job's, in one line naming the variable."""
    from launcher.job.training.checkpoints import first_mismatch

    kept = {"model/dense/kernel": ["float32", [4, 2]], "optimizer/step_counter": ["int64", []]}
    assert first_mismatch(kept, dict(reversed(list(kept.items())))) is None  # the order does not matter
    assert first_mismatch(kept, {**kept, "optimizer/step_counter": ["float32", []]}) == (
        "optimizer/step_counter is int64 [] in the checkpoint and float32 [] in the resumed job"
    )
    assert first_mismatch(kept, {"model/dense/kernel": ["float32", [4, 2]]}) == (
        "optimizer/step_counter (int64 []) is in the checkpoint and not in the resumed job"
    )


def test_the_checkpointer_is_public_as_launcher_checkpointer(tmp_path):
    """Users are told ``launcher.Checkpointer`` (a refusal, the docs), never the module it lives in."""
    import launcher
    from launcher.job.training import checkpoints as job_checkpoints
    from launcher.run import resume

    assert launcher.Checkpointer is job_checkpoints.Checkpointer and "Checkpointer" in launcher.__all__
    run_dir = runs.create(tmp_path)
    runs.write_bytes(run_dir / "config.yaml", b"seed: 0\ntrain:\n  name: script\n")
    why = resume._why_none(run_dir)
    assert "launcher.Checkpointer" in why and "launcher.job" not in why
