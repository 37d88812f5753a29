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
from launcher.record.probe import fingerprint, key, probes
from launcher.record.store import index, runs, snapshot
from launcher.record.store.keep import keep_snapshot, keep_so_far
from launcher.run import config, gpus, runtime, signals, workers

LAUNCHER_ROOT = str(Path(__file__).resolve().parents[2])
# ``Options.signing_key`` when not given: the ``store.signing_key`` of the config it is handed,
# composed by this invocation (a fresh run's; a replay's, with the replayer's key merged in). A resume
# hands over the run's own stored config, so it passes its resumer's key instead.
COMPOSED = object()


@dataclass(frozen=True)
class Options:
    """How ``execute`` runs a prepared job, beyond its config and its directory: what each caller
    (a launch, a sweep's job, a replay, a resume, an audit's trial) says differently, in one value
    handed on whole instead of a dozen keywords passed on blind.

    ``cwd``: the directory the job starts in (default: this process's). ``root``: a laid-out code
    snapshot (``launcher.record.store.snapshot``) the job runs from (a replay, a sweep's jobs):
    ``cwd`` lies inside it, and the script, ``PYTHONPATH`` and a task's data are looked up there
    first. ``cpus``: the cores the job is pinned to (a sweep's slot). ``echo``: the job's output on
    the terminal too. ``extra_env``: environment variables set for the job over the launcher's (a
    slot's, a replay's). ``replay_of``, ``replay_notes``: the run this one replays, and what the
    replay noted (in ``job.json``). ``resume``: what a resume continues from. ``track``: MLflow
    (``tracking=mlflow``) hears of the run when it ended (a sweep logs its jobs itself, as children
    of the sweep). ``python``: the job's interpreter when not ours (a rebuilt Python environment).
    ``cpu``: a CPU model the job process runs as, under qemu-user (``replay --cpu``).
    ``signing_key``: the key a completed run's seal is signed with (``COMPOSED``: the config's
    ``store.signing_key``). ``slurm``: a multi-worker run whose workers are the tasks of a Slurm
    step (``launcher.run.workers``); this process starts the chief, the other tasks the others.
    """

    cwd: str | None = None
    cpus: frozenset[int] | None = None
    echo: bool = True
    extra_env: dict[str, str] | None = None
    replay_of: str | None = None
    replay_notes: dict | None = None
    resume: dict | None = None
    track: bool = True
    root: str | None = None
    python: str | None = None
    cpu: str | None = None
    signing_key: object = COMPOSED
    slurm: bool = False  # a multi-worker run whose workers are a Slurm step's tasks; this one the chief's


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
    runs.write_bytes(layout.RunPaths(run_dir).config, OmegaConf.to_yaml(resolved).encode())
    return run_dir


def execute(resolved: DictConfig, run_dir: Path, options: Options = Options()) -> Outcome:
    """Run the prepared job in ``run_dir`` to its end, as ``options`` say, and record how it ended.

    The run's TensorBoard events follow the job live and are sealed with it; MLflow hears of the
    run after it ended, unless ``options.track`` is false.
    """
    o = options
    signing_key = o.signing_key
    if signing_key is COMPOSED:
        signing_key = (resolved.get("store") or {}).get("signing_key")
    cwd, root = o.cwd or os.getcwd(), o.root
    plan, env, fp = launch_fingerprint(resolved, cwd, o.extra_env, root, cpu=o.cpu, python=o.python)
    paths = layout.RunPaths(run_dir)
    runs.write_json(paths.fingerprint, fp)
    runs.write_json(
        paths.job,
        {
            "plan": plan.to_dict(),
            "progress": o.echo and sys.stdout.isatty(),
            "launch_dir": cwd,
            "root": root,
            "replay_of": o.replay_of,
            "replay": o.replay_notes,
            "resume": o.resume,
        },
    )
    n = workers.count(resolved)
    if n > 1:
        workers.prepare(run_dir, n)
    row = _row(run_dir, resolved, "running", replay_of=o.replay_of)
    index.record(run_dir.parent, row)
    job = runtime.Job(
        run_dir=run_dir,
        env=env,
        cwd=cwd,
        cpus=o.cpus,
        echo=o.echo,
        python=o.python,
        cpu_model=o.cpu,
        workers=n,
        slurm=o.slurm,
    )
    with tbevents.follow(run_dir):
        try:
            returncode = runtime.get(str(resolved.runtime.name)).run(job)
        except KeyboardInterrupt:
            returncode = 130
    outcome = finish(run_dir, resolved, fp, returncode, row, snapshot.unrooted(cwd, root), root, signing_key)
    if o.track:
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
    if (n := workers.count(resolved)) > 1:  # as the launcher expects it; the run's is settled from its workers
        fp["cluster"] = workers.expected_cluster(fp, n)
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
    paths = layout.RunPaths(run_dir)
    if returncode == 0 and interrupts.was_stopped(run_dir) is not None:
        returncode = 130  # stopped, its code caught the stop and ended by itself: a stop is never a completion
    n = workers.count(resolved)
    unclean = None  # why a multi-worker run's workers are not one result
    if returncode == 0 and paths.result.exists() and paths.job_facts.exists():
        container = runs.read_json(paths.container) if paths.container.exists() else None
        fp = fingerprint.merge_job_facts(fp, runs.read_json(paths.job_facts), container)
        if n > 1:
            fp, unclean = workers.settle(run_dir, fp, n, container)
            if fp["cluster"].get("heterogeneous"):
                from launcher import console

                console.log.warning("%s", fp["cluster"]["heterogeneous"])
        runs.write_json(paths.fingerprint, fp)
    if unclean is not None:
        runs.write_json(paths.error, {"type": "WorkersDiffer", "message": unclean})
        returncode = 1
    elif returncode == 0 and paths.result.exists() and paths.job_facts.exists():
        paths.job_facts.unlink()
        keep_snapshot(run_dir, resolved, fp, launch_dir or os.getcwd(), root)
        result = runs.read_json(paths.result)
        runs.seal(run_dir, signing_key=signing_key)  # the key passed in, never one the run directory names
        row.status, row.key_sha256 = "complete", key.key_sha256(fp)
        row.metrics = json.dumps(result.get("final_metrics", {}), sort_keys=True)
        row.weights_sha256 = result.get("weights_sha256")
        index.record(run_dir.parent, row)
        return Outcome(run_dir, "complete", seed, result=result, returncode=0)
    state = "interrupted" if returncode in (130, -2, -15, -9, -10, -12) else "failed"
    if paths.job_facts.exists():  # what it ran so far, kept for launch resume
        keep_so_far(run_dir, resolved, fp, runs.read_json(paths.job_facts), launch_dir or os.getcwd(), root)
    error = _job_error(run_dir, returncode)
    runs.set_status(run_dir, state, error=error, returncode=returncode)
    row.status = state
    index.record(run_dir.parent, row)
    return Outcome(run_dir, state, seed, error=error, returncode=returncode)


def run(cfg: DictConfig, options: Options = Options(), *, store_root: Path | None = None, on_created=None) -> Outcome:
    """Prepare and execute one run (``execute``, as ``options`` say); a config or store error raises
    before a run exists. ``on_created(run_dir)`` hears of the run directory before the job starts (a
    sweep job's record names it, so that a requeued job resumes it)."""
    resolved, run_dir = prepare(cfg, store_root, options.cwd, options.cpu)
    if on_created is not None:
        on_created(run_dir)
    try:
        return execute(resolved, run_dir, options)
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
    paths = layout.RunPaths(run_dir)
    if paths.error.exists():
        return runs.read_json(paths.error).get("message", "job failed")
    if returncode < 0:
        return f"job killed by signal {-returncode}"
    if returncode == 130:  # stopped without a word from the job (a container, or a sweep aborted at once)
        return "Ctrl-C"
    if returncode == 0:
        return f"job ended without writing {layout.RESULT}"
    return f"job exited with status {returncode} (see {paths.log})"


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
