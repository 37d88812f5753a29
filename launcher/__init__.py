"""Reproducible TensorFlow training launcher.

The package import is light on purpose: TensorFlow is imported only in the job
process, so ``launch --help``, config composition and ``launch runs`` stay fast.

User code running under ``launch`` (``train=custom`` or ``train=script``) may call
the helpers below; they are re-exported from :mod:`launcher.job.userapi`.
"""

from launcher.job.userapi import output_dir, record_data, record_model, run_dir, seed, trace_callback
from launcher.version import __version__

__all__ = ["__version__", "output_dir", "record_data", "record_model", "run_dir", "seed", "trace_callback"]
