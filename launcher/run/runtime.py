"""Where a job process runs. A runtime takes a prepared run directory and returns an exit code.

``local`` starts ``python -m launcher.bootstrap RUN_DIR`` as a child of ``launch``; a
replay's job that must read the run's kept data at absolute paths starts with those files
placed there (``placed_data``, ``launcher.proc.place_argv``). A container runtime implements
the same ``run(job)`` with the bootstrap as entrypoint.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from launcher import entrypoints, proc
from launcher.errors import ConfigError
from launcher.job import interrupts
from launcher.record import layout
from launcher.record.store import runs
from launcher.run import signals


@dataclass(frozen=True)
class Job:
    """A job ready to start: its run directory and the environment it must start with."""

    run_dir: Path
    env: dict[str, str]  # the complete environment of the job process
    cwd: str  # the user's launch directory (imports of train.entrypoint resolve here)
    cpus: frozenset[int] | None = None  # CPU slot: the cores the job may run on
    echo: bool = True  # stream the job's output to our stdout
    extra: dict = field(default_factory=dict)
    python: str | None = None  # the interpreter of a rebuilt environment (replay --rebuild); default: ours
    cpu_model: str | None = None  # run the job process under qemu-user as this CPU (replay --cpu); local only
    workers: int = 1  # distribute.workers: that many job processes, one run (launcher.run.workers); local only
    slurm: bool = False  # the workers are a Slurm step's tasks: this one starts the chief only


class Runtime(Protocol):
    name: str

    def check(self, cfg, run_dir: Path, cwd: str) -> None:
        """Refuse (``ConfigError``) a job this runtime cannot run, before ``run_dir`` exists."""

    def run(self, job: Job) -> int: ...


def bootstrap_argv(python: str, run_dir: Path, cpu_model: str | None = None) -> list[str]:
    """The job's command line. Safe paths (``-P``): the launcher comes from where it is
    installed (``PYTHONPATH``), never from a ``launcher/`` in the launch directory. With
    ``cpu_model``, the job process itself runs under ``qemu-x86_64 -cpu MODEL`` (its own
    children would not be emulated)."""
    argv = entrypoints.argv(python, entrypoints.JOB, str(run_dir), safe_path=True)
    if cpu_model:
        from launcher.run import emulation

        argv = emulation.wrap(argv, cpu_model)
    return argv


class LocalRuntime:
    """The job runs in a child process of ``launch`` on this machine."""

    name = "local"

    def check(self, cfg, run_dir: Path, cwd: str) -> None:
        """Nothing to check: the job runs here, as ``launch`` does."""

    def run(self, job: Job) -> int:
        """The job's exit code; 130 whenever a SIGINT or SIGTERM stopped it (its error says why),
        also when the job's code caught the stop and ended with status 0: a stop is never a completion."""
        if job.workers > 1:
            return run_workers(job, 0 if job.slurm else None)
        argv = bootstrap_argv(job.python or sys.executable, job.run_dir, job.cpu_model)
        ended = proc.run_job(
            proc.place_argv(sys.executable, placed_data(job.run_dir), argv),
            env=job.env,
            log_path=layout.RunPaths(job.run_dir).log,
            cwd=job.cwd,
            echo=job.echo,
            preexec_affinity=set(job.cpus) if job.cpus else None,
        )
        if ended.stop is None:
            return ended.returncode
        signals.stopping_launcher()  # a second Ctrl-C has nothing left to stop
        if ended.returncode == 0 and interrupts.was_stopped(job.run_dir) is None:
            return 0  # it completed before the stop reached a place where it could stop
        error = layout.RunPaths(job.run_dir).error
        if ended.returncode == 0:  # its code caught the stop (except KeyboardInterrupt: save) and ended
            runs.write_json(error, {"type": "KeyboardInterrupt", "message": stop_reason(ended)})
            return 130
        if ended.returncode != 130 or not error.exists():  # killed, or ended otherwise: say what stopped it
            runs.write_json(error, {"type": "KeyboardInterrupt", "message": stop_reason(ended)})
        return 130


def run_workers(job: Job, only: int | None = None) -> int:
    """A multi-worker ``job`` (``launcher.run.workers``): its ``job.workers`` workers started
    together on this machine, each with its ``TF_CONFIG`` naming free local ports; or, under
    Slurm, worker ``only`` alone here, its ``TF_CONFIG`` from the step's node list. The run's
    exit code (the chief's side: ``workers.ended``), or worker ``only``'s own when not the chief."""
    from launcher.run import workers

    if only is None:
        addresses, indices = workers.local_addresses(workers.free_ports(job.workers)), range(job.workers)
    else:
        addresses, indices = workers.slurm_cluster(os.environ)[0], [only]
    members, placed = [], placed_data(job.run_dir)
    for i in indices:
        paths = layout.RunPaths(job.run_dir).worker(i)
        argv = proc.place_argv(
            sys.executable, placed, bootstrap_argv(job.python or sys.executable, paths.run_dir, job.cpu_model)
        )
        env = {**job.env, "TF_CONFIG": workers.tf_config(addresses, i)}
        members.append(proc.Member(argv, env, paths.log, echo=job.echo and i == 0))
    group = proc.run_group(members, cwd=job.cwd, preexec_affinity=set(job.cpus) if job.cpus else None)
    if only not in (None, 0):
        return group.ended[0].returncode
    if only == 0:  # the other workers are other tasks': their ends, before the run is sealed
        workers.await_ended(job.run_dir, job.workers)
    return workers.ended(job.run_dir, group)


def placed_data(run_dir: Path) -> dict[str, str]:
    """The files a replay's job reads at their paths from elsewhere: ``job.json``'s
    ``replay.placed_data`` (absolute path -> the run's kept copy, laid out), written by
    ``launcher.verdict.replay``; none for any other job."""
    path = layout.RunPaths(run_dir).job
    notes = (runs.read_json(path).get("replay") or {}) if path.exists() else {}
    return dict(notes.get("placed_data") or {})


def stop_reason(ended: proc.Ended) -> str:
    """The error of a run whose job was stopped by a signal but did not end by itself as asked."""
    reason = signals.REASONS.get(ended.stop, "interrupted")
    if ended.killed:
        return f"{reason}; the job was killed: {ended.killed}"
    if ended.returncode < 0:
        return f"{reason}; the job died of signal {-ended.returncode} while stopping"
    if ended.returncode == 0:
        return f"{reason}; the job's code caught the stop and ended by itself before its planned end"
    return f"{reason}; the job ended with status {ended.returncode} while stopping"


def job_env(base: dict[str, str], plan_env: dict[str, str], launcher_root: str) -> dict[str, str]:
    """The job's environment: ours, the plan's variables on top, and the launcher importable."""
    env = dict(base)
    env.update(plan_env)
    # The job imports `launcher` even when `launch` runs from a source tree.
    paths = [launcher_root, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    # Quiet TensorFlow's C++ start-up chatter; errors still show.
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


INSTALL_TENSORFLOW = (
    "pip install 'tf-repro-launcher[cpu]' (no GPU), 'tf-repro-launcher[gpu]' (NVIDIA GPUs), or the TensorFlow you use"
)


def require_tensorflow() -> None:
    """A local run's job imports TensorFlow in this Python: refuse (``ConfigError``) before a run exists
    when none is installed. The launcher installs none unless asked (docs/gpu.md, "Installing")."""
    import importlib.util

    if importlib.util.find_spec("tensorflow") is None:
        raise ConfigError(f"TensorFlow is not installed in this Python ({sys.executable}): {INSTALL_TENSORFLOW}")


def get(name: str) -> Runtime:
    if name == "local":
        return LocalRuntime()
    if name == "docker":
        from launcher.docker.runtime import DockerRuntime

        return DockerRuntime()
    raise ConfigError(f"runtime={name!r} is unknown; choose local or docker")
