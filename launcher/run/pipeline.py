"""One run, as a pipeline: resolve config, create run, plan, fingerprint, run, seal, index.

Used by a single launch, by each job of a sweep, and by replay. Whatever happens,
the run directory ends ``complete`` (sealed), ``failed`` or ``interrupted``, and
the index says so; a run that did not finish never looks complete.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from launcher.errors import DeterminismError, LauncherError
from launcher.job import determinism, interrupts
from launcher.record import layout, tbevents, tracking
from launcher.record.layout import ERROR, JOB, JOB_FACTS, RESULT
from launcher.record.probe import fingerprint, key, probes
from launcher.record.store import index, runs, snapshot
from launcher.record.store.keep import keep_snapshot, keep_so_far
from launcher.run import config, gpus, runtime, signals

FINGERPRINT = fingerprint.FILE
CONFIG = layout.CONFIG
CONTAINER = layout.CONTAINER
LAUNCHER_ROOT = str(Path(__file__).resolve().parents[2])
# ``execute``'s ``signing_key`` when not given: the ``store.signing_key`` of the config it is handed,
# composed by this invocation (a fresh run's; a replay's, with the replayer's key merged in). A resume
# hands over the run's own stored config, so it passes its resumer's key instead.
COMPOSED = object()


@dataclass
class Outcome:
    """What became of one run."""

    run_dir: Path
    status: str  # complete | failed | interrupted
    seed: int
    result: dict = field(default_factory=dict)
    error: str | None = None
    returncode: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "complete"


def prepare(
    cfg: DictConfig, store_root: Path | None = None, cwd: str | None = None, cpu: str | None = None
) -> tuple[DictConfig, Path]:
    """Resolve ``cfg`` and create its run directory (``create_run``; ``cpu``: an emulated CPU model)."""
    resolved = config.resolve(cfg)
    root = Path(store_root) if store_root is not None else Path(str(resolved.store.root))
    return resolved, create_run(resolved, root, cwd, cpu)


def check_baseline(resolved: DictConfig, cpu: str | None = None) -> None:
    """Refuse a portable run on a CPU below its ISA baseline (this machine's, or the emulated ``cpu``)."""
    baseline = resolved.determinism.get("isa_baseline") if resolved.determinism.level == "portable" else None
    if not baseline:
        return
    if cpu:
        from launcher.run import emulation

        found = emulation.emulated_cpu(cpu, sys.executable, LAUNCHER_ROOT)
    else:
        found = probes.parse_cpuinfo(probes.read_text("/proc/cpuinfo"))
    if baseline not in found["levels"]:
        has = found["levels"][-1] if found["levels"] else "none of the x86-64 levels"
        raise DeterminismError(
            f"determinism=portable needs a CPU with {baseline}; {found['model'] or 'this CPU'} has {has}"
        )


def create_run(resolved: DictConfig, root: Path, cwd: str | None = None, cpu: str | None = None) -> Path:
    """Refuse a job that cannot run (a GPU request that cannot be met, a container that
    could not reach its directories), then create its run directory under ``root``.

    The checks come first: a refused job leaves nothing behind.
    """
    gpus.check(resolved)
    runtime.get(str(resolved.runtime.name)).check(resolved, Path(root) / "next-run", cwd or os.getcwd())
    check_baseline(resolved, cpu)
    run_dir = runs.create(root, ledger=True)  # noted in the store's ledger: made here (launch resume asks)
    runs.set_status(run_dir, "running", pid=os.getpid())
    runs.write_bytes(run_dir / CONFIG, OmegaConf.to_yaml(resolved).encode())
    return run_dir


def execute(
    resolved: DictConfig,
    run_dir: Path,
    *,
    cwd: str | None = None,
    cpus: frozenset[int] | None = None,
    echo: bool = True,
    extra_env: dict[str, str] | None = None,
    replay_of: str | None = None,
    replay_notes: dict | None = None,
    resume: dict | None = None,
    track: bool = True,
    root: str | None = None,
    python: str | None = None,
    cpu: str | None = None,
    signing_key: object = COMPOSED,
) -> Outcome:
    """Run the prepared job in ``run_dir`` to its end and record how it ended.

    ``root`` is a laid-out code snapshot (``launcher.record.store.snapshot``) the job runs from
    (a replay, a sweep's jobs): ``cwd`` lies inside it, and the script, ``PYTHONPATH`` and
    a task's data are looked up there first. The run's TensorBoard events follow the job
    live and are sealed with it; MLflow (``tracking=mlflow``) hears of the run after it
    ended, unless ``track`` is false (a sweep logs its jobs itself, as children of the sweep).
    ``python`` is the job's interpreter when not ours (a rebuilt environment); ``cpu`` a CPU
    model the job process runs as, under qemu-user (``replay --cpu``). ``signing_key``: the key a
    completed run's seal is signed with (``COMPOSED``: ``resolved``'s ``store.signing_key``).
    """
    if signing_key is COMPOSED:
        signing_key = (resolved.get("store") or {}).get("signing_key")
    cwd = cwd or os.getcwd()
    plan, env, fp = launch_fingerprint(resolved, cwd, extra_env, root, cpu=cpu, python=python)
    runs.write_json(run_dir / FINGERPRINT, fp)
    runs.write_json(
        run_dir / JOB,
        {
            "plan": plan.to_dict(),
            "progress": echo and sys.stdout.isatty(),
            "launch_dir": cwd,
            "root": root,
            "replay_of": replay_of,
            "replay": replay_notes,
            "resume": resume,
        },
    )
    row = _row(run_dir, resolved, "running", replay_of=replay_of)
    index.record(run_dir.parent, row)
    job = runtime.Job(run_dir=run_dir, env=env, cwd=cwd, cpus=cpus, echo=echo, python=python, cpu_model=cpu)
    with tbevents.follow(run_dir):
        try:
            returncode = runtime.get(str(resolved.runtime.name)).run(job)
        except KeyboardInterrupt:
            returncode = 130
    outcome = finish(run_dir, resolved, fp, returncode, row, snapshot.unrooted(cwd, root), root, signing_key)
    if track:
        tracking.log_run(run_dir, resolved)
    return outcome


def launch_fingerprint(
    resolved: DictConfig,
    cwd: str,
    extra_env: dict[str, str] | None = None,
    root: str | None = None,
    cpu: str | None = None,
    python: str | None = None,
) -> tuple[determinism.Plan, dict[str, str], dict]:
    """The plan, the job's environment, and the launcher side of its fingerprint (of the
    code in the laid-out snapshot ``root`` where the job runs from one). ``cpu``: the job runs
    under qemu-user as that CPU model, which its ``hardware.cpu`` records (by CPUID, asked
    inside the emulator with the job's interpreter ``python``)."""
    det = resolved.determinism
    plan = determinism.plan(
        det.level,
        int(resolved.seed),
        det.intra_op_threads,
        det.inter_op_threads,
        det.onednn_opts,
        jit_compile=det.get("jit_compile"),
        deterministic_data=det.get("deterministic_data"),
        random_ops=det.get("random_ops"),
        isa_baseline=det.get("isa_baseline"),
        numpy_version=probes.distribution_version("numpy"),
    )
    env = runtime.job_env(dict(os.environ), plan.env, LAUNCHER_ROOT)
    env.update(extra_env or {})
    if root and env.get("PYTHONPATH"):
        env["PYTHONPATH"] = snapshot.rooted_pythonpath(env["PYTHONPATH"], root, keep=[LAUNCHER_ROOT])
    script = snapshot.rooted(str(resolved.train.script), root) if resolved.train.name == "script" else None
    notebook = snapshot.rooted(str(resolved.train.notebook), root) if resolved.train.name == "notebook" else None
    launch_dir = snapshot.unrooted(cwd, root)  # the project: what lies in it is keyed relative to it
    fp = fingerprint.collect(env, cwd, config.config_hash(resolved, launch_dir), script, notebook, launch_dir)
    if cpu:
        from launcher.run import emulation

        fp["hardware"]["cpu"] = emulation.emulated_cpu(cpu, python or sys.executable, LAUNCHER_ROOT)
    if plan.isa_baseline:  # the key holds this instead of the CPU's model and flags
        fp["hardware"]["cpu"]["baseline"] = {
            "name": plan.isa_baseline,
            "supported": plan.isa_baseline in fp["hardware"]["cpu"]["levels"],
        }
    config_dir = resolved.get("config_dir")
    if config_dir and root:
        config_dir = {"path": snapshot.rooted(str(config_dir["path"]), root), "files": list(config_dir["files"])}
    fp["config_files"] = fingerprint.config_files(config_dir)  # launch --config-dir
    return plan, env, fp


def finish(
    run_dir: Path,
    resolved: DictConfig,
    fp: dict,
    returncode: int,
    row: index.Row,
    launch_dir: str | None = None,
    root: str | None = None,
    signing_key: object = None,
) -> Outcome:
    """Seal a successful job with its code snapshot, signed with ``signing_key`` (the current
    invocation's ``store.signing_key``; None: unsigned); mark any other ending failed or
    interrupted, with its reason.

    A Ctrl-C or SIGTERM meanwhile waits until the run's ending is on record.
    """
    with signals.held():
        return _finish(run_dir, resolved, fp, returncode, row, launch_dir, root, signing_key)


def _finish(
    run_dir: Path,
    resolved: DictConfig,
    fp: dict,
    returncode: int,
    row: index.Row,
    launch_dir: str | None,
    root: str | None,
    signing_key: object,
) -> Outcome:
    seed = int(resolved.seed)
    if returncode == 0 and interrupts.was_stopped(run_dir) is not None:
        returncode = 130  # stopped, its code caught the stop and ended by itself: a stop is never a completion
    if returncode == 0 and (run_dir / RESULT).exists() and (run_dir / JOB_FACTS).exists():
        container = runs.read_json(run_dir / CONTAINER) if (run_dir / CONTAINER).exists() else None
        fp = fingerprint.merge_job_facts(fp, runs.read_json(run_dir / JOB_FACTS), container)
        runs.write_json(run_dir / FINGERPRINT, fp)
        (run_dir / JOB_FACTS).unlink()
        keep_snapshot(run_dir, resolved, fp, launch_dir or os.getcwd(), root)
        result = runs.read_json(run_dir / RESULT)
        runs.seal(run_dir, signing_key=signing_key)  # the key passed in, never one the run directory names
        row.status, row.key_sha256 = "complete", key.key_sha256(fp)
        row.metrics = json.dumps(result.get("final_metrics", {}), sort_keys=True)
        row.weights_sha256 = result.get("weights_sha256")
        index.record(run_dir.parent, row)
        return Outcome(run_dir, "complete", seed, result=result, returncode=0)
    state = "interrupted" if returncode in (130, -2, -15, -9, -10, -12) else "failed"
    if (run_dir / JOB_FACTS).exists():  # what it ran so far, kept for launch resume
        keep_so_far(run_dir, resolved, fp, runs.read_json(run_dir / JOB_FACTS), launch_dir or os.getcwd(), root)
    error = _job_error(run_dir, returncode)
    runs.set_status(run_dir, state, error=error, returncode=returncode)
    row.status = state
    index.record(run_dir.parent, row)
    return Outcome(run_dir, state, seed, error=error, returncode=returncode)


def run(cfg: DictConfig, *, store_root: Path | None = None, on_created=None, **kwargs) -> Outcome:
    """Prepare and execute one run; a config or store error raises before a run exists.
    ``on_created(run_dir)`` hears of the run directory before the job starts (a sweep job's
    record names it, so that a requeued job resumes it)."""
    resolved, run_dir = prepare(cfg, store_root, kwargs.get("cwd"), kwargs.get("cpu"))
    if on_created is not None:
        on_created(run_dir)
    try:
        return execute(resolved, run_dir, **kwargs)
    except Exception as exc:  # an expected error or a bug: either way the run never stays "running"
        runs.set_status(run_dir, "failed", error=str(exc) if isinstance(exc, LauncherError) else repr(exc))
        raise
    except KeyboardInterrupt:  # before the job started or after it ended: never "running" either
        if runs.status(run_dir).get("state") == "running":
            runs.set_status(run_dir, "interrupted", error="Ctrl-C or SIGTERM to the launcher", returncode=130)
        raise


def summary_line(outcome: Outcome) -> str:
    """The one line printed at the end of a run."""
    if not outcome.ok:
        return f"[launch] run {outcome.run_dir} {outcome.status.upper()}: {outcome.error}"
    metrics = outcome.result.get("final_metrics", {})
    shown = [f"{k}={v:.4f}" for k, v in sorted(metrics.items())]
    weights = outcome.result.get("weights_sha256") or "(no model recorded)"
    head = f"[launch] run {outcome.run_dir} complete; seed={outcome.seed}"
    return " ".join([head, *shown, f"weights_sha256={weights}"])


def _job_error(run_dir: Path, returncode: int) -> str:
    if (run_dir / ERROR).exists():
        return runs.read_json(run_dir / ERROR).get("message", "job failed")
    if returncode < 0:
        return f"job killed by signal {-returncode}"
    if returncode == 130:  # stopped without a word from the job (a container, or a sweep aborted at once)
        return "Ctrl-C"
    if returncode == 0:
        return "job ended without writing result.json"
    return f"job exited with status {returncode} (see {run_dir / 'log.txt'})"


def _row(run_dir: Path, resolved: DictConfig, status: str, replay_of: str | None) -> index.Row:
    return index.Row(
        id=run_dir.name,
        path=str(run_dir.resolve()),
        time=_dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        task=str(resolved.train.name),
        level=str(resolved.determinism.level),
        seed=int(resolved.seed),
        status=status,
        replay_of=replay_of,
    )
