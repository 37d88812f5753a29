"""Shared fixtures: the committed MNIST subset, a store, and the real `launch` command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# A shell starts a background command (`pytest ... &`) with SIGINT ignored, and every launch would
# inherit that: the Ctrl-C tests would then measure the shell, not the launcher.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

pytest_plugins = ["tests.cpu_time"]  # --cpu-time=N: where the suite's CPU goes (docs/testing.md)

DATA = Path(__file__).parent / "data"
NPZ = DATA / "mnist-small" / "mnist-small.npz"  # alone in its directory: tests/data/README.md says why
REPO = Path(__file__).parent.parent


def pytest_configure(config) -> None:
    """Compile the launcher's source once, before any launch. Where ``PYTHONDONTWRITEBYTECODE=1`` is
    set (these machines set it), an editable install's source tree never gets its bytecode, and every
    launch, job process and ``launch compare`` compiled the launcher's modules again: about 0.5
    CPU-seconds a launch, measured. Python reads bytecode whatever that variable says."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        import compileall

        compileall.compile_dir(REPO / "launcher", quiet=2)


@pytest.fixture(autouse=True)
def launch_notes() -> None:
    """The ``launch`` logger as the command line sets it up (``console.setup``: notes and warnings on
    the stderr of the moment): a test that calls the launcher's functions directly sees its notes
    where ``launch`` shows them, and a ``-q`` or ``-v`` an earlier test gave is not left behind."""
    from launcher import console

    console.setup()


@pytest.fixture
def mnist_npz() -> Path:
    """600 train / 200 test real MNIST images in Keras' mnist.npz layout."""
    return NPZ


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
    path = tmp_path / 'we\'ird "dir" $HOME'
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


# A developer's own LAUNCH_STORE (docs/store.md) is never the tests' store: a test names its own.
os.environ.pop("LAUNCH_STORE", None)
# The environment this test process started with: shared runs are made in it, whichever test and
# worker comes first, and each test starts in it (below).
START_ENV = dict(os.environ)


@pytest.fixture(autouse=True)
def _start_environment():
    """Each test, and so each launch, starts in ``START_ENV``: importing scikit-learn (TensorFlow
    imports it when installed) sets ``KMP_DUPLICATE_LIB_OK`` and ``KMP_INIT_AT_FORK`` in this
    process, at collection or in a test, and the key holds a launch's environment, so a launch
    after it would not be comparable with a shared run made before it. (pytest's own
    ``PYTEST_*`` variables are left alone.)"""

    def reset() -> None:
        for name in set(os.environ) - set(START_ENV):
            if not name.startswith("PYTEST_"):
                del os.environ[name]
        os.environ.update({k: v for k, v in START_ENV.items() if not k.startswith("PYTEST_")})

    reset()
    yield
    reset()


def run_launch(
    *args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 600, base_env: dict | None = None
):
    """Run the real `launch` command (as `python -m launcher`) and capture its output.

    It runs in an empty directory of its own, outside any git checkout, unless ``cwd`` says
    otherwise, so the code fingerprint does not follow edits to the project's own tree. Its
    environment is this process's (or ``base_env``) updated with ``env``.
    """
    full_env = {**(os.environ if base_env is None else base_env), **(env or {})}
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
TINY = (*QUICK, "train.max_samples=300")  # 3 steps of 100 images


def verdict_of(stdout: str) -> str:
    """A ``launch replay``'s output from its verdict on: without the first line, who sealed the stored run."""
    first, _, rest = stdout.partition("\n")
    return rest if first.startswith("the stored run ") else stdout


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


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups marked here
def pytest_collection_modifyitems(config, items) -> None:
    """Tests of a module with a module-scoped fixture (a Docker image, an MLflow server, a
    tmpfs store) run on one xdist worker, so the fixture is made once (``--dist loadgroup``).
    Tests marked ``long(seconds=N)`` (N measured on 2 cores) come first, longest first: started
    last, one would keep a worker busy while the other has nothing left to do."""
    items.sort(key=lambda item: -(getattr(item.get_closest_marker("long"), "kwargs", {}).get("seconds", 0)))
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

    done = root / f"{name}.json"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():  # a build that failed left its directory; the next caller starts afresh
            directory = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
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
        db = sqlite3.connect(index)
        try:  # closed at once: an open connection keeps a WAL beside the index, and the file busy
            with db:
                db.execute("UPDATE runs SET path = replace(path, ?, ?)", (str(source.resolve()), str(target.resolve())))
        finally:
            db.close()
    return target


# ---------------------------------------------------------------- trained runs shared by tests
# Each is trained once per test session (``build_once``: the first test to ask, on any worker,
# trains it; the others wait for it). Its runs are sealed, so read-only: a test that writes into
# a run, or adds one to its store (a replay, a resume), works on ``copy_store(...)`` of it.
SCRIPTS = Path(__file__).parent / "integration" / "scripts"


def _trained(directory: Path, *args: str, cwd: Path | None = None) -> dict:
    """One real run of ``args`` into the store ``directory/store``: its run directory and output."""
    store = directory / "store"
    done = run_launch(*args, f"store.root={q(store)}", cwd=cwd, base_env=START_ENV)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {"store": str(store), "run": str(run_dir_of(done)), "stdout": done.stdout}


def _twins(directory: Path, *args: str, cwd: Path | None = None) -> list[dict]:
    """The same run twice, one after the other, each alone in its store (``directory/a``, ``/b``)."""
    out = []
    for name in ("a", "b"):
        (directory / name).mkdir()
        out.append(_trained(directory / name, *args, cwd=cwd))
    return out


def _paths(built: dict) -> dict:
    return {k: Path(v) if k in ("store", "run") else v for k, v in built.items()}


@pytest.fixture(scope="session")
def tiny_runs(shared_root) -> list[dict]:
    """Two strict MNIST runs of the defaults (seed 0) on 300 images, one epoch of 3 steps, each
    alone in its store: ``[{"store", "run", "stdout"}, ...]``; they are IDENTICAL."""
    built = build_once(shared_root, "tiny", lambda d: {"runs": _twins(d, "train=mnist", f"train.data={q(NPZ)}", *TINY)})
    return [_paths(r) for r in built["runs"]]


@pytest.fixture(scope="session")
def untraced_runs(shared_root) -> list[dict]:
    """Two strict MNIST runs on 600 images (``QUICK``) with ``determinism.trace_every=0``: no trace."""
    built = build_once(
        shared_root,
        "untraced",
        lambda d: {"runs": _twins(d, "train=mnist", f"train.data={q(NPZ)}", *QUICK, "determinism.trace_every=0")},
    )
    return [_paths(r) for r in built["runs"]]


THREE_EPOCHS = ("train=mnist", "determinism=strict", "train.epochs=3", "train.batch_size=50")


@pytest.fixture(scope="session")
def three_epoch_run(shared_root) -> dict:
    """An uninterrupted strict MNIST run of 3 epochs of 12 steps (``THREE_EPOCHS``): what a killed
    and resumed run must equal; ``{"store", "run", "stdout", "result", "metrics", "trace", "checkpoints"}``."""

    def build(directory: Path) -> dict:
        built = _trained(directory, *THREE_EPOCHS, f"train.data={NPZ}")
        run = Path(built["run"])
        return {
            **built,
            "result": json.loads((run / "result.json").read_text()),
            "metrics": (run / "metrics.jsonl").read_text(),
            "trace": (run / "trace.jsonl").read_text(),
            "checkpoints": sorted(p.name for p in (run / "checkpoints").iterdir()),
        }

    return _paths(build_once(shared_root, "three-epochs", build))


@pytest.fixture(scope="session")
def keras_fit_runs(shared_root) -> list[dict]:
    """``scripts/keras_fit.py`` (a Keras fit of 2 epochs inside a function) on the MNIST subset,
    unmodified, twice, each alone in its store; they are IDENTICAL."""
    built = build_once(
        shared_root,
        "keras-fit",
        lambda d: {
            "runs": _twins(d, "train=script", f"train.script={q(SCRIPTS / 'keras_fit.py')}", f"train.args=[{q(NPZ)}]")
        },
    )
    return [_paths(r) for r in built["runs"]]
