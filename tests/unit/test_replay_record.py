"""What a replay's job records of a data file it read at its absolute path (issue 39): the file it
read, never the kept copy the layout holds under the same name."""

from __future__ import annotations

import os

from launcher.job.observe import observers, reads
from launcher.record.probe import usage
from launcher.record.store import snapshot


def test_a_name_recorded_outside_the_layout_wins_over_one_mapped_back_from_it(tmp_path):
    root = str(tmp_path)
    inside = f"{root}/data/mnist.npz"
    # in either order: the job read the file at /data/mnist.npz (new bytes), the layout kept the old
    for data in ({"/data/mnist.npz": "new", inside: "old"}, {inside: "old", "/data/mnist.npz": "new"}):
        out = snapshot.unroot_facts({"data": data}, root)
        assert out["data"] == {"/data/mnist.npz": "new"}
    assert snapshot.unroot_facts({"data": {inside: "old"}}, root)["data"] == {"/data/mnist.npz": "old"}


def _native(monkeypatch, seen: dict) -> dict:
    """The ``native`` files ``observers.used`` hands ``usage.gather`` for natively ``seen`` opens."""
    got = {}
    monkeypatch.setattr(reads, "natively_opened", lambda: dict(seen))
    monkeypatch.setattr(usage, "gather", lambda seen, *a: got.update(seen.native) or {})
    return got


def test_a_native_open_is_mapped_into_the_layout_only_through_a_link(tmp_path, monkeypatch):
    root, outside = tmp_path / "layout", tmp_path / "outside"
    (outside / "d").mkdir(parents=True)
    for name in ("copied.npz", "linked.npz"):
        (outside / "d" / name).write_bytes(b"what the job read")
    laid = root / str(outside).lstrip("/") / "d"
    laid.mkdir(parents=True)
    (laid / "copied.npz").write_bytes(b"the run's kept copy")  # a kept copy laid out: not what was read
    os.symlink(outside / "d" / "linked.npz", laid / "linked.npz")  # a sweep's link to the launch directory
    copied, linked = str(outside / "d" / "copied.npz"), str(outside / "d" / "linked.npz")
    got = _native(monkeypatch, {copied: None, linked: (1,)})
    observers.used(tmp_path / "run", str(tmp_path), str(root), laid_out=True)
    assert got == {copied: None, str(laid / "linked.npz"): (1,)}
    got = _native(monkeypatch, {copied: None})
    observers.used(tmp_path / "run", str(tmp_path), str(root), laid_out=False)
    assert got == {copied: None}
