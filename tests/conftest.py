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


def _own_directory() -> str:
    """An empty working directory for one launch, readable by a container's user as /tmp is."""
    path = tempfile.mkdtemp(prefix="launch-cwd-")
    os.chmod(path, 0o755)
    return path


def run_launch(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 600):
    """Run the real `launch` command (as `python -m launcher`) and capture its output.

    It runs in an empty directory of its own, outside any git checkout, unless ``cwd`` says
    otherwise, so the code fingerprint does not follow edits to the project's own tree.
    """
    full_env = {**os.environ, **(env or {})}
    # The tree under test, not whatever copy of the launcher is installed (a worktree, a checkout).
    paths = [str(REPO), *filter(None, full_env.get("PYTHONPATH", "").split(os.pathsep))]
    full_env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return subprocess.run(
        [sys.executable, "-m", "launcher", *map(str, args)],
        # Its own empty directory: the job watches its working directory's opens (inotify sees any
        # process's), so a shared one such as /tmp would count other tests' files as its reads.
        cwd=cwd or _own_directory(),
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


# ---------------------------------------------------------------- parallel tests, shared runs
def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: one worker per core this process may run on (``taskset -c 0`` gives 1).
    xdist's own count asks psutil for the machine's physical cores, where psutil is installed."""
    return max(1, len(os.sched_getaffinity(0)))


def pytest_collection_modifyitems(config, items) -> None:
    """Tests of a module with a module-scoped fixture (a Docker image, an MLflow server, a
    tmpfs store) run on one xdist worker, so the fixture is made once (``--dist loadgroup``)."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        scopes = {d.scope for defs in (info.name2fixturedefs.values() if info else ()) for d in defs}
        if "module" in scopes or "class" in scopes:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


@pytest.fixture(scope="session")
def shared_root(tmp_path_factory) -> Path:
    """A directory every xdist worker of this test session sees (one session, several processes)."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-runs"
    root.mkdir(exist_ok=True)
    return root


def build_once(root: Path, name: str, build) -> dict:
    """``build(directory) -> dict`` run once per test session across all workers, under a file
    lock; every later caller gets the same dict (JSON), and the directory it filled."""
    import json

    from filelock import FileLock

    directory, done = root / name, root / f"{name}.json"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            directory.mkdir(exist_ok=True)
            done.write_text(json.dumps(build(directory)))
    return json.loads(done.read_text())


def copy_store(source: Path, target: Path) -> Path:
    """A writable copy of a shared store at ``target`` (its runs stay sealed: read-only), its
    index pointing at the copies: for a test that adds runs (a replay) or changes them."""
    import shutil
    import sqlite3

    shutil.copytree(source, target, symlinks=True)
    index = target / "index.sqlite"
    if index.exists():
        index.chmod(0o644)
        with sqlite3.connect(index) as db:
            db.execute("UPDATE runs SET path = replace(path, ?, ?)", (str(source.resolve()), str(target.resolve())))
    return target
