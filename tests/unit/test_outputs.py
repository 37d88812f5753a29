"""Output files by what they mean (no training): archives, HDF5, checkpoint state, bytes."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import h5py
import numpy as np

from launcher.record import outputs


def _h5(path: Path, value: float, **attrs) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("layers/dense/vars/0", data=np.full((2, 2), value, np.float32), track_times=True)
        f.attrs.update(attrs)


def _keras(path: Path, date: str, object_id: int, value: float) -> None:
    _h5(path.with_suffix(".tmp.h5"), value)
    config = {
        "class_name": "Sequential",
        "config": {"layers": [{"shared_object_id": object_id}, {"inner": {"shared_object_id": object_id}}]},
    }
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("metadata.json", json.dumps({"keras_version": "3.15.1", "date_saved": date}))
        z.writestr("config.json", json.dumps(config))
        z.write(path.with_suffix(".tmp.h5"), "model.weights.h5")
    path.with_suffix(".tmp.h5").unlink()


def test_archives_saved_at_other_times_mean_the_same(tmp_path):
    for run, (date, oid) in {"a": ("2026-11-24@10:00:00", 140129967593936), "b": ("2026-11-24@11:00:00", 1403)}.items():
        (tmp_path / run).mkdir()
        _keras(tmp_path / run / "model.keras", date, oid, 1.0)
        _h5(tmp_path / run / "final.weights.h5", 1.0)
        state = f'model_checkpoint_path: "ckpt-2"\nlast_preserved_timestamp: {oid}\n'
        (tmp_path / run / "checkpoint").write_text(state)
        (tmp_path / run / "log.csv").write_text("epoch,loss\n0,0.5\n")
    a, b = outputs.digests(tmp_path / "a"), outputs.digests(tmp_path / "b")
    assert (tmp_path / "a" / "model.keras").read_bytes() != (tmp_path / "b" / "model.keras").read_bytes()
    assert outputs.differences(a, b) == []
    assert a["model.keras"]["kind"] == "keras archive" and a["log.csv"]["kind"] == "bytes"
    assert a["checkpoint"]["kind"] == "checkpoint state"


def test_what_differs_is_named_where_it_lies(tmp_path):
    for run, value in (("a", 1.0), ("b", 2.0)):
        (tmp_path / run).mkdir()
        _keras(tmp_path / run / "model.keras", "now", 1, value)
        (tmp_path / run / "pid.txt").write_text(run)
    (tmp_path / "b" / "extra.txt").write_text("x")
    diffs = outputs.differences(outputs.digests(tmp_path / "a"), outputs.digests(tmp_path / "b"))
    assert diffs == [
        "outputs/extra.txt: only in run B",
        "outputs/model.keras (keras archive: model.weights.h5:layers/dense/vars/0)",
        "outputs/pid.txt",
    ]


def test_a_file_unreadable_as_its_kind_is_taken_by_bytes(tmp_path):
    (tmp_path / "broken.h5").write_bytes(b"not hdf5")
    (tmp_path / "broken.keras").write_bytes(b"not a zip")
    found = outputs.digests(tmp_path)
    assert found["broken.h5"]["kind"] == found["broken.keras"]["kind"] == "bytes"
    assert outputs.digests(tmp_path / "missing") == {}
