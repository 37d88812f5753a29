"""What a run leaves behind, and how it is read back.

Owns the run directory and its seal (``runs``), the fingerprint of what a run ran on
and read (``fingerprint`` assembles it from ``probes``; ``environment`` is the
allowlist that keeps secrets out; ``key`` is the one definition of the
comparability key), digests of weights and files (``hashing``) and the SQLite index
of a store (``index``, derived from the run directories).

The bottom layer: imports only ``launcher.errors`` and ``launcher.proc``.
"""
