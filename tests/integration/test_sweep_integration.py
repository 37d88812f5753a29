"""Real sweeps through the real `launch -m` command (issue 5: seed sweeps)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from launcher.sweep.multirun import hydra_quote
from tests.conftest import QUICK, is_run
from tests.unit.test_sweep import too_many_slots

pytestmark = pytest.mark.slow


def _sweep(launch, store: Path, npz: Path, *overrides: str):
    """``launch -m`` of a quick strict MNIST sweep; returns (process, sweep directory)."""
    done = launch(
        "-m",
        "train=mnist",
        "determinism=strict",
        f"train.data={npz}",
        *QUICK,
        f"store.root={hydra_quote(str(store))}",
        *overrides,
    )
    sweeps = sorted((store / "sweeps").iterdir()) if (store / "sweeps").exists() else []
    return done, (sweeps[-1] if sweeps else None)


def _summary(sweep_dir: Path) -> dict:
    return json.loads((sweep_dir / "summary.json").read_text())


def _by_seed(summary: dict) -> dict[int, str]:
    return {j["seed"]: j["weights_sha256"] for j in summary["jobs"]}


@pytest.mark.long(seconds=45)
def test_a_two_seed_sweep_runs_summarizes_and_its_replay_reproduces_every_job_bit_for_bit(launch, store, mnist_npz):
    first, sweep_a = _sweep(launch, store, mnist_npz, "+seed=range(2)")
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
    # The sweep again, each job replayed from what it stored: the same bits, job by job.
    replayed = launch("sweep", "replay", sweep_a)
    assert replayed.returncode == 0, replayed.stdout[-3000:] + replayed.stderr[-3000:]
    assert "2 of 2 jobs reproduced bit for bit" in replayed.stdout
    replays = [p for p in store.iterdir() if is_run(p) and p not in {Path(j["run_dir"]) for j in a["jobs"]}]
    assert len(replays) == 2  # each replay is a run of its own in the store
    # Where the key differs, each job is refused before it runs, its row naming the field in full.
    refused = launch("sweep", "replay", sweep_a, env={"OMP_NUM_THREADS": "3"})
    assert refused.returncode == 3, refused.stdout[-3000:] + refused.stderr[-3000:]
    rows = [line for line in refused.stdout.splitlines() if line.startswith(("000 ", "001 "))]
    assert len(rows) == 2 and all(
        r.endswith("refused, these differ here: environment.OMP_NUM_THREADS") for r in rows
    ), refused.stdout


def test_a_jobs_bits_do_not_depend_on_its_slot_or_launcher(launch, store, mnist_npz):
    _two_slots_or_skip()
    done, sweep_dir = _sweep(launch, store, mnist_npz, "+seed=5,5", "runtime.slots=2")
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = _summary(sweep_dir)["jobs"]
    # The two slots this machine gave (its cores, or its GPUs), as the sweep's first note (stderr) names them.
    planned = done.stderr.split("slots: ", 1)[1].splitlines()[0].split(", ")
    assert len(planned) == 2 and {j["slot"] for j in jobs} == set(planned)  # the two ran at once, one per slot
    assert jobs[0]["weights_sha256"] == jobs[1]["weights_sha256"]
    # The same seed outside any slot (a plain run) and under submitit's local launcher.
    single = launch(
        "train=mnist",
        "determinism=strict",
        f"train.data={mnist_npz}",
        *QUICK,
        "+seed=5",
        f"store.root={hydra_quote(str(store))}",
    )
    assert single.returncode == 0 and jobs[0]["weights_sha256"] in single.stdout
    done, sweep_dir = _sweep(launch, store, mnist_npz, "+seed=5", "hydra/launcher=submitit_local")
    assert done.returncode == 0, done.stderr[-3000:]
    assert _by_seed(_summary(sweep_dir)) == {5: jobs[0]["weights_sha256"]}


def test_a_failed_job_shows_as_failed_and_the_others_complete(launch, weird_dir, mnist_npz):
    import numpy as np

    # MNIST's layout (the launcher's check passes), labels out of range (the job's check fails).
    bad = weird_dir.parent / "broken.npz"
    np.savez(
        bad,
        x_train=np.zeros((4, 28, 28), np.uint8),
        y_train=np.full(4, 11, np.uint8),
        x_test=np.zeros((2, 28, 28), np.uint8),
        y_test=np.zeros(2, np.uint8),
    )
    store = weird_dir  # spaces, quotes and a dollar sign in the store and sweep paths
    done, sweep_dir = _sweep(launch, store, mnist_npz, "+seed=1", f"train.data={mnist_npz},{bad}")
    assert done.returncode == 1, done.stderr[-3000:]
    assert sweep_dir.parent.parent == store
    summary = _summary(sweep_dir)
    assert [j["status"] for j in summary["jobs"]] == ["complete", "failed"]
    assert "broken.npz" in summary["jobs"][1]["error"]
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


def _two_slots_or_skip() -> None:
    """runtime.slots=2 needs two devices: two cores in this process' affinity mask, or two GPUs."""
    from launcher.errors import LauncherError
    from launcher.record.probe import probes
    from launcher.sweep import slots

    try:
        slots.plan(2, probes.hardware()["gpus"], sorted(os.sched_getaffinity(0)))
    except LauncherError as exc:
        pytest.skip(f"runtime.slots=2 cannot run on this machine: {exc}")
