"""Sweeps: ``launch -m`` runs many jobs through Hydra's multirun, one device slot each.

Owns the sweep pipeline (``multirun``: expand and validate every job first, run
them through a Hydra launcher plugin, record each job, summarize, ``launch sweep
verify``), the slot plan and per-slot locks (``slots``), optimizing sweepers seeded
from the sweep's seed (``search``) and the summary table (``report``, pure).

May import ``launcher.run``, ``launcher.verdict`` and ``launcher.record``; never
``cli``.
"""
