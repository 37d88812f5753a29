"""The subcommands of ``launch``: thin argument parsing over the modules that do the work."""

from __future__ import annotations

from launcher import sweep  # noqa: E402,F401
