"""A stored run's comparability key against this environment, before it is run again.

``launch replay`` and ``launch resume`` refuse to start when what can be measured
here and now (hardware, software, environment, code, data, config) differs from
what the run recorded in a field of the key; the fields only the job process can
measure are checked by the comparison after the run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection
from importlib import resources
from pathlib import Path

from omegaconf import OmegaConf

from launcher.record import hashing, layout
from launcher.record.filecache import FileHashes
from launcher.record.probe import distributions, environment, fingerprint, key, probes
from launcher.record.store import runs, snapshot
from launcher.run import pipeline

# Key fields only the job process can measure; the comparison after the run checks them.
MEASURED_IN_JOB = ("determinism", "software.tf_build")


def _current_path(name: str, cwd: str) -> Path:
    """Where a recorded data file is now: in the launcher package, or relative to the launch directory."""
    if name.startswith("launcher/"):
        return Path(str(resources.files("launcher").joinpath(name.removeprefix("launcher/"))))
    return Path(name) if os.path.isabs(name) else Path(cwd) / name


def current_data_hashes(
    stored: dict[str, str], cwd: str | None = None, root: str | None = None, at_own_path: Collection[str] = ()
) -> dict[str, str]:
    """Re-hash the data files a run read, where a rerun will find them (``missing`` when gone):
    in the laid-out snapshot ``root`` first, else where they were (relative names from ``cwd``).
    ``at_own_path``: names the rerun's job reads where they are, whatever ``root`` holds (a
    file read by its absolute path whose kept copy cannot be placed there)."""

    def where(name: str) -> str:
        path = str(_current_path(name, cwd or os.getcwd()))
        return path if name in at_own_path else snapshot.rooted(path, root)

    with FileHashes() as hashes:
        return {name: hashes.sha256(where(name)) or "missing" for name in stored}


def current_usage(stored_fp: dict, root: str | None = None, probed: dict | None = None) -> tuple[dict, dict, dict]:
    """This machine's state of the modules, distributions and libraries a run used: its
    modules as the laid-out snapshot ``root`` has them, when the rerun runs from one; the
    distributions' identities this interpreter's, or ``probed["distributions"]``: those of
    the interpreter the rerun will use (``launcher.run.rebuild.probe``)."""
    software = stored_fp.get("software") or {}
    with FileHashes() as hashes:
        modules = {
            name: {"path": m["path"], "sha256": hashes.sha256(snapshot.rooted(m["path"], root)) or "missing"}
            for name, m in (stored_fp["code"].get("modules") or {}).items()
        }
        libraries = {path: hashes.sha256(path) or "missing" for path in software.get("libraries") or {}}
    identity = probed["distributions"].get if probed else distributions.distribution_identity
    used = {name: identity(name) for name in software.get("distributions") or {}}
    return modules, used, libraries


def precheck(
    run_dir: Path,
    cwd: str,
    extra_env: dict[str, str] | None = None,
    root: str | None = None,
    *,
    probed: dict | None = None,
    cpu: str | None = None,
    at_own_path: Collection[str] = (),
) -> list[tuple[str, object, object]]:
    """Key differences between the stored run and a rerun here, now, before running it
    (as CPU model ``cpu`` under qemu-user, when given)."""
    stored = runs.read_json(layout.RunPaths(run_dir).fingerprint)
    return key_differences_now(stored, run_dir, cwd, extra_env, root, probed=probed, cpu=cpu, at_own_path=at_own_path)


def key_differences_now(
    stored: dict,
    run_dir: Path,
    cwd: str,
    extra_env: dict[str, str] | None = None,
    root: str | None = None,
    *,
    probed: dict | None = None,
    cpu: str | None = None,
    at_own_path: Collection[str] = (),
) -> list[tuple[str, object, object]]:
    """Key differences between fingerprint ``stored`` of ``run_dir`` and a rerun started in
    ``cwd`` (inside the laid-out snapshot ``root``, when it runs from one).

    ``probed`` is the software as another interpreter sees it, the one the rerun will use
    (``launcher.run.rebuild.probe``: {"software", "distributions"}); default: this one.
    ``at_own_path``: data names the rerun's job reads where they are, not in ``root``
    (``current_data_hashes``).
    """
    fingerprint.check_schema(stored, str(run_dir))
    resolved = OmegaConf.load(layout.RunPaths(run_dir).config)
    python = (probed or {}).get("python")
    _, _, current = pipeline.launch_fingerprint(resolved, cwd, extra_env, root, cpu=cpu, python=python)
    # The launcher files the run's job imported, as this launcher has them. A run whose job did
    # not report them (it was interrupted, or a launcher before schema 3 wrote it) is held to
    # the launcher's whole package instead: the same package, or refused.
    stored_launcher = stored["code"].get("launcher_modules")
    if stored_launcher:  # by the names the key gives them (a schema-3 run named files)
        stored_launcher = key.launcher_code(stored_launcher, stored.get("schema")).modules
    current["code"]["launcher_modules"] = hashing.launcher_modules(stored_launcher) if stored_launcher else None
    if stored.get("software") is None:
        current["software"] = None  # the job never reported: nothing to check it against
    elif stored["software"].get("container"):
        # The software is the image's, not this host's: the rerun uses the run's image, or a
        # rebuild whose installed-package tree is checked against the stored packages_sha256.
        current["software"] = json.loads(json.dumps(stored["software"]))
    else:
        current["software"] = dict(probed["software"]) if probed else probes.software()
        current["software"]["container"] = stored["software"].get("container")
    # What the job used is known only once it has ended; an interrupted run (resume) has none.
    modules, distributions, libraries = current_usage(stored, root, probed)
    if current["software"] is not None and not stored["software"].get("container"):
        current["software"].update(
            distributions=stored["software"].get("distributions") and distributions,
            libraries=stored["software"].get("libraries") and libraries,
        )
    current["code"]["modules"] = stored["code"].get("modules") and modules
    if stored.get("environment_read") is not None:  # what the job's code will find here
        current["environment_read"] = {
            name: environment.as_read(name, os.environ.get(name)) for name in stored["environment_read"]
        }
    current["data"] = current_data_hashes(stored.get("data") or {}, snapshot.unrooted(cwd, root), root, at_own_path)
    if stored.get("schema", 1) < 2:
        current["schema"] = stored.get("schema", 1)  # what it lacks stays unknown
    for name in MEASURED_IN_JOB:
        section, _, sub = name.partition(".")
        if sub:
            if current[section] is not None:
                current[section][sub] = (stored[section] or {}).get(sub)
        else:
            current[section] = stored[section]
    if stored.get("cluster") and current.get("cluster"):  # the collective its strategy used: measured in the job
        current["cluster"]["collective"] = stored["cluster"].get("collective")
    for name in ("tensorflow", "keras", "numpy") if current["software"] else ():
        # The launcher reads distribution versions; the job reads __version__. Same release,
        # but e.g. local builds may spell it differently: the job's check after the run decides.
        if current["software"].get(name) and stored["software"].get(name):
            current["software"][name] = _same_release(current["software"][name], stored["software"][name])
    return key.key_differences(stored, current)


def _same_release(now: str, then: str) -> str:
    return then if now.split("+")[0] == then.split("+")[0] else now
