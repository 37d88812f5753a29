"""``launch replay --rebuild`` from another venv whose launcher is installed there (issue 40, item 4).

One run is recorded here, with this environment's ``packaging`` and ``numpy``. Each case
replays it from a second venv (``--system-site-packages``) holding a pip-installed copy of
the launcher and an older version of one of them: ``packaging``, which the launcher itself
and TensorFlow's start-up import, or ``numpy``. The job's ``PYTHONPATH`` then starts with
that venv's site-packages (the launcher's directory): the plain replay is refused naming the
distribution, and ``--rebuild`` must replay REPRODUCED, the overlay's copy winning over it.
Needs the index (wheels of the older and the recorded versions); skipped without it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from launcher.run import rebuild

pytestmark = pytest.mark.slow

SCRIPT = """import sys
import numpy as np
import packaging.version  # the job imports it too: its version is in the key
import tensorflow as tf

with np.load(sys.argv[1]) as f:
    x = f["x_train"][:200].reshape(-1, 784).astype("float32") / 255.0
    y = f["y_train"][:200].astype("int64")
model = tf.keras.Sequential([tf.keras.Input((784,)), tf.keras.layers.Dense(10)])
model.compile(tf.keras.optimizers.SGD(0.1), tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x, y, batch_size=100, epochs=1, verbose=0)
print("numpy", np.__version__, "packaging", packaging.version.Version(np.__version__))
"""

NPZ = Path(__file__).parents[1] / "data" / "mnist-small" / "mnist-small.npz"  # conftest's mnist_npz, module-wide
OLDER = {"packaging": "26.3", "numpy": "2.4.5"}  # each other than this environment's (checked below)


def _launch(python: Path, project: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(python), "-m", "launcher", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(the recorded run, its project directory, a copy of the launcher the run and every replay use).

    The launcher is copied once, so that the run and the venvs' installed copies hold the same code
    (its files are in the key) even while the source tree changes.
    """
    root = tmp_path_factory.mktemp("rebuild-changed")
    code = root / "launcher-code"
    shutil.copytree(
        Path(rebuild.LAUNCHER_ROOT) / "launcher", code / "launcher", ignore=shutil.ignore_patterns("__pycache__")
    )
    project = root / "project"
    project.mkdir()
    (project / "train.py").write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(code), "XDG_CACHE_HOME": str(root / "cache")}
    done = _launch(
        Path(sys.executable),
        project,
        env,
        "train=script",
        "train.script=train.py",
        f"train.args=[{NPZ}]",
        "store.root=runs",
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    run = project / done.stdout.strip().splitlines()[-1].split()[2]
    used = json.loads((run / "fingerprint.json").read_text())["software"]["distributions"]
    for name in OLDER:
        assert used[name]["version"] == metadata.version(name) != OLDER[name]
    return run, project, code


def _venv_with(root: Path, code: Path, name: str, version: str) -> Path:
    """A venv sharing this one's site-packages, the launcher installed in its own (as ``pip install``
    puts it: the package and its metadata), and ``name==version`` installed there from the index."""
    venv = root / f"with {name} {version}"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            f"{name}=={version}",
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"{name}=={version} cannot be installed (is the index reachable?): {done.stderr[-300:]}")
    site = rebuild.overlay_site(venv)
    shutil.copytree(code / "launcher", site / "launcher")
    info = site / f"tf_repro_launcher-{metadata.version(rebuild.LAUNCHER_DISTRIBUTION)}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {rebuild.LAUNCHER_DISTRIBUTION}\n"
        f"Version: {metadata.version(rebuild.LAUNCHER_DISTRIBUTION)}\n"
    )
    code = f"import json, launcher, {name}; print(json.dumps([{name}.__version__, launcher.__file__]))"
    seen = subprocess.run(
        [str(python), "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert json.loads(seen.stdout) == [version, str(site / "launcher" / "__init__.py")]
    return python


@pytest.mark.parametrize("name", ["packaging", "numpy"])
def test_a_changed_distribution_is_refused_and_replays_rebuilt_from_a_venv_with_the_launcher_installed(
    recorded, name, tmp_path
):
    run, project, code = recorded
    python = _venv_with(tmp_path, code, name, OLDER[name])
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("PYTHONPATH", None)  # the launcher as the venv has it installed

    refused = _launch(python, project, env, "replay", str(run))
    assert refused.returncode == 3, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert f"software.distributions.{name}" in refused.stdout and "--rebuild" in refused.stdout

    rebuilt = _launch(python, project, env, "replay", str(run), "--rebuild")
    assert rebuilt.returncode == 0, rebuilt.stdout[-3000:] + rebuilt.stderr[-2000:]
    assert "REPRODUCED: " in rebuilt.stdout
    assert f"{name}=={metadata.version(name)} over this Python's site-packages" in rebuilt.stderr
    replay = Path(rebuilt.stdout.split("REPRODUCED: replay ")[1].split(" of ")[0])
    fp = json.loads((replay / "fingerprint.json").read_text())
    assert fp["software"]["distributions"][name]["version"] == metadata.version(name)
