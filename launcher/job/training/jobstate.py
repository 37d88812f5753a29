"""What the job process holds beyond the fitted model, its optimizer and the global RNGs, kept in a fit's
checkpoint and put back on resume: the state itself, not a list of known states (issue 42).

- **Every TensorFlow variable the job created** (``observe_variables`` wraps the resource variable's
  constructor, as the trained-variables hash wraps its assignments): the ``SeedGenerator`` state of a
  Keras random layer used outside the model (a ``RandomTranslation`` in a ``tf.data`` ``map``, which
  advances with every image), a ``tf.random.Generator`` of the code's own, a metric of its own, any
  ``tf.Variable``. The model's, the optimizer's and the global generator's are the checkpointer's; the
  compiled metrics' are left out (Keras resets them before every epoch). A variable is known again in
  the resumed process by its name, shape and dtype and its place among the live variables of that
  name in creation order (``variable_keys``); one that does not exist yet where the restore happens is
  restored as it is created (``pending``).
- **Python and NumPy generators of the job's own** (``random.Random``, ``np.random.Generator``,
  ``np.random.RandomState``; the global ones are in the checkpointer's ``rng.json``), found by the
  garbage collector when a fit begins and known again by their state at that moment: a resumed fit
  begins with every generator where the uninterrupted run's began.
- **Each callback's own attributes that changed during training** (``CallbackState``): what differs
  from what they were once every callback's ``on_train_begin`` ran. A changed attribute whose value a
  checkpoint cannot hold (not numbers, strings, arrays, or lists, tuples, dicts and sets of them) is
  named in the checkpoint, and a resume from it is refused naming it.

Job process only; TensorFlow and NumPy are imported when used.
"""

from __future__ import annotations

import gc
import hashlib
import json
import random
import weakref

import numpy as np


def encode(value: object) -> object:
    """``value`` as JSON that ``decode`` turns back into the same types and bits (NumPy
    scalars keep their dtype: a float32 prints differently from the float it widens to)."""
    if isinstance(value, np.generic):
        return {"__numpy__": value.dtype.str, "value": value.item()}
    if isinstance(value, np.ndarray):
        return {"__ndarray__": value.dtype.str, "value": value.tolist()}
    if isinstance(value, dict):
        return {"__dict__": [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return {"__list__" if isinstance(value, list) else "__tuple__": [encode(v) for v in value]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot keep a {type(value).__name__} in a checkpoint")


def decode(value: object) -> object:
    """The inverse of ``encode``."""
    if not isinstance(value, dict):
        return value
    if "__numpy__" in value:
        return np.dtype(value["__numpy__"]).type(value["value"])
    if "__ndarray__" in value:
        return np.array(value["value"], dtype=np.dtype(value["__ndarray__"]))
    if "__dict__" in value:
        return {decode(k): decode(v) for k, v in value["__dict__"]}
    if "__list__" in value:
        return [decode(v) for v in value["__list__"]]
    return tuple(decode(v) for v in value["__tuple__"])


# ---------------------------------------------------------------- TensorFlow variables
_created: list = []  # weakrefs to every eager resource variable made since observe_variables, in order
_pending: dict[tuple, np.ndarray] = {}  # key -> value, for variables of a checkpoint not made yet
_restored_late: list[str] = []  # names of variables restored as they were created


def observe_variables() -> None:
    """Note every eager resource variable created from now on (wraps the constructor once)."""
    from tensorflow.python.ops import resource_variable_ops

    cls = resource_variable_ops.BaseResourceVariable
    original = cls.__init__
    if getattr(original, "_launch_created", False):
        return

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if getattr(self, "_in_graph_mode", True):
            return  # a TF1 graph's variable: its session holds its value
        try:
            _created.append(weakref.ref(self))
        except TypeError:
            return
        if _pending:
            _restore_if_pending(self)

    __init__._launch_created = True  # type: ignore[attr-defined]
    cls.__init__ = __init__


def _value(v) -> np.ndarray:
    """A variable's value as NumPy, also while a tf.function is being traced."""
    import tensorflow as tf

    with tf.init_scope():
        return np.asarray(v.numpy())


def _triple(v) -> tuple[str, tuple, str]:
    return str(v.name), tuple(int(d) if d is not None else -1 for d in v.shape), v.dtype.name


def _alive(skip: set[int]) -> list:
    """The live created variables, in creation order, but those in ``skip`` (by id)."""
    _created[:] = [ref for ref in _created if ref() is not None]
    return [v for ref in _created if (v := ref()) is not None and id(v) not in skip]


def variable_keys(variables: list) -> list[tuple]:
    """Each variable's key: (name, shape, dtype, its place among those of the same three, from 0)."""
    seen: dict[tuple, int] = {}
    keys = []
    for v in variables:
        triple = _triple(v)
        keys.append((*triple, seen.get(triple, 0)))
        seen[triple] = seen.get(triple, 0) + 1
    return keys


def known_elsewhere(model) -> set[int]:
    """The ids of the variables the checkpointer keeps (the model's, its optimizer's, the global
    generator's) and of the compiled metrics (reset by Keras before every epoch): not kept here. A
    distributed variable's (``MirroredVariable``, ``SyncOnReadVariable``) per-device components with it:
    restoring the variable restores them."""
    import tensorflow as tf

    from launcher.job.training import legacy

    def raw(v):
        return getattr(v, "value", v) if not isinstance(v, tf.Variable) else v

    metrics = getattr(model, "metrics_variables", None)
    if metrics is None:  # tf_keras: the compiled metrics' own variables
        metrics = [v for m in getattr(model, "metrics", None) or [] for v in getattr(m, "variables", [])]
    owned = [*model.variables, *metrics]
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None:
        owned += legacy.optimizer_variables(optimizer)
    ids = set()
    for v in owned:
        ids.add(id(raw(v)))
        ids.update(id(c) for c in getattr(raw(v), "_values", None) or ())
    generator = _global_generator()
    if generator is not None:
        ids.add(id(generator.state))
    return ids


def _global_generator():
    from tensorflow.python.ops import stateful_random_ops

    return getattr(stateful_random_ops, "global_generator", None)


def save_variables(model) -> tuple[list[dict], dict[str, np.ndarray]]:
    """The other variables the job holds: their keys (for ``extra.json``) and values (``arrays.npz``)."""
    variables = _alive(known_elsewhere(model))
    entries, arrays = [], {}
    for i, (v, key) in enumerate(zip(variables, variable_keys(variables), strict=True)):
        entries.append({"key": list(key[:1]) + [list(key[1]), key[2], key[3]], "array": f"variable_{i}"})
        arrays[f"variable_{i}"] = _value(v)
    return entries, arrays


def snapshot_variables(model) -> dict[tuple, bytes]:
    """Each other variable's value now, by key (to see which a fast-forward moved)."""
    variables = _alive(known_elsewhere(model))
    return {key: _value(v).tobytes() for v, key in zip(variables, variable_keys(variables), strict=True)}


def restore_variables(model, entries: list[dict], arrays: dict[str, np.ndarray], moved: set[tuple]) -> list[str]:
    """Assign each kept variable its value; those not made yet are restored as they are made. The
    variables in ``moved`` are skipped (a fast-forward put them where they were). Returns problems."""
    variables = _alive(known_elsewhere(model))
    here = dict(zip(variable_keys(variables), variables, strict=True))
    problems = []
    _pending.clear()
    for entry in entries:
        name, shape, dtype, place = entry["key"]
        key = (name, tuple(shape), dtype, place)
        if key in moved:
            continue
        value = arrays[entry["array"]]
        target = here.get(key)
        if target is None:
            _pending[key] = value
            continue
        try:
            _assign(target, value)
        except Exception as exc:  # noqa: BLE001 - said in one line by the caller
            problems.append(f"variable {name} cannot be restored ({type(exc).__name__})")
    return problems


def _assign(variable, value: np.ndarray) -> None:
    import tensorflow as tf

    with tf.init_scope():
        variable.assign(value)


def _restore_if_pending(variable) -> None:
    triple = _triple(variable)
    same = [v for v in _alive(set()) if _triple(v) == triple]
    key = (*triple, len(same) - 1)
    if key in _pending:
        _assign(variable, _pending.pop(key))
        _restored_late.append(triple[0])


def not_restored() -> list[str]:
    """The names of the kept variables that no variable of the resumed job has taken (yet)."""
    return sorted(key[0] for key in _pending)


# ---------------------------------------------------------------- Python and NumPy generators
def _global_generators() -> set[int]:
    return {id(random._inst), id(np.random.mtrand._rand)}


def find_generators() -> list:
    """The job's own ``random.Random``, ``np.random.Generator`` and ``np.random.RandomState`` objects
    alive now (the global ones are the checkpointer's)."""
    kinds = (random.Random, np.random.Generator, np.random.RandomState)
    skip = _global_generators()
    return [
        o
        for o in gc.get_objects()
        if isinstance(o, kinds) and not isinstance(o, random.SystemRandom) and id(o) not in skip
    ]


def generator_state(generator) -> object:
    """A generator's state, as JSON (``fitstate.encode``)."""
    if isinstance(generator, random.Random):
        return encode(generator.getstate())
    if isinstance(generator, np.random.RandomState):
        return encode(generator.get_state(legacy=False))
    return encode(generator.bit_generator.state)


def set_generator_state(generator, state: object) -> None:
    value = decode(state)
    if isinstance(generator, random.Random):
        version, internal, gauss = value
        generator.setstate((version, tuple(internal), gauss))
    elif isinstance(generator, np.random.RandomState):
        generator.set_state(value)
    else:
        generator.bit_generator.state = value


def digest(state: object) -> str:
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:16]


class Generators:
    """The job's own generators, found as a fit begins and known by their state then."""

    def __init__(self) -> None:
        self.found: list[tuple[object, str]] = []  # (generator, digest of its state as the fit began)

    def begin(self) -> None:
        self.found = []
        for g in find_generators():
            try:
                self.found.append((g, digest(generator_state(g))))
            except Exception:  # noqa: BLE001 - a generator with no state to read (an entropy source)
                continue

    def save(self) -> list[dict]:
        return [{"began": began, "type": type(g).__name__, "state": generator_state(g)} for g, began in self.found]

    def snapshot(self) -> dict[int, str]:
        return {id(g): digest(generator_state(g)) for g, _ in self.found}

    def restore(self, kept: list[dict], moved: set[int]) -> list[str]:
        """Put each generator back in its kept state; those in ``moved`` (by id) are skipped. Two that
        began in the same state and ended in different ones cannot be told apart: a problem."""
        by_start: dict[str, list[dict]] = {}
        for entry in kept:
            by_start.setdefault(entry["began"], []).append(entry)
        problems = []
        for generator, began in self.found:
            entries = by_start.get(began)
            if not entries or id(generator) in moved:
                continue
            if len({digest(e["state"]) for e in entries}) > 1:
                problems.append(
                    f"{len(entries)} {type(generator).__name__} generators began the fit in the same "
                    "state and ended it in different ones: which is which cannot be told"
                )
                continue
            set_generator_state(generator, entries[0]["state"])
        return problems


# ---------------------------------------------------------------- callbacks
_NOT_STATE = {"model", "_model", "params", "validation_data"}


def callable_ref(value: object) -> str | None:
    """``module:qualname`` of a function or class importable under that name (ReduceLROnPlateau's
    ``monitor_op`` is ``keras.ops.less``, set at its first epoch's end), else None."""
    import importlib

    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if not callable(value) or not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    try:
        found: object = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return f"{module}:{qualname}" if found is value else None


def _from_ref(ref: str) -> object:
    import importlib

    module, qualname = ref.split(":", 1)
    found: object = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def _keepable(value: object) -> bool:
    if callable(value) and callable_ref(value) is not None:
        return True
    if value is None or isinstance(value, (bool, int, float, str, np.generic, np.ndarray)):
        return True
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(_keepable(v) for v in value)
    if isinstance(value, dict):
        return all(_keepable(k) and _keepable(v) for k, v in value.items())
    return False


_RESOURCE_MODULES = (
    "tensorflow.python.ops.summary_ops",
    "_csv",
    "csv",
    "threading",
    "_thread",
    "_io",
    "io",
    "multiprocessing",
    "concurrent.futures",
)


def _resource(value: object) -> bool:
    """An attribute that holds a resource rather than state: a file, a CSV or summary writer, a thread, a
    lock, a pool (also in a list or dict of them); TensorBoard and CSVLogger keep these."""
    if isinstance(value, dict):
        return bool(value) and all(_resource(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return bool(value) and all(_resource(v) for v in value)
    return type(value).__module__.startswith(_RESOURCE_MODULES)


def _fingerprint(value: object) -> object:
    """What tells a changed attribute from an unchanged one: its content when it can be kept, else
    the object itself (a rebound attribute)."""
    if callable(value) and (ref := callable_ref(value)) is not None:
        return ("callable", ref)
    if _keepable(value):
        return ("value", _content_digest(value))
    return ("object", id(value))


def _content_digest(value: object) -> str:
    h = hashlib.sha256()

    def walk(v):
        if isinstance(v, np.ndarray):
            h.update(f"ndarray{v.dtype.str}{v.shape}".encode())
            h.update(np.ascontiguousarray(v).tobytes())
        elif isinstance(v, dict):
            h.update(b"dict")
            for k in v:
                walk(k)
                walk(v[k])
        elif isinstance(v, (list, tuple, set, frozenset)):
            h.update(type(v).__name__.encode())
            for x in sorted(v, key=repr) if isinstance(v, (set, frozenset)) else v:
                walk(x)
        else:
            h.update(f"{type(v).__name__}:{v!r}".encode())

    walk(value)
    return h.hexdigest()


def _attributes(callback) -> dict[str, object]:
    import tensorflow as tf

    out = {}
    for name, value in vars(callback).items():
        if name in _NOT_STATE or isinstance(value, tf.Variable) or hasattr(value, "assign"):
            continue  # variables are kept as variables
        out[name] = value
    return out


class CallbackState:
    """Each of the job's callbacks' attributes as they were once every ``on_train_begin`` ran, and
    which of them changed since."""

    def __init__(self, callbacks: list) -> None:
        self.callbacks = callbacks
        self.baseline: list[dict[str, object]] = []

    def begin(self) -> None:
        self.baseline = [{k: _fingerprint(v) for k, v in _attributes(cb).items()} for cb in self.callbacks]

    def save(self) -> tuple[list[dict], dict[str, np.ndarray], list[str]]:
        """(per changed callback: its place, class and changed attributes; their arrays; what cannot be kept)."""
        states, arrays, unkept = [], {}, []
        for i, cb in enumerate(self.callbacks):
            before = self.baseline[i] if i < len(self.baseline) else {}
            changed = {}
            for name, value in _attributes(cb).items():
                if before.get(name) == _fingerprint(value):
                    continue
                if _resource(value):
                    continue  # a file, a summary writer, a thread: made again by the resumed job, not training state
                if not _keepable(value):
                    unkept.append(f"{type(cb).__name__}.{name} (a {type(value).__name__})")
                    continue
                changed[name] = _encode_with_arrays(value, arrays, f"callback{i}_{name}", encode)
            if changed:
                states.append({"index": i, "class": type(cb).__name__, "attrs": changed})
        return states, arrays, unkept


def _encode_with_arrays(value: object, arrays: dict, prefix: str, encode) -> object:
    """``encode``, with arrays (also a list or tuple of them: best weights) kept in ``arrays``, and a
    function or class by its importable name."""
    if callable(value) and (ref := callable_ref(value)) is not None:
        return {"__callable__": ref}
    if isinstance(value, np.ndarray) and value.size > 16:
        arrays[prefix] = value
        return {"__array__": prefix}
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, np.ndarray) for v in value):
        for j, v in enumerate(value):
            arrays[f"{prefix}_{j}"] = v
        return {"__arrays__": [f"{prefix}_{j}" for j in range(len(value))], "tuple": isinstance(value, tuple)}
    if isinstance(value, (set, frozenset)):
        return {"__set__": [encode(v) for v in sorted(value, key=repr)], "frozen": isinstance(value, frozenset)}
    return encode(value)


def decode_with_arrays(value: object, arrays: dict) -> object:
    """The inverse of ``_encode_with_arrays``."""
    if isinstance(value, dict) and "__callable__" in value:
        return _from_ref(value["__callable__"])
    if isinstance(value, dict) and "__array__" in value:
        return arrays[value["__array__"]]
    if isinstance(value, dict) and "__arrays__" in value:
        items = [arrays[k] for k in value["__arrays__"]]
        return tuple(items) if value.get("tuple") else items
    if isinstance(value, dict) and "__set__" in value:
        items = [decode(v) for v in value["__set__"]]
        return frozenset(items) if value.get("frozen") else set(items)
    return decode(value)
