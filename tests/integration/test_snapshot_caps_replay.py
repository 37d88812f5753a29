"""A run's snapshot is bounded (issue 40): a job that reads 3,000 small files under
``store.snapshot_max_files=1000`` keeps 1,000 (its script first, then data by path), records
the rest as left out naming the cap, and replays REPRODUCED, reading what it did not keep where
it was, checked by its hash; a left-out file changed since is refused by name, naming the cap.

Trains for real: a tiny Keras model on 3,000 rows read from the files with open()."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import q, run_dir_of

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).parent / "scripts"
N_FILES = 3000
CAP = 1000


def test_a_job_reading_3000_files_keeps_at_most_the_cap_and_replays(launch, tmp_path):
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    shutil.copy(SCRIPTS / "many_files.py", project / "train.py")
    for n in range(N_FILES):  # each its own content: 16 bytes the model reads, then some padding
        (project / "data" / f"f{n:05d}.bin").write_bytes(hashlib.sha256(str(n).encode()).digest()[:16] + b"." * 100)
    store = tmp_path / "store"
    done = launch(
        "train=script",
        "train.script=train.py",
        "train.args=[data]",
        f"store.root={q(store)}",
        f"store.snapshot_max_files={CAP}",
        cwd=project,
    )
    run = run_dir_of(done)

    fp = json.loads((run / "fingerprint.json").read_text())
    assert len([name for name in fp["data"] if name.startswith("data/")]) == N_FILES  # all read, all keyed
    snap = json.loads((run / "snapshot.json").read_text())
    names = [str(project / "data" / f"f{n:05d}.bin") for n in range(N_FILES)]
    assert len(snap["files"]) == CAP
    assert set(snap["files"]) == {str(project / "train.py"), *names[: CAP - 1]}  # code first, then data by path
    assert snap["left_out"] == dict.fromkeys(
        names[CAP - 1 :], f"over store.snapshot_max_files ({CAP} files kept per run)"
    )
    assert len([p for p in (store / "objects").rglob("*") if p.is_file()]) == CAP  # nothing left out was stored

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = launch("replay", str(run), cwd=elsewhere)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert any(line.startswith("REPRODUCED: ") for line in done.stdout.splitlines()), done.stdout[-3000:]

    last = project / "data" / f"f{N_FILES - 1:05d}.bin"  # left out, and now changed: refused by name
    last.write_bytes(b"another experiment")
    done = launch("replay", str(run), cwd=elsewhere)
    assert done.returncode == 3, done.stdout[-3000:] + done.stderr[-2000:]
    assert (
        f"data/{last.name} was not kept in the run (over store.snapshot_max_files): point the replay at a copy "
        f"with --data data/{last.name}=PATH"
    ) in done.stdout
