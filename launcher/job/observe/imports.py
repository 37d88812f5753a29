"""Which packages the job imported itself, as opposed to those imported for it.

``import tensorflow, keras`` imports pandas, scipy, matplotlib, scikit-learn, pyarrow
and PIL when they are installed: Keras probes for them. Were every imported
distribution keyed, installing the launcher's extras (or anything Keras probes) would
refuse every earlier run though no bit changed. So the job process records, from the
start, the top-level packages that the job's own code or the launcher imports (every
``import`` statement goes through ``builtins.__import__``, a package already imported
by someone else included; ``importlib.import_module`` too), and for every other import
the file of library code that asked (``importers``): the import chain. ``launcher.record.probe.usage``
then keys those distributions, and along the chain what a keyed one imports and requires
(``Requires-Dist``, not extras), and records the rest, imported only by a library's optional
probe or by what that probe pulled in (Keras imports IPython, IPython imports pygments), for
reading (``launcher.record.probe.distributions.keyed_distributions``).
"""

from __future__ import annotations

import builtins
import importlib
import sys

from launcher.job.observe import callers

direct: set[str] = set()  # top-level names the job's code or the launcher imported
importers: dict[str, set[str]] = {}  # top-level name -> the files of other code that imported it
_installed = False


def install() -> None:
    """Start recording (once per process), before TensorFlow or any of the job's code."""
    global _installed
    if _installed:
        return
    _installed = True
    kind = callers.code_kind(callers.roots())

    def ours(filename: str) -> bool:
        return kind(filename) in ("user", "launcher")

    original_import = builtins.__import__
    original_import_module = importlib.import_module

    def importer() -> str:
        # The frame that asked. A C extension's own imports (PyImport_Import) have no Python
        # frame of their own: the nearest is then this module's, which must not count as ours.
        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename in (__file__, "<frozen importlib._bootstrap>"):
            frame = frame.f_back
        return frame.f_code.co_filename if frame is not None else "<frozen>"

    def note(top: str) -> None:
        by = importer()
        if ours(by):
            direct.add(top)
        else:
            importers.setdefault(top, set()).add(by)

    def tracked_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and name:  # a relative import is a package's of itself
            note(name.partition(".")[0])
        return original_import(name, globals, locals, fromlist, level)

    def tracked_import_module(name, package=None):
        if not name.startswith("."):
            note(name.partition(".")[0])
        return original_import_module(name, package)

    builtins.__import__ = tracked_import
    importlib.import_module = tracked_import_module
