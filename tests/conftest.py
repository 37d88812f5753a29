"""Shared fixtures: the committed MNIST subset, a store, and the real `launch` command."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).parent.parent


@pytest.fixture
def mnist_npz() -> Path:
    """600 train / 200 test real MNIST images in Keras' mnist.npz layout."""
    return DATA / "mnist-small.npz"


@pytest.fixture
def mnist_idx_dir() -> Path:
    return DATA / "mnist-idx"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A run store whose path has a space, as users' paths do."""
    path = tmp_path / "run store"
    path.mkdir()
    return path


@pytest.fixture
def weird_dir(tmp_path: Path) -> Path:
    """A directory whose name has spaces, quotes and a dollar sign (pass it through ``q``)."""
    path = tmp_path / "we'ird \"dir\" $HOME"
    path.mkdir()
    return path


def is_run(path: Path) -> bool:
    """A run directory of a store (not its objects/, sweeps/ or audits/)."""
    import re

    return path.is_dir() and re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", path.name) is not None


def q(value: object) -> str:
    """Quote a value for a Hydra override (paths with quotes need it; spaces do not)."""
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def run_launch(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 600):
    """Run the real `launch` command (as `python -m launcher`) and capture its output.

    It runs outside any git checkout unless ``cwd`` says otherwise, so the code
    fingerprint does not follow edits to the project's own tree during a test.
    """
    full_env = {**os.environ, **(env or {})}
    # The tree under test, not whatever copy of the launcher is installed (a worktree, a checkout).
    paths = [str(REPO), *filter(None, full_env.get("PYTHONPATH", "").split(os.pathsep))]
    full_env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return subprocess.run(
        [sys.executable, "-m", "launcher", *map(str, args)],
        cwd=cwd or tempfile.gettempdir(),
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def launch():
    return run_launch


QUICK = ("train.epochs=1", "train.batch_size=100")


def run_dir_of(done) -> Path:
    """The run directory a `launch` printed in its last line: ``[launch] run DIR complete; ...``."""
    line = done.stdout.strip().splitlines()[-1]
    assert line.startswith("[launch] run ") and " complete; " in line, done.stdout[-2000:] + done.stderr[-2000:]
    return Path(line.removeprefix("[launch] run ").split(" complete; ")[0])


def quick_run(launch, store: Path, npz: Path, *overrides: str, env: dict | None = None, cwd: Path | None = None):
    """A real one-epoch strict MNIST run on the small subset; asserts it completed."""
    done = launch("train=mnist", f"train.data={npz}", f"store.root={store}", *QUICK, *overrides, env=env, cwd=cwd)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done
