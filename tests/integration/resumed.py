"""What the resume tests share: a launch directory with its data, the launch's environment, the one
run of a store, and what a resumed run must equal bit for bit in an uninterrupted one."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import DATA, REPO, is_run

NPZ = DATA / "mnist-small" / "mnist-small.npz"


def env() -> dict:
    """The environment of a launch started by hand (Popen): this tree's launcher first."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def work_dir(parent: Path, name: str) -> Path:
    """A launch directory with its own copy of the data (the scripts read data.npz, relatively)."""
    work = parent / name
    work.mkdir()
    shutil.copy(NPZ, work / "data.npz")
    return work


def run_of(store: Path) -> Path:
    """The one run of ``store``."""
    (run,) = [p for p in store.iterdir() if is_run(p)]
    return run


def record(run: Path, work: Path) -> dict:
    """What must be bitwise equal: weights, layers, outputs by meaning, every epoch's metrics, the
    trace, the final metrics, the history the script wrote into its launch directory, and every
    file it wrote there by meaning (a saved ``.keras`` model: its weights and config)."""
    from launcher.record import outputs

    result = json.loads((run / "result.json").read_text())
    return {
        "weights": result["weights_sha256"],
        "layers": result["layer_sha256"],
        "outputs": result["outputs_content"],
        "metrics": (run / "metrics.jsonl").read_text(),
        "trace": (run / "trace.jsonl").read_text(),
        "final": result["final_metrics"],
        "history": (work / "outputs" / "history.json").read_text(),
        "saved": outputs.digests(work / "outputs"),
    }


def epoch_lines(output: str) -> list[str]:
    """Keras' ``Epoch N/M`` lines in a job's output, in order: which epochs the process trained."""
    return [line.strip() for line in output.splitlines() if re.fullmatch(r"Epoch \d+/\d+", line.strip())]


def trained_only_after(output: str, epoch: int, epochs: int) -> None:
    """The resumed process trained epochs ``epoch + 1`` to ``epochs`` only, not from the start: a
    "resume" that restored nothing and trained again from epoch 1 would end with the same bits."""
    assert epoch_lines(output) == [f"Epoch {e}/{epochs}" for e in range(epoch + 1, epochs + 1)], epoch_lines(output)


def strict_script(store: Path, script: Path, args: str, *extra: str) -> list[str]:
    """The overrides of a strict run of ``script`` with ``train.args=[args]``, into ``store``."""
    return [
        "train=script",
        f"train.script={script}",
        f"train.args=[{args}]",
        "determinism=strict",
        f"store.root={store}",
        *extra,
    ]


def start(args: list[str], cwd: Path) -> subprocess.Popen:
    """``launch ARGS`` in ``cwd``, in a session of its own (a test may signal its whole group),
    its output captured; not waited for."""
    return subprocess.Popen(
        [sys.executable, "-m", "launcher", *args],
        cwd=cwd,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def launched(work: Path, store: Path, overrides: list[str]) -> dict:
    """``launch OVERRIDES`` run to its end in ``work``: its run and what it recorded (``record``)."""
    done = subprocess.run(
        [sys.executable, "-m", "launcher", *overrides],
        cwd=work,
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = run_of(store)
    return {"run": run, **record(run, work)}


def uninterrupted(parent: Path, script: Path, args: str, *extra: str) -> dict:
    """A run of ``script`` that nothing stops, launched in a directory of its own under ``parent``:
    what a resumed run must equal, bit for bit."""
    work, store = work_dir(parent, "work"), parent / "store"
    return launched(work, store, strict_script(store, script, args, *extra))


def stop_after_checkpoint(
    work: Path, store: Path, epoch: int, signum: int, overrides: list[str], wait: float = 0.0
) -> tuple[Path, subprocess.Popen]:
    """Launch ``overrides`` in ``work`` (``store``, made here, its store) and, ``wait`` seconds after
    checkpoint ``epoch`` of its run exists, SIGKILL the launch's process group (the job too, at once) or
    send ``signum`` to the launcher alone. Returns the run and the launch, not yet waited for."""
    store.mkdir()
    proc = start(overrides, work)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        found = [p for p in store.iterdir() if is_run(p)]
        if found and (found[0] / "checkpoints" / f"epoch-{epoch:06d}").is_dir():
            time.sleep(wait)
            (os.killpg if signum == signal.SIGKILL else os.kill)(proc.pid, signum)
            return found[0], proc
        assert proc.poll() is None, "the run ended before its checkpoint: " + proc.communicate()[0][-2000:]
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError("no checkpoint appeared")
