"""The job's side of a multi-worker run (``distribute.workers=N``): one of N worker processes.

The launcher starts each worker with ``TF_CONFIG`` (its cluster and its index) and, in
``job.json``, ``worker`` (``{"index", "count"}``). Here, before the task's code runs:

- the collective implementation is pinned: a ``tf.distribute.MultiWorkerMirroredStrategy``
  the script builds with ``AUTO`` (the default) gets ``RING``, as Megatron pins
  ``NCCL_ALGO=Ring``, under every determinism level but ``off``; what the strategy really
  used, and whether the launcher chose it, is recorded (``observed``) and keyed;
- Keras 3's ``Model.fit`` under that strategy is refused in one line before it trains: it
  fails inside Keras (keras-team/keras#20585), and a worker that fails alone leaves the
  others waiting in a collective;
- ``TF_CONFIG``, which the launcher set (fresh ports every run), is not keyed as a variable the
  script read (``envreads``): the key holds the cluster as ``cluster.*``;
- the chief (worker 0), when its task has ended, waits a bounded time for the other workers
  to record theirs: it serves the cluster's coordination service, and a worker whose chief
  is gone fails its own ending.
"""

from __future__ import annotations

import time
from pathlib import Path

from launcher.errors import ConfigError
from launcher.job.observe import envreads
from launcher.record import layout

KERAS3_FIT_REFUSED = (
    "Keras 3's Model.fit does not run under tf.distribute.MultiWorkerMirroredStrategy "
    "(keras-team/keras#20585); train with a custom loop (strategy.run), or with tf_keras at your "
    "TensorFlow's version, {tf_keras}, and TF_USE_LEGACY_KERAS=1"
)


def keras3_fit_refused(tf_version: str) -> str:
    """The one-line refusal, with the install that keeps this TensorFlow: tf_keras requires the
    ``tensorflow`` distribution, which pip's resolver would write over ``tensorflow-cpu``."""
    minor = ".".join(tf_version.split(".")[:2])
    return KERAS3_FIT_REFUSED.format(tf_keras=f"pip install --no-deps 'tf_keras~={minor}.0'")


WAIT_FOR_WORKERS_S = 120.0  # how long the chief keeps the cluster up for the others to record their end

_seen: dict = {}


def install(level: str) -> None:
    """Pin and observe the collective implementation of every multi-worker strategy the job
    builds (``RING`` where it asked for ``AUTO``; nothing pinned at ``level`` ``off``), and
    refuse Keras 3's ``fit`` under one."""
    from tensorflow.python.distribute import collective_all_reduce_strategy as cars
    from tensorflow.python.distribute import collective_util

    envreads.set_by_the_launcher("TF_CONFIG")  # the script may read it, as TensorFlow's tutorial does

    original = cars.CollectiveAllReduceStrategy.__init__
    pin = level != "off"

    def __init__(self, cluster_resolver=None, communication_options=None):
        options = communication_options if communication_options is not None else collective_util.Options()
        asked = options.implementation.name
        pinned = pin and options.implementation == collective_util.CommunicationImplementation.AUTO
        if pinned:
            options = collective_util.Options(
                bytes_per_pack=options.bytes_per_pack,
                timeout_seconds=options.timeout_seconds,
                implementation=collective_util.CommunicationImplementation.RING,
            )
        original(self, cluster_resolver=cluster_resolver, communication_options=options)
        used = self.extended._communication_options.implementation.name
        _seen.update(
            implementation=used,
            asked=asked,
            pinned_by_launcher=pinned,
            workers_seen_by_strategy=int(self.extended._num_workers),
        )

    cars.CollectiveAllReduceStrategy.__init__ = __init__
    _refuse_keras3_fit(cars.CollectiveAllReduceStrategy)


def _refuse_keras3_fit(strategy_class: type) -> None:
    import functools

    import keras
    import tensorflow as tf

    original = keras.Model.fit

    @functools.wraps(original)
    def fit(self, *args, **kwargs):
        strategy = getattr(self, "_distribute_strategy", None) or tf.distribute.get_strategy()
        if isinstance(strategy, strategy_class):
            raise ConfigError(keras3_fit_refused(tf.__version__))
        return original(self, *args, **kwargs)

    keras.Model.fit = fit


def observed() -> dict:
    """What the job's strategy used: ``{"implementation", "asked", "pinned_by_launcher",
    "workers_seen_by_strategy"}``; empty when the job built none."""
    return dict(_seen)


def wait_for_workers(run_dir: Path, count: int, timeout_s: float = WAIT_FOR_WORKERS_S) -> None:
    """The chief, its task ended: wait until every other worker wrote how it ended (its
    ``result.json`` or ``error.json``), at most ``timeout_s`` seconds (the launcher decides
    about a worker that never does)."""
    paths = layout.RunPaths(run_dir)
    deadline = time.monotonic() + timeout_s
    waiting = list(range(1, count))
    while waiting and time.monotonic() < deadline:
        waiting = [i for i in waiting if not (paths.worker(i).result.exists() or paths.worker(i).error.exists())]
        if waiting:
            time.sleep(0.1)
