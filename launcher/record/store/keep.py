"""What a run keeps of its code and small data in the store, taken from its config and fingerprint.

A sealed run keeps its snapshot (``launcher.record.store.snapshot``) so that ``launch replay``
can rerun it from itself alone. An interrupted run needs its code for ``launch resume``:
the script gets edited while the run waits to be continued. So the snapshot is taken
twice: by the job process before each of its checkpoints, of the code alone (what the job
has imported so far: a few small files, so the checkpoint does not wait for a dataset
copy; a resume reads data where it was, checked by its hash), and by the launcher after
the job ended, complete or not, of code and data.

What a run keeps is bounded (``snapshot.plan``, ``snapshot.fit``): ``store.snapshot_max_mb``
per data file, ``store.snapshot_max_files`` and ``store.snapshot_max_total_mb`` per run.
Storing the objects and writing ``snapshot.json`` happen under a shared hold of the
store's ``.gc.lock`` (``gc.store_lock``): a ``launch gc`` never marks in between.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from launcher.errors import StoreBusy
from launcher.record import layout
from launcher.record.probe import fingerprint
from launcher.record.store import gc, runs, snapshot

__all__ = ["caps", "code_file", "keep_snapshot", "keep_so_far"]

LAUNCHER_WAIT_S = 600.0  # the launcher waits this long for a gc to end, then stores its snapshot unlocked


def code_file(resolved: DictConfig) -> str | None:
    """The file of code a run names in its config: train=script's script, train=notebook's notebook."""
    return {"script": resolved.train.get("script"), "notebook": resolved.train.get("notebook")}.get(
        str(resolved.train.name)
    )


def caps(resolved: DictConfig) -> tuple[int, int | None, int | None]:
    """``(max bytes per data file, max files per run, max bytes per run)`` from the ``store``
    settings (a run from before a setting existed gets its default; null: no cap per run)."""
    store = resolved.get("store") or {}

    def setting(name: str, default: int) -> int | None:
        value = store.get(name, default)
        return None if value is None else int(value)

    total_mb = setting("snapshot_max_total_mb", snapshot.DEFAULT_MAX_TOTAL_MB)
    return (
        int(store.get("snapshot_max_mb", snapshot.DEFAULT_MAX_MB)) << 20,
        setting("snapshot_max_files", snapshot.DEFAULT_MAX_FILES),
        None if total_mb is None else total_mb << 20,
    )


def keep_snapshot(
    run_dir: Path,
    resolved: DictConfig,
    fp: dict,
    launch_dir: str,
    root: str | None = None,
    *,
    code_only: bool = False,
    wait_s: float | None = LAUNCHER_WAIT_S,
) -> dict:
    """Keep the code and small data the run used in its store, and ``snapshot.json`` in the run.

    ``fp`` is the run's whole fingerprint (the launcher's side merged with the job's facts);
    ``root`` the laid-out snapshot the run ran from, if any (files are read from inside it);
    ``code_only``: its code alone (the job's checkpoints). Waits up to ``wait_s`` for a
    running ``launch gc`` (``StoreBusy`` after it, where ``wait_s`` is 0; else the snapshot is
    stored without the hold, protected by the objects' times alone, see ``launcher.record.store.gc``).
    """
    config_dir = resolved.get("config_dir")
    max_file, max_files, max_total = caps(resolved)
    if code_only:
        fp = {**fp, "data": {}}
    data = [p for p in (snapshot.data_path(n, launch_dir) for n in fp.get("data") or {}) if p]
    kept, left_out = snapshot.plan(
        fp,
        launch_dir,
        code_file(resolved),
        str(config_dir["path"]) if config_dir else None,
        snapshot.data_sizes(data, root),
        max_file,
    )
    kept, over = snapshot.fit(kept, snapshot.data_sizes(kept, root), max_files, max_total)
    store = run_dir.parent
    try:
        with gc.store_lock(store, shared=True, wait_s=wait_s):
            return _take(run_dir, store, kept, {**left_out, **over}, launch_dir, root)
    except StoreBusy:
        if wait_s == 0:
            raise
    return _take(run_dir, store, kept, {**left_out, **over}, launch_dir, root)


def _take(run_dir: Path, store: Path, kept: dict, left_out: dict, launch_dir: str, root: str | None) -> dict:
    taken = snapshot.take(store, kept, left_out, launch_dir, root)
    runs.write_json(layout.RunPaths(run_dir).snapshot, taken)
    return taken


def keep_so_far(
    run_dir: Path,
    resolved: DictConfig,
    fp: dict,
    facts: dict,
    launch_dir: str,
    root: str | None = None,
    *,
    code_only: bool = False,
    wait_s: float | None = LAUNCHER_WAIT_S,
) -> dict | None:
    """The snapshot of an unfinished run: the launcher's fingerprint ``fp`` with the job's
    ``facts`` so far (user code's, which name the modules it imported; others keep none).
    ``code_only`` and ``wait_s`` as for ``keep_snapshot``: the job passes ``code_only`` and 0, and
    on ``StoreBusy`` (a gc runs) keeps its code at its next checkpoint.

    Best effort: a store the job cannot write to (a container's, where only the run
    directory is mounted) or a full disk leaves the run without one, and ``launch resume``
    then reruns its code where it ran, refusing it if it changed.
    """
    if facts.get("modules") is None:
        return None
    try:
        return keep_snapshot(
            run_dir,
            resolved,
            fingerprint.merge_job_facts(fp, facts),
            launch_dir,
            root,
            code_only=code_only,
            wait_s=wait_s,
        )
    except OSError:
        return None
