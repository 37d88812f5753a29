"""Judgments over stored runs: the verdicts are the product.

Owns ``compare`` (IDENTICAL, DIFFERENT, REFUSED, NOT COMPARABLE, EQUIVALENT,
NOTHING COMPARED), ``replay`` (REPRODUCED or not, from what a run stored) and
``audit`` with its pure report (which knobs change a job's bits, STABLE or not).
Verdicts are computed by pure functions over loaded records; loading verifies seals.

May import ``launcher.run`` (to rerun a job) and ``launcher.record``; never
``sweep`` or ``cli``.
"""
