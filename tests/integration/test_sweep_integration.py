"""Real sweeps through the real `launch -m` command (issue 5: seed sweeps)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from launcher.sweep.multirun import hydra_quote
from tests.conftest import TINY, is_run
from tests.unit.test_sweep import too_many_slots

pytestmark = pytest.mark.slow


def _sweep(launch, store: Path, npz: Path, *overrides: str):
    """``launch -m`` of a tiny strict MNIST sweep (3 steps a job); returns (process, sweep directory)."""
    done = launch(
        "-m",
        "train=mnist",
        "determinism=strict",
        f"train.data={npz}",
        *TINY,
        f"store.root={hydra_quote(str(store))}",
        *overrides,
    )
    sweeps = sorted((store / "sweeps").iterdir()) if (store / "sweeps").exists() else []
    return done, (sweeps[-1] if sweeps else None)


def _summary(sweep_dir: Path) -> dict:
    return json.loads((sweep_dir / "summary.json").read_text())


def _by_seed(summary: dict) -> dict[int, str]:
    return {j["seed"]: j["weights_sha256"] for j in summary["jobs"]}


@pytest.mark.long(seconds=50)
def test_a_two_seed_sweep_runs_summarizes_and_its_replay_reproduces_every_job_bit_for_bit(
    launch, store, weird_dir, mnist_npz
):
    """A two-seed sweep, its two jobs at once in two slots (where this machine has two), then replayed
    outside any slot: each job's bits depend neither on its slot nor on the job beside it. The
    first seed again under submitit's local launcher, beside a job that fails: nor on the launcher,
    and a failed job shows as failed while the other completes."""
    two = _two_slots()
    first, sweep_a = _sweep(launch, store, mnist_npz, "+seed=range(2)", f"runtime.slots={2 if two else 1}")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    a = _summary(sweep_a)
    assert a["ok"] and a["counts"] == {"complete": 2}
    assert sorted(_by_seed(a)) == [0, 1]
    assert a["distinct_weights"] == 2  # two seeds, two different models
    assert {"accuracy", "loss"} <= set(a["metrics"])
    assert a["metrics"]["loss"]["min"] <= a["metrics"]["loss"]["mean"] <= a["metrics"]["loss"]["max"]
    for job in a["jobs"]:  # one sealed run directory per job, in the store
        run = Path(job["run_dir"])
        assert run.parent == store and (run / "manifest.json").exists()
        assert json.loads((run / "result.json").read_text())["weights_sha256"] == job["weights_sha256"]
    assert sorted(p.name for p in (sweep_a / "jobs").iterdir()) == [f"00{i}.json" for i in range(2)]
    assert "2 of 2 jobs complete; 2 distinct weight hash(es)" in first.stdout
    if two:
        # The two slots this machine gave (its cores, or its GPUs), as the sweep's first note (stderr) names them.
        planned = first.stderr.split("slots: ", 1)[1].splitlines()[0].split(", ")
        assert len(planned) == 2 and {j["slot"] for j in a["jobs"]} == set(planned)  # at once, one per slot
    # The sweep again, each job replayed from what it stored, as a plain run (no slot): the same bits, job by job.
    replayed = launch("sweep", "replay", sweep_a)
    assert replayed.returncode == 0, replayed.stdout[-3000:] + replayed.stderr[-3000:]
    assert "2 of 2 jobs reproduced bit for bit" in replayed.stdout
    replays = [p for p in store.iterdir() if is_run(p) and p not in {Path(j["run_dir"]) for j in a["jobs"]}]
    assert len(replays) == 2  # each replay is a run of its own in the store
    assert sorted(json.loads((p / "result.json").read_text())["weights_sha256"] for p in replays) == sorted(
        _by_seed(a).values()
    )
    # Where the key differs, each job is refused before it runs, its row naming the field in full.
    refused = launch("sweep", "replay", sweep_a, env={"OMP_NUM_THREADS": "3"})
    assert refused.returncode == 3, refused.stdout[-3000:] + refused.stderr[-3000:]
    rows = [line for line in refused.stdout.splitlines() if line.startswith(("000 ", "001 "))]
    assert len(rows) == 2 and all(
        r.endswith("refused, these differ here: environment.OMP_NUM_THREADS") for r in rows
    ), refused.stdout
    # The same seed under submitit's local launcher, and a job on data with MNIST's layout (the
    # launcher's check passes) and labels out of range (the job's check fails): it fails, the other
    # completes. Its store has spaces, quotes and a dollar sign in its path, as have its sweep's.
    import numpy as np

    bad = weird_dir.parent / "broken.npz"
    np.savez(
        bad,
        x_train=np.zeros((4, 28, 28), np.uint8),
        y_train=np.full(4, 11, np.uint8),
        x_test=np.zeros((2, 28, 28), np.uint8),
        y_test=np.zeros(2, np.uint8),
    )
    done, sweep_b = _sweep(
        launch, weird_dir, mnist_npz, "+seed=0", f"train.data={mnist_npz},{bad}", "hydra/launcher=submitit_local"
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert sweep_b.parent.parent == weird_dir
    b = _summary(sweep_b)
    assert [j["status"] for j in b["jobs"]] == ["complete", "failed"]
    assert b["jobs"][0]["weights_sha256"] == _by_seed(a)[0]  # the same bits under another launcher
    assert "broken.npz" in b["jobs"][1]["error"]
    assert "1 of 2 jobs complete" in done.stdout


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["+seed=range(0)"], "yields no values"),
        (["+seed=1,x"], "seed must be an integer"),
        (["+seed=1,2", f"runtime.slots={too_many_slots()}"], f"runtime.slots={too_many_slots()} but this machine has"),
        (["+seed=1,2", "train.data=/etc/passwd"], "/etc/passwd is not an .npz file"),
    ],
)
def test_bad_input_fails_before_any_job(launch, store, mnist_npz, overrides, message):
    done, sweep_dir = _sweep(launch, store, mnist_npz, *overrides)
    assert done.returncode == 2
    assert done.stderr.strip().startswith("launch: error: ") and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert sweep_dir is None and list(store.iterdir()) == []


def _two_slots() -> bool:
    """runtime.slots=2 needs two devices: two cores in this process' affinity mask, or two GPUs."""
    from launcher.errors import LauncherError
    from launcher.record.probe import probes
    from launcher.sweep import slots

    try:
        slots.plan(2, probes.hardware()["gpus"], sorted(os.sched_getaffinity(0)))
    except LauncherError:
        return False
    return True
