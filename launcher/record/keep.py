"""What a run keeps of its code and small data in the store, taken from its config and fingerprint.

A sealed run keeps its snapshot (``launcher.record.snapshot``) so that ``launch replay``
can rerun it from itself alone. An interrupted run needs the same for ``launch resume``:
the script gets edited while the run waits to be continued. So the snapshot is taken
twice: by the job process before each of its checkpoints (what the job has imported and
read so far, and ``snapshot.json`` beside the checkpoint), and by the launcher when the
run ends, complete or not.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from launcher.record import fingerprint, runs, snapshot


def code_file(resolved: DictConfig) -> str | None:
    """The file of code a run names in its config: train=script's script, train=notebook's notebook."""
    return {"script": resolved.train.get("script"), "notebook": resolved.train.get("notebook")}.get(
        str(resolved.train.name))


def keep_snapshot(run_dir: Path, resolved: DictConfig, fp: dict, launch_dir: str, root: str | None = None) -> dict:
    """Keep the code and small data the run used in its store, and ``snapshot.json`` in the run.

    ``fp`` is the run's whole fingerprint (the launcher's side merged with the job's facts);
    ``root`` the laid-out snapshot the run ran from, if any (files are read from inside it).
    """
    config_dir = resolved.get("config_dir")
    max_mb = resolved.store.get("snapshot_max_mb", snapshot.DEFAULT_MAX_MB)
    data = [p for p in (snapshot.data_path(n, launch_dir) for n in fp.get("data") or {}) if p]
    kept, left_out = snapshot.plan(fp, launch_dir, code_file(resolved),
                                   str(config_dir["path"]) if config_dir else None,
                                   snapshot.data_sizes(data, root), int(max_mb) << 20)  # fmt: skip
    taken = snapshot.take(run_dir.parent, kept, left_out, launch_dir, root)
    runs.write_json(run_dir / snapshot.SNAPSHOT, taken)
    return taken


def keep_so_far(run_dir: Path, resolved: DictConfig, fp: dict, facts: dict, launch_dir: str,
                root: str | None = None) -> dict | None:
    """The snapshot of an unfinished run: the launcher's fingerprint ``fp`` with the job's
    ``facts`` so far (user code's, which name the modules it imported; others keep none).

    Best effort: a store the job cannot write to (a container's, where only the run
    directory is mounted) or a full disk leaves the run without one, and ``launch resume``
    then reruns its code where it ran, refusing it if it changed.
    """
    if facts.get("modules") is None:
        return None
    try:
        return keep_snapshot(run_dir, resolved, fingerprint.merge_job_facts(fp, facts), launch_dir, root)
    except OSError:
        return None
