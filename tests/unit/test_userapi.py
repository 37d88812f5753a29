"""The user API's launcher.record_data(): what a job names as data enters its fingerprint."""

from __future__ import annotations

import hashlib

import launcher
from launcher.job.observe import reads
from launcher.record.probe import usage


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_record_data_puts_a_named_file_and_every_file_of_a_named_directory_in_the_data(tmp_path, monkeypatch):
    images = tmp_path / "images"
    (images / "sub").mkdir(parents=True)
    (images / "a.png").write_bytes(b"a")
    (images / "sub" / "b.png").write_bytes(b"b")
    (tmp_path / "labels.csv").write_bytes(b"1\n")
    (tmp_path / "unnamed.csv").write_bytes(b"never read")
    monkeypatch.setattr(reads, "explicit", {})
    monkeypatch.delenv("LAUNCH_RUN_DIR", raising=False)
    launcher.record_data(images)  # outside launch: nothing is recorded
    assert reads.explicit == {}

    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.setenv("LAUNCH_RUN_DIR", str(run))
    monkeypatch.chdir(tmp_path)
    launcher.record_data("images")  # as the job names it: relative
    launcher.record_data(tmp_path / "labels.csv")  # absolute
    used = usage.gather(usage.Observed(explicit=reads.explicit, modules={}, maps_text=""), str(run), str(tmp_path))
    assert used["data"] == {
        "images/a.png": _sha(b"a"),
        "images/sub/b.png": _sha(b"b"),
        str(tmp_path / "labels.csv"): _sha(b"1\n"),
    }
