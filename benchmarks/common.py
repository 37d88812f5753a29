"""Shared by the benchmarks: run a whole command, or the real ``launch``, and time it.

Runs start in the temporary directory (not this checkout), so a run's code
fingerprint does not follow edits to the project while a benchmark runs. A failed
command prints its tail and ends the benchmark with exit status 1, never a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _compile_launcher() -> None:
    """The launcher's bytecode, as a pip install leaves it. Under ``PYTHONDONTWRITEBYTECODE=1`` a
    source tree never gets it, and every launch would pay for compiling the launcher again (about
    0.5 CPU-s per process), which no installed launcher does."""
    import compileall

    compileall.compile_dir(REPO / "launcher", quiet=2)


_compile_launcher()


def tree_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: ours) with this checkout first on PYTHONPATH: a benchmark measures the
    tree it is in, not whatever copy of the launcher is installed."""
    out = dict(os.environ if env is None else env)
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), out.get("PYTHONPATH")]))
    return out


def timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    """Wall seconds of one whole command, and its stdout."""
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=tree_env(env), cwd=tempfile.gettempdir())
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(argv)}\n{(done.stdout + done.stderr)[-3000:]}")
    return time.perf_counter() - start, done.stdout


def launch(store: Path, *overrides: str) -> tuple[float, dict]:
    """One real ``launch OVERRIDES`` into ``store``: its wall seconds and the run's result.json."""
    before = _runs(store)
    wall, _ = timed([sys.executable, "-m", "launcher", *overrides, f"store.root={store}"])
    (run,) = _runs(store) - before
    return wall, json.loads((run / "result.json").read_text())


def _runs(store: Path) -> set[Path]:
    if not store.exists():
        return set()
    return {p for p in store.iterdir() if p.is_dir() and p.name not in ("sweeps", "audits", "objects")}
