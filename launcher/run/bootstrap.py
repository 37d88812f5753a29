"""The job process: ``python -m launcher.run.bootstrap RUN_DIR``.

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
from pathlib import Path

JOB = "job.json"
JOB_FACTS = "job-facts.json"  # merged into fingerprint.json by the launcher, then removed
RESULT = "result.json"
ERROR = "error.json"
OUTPUT_DIR = "outputs"
# Variables read once when the interpreter or TensorFlow starts (both before any task code):
# a job that sets them itself changes nothing but the environment it reports.
READ_AT_START = ("PYTHONHASHSEED", "TF_ENABLE_ONEDNN_OPTS", "OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m launcher.run.bootstrap RUN_DIR", file=sys.stderr)
        return 2
    run_dir = Path(args[0])
    from launcher.errors import LauncherError
    from launcher.record import runs
    from launcher.run import interrupts

    try:
        if _IS_JOB_PROCESS:  # a stop the launcher sent while we started arrives here, inside the try
            interrupts.install()
        _run(run_dir)
        return 0
    except LauncherError as exc:
        runs.write_json(run_dir / ERROR, {"type": type(exc).__name__, "message": str(exc)})
        print(f"launch: error: {exc}", file=sys.stderr)
        return 1
    except SystemExit as exc:  # a user script's sys.exit(n)
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if code:
            runs.write_json(run_dir / ERROR, {"type": "SystemExit", "message": f"exit status {code}"})
        return code
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the launcher says so in one line; no traceback from here
        reason = interrupts.stopping()  # further signals are ignored
        runs.write_json(run_dir / ERROR, {"type": "KeyboardInterrupt", "message": reason})
        _exit_now(130)
        return 130
    except BaseException as exc:
        traceback.print_exc()
        message = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
        runs.write_json(run_dir / ERROR, {"type": type(exc).__name__, "message": message})
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
    from launcher.run import reads

    reads.install()  # first: it must see every file the job opens, TensorFlow's imports included
    from launcher.run import imports

    imports.install()  # and which packages the job and the launcher import themselves
    from omegaconf import OmegaConf

    from launcher.record import fingerprint, outputs, runs, snapshot, usage
    from launcher.record.hashing import tree_digest
    from launcher.run import determinism, envreads, keep, seeding, tasks

    started = time.perf_counter()
    job = runs.read_json(run_dir / JOB)
    plan = determinism.Plan.from_dict(job["plan"])
    determinism.apply(plan)
    reads.wrap_native_readers()
    effective = determinism.read_back(plan)
    determinism.verify(plan, effective)

    cfg = OmegaConf.load(run_dir / "config.yaml")
    output_dir = run_dir / OUTPUT_DIR
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
    ctx = tasks.TaskContext(
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
    # Written now and again at the end: an interrupted run keeps the software it ran on.
    facts = fingerprint.job_facts(effective, {})
    runs.write_json(run_dir / JOB_FACTS, facts)
    bootstrap_s = time.perf_counter() - started
    reads.watch_listings()
    # A laid-out snapshot (a sweep's code, a replay's) links what it did not keep to the launch
    # directory, and inotify reports an open through a link in the directory of its target.
    original = snapshot.unrooted(os.getcwd(), ctx.root)  # a resumed job runs where it ran, its code laid out
    laid_out = original != os.getcwd()
    watched = [os.getcwd(), *([original] if laid_out else [])]
    reads.watch_natively(watched, skip=usage.unwatched(str(run_dir), ctx.root), broad=usage.broad_directories())
    envreads.install()  # after the bootstrap's own reads: from here on, the task's
    seeding.install()  # after the bootstrap's own seeds: from here on, the task's

    def record(result: dict) -> None:
        """Write the job's facts and result.json: at the end, or when the job's code calls os._exit(0)."""
        result.setdefault("final_metrics", {})
        result.setdefault("weights_sha256", None)
        result["outputs"] = tree_digest(output_dir)
        result["outputs_content"] = outputs.digests(output_dir)  # what compare judges: meaning, not bytes
        result["seed"] = plan.seed
        if seeding.unseeded:  # a likely cause of differing runs, named by compare
            result["unseeded_generators"] = list(seeding.unseeded)
        result["task"] = str(cfg.train.name)
        if ctx.resume:
            result["resumed_from_epoch"] = ctx.resume["epoch"]
        timings = result.setdefault("timings", {})
        timings["bootstrap_s"] = bootstrap_s
        timings["job_s"] = time.perf_counter() - started

        # What the job actually ran with and used, read now that it has run: user code may
        # have set threads or loaded libraries itself.
        measured = time.perf_counter()
        final = determinism.read_back(plan)
        for name in READ_AT_START:  # read once, at start-up: a later change does nothing
            value, started_with = final["env"].get(name), effective["env"].get(name)
            if value != started_with:
                print(f"[launch] note: the job set {name}={value} after it was read at start-up ({started_with}): "
                      "it had no effect, and the record keeps the value in effect", flush=True)  # fmt: skip
                final.setdefault("set_too_late_by_job", {})[name] = value
                final["env"][name] = started_with
        for key in ("intra_op_threads", "inter_op_threads"):
            if final[key] != effective[key]:
                print(f"[launch] note: the job set {key}={final[key]} itself (the plan said {effective[key]}); "
                      "the fingerprint records what it ran with", flush=True)  # fmt: skip
                final.setdefault("set_by_job", {})[key] = final[key]  # the launcher's value never reached it
        final.update(ctx.effective)
        if seeding.recorded():  # the seeds in effect, where the job's code set its own
            final["seeds_set_by_job"] = seeding.recorded()
            print(seeding.note(plan.seed), flush=True)
        reads.stop()
        facts = gather_facts(final)
        timings["fingerprint_s"] = time.perf_counter() - measured
        runs.write_json(run_dir / JOB_FACTS, facts)
        runs.write_json(run_dir / RESULT, result)

    def gather_facts(final: dict) -> dict:
        """The job's facts: the settings ``final``, and what it used (modules, distributions, data)."""
        used = usage.gather(reads.opened, str(run_dir), str(job.get("launch_dir") or os.getcwd()),
                            explicit=reads.explicit, listed=reads.listed, patterns=reads.patterns,
                            started_ns=reads.started_ns, direct_imports=imports.direct,
                            native={snapshot.rooted(p, ctx.root) if laid_out else p: first  # as linked
                                    for p, first in reads.natively_opened().items()},
                            code_files=reads.code_files, executed=reads.executed)  # fmt: skip
        facts = fingerprint.job_facts(final, ctx.data_files, used, launch_dir=job.get("launch_dir"))
        facts = snapshot.unroot_facts(facts, ctx.root)  # the names the run it reruns recorded
        facts["environment_read"] = envreads.recorded()
        facts["observation"] = reads.observation()
        return facts

    gathered_at = [-1]

    def facts_so_far() -> None:
        """Before a checkpoint: what the job has used so far, for ``launch resume`` to check
        (gathered again only when the job's code has read more files since: files opened
        natively in a watched directory, by any process, alone do not trigger it, or a busy
        /tmp would cost a gathering at every epoch, measured)."""
        seen = sum(1 for info in reads.opened.values() if info["read"]) + len(reads.explicit)
        if seen == gathered_at[0]:
            return
        gathered_at[0] = seen
        with reads.paused():
            facts = gather_facts({**effective, **ctx.effective})
            runs.write_json(run_dir / JOB_FACTS, facts)
            if str(cfg.runtime.name) == "local":  # a container sees only its run directory of the store
                # the code and data read so far, kept in the store: a resume reruns the code the run ran
                keep.keep_so_far(run_dir, cfg, runs.read_json(run_dir / fingerprint.FILE), facts,
                                 snapshot.unrooted(str(job.get("launch_dir") or os.getcwd()), ctx.root), ctx.root)

    ctx.facts_so_far = facts_so_far

    real_exit, job_pid = os._exit, os.getpid()

    def recorded_exit(code: int) -> None:  # a script's os._exit(0) after training keeps what it trained
        # (not a forked child's: a multiprocessing worker ends with os._exit(0) too)
        if code == 0 and os.getpid() == job_pid and callable(ctx.result_so_far):
            try:
                record({**ctx.result_so_far(), "ended": "os._exit(0): recorded what was observed before it"})
            except Exception as exc:  # noqa: BLE001 - the exit must happen; the run then fails as before
                print(f"[launch] could not record the job before os._exit: {exc}", file=sys.stderr, flush=True)
        real_exit(code)

    os._exit = recorded_exit
    try:
        result = tasks.get(cfg.train.name)(ctx)
    finally:
        os._exit = real_exit
    record(result)


def job_main() -> int:
    """The job process's entry point: ``main`` in a process of its own."""
    global _IS_JOB_PROCESS
    _IS_JOB_PROCESS = True
    return main()


if __name__ == "__main__":
    sys.exit(job_main())
