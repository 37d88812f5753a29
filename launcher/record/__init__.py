"""What a run leaves behind, and how it is read back.

Owns the run directory and its seal (``runs``), the fingerprint of what a run ran on
and read (``fingerprint`` assembles it from ``probes`` and from ``usage``, what the job
imported, loaded and read; ``environment`` is the allowlist that keeps secrets out;
``key`` is the one definition of the comparability key), digests of weights and files
(``hashing``, with ``filecache`` remembering file digests by stat; ``outputs``, output
files by what they mean, not their bytes), the code and small
data each run keeps in its store so it can be replayed from itself alone (``snapshot``),
the SQLite index
of a store (``index``, derived from the run directories), the names of a run directory's
files (``layout``), checkpoints and the step trace as stored (``checkpoints``, ``trace``),
where a path belongs (``places``) and a distribution's identity (``distributions``), the
store's garbage collection (``gc``), and where runs are shown:
TensorBoard event files (``tbevents``) and MLflow (``tracking``, the one module that
imports mlflow).

Used by both processes, the launcher and the job. The bottom layer: imports only
``launcher.errors``, ``launcher.proc`` and ``launcher.version``.
"""
