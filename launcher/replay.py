"""``launch replay RUN``: rerun a stored run from what it stored, and say if it reproduced.

The stored ``config.yaml`` (seed and thread counts resolved) is rerun into a new run
directory of the same store, linked to the original (``job.json`` → ``replay_of``).
Before anything runs, the current environment's comparability key is checked
against the stored fingerprint; a difference refuses the replay (exit 3) unless
``allow_mismatch``, which runs anyway and records the replay as not comparable.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from omegaconf import OmegaConf

from launcher import compare, fingerprint, job, runs
from launcher.errors import NotComparable

# Key fields only the job process can measure; the comparison after the run checks them.
MEASURED_IN_JOB = ("determinism", "software.tf_build")


@dataclass
class ReplayResult:
    original: Path
    new_run: Path | None
    verdict: str  # REPRODUCED | DIVERGED | NOT COMPARABLE | FAILED
    exit_code: int
    detail: str


def current_data_hashes(stored: dict[str, str]) -> dict[str, str]:
    """Re-hash the data files a run read, where they are now (``missing`` when gone)."""
    out = {}
    for name, _ in stored.items():
        if name.startswith("launcher/"):
            ref = resources.files("launcher").joinpath(name.removeprefix("launcher/"))
            path = Path(str(ref))
        else:
            path = Path(name)
        out[name] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
    return out


def precheck(run_dir: Path, cwd: str, extra_env: dict[str, str] | None = None) -> list[tuple[str, object, object]]:
    """Key differences between the stored run and a rerun here, now, before running it."""
    stored = runs.read_json(run_dir / job.FINGERPRINT)
    return key_differences_now(stored, run_dir, cwd, extra_env)


def key_differences_now(
    stored: dict, run_dir: Path, cwd: str, extra_env: dict[str, str] | None = None
) -> list[tuple[str, object, object]]:
    """Key differences between fingerprint ``stored`` of ``run_dir`` and this environment."""
    fingerprint.check_schema(stored, str(run_dir))
    resolved = OmegaConf.load(run_dir / job.CONFIG)
    _, _, current = job.launch_fingerprint(resolved, cwd, extra_env)
    if stored.get("software") is None:
        current["software"] = None  # the job never reported: nothing to check it against
    elif stored["software"].get("container"):
        # The software is the image's, not this host's: the rerun uses the run's image, or a
        # rebuild whose installed-package tree is checked against the stored packages_sha256.
        current["software"] = json.loads(json.dumps(stored["software"]))
    else:
        current["software"] = fingerprint.software()
        current["software"]["container"] = stored["software"].get("container")
    current["data"] = current_data_hashes(stored.get("data") or {})
    for name in MEASURED_IN_JOB:
        section, _, sub = name.partition(".")
        if sub:
            if current[section] is not None:
                current[section][sub] = (stored[section] or {}).get(sub)
        else:
            current[section] = stored[section]
    for name in ("tensorflow", "keras", "numpy") if current["software"] else ():
        # The launcher reads distribution versions; the job reads __version__. Same release,
        # but e.g. local builds may spell it differently: the job's check after the run decides.
        if current["software"].get(name) and stored["software"].get(name):
            current["software"][name] = _same_release(current["software"][name], stored["software"][name])
    return fingerprint.key_differences(stored, current)


def _same_release(now: str, then: str) -> str:
    return then if now.split("+")[0] == then.split("+")[0] else now


def replay(
    run_dir: str | Path,
    *,
    allow_mismatch: bool = False,
    echo: bool = True,
    cpus: frozenset[int] | None = None,
    extra_env: dict[str, str] | None = None,
) -> ReplayResult:
    """Rerun ``run_dir`` and compare; raises ``NotComparable`` when the key differs first."""
    original = runs.verify_seal(run_dir)
    cwd = os.getcwd()
    diffs = precheck(original, cwd, extra_env)
    if diffs and not allow_mismatch:
        raise NotComparable(
            f"cannot replay {original.name} here: {len(diffs)} comparability field(s) differ "
            f"({', '.join(d[0] for d in diffs[:4])}); use --allow-mismatch to run anyway",
            diffs,
        )
    resolved = OmegaConf.load(original / job.CONFIG)
    new_run = runs.create(original.parent)
    runs.set_status(new_run, "running", pid=os.getpid())
    runs.write_bytes(new_run / job.CONFIG, OmegaConf.to_yaml(resolved).encode())
    notes = {"of": original.name, "comparable": not diffs, "precheck_differences": [list(map(str, d)) for d in diffs]}
    outcome = job.execute(
        resolved, new_run, cwd=cwd, cpus=cpus, echo=echo, extra_env=extra_env,
        replay_of=original.name, replay_notes=notes,
    )  # fmt: skip
    if not outcome.ok:
        return ReplayResult(original, new_run, "FAILED", 1, f"the replay {outcome.status}: {outcome.error}")
    return verdict(original, new_run)


def verdict(original: Path, new_run: Path) -> ReplayResult:
    c = compare.compare_runs(original, new_run, force=True)
    detail = compare.report(c, original, new_run)
    if c.verdict == "IDENTICAL":
        return ReplayResult(original, new_run, "REPRODUCED", 0, detail)
    if c.verdict == "DIFFERENT":
        return ReplayResult(original, new_run, "DIVERGED", 1, detail)
    return ReplayResult(original, new_run, "NOT COMPARABLE", 3, detail)
