"""The one builder of fake stored runs the unit tests share: a run directory as the pipeline leaves
it, written through ``layout.RunPaths`` and sealed with ``runs.seal``, without training.

Tests that judge stored runs (compare, replay, pack, signing, gc, the index, tracking) need runs
to read; each used to write its own files by hand, with the names spelled again. Here a test
says only what its run holds.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from omegaconf import OmegaConf

from launcher.record import layout
from launcher.record.store import objects, runs, snapshot

CONFIG = "seed: 0\ntrain:\n  name: mnist\n"


def sealed_run(
    store: Path,
    name: str | None = None,
    *,
    config: str | Mapping = CONFIG,
    fingerprint: dict | None = None,
    result: dict | None = None,
    metrics: Iterable[dict] | None = None,
    trace: Iterable[dict] | None = None,
    job: dict | None = None,
    kept: Mapping[str | os.PathLike, str] | None = None,
    launch_dir: str | os.PathLike | None = None,
    left_out: Mapping[str, str] | None = None,
    snapshot_json: dict | None = None,
    outputs: Mapping[str, bytes] | None = None,
    state: str | None = "complete",
    status: Mapping[str, object] | None = None,
    signing_key: object = None,
    now: _dt.datetime | None = None,
) -> Path:
    """A run of ``store`` holding what is given, sealed: its directory.

    ``name``: the run's id (None: ``runs.create`` names it, at ``now``). ``config``: its
    ``config.yaml`` (YAML text, or a mapping written as YAML). ``fingerprint``, ``result``,
    ``job``: those JSON files, when given; ``metrics``, ``trace``: those JSON lines, when given;
    ``outputs``: files of ``outputs/`` (an empty mapping: the folder alone).

    The snapshot: ``kept`` (a real file's path -> its role) puts each file in the store's objects
    (``objects.put``) and lists it by its sha256 in ``snapshot.json``, with ``launch_dir`` (default:
    the first file's folder) and ``left_out``; ``snapshot_json`` is written as it is instead (a test
    crafting entries whose objects are not in the store).

    ``state``: ``"complete"`` seals it (``runs.seal``, with ``signing_key``); another state is
    recorded in ``status.json`` with the fields ``status`` (``runs.set_status``: ``pid``, ``error``...)
    and leaves it unsealed; None writes no status (a test that seals it later).
    """
    store = Path(store)
    if name is None:
        run_dir = runs.create(store, now=now)
    else:
        run_dir = store / name
        run_dir.mkdir(parents=True, exist_ok=True)
    paths = layout.RunPaths(run_dir)
    text = config if isinstance(config, str) else OmegaConf.to_yaml(OmegaConf.create(dict(config)))
    runs.write_bytes(paths.config, text.encode())
    if fingerprint is not None:
        runs.write_json(paths.fingerprint, fingerprint)
    if job is not None:
        runs.write_json(paths.job, job)
    if metrics is not None:
        runs.write_bytes(paths.metrics, _lines(metrics))
    if trace is not None:
        runs.write_bytes(paths.trace, _lines(trace))
    if result is not None:
        runs.write_json(paths.result, result)
    if outputs is not None:
        paths.outputs.mkdir(exist_ok=True)
        for relative, content in outputs.items():
            runs.write_bytes(paths.outputs / relative, content)
    if kept:
        snapshot_json = keep(store, kept, launch_dir, left_out)
    if snapshot_json is not None:
        runs.write_json(paths.snapshot, snapshot_json)
    if state == "complete":
        runs.seal(run_dir, signing_key=signing_key)
    elif state is not None:
        runs.set_status(run_dir, state, **(status or {}))
    return run_dir


def keep(
    store: Path,
    kept: Mapping[str | os.PathLike, str],
    launch_dir: str | os.PathLike | None = None,
    left_out: Mapping[str, str] | None = None,
) -> dict:
    """A ``snapshot.json``'s content keeping the files ``kept`` (path -> role), each put in the
    store's objects as the launcher keeps them."""
    files = {}
    for path, role in kept.items():
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        assert objects.put(store, str(path), digest), f"{path} could not be kept in {store}"
        files[str(path)] = {"sha256": digest, "role": role}
    if launch_dir is None:
        launch_dir = os.path.dirname(next(iter(files)))
    return {"schema": snapshot.SCHEMA, "launch_dir": str(launch_dir), "files": files, "left_out": dict(left_out or {})}


def _lines(records: Iterable[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()
