"""``launch replay RUN``: rerun a stored run from what it stored, and say if it reproduced.

The stored ``config.yaml`` (seed and thread counts resolved) is rerun into a new run
directory of the same store, linked to the original (``job.json`` → ``replay_of``).
A run that kept a code snapshot (``snapshot.json``) is rerun from it, laid out afresh
in a working directory of the store: the script, its helpers, its config files and
its small data as they were, wherever the replay is started and whatever happened to
the originals since. A data file too large to keep is read where it was, or from the
copy ``data`` names (``--data NAME=PATH``); either way it must have the recorded hash.

A data file the job read by its absolute path (``~/.keras/datasets/mnist.npz``) is read
there again, not in the laid-out snapshot: so the kept copy is *placed* at that path for the
job alone (``launcher.proc.place_argv``: a bind mount in a mount namespace of the job's own),
and so is a ``--data`` copy of one too large to keep. Where that cannot be done (user
namespaces refused, ``runtime=docker``), the file there now is hashed instead, and one that
differs from what the run read refuses the replay by name: it never runs on another file.

Before anything runs, the current environment's comparability key is checked
against the stored fingerprint (every data file as the job will read it); a difference
refuses the replay (exit 3) unless ``allow_mismatch``, which runs anyway and records the
replay as not comparable.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from launcher import proc
from launcher.errors import ConfigError, ExitCode, NotComparable, StoreError
from launcher.record import layout, tracking
from launcher.record.probe import key
from launcher.record.store import objects, runs, signing, snapshot
from launcher.run import pipeline, precheck
from launcher.share import unpack as unpacking
from launcher.verdict import compare


@dataclass
class ReplayResult:
    original: Path
    new_run: Path | None
    verdict: str  # REPRODUCED | DIVERGED | NOT COMPARABLE | NOTHING COMPARED | FAILED
    exit_code: int
    detail: str
    comparison: compare.Comparison | None = None  # the run against its replay (None: the replay failed)


def replay(
    run_dir: str | Path,
    *,
    allow_mismatch: bool = False,
    echo: bool = True,
    cpus: frozenset[int] | None = None,
    extra_env: dict[str, str] | None = None,
    data: Mapping[str, str] | None = None,
    rebuild: bool = False,
    cpu: str | None = None,
    store: Mapping[str, object] | None = None,
) -> ReplayResult:
    """Rerun ``run_dir`` and compare; raises ``NotComparable`` when the key differs first.

    ``store``: settings of the ``store`` node the replay's own run is made with, over the run's
    (``signing_key``: who replays seals the replay; the store node is out of the config hash).
    ``echo``: the job's output on the terminal too (a sweep's replay: not); notes go to the
    ``launch`` logger whatever it says.

    ``rebuild``: run it in a Python environment with the run's recorded distributions
    (``launcher.run.rebuild``), checked against the key like this one would be. ``cpu``: run
    the job under qemu-user as that CPU model (``launcher.run.emulation``); its key holds the
    emulated CPU, so only a portable run (or ``allow_mismatch``) gets past the precheck.

    Raises:
        RunNotFound: ``run_dir`` does not exist or is not a run directory (exit 2).
        UnsafeRun: the run holds a link out of it, or its snapshot names a path or object outside
            where it belongs (exit 2).
        SealError: the run is not sealed, or was changed after sealing; ``SnapshotError``: an object
            of its snapshot is missing or damaged (exit 4).
        ConfigError: ``cpu`` cannot be emulated here (no qemu-user, an unknown model, a run that was
            not ``runtime=local``), or ``data`` for a run that kept no snapshot (exit 2).
        RebuildError: ``rebuild`` cannot build or verify the run's Python environment (exit 8).
        StoreError: the store is not writable, or the snapshot cannot be laid out in it (exit 8).
        NotComparable: this environment's comparability key differs from the run's, without
            ``allow_mismatch``; nothing was run (exit 3).
        GpuUnavailable: the GPUs the run asked for cannot be had here (exit 8).
    """
    if cpu:  # no qemu here, or a model it does not know: refused before anything else
        _check_model(cpu)
    # absolute: the job runs in the laid-out snapshot, not where `launch replay runs/X` was typed
    original = Path(os.path.abspath(runs.verify_seal(run_dir)))
    if cpu:
        _check_emulable(original)
    stored = snapshot.read(original)
    python, probed = _rebuilt_python(original) if rebuild else (None, None)
    work = None
    try:
        if stored is not None:
            work = _work_dir(original)
        laid = _lay_out(original, stored, work, data or {})
        diffs = precheck.precheck(
            original, laid.cwd, extra_env, laid.root, probed=probed, cpu=cpu, at_own_path=laid.at_own_path
        )
        if diffs and not allow_mismatch:
            tracking.tag_verdict([original], "REFUSED", {"by": "replay"})
            raise NotComparable(_refusal_text(original, stored, diffs, laid, rebuild), diffs)
        resolved = _config(original, store)
        # a replay refused when its run is created (its GPUs, its container) leaves nothing behind
        new_run = pipeline.create_run(resolved, original.parent, laid.cwd, cpu=cpu)
        notes = _notes(original, stored is not None, diffs, python, cpu, work, laid)
        outcome = pipeline.execute(
            resolved,
            new_run,
            pipeline.Options(
                cwd=laid.cwd,
                cpus=cpus,
                echo=echo,
                extra_env=extra_env,
                replay_of=original.name,
                replay_notes=notes,
                root=laid.root,
                python=str(python) if python else None,
                cpu=cpu,
            ),
        )
    finally:
        if work is not None:
            snapshot.remove(work)
    return _judged(original, new_run, outcome, allowed_mismatch=bool(diffs))


def _judged(original: Path, new_run: Path, outcome: pipeline.Outcome, allowed_mismatch: bool) -> ReplayResult:
    """The replay's result (FAILED when its job did not complete, else ``verdict``), tagged on both
    runs where they are tracked."""
    if not outcome.ok:
        result = ReplayResult(
            original, new_run, "FAILED", ExitCode.FAILED, f"the replay {outcome.status}: {outcome.error}"
        )
    else:
        result = verdict(original, new_run, allowed_mismatch=allowed_mismatch)
    tracking.tag_verdict(
        [original, new_run], result.verdict, {"by": "replay", "original": original.name, "replay": new_run.name}
    )
    return result


def _config(original: Path, store: Mapping[str, object] | None) -> DictConfig:
    """The run's stored config, with the replayer's ``store`` settings over its own."""
    resolved = OmegaConf.load(layout.RunPaths(original).config)
    if store:
        resolved.store = OmegaConf.merge(resolved.store, dict(store))
    return resolved


def _check_model(cpu: str) -> None:
    """``--cpu``: refuse a machine without qemu-user, or a model it does not know
    (``launcher.run.emulation``, imported only when asked for)."""
    from launcher.run import emulation

    emulation.check_model(cpu)


def _check_emulable(original: Path) -> None:
    """``--cpu`` emulates the job process on this machine: only a ``runtime=local`` run can be."""
    resolved = OmegaConf.load(layout.RunPaths(original).config)
    if str(resolved.runtime.name) != "local":
        raise ConfigError(
            f"--cpu runs the job under qemu-user on this machine; {original.name} ran with "
            f"runtime={resolved.runtime.name} (only runtime=local can be emulated)"
        )


@dataclass(frozen=True)
class LaidOut:
    """Where a replay's job runs from, and how it reaches the data its run read.

    ``root``: the laid-out snapshot (None: a run from before snapshots, run where it is now);
    ``cwd``: the directory the job starts in; ``unkept``: the recorded names of the data files the
    snapshot did not keep (a refusal names them with ``--data``); ``placed``: files read by their
    absolute path that the job is given at that path from kept (or ``--data``) copies;
    ``at_own_path``: those it reads where they are, checked by their hash; ``placing``: why no file
    can be placed (None: it can, or none needs to be).
    """

    root: str | None
    cwd: str
    unkept: list[str]
    placed: list[str]
    at_own_path: list[str]
    placing: str | None


def _rebuilt_python(original: Path) -> tuple[Path, dict]:
    """``--rebuild``: the interpreter of a Python environment holding the run's recorded
    distributions (``launcher.run.rebuild``), and what that interpreter sees of them (for the
    precheck). The wheels an archive brought for this run (unpacked into its own folder) are
    checked again against its sealed record before pip sees them, and used first."""
    from launcher.run import rebuild as _rebuild

    fp = runs.read_json(layout.RunPaths(original).fingerprint)
    wheels = unpacking.checked_wheels(original.parent, original.name, fp)
    python = _rebuild.python_environment(
        fp, find_links=wheels.folder if wheels else None, wheel_hashes=wheels.hashes if wheels else None
    )
    return python, _rebuild.probe(python, list((fp.get("software") or {}).get("distributions") or {}))


def _work_dir(original: Path) -> Path:
    """A new working directory for the replay's laid-out snapshot, in the run's store (a replay writes
    its run there too); ``StoreError`` when the store is not writable."""
    try:
        return Path(tempfile.mkdtemp(prefix=".replay-", dir=original.parent)).resolve()
    except OSError as exc:
        raise StoreError(f"store {str(original.parent)!r} is not writable ({exc.strerror})") from None


def _lay_out(original: Path, stored: dict | None, work: Path | None, data: Mapping[str, str]) -> LaidOut:
    """Lay the run's snapshot out in ``work`` and make its data reachable as the job named it:
    kept copies and ``data`` (``--data NAME=PATH``) copies, placed at their absolute paths where
    the job read them so and this machine allows it (``placement``). A run from before snapshots
    (``stored`` None) runs with its code and data where they are now, and takes no ``data``."""
    if stored is None or work is None:
        if data:
            raise ConfigError(f"--data needs a run that kept a code snapshot; {original.name} has none")
        return LaidOut(None, os.getcwd(), [], [], [], None)
    work.chmod(0o755)  # a container's user must reach the code
    try:
        snapshot.materialize(original.parent, stored, work)
    except OSError as exc:  # a full disk, a quota
        raise StoreError(f"cannot lay out the snapshot of {original.name} in {work}: {exc.strerror}") from None
    resolved = OmegaConf.load(layout.RunPaths(original).config)
    by_path = read_by_path(runs.read_json(layout.RunPaths(original).fingerprint), stored, resolved)
    runtime = str(resolved.runtime.name)
    needs = by_path or any(os.path.isabs(os.path.expanduser(name)) for name in data)
    cannot = proc.placing_refused() if needs and runtime == "local" else None
    why = placing_refusal(runtime, cannot)
    given_at_path: dict[str, str] = {}
    unkept = place_data(original, stored, work, data, given_at_path if why is None else None)
    placed, at_own_path = placement(by_path, given_at_path, why)
    return LaidOut(str(work), str(work) + str(stored["launch_dir"]), unkept, placed, at_own_path, why)


def _notes(
    original: Path,
    from_snapshot: bool,
    diffs: list,
    python: Path | None,
    cpu: str | None,
    work: Path | None,
    laid: LaidOut,
) -> dict:
    """What the replay's ``job.json`` says of it (``replay``): the run it replays, whether the keys
    matched, how its code, Python environment, CPU and data were had."""
    return {
        "of": original.name,
        "comparable": not diffs,
        "from_snapshot": from_snapshot,
        "rebuilt_environment": str(python) if python else None,
        "precheck_differences": [list(map(str, d)) for d in diffs],
        "emulated_cpu": cpu,
        "placed_data": {path: str(work / path.lstrip("/")) for path in laid.placed} if work else {},
        "data_read_at_own_path": {path: laid.placing for path in laid.at_own_path},
    }


def _refusal_text(original: Path, stored: dict | None, diffs: list, laid: LaidOut, rebuilt: bool) -> str:
    """``refusal``'s line for a replay the precheck refused, with why the snapshot left out each
    data file it did not keep."""
    left_out = (
        {
            name: stored["left_out"].get(snapshot.data_path(name, str(stored["launch_dir"])) or "", "")
            for name in laid.unkept
        }
        if stored
        else {}
    )
    return refusal(
        original,
        diffs,
        laid.unkept,
        rebuilt=rebuilt,
        at_own_path=laid.at_own_path,
        placing=laid.placing,
        left_out=left_out,
    )


def replay_archive(
    path: str | Path, store_root: str | Path, trust: signing.Trust = signing.NO_TRUST, **kwargs
) -> tuple[unpacking.Imported, ReplayResult]:
    """Replay the run of the archive at ``path`` (``launch pack``'s file): import it into the store
    ``store_root`` first (``unpacking.unpack``: every member, object, the seal and the signature checked
    before anything is laid out; a run already there is used as it is), then the ordinary ``replay``
    (``kwargs``), so ``launch runs`` and ``compare`` see both like any run."""
    imported = unpacking.unpack(path, store_root, trust)
    return imported, replay(imported.run_dir, **kwargs)


def place_data(
    original: Path, stored: dict, work: Path, given: Mapping[str, str], given_at_path: dict[str, str] | None = None
) -> list[str]:
    """Make each data file the run read but did not keep reachable in the laid-out ``work``,
    as the job named it: the copy ``given`` names for it, else the file where it was.
    Returns the recorded names of those files (a refusal names them with ``--data``).
    ``given_at_path``, where the job can be given files at their paths: a copy ``given`` for
    a file the job read by its absolute path is linked in ``work`` too, and named there
    (path -> copy) to be placed at that path; without it, such a copy is refused."""
    fp = runs.read_json(layout.RunPaths(original).fingerprint)
    launch_dir = str(stored["launch_dir"])
    recorded = fp.get("data") or {}
    wanted = {
        os.path.abspath(os.path.expanduser(k)) if os.path.isabs(os.path.expanduser(k)) else k: v
        for k, v in given.items()
    }
    for name in wanted:
        if name not in recorded and os.path.normpath(os.path.join(launch_dir, name)) not in (
            snapshot.data_path(n, launch_dir) for n in recorded
        ):
            raise ConfigError(
                f"--data {name}=…: {original.name} read no data file of that name "
                f"(it read: {', '.join(sorted(recorded)) or 'none'})"
            )
    unkept = []
    for name in recorded:
        path = snapshot.data_path(name, launch_dir)
        if path is None:
            continue
        if path in stored["files"]:
            if os.path.isabs(name) and not os.path.isfile(name):  # the job reads it there, not in the snapshot
                kept = objects.object_path(original.parent, stored["files"][path]["sha256"])
                raise ConfigError(
                    f"{original.name} read {name} by its absolute path, and nothing is there now: "
                    f"put it back there (the run kept a copy: {kept})"
                )
            continue
        unkept.append(name)
        copy = wanted.get(name) or wanted.get(path)
        if copy is not None:
            copy = os.path.abspath(os.path.expanduser(copy))
            if not os.path.isfile(copy):
                raise ConfigError(f"--data {name}={copy}: no such file")
            if os.path.isabs(name) and given_at_path is None:
                raise ConfigError(
                    f"--data {name}=…: the job named {name} by its absolute path and reads it "
                    "there, and no file can be placed there for it here; put the file back there "
                    "instead"
                )
            if os.path.isabs(name):
                given_at_path[name] = copy
            snapshot.link(work, path, copy)
        elif not os.path.isabs(name) and os.path.lexists(path):
            snapshot.link(work, path, path)
    return unkept


def read_by_path(fp: Mapping, stored: Mapping, resolved) -> list[str]:
    """The data files the run kept that its job read by their absolute paths, and so reads there
    again (not in the laid-out snapshot): every kept one recorded by an absolute name, but the
    mnist task's ``train.data``, which the launcher itself looks up in the snapshot."""
    launch_dir = str(stored["launch_dir"])
    task_data = []
    if str(resolved.train.name) == "mnist" and os.path.isabs(str(resolved.train.data)):
        task_data = [os.path.abspath(str(resolved.train.data)), os.path.realpath(str(resolved.train.data))]
    return sorted(
        name
        for name in fp.get("data") or {}
        if os.path.isabs(name)
        and snapshot.data_path(name, launch_dir) in stored["files"]
        and not any(name == d or name.startswith(d.rstrip("/") + "/") for d in task_data)
    )


def placing_refusal(runtime: str, refused: str | None) -> str | None:
    """Why files cannot be placed at their paths for this replay's job, or None where they can:
    ``refused`` is what the measurement said (``launcher.proc.placing_refused``)."""
    if runtime != "local":
        return f"runtime={runtime}: the job runs in a container, where the launcher places no file"
    return refused


def placement(by_path: list[str], given_at_path: Mapping[str, str], why: str | None) -> tuple[list[str], list[str]]:
    """``(placed, at_own_path)``: the files read by absolute path that the job will be given from the
    run's kept copies (or ``--data`` copies), and those it will read where they are, because
    ``why`` says no file can be placed (each is then checked by its hash there, and refused
    when it differs). Each path that exists as a file is placed; one gone, or now a directory,
    cannot take a file, so it is checked where it is (``missing``) too."""
    if why is not None:
        return [], sorted(by_path)
    placeable = [path for path in [*by_path, *given_at_path] if os.path.isfile(path)]
    return sorted(set(placeable)), sorted(set(by_path) - set(placeable))


# Key fields a rebuilt environment can change: what is installed, and the versions read from it.
REBUILDABLE = ("software.distributions", "software.tensorflow", "software.keras", "software.numpy")


def refusal(
    original: Path,
    diffs: list,
    unkept: list[str],
    rebuilt: bool = False,
    at_own_path: list[str] | tuple = (),
    placing: str | None = None,
    left_out: Mapping[str, str] | None = None,
) -> str:
    """The one-line reason of a refused replay; names ``--data`` when a data file it did not keep
    differs, and ``--rebuild`` when only installed distributions differ. A file read by its
    absolute path that differs where no file can be placed (``placing`` says why; ``at_own_path``
    are those files) is named with both hashes, and what to do: put it back. ``left_out``: why
    each unkept file was left out (``snapshot.json``'s reason), to name the cap it was over."""

    def over(names: list[str]) -> str:
        return ", ".join(sorted({snapshot.cap_named((left_out or {}).get(name, "")) for name in names}))

    text = f"cannot replay {original.name} here: {key.differing(diffs)}; use --allow-mismatch to run anyway"
    if not rebuilt and diffs and all(d[0].startswith(REBUILDABLE) for d in diffs):
        text += (
            "; only installed distributions differ: --rebuild replays in a Python environment with the recorded ones"
        )
    if any(d[0].startswith("hardware.cpu.") for d in diffs):
        text += (
            "; this CPU is not the run's: a run made with determinism=portable keys the x86-64 level, not the "
            "CPU model, and travels to any x86-64-v3 CPU (docs/sharing.md)"
        )
    gone = [
        d[0].removeprefix("data.")
        for d in diffs
        if d[0].startswith("data.")
        and isinstance(d[1], str)
        and d[1].startswith(("changed while the job ran", "deleted while the job ran"))
    ]
    if gone:
        text += (
            f"; {', '.join(gone)} changed or was deleted while the run ran (a checkpoint it restored, then "
            "rewrote or rotated away): what it read is gone, so no replay can rerun it"
        )
    data = [d[0].removeprefix("data.") for d in diffs if d[0].startswith("data.")]
    changed = [d for d in diffs if d[0].removeprefix("data.") in at_own_path and d[0].startswith("data.")]
    for field, then, now in changed:
        name = field.removeprefix("data.")
        kept = objects.object_path(original.parent, str(then))
        text += (
            f"; {name} is read by its absolute path and is not what the run read (recorded {_short(then)}, "
            f"now {_short(now)}), and the run's copy of it cannot be put there for the job here "
            f"({placing or 'that path cannot take a file'}): put the file back (cp {kept} {name}), or replay "
            "where user namespaces are allowed"
        )
    unplaceable = [name for name in unkept if os.path.isabs(name) and placing is not None]
    if any(name in data and name not in gone for name in unplaceable):
        name = next(n for n in unplaceable if n in data)
        text += (
            f"; {name} was not kept in the run (over {over([name])}), is read by its absolute path "
            f"and differs there, and no copy can be put there for the job here ({placing}): put the file "
            "back there"
        )
    missing = [name for name in unkept if name in data and name not in gone and name not in unplaceable]
    if missing:
        text += (
            f"; {', '.join(missing)} was not kept in the run (over {over(missing)}): "
            f"point the replay at a copy with --data {missing[0]}=PATH"
        )
    return text


def _short(digest: object) -> str:
    text = str(digest)
    return text[:12] + "…" if len(text) == 64 else text


def verdict(original: Path, new_run: Path, allowed_mismatch: bool = False) -> ReplayResult:
    """The replay's verdict on ``new_run``; ``allowed_mismatch``: it ran past the precheck's differences."""
    c = compare.compare_runs(original, new_run, allow_mismatch=True)
    if c.verdict == "NOT COMPARABLE" and not allowed_mismatch:  # the precheck passed: the job itself did something else
        c = replace(
            c,
            notes=[
                n.replace(
                    "forced: ", "the replay's own key differs from the run's, so it did not rerun the same job: ", 1
                )
                for n in c.notes
            ],
        )
    detail = compare.report(c, original, new_run)
    if c.verdict == "IDENTICAL":
        return ReplayResult(original, new_run, "REPRODUCED", ExitCode.OK, detail, c)
    if c.verdict == "DIFFERENT":
        return ReplayResult(original, new_run, "DIVERGED", ExitCode.FAILED, detail, c)
    if c.verdict == "NOTHING COMPARED":
        return ReplayResult(original, new_run, "NOTHING COMPARED", compare.NOTHING_COMPARED, detail, c)
    return ReplayResult(original, new_run, "NOT COMPARABLE", ExitCode.REFUSED, detail, c)
