"""The names of the files and folders in a run directory and a store: one owner, as submitit's ``JobPaths``.

The launcher writes some of them, the job process others; both, and every reader
(verdicts, resume, the index, a sweep), take the names from here: as a path,
``RunPaths(run_dir).config`` or ``StorePaths(root).objects``; as a bare name (a
message, a manifest's key), the constant. No other module spells one
(tests/unit/test_owner_names.py holds it).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

# Written by the launcher before the job starts
CONFIG = "config.yaml"  # the resolved config
FINGERPRINT = "fingerprint.json"  # the launcher side, then the job's facts merged in
JOB = "job.json"  # the determinism plan and what the job process needs to start
STATUS = "status.json"  # running | complete | failed | interrupted
# Written by the job process
JOB_FACTS = "job-facts.json"  # merged into fingerprint.json by the launcher, then removed
RESULT = "result.json"  # final metrics, weights_sha256
ERROR = "error.json"  # why the job failed or stopped
METRICS = "metrics.jsonl"  # one line per epoch
TRACE = "trace.jsonl"  # the step trace: loss and weight hashes every N steps
OUTPUT_DIR = "outputs"  # the job's own output files
CHECKPOINTS = "checkpoints"  # epoch checkpoints of the whole training state
LOG = "log.txt"  # the job's output, whole
WORKERS = "workers"  # a multi-worker run's other workers: workers/<i>/, each laid out as a run directory
# Written by the launcher when the job has ended, or by a runtime
CONTAINER = "container.json"  # a container runtime's image id, tag, uid, network
SNAPSHOT = "snapshot.json"  # the code and small data the run keeps, by content, in <store>/objects
MANIFEST = "manifest.json"  # the seal: every file's sha256, written last
SIGNATURE = "manifest.json.sig"  # the seal signed (ssh-keygen -Y sign), when a signing key is configured
TENSORBOARD = "tensorboard"  # event files written from metrics.jsonl and trace.jsonl
REBUILD = "rebuild.json"  # replay --rebuild: what was built, for reading (in the rebuilt environment, not a run)
# Every name above (rebuild.json's too): no other module spells one (tests/unit/test_owner_names.py)
RUN_NAMES = frozenset(
    {CONFIG, FINGERPRINT, JOB, STATUS, JOB_FACTS, RESULT, ERROR, METRICS, TRACE, OUTPUT_DIR, CHECKPOINTS, LOG}
    | {WORKERS}
    | {CONTAINER, SNAPSHOT, MANIFEST, SIGNATURE, TENSORBOARD, REBUILD}
)

# ---------------------------------------------------------------- the store's own names
# A store (``store.root``) holds run directories named by ``RUN_ID`` beside these, which no
# run may be named (an archive's run called ``objects`` would become the store's objects).
OBJECTS = "objects"  # the snapshots' content-addressed objects: objects/ab/abcdef...
WHEELS = "wheels"  # an archive's wheels, one folder per run: wheels/<run id>/*.whl
SWEEPS = "sweeps"  # a sweep's summary and its code as it was at submission
AUDITS = "audits"  # an audit's report
INDEX = "index.sqlite"  # the run index, derived from the run directories
INDEX_LOCK = ".index.lock"
GC_LOCK = ".gc.lock"
CREATED = ".created.jsonl"  # the store's ledger of the runs launch created in it (runs.note_created)
STORE_RESERVED = frozenset({OBJECTS, WHEELS, SWEEPS, AUDITS, INDEX, INDEX_LOCK, GC_LOCK, CREATED})

# The one rule for a run's name (its id), shared by runs.create, the index and an archive's run:
# YYYYMMDD-HHMMSS-<6 hex digits>. None of the reserved names above can match it.
RUN_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}")


def is_run_id(name: object) -> bool:
    """Is ``name`` a run's id as ``runs.create`` makes them (and never a store-reserved name)?"""
    return isinstance(name, str) and RUN_ID.fullmatch(name) is not None


@dataclass(frozen=True, init=False)
class RunPaths:
    """The paths of one run directory's files, one property per name above (submitit's ``JobPaths``).

    ``RunPaths(run_dir).config`` is ``run_dir / CONFIG``: whoever works on one run directory asks it
    for a file's path rather than joining a name, so a name is spelled once. ``run_dir`` is kept as
    given (relative stays relative: messages name the path the user gave).
    """

    run_dir: Path

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        object.__setattr__(self, "run_dir", Path(run_dir))  # frozen: set once, a str or any path-like as a Path

    @property
    def config(self) -> Path:
        """The resolved config (``config.yaml``), written first: what makes a directory a run."""
        return self.run_dir / CONFIG

    @property
    def fingerprint(self) -> Path:
        """``fingerprint.json``: the launcher's side, then the job's facts merged in."""
        return self.run_dir / FINGERPRINT

    @property
    def job(self) -> Path:
        """``job.json``: the determinism plan and what the job process needs to start."""
        return self.run_dir / JOB

    @property
    def status(self) -> Path:
        """``status.json``: running, complete, failed or interrupted."""
        return self.run_dir / STATUS

    @property
    def job_facts(self) -> Path:
        """``job-facts.json``: the job's own facts, merged into the fingerprint by the launcher."""
        return self.run_dir / JOB_FACTS

    @property
    def result(self) -> Path:
        """``result.json``: the final metrics and the weights' hash."""
        return self.run_dir / RESULT

    @property
    def error(self) -> Path:
        """``error.json``: why the job failed or stopped."""
        return self.run_dir / ERROR

    @property
    def metrics(self) -> Path:
        """``metrics.jsonl``: one line per epoch."""
        return self.run_dir / METRICS

    @property
    def trace(self) -> Path:
        """``trace.jsonl``: the step trace."""
        return self.run_dir / TRACE

    @property
    def outputs(self) -> Path:
        """The job's own output files' folder."""
        return self.run_dir / OUTPUT_DIR

    @property
    def checkpoints(self) -> Path:
        """The epoch checkpoints' folder."""
        return self.run_dir / CHECKPOINTS

    @property
    def log(self) -> Path:
        """``log.txt``: the job's output, whole."""
        return self.run_dir / LOG

    @property
    def workers(self) -> Path:
        """A multi-worker run's folder of its other workers (``distribute.workers``)."""
        return self.run_dir / WORKERS

    def worker(self, index: int) -> RunPaths:
        """Worker ``index``'s files: the chief's (0) are the run's own, so every single-worker reader
        keeps working; another worker's lie in ``workers/<index>/``, named as a run's."""
        return self if index == 0 else RunPaths(self.workers / str(index))

    @property
    def container(self) -> Path:
        """``container.json``: a container runtime's image id, tag, uid and network."""
        return self.run_dir / CONTAINER

    @property
    def snapshot(self) -> Path:
        """``snapshot.json``: the code and small data the run keeps, by content, in the store's objects."""
        return self.run_dir / SNAPSHOT

    @property
    def manifest(self) -> Path:
        """``manifest.json``: the seal, every file's sha256, written last."""
        return self.run_dir / MANIFEST

    @property
    def signature(self) -> Path:
        """``manifest.json.sig``: the seal signed, beside it."""
        return self.run_dir / SIGNATURE

    @property
    def tensorboard(self) -> Path:
        """The TensorBoard event files' folder."""
        return self.run_dir / TENSORBOARD


@dataclass(frozen=True, init=False)
class StorePaths:
    """The paths of a store's own files and folders (``store.root``), and of its runs.

    ``StorePaths(root).objects`` is ``root / OBJECTS``; ``.run(run_id)`` is the ``RunPaths`` of a
    run directory in it. ``root`` is kept as given, as ``RunPaths`` keeps its folder.
    """

    root: Path

    def __init__(self, root: str | os.PathLike[str]) -> None:
        object.__setattr__(self, "root", Path(root))  # frozen: set once, a str or any path-like as a Path

    @property
    def objects(self) -> Path:
        """The snapshots' content-addressed objects: ``objects/ab/abcdef...``."""
        return self.root / OBJECTS

    @property
    def wheels(self) -> Path:
        """The archives' wheels, one folder per run."""
        return self.root / WHEELS

    def run_wheels(self, run_id: str) -> Path:
        """The wheels an archive brought for run ``run_id``."""
        return self.wheels / run_id

    @property
    def sweeps(self) -> Path:
        """The sweeps' folders: each one's summary and its code as it was at submission."""
        return self.root / SWEEPS

    @property
    def audits(self) -> Path:
        """The audits' folders: each one's report."""
        return self.root / AUDITS

    @property
    def index(self) -> Path:
        """The run index (SQLite), derived from the run directories."""
        return self.root / INDEX

    @property
    def index_lock(self) -> Path:
        """The lock the index's repair takes."""
        return self.root / INDEX_LOCK

    @property
    def gc_lock(self) -> Path:
        """The gc's lock: held shared by a run storing its snapshot, exclusively by ``launch gc``."""
        return self.root / GC_LOCK

    @property
    def created(self) -> Path:
        """The ledger of the runs launch created in this store."""
        return self.root / CREATED

    def run(self, run_id: str) -> RunPaths:
        """The paths of run ``run_id``'s directory in this store."""
        return RunPaths(self.root / run_id)
