"""The store: where runs and what they need are kept, and who may trust them.

Owns the names of a run directory's and a store's files (``layout``: ``RunPaths``-like names, the
one rule for run ids, the names a store keeps for itself), a run directory's life and its seal
(``runs``), the content-addressed objects runs share (``objects``), keeping a run's code and data
in them (``keep``), removing the ones no run needs (``gc``), the run index (``index``, derived
from the run directories) and signed seals (``signing``).

Used by both processes. Imports only ``launcher.record``'s leaves, ``launcher.errors``,
``launcher.proc`` and ``launcher.version``.
"""
