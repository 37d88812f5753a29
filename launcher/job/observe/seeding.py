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
``np.random.RandomState()``, ``random.Random()``,
``tf.random.Generator.from_non_deterministic_state()``) are recorded with their call
sites too: not a setting, a cause, which ``launch compare`` names when runs differ.
NumPy's generator classes are not replaced (a stand-in class would break the
``isinstance`` checks of the libraries that receive them): NumPy draws fresh entropy
for any of them through ``numpy.random.bit_generator.randbits``, which is wrapped, and
the call in the job's code that drew it is read from its source (``unseeded_call``).

A resumed fit's train function is searched, as it is traced and before its first step runs, for
TensorFlow's stateful random ops (``stateful_random_ops``): ``RandomStandardNormal``,
``RandomUniform``... keep their position inside the op's kernel, in no variable, and start
again when a new process traces the function; Keras' legacy ``keras.backend.random_normal``
makes one, seeded from ``np.random.randint`` at trace time. A resume of such a fit cannot be
bitwise; the job says so, naming the op's line in the job's code (``not_bitwise_note``).
"""

from __future__ import annotations

import functools
import os
import sys

from launcher.job.observe import callers

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

    kind = callers.code_kind(callers.roots())

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
            if jobs_code(frame.f_code.co_filename) and (
                name.endswith("from_non_deterministic_state") or (not args or args[0] is None) and not kwargs
            ):
                _note_unseeded(f"{name}()", frame)
            return original(*args, **kwargs)

        made._launch_seed_wrapper = True
        setattr(owner, attr, made)

    wrap_unseeded(np.random, "default_rng", "np.random.default_rng")
    _wrap_entropy(np, jobs_code)
    _wrap_random_init(random, jobs_code)
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


def _note_unseeded(call: str, frame, once: bool = False) -> None:
    """Record ``call`` at ``frame``'s line (at most 20; with ``once``, not a second time)."""
    entry = {"call": call, "where": f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"}
    if len(unseeded) < 20 and not (once and entry in unseeded):
        unseeded.append(entry)


def _wrap_entropy(np, jobs_code) -> None:
    """NumPy's fresh entropy, drawn by any generator made without a seed (``RandomState()``,
    ``PCG64()``, ``SeedSequence()``); the job's call that drew it is noted when it passed no seed."""
    module = getattr(np.random, "bit_generator", None)
    original = getattr(module, "randbits", None)
    if original is None or getattr(original, "_launch_seed_wrapper", False):
        return

    @functools.wraps(original)
    def randbits(*args, **kwargs):
        frame = sys._getframe(1)  # NumPy's Cython code has no frame: this is the Python caller
        if jobs_code(frame.f_code.co_filename):
            call = unseeded_call(frame)
            if call is not None:
                _note_unseeded(call, frame, once=True)  # RandomState() draws twice
        return original(*args, **kwargs)

    randbits._launch_seed_wrapper = True
    module.randbits = randbits


def unseeded_call(frame) -> str | None:
    """``"np.random.RandomState()"`` when the call ``frame`` is executing passes no seed (no
    argument, or ``None``); None for a seeded call (``RandomState(3)`` draws entropy before
    it seeds) or a call whose source cannot be read."""
    import ast
    import linecache

    try:
        positions = list(frame.f_code.co_positions())[frame.f_lasti // 2]
        first, last, start, end = positions
        lines = [linecache.getline(frame.f_code.co_filename, n) for n in range(first, last + 1)]
        text = "".join(lines)[start : sum(map(len, lines[:-1])) + end] if None not in positions else ""
        call = ast.parse(text.strip(), mode="eval").body
    except (AttributeError, IndexError, TypeError, ValueError, SyntaxError):
        return None
    if not isinstance(call, ast.Call):
        return None
    given = [*call.args, *(k.value for k in call.keywords)]
    if any(not (isinstance(v, ast.Constant) and v.value is None) for v in given):
        return None
    return f"{ast.unparse(call.func)}()"


def _wrap_random_init(random, jobs_code) -> None:
    """``random.Random()`` (and ``SystemRandom()``) made by the job's code without a seed."""
    original = random.Random.__init__
    if getattr(original, "_launch_seed_wrapper", False):
        return

    @functools.wraps(original)
    def __init__(self, x=None, *args, **kwargs):
        frame = sys._getframe(1)
        if x is None and jobs_code(frame.f_code.co_filename):
            _note_unseeded(f"random.{type(self).__name__}()", frame)
        original(self, x, *args, **kwargs)

    __init__._launch_seed_wrapper = True
    random.Random.__init__ = __init__


# TensorFlow's random ops whose state lives in the op's kernel (a Philox counter seeded from the op's
# seed and seed2 attributes), not in a variable: a checkpoint cannot keep it, a new trace restarts it.
# The stateless ops and tf.random.Generator's (Stateful*, a resource variable) are not among them.
STATEFUL_RANDOM_OPS = frozenset(
    {
        "RandomStandardNormal",
        "RandomUniform",
        "RandomUniformInt",
        "TruncatedNormal",
        "ParameterizedTruncatedNormal",
        "RandomShuffle",
        "Multinomial",
        "RandomGamma",
        "RandomPoisson",
        "RandomPoissonV2",
        "RandomCrop",
        "SampleDistortedBoundingBox",
        "SampleDistortedBoundingBoxV2",
    }
)


def stateful_random_ops(graph, is_jobs_code=None) -> list[dict]:
    """The stateful random ops (``STATEFUL_RANDOM_OPS``) in a traced TensorFlow ``graph`` and in
    every function it calls (a ``tf.function`` inside, a loop's body), each once per line:
    ``{"op": type, "where": "file.py:LINE"}``, the line the innermost frame of the job's own code
    (``is_jobs_code(filename)``; default: the callers' classification) made it at, or of any code
    when none is the job's. Reads the graph only."""
    if is_jobs_code is None:
        kind = callers.code_kind(callers.roots())

        def is_jobs_code(filename: str) -> bool:
            return kind(filename) == "user"

    found: dict[tuple[str, str], None] = {}
    pending, seen = [graph], set()
    while pending:
        g = pending.pop()
        if id(g) in seen:
            continue
        seen.add(id(g))
        for op in g.get_operations():
            if op.type in STATEFUL_RANDOM_OPS:
                found[(op.type, _made_at(op, is_jobs_code))] = None
        for function in list(getattr(g, "_functions", {}).values()):
            inner = getattr(function, "graph", None)
            if inner is not None:
                pending.append(inner)
    return [{"op": op, "where": where} for op, where in found]


def _made_at(op, is_jobs_code) -> str:
    frames = list(getattr(op, "traceback", None) or [])
    own = [f for f in frames if is_jobs_code(f.filename)]
    frame = (own or frames or [None])[-1]
    return "?" if frame is None else f"{os.path.basename(frame.filename)}:{frame.lineno}"


def not_bitwise_note(found: list[dict]) -> str:
    """The line a resume that cannot be bitwise prints before it trains (``found``: ``stateful_random_ops``)."""
    shown = ", ".join(f"{f['op']} at {f['where']}" for f in found[:3])
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return (
        f"[launch] warning: this resume will not be bitwise: its train function draws from a random op "
        f"whose state is in no variable ({shown}{more}: TensorFlow's legacy random ops, as "
        "keras.backend.random_normal without a seed makes); seed it (seed= a keras.random.SeedGenerator, "
        "with keras.random.normal) for a bitwise resume"
    )


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
    return (
        f"[launch] note: the job seeds itself: {shown}{more}; the run's seed ({planned}) does not decide "
        "what those calls seed, and the record keys the seeds in effect"
    )
