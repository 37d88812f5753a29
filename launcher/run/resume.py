"""``launch resume RUN``: continue an interrupted run from its newest complete checkpoint.

The run continues in its own directory with its stored config and seed; user code
runs again with the code the run kept in the store (``launcher.record.store.keep``), laid out
afresh, in its launch directory (``_where``). Metrics of
epochs after the checkpoint (written before the interruption) are dropped and
appended again as the resumed epochs end; ``job.json`` and ``result.json`` record
that the run was resumed and from which epoch. The current environment's
comparability key must match the run's, as for replay.

An interrupted run is not sealed, so nothing it holds is taken on trust before it is
used: a link pointing outside the run is refused, and its ``snapshot.json`` is read
checked (``snapshot.read``) and must name only what the run's own record names, with the
same content (``snapshot.check_recorded``), before anything is laid out or written.

A multi-worker run (``distribute.workers=N``) whose code trains with a Keras ``fit`` (tf_keras under
``MultiWorkerMirroredStrategy``) restarts as N workers again (the same count and ``TF_CONFIG`` shape,
fresh ports), every one restoring the chief's newest complete checkpoint: under the strategy every
worker holds the same variables. Each worker's metrics and trace are cut back to that checkpoint as
the chief's are. A multi-worker run of the script's own loop has no checkpoints the launcher can
continue, and is refused, naming why (``check_resumable``).

Nor does the run say who it is: resume asks its store's ledger (``runs.creation``) whether
this store made it, and says so (``origin``); with ``store.require_signed=true`` it resumes
only a run this store made. The resumed run's seal is signed with the resumer's
``store.signing_key`` (given as a word; default none), never with a key the run's own
``config.yaml`` names: that file is the run's, anyone's to write while it is unsealed.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from omegaconf import OmegaConf

from launcher import console
from launcher.errors import NotComparable, ResumeError, SealError, SignatureError, StoreError, UnsafeRun
from launcher.record import checkpoints, layout, trace
from launcher.record.probe import fingerprint, key
from launcher.record.store import index, runs, signing, snapshot
from launcher.run import gpus, pipeline, precheck, workers


def _alive(pid: object) -> bool:
    """Is ``pid`` a live launcher process? (Not a zombie, not a reused pid of another program.)"""
    if not isinstance(pid, int):
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state != "Z" and b"launch" in cmdline


USER_CODE = ("script", "custom", "notebook")  # tasks whose observed fits are checkpointed


def _task(run_dir: Path) -> str | None:
    try:
        return str(OmegaConf.load(layout.RunPaths(run_dir).config).train.name)
    except Exception:  # no readable config: the generic reason
        return None


def _workers(run_dir: Path) -> int:
    """How many workers the run ran on (``distribute.workers``; 1 without a readable config)."""
    try:
        return workers.count(OmegaConf.load(layout.RunPaths(run_dir).config))
    except Exception:  # no readable config: resume says why elsewhere
        return 1


def _why_none(run_dir: Path) -> str:
    if (n := _workers(run_dir)) > 1:
        return (
            f"the launcher checkpoints the epochs of a Keras fit, and this run on {n} workers had none: it trains "
            "with its own loop (strategy.run: where it stands is known only to the loop), or it ran with "
            "determinism=off or train.checkpoint_every=0, or died in its first epoch; run it again with launch"
        )
    if _task(run_dir) in USER_CODE:
        return (
            "the launcher checkpoints the epochs of your code's Keras fit in seeded and strict runs; "
            "this one had none: determinism=off, train.checkpoint_every=0, it died in its first epoch, "
            "or it trains without fit (a custom loop: use launcher.Checkpointer); "
            "run it again with launch"
        )
    return "determinism=off, or it died in epoch 1"


def check_resumable(run_dir: Path) -> tuple[Path, int, list[str]]:
    """The checkpoint to resume from, its epoch and fallback notes; or ResumeError saying why not."""
    if layout.RunPaths(run_dir).manifest.exists():
        runs.verify_seal(run_dir)  # a sealed run that was changed is refused as such (SealError, exit 4)
        raise ResumeError(f"run {run_dir.name} is complete; nothing to resume (use launch replay to rerun it)")
    status = runs.status(run_dir)
    owner: list[str] = []
    if status.get("state") == "running" and status.get("pid") != os.getpid():
        alive = runs.owner_alive(status) if status.get("host") else _alive(status.get("pid"))
        if alive:
            raise ResumeError(f"run {run_dir.name} is still running (launcher pid {status['pid']})")
        if alive is None and status.get("host"):
            raise ResumeError(
                f"run {run_dir.name} is {runs.describe_state(run_dir)}: whether it still runs "
                f"can only be seen there; resume it on {status['host']}"
            )
        if alive is False:
            owner = [f"run {run_dir.name} was {runs.describe_state(run_dir)}; resuming it"]
    n = _workers(run_dir)
    if n > 1 and (step := workers.slurm_task(os.environ)) is not None:
        raise ResumeError(
            f"run {run_dir.name} cannot be resumed here: it ran on {n} workers, and resume restarts them all "
            f"on one machine, which this task of a Slurm step of {step[1]} tasks is not (its other tasks would "
            "start workers of their own); run launch resume outside the step"
        )
    path, epoch, notes = checkpoints.latest_complete(run_dir)
    if path is None:
        why = "; ".join(notes) if notes else f"it has no checkpoints ({_why_none(run_dir)})"
        raise ResumeError(f"run {run_dir.name} cannot be resumed: {why}")
    fit, _ = checkpoints.read_extra(path)
    if fit is None and n > 1:
        raise ResumeError(
            f"run {run_dir.name} cannot be resumed: it ran on {n} workers, and its checkpoints are its own "
            "loop's (launcher.Checkpointer), not a Keras fit's: resume restarts the workers of a fit from the "
            "chief's checkpoint, and where the loop stands is known only to the loop; run it again with launch"
        )
    if fit is not None and (why := checkpoints.why_not_resumable(fit)):
        raise ResumeError(f"run {run_dir.name} cannot be resumed: {why}")
    return path, epoch, owner + notes


def _epoch_of(line: str, where: str) -> int:
    """The epoch of one line of metrics.jsonl; ``SealError`` (one line) when it has none: the run is
    unsealed, and its file may be anything (damaged, or JSON nested too deeply to be read)."""
    data = runs.loads_json(line, where)
    epoch = data.get("epoch") if isinstance(data, dict) else None
    if not isinstance(epoch, int):
        raise SealError(f"{where} has no epoch", where)
    return epoch


def keep_metrics_through(run_dir: Path, epoch: int) -> None:
    """Rewrite metrics.jsonl atomically with only the epochs up to ``epoch``."""
    path = layout.RunPaths(run_dir).metrics
    if not path.exists():
        return
    lines = [
        line
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if line and _epoch_of(line, f"{path} line {number}") <= epoch
    ]
    runs.write_bytes(path, "".join(line + "\n" for line in lines).encode())


def _shown(value: object) -> str:
    """A ledger field as printed: printable characters only, at most 64 (the ledger is the store's,
    and whoever writes the store writes it)."""
    return "".join(c for c in str(value) if c.isprintable())[:64] or "?"


def origin(run_dir: Path, require_created: bool = False) -> str:
    """Whose run ``run_dir`` is, in words, from its store's ledger (``runs.creation``): ``resuming run
    X, created in this store by user@host``, or ``run X was not created in this store (...)``. With
    ``require_created`` (``store.require_signed=true``) a run this store did not create is refused
    (``SignatureError``, exit 7): an interrupted run has no seal to be signed, and the ledger is all
    that says where it came from."""
    entry = runs.creation(run_dir)
    if entry is not None:
        return (
            f"resuming run {run_dir.name}, created in this store by {_shown(entry.get('user'))}@"
            f"{_shown(entry.get('host'))} on {_shown(entry.get('time'))}"
        )
    said = (
        f"run {run_dir.name} was not created in this store (copied in from elsewhere: {layout.CREATED} "
        "does not name this directory)"
    )
    if require_created:
        raise SignatureError(
            f"{said}, and store.require_signed=true resumes only runs this store created (an "
            "interrupted run has no seal to be signed): refused",
            run_dir.name,
        )
    return said + "; resuming it"


def _stored_fingerprint(run_dir: Path) -> dict:
    """The run's fingerprint as far as it ran: the launcher's side merged with the job's facts
    of its last checkpoint."""
    paths = layout.RunPaths(run_dir)
    stored = runs.read_json(paths.fingerprint)
    expected = stored.get("cluster")  # a multi-worker run: its workers as the launcher started them
    if paths.job_facts.exists():
        facts = runs.read_json(paths.job_facts)
        if facts.get("modules") is not None:  # what the job had used by its last checkpoint (user code)
            container = runs.read_json(paths.container) if paths.container.exists() else None
            stored = fingerprint.merge_job_facts(stored, facts, container)
        else:
            stored["software"], stored["determinism"] = facts["software"], facts["determinism"]
    return with_cluster(stored, expected)


def with_cluster(stored: dict, expected: dict | None) -> dict:
    """An interrupted multi-worker run's fingerprint with its cluster part as the key reads it: the
    chief's facts say only what its own strategy used (``implementation``), never settled from every
    worker (``workers.settle``, at a run's end), so the workers, their order and hardware are the ones
    the launcher started (``expected``), with the collective the chief's strategy used (pure)."""
    seen = stored.get("cluster")
    if expected is None or seen is None or seen.get("workers") is not None:
        return stored
    collective = seen.get("implementation") or expected.get("collective")
    return {**stored, "cluster": {**expected, "collective": collective}}


def checked_snapshot(run_dir: Path, stored: dict, previous: dict) -> dict | None:
    """The unsealed run's ``snapshot.json``, read checked, and only if every entry is what its own
    record (``stored``, the fingerprint so far; ``previous``, its ``job.json``) names, and its
    launch directory the one the run ran in; ``UnsafeRun`` (exit 2) names what is not."""
    kept = snapshot.read(run_dir)
    if kept is None:
        return None
    where = f"run {run_dir.name}: {layout.SNAPSHOT}"
    ran_in = previous.get("launch_dir")
    if isinstance(ran_in, str):
        root = previous.get("root")
        ran_in = snapshot.unrooted(ran_in, root if isinstance(root, str) else None)
        if ran_in != kept["launch_dir"]:
            raise UnsafeRun(
                f"{where}: launch_dir {kept['launch_dir']!r} is not where the run ran ({ran_in!r}, "
                f"in {layout.JOB}): refused before anything was written (a forged or damaged run; "
                "see docs/store.md)",
                kept["launch_dir"],
            )
    try:
        resolved = OmegaConf.load(layout.RunPaths(run_dir).config)
        config_dir = resolved.get("config_dir")
        script = {"script": resolved.train.get("script"), "notebook": resolved.train.get("notebook")}.get(
            str(resolved.train.name)
        )  # the file of code its config names, as keep.code_file says
        config_path = str(config_dir["path"]) if config_dir else None
    except Exception as exc:  # noqa: BLE001 - any unreadable config: the one line below
        raise UnsafeRun(f"{where}: the run's {layout.CONFIG} cannot be read to check it ({exc})") from None
    snapshot.check_recorded(kept, stored, script, config_path, where)
    return kept


def resume(
    run: str | Path, *, allow_mismatch: bool = False, echo: bool = True, store: Mapping | None = None
) -> tuple[pipeline.Outcome, list[str]]:
    """Resume ``run``; returns the outcome and the notes about skipped checkpoints (for the caller to
    say). ``echo``: the job's output on the terminal too (a sweep's job: not). Whose run it is, and
    the code it resumes with, are noted on stderr (the ``launch`` logger).

    ``store``: the resumer's ``store`` settings (``composition.compose_store``; ``launch resume RUN
    store.signing_key=K``): the key the resumed run's seal is signed with (default none: never the
    key the run's own config names), and ``require_signed`` (resume only a run this store made,
    ``origin``). Whose run it is comes first, then the unsealed run's own files
    (``runs.refuse_links_out``, ``checked_snapshot``): a crafted run is refused before anything is
    written.

    Raises:
        RunNotFound: ``run`` does not exist or is not a run directory (exit 2).
        SignatureError: ``require_signed`` and this store did not create the run (its ledger does not
            name it) (exit 7).
        UnsafeRun: the unsealed run holds a link out of it, or a snapshot entry its own record does
            not name (exit 2).
        SealError: a sealed run was changed after sealing, or a checkpoint's record is damaged (exit 4).
        ResumeError: the run is complete, still running (or may be, on another host), has no complete
            checkpoint, or its launch directory is gone (exit 2).
        NotComparable: this environment's comparability key differs from the run's, without
            ``allow_mismatch`` (exit 3).
        GpuUnavailable: the GPUs the run asked for cannot be had here (exit 8).
        StoreError: the run's code cannot be laid out in its store (exit 8).
    """
    settings = {**signing.DEFAULTS, **(store or {})}
    run_dir = runs.require_run(run)
    said = origin(run_dir, signing.trust_from(settings).require_signed)
    paths = layout.RunPaths(run_dir)
    sealed = paths.manifest.exists()  # a sealed run is judged by its seal (check_resumable)
    if not sealed:
        runs.refuse_links_out(run_dir)
    previous = runs.read_json(paths.job) if paths.job.exists() else {}
    stored = _stored_fingerprint(run_dir) if not sealed and paths.fingerprint.exists() else None
    kept = checked_snapshot(run_dir, stored, previous) if stored is not None and _task(run_dir) in USER_CODE else None
    checkpoint, epoch, notes = check_resumable(run_dir)
    if stored is None:
        stored = _stored_fingerprint(run_dir)
    console.log.info("%s", said)
    if echo:  # now, before the job's output: in a log of both streams the lines stand in the order they happened
        for note in notes:
            console.log.info("%s", note)
    work = None
    try:
        cwd, root, work = _where(run_dir, previous, kept)
        outcome = _continue(
            run_dir,
            stored,
            previous,
            checkpoint,
            epoch,
            notes,
            cwd,
            root,
            allow_mismatch,
            echo,
            settings["signing_key"],
        )
    finally:
        if work is not None:
            snapshot.remove(work)
    return outcome, notes


def _where(run_dir: Path, previous: dict, stored: dict | None) -> tuple[str, str | None, Path | None]:
    """Where the resumed job runs: ``(cwd, root, work)``.

    User code runs again in its launch directory, so what it writes lands where it did,
    and with the code the run ran: a sweep's code laid out at submission (``root``), or
    the run's own snapshot (its script, helpers, notebook and config files as they were
    at its last checkpoint, ``stored``: already checked), laid out in ``work`` with every other file of those
    directories linked to the original. Data is read where it was: a file changed since
    is refused by the key check, never continued on. The mnist task runs here.
    """
    if _task(run_dir) not in USER_CODE:
        return os.getcwd(), None, None
    launch_dir = str(previous.get("launch_dir") or os.getcwd())
    if previous.get("root") and os.path.isdir(previous["root"]):
        return launch_dir, previous["root"], None
    if stored is None:  # interrupted before its first checkpoint kept one, or by an older launcher
        return launch_dir, None, None
    launch_dir = str(stored["launch_dir"])
    if not os.path.isdir(launch_dir):
        raise ResumeError(
            f"run {run_dir.name} ran in {launch_dir}, which is gone; resume continues a run "
            "where it wrote its files: make the directory again (its code is kept in the run)"
        )
    code = {path: entry for path, entry in stored["files"].items() if entry["role"] != "data"}
    try:
        work = Path(tempfile.mkdtemp(prefix=".resume-", dir=run_dir.parent)).resolve()
        work.chmod(0o755)  # a container's user must reach the code
        snapshot.materialize(run_dir.parent, {**stored, "files": code}, work)
    except OSError as exc:
        raise StoreError(f"cannot lay out the code of {run_dir.name} in {run_dir.parent}: {exc.strerror}") from None
    store = {os.path.realpath(run_dir.parent)}
    for directory in dict.fromkeys([launch_dir, *(os.path.dirname(path) for path in code)]):
        snapshot.mirror_rest(work, directory, store)
    changed = snapshot.changed_since(code)
    if changed:
        console.log.info("resuming with the code the run ran, kept in it; changed since: %s", ", ".join(changed))
    return launch_dir, str(work), work


def _continue(
    run_dir: Path,
    stored: dict,
    previous: dict,
    checkpoint: Path,
    epoch: int,
    notes: list[str],
    cwd: str,
    root: str | None,
    allow_mismatch: bool,
    echo: bool,
    signing_key: object,
) -> pipeline.Outcome:
    user_code = _task(run_dir) in USER_CODE
    diffs = precheck.key_differences_now(stored, run_dir, cwd, root=root)
    if diffs and not allow_mismatch:
        raise NotComparable(
            f"cannot resume {run_dir.name} here: {key.differing(diffs)}; use --allow-mismatch to resume anyway",
            diffs,
        )
    paths = layout.RunPaths(run_dir)
    resolved = OmegaConf.load(paths.config)
    gpus.check(resolved)  # before anything of the run changes
    runs.unseal_for_resume(run_dir)
    for leftover in (paths.result, paths.error, paths.job_facts):
        leftover.unlink(missing_ok=True)
    if not user_code:  # user code's outputs stay: what its earlier epochs wrote is kept, later ones rewritten
        shutil.rmtree(paths.outputs, ignore_errors=True)
    keep_metrics_through(run_dir, epoch)
    trace.keep_through(run_dir, epoch, checkpoints.trace_points(checkpoint))
    for i in range(1, workers.count(resolved)):  # every other worker restarts from the chief's checkpoint
        worker_through(paths.worker(i), checkpoint, epoch)
    history = [*((previous.get("resume") or {}).get("history", [])), {"from_epoch": epoch}]
    resume_info = {
        "checkpoint": checkpoint.relative_to(run_dir).as_posix(),
        "epoch": epoch,
        "history": history,
        "comparable": not diffs,
        "skipped": notes,
        "code_from_snapshot": root is not None,
    }
    fit, _ = checkpoints.read_extra(checkpoint)
    if fit is not None:  # user code's Keras fit: which one, and its epochs done
        resume_info.update(fit=fit["fit"], fit_epoch=fit["fit_epoch"], stop_training=bool(fit.get("stop_training")))
    runs.set_status(run_dir, "running", pid=os.getpid(), resumed_from_epoch=epoch)
    # the resumer's key: resolved is the run's own config, whose store.signing_key is the run's to write
    outcome = pipeline.execute(
        resolved,
        run_dir,
        pipeline.Options(echo=echo, resume=resume_info, cwd=cwd, root=root, signing_key=signing_key),
    )
    return left_interrupted(outcome)


def worker_through(worker: layout.RunPaths, checkpoint: Path, epoch: int) -> None:
    """Another worker of a resumed multi-worker run: how it ended is gone (its result, error, facts,
    the end its Slurm task noted), and its metrics and trace are cut back to the chief's ``checkpoint``
    (the points its own checkpoint of that epoch counted, else the chief's count: the workers train in
    step). What it had not written when it was stopped stays unwritten."""
    for leftover in (worker.result, worker.error, worker.job_facts, worker.status):
        leftover.unlink(missing_ok=True)
    keep_metrics_through(worker.run_dir, epoch)
    own = worker.checkpoints / checkpoint.name
    points = checkpoints.trace_points(own) if own.is_dir() else None
    trace.keep_through(worker.run_dir, epoch, points if points is not None else checkpoints.trace_points(checkpoint))


REFUSED_BY_JOB = "the resume stopped before it trained; the run is as it was"


def left_interrupted(outcome: pipeline.Outcome) -> pipeline.Outcome:
    """A resumed job that refused to continue (its ``ResumeError``: a checkpoint whose variables do not
    match the resumed job's, a data order or a generator that cannot be reproduced) stopped before its
    first resumed step: the run is left interrupted, as it was, not failed; its status and index row say
    why (``REFUSED_BY_JOB``)."""
    paths = layout.RunPaths(outcome.run_dir)
    if outcome.status != "failed" or not paths.error.exists():
        return outcome
    error = runs.read_json(paths.error)
    if error.get("type") != ResumeError.__name__:
        return outcome
    said = f"{REFUSED_BY_JOB}: {error.get('message')}"
    runs.set_status(outcome.run_dir, "interrupted", error=said, returncode=outcome.returncode)
    row = index.row_from_dir(outcome.run_dir)
    if row is not None:
        index.record(outcome.run_dir.parent, row)
    return dataclasses.replace(outcome, status="interrupted", error=said)
