"""Seeds the job's own code sets: the seed in effect, not only the one planned.

A script that calls ``keras.utils.set_random_seed(42)`` itself overrides the run's seed:
a sweep over ``+seed=range(3)`` then trains three times with 42, and the record would
say 0, 1, 2. So, after the bootstrap has applied its own seeds, the seeding functions a
script calls (``keras.utils.set_random_seed``, ``tf.random.set_seed``,
``tf.keras.utils.set_random_seed``, ``np.random.seed``, ``random.seed``) are wrapped;
a call from the job's own code (not from Keras or TensorFlow, which call the others
inside ``set_random_seed``) is recorded with its value and call site. The calls go into
the effective determinism settings (``determinism.seeds_set_by_job``, in the key), and
the job prints a note naming them.

Generators the job's code makes without a seed (``np.random.default_rng()``,
``tf.random.Generator.from_non_deterministic_state()``) are recorded with their call
sites too: not a setting, a cause, which ``launch compare`` names when runs differ.
(Classes such as ``np.random.RandomState`` are not wrapped: a stand-in class would
break the ``isinstance`` checks of the libraries that receive them.)
"""

from __future__ import annotations

import functools
import os
import sys

from launcher.record import usage

calls: list[dict] = []  # {"call", "value", "where"} in call order
unseeded: list[dict] = []  # {"call", "where"}: generators the job's code made without a seed
_installed = False


def install() -> None:
    """Wrap the seeding functions the job's code may call (once per process)."""
    global _installed
    if _installed:
        return
    _installed = True
    import random

    import numpy as np

    kind = usage.code_kind(usage.roots())

    def jobs_code(filename: str) -> bool:
        return kind(filename) == "user"

    def wrap(module, attr: str, name: str) -> None:
        original = getattr(module, attr, None)
        if original is None or getattr(original, "_launch_seed_wrapper", False):
            return

        @functools.wraps(original)
        def seeded(*args, **kwargs):
            frame = sys._getframe(1)
            if jobs_code(frame.f_code.co_filename):
                value = args[0] if args else next(iter(kwargs.values()), None)
                where = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
                calls.append({"call": name, "value": _plain(value), "where": where})
            return original(*args, **kwargs)

        seeded._launch_seed_wrapper = True
        setattr(module, attr, seeded)

    def wrap_unseeded(owner, attr: str, name: str) -> None:
        original = getattr(owner, attr, None)
        if original is None or getattr(original, "_launch_seed_wrapper", False):
            return

        @functools.wraps(original)
        def made(*args, **kwargs):
            frame = sys._getframe(1)
            if jobs_code(frame.f_code.co_filename) and (name.endswith("from_non_deterministic_state")
                                                        or (not args or args[0] is None) and not kwargs):
                where = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
                if len(unseeded) < 20:
                    unseeded.append({"call": f"{name}()", "where": where})
            return original(*args, **kwargs)

        made._launch_seed_wrapper = True
        setattr(owner, attr, made)

    wrap_unseeded(np.random, "default_rng", "np.random.default_rng")
    if "tensorflow" in sys.modules:
        generator = sys.modules["tensorflow"].random.Generator
        wrap_unseeded(generator, "from_non_deterministic_state", "tf.random.Generator.from_non_deterministic_state")
    wrap(random, "seed", "random.seed")
    wrap(np.random, "seed", "np.random.seed")
    if "tensorflow" in sys.modules:  # imported by the bootstrap for every task that trains
        tf = sys.modules["tensorflow"]
        wrap(tf.random, "set_seed", "tf.random.set_seed")
        wrap(tf.compat.v1, "set_random_seed", "tf.compat.v1.set_random_seed")
        wrap(tf.keras.utils, "set_random_seed", "keras.utils.set_random_seed")
    if "keras" in sys.modules:
        wrap(sys.modules["keras"].utils, "set_random_seed", "keras.utils.set_random_seed")


def _plain(value: object) -> object:
    return value if isinstance(value, (int, float, str, type(None))) else repr(value)


def recorded() -> list[dict]:
    return list(calls)


def note(planned: int) -> str | None:
    """The line printed when the job seeded itself, or None."""
    if not calls:
        return None
    shown = ", ".join(f"{c['call']}({c['value']!r}) at {c['where']}" for c in calls[:3])
    more = f" and {len(calls) - 3} more" if len(calls) > 3 else ""
    return (f"[launch] note: the job seeds itself: {shown}{more}; the run's seed ({planned}) does not decide "
            "what those calls seed, and the record keys the seeds in effect")
