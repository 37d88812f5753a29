"""A real Slurm job of 2 tasks is one run of 2 workers (issue 49), on the single-node cluster
``.ci/slurm-setup.sh`` starts (2 CPUs: a task each). Skipped without one, unless
LAUNCH_REQUIRE_SLURM=1 (CI) makes that a failure, as in test_slurm.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from launcher.record import layout
from launcher.sweep.multirun import hydra_quote
from tests.conftest import REPO, run_dir_of, run_launch
from tests.integration.test_slurm import PARTITION, slurm_problem

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

LOOP = REPO / "tests" / "integration" / "scripts" / "multi_worker_loop.py"
NPZ = REPO / "tests" / "data" / "mnist-small" / "mnist-small.npz"


@pytest.fixture(scope="module", autouse=True)
def slurm() -> None:
    problem = slurm_problem()
    if problem:
        message = f"no Slurm cluster here: {problem}; `.ci/slurm-setup.sh` (as root) starts one"
        if os.environ.get("LAUNCH_REQUIRE_SLURM"):
            pytest.fail(message)
        pytest.skip(message)


def test_a_two_task_slurm_job_is_one_two_worker_run_with_the_local_runs_weights(tmp_path):
    store = tmp_path / "store"
    script = ["train=script", f"train.script={hydra_quote(str(LOOP))}", f"train.args=[{hydra_quote(str(NPZ))},2]"]
    done = run_launch(
        "-m",
        *script,
        f"store.root={hydra_quote(str(store))}",
        "hydra/launcher=submitit_slurm",
        f"hydra.launcher.partition={PARTITION}",
        "hydra.launcher.tasks_per_node=2",
        "hydra.launcher.timeout_min=30",
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sweep_dir,) = (store / "sweeps").iterdir()
    summary = json.loads((sweep_dir / "summary.json").read_text())
    assert summary["ok"] and summary["counts"] == {"complete": 1}, summary
    run = layout.RunPaths(summary["jobs"][0]["run_dir"])
    cluster = json.loads(run.fingerprint.read_text())["cluster"]
    assert cluster["workers"] == 2 and cluster["collective"] == "RING"
    assert len(set(cluster["weights_sha256"])) == 1
    assert json.loads(run.worker(1).fingerprint.read_text())["cluster"]["worker"] == 1
    local = run_launch(*script, "distribute.workers=2", f"store.root={tmp_path / 'local'}")
    local_run = run_dir_of(local)
    assert json.loads((local_run / layout.RESULT).read_text())["weights_sha256"] == cluster["weights_sha256"][0]
    compared = run_launch("compare", run.run_dir, local_run)
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert compared.stdout.startswith("IDENTICAL"), compared.stdout
    assert Path(run.run_dir).parent == store
