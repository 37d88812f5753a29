"""A real Slurm sweep: `launch -m ... hydra/launcher=submitit_slurm` on a single-node cluster (issue 12).

Needs a Slurm controller that answers with partition ``debug`` up, which
``.ci/slurm-setup.sh`` provides (slurmctld, slurmd and munged on this machine).
Without one these tests are skipped with the reason, unless LAUNCH_REQUIRE_SLURM=1
(CI) makes that a failure. The sbatch settings are minimal: partition debug, one task.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from launcher.sweep.multirun import hydra_quote
from tests.conftest import QUICK, run_launch

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

PARTITION = "debug"
MNIST = ("train=mnist", "determinism=strict", *QUICK)


def slurm_problem() -> str | None:
    """Why no Slurm job can run here, or None when partition ``debug`` is up with a usable node."""
    missing = [tool for tool in ("sbatch", "sinfo", "squeue") if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not installed (no Slurm client)"
    try:
        done = subprocess.run(
            ["sinfo", "-h", "-p", PARTITION, "-o", "%a %T"], capture_output=True, text=True, timeout=20
        )
    except subprocess.TimeoutExpired:
        return "sinfo did not answer within 20 s (no slurmctld?)"
    if done.returncode != 0:
        return f"sinfo failed: {done.stderr.strip() or done.stdout.strip()}"
    states = done.stdout.split()
    if not states:
        return f"Slurm has no partition {PARTITION!r}"
    if states[0] != "up" or not any(s.rstrip("*~#") in ("idle", "mixed", "allocated") for s in states[1:]):
        return f"partition {PARTITION!r} has no usable node (sinfo: {done.stdout.strip()})"
    return None


@pytest.fixture(scope="module", autouse=True)
def slurm() -> None:
    problem = slurm_problem()
    if problem:
        message = f"no Slurm cluster here: {problem}; `.ci/slurm-setup.sh` (as root) starts one"
        if os.environ.get("LAUNCH_REQUIRE_SLURM"):
            pytest.fail(message)
        pytest.skip(message)


def test_a_slurm_sweeps_seed_0_is_identical_to_a_local_run(tmp_path, mnist_npz):
    store = tmp_path / "store"
    data = f"train.data={mnist_npz}"
    done = run_launch(
        "-m",
        *MNIST,
        data,
        f"store.root={hydra_quote(str(store))}",
        "+seed=0,1",
        "hydra/launcher=submitit_slurm",
        f"hydra.launcher.partition={PARTITION}",
        "hydra.launcher.tasks_per_node=1",
        "hydra.launcher.timeout_min=30",
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sweep_dir,) = (store / "sweeps").iterdir()
    summary = json.loads((sweep_dir / "summary.json").read_text())
    assert summary["ok"] and summary["counts"] == {"complete": 2}
    jobs = {j["seed"]: j for j in summary["jobs"]}
    assert sorted(jobs) == [0, 1] and jobs[0]["weights_sha256"] != jobs[1]["weights_sha256"]
    # The jobs ran as Slurm jobs: submitit kept each one's log under its Slurm array job id.
    logs = sorted((sweep_dir / ".submitit").glob("*/*_log.out"))
    assert len(logs) == 2 and all(re.fullmatch(r"\d+_[01]", p.parent.name) for p in logs), logs
    local = run_launch(*MNIST, data, "+seed=0", f"store.root={tmp_path / 'local'}")
    assert local.returncode == 0, local.stdout[-2000:] + local.stderr[-2000:]
    (local_run,) = (tmp_path / "local").glob("2*")
    compared = run_launch("compare", jobs[0]["run_dir"], local_run)
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert compared.stdout.startswith("IDENTICAL"), compared.stdout
    assert Path(jobs[0]["run_dir"]).parent == store


@pytest.mark.long(seconds=45)  # 10 s of it Slurm's requeue delay (cred_expire in .ci/slurm-setup.sh; 120 s by default)
def test_a_preempted_slurm_job_is_requeued_and_resumes_its_run_to_the_same_bits(tmp_path, mnist_npz):
    """Slurm's preemption signal (USR2, submitit's) after epoch 1's checkpoint: submitit requeues the
    job, the requeued job resumes the same run directory, and its weights equal a local run's."""
    import shutil as _shutil
    import signal
    import sys
    import time

    from tests.conftest import REPO, is_run
    from tests.integration.resumed import epoch_lines

    script = REPO / "tests" / "integration" / "scripts" / "keras_resume.py"
    work = tmp_path / "work"
    work.mkdir()
    _shutil.copy(mnist_npz, work / "data.npz")
    args = [
        "train=script",
        f"train.script={hydra_quote(str(script))}",
        "train.args=[data.npz,3,outputs]",
        "determinism=strict",
    ]
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    sweep = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "launcher",
            "-m",
            *args,
            f"store.root={hydra_quote(str(store))}",
            "+seed=0",
            "hydra/launcher=submitit_slurm",
            f"hydra.launcher.partition={PARTITION}",
            "hydra.launcher.tasks_per_node=1",
            "hydra.launcher.timeout_min=30",
        ],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            found = [p for p in store.iterdir() if is_run(p)] if store.exists() else []
            if found and (found[0] / "checkpoints" / "epoch-000001").is_dir():
                break
            assert sweep.poll() is None, sweep.communicate()
            time.sleep(0.05)
        else:
            pytest.fail("no checkpoint appeared")
        (run,) = found
        (job_id,) = [p.name for p in (store / "sweeps").glob("*/.submitit/[0-9]*") if p.is_dir()]
        signalled = subprocess.run(["scancel", "--signal=USR2", job_id], capture_output=True, text=True)
        assert signalled.returncode == 0, signalled.stderr
        out, err = sweep.communicate(timeout=1200)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
            subprocess.run(["scancel", "--user", os.environ.get("USER", "root")], capture_output=True)
    assert sweep.returncode == 0, out[-3000:] + err[-3000:]
    (sweep_dir,) = (store / "sweeps").iterdir()
    summary = json.loads((sweep_dir / "summary.json").read_text())
    assert summary["counts"] == {"complete": 1}, summary
    assert summary["jobs"][0]["run_dir"] == str(run)  # the same run directory, continued
    assert [p for p in store.iterdir() if is_run(p)] == [run]
    history = json.loads((run / "job.json").read_text())["resume"]["history"]
    assert history and history[0]["from_epoch"] >= 1
    # The requeued attempt trained the remaining epochs only (its part of the run's log.txt).
    resumed_part = (run / "log.txt").read_text().rpartition("[launch] resumed from ")[2]
    assert epoch_lines(resumed_part) == [f"Epoch {e}/3" for e in range(history[0]["from_epoch"] + 1, 4)], resumed_part
    local = run_launch(*args, "+seed=0", f"store.root={tmp_path / 'local'}", cwd=work)
    assert local.returncode == 0, local.stdout[-2000:] + local.stderr[-2000:]
    (local_run,) = (tmp_path / "local").glob("2*")
    compared = run_launch("compare", run, local_run)
    assert compared.stdout.startswith("IDENTICAL"), compared.stdout + compared.stderr
