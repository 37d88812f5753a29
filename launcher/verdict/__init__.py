"""Judgments over stored runs: the verdicts are the product.

Owns ``compare`` (IDENTICAL, DIFFERENT, REFUSED, NOT COMPARABLE, EQUIVALENT,
NOTHING COMPARED), ``migration`` (``compare --migration``: a TF1 model against its
TF2 port, within tolerances), ``replay`` (REPRODUCED or not, from what a run stored),
``audit`` with its pure report (which knobs change a job's bits, STABLE or not) and
``plots`` (where two runs split, a sweep's spread, drawn).
Verdicts are computed by pure functions over loaded records; loading verifies seals.

May import ``launcher.run`` (to rerun a job) and ``launcher.record``; never
``sweep`` or ``cli``.
"""
