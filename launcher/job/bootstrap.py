"""The job process: ``python -m launcher.job.bootstrap RUN_DIR``.

The launcher starts this module in a fresh interpreter (locally, or as a container
entrypoint) with the planned environment already set. It applies the determinism
plan before any task code, reads the settings back and refuses to train when one
did not take effect, runs the task, and writes ``result.json`` and the job's part
of the fingerprint. Errors are written to ``error.json`` for the launcher to report.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

from launcher.record import layout

# Variables read once when the interpreter or TensorFlow starts (both before any task code):
# a job that sets them itself changes nothing but the environment it reports.
READ_AT_START = ("PYTHONHASHSEED", "TF_ENABLE_ONEDNN_OPTS", "OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m launcher.job.bootstrap RUN_DIR", file=sys.stderr)
        return 2
    run_dir = Path(args[0])
    from launcher.errors import LauncherError
    from launcher.job import interrupts
    from launcher.record.store import runs

    try:
        if _IS_JOB_PROCESS:  # a stop the launcher sent while we started arrives here, inside the try
            interrupts.install()
        _run(run_dir)
        return 0
    except LauncherError as exc:
        runs.write_json(layout.RunPaths(run_dir).error, {"type": type(exc).__name__, "message": str(exc)})
        print(f"launch: error: {exc}", file=sys.stderr)
        return 1
    except SystemExit as exc:  # a user script's sys.exit(n)
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if code:
            runs.write_json(layout.RunPaths(run_dir).error, {"type": "SystemExit", "message": f"exit status {code}"})
        return code
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the launcher says so in one line; no traceback from here
        reason = interrupts.stopping()  # further signals are ignored
        runs.write_json(layout.RunPaths(run_dir).error, {"type": "KeyboardInterrupt", "message": reason})
        _exit_now(130)
        return 130
    except BaseException as exc:
        traceback.print_exc()
        message = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
        runs.write_json(layout.RunPaths(run_dir).error, {"type": type(exc).__name__, "message": message})
        return 1


def _exit_now(code: int) -> None:
    """End the interrupted job process now, skipping the interpreter's teardown.

    TensorFlow's own threads may still be running native code (a prefetching input
    pipeline, an inter-op pool); tearing the interpreter down under them is how an
    interrupted job could die of signal 11, or hang until it was killed. Everything the
    run needs is written; our output is flushed first. Only when this process is the job
    (``python -m launcher.bootstrap``), never when ``main`` is called in another process.
    """
    if not _IS_JOB_PROCESS:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


_IS_JOB_PROCESS = False  # set by the entry points (this module's __main__, launcher.bootstrap)


def _run(run_dir: Path) -> None:
    """The job's steps, in order."""
    from launcher.job.observe import observers

    observers.install_first()  # first: it must see every file the job opens, TensorFlow's imports included
    from launcher.job import tasks
    from launcher.record.probe import fingerprint
    from launcher.record.store import runs

    started = time.perf_counter()
    paths = layout.RunPaths(run_dir)
    job = runs.read_json(paths.job)
    plan, effective = _apply_plan(job)
    worker = job.get("worker") or {"index": 0, "count": 1}  # distribute.workers: which one of how many
    if worker["count"] > 1:
        from launcher.job import cluster

        cluster.install(plan.level)
    ctx = _task_context(run_dir, job, plan)
    # Written now and again at the end: an interrupted run keeps the software it ran on.
    runs.write_json(paths.job_facts, fingerprint.job_facts(effective, {}))
    bootstrap_s = time.perf_counter() - started
    laid_out = observers.watch(run_dir, ctx.root)
    observers.install_for_task()
    recorder = _Recorder(run_dir, job, ctx, effective, started, bootstrap_s, laid_out)
    if worker["index"] == 0:  # another worker's code is kept by the chief's, which runs the same
        ctx.facts_so_far = recorder.facts_so_far
    with _recorded_exit(ctx, recorder.record):
        result = tasks.get(ctx.cfg.train.name)(ctx)
    recorder.record(result)
    if worker["index"] == 0 and worker["count"] > 1:
        from launcher.job import cluster

        cluster.wait_for_workers(run_dir, worker["count"])
    elif worker["index"] > 0:  # recorded: gone before the chief's coordination service is, or its end says so
        _exit_now(0)


def _apply_plan(job: dict):
    """The determinism plan applied before any task code, every setting read back, and the run
    failed here when one did not take effect."""
    from launcher.job import determinism
    from launcher.job.observe import observers

    plan = determinism.Plan.from_dict(job["plan"])
    determinism.apply(plan)
    observers.wrap_native_readers()
    effective = determinism.read_back(plan)
    determinism.verify(plan, effective)
    return plan, effective


def _task_context(run_dir: Path, job: dict, plan):
    """What the task is given, and the ``LAUNCH_*`` variables its code may read."""
    from omegaconf import OmegaConf

    from launcher.job import tasks

    paths = layout.RunPaths(run_dir)
    cfg = OmegaConf.load(paths.config)
    output_dir = paths.outputs
    output_dir.mkdir(exist_ok=True)
    trace_every = int(cfg.determinism.get("trace_every") or 0)
    os.environ.update(
        {
            "LAUNCH_RUN_DIR": str(run_dir),
            "LAUNCH_OUTPUT_DIR": str(output_dir),
            "LAUNCH_SEED": str(plan.seed),
            "LAUNCH_TRACE_EVERY": str(trace_every),
        }
    )
    return tasks.TaskContext(
        cfg=cfg,
        seed=plan.seed,
        plan=plan,
        run_dir=run_dir,
        output_dir=output_dir,
        progress=bool(job.get("progress")),
        resume=job.get("resume"),
        trace_every=trace_every,
        root=job.get("root"),
    )


class _Recorder:
    """What the job leaves for the launcher: its facts before each checkpoint (``facts_so_far``),
    and at its end, or when its code calls ``os._exit(0)``, the facts and ``result.json`` (``record``)."""

    def __init__(
        self, run_dir: Path, job: dict, ctx, effective: dict, started: float, bootstrap_s: float, laid_out: bool
    ) -> None:
        self.run_dir, self.job, self.ctx, self.effective = run_dir, job, ctx, effective
        self.started, self.bootstrap_s, self.laid_out = started, bootstrap_s, laid_out
        self.launch_dir = str(job.get("launch_dir") or os.getcwd())
        self.gathered_at = -1

    def record(self, result: dict) -> None:
        from launcher.job.observe import observers
        from launcher.record import outputs
        from launcher.record.hashing import tree_digest
        from launcher.record.store import runs

        ctx = self.ctx
        result.setdefault("final_metrics", {})
        result.setdefault("weights_sha256", None)
        result["outputs"] = tree_digest(ctx.output_dir)
        result["outputs_content"] = outputs.digests(ctx.output_dir)  # what compare judges: meaning, not bytes
        result["seed"] = ctx.plan.seed
        if unseeded := observers.unseeded():  # a likely cause of differing runs, named by compare
            result["unseeded_generators"] = unseeded
        result["task"] = str(ctx.cfg.train.name)
        if ctx.resume:
            result["resumed_from_epoch"] = ctx.resume["epoch"]
        timings = result.setdefault("timings", {})
        timings["bootstrap_s"] = self.bootstrap_s
        timings["job_s"] = time.perf_counter() - self.started
        measured = time.perf_counter()
        final = _settings_in_effect(ctx, self.effective)
        observers.stop()
        facts = self._facts(final)
        timings["fingerprint_s"] = time.perf_counter() - measured
        paths = layout.RunPaths(self.run_dir)
        runs.write_json(paths.job_facts, facts)
        runs.write_json(paths.result, result)

    def _facts(self, final: dict) -> dict:
        """The job's facts: the settings ``final``, and what it used (modules, distributions, data)."""
        from launcher.job.observe import observers
        from launcher.record.probe import fingerprint
        from launcher.record.store import snapshot

        used = observers.used(self.run_dir, self.launch_dir, self.ctx.root, self.laid_out)
        facts = fingerprint.job_facts(final, self.ctx.data_files, used, launch_dir=self.job.get("launch_dir"))
        facts = snapshot.unroot_facts(facts, self.ctx.root)  # the names the run it reruns recorded
        facts.update(observers.observed())
        worker = self.job.get("worker")
        if worker and worker["count"] > 1:
            from launcher.job import cluster

            facts["cluster"] = {"worker": worker["index"], **cluster.observed()}
        return facts

    def facts_so_far(self) -> None:
        """Before a checkpoint: what the job has used so far, for ``launch resume`` to check
        (gathered again only when the job's code has read more files since: files opened
        natively in a watched directory, by any process, alone do not trigger it, or a busy
        /tmp would cost a gathering at every epoch, measured)."""
        from launcher.errors import StoreBusy
        from launcher.job.observe import observers
        from launcher.record.store import keep, runs, snapshot

        seen = observers.reads_seen()
        if seen == self.gathered_at:
            return
        self.gathered_at = seen
        ctx = self.ctx
        with observers.paused():
            facts = self._facts({**self.effective, **ctx.effective})
            runs.write_json(layout.RunPaths(self.run_dir).job_facts, facts)
            if str(ctx.cfg.runtime.name) == "local":  # a container sees only its run directory of the store
                # the code so far, kept in the store: a resume reruns the code the run ran (its data is
                # kept by the launcher after the job: the checkpoint never waits for a dataset's copy)
                try:
                    keep.keep_so_far(
                        self.run_dir,
                        ctx.cfg,
                        runs.read_json(layout.RunPaths(self.run_dir).fingerprint),
                        facts,
                        snapshot.unrooted(self.launch_dir, ctx.root),
                        ctx.root,
                        code_only=True,
                        wait_s=0,
                    )
                except StoreBusy:  # a launch gc runs: never wait for it, keep the code next time
                    self.gathered_at = -1


def _settings_in_effect(ctx, effective: dict) -> dict:
    """What the job actually ran with, read now that it has run: user code may have set threads
    or loaded libraries itself. Each change the job made is noted, and said."""
    from launcher.job import determinism
    from launcher.job.observe import observers

    plan = ctx.plan
    final = determinism.read_back(plan)
    for name in READ_AT_START:  # read once, at start-up: a later change does nothing
        value, started_with = final["env"].get(name), effective["env"].get(name)
        if value != started_with:
            print(
                f"[launch] note: the job set {name}={value} after it was read at start-up ({started_with}): "
                "it had no effect, and the record keeps the value in effect",
                flush=True,
            )
            final.setdefault("set_too_late_by_job", {})[name] = value
            final["env"][name] = started_with
    for key in ("intra_op_threads", "inter_op_threads"):
        if final[key] != effective[key]:
            print(
                f"[launch] note: the job set {key}={final[key]} itself (the plan said {effective[key]}); "
                "the fingerprint records what it ran with",
                flush=True,
            )
            final.setdefault("set_by_job", {})[key] = final[key]  # the launcher's value never reached it
    final.update(ctx.effective)
    seeds, note = observers.seeds_set(plan.seed)
    if seeds:  # the seeds in effect, where the job's code set its own
        final["seeds_set_by_job"] = seeds
        print(note, flush=True)
    return final


@contextmanager
def _recorded_exit(ctx, record):
    """While the task runs, a script's ``os._exit(0)`` after training keeps what it trained (not a
    forked child's: a multiprocessing worker ends with ``os._exit(0)`` too)."""
    real_exit, job_pid = os._exit, os.getpid()

    def recorded_exit(code: int) -> None:
        if code == 0 and os.getpid() == job_pid and callable(ctx.result_so_far):
            try:
                record({**ctx.result_so_far(), "ended": "os._exit(0): recorded what was observed before it"})
            except Exception as exc:  # noqa: BLE001 - the exit must happen; the run then fails as before
                print(f"[launch] could not record the job before os._exit: {exc}", file=sys.stderr, flush=True)
        real_exit(code)

    os._exit = recorded_exit
    try:
        yield
    finally:
        os._exit = real_exit


def job_main() -> int:
    """The job process's entry point: ``main`` in a process of its own."""
    global _IS_JOB_PROCESS
    _IS_JOB_PROCESS = True
    return main()


if __name__ == "__main__":
    sys.exit(job_main())
