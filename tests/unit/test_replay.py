"""Replay's refusal line and its verdict from compare's (``launcher.verdict.replay``).

The refusal names the fields that differ, and the way out that fits them: ``--rebuild`` when
only what a rebuilt environment changes differs (``replay.REBUILDABLE``), ``--data`` when a
data file the run did not keep differs. The verdict maps compare's verdict and exit code.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.record import layout
from launcher.record.store import objects
from launcher.verdict import compare, replay

RUN = Path("/store/20261125-mnist-1")
REBUILD = "; only installed distributions differ: --rebuild replays in a Python environment with the recorded ones"


def _diffs(*names: str) -> list[tuple[str, object, object]]:
    return [(name, "then", "now") for name in names]


def test_a_refusal_names_at_most_four_fields_and_how_many_differ():
    text = replay.refusal(RUN, _diffs("hardware.cpu.model", "software.python", "environment.X", "data.a", "data.b"), [])
    assert text == (
        "cannot replay 20261125-mnist-1 here: 5 comparability field(s) differ (hardware.cpu.model, "
        "software.python, environment.X, data.a, …); use --allow-mismatch to run anyway; this CPU is not "
        "the run's: a run made with determinism=portable keys the x86-64 level, not the CPU model, and "
        "travels to any x86-64-v3 CPU (docs/sharing.md)"
    )


def test_a_refusal_over_the_launchers_own_code_says_so_in_words_first():
    diffs = [("code.launcher.launcher.job.observe.reads", "a" * 64, "b" * 64), ("data.a", "d1", "d2")]
    text = replay.refusal(RUN, diffs, [])
    assert text == (
        "cannot replay 20261125-mnist-1 here: the launcher's in-job code changed: "
        "launcher.job.observe.reads (a launcher upgrade since the run; its bits may or may not change); "
        "1 other comparability field(s) differ (data.a); use --allow-mismatch to run anyway"
    )


@pytest.mark.parametrize(
    "field", ["software.distributions.keras.files_sha256", "software.tensorflow", "software.keras", "software.numpy"]
)
def test_what_a_rebuilt_environment_changes_suggests_rebuild(field):
    """Each field a rebuild installs anew (REBUILDABLE) on its own gets the --rebuild hint."""
    text = replay.refusal(RUN, _diffs(field), [])
    assert text.endswith(REBUILD)
    assert text.startswith(f"cannot replay {RUN.name} here: 1 comparability field(s) differ ({field});")


def test_rebuild_is_suggested_only_when_nothing_else_differs_and_not_after_a_rebuild():
    assert REBUILD not in replay.refusal(RUN, _diffs("software.keras", "software.python"), [])
    assert REBUILD not in replay.refusal(RUN, _diffs("software.tf_build.cpu_compiler"), [])
    assert REBUILD not in replay.refusal(RUN, _diffs("software.keras"), [], rebuilt=True)  # it was rebuilt
    assert REBUILD not in replay.refusal(RUN, [], [])
    assert replay.refusal(RUN, _diffs("software.keras", "software.numpy"), [], rebuilt=False).endswith(REBUILD)


def test_a_differing_data_file_the_run_did_not_keep_names_data():
    text = replay.refusal(RUN, _diffs("data.big.npz", "data.small.npz", "data.other.npz"), ["other.npz", "big.npz"])
    assert text == (
        f"cannot replay {RUN.name} here: 3 comparability field(s) differ (data.big.npz, data.small.npz, "
        "data.other.npz); use --allow-mismatch to run anyway; other.npz, big.npz was not kept in the run "
        "(over store.snapshot_max_mb): point the replay at a copy with --data other.npz=PATH"
    )
    kept = replay.refusal(RUN, _diffs("data.small.npz"), ["big.npz"])  # the unkept file does not differ
    assert "--data" not in kept and "not kept" not in kept


@pytest.mark.parametrize(
    ("compared", "verdict", "code"),
    [
        ("IDENTICAL", "REPRODUCED", 0),
        ("DIFFERENT", "DIVERGED", 1),
        ("NOTHING COMPARED", "NOTHING COMPARED", compare.NOTHING_COMPARED),
        ("NOT COMPARABLE", "NOT COMPARABLE", 3),
    ],
)
def test_the_replay_verdict_follows_compares(monkeypatch, compared, verdict, code):
    calls = []

    def compare_runs(a, b, allow_mismatch=False):
        calls.append((a, b, allow_mismatch))
        return compare.Comparison(compared, 0)

    monkeypatch.setattr(compare, "compare_runs", compare_runs)
    monkeypatch.setattr(compare, "report", lambda c, a, b: f"{c.verdict}: {a.name} vs {b.name}")
    new = RUN.parent / "new"
    got = replay.verdict(RUN, new)
    assert (got.original, got.new_run, got.verdict, got.exit_code) == (RUN, new, verdict, code)
    assert got.detail == f"{compared}: {RUN.name} vs new"
    assert calls == [(RUN, new, True)]  # a replay compares even what its key says is not comparable


def test_a_file_the_run_changed_or_deleted_is_named_as_gone_never_as_too_big():
    """The second run of TensorFlow's checkpoint guide read ``tf_ckpts/checkpoint`` and then rewrote
    it: no copy can match what it read, so ``--data`` is not offered."""
    diffs = [
        ("data.tf_ckpts/checkpoint", "changed while the job ran (r)", "5f2b"),
        ("data.tf_ckpts/ckpt-3.index", "deleted while the job ran (r)", None),
    ]
    text = replay.refusal(RUN, diffs, ["tf_ckpts/checkpoint", "tf_ckpts/ckpt-3.index"])
    assert text.endswith(
        "; tf_ckpts/checkpoint, tf_ckpts/ckpt-3.index changed or was deleted while the run ran (a "
        "checkpoint it restored, then rewrote or rotated away): what it read is gone, so no replay "
        "can rerun it"
    )
    assert "--data" not in text and "snapshot_max_mb" not in text


def test_a_kept_file_the_job_read_by_its_absolute_path_must_be_there(tmp_path):
    """A project moved after its run: the job reads ``/old/project/small.npz`` by that path, so
    the replay refuses in one line naming it and the kept copy (it was a traceback in the job)."""
    import hashlib
    import json

    from launcher.errors import ConfigError

    run = tmp_path / "store" / "20261126-000000-abcdef"
    run.mkdir(parents=True)
    gone, there = tmp_path / "old project" / "small.npz", tmp_path / "here.npz"
    there.write_bytes(b"x")
    sha = hashlib.sha256(b"x").hexdigest()
    layout.RunPaths(run).fingerprint.write_text(json.dumps({"data": {str(gone): sha, str(there): sha}}))
    stored = {
        "launch_dir": str(tmp_path / "old project"),
        "files": {str(gone): {"sha256": sha, "role": "data"}, str(there): {"sha256": sha, "role": "data"}},
    }
    with pytest.raises(ConfigError) as refused:
        replay.place_data(run, stored, tmp_path / "work", {})
    assert str(refused.value) == (
        f"{run.name} read {gone} by its absolute path, and nothing is there now: put it "
        f"back there (the run kept a copy: {objects.object_path(run.parent, sha)})"
    )
    gone.parent.mkdir()
    gone.write_bytes(b"x")
    assert replay.place_data(run, stored, tmp_path / "work", {}) == []


def test_a_refusal_on_the_cpu_says_that_portable_runs_travel():
    text = replay.refusal(RUN, _diffs("hardware.cpu.model"), [])
    assert text.endswith(
        "; this CPU is not the run's: a run made with determinism=portable keys the x86-64 level, "
        "not the CPU model, and travels to any x86-64-v3 CPU (docs/sharing.md)"
    )
    assert "portable" not in replay.refusal(RUN, _diffs("software.python"), [])
