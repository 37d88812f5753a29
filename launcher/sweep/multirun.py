"""Sweeps: ``launch -m ...`` through Hydra's multirun, in device slots, summarized.

A pipeline of small steps: ``prepare`` expands the sweep exactly as Hydra's
BasicSweeper will and composes and validates every job's config (so bad input
fails before any job starts); ``run_multirun`` creates the sweep directory, writes
``sweep.json`` and one pending ``jobs/NNN.json`` per job, and hands the overrides
to Hydra's multirun with a launcher plugin (``joblib`` by default, one worker per
slot; ``submitit_local``/``submitit_slurm`` work too); each worker runs
``run_job``: take a slot, run the job, record the outcome; ``SweepSummary`` (a
Hydra callback) writes ``summary.json`` and prints the table. ``launch sweep
verify`` replays every job. A failed job is a record with status ``failed``,
never an exception that stops the others.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from launcher import console
from launcher.errors import ConfigError, ExitCode, LauncherError
from launcher.record import layout, tbevents, tracking
from launcher.record.store import runs, snapshot
from launcher.sweep import search as _search
from launcher.sweep import slots as _slots

SWEEP = "sweep.json"
JOBS = "jobs"
SLOTS = "slots"  # the slots' lock files, while the sweep runs
CODE = "code"  # the jobs' own code as it was at submission (launcher.record.store.snapshot.lay_out_code)
STOP = "STOP"  # written at the first Ctrl-C: queued jobs are not started
SUMMARY = "summary.json"
DEFAULT_LAUNCHER = "joblib"  # as in launch.yaml's defaults
# Launchers whose scheduler allocates the devices (one GPU per job): no local slots.
SCHEDULED = ("submitit_slurm",)
_say = console.log.getChild("sweep")  # the sweep's notes: [sweep] ..., on stderr (each job's line: stdout)
# joblib's loky workers set these (``ParallelBackendBase.MAX_NUM_THREADS_VARS``,
# ``TBB_ENABLE_IPC_VAR``, and ``import joblib`` sets KMP_INIT_AT_FORK). A job must start
# with launch's environment, not the worker's, or its recorded environment (OMP_*, KMP_*)
# and so its comparability key would depend on the launcher plugin that ran it.
WORKER_ENV = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMBA_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "ENABLE_IPC",
    "KMP_INIT_AT_FORK",
)


@dataclass
class SweepPlan:
    """A validated sweep, ready to launch."""

    jobs: list[list[str]]  # each job's task overrides, in Hydra's job order ([] when a sweeper proposes them)
    hydra_overrides: list[str]  # hydra/... and hydra.* overrides, for every job
    swept: list[str]  # the swept keys, as written: "+seed", "train.learning_rate"
    launcher: str  # hydra/launcher choice
    slots: list[_slots.Slot]  # empty when a scheduler allocates devices
    store_root: Path  # absolute
    seeds: list[int | None]  # None: drawn when the job starts
    search: _search.Search | None = None  # an optimizing sweeper (hydra/sweeper=optuna); None: basic
    config_dir: str | None = None  # --config-dir, absolute
    code_dirs: list[str] = field(default_factory=list)  # where the jobs' own code is: laid out at submission

    @property
    def concurrency(self) -> int:
        """How many jobs can run at once: the jobs known, or the sweeper's batch of trials."""
        if self.search is None:
            return len(self.jobs)
        return self.search.batch or self.search.trials or len(self.slots) or 1


# ---------------------------------------------------------------- prepare (before any job)
def expand(overrides: list[str]) -> tuple[list[list[str]], list[str], list[str]]:
    """The jobs of a sweep (task overrides per job, in Hydra's order), the Hydra
    overrides, and the keys being swept."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from launcher.run.composition import hydra_message

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException as exc:
        raise ConfigError(hydra_message(exc)) from None
    task = [o for o in parsed if not o.is_hydra_override()]
    for o in task:
        if o.is_sweep_override() and not o.is_discrete_sweep():
            raise ConfigError(
                f"{o.input_line}: the basic sweeper sweeps lists, range() and choice(); "
                "interval() needs a search: hydra/sweeper=optuna (see docs/sweeps.md)"
            )
        if o.is_sweep_override() and not list(o.sweep_string_iterator()):
            raise ConfigError(f"{o.input_line} yields no values: the sweep would run no jobs")
    jobs = BasicSweeper.split_arguments(task, None)[0]
    swept = [o.get_key_element() for o in task if o.is_sweep_override()]
    return jobs, [o.input_line for o in parsed if o.is_hydra_override()], swept


def launcher_choice(hydra_overrides: list[str]) -> str:
    """The ``hydra/launcher`` chosen on the command line (the last one), else the default."""
    choice = DEFAULT_LAUNCHER
    for line in hydra_overrides:
        key, _, value = line.partition("=")
        if key.lstrip("+~") == "hydra/launcher":
            choice = value.strip()
    return choice


def parse(overrides: list[str]) -> tuple[list, list]:
    """The task overrides and the Hydra overrides (``hydra/...``, ``hydra.*``), parsed by Hydra."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from launcher.run.composition import hydra_message

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException as exc:
        raise ConfigError(hydra_message(exc)) from None
    return [o for o in parsed if not o.is_hydra_override()], [o for o in parsed if o.is_hydra_override()]


def prepare(
    overrides: list[str], gpus: list[dict] | None = None, cores=None, config_dir: str | None = None
) -> SweepPlan:
    """Expand, compose and validate every job; decide the slots. Raises ``ConfigError``.

    With an optimizing sweeper the jobs are proposed as the sweep runs: its search space
    is validated at its representative values, and its sampler seeded from the sweep's seed.
    """
    from launcher.job import determinism
    from launcher.record.probe import probes
    from launcher.run import composition, config
    from launcher.run import gpus as gpu_request

    config_dir = os.path.abspath(os.path.expanduser(config_dir)) if config_dir else None
    task, hydra_parsed = parse(overrides)
    hydra_overrides = [o.input_line for o in hydra_parsed]
    fixed = [o.input_line for o in task if not o.is_sweep_override()]
    hydra_cfg = composition.compose_hydra([*fixed, *hydra_overrides], config_dir=config_dir)
    target = str(hydra_cfg.sweeper._target_)
    if _search.kind(target) == _search.BASIC:
        jobs, hydra_overrides, swept = expand(overrides)
        checked = jobs
    else:
        space = [o for o in task if o.is_sweep_override()] + _sweeper_params(hydra_cfg)
        jobs, swept = [], [o.get_key_element() for o in space]
        checked = _search.check_jobs(fixed, space)
    cfgs = []
    for num, job_overrides in enumerate(checked):
        try:
            cfg = composition.compose([*job_overrides, *hydra_overrides], config_dir=config_dir)
            config.validate(cfg)
            config.check_entrypoint(cfg, os.getcwd())
        except ConfigError as exc:
            what = f"job {num}" if jobs else "the search space at"
            raise ConfigError(f"{what} ({label(job_overrides, swept)}): {exc}") from None
        cfgs.append(cfg)
    for name in (
        "store.root",
        "runtime.slots",
        "runtime.name",
        "determinism.intra_op_threads",
        "tracking.name",
        "tracking.uri",
        "tracking.experiment",
    ):
        if len({str(_select(c, name)) for c in cfgs}) > 1:
            raise ConfigError(f"{name} cannot be swept: one sweep has one value")
    search = None if jobs else _plan_search(hydra_cfg, target, cfgs[0])
    launcher = launcher_choice(hydra_overrides)
    slots: list[_slots.Slot] = []
    if launcher not in SCHEDULED:  # a scheduler's jobs are checked where they run
        gpu_request.check_all(cfgs)  # before the sweep directory, as for a single run
        if gpus is None:
            gpus = probes.hardware()["gpus"]
        cores = sorted(os.sched_getaffinity(0)) if cores is None else cores
        threads = determinism.resolve_threads(cfgs[0].determinism.intra_op_threads, len(cores))
        need_gpus = any(gpu_request.wants_docker_gpus(c) for c in cfgs)
        slots = _slots.plan(cfgs[0].runtime.slots, gpus, cores, threads or 1, need_gpus)
    seeds = [planned_seed(c) for c in cfgs] if jobs else []
    root = Path(str(cfgs[0].store.root)).absolute()
    return SweepPlan(
        jobs,
        hydra_overrides,
        swept,
        launcher,
        slots,
        root,
        seeds,
        search,
        config_dir,
        code_dirs=sorted({d for c in cfgs for d in code_dirs(c)}),
    )


def code_dirs(cfg) -> list[str]:
    """The directories a job's own code is imported from: the script's, the entrypoint's
    path or the launch directory; none for the built-in tasks (the launcher's own code)."""
    train = cfg.train
    if train.name == "script":
        return [os.path.dirname(os.path.abspath(str(train.script)))]
    if train.name == "notebook":  # its helpers import from beside it; the notebook itself is kept by its run
        return [os.path.dirname(os.path.abspath(str(train.notebook)))]
    if train.name == "custom":
        return [os.path.abspath(str(train.path)) if train.get("path") else os.getcwd()]
    return []


def _sweeper_params(hydra_cfg) -> list:
    """The search space given in the sweeper's config (``hydra.sweeper.params``), parsed."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    params = OmegaConf.select(hydra_cfg, "sweeper.params")
    if not params:
        return []
    lines = [f"{k}={v}" for k, v in OmegaConf.to_container(params).items()]
    return OverridesParser.create().parse_overrides(lines)


def _plan_search(hydra_cfg, target: str, cfg) -> _search.Search:
    """The optimizing sweeper's plan; the sweep's seed is the jobs' seed (drawn when there is none)."""
    from omegaconf import OmegaConf

    from launcher.job import determinism

    objective = str(_select(cfg, "sweep.objective") or "")
    if not objective:
        raise ConfigError("an optimizing sweeper needs sweep.objective: the final metric it optimizes")
    if cfg.train.name == "mnist" and objective not in _search.MNIST_METRICS:
        raise ConfigError(
            f"sweep.objective={objective!r} is not a metric of train=mnist; "
            f"choose one of {', '.join(_search.MNIST_METRICS)}"
        )
    seed = planned_seed(cfg)
    seed = determinism.draw_seed() if seed is None else int(seed)
    sweeper = OmegaConf.to_container(hydra_cfg.sweeper, resolve=True, enum_to_str=True)
    return _search.plan(sweeper, target, seed, str(cfg.determinism.level), objective)


def _select(cfg, dotted: str) -> object:
    from omegaconf import OmegaConf

    return OmegaConf.select(cfg, dotted)


def planned_seed(cfg) -> object:
    """``+seed``, else the determinism level's seed; None when the job will draw one."""
    seed = _select(cfg, "seed")
    return _select(cfg, "determinism.seed") if seed is None else seed


def hydra_quote(value: str) -> str:
    """``value`` as a quoted Hydra override value (paths with spaces, quotes, commas)."""
    escaped = re.sub(r'(\\*)("|$)', lambda m: m.group(1) * 2 + ('\\"' if m.group(2) else ""), value)
    return f'"{escaped}"'


def hydra_argv(plan: SweepPlan, overrides: list[str], sweep_dir: Path) -> list[str]:
    """The command line Hydra's multirun gets: the user's overrides, then the sweep's own."""
    argv = ["launch", "--multirun"]
    if plan.config_dir:
        argv += ["--config-dir", plan.config_dir]
    argv += [*overrides, f"hydra.sweep.dir={hydra_quote(str(sweep_dir))}"]
    if plan.search and plan.search.seed_override:
        argv.append(plan.search.seed_override)
    if plan.launcher == "joblib":
        argv.append(f"hydra.launcher.n_jobs={max(1, min(len(plan.slots), plan.concurrency))}")
    return argv


# ---------------------------------------------------------------- run
def run_multirun(overrides: list[str], config_dir: str | None = None) -> int:
    """Run a sweep: 0 when every job completed, 1 otherwise, 130 after Ctrl-C."""
    from launcher.record.probe.environment import allowed_env

    launch_env = allowed_env(os.environ)  # before any plugin is imported
    plan = prepare(overrides, config_dir=config_dir)
    sweep_dir = runs.create(layout.StorePaths(plan.store_root).sweeps)
    code_root = None
    if plan.code_dirs:  # every job runs the code as it is now, whatever is edited while it waits
        code_root = sweep_dir / CODE
        snapshot.lay_out_code(code_root, plan.code_dirs, os.getcwd(), skip=[plan.store_root])
    runs.write_json(sweep_dir / SWEEP, sweep_meta(plan, overrides, launch_env, code_root))
    (sweep_dir / JOBS).mkdir()
    for num, (job_overrides, seed) in enumerate(zip(plan.jobs, plan.seeds, strict=True)):
        runs.write_json(job_path(sweep_dir, num), pending_record(num, job_overrides, seed))
    slots_text = ", ".join(s.device for s in plan.slots) or "allocated by the scheduler"
    jobs_text = f"{len(plan.jobs)} jobs" if plan.search is None else _search_text(plan.search)
    _say.info("%s: %s, launcher %s, slots: %s", sweep_dir, jobs_text, plan.launcher, slots_text)
    if plan.search is not None:
        mark = "reproducible" if plan.search.reproducible else "NOT REPRODUCIBLE"
        _say.info("%s: %s", mark, plan.search.note)
        _quiet_optuna()
    try:
        with _stop_on_ctrl_c(sweep_dir):
            _hydra_multirun(hydra_argv(plan, overrides, sweep_dir))
    except (KeyboardInterrupt, LauncherError):
        finalize(sweep_dir)  # what finished, and what did not, on record
        raise
    except Exception as exc:  # the launcher plugin broke (a worker died): say so, summarize
        from launcher.run.composition import hydra_message

        print(f"launch: error: sweep launcher failed: {hydra_message(exc)}", file=sys.stderr)
    summary = finalize(sweep_dir)
    if (sweep_dir / STOP).exists():
        return ExitCode.INTERRUPTED
    return ExitCode.OK if summary["ok"] else ExitCode.FAILED


def _quiet_optuna() -> None:
    """Optuna's INFO lines (a study created, ...) say nothing the sweep's own lines do not."""
    try:
        import optuna
    except ImportError:
        return
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def _hydra_multirun(argv: list[str]) -> None:
    """Hydra's own ``--multirun`` over ``argv``, raising its errors instead of exiting."""
    from launcher.run.composition import hydra_main

    hydra_main(argv, _task)


def _search_text(search: _search.Search) -> str:
    trials = f"{search.trials} trial{'s' if search.trials != 1 else ''}" if search.trials else "trials"
    at_once = min(search.batch or 0, search.trials or search.batch or 0)
    batch = f" ({at_once} at a time)" if at_once > 1 else ""
    return (
        f"{trials}{batch} proposed by {search.sweeper} ({search.sampler or 'its sampler'}), {search.direction} "
        f"{search.objective}"
    )


def restore_launch_env(launch_env: dict[str, str] | None) -> None:
    """In a worker, before its job: the recorded (allowlisted) variables as they were when
    ``launch`` started. What the sweep's own imports set since (``import optuna`` imports
    scikit-learn where installed, which sets KMP_DUPLICATE_LIB_OK) must not reach a job's
    recorded environment: a replay of the job, outside any sweep, would not have it."""
    from launcher.record.probe.environment import allowed_env

    if launch_env is None:
        return
    for name in allowed_env(os.environ):
        if name not in launch_env:
            del os.environ[name]
    os.environ.update(launch_env)


def sweep_meta(
    plan: SweepPlan, overrides: list[str], launch_env: dict[str, str] | None = None, code_root: Path | None = None
) -> dict:
    """``sweep.json``: what every worker needs to know, and what a reader wants to see."""
    return {
        "schema": 1,
        "created": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "overrides": list(overrides),
        "launcher": plan.launcher,
        "jobs": len(plan.jobs) if plan.search is None else plan.search.trials,
        "swept": list(plan.swept),
        "slots": [s.to_dict() for s in plan.slots],
        "store_root": str(plan.store_root),
        "cwd": os.getcwd(),
        "code_root": str(code_root) if code_root else None,  # the jobs' code, laid out at submission
        "worker_env": {k: os.environ[k] for k in WORKER_ENV if k in os.environ},
        "launch_env": launch_env,  # the recorded variables as launch started: no secrets (the allowlist)
        "config_dir": plan.config_dir,
        "search": plan.search.to_dict() if plan.search else None,  # the sampler's seed, and if reproducible
    }


def label(overrides: list[str], swept: list[str]) -> str:
    """A job's swept overrides only ("+seed=3"): what tells it apart from the others."""
    return " ".join(o for o in overrides if o.partition("=")[0] in swept) or "(no sweep)"


def job_path(sweep_dir: Path, num: int) -> Path:
    return sweep_dir / JOBS / f"{num:03d}.json"


def pending_record(num: int, overrides: list[str], seed: int | None) -> dict:
    return {
        "num": num,
        "overrides": list(overrides),
        "seed": seed,
        "status": "pending",
        "slot": None,
        "run_dir": None,
        "final_metrics": {},
        "weights_sha256": None,
        "error": None,
    }


def _task(cfg) -> dict:
    """Hydra's task function, in the launcher's worker: one job of the sweep."""
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    record = run_job(cfg, Path(str(hc.sweep.dir)), int(hc.job.num), list(hc.overrides.task))
    # What an optimizing sweeper is told (a basic sweeper ignores it): the objective, or
    # None for a job that did not complete, which the sweeper marks failed.
    return _search.objective_value(record, str(_select(cfg, "sweep.objective") or ""))


def run_job(cfg, sweep_dir: Path, num: int, overrides: list[str]) -> dict:
    """Take a slot, run one job to its end, record it in ``jobs/NNN.json``; never raises."""
    if not console.is_set_up():  # a worker process of its own (joblib's loky, submitit): its notes as launch's
        console.setup()
    meta = runs.read_json(sweep_dir / SWEEP)
    record = pending_record(num, overrides, planned_seed(cfg))
    try:
        if meta.get("config_dir"):  # name the user's config files this job was composed from
            from launcher.run.composition import with_config_files

            cfg = with_config_files(cfg, overrides, meta["config_dir"])
        for name in WORKER_ENV:  # the job starts with launch's environment, not the worker's
            os.environ.pop(name, None)
        os.environ.update(meta.get("worker_env", {}))
        if meta.get("launcher") not in SCHEDULED:  # a cluster node's environment is its own
            restore_launch_env(meta.get("launch_env"))
        from launcher.run import workers

        task = workers.slurm_task(os.environ) if meta.get("launcher") in SCHEDULED else None
        if task is not None and task[0] > 0:  # one more worker of the run the step's first task runs
            return _other_worker(sweep_dir, num, *task)
        if task is not None:
            cfg = with_workers(cfg, task[1])
        with _outlive_ctrl_c():
            line = _run_in_slot(cfg, sweep_dir, meta, record, slurm=task is not None)
    except Exception as exc:  # one failed job never stops the others
        message = str(exc) if isinstance(exc, LauncherError) else f"{type(exc).__name__}: {exc}"
        record.update(status="failed", error=message)
        line = f"FAILED: {message}"
    runs.write_json(job_path(sweep_dir, num), record)
    print(f"[sweep] job {num:03d} {line}", flush=True)
    return record


def with_workers(cfg, tasks: int):
    """A job of a Slurm step of ``tasks`` tasks is one run of that many workers (issue 49):
    ``distribute.workers`` left at 1 becomes ``tasks``; another count is refused."""
    from omegaconf import open_dict

    from launcher.run import workers

    asked = workers.count(cfg)
    if asked not in (1, tasks):
        raise ConfigError(
            f"distribute.workers={asked}, but the Slurm job has {tasks} tasks: each task is one worker "
            f"(set hydra.launcher.tasks_per_node, or nodes x tasks, to {asked})"
        )
    with open_dict(cfg):
        cfg.distribute = {"workers": tasks}
    return cfg


def _other_worker(sweep_dir: Path, num: int, index: int, tasks: int) -> dict:
    """In task ``index`` > 0 of a Slurm step: worker ``index`` of the run the first task created
    (named in the job's record), run here; the job's record is the first task's alone."""
    from launcher.run import workers

    def noted_run() -> str | None:
        path = job_path(sweep_dir, num)
        return runs.read_json(path).get("run_dir") if path.exists() else None

    try:
        code = _run_worker(workers.await_worker(noted_run, index), index)
    except Exception as exc:  # noqa: BLE001 - never run_job's record: the job's record is the chief's task's
        print(f"[sweep] job {num:03d} worker {index}: {exc}", flush=True)
        return {"num": num, "worker": index, "status": "failed", "error": str(exc)}
    print(f"[sweep] job {num:03d} worker {index} of {tasks} ended with status {code}", flush=True)
    return {"num": num, "worker": index, "status": "worker", "returncode": code}


def _run_worker(run_dir: Path, index: int) -> int:
    """Worker ``index`` of the chief's run ``run_dir``, here: the launcher's side of its fingerprint
    taken on this node (its hardware), then its job run to its end; its exit code."""
    from omegaconf import OmegaConf

    from launcher.run import pipeline, runtime, workers

    paths = layout.RunPaths(run_dir)
    resolved = OmegaConf.load(paths.config)
    job = runs.read_json(paths.worker(index).job)
    cwd = str(job.get("launch_dir") or os.getcwd())
    _, env, fp = pipeline.launch_fingerprint(resolved, cwd, None, job.get("root"))
    runs.write_json(paths.worker(index).fingerprint, fp)
    worker = runtime.Job(run_dir=run_dir, env=env, cwd=cwd, echo=False, workers=workers.count(resolved), slurm=True)
    code = runtime.run_workers(worker, index)
    workers.note_ended(run_dir, index, code)
    return code


def requeued_run(sweep_dir: Path, num: int) -> Path | None:
    """The run of job ``num`` that an earlier attempt of it started, when the scheduler requeued
    the job (submitit on Slurm's preemption or time-limit signal) and that run can be resumed."""
    from launcher.run import resume

    path = job_path(sweep_dir, num)
    earlier = runs.read_json(path).get("run_dir") if path.exists() else None
    if not earlier:
        return None
    try:
        resume.check_resumable(Path(earlier))
    except LauncherError:  # complete, still running, no checkpoint: a fresh run
        return None
    return Path(earlier)


def _run_in_slot(cfg, sweep_dir: Path, meta: dict, record: dict, slurm: bool = False) -> str:
    """Hold a slot for the job's whole life; update ``record``; return the job's line. ``slurm``:
    the job is the chief of a run whose other workers are its Slurm step's other tasks."""
    from launcher.run import pipeline

    earlier = requeued_run(sweep_dir, record["num"])  # before this attempt's record replaces the earlier one
    slot_list = [_slots.Slot.from_dict(s) for s in meta["slots"]]
    with _slots.hold(slot_list, sweep_dir / SLOTS) as slot:
        if (sweep_dir / STOP).exists():
            record.update(status="interrupted", error="not started: the sweep was interrupted")
            return "not started: the sweep was interrupted"
        record.update(status="running", slot=slot.device if slot else None)
        runs.write_json(job_path(sweep_dir, record["num"]), record)
        _say.info(
            "job %03d %s: started in %s",
            record["num"],
            label(record["overrides"], meta["swept"]),
            record["slot"] or "this allocation",
        )
        root = meta.get("code_root")
        if earlier is not None:  # requeued after a preemption or a time limit: continue its run
            from launcher.run import resume

            _say.info("job %03d was requeued: resuming %s", record["num"], earlier)
            record.update(run_dir=str(earlier))
            runs.write_json(job_path(sweep_dir, record["num"]), record)
            with console.notes_hidden():  # the jobs' notes would interleave: each job's line says how it ended
                outcome, _ = resume.resume(earlier, echo=False, store={"signing_key": cfg.store.get("signing_key")})
        else:

            def created(run_dir: Path) -> None:  # on record at once: a requeued job finds its run
                record.update(run_dir=str(run_dir))
                runs.write_json(job_path(sweep_dir, record["num"]), record)

            with console.notes_hidden():  # as for a resumed job: its output and notes are in its own log
                outcome = pipeline.run(
                    cfg,
                    pipeline.Options(
                        cwd=snapshot.rooted(meta["cwd"], root),
                        root=root,
                        cpus=slot.cpus if slot else None,
                        echo=False,
                        extra_env=dict(slot.env) if slot else None,
                        track=False,  # MLflow: the sweep logs its jobs as children at the end (finalize)
                        slurm=slurm,
                    ),
                    store_root=Path(meta["store_root"]),
                    on_created=created,
                )
    tbevents.link_sweep_job(sweep_dir, record["num"], label(record["overrides"], meta["swept"]), outcome.run_dir)
    record.update(
        status=outcome.status,
        seed=outcome.seed,
        run_dir=str(outcome.run_dir),
        final_metrics=outcome.result.get("final_metrics", {}),
        weights_sha256=outcome.result.get("weights_sha256"),
        error=outcome.error,
    )
    return pipeline.summary_line(outcome).removeprefix("[launch] ")


@contextmanager
def _outlive_ctrl_c() -> Iterator[None]:
    """In a worker: Ctrl-C reaches the worker (it shares ``launch``'s process group), which
    passes it on to its job (``launcher.proc.run_job``, the job in a session of its own); the
    job ends as ``interrupted`` and the worker must live on to record that, not die with it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if getattr(signal.getsignal(signal.SIGINT), "stops_the_sweep", False):
        yield  # one slot: joblib runs the job in `launch` itself, whose Ctrl-C must still stop the sweep
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def _stop_on_ctrl_c(sweep_dir: Path) -> Iterator[None]:
    """In ``launch``: the first Ctrl-C, or SIGTERM, SIGUSR1 or SIGUSR2 (a scheduler's, ``kill``'s),
    lets running jobs end as interrupted and starts no queued job (the ``STOP`` file says so);
    a second one aborts at once. A terminal's Ctrl-C reaches the workers itself; the others
    come to ``launch`` alone, which passes them on to its workers as a Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    from launcher import proc

    def stop(signum, frame) -> None:
        if (sweep_dir / STOP).exists():
            raise KeyboardInterrupt
        runs.write_json(
            sweep_dir / STOP,
            {"time": _dt.datetime.now().astimezone().isoformat(), "signal": signal.Signals(signum).name},
        )
        by = "" if signum == signal.SIGINT else f" by {signal.Signals(signum).name}"
        print(
            f"[sweep] interrupted{by}: running jobs stop, queued jobs will not start (Ctrl-C again to abort)",
            file=sys.stderr,
            flush=True,
        )
        if signum != signal.SIGINT:
            proc.pass_on_as_ctrl_c()

    stop.stops_the_sweep = True  # type: ignore[attr-defined]
    previous = {signum: signal.signal(signum, stop) for signum in proc.STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


# ---------------------------------------------------------------- summary
class SweepSummary:
    """Hydra callback (``hydra.callbacks.sweep_summary``): the summary at the end of a sweep.

    Duck-typed rather than a subclass of ``hydra.experimental.callback.Callback`` so
    importing this module (every ``launch`` does) stays free of Hydra's import cost.
    """

    def on_run_start(self, config, **kwargs) -> None: ...
    def on_run_end(self, config, **kwargs) -> None: ...
    def on_multirun_start(self, config, **kwargs) -> None: ...
    def on_job_start(self, config, **kwargs) -> None: ...
    def on_job_end(self, config, job_return, **kwargs) -> None: ...

    def on_multirun_end(self, config, **kwargs) -> None:
        finalize(Path(str(config.hydra.sweep.dir)))


def read_records(sweep_dir: Path) -> list[dict]:
    return [runs.read_json(p) for p in sorted((sweep_dir / JOBS).glob("[0-9]*.json"))]


def finalize(sweep_dir: Path) -> dict:
    """Write ``summary.json`` and print the table, once; return the summary."""
    from launcher.sweep import report as sweep_report

    if (sweep_dir / SUMMARY).exists():
        return runs.read_json(sweep_dir / SUMMARY)
    shutil.rmtree(sweep_dir / SLOTS, ignore_errors=True)  # every job has ended: locks unused
    meta = runs.read_json(sweep_dir / SWEEP) if (sweep_dir / SWEEP).exists() else {}
    records = read_records(sweep_dir)
    summary = sweep_report.summarize(records)
    summary["seeds_set_by_jobs"] = _seeds_set_by_jobs(records)
    summary["sweep_dir"] = str(sweep_dir)
    summary["swept"] = meta.get("swept", [])
    search = meta.get("search")
    if search:
        summary["search"] = {
            "sweeper": search["sweeper"],
            "sampler": search["sampler"],
            "seed": search["seed"],
            "reproducible": search["reproducible"],
            "note": search["note"],
            "best": _search.best(records, search["objective"], search["direction"]),
        }
    runs.write_json(sweep_dir / SUMMARY, summary)
    print(sweep_report.render(summary), flush=True)
    tracking.log_sweep(sweep_dir, summary, meta)
    return summary


def _seeds_set_by_jobs(records: list[dict]) -> list[dict]:
    """The seeding calls the completed jobs' own code made (``determinism.seeds_set_by_job``)."""
    found: dict[str, dict] = {}
    for r in records:
        if r.get("status") != "complete" or not r.get("run_dir"):
            continue
        try:
            fp = runs.read_json(layout.RunPaths(r["run_dir"]).fingerprint)
        except LauncherError:
            continue
        for call in (fp.get("determinism") or {}).get("seeds_set_by_job") or []:
            found.setdefault(f"{call['call']}@{call['where']}", call)
    return list(found.values())
