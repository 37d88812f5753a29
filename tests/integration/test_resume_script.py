"""Resume of an unmodified Keras-fit script (issue 28): a real SIGKILL or SIGTERM after an epoch's
checkpoint, `launch resume`, and the bits compared with an uninterrupted run's."""

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import is_run
from tests.integration.resumed import (
    NPZ,
    epoch_lines,
    launched,
    record,
    run_of,
    start,
    stop_after_checkpoint,
    trained_only_after,
    work_dir,
)

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parent / "scripts" / "keras_resume.py"
EPOCHS = 6  # the script: killed after epoch 2, stopped after epoch 3


def _args(store: Path, script_args: str = f"data.npz,{EPOCHS},outputs", script: Path = SCRIPT) -> list[str]:
    return [
        "train=script",
        f"train.script={script}",
        f"train.args=[{script_args}]",
        "determinism=strict",
        f"store.root={store}",
    ]


def _work(parent: Path, name: str) -> Path:
    """A launch directory with the data and the issue's script in it (``keras_resume.py``, run by
    that name inside it): the same config, so `launch compare`, for every run made from one, and a
    copy that a test may edit while its run waits."""
    work = work_dir(parent, name)
    shutil.copy(SCRIPT, work / SCRIPT.name)
    return work


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    """The script's 6 epochs, nothing stopping it, launched from a directory of its own (``_work``)."""
    parent = tmp_path_factory.mktemp("reference")
    work, store = _work(parent, "work"), parent / "store"
    return launched(work, store, _args(store, script=work / SCRIPT.name))


def _stop_after_checkpoint(
    work: Path, store: Path, epoch: int, signum: int, *args: str, script: Path = SCRIPT, wait: float = 0.0
) -> tuple[Path, subprocess.Popen]:
    """The script's run (``train.args=[args]``), stopped ``wait`` seconds after checkpoint ``epoch``."""
    return stop_after_checkpoint(work, store, epoch, signum, _args(store, *args, script=script), wait)


def _gone(run: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(str(run) in _cmdline(p) for p in Path("/proc").glob("[0-9]*/cmdline")):
            return
        time.sleep(0.1)
    raise AssertionError("the job outlived its launcher")


def _cmdline(path: Path) -> str:
    try:
        return path.read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_a_killed_script_run_resumes_to_the_same_bits_with_the_code_it_ran_and_not_on_changed_data(
    launch, tmp_path, uninterrupted
):
    """SIGKILL after checkpoint 2. While the run waits, its data file changes: the resume refuses,
    naming it, and leaves the run as it was. The data put back, the script is edited (an edit that
    would fail at once): the script kept in the run at its checkpoint is what resumes, from anywhere,
    where the run ran, and ends on the uninterrupted run's bits. (One killed run for what were three
    tests: a killed run resumed, a changed data file refused, an edited script not run.)"""
    work = _work(tmp_path, "work")
    script = work / SCRIPT.name
    # The store inside the launch directory, as the README lays it out: the resumed job runs
    # there, its code laid out in the store, and names its data as the uninterrupted run did.
    store = work / "runs"
    run, proc = _stop_after_checkpoint(work, store, 2, signal.SIGKILL, script=script)
    proc.communicate(timeout=60)
    _gone(run, 10)
    assert not (run / "manifest.json").exists(), "the run finished before it could be killed"
    kept = json.loads((run / "snapshot.json").read_text())["files"]  # taken by the job before its checkpoint
    assert kept[str(script)]["role"] == "script", kept

    with open(work / "data.npz", "ab") as f:
        f.write(b"\0")  # the data changed between the kill and the resume
    refused = launch("resume", run)
    assert refused.returncode == 3, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert "data.npz" in refused.stdout + refused.stderr
    assert json.loads((run / "status.json").read_text())["state"] == "running"  # left as it was: unfinished
    assert not (run / "manifest.json").exists()

    shutil.copy(NPZ, work / "data.npz")  # the data put back
    script.write_text('raise SystemExit("edited after the kill")\n' + script.read_text())
    done = launch("resume", run, cwd=tmp_path)  # from anywhere: the script runs again where it ran
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "resumed from checkpoints/epoch-00000" in done.stdout
    assert f"resuming with the code the run ran, kept in it; changed since: {script}" in done.stderr
    resumed = record(run, work)  # history.json written into the launch directory, as the run would have
    for key in ("weights", "layers", "metrics", "trace", "history", "outputs", "saved"):
        assert resumed[key] == uninterrupted[key], key
    result = json.loads((run / "result.json").read_text())
    assert result["resumed_from_epoch"] >= 2
    trained_only_after(done.stdout, result["resumed_from_epoch"], EPOCHS)
    assert json.loads((run / "job.json").read_text())["resume"]["code_from_snapshot"] is True
    assert not [p for p in store.iterdir() if p.name.startswith(".resume-")]  # laid-out code removed
    compared = launch("compare", uninterrupted["run"], run)
    assert compared.returncode == 0 and "IDENTICAL" in compared.stdout, compared.stdout[-2000:]


def test_a_script_that_catches_the_stop_and_saves_ends_interrupted_and_resumes(launch, tmp_path, uninterrupted):
    """SIGTERM after epoch 2: the script catches the KeyboardInterrupt inside epoch 3, saves its
    model and ends with status 0. A stop is never a completion: the run ends INTERRUPTED and
    resumable, and the resume trains epochs 3-6 only, to the uninterrupted run's bits, the model
    file it saved, and its trace: the step the stopped job recorded last, after the checkpoint,
    is not kept (it numbered the retrained steps after it; a Slurm requeue then compared NOT
    COMPARABLE)."""
    work = _work(tmp_path, "work")
    # Sent 0.8 s after checkpoint 2, the stop lands in the script's 2 s pause after epoch 3's first step
    # (epoch 3's first step ends 0.1-0.3 s after the checkpoint on a quiet machine, later on a busy one).
    run, proc = _stop_after_checkpoint(work, tmp_path / "store", 2, signal.SIGTERM, script=work / SCRIPT.name, wait=0.8)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert "stopped: saving the model as it is" in out  # the script's own handler ran
    assert (work / "outputs" / "model.keras").is_file()  # and saved what it had
    last = out.strip().splitlines()[-1]
    assert (
        last == f"[launch] run {run} INTERRUPTED: SIGTERM; the job's code caught the stop and ended by itself "
        f"before its planned end; continue it with: launch resume {run}"
    ), last
    assert "Traceback" not in err + out
    assert json.loads((run / "status.json").read_text())["state"] == "interrupted"
    assert not (run / "manifest.json").exists()  # not sealed as complete
    at_checkpoint = json.loads((run / "checkpoints" / "epoch-000002" / "checkpoint.json").read_text())["trace_points"]
    stopped_at = [json.loads(line) for line in (run / "trace.jsonl").read_text().splitlines()][at_checkpoint:]
    assert [p["loss"] for p in stopped_at] == [None] and stopped_at[0]["step"] > 8, stopped_at  # inside epoch 3
    done = launch("resume", run)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    trained_only_after(done.stdout, 2, EPOCHS)
    resumed = record(run, work)
    for key in ("weights", "metrics", "trace", "history", "saved"):
        assert resumed[key] == uninterrupted[key], key  # "saved": outputs/model.keras, by its weights and config
    compared = launch("compare", uninterrupted["run"], run)
    assert compared.returncode == 0 and compared.stdout.startswith("IDENTICAL"), compared.stdout[-2000:]


def test_a_fit_that_early_stopping_ended_resumes_to_its_end(launch, tmp_path):
    """Killed after the checkpoint of the epoch where EarlyStopping ended the fit (4 epochs asked,
    2 run): the resumed fit runs no epoch; EarlyStopping's restore_best_weights acts on the
    restored state as it did, and the final metrics come from the kept epochs."""
    early = "data.npz,4,outputs,0,10.0"  # no val_loss improves by 10: it stops after epoch 2
    reference = work_dir(tmp_path, "reference")
    done = launch(*_args(tmp_path / "reference-store", early), cwd=reference)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    uninterrupted = run_of(tmp_path / "reference-store")
    assert len((uninterrupted / "metrics.jsonl").read_text().splitlines()) == 2  # it did stop early
    work = work_dir(tmp_path, "work")
    run, proc = _stop_after_checkpoint(work, tmp_path / "store", 2, signal.SIGKILL, early)
    proc.communicate(timeout=60)
    _gone(run, 10)
    assert not (run / "manifest.json").exists(), "the run finished before it could be killed"
    done = launch("resume", run)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert epoch_lines(done.stdout) == []  # the resumed fit trained no epoch: its state came from the checkpoint
    assert record(run, work) == record(uninterrupted, reference)
    assert (
        json.loads((run / "result.json").read_text())["final_metrics"]
        == json.loads((uninterrupted / "result.json").read_text())["final_metrics"]
    )


def _pids_running(needle: str) -> list[int]:
    return [int(p.parent.name) for p in Path("/proc").glob("[0-9]*/cmdline") if needle in _cmdline(p)]


def test_a_submitit_local_job_signalled_to_requeue_resumes_its_run(tmp_path, uninterrupted):
    """submitit_local's timeout signal (USR2, as its controller sends before `timeout_min`) after epoch
    2's checkpoint: submitit requeues the task, and the requeued job resumes the same run directory
    to the uninterrupted run's bits (the same path a Slurm preemption takes, tests/integration/test_slurm.py)."""
    work = work_dir(tmp_path, "work")
    store = tmp_path / "store"
    sweep = start(
        ["-m", *_args(store), "+seed=0", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=30"], work
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            found = [p for p in store.iterdir() if is_run(p)] if store.exists() else []
            if found and (found[0] / "checkpoints" / "epoch-000002").is_dir():
                break
            assert sweep.poll() is None, sweep.communicate()
            time.sleep(0.02)
        else:
            pytest.fail("no checkpoint appeared")
        (task,) = _pids_running(f"submitit.core._submit {store}")  # the job's task, where submitit's handler is
        os.kill(task, signal.SIGUSR2)
        out, err = sweep.communicate(timeout=600)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
    assert sweep.returncode == 0, out[-3000:] + err[-3000:]
    (run,) = found
    assert [p for p in store.iterdir() if is_run(p)] == [run]  # the same run directory, continued
    history = json.loads((run / "job.json").read_text())["resume"]["history"]
    assert history and history[0]["from_epoch"] >= 2, history
    log = (run / "log.txt").read_text()  # both attempts' output: the requeued one trained the rest only
    trained_only_after(log[log.index("[launch] resumed from") :], history[0]["from_epoch"], EPOCHS)
    result = json.loads((run / "result.json").read_text())
    assert result["weights_sha256"] == uninterrupted["weights"]
    assert (run / "metrics.jsonl").read_text() == uninterrupted["metrics"]
