"""Reproducible TensorFlow training launcher.

The package import is light on purpose: TensorFlow is imported only in the job
process, so ``launch --help``, config composition and ``launch runs`` stay fast.

User code running under ``launch`` (``train=custom`` or ``train=script``) may call
the helpers below; they are re-exported from :mod:`launcher.job.userapi`. ``Checkpointer``
(epoch checkpoints of a custom training loop that ``launch resume`` continues) is imported
when first named: it is the job's, and ``launch --help`` never loads it.
"""

from launcher.job.userapi import output_dir, record_data, record_model, run_dir, seed, trace_callback
from launcher.version import __version__

__all__ = [
    "Checkpointer",
    "__version__",
    "output_dir",
    "record_data",
    "record_model",
    "run_dir",
    "seed",
    "trace_callback",
]


def __getattr__(name: str):
    if name == "Checkpointer":
        from launcher.job.userapi import Checkpointer

        return Checkpointer
    raise AttributeError(f"module 'launcher' has no attribute {name!r}")
