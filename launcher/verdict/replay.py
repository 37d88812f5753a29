"""``launch replay RUN``: rerun a stored run from what it stored, and say if it reproduced.

The stored ``config.yaml`` (seed and thread counts resolved) is rerun into a new run
directory of the same store, linked to the original (``job.json`` → ``replay_of``).
A run that kept a code snapshot (``snapshot.json``) is rerun from it, laid out afresh
in a working directory of the store: the script, its helpers, its config files and
its small data as they were, wherever the replay is started and whatever happened to
the originals since. A data file too large to keep is read where it was, or from the
copy ``data`` names (``--data NAME=PATH``); either way it must have the recorded hash.

Before anything runs, the current environment's comparability key is checked
against the stored fingerprint; a difference refuses the replay (exit 3) unless
``allow_mismatch``, which runs anyway and records the replay as not comparable.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from omegaconf import OmegaConf

from launcher.errors import ConfigError, NotComparable, StoreError
from launcher.record import runs, snapshot, tracking
from launcher.run import job, precheck
from launcher.verdict import compare


@dataclass
class ReplayResult:
    original: Path
    new_run: Path | None
    verdict: str  # REPRODUCED | DIVERGED | NOT COMPARABLE | NOTHING COMPARED | FAILED
    exit_code: int
    detail: str


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
) -> ReplayResult:
    """Rerun ``run_dir`` and compare; raises ``NotComparable`` when the key differs first.

    ``rebuild``: run it in an environment with the run's recorded distributions
    (``launcher.run.rebuild``), checked against the key like this one would be. ``cpu``: run
    the job under qemu-user as that CPU model (``launcher.run.emulation``); its key holds the
    emulated CPU, so only a portable run (or ``allow_mismatch``) gets past the precheck.
    """
    if cpu:  # no qemu here, or a model it does not know: refused before anything else
        from launcher.run import emulation

        emulation.check_model(cpu)
    # absolute: the job runs in the laid-out snapshot, not where `launch replay runs/X` was typed
    original = Path(os.path.abspath(runs.verify_seal(run_dir)))
    if cpu:
        resolved = OmegaConf.load(original / job.CONFIG)
        if str(resolved.runtime.name) != "local":
            raise ConfigError(f"--cpu runs the job under qemu-user on this machine; {original.name} ran with "
                              f"runtime={resolved.runtime.name} (only runtime=local can be emulated)")  # fmt: skip
    stored = snapshot.read(original)
    python, probed = None, None
    if rebuild:
        from launcher.run import rebuild as _rebuild

        fp = runs.read_json(original / job.FINGERPRINT)
        python = _rebuild.environment(fp, echo=echo)
        probed = _rebuild.probe(python, list((fp.get("software") or {}).get("distributions") or {}))
    work = None
    try:
        if stored is not None:
            try:
                work = Path(tempfile.mkdtemp(prefix=".replay-", dir=original.parent)).resolve()
            except OSError as exc:  # a replay writes its run there too
                raise StoreError(f"store {str(original.parent)!r} is not writable ({exc.strerror})") from None
            work.chmod(0o755)  # a container's user must reach the code
            try:
                snapshot.materialize(original.parent, stored, work)
            except OSError as exc:  # a full disk, a quota
                raise StoreError(f"cannot lay out the snapshot of {original.name} in {work}: {exc.strerror}") from None
            unkept = place_data(original, stored, work, data or {})
            root, cwd = str(work), str(work) + str(stored["launch_dir"])
        else:  # a run from before snapshots: its code and data where they are now
            if data:
                raise ConfigError(f"--data needs a run that kept a code snapshot; {original.name} has none")
            unkept, root, cwd = [], None, os.getcwd()
        diffs = precheck.precheck(original, cwd, extra_env, root, probed=probed, cpu=cpu)
        if diffs and not allow_mismatch:
            tracking.tag_verdict([original], "REFUSED", {"by": "replay"})
            raise NotComparable(refusal(original, diffs, unkept, rebuilt=rebuild), diffs)
        resolved = OmegaConf.load(original / job.CONFIG)
        new_run = job.create_run(resolved, original.parent, cwd, cpu=cpu)  # a refused replay leaves nothing behind
        notes = {"of": original.name, "comparable": not diffs, "from_snapshot": stored is not None,
                 "rebuilt_environment": str(python) if python else None,
                 "precheck_differences": [list(map(str, d)) for d in diffs], "emulated_cpu": cpu}  # fmt: skip
        outcome = job.execute(
            resolved, new_run, cwd=cwd, cpus=cpus, echo=echo, extra_env=extra_env,
            replay_of=original.name, replay_notes=notes, root=root, python=str(python) if python else None,
            cpu=cpu,
        )  # fmt: skip
    finally:
        if work is not None:
            snapshot.remove(work)
    if not outcome.ok:
        result = ReplayResult(original, new_run, "FAILED", 1, f"the replay {outcome.status}: {outcome.error}")
    else:
        result = verdict(original, new_run, forced=bool(diffs))
    tracking.tag_verdict([original, new_run], result.verdict, {"by": "replay", "original": original.name,
                                                               "replay": new_run.name})  # fmt: skip
    return result


def place_data(original: Path, stored: dict, work: Path, given: Mapping[str, str]) -> list[str]:
    """Make each data file the run read but did not keep reachable in the laid-out ``work``,
    as the job named it: the copy ``given`` names for it, else the file where it was.
    Returns the recorded names of those files (a refusal names them with ``--data``)."""
    fp = runs.read_json(original / job.FINGERPRINT)
    launch_dir = str(stored["launch_dir"])
    recorded = fp.get("data") or {}
    wanted = {os.path.abspath(os.path.expanduser(k)) if os.path.isabs(os.path.expanduser(k)) else k: v
              for k, v in given.items()}  # fmt: skip
    for name in wanted:
        if name not in recorded and os.path.normpath(os.path.join(launch_dir, name)) not in (
                snapshot.data_path(n, launch_dir) for n in recorded):  # fmt: skip
            raise ConfigError(f"--data {name}=…: {original.name} read no data file of that name "
                              f"(it read: {', '.join(sorted(recorded)) or 'none'})")  # fmt: skip
    unkept = []
    for name in recorded:
        path = snapshot.data_path(name, launch_dir)
        if path is None:
            continue
        if path in stored["files"]:
            if os.path.isabs(name) and not os.path.isfile(name):  # the job reads it there, not in the snapshot
                kept = snapshot.object_path(original.parent, stored["files"][path]["sha256"])
                raise ConfigError(f"{original.name} read {name} by its absolute path, and nothing is there now: "
                                  f"put it back there (the run kept a copy: {kept})")  # fmt: skip
            continue
        unkept.append(name)
        copy = wanted.get(name) or wanted.get(path)
        if copy is not None:
            copy = os.path.abspath(os.path.expanduser(copy))
            if not os.path.isfile(copy):
                raise ConfigError(f"--data {name}={copy}: no such file")
            if os.path.isabs(name):
                raise ConfigError(f"--data {name}=…: the job named {name} by its absolute path and reads it "
                                  "there; put the file back there instead")  # fmt: skip
            snapshot.link(work, path, copy)
        elif not os.path.isabs(name) and os.path.lexists(path):
            snapshot.link(work, path, path)
    return unkept


# Key fields a rebuilt environment can change: what is installed, and the versions read from it.
REBUILDABLE = ("software.distributions", "software.tensorflow", "software.keras", "software.numpy")


def refusal(original: Path, diffs: list, unkept: list[str], rebuilt: bool = False) -> str:
    """The one-line reason of a refused replay; names ``--data`` when a data file it did not keep
    differs, and ``--rebuild`` when only installed distributions differ."""
    text = (f"cannot replay {original.name} here: {len(diffs)} comparability field(s) differ "
            f"({', '.join(d[0] for d in diffs[:4])}); use --allow-mismatch to run anyway")  # fmt: skip
    if not rebuilt and diffs and all(d[0].startswith(REBUILDABLE) for d in diffs):
        text += "; only installed distributions differ: --rebuild replays in an environment with the recorded ones"
    gone = [d[0].removeprefix("data.") for d in diffs if d[0].startswith("data.") and isinstance(d[1], str)
            and d[1].startswith(("changed while the job ran", "deleted while the job ran"))]  # fmt: skip
    if gone:
        text += (f"; {', '.join(gone)} changed or was deleted while the run ran (a checkpoint it restored, then "
                 "rewrote or rotated away): what it read is gone, so no replay can rerun it")  # fmt: skip
    data = [d[0].removeprefix("data.") for d in diffs if d[0].startswith("data.")]
    missing = [name for name in unkept if name in data and name not in gone]
    if missing:
        text += (f"; {', '.join(missing)} was not kept in the run (over store.snapshot_max_mb): "
                 f"point the replay at a copy with --data {missing[0]}=PATH")  # fmt: skip
    return text


def verdict(original: Path, new_run: Path, forced: bool = False) -> ReplayResult:
    """The replay's verdict on ``new_run``; ``forced``: it ran past the precheck's differences."""
    c = compare.compare_runs(original, new_run, force=True)
    if c.verdict == "NOT COMPARABLE" and not forced:  # the precheck passed: the job itself did something else
        c = replace(c, notes=[n.replace("forced: ", "the replay's own key differs from the run's, "
                                                    "so it did not rerun the same job: ", 1) for n in c.notes])
    detail = compare.report(c, original, new_run)
    if c.verdict == "IDENTICAL":
        return ReplayResult(original, new_run, "REPRODUCED", 0, detail)
    if c.verdict == "DIFFERENT":
        return ReplayResult(original, new_run, "DIVERGED", 1, detail)
    if c.verdict == "NOTHING COMPARED":
        return ReplayResult(original, new_run, "NOTHING COMPARED", compare.NOTHING_COMPARED, detail)
    return ReplayResult(original, new_run, "NOT COMPARABLE", 3, detail)
