"""The front of the observers: each installed at its moment, in their one order, and their facts gathered.

The order matters. The file reads and the imports are watched first, before anything else
is imported, so TensorFlow's own imports are seen; TensorFlow's native readers are wrapped
once the plan is applied; the directories are watched once the task's context is known;
the environment variables and the seeds the job's own code reads and sets are watched
last, after the bootstrap's own, so only the task's are recorded.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from launcher.job.observe import envreads, fswatch, imports, reads, seeding
from launcher.record.probe import places, usage
from launcher.record.store import snapshot

_outputs: dict | None = None  # the job's outputs seen at the last gathering (``used``), for ``observed``


def install_first() -> None:
    """Before anything else: every file the job opens, TensorFlow's imports included, and which
    packages the job's code and the launcher import themselves."""
    reads.install()
    imports.install()


def wrap_native_readers() -> None:
    """Once TensorFlow is configured: the files its own readers (tf.data, checkpoints, gfile) open."""
    reads.wrap_native_readers()


def watch(run_dir: Path, root: str | None) -> bool:
    """The directories the task may read natively, and its listings; whether the job runs in a
    laid-out snapshot (a sweep's code, a replay's), whose links point into the launch directory."""
    reads.watch_listings()
    # inotify reports an open through a link in the directory of its target: watch both
    original = snapshot.unrooted(os.getcwd(), root)  # a resumed job runs where it ran, its code laid out
    laid_out = original != os.getcwd()
    watched = [os.getcwd(), *([original] if laid_out else [])]
    reads.watch_natively(watched, skip=places.unwatched(str(run_dir), root), broad=places.broad_directories())
    return laid_out


def install_for_task() -> None:
    """After the bootstrap's own reads and seeds: from here on, the task's."""
    envreads.install()
    seeding.install()


def stop() -> None:
    reads.stop()


def reads_seen() -> int:
    """How many files the job's code has read so far: a new gathering is due only when it grew."""
    return sum(1 for info in reads.opened.values() if info["read"]) + len(reads.explicit)


@contextmanager
def paused() -> Iterator[None]:
    """The launcher's own reads (gathering, keeping the snapshot) are not the job's."""
    with reads.paused():
        yield


def used(run_dir: Path, launch_dir: str, root: str | None, laid_out: bool) -> dict:
    """What the job used (``usage.gather``): its modules, distributions, libraries and data; a file
    it made (written through Python or natively, or born after it started) is its output, not data."""
    global _outputs
    seen = usage.Observed(
        reads.opened,
        explicit=reads.explicit,
        listed=reads.listed,
        patterns=reads.patterns,
        started_ns=reads.started_ns,
        direct_imports=imports.direct,
        native={_as_linked(p, root) if laid_out else p: first for p, first in reads.natively_opened().items()},
        code_files=reads.code_files,
        executed=reads.executed,
        importers=imports.importers,
        written=reads.natively_written(),
        born=fswatch.birth_ns,
    )
    gathered = usage.gather(seen, str(run_dir), launch_dir)
    _outputs = gathered.pop("outputs", None)
    return gathered


def _as_linked(path: str, root: str | None) -> str:
    """A natively seen path by its name in the laid-out snapshot when that is a link to it (inotify
    reports an open through a link in its target's directory), else as seen: where the layout
    holds a kept copy instead, the job read this file, not that copy (a replay's data placed at
    its absolute path)."""
    inside = snapshot.rooted(path, root)
    return inside if inside != path and os.path.islink(inside) else path


def observed() -> dict:
    """The facts beside what was used: the variables the job's code read, how completely its
    reads were seen, and the output files it wrote that were seen (``outputs``: out of the key)."""
    observation = reads.observation()
    if _outputs is not None:
        observation["outputs"] = _outputs
    return {"environment_read": envreads.recorded(), "observation": observation}


def unseeded() -> list[dict]:
    """Random generators the job's own code made without a seed: a likely cause of differing runs."""
    return list(seeding.unseeded)


def seeds_set(planned: int) -> tuple[list[dict], str | None]:
    """The seeds the job's own code set (the seeds in effect), and a note saying so, or ``[]``."""
    recorded = seeding.recorded()
    return recorded, (seeding.note(planned) if recorded else None)
