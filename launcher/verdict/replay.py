"""``launch replay RUN``: rerun a stored run from what it stored, and say if it reproduced.

The stored ``config.yaml`` (seed and thread counts resolved) is rerun into a new run
directory of the same store, linked to the original (``job.json`` → ``replay_of``).
Before anything runs, the current environment's comparability key is checked
against the stored fingerprint; a difference refuses the replay (exit 3) unless
``allow_mismatch``, which runs anyway and records the replay as not comparable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from launcher.errors import NotComparable
from launcher.record import runs, tracking
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
) -> ReplayResult:
    """Rerun ``run_dir`` and compare; raises ``NotComparable`` when the key differs first."""
    original = runs.verify_seal(run_dir)
    cwd = os.getcwd()
    diffs = precheck.precheck(original, cwd, extra_env)
    if diffs and not allow_mismatch:
        tracking.tag_verdict([original], "REFUSED", {"by": "replay"})
        raise NotComparable(
            f"cannot replay {original.name} here: {len(diffs)} comparability field(s) differ "
            f"({', '.join(d[0] for d in diffs[:4])}); use --allow-mismatch to run anyway",
            diffs,
        )
    resolved = OmegaConf.load(original / job.CONFIG)
    new_run = job.create_run(resolved, original.parent, cwd)  # a refused replay leaves nothing behind
    notes = {"of": original.name, "comparable": not diffs, "precheck_differences": [list(map(str, d)) for d in diffs]}
    outcome = job.execute(
        resolved, new_run, cwd=cwd, cpus=cpus, echo=echo, extra_env=extra_env,
        replay_of=original.name, replay_notes=notes,
    )  # fmt: skip
    if not outcome.ok:
        result = ReplayResult(original, new_run, "FAILED", 1, f"the replay {outcome.status}: {outcome.error}")
    else:
        result = verdict(original, new_run)
    tracking.tag_verdict([original, new_run], result.verdict, {"by": "replay", "original": original.name,
                                                               "replay": new_run.name})  # fmt: skip
    return result


def verdict(original: Path, new_run: Path) -> ReplayResult:
    c = compare.compare_runs(original, new_run, force=True)
    detail = compare.report(c, original, new_run)
    if c.verdict == "IDENTICAL":
        return ReplayResult(original, new_run, "REPRODUCED", 0, detail)
    if c.verdict == "DIFFERENT":
        return ReplayResult(original, new_run, "DIVERGED", 1, detail)
    if c.verdict == "NOTHING COMPARED":
        return ReplayResult(original, new_run, "NOTHING COMPARED", compare.NOTHING_COMPARED, detail)
    return ReplayResult(original, new_run, "NOT COMPARABLE", 3, detail)
