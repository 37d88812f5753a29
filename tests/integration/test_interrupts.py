"""Ctrl-C, SIGTERM and a killed launcher, with real signals to real processes (issues 17, 27).

A silent job (it prints ``ready``, then sleeps) stands in for a long training run: it never
writes to its output after starting, so nothing but the launcher's own handling (Ctrl-C passed
to the job; PR_SET_PDEATHSIG when the launcher is killed) can end it. The stress test
interrupts real training at random moments, from the job's start to its epochs.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import REPO, is_run, q

pytestmark = pytest.mark.slow

SLEEPER = "import time\nprint('ready', flush=True)\ntime.sleep(600)\n"


@pytest.fixture
def sleeper(tmp_path: Path) -> Path:
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    return script


@pytest.fixture
def _launch(store):
    """Start `launch` in its own session; whatever a test leaves running is killed after it."""
    started: list[subprocess.Popen] = []

    def start(*args: str, cwd: Path) -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "launcher", *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=_default_signals,
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the launcher's group: its jobs too, if any were left
        except ProcessLookupError:
            pass
        proc.wait()
    for pid in _pids_mentioning(store):  # a job whose launcher died first has left the group's tree
        os.kill(pid, signal.SIGKILL)


def _default_signals() -> None:
    """As a terminal's foreground command starts: Ctrl-C and SIGTERM not ignored (pytest may
    have been started in the background of a script, where SIGINT is ignored and inherited)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _two_slots_or_skip() -> None:
    """runtime.slots=2 needs two devices: two cores in this process' affinity mask, or two GPUs."""
    from launcher.errors import LauncherError
    from launcher.record.probe import probes
    from launcher.sweep import slots

    try:
        slots.plan(2, probes.hardware()["gpus"], sorted(os.sched_getaffinity(0)))
    except LauncherError as exc:
        pytest.skip(f"runtime.slots=2 cannot run on this machine: {exc}")


def _ready(proc: subprocess.Popen) -> list[str]:
    """The launcher's output up to the job's ``ready`` (the job is then sleeping)."""
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.strip() == "ready":
            return lines
    pytest.fail(f"the job never started (exit {proc.wait()}): {''.join(lines)[-2000:]} {proc.stderr.read()[-2000:]}")


def _pids_mentioning(path: Path) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(path) in text and int(cmdline.parent.name) != os.getpid():
            found.append(int(cmdline.parent.name))
    return found


def _gone(path: Path, within: float) -> bool:
    deadline = time.monotonic() + within
    while _pids_mentioning(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _only_run(store: Path) -> Path:
    (run,) = [p for p in store.iterdir() if is_run(p)]
    return run


def test_ctrl_c_to_the_launcher_ends_a_local_run_interrupted_with_130(store, sleeper, tmp_path, _launch):
    proc = _launch("train=script", f"train.script={q(sleeper)}", f"store.root={q(store)}", cwd=tmp_path)
    _ready(proc)
    run = _only_run(store)
    proc.send_signal(signal.SIGINT)  # to the launcher alone: it passes Ctrl-C on to its job
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert out.strip().splitlines()[-1].startswith(f"[launch] run {run} INTERRUPTED"), out[-2000:]
    assert "Traceback" not in err
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "interrupted" and not (run / "manifest.json").exists()
    assert _gone(run, 10), "the job outlived its interrupted launcher"
    refused = subprocess.run(
        [sys.executable, "-m", "launcher", "compare", str(run), str(run)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert refused.returncode == 4 and "is not complete (state: interrupted" in refused.stderr


def test_a_silent_job_does_not_outlive_its_sigkilled_launcher(store, sleeper, tmp_path, _launch):
    proc = _launch("train=script", f"train.script={q(sleeper)}", f"store.root={q(store)}", cwd=tmp_path)
    _ready(proc)
    run = _only_run(store)
    assert _pids_mentioning(run), "no job process to watch"
    os.kill(proc.pid, signal.SIGKILL)  # the launcher only; the job is asleep and writes nothing
    proc.wait()
    proc.stdout.close(), proc.stderr.close()
    assert _gone(run, 5), "the job process outlived its SIGKILLed launcher (PR_SET_PDEATHSIG)"
    assert json.loads((run / "status.json").read_text())["state"] == "running"  # nobody left to say otherwise


# slots 1: joblib runs the job inside `launch`; 2: in loky workers. SIGTERM goes to `launch` alone,
# as Slurm and Kubernetes send it; Ctrl-C to the whole foreground process group, as a terminal does.
@pytest.mark.parametrize(("slots", "how"), [(1, "ctrl-c"), (2, "ctrl-c"), (1, "sigterm"), (2, "sigterm")])
def test_ctrl_c_in_a_sweep_interrupts_the_running_jobs_and_starts_no_queued_one(
    store, sleeper, tmp_path, slots, how, _launch
):
    from launcher.sweep.multirun import hydra_quote

    if slots == 2:
        _two_slots_or_skip()
    jobs = slots + 2
    proc = _launch(
        "-m",
        "train=script",
        f"train.script={hydra_quote(str(sleeper))}",
        f"+seed=range({jobs})",
        f"runtime.slots={slots}",
        f"store.root={hydra_quote(str(store))}",
        cwd=tmp_path,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # the jobs' output goes to their logs, not to the terminal
        if len([p for p in store.glob("*/log.txt") if "ready" in p.read_text(errors="replace")]) == slots:
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    else:
        pytest.fail("the sweep's first jobs did not start")
    if how == "sigterm":
        proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-3000:] + err[-3000:]
    by = " by SIGTERM" if how == "sigterm" else ""
    assert f"[sweep] interrupted{by}: running jobs stop, queued jobs will not start" in err, err[-3000:]
    assert "Traceback" not in err
    (sweep_dir,) = (store / "sweeps").iterdir()
    records = json.loads((sweep_dir / "summary.json").read_text())["jobs"]
    assert [j["status"] for j in records] == ["interrupted"] * jobs, records
    assert ["not started" in j["error"] for j in records] == [False] * slots + [True] * 2, records
    ran = [p for p in store.iterdir() if is_run(p) and p.name != "sweeps"]
    assert len(ran) == slots  # no queued job started
    for run in ran:
        assert json.loads((run / "status.json").read_text())["state"] == "interrupted"
        assert _gone(run, 10)


def test_sigterm_to_the_launcher_ends_a_local_run_interrupted_with_130(store, sleeper, tmp_path, _launch):
    proc = _launch("train=script", f"train.script={q(sleeper)}", f"store.root={q(store)}", cwd=tmp_path)
    _ready(proc)
    run = _only_run(store)
    proc.send_signal(signal.SIGTERM)  # what Slurm and Kubernetes send, to the launcher alone
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    last = out.strip().splitlines()[-1]  # a script with no fit: no checkpoint, and the hint says so
    assert last.startswith(
        f"[launch] run {run} INTERRUPTED: SIGTERM; launch resume would refuse it: it has no checkpoints"
    ), out[-2000:]
    assert "Traceback" not in err + out
    assert json.loads((run / "status.json").read_text())["state"] == "interrupted"
    assert _gone(run, 10)


def test_a_job_that_ignores_the_stop_is_killed_and_the_run_still_ends_interrupted(store, tmp_path, _launch):
    stubborn = tmp_path / "stubborn.py"
    stubborn.write_text(
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "print('ready', flush=True)\ntime.sleep(600)\n"
    )
    proc = _launch("train=script", f"train.script={q(stubborn)}", f"store.root={q(store)}", cwd=tmp_path)
    _ready(proc)
    run = _only_run(store)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(1)
    assert proc.poll() is None, "the launcher did not wait for its job"
    os.killpg(proc.pid, signal.SIGINT)  # a second Ctrl-C: the job is killed at once
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert (
        out.strip()
        .splitlines()[-1]
        .startswith(
            f"[launch] run {run} INTERRUPTED: Ctrl-C; the job was killed: "
            "a second SIGINT; launch resume would refuse it"
        )
    ), out[-2000:]
    assert "Traceback" not in err + out
    assert json.loads((run / "status.json").read_text())["state"] == "interrupted"
    assert _gone(run, 10)


STRESS_LAUNCHES = int(os.environ.get("LAUNCH_STRESS_LAUNCHES", 8))  # 20 and more by hand; 8 in the suite
# (8 give every kind of STRESS_KINDS at least once, ctrl-c 5 times, sigterm twice: the moments vary)
# (how, count): SIGINT to the launcher's process group, as a terminal's Ctrl-C; SIGTERM to the
# launcher alone, as Slurm or Kubernetes; two Ctrl-Cs 0.2 s apart (the second kills the job).
STRESS_KINDS = ["ctrl-c", "sigterm", "ctrl-c", "ctrl-c twice", "ctrl-c"]
STRESS_WINDOW_S = 8.0  # the moments: uniform over the job's first seconds (TensorFlow's import to epochs)


@pytest.mark.long(seconds=31)
def test_stress_interrupts_at_random_moments_always_end_interrupted(mnist_npz, tmp_path):
    """8 real training launches (``LAUNCH_STRESS_LAUNCHES``; each kind of stop at least once), each
    interrupted at a random moment after its job started: every one ends INTERRUPTED with exit code
    130, status.json ``interrupted``, no traceback, no job left behind, and the resume hint exactly
    when the run can be resumed."""
    from launcher.errors import LauncherError
    from launcher.run import resume

    seed = int(os.environ.get("LAUNCH_STRESS_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    plan = [(i, STRESS_KINDS[i % len(STRESS_KINDS)], rng.uniform(0, STRESS_WINDOW_S)) for i in range(STRESS_LAUNCHES)]

    def one(item: tuple[int, str, float]) -> str | None:
        i, kind, delay = item
        store = tmp_path / f"store {i}"
        store.mkdir()
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        argv = [
            sys.executable,
            "-m",
            "launcher",
            f"train.data={mnist_npz}",
            f"store.root={store}",
            "train.epochs=200",
            "train.batch_size=100",
        ]
        proc = subprocess.Popen(
            argv,
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=_default_signals,
        )
        try:
            deadline = time.monotonic() + 120
            while not list(store.glob("*/log.txt")):  # the job has started
                if proc.poll() is not None or time.monotonic() > deadline:
                    return f"launch {i}: the job never started: {proc.communicate()}"
                time.sleep(0.01)
            time.sleep(delay)
            if kind == "sigterm":
                proc.send_signal(signal.SIGTERM)
            else:
                os.killpg(proc.pid, signal.SIGINT)
                if kind == "ctrl-c twice":
                    time.sleep(0.2)
                    os.killpg(proc.pid, signal.SIGINT)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        (run,) = [p for p in store.iterdir() if is_run(p)]  # a run that ran on to the end also kept objects/
        what = f"launch {i} ({kind} after {delay:.2f} s, exit {proc.returncode})"
        status = json.loads((run / "status.json").read_text())
        last = out.strip().splitlines()[-1] if out.strip() else ""
        try:
            resume.check_resumable(run)
            resumable = True
        except LauncherError:
            resumable = False
        problems = [
            proc.returncode != 130 and "exit code is not 130",
            status["state"] != "interrupted" and f"status.json says {status['state']}",
            not last.startswith(f"[launch] run {run} INTERRUPTED: ") and "the last line is not INTERRUPTED",
            ("continue it with: launch resume" in last) != resumable and f"resume hint wrong (resumable: {resumable})",
            ("Traceback" in out + err or "KeyboardInterrupt" in out + err) and "a traceback",
            (run / "manifest.json").exists() and "sealed",
            not _gone(run, 10) and "the job outlived its launcher",
        ]
        problems = [p for p in problems if p]
        if not problems:
            return None
        return f"{what}: {', '.join(problems)}; status {status}\n{out[-1500:]}\n{err[-1500:]}"

    with ThreadPoolExecutor(max_workers=2) as pool:  # two at a time: the job's moments vary more, in half the time
        failures = [f for f in pool.map(one, plan) if f]
    assert not failures, (
        f"{len(failures)} of {STRESS_LAUNCHES} interrupts were not clean "
        f"(LAUNCH_STRESS_SEED={seed}):\n" + "\n\n".join(failures)
    )
