"""TensorFlow 1 code under the bootstrap: graphs, sessions and their training.

Seed 002 of this project makes Keras-on-TF1 training reproducible with a graph-level
seed and a ``Session`` whose ``ConfigProto`` pins one thread. A TF1-style script
(``tf.compat.v1.disable_eager_execution()``, placeholders, ``get_variable``, a
``Session`` loop) builds its graph after the bootstrap ran, so the bootstrap reaches
it here:

- **Seeds.** Every ``tf.Graph`` the job creates starts with the run's seed as its
  graph-level seed, as ``tf.compat.v1.set_random_seed(seed)`` would set it; a seed the
  script sets itself still wins.
- **Threads.** A session's own ``ConfigProto`` decides its thread pools, and they change
  the bits as much as the process-wide ones. Where the script's config leaves a count
  at 0 (TensorFlow's default: the machine's cores), the plan's pinned count is filled
  in; counts the script sets are kept. Each session's effective counts are recorded
  (``determinism.sessions``, in the comparability key).
- **Training.** Train ops built by ``tf.compat.v1.train`` optimizers are noted; every
  ``Session.run`` that runs one is an optimizer step (traced like any other), and the
  variables it trains are hashed at the end, read from the session before it closes.
"""

from __future__ import annotations

import functools

import numpy as np

_sessions: list[dict] = []  # effective thread counts of every session the job created


def seed_graphs(seed: int) -> None:
    """Give every new ``tf.Graph`` the run's seed as its graph-level seed."""
    from tensorflow.python.framework import ops

    original = ops.Graph.__init__
    if getattr(original, "_launch_seeded", False):
        return

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if type(self) is ops.Graph and self.seed is None:  # FuncGraphs take their outer graph's seed
            self.seed = seed

    __init__._launch_seeded = True  # type: ignore[attr-defined]
    ops.Graph.__init__ = __init__


def pin_sessions(intra_op_threads: int | None, inter_op_threads: int | None) -> None:
    """Fill a session config's unset thread counts with the plan's, and record every session's."""
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.client import session
    from tensorflow.python.eager import context

    original = session.BaseSession.__init__
    if getattr(original, "_launch_pinned", False):
        return

    @functools.wraps(original)
    def __init__(self, target="", graph=None, config=None):
        chosen = config_pb2.ConfigProto()
        chosen.CopyFrom(config if config is not None else context.context().config)
        if intra_op_threads is not None and not chosen.intra_op_parallelism_threads:
            chosen.intra_op_parallelism_threads = intra_op_threads
        if inter_op_threads is not None and not chosen.inter_op_parallelism_threads:
            chosen.inter_op_parallelism_threads = inter_op_threads
        effective = {
            "intra_op_threads": chosen.intra_op_parallelism_threads or None,
            "inter_op_threads": chosen.inter_op_parallelism_threads or None,
        }
        if effective not in _sessions:
            _sessions.append(effective)
        original(self, target, graph, chosen)

    __init__._launch_pinned = True  # type: ignore[attr-defined]
    session.BaseSession.__init__ = __init__


def count_random_ops(seed: int, mode: str) -> None:
    """Seed every stateful random op by how many came before it (seed 004's migration check).

    This is TensorFlow's ``DeterministicRandomTestTool`` (tf-keras,
    ``tf.compat.v1.keras.utils``): every stateful random op, in a TF1 graph or run
    eagerly in TF2, takes its seed from ``tensorflow.python.framework.random_seed.get_seed``,
    which is replaced for the whole job. In ``num_random_ops`` mode the n-th random op
    gets the seed pair ``(seed, n)``, so a TF1 model and its TF2 port that create their
    random ops in the same order draw the same numbers; in ``constant`` mode every op
    gets ``(seed, 1)``. Counting starts at 1, since TensorFlow reads ``(0, 0)`` as "no
    seed". Reimplemented here rather than imported: tf-keras requires the full
    ``tensorflow`` distribution, whose install replaces ``tensorflow-cpu``'s files.
    """
    from tensorflow.python.framework import random_seed

    state = {"next": 1}

    def get_seed(op_seed):
        if mode == "constant":
            return seed, 1
        n = state["next"]
        state["next"] += 1
        return seed, n

    random_seed.get_seed = get_seed


def sessions() -> list[dict]:
    """The distinct effective thread counts of the sessions the job created (None: TensorFlow's default)."""
    return list(_sessions)


def observe_sessions(obs) -> None:
    """Count ``Session.run`` calls that run a noted train op as optimizer steps; hash what they train."""
    import tensorflow as tf
    from tensorflow.python.client import session
    from tensorflow.python.framework import ops

    run, close = session.BaseSession.run, session.BaseSession.close

    def _trains(fetches) -> bool:
        if not obs.train_ops:
            return False
        for f in tf.nest.flatten(fetches):
            op = f if isinstance(f, ops.Operation) else getattr(f, "op", None)
            if op is not None and id(op) in obs.train_ops:
                return True
        return False

    @functools.wraps(run)
    def traced_run(self, fetches, *args, **kwargs):
        if not _trains(fetches):
            return run(self, fetches, *args, **kwargs)
        obs.note_session(self)
        if obs.session_steps == 0:
            obs.record_initial()
        result = run(self, fetches, *args, **kwargs)
        obs.session_steps += 1
        loss = next((v for v in tf.nest.flatten(result) if isinstance(v, np.floating | float)), None)
        if loss is not None:
            obs.loss = float(loss)
        obs.after_step()
        return result

    @functools.wraps(close)
    def traced_close(self):
        obs.snapshot_session(self)
        return close(self)

    session.BaseSession.run = traced_run
    session.BaseSession.close = traced_close


def read_variables(sess, variables: list) -> list[np.ndarray]:
    """The values of ``variables`` in ``sess`` (reading runs no random op and changes nothing)."""
    return [np.asarray(v) for v in sess.run(variables)]
