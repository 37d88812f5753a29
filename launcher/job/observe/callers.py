"""Who is calling: the job's own code, a library, the interpreter, or the launcher, told from a
running frame's file name. Every observer asks it before it notes a read, a seed or a variable.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

from launcher.record.probe.places import Roots, classify, roots

__all__ = ["code_kind", "roots"]


def code_kind(roots_: Roots) -> Callable[[str], str]:
    """``classify`` for the file names of running code (``frame.f_code.co_filename``),
    remembered: ``frozen`` for the interpreter's own (``<frozen ...>``) and for code a
    library generates (``<string>``: dataclasses, namedtuples)."""

    @functools.lru_cache(maxsize=4096)
    def kind(filename: str) -> str:
        return "frozen" if filename.startswith("<") else classify(os.path.abspath(filename), roots_)

    return kind
