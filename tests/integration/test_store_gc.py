"""``launch gc`` on a store of real runs: what a run needs survives, and it replays REPRODUCED after the
gc (issue 40). Trains nothing of its own: it replays the shared ``tiny_runs``' first run."""

from __future__ import annotations

import hashlib
import os
import time

import pytest

from launcher.record.store import objects, snapshot
from tests.conftest import copy_store, run_launch

pytestmark = pytest.mark.slow


def test_a_run_replays_reproduced_after_gc_removed_what_no_run_references(tiny_runs, tmp_path):
    store = copy_store(tiny_runs[0]["store"], tmp_path / "store")
    run = store / tiny_runs[0]["run"].name
    needed = {e["sha256"] for e in snapshot.read(run)["files"].values()}
    assert needed  # the run kept its data file: the replay reads it from the store
    orphan_src = tmp_path / "deleted-runs-data.npz"
    orphan_src.write_bytes(b"a deleted run's data" * 100)
    orphan = hashlib.sha256(orphan_src.read_bytes()).hexdigest()
    assert objects.put(store, str(orphan_src), orphan)
    an_hour_ago = time.time() - 3600
    os.utime(objects.object_path(store, orphan), (an_hour_ago, an_hour_ago))

    done = run_launch("gc", "--store", str(store))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        f"removed {orphan} (2.0 KiB)",
        f"launch gc: removed 1 object(s), freed 2.0 KiB; {len(needed)} object(s) kept, the snapshots of 1 run(s) read",
    ]
    assert not objects.object_path(store, orphan).exists()
    assert all(objects.object_path(store, sha).is_file() for sha in needed)

    replayed = run_launch("replay", str(run))
    assert replayed.returncode == 0, replayed.stdout[-2000:] + replayed.stderr[-2000:]
    assert "REPRODUCED" in replayed.stdout
