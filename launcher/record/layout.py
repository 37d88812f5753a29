"""The names of the files and folders in a run directory: one owner, as submitit's ``JobPaths``.

The launcher writes some of them, the job process others; both, and every reader
(verdicts, resume, the index, a sweep), take the names from here.
"""

from __future__ import annotations

import re

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
# Written by the launcher when the job has ended, or by a runtime
CONTAINER = "container.json"  # a container runtime's image id, tag, uid, network
SNAPSHOT = "snapshot.json"  # the code and small data the run keeps, by content, in <store>/objects
MANIFEST = "manifest.json"  # the seal: every file's sha256, written last
SIGNATURE = "manifest.json.sig"  # the seal signed (ssh-keygen -Y sign), when a signing key is configured
TENSORBOARD = "tensorboard"  # event files written from metrics.jsonl and trace.jsonl
REBUILD = "rebuild.json"  # replay --rebuild: what was built, for reading

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
