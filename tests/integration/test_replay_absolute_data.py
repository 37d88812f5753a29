"""A replay after the data file at an absolute path changed (issue 39): TensorFlow's quickstart
reads ``~/.keras/datasets/mnist.npz``, outside the launch directory, and the run keeps a copy.
Replaced since with other bytes (rows rolled), the replay ran on the new file and called the
difference "a determinism bug". Now the job reads the run's kept copy, placed at that path for
it alone (REPRODUCED), or, where no file can be placed, the replay is refused naming the file;
one too large to keep is refused by name, or placed from a ``--data`` copy.

Each test trains for real: a one-epoch Keras fit on 256 MNIST images.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from launcher import proc
from tests.conftest import DATA, REPO, is_run, q, run_dir_of, verdict_of

pytestmark = pytest.mark.slow

QUICKSTART = """import os
import numpy as np
import keras

with np.load(os.path.expanduser("~/.keras/datasets/mnist.npz")) as f:  # as TensorFlow's quickstart keeps it
    x, y = f["x_train"][:256].astype("float32") / 255.0, f["y_train"][:256]
model = keras.Sequential([keras.Input((28, 28)), keras.layers.Flatten(), keras.layers.Dense(10)])
model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x, y, epochs=1, batch_size=64, verbose=0)
"""


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fp(run: Path) -> dict:
    return json.loads((run / "fingerprint.json").read_text())


def _can_mount() -> bool:
    """Root with CAP_SYS_ADMIN (this machine, CI): a mount namespace of its own is always allowed."""
    if os.geteuid() != 0:
        return False
    caps = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("CapEff:"))
    return bool(int(caps.split()[1], 16) & (1 << 21))


def _placing() -> bool:
    """Whether this machine lets a replay's job be given files at their paths; asserted as root."""
    refused = proc.placing_refused()
    if _can_mount():
        assert refused is None
    return refused is None


def _replace_with_rolled_rows(data: Path, how: str) -> None:
    """Other bytes, the same arrays' shapes: each image moved one row down the set."""
    with np.load(data) as f:
        arrays = dict(f)
    arrays["x_train"] = np.roll(arrays["x_train"], 1, axis=0)
    staged = data.parent.parent / "staged.npz"
    np.savez(staged, **arrays)
    if how == "mv":
        os.replace(staged, data)
    else:
        shutil.copyfile(staged, data)
        staged.unlink()


@pytest.fixture
def quickstart(tmp_path: Path) -> dict:
    """A project (launch directory) and, outside it, a home with the data where Keras keeps it."""
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    (project / "quickstart.py").write_text(QUICKSTART)
    data = home / ".keras" / "datasets" / "mnist.npz"
    data.parent.mkdir(parents=True)
    shutil.copy(DATA / "mnist-small" / "mnist-small.npz", data)
    return {
        "project": project,
        "data": data,
        "store": tmp_path / "store",
        "env": {"HOME": str(home), "XDG_CACHE_HOME": ""},
    }


def _run(launch, qs: dict, *extra: str) -> Path:
    done = launch(
        "train=script",
        "train.script=quickstart.py",
        f"store.root={q(qs['store'])}",
        *extra,
        cwd=qs["project"],
        env=qs["env"],
    )
    return run_dir_of(done)


def test_a_replay_after_the_data_at_an_absolute_path_changed_runs_on_the_kept_copy(launch, quickstart, monkeypatch):
    data, store = quickstart["data"], quickstart["store"]
    run = _run(launch, quickstart)
    recorded = _sha(data)
    assert _fp(run)["data"] == {str(data): recorded}  # absolute: it lies outside the launch directory
    assert json.loads((run / "snapshot.json").read_text())["files"][str(data)]["role"] == "data"

    _replace_with_rolled_rows(data, "mv")
    now = _sha(data)
    assert now != recorded
    done = launch("replay", str(run), cwd=quickstart["project"], env=quickstart["env"])
    if _placing():
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        assert done.stdout.splitlines()[-2].startswith("REPRODUCED: ")
        replayed = Path(done.stdout.splitlines()[-2].split()[2])
        assert _fp(replayed)["data"] == {str(data): recorded}  # what its job read: the kept copy
        placed = json.loads((replayed / "job.json").read_text())["replay"]["placed_data"]
        assert list(placed) == [str(data)]
        assert _sha(data) == now  # the user's file is left as it is
    else:
        assert done.returncode == 3 and f"data.{data}" in done.stdout and "put the file back" in done.stdout

    # Where no file can be placed (user namespaces refused), the same replay is refused before it
    # runs, naming the file, what the run read and what is there now, and how to put it back.
    from launcher.errors import NotComparable
    from launcher.verdict import replay

    monkeypatch.setattr(proc, "placing_refused", lambda python=None: "unshare: Operation not permitted")
    for name, value in {**quickstart["env"], "PYTHONPATH": str(REPO)}.items():  # as `launch` ran
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(quickstart["project"])
    runs_before = sorted(p.name for p in store.iterdir() if is_run(p))
    with pytest.raises(NotComparable) as refused:
        replay.replay(run, echo=False)
    assert refused.value.differences == [(f"data.{data}", recorded, now)]
    assert (
        f"{data} is read by its absolute path and is not what the run read (recorded {recorded[:12]}…, now {now[:12]}…)"
    ) in str(refused.value)
    assert f"(unshare: Operation not permitted): put the file back (cp {store}/objects/" in str(refused.value)
    assert sorted(p.name for p in store.iterdir() if is_run(p)) == runs_before  # nothing ran


def test_a_data_file_too_large_to_keep_is_refused_by_name_or_placed_from_a_copy(launch, quickstart, tmp_path):
    data = quickstart["data"]
    run = _run(launch, quickstart, "store.snapshot_max_mb=0")
    snap = json.loads((run / "snapshot.json").read_text())
    assert str(data) in snap["left_out"] and str(data) not in snap["files"]
    copy = tmp_path / "copy-of-mnist.npz"
    shutil.copy(data, copy)
    recorded = _sha(data)

    _replace_with_rolled_rows(data, "cp")
    done = launch("replay", str(run), cwd=quickstart["project"], env=quickstart["env"])
    assert done.returncode == 3, done.stdout[-3000:] + done.stderr[-2000:]
    assert verdict_of(done.stdout).startswith("REFUSED: ")
    assert f"data.{data}" in done.stdout and recorded[:12] in done.stdout

    done = launch("replay", str(run), "--data", f"{data}={copy}", cwd=quickstart["project"], env=quickstart["env"])
    if _placing():  # the copy is placed at the path the job reads
        assert (
            f"--data {data}=PATH" in launch("replay", str(run), cwd=quickstart["project"], env=quickstart["env"]).stdout
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        assert done.stdout.splitlines()[-2].startswith("REPRODUCED: ")
    else:
        assert done.returncode == 2 and "put the file back there" in done.stderr
