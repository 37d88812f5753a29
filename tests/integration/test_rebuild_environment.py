"""Distributions by content across environments, and a run's environment rebuilt (real venvs, real pip).

The same wheel installed into two venvs at other paths has one identity (files_sha256),
though their RECORDs differ (console scripts name each venv's Python; the installer's
markers); ``rebuild.python_environment`` builds an overlay holding a recorded version of a
distribution installed here at another one, and TensorFlow still imports in it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import time
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from launcher.record.probe import distributions, probes
from launcher.run import rebuild

pytestmark = pytest.mark.slow

IDENTITY = (
    "import json, sys; sys.path.insert(0, sys.argv[1]); from launcher.record.probe import distributions; "
    "print(json.dumps(distributions.distribution_identity(sys.argv[2])))"
)


def _wheel(directory: Path, source: str = "def main():\n    print('tiny')\n") -> Path:
    """A pure-Python wheel ``tinypkg 1.0`` with a console script, written by hand (no build tools)."""
    files = {
        "tinypkg/__init__.py": source.encode(),
        "tinypkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
        "tinypkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        "tinypkg-1.0.dist-info/entry_points.txt": b"[console_scripts]\ntiny = tinypkg:main\n",
    }

    def digest(data: bytes) -> str:
        return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    record = "".join(f"{path},{digest(data)},{len(data)}\n" for path, data in files.items())
    files["tinypkg-1.0.dist-info/RECORD"] = (record + "tinypkg-1.0.dist-info/RECORD,,\n").encode()
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / "tinypkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
    return wheel


def _venv(path: Path, *install: str) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--isolated",
            "--python",
            str(python),
            "install",
            "--no-index",
            "--no-deps",
            "--disable-pip-version-check",
            "-q",
            *install,
        ],
        check=True,
    )
    return python


def _identity(python: Path, name: str) -> dict:
    done = subprocess.run(
        [str(python), "-c", IDENTITY, rebuild.LAUNCHER_ROOT, name], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def test_the_same_wheel_in_venvs_at_other_paths_has_one_identity(tmp_path):
    wheel = _wheel(tmp_path / "wheels")
    one = _venv(tmp_path / "a b" / "env one", str(wheel))  # by path: direct_url.json names it
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / wheel.name).write_bytes(wheel.read_bytes())
    two = _venv(tmp_path / "other" / "env-2", "--no-compile", "--find-links", str(elsewhere), "tinypkg==1.0")  # by name
    changed = _venv(tmp_path / "changed", str(_wheel(tmp_path / "changed-wheel", "def main():\n    print(2)\n")))
    for python in (one, two):  # the console script names its venv's Python
        assert str(python.parent.parent) in (python.parent / "tiny").read_text()
    a, b, c = _identity(one, "tinypkg"), _identity(two, "tinypkg"), _identity(changed, "tinypkg")
    assert a["version"] == b["version"] == "1.0"
    assert a["files_sha256"] == b["files_sha256"] != c["files_sha256"]
    assert a["record_sha256"] != b["record_sha256"]  # what the key held before: the same wheels refused
    with zipfile.ZipFile(wheel) as z:  # and the wheel's own RECORD says it, before any install
        record = z.read("tinypkg-1.0.dist-info/RECORD").decode()
    assert distributions.files_sha256(distributions.parse_record(record)) == a["files_sha256"]


@pytest.fixture
def other_termcolor(tmp_path) -> tuple[str, dict]:
    """A version of termcolor other than this environment's, and its identity from its wheel (from the index)."""
    here = metadata.version("termcolor")
    version = "3.2.0" if here != "3.2.0" else "3.1.0"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "-d",
            str(tmp_path / "w"),
            f"termcolor=={version}",
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"termcolor=={version} cannot be downloaded (is the index reachable?): {done.stderr[-300:]}")
    (wheel,) = (tmp_path / "w").glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        record = z.read(f"termcolor-{version}.dist-info/RECORD").decode()
    return version, {"version": version, "files_sha256": distributions.files_sha256(distributions.parse_record(record))}


def test_a_rebuilt_environment_has_the_recorded_version_and_shares_tensorflow(tmp_path, other_termcolor):
    version, identity = other_termcolor
    here = metadata.version("termcolor")
    software = probes.software()
    software["packages"] = [f"termcolor=={version}" if p.startswith("termcolor==") else p for p in software["packages"]]
    tf_name = "tensorflow-cpu" if "tensorflow-cpu" in rebuild.here_versions() else "tensorflow"
    software["distributions"] = {
        "termcolor": identity,
        tf_name: distributions.distribution_identity(tf_name),
        "numpy": distributions.distribution_identity("numpy"),
    }
    fp = {"schema": 2, "software": software}

    started = time.monotonic()
    python = rebuild.python_environment(fp, cache_root=tmp_path / "envs")
    built = time.monotonic() - started
    started = time.monotonic()
    assert rebuild.python_environment(fp, cache_root=tmp_path / "envs") == python
    cached = time.monotonic() - started
    print(
        f"\nrebuild: built in {built:.1f} s (termcolor=={version} over this Python's site-packages), "
        f"found in the cache and verified in {cached:.1f} s"
    )

    env = {**os.environ, "PYTHONPATH": rebuild.LAUNCHER_ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"}
    code = (
        "import json, termcolor, importlib.metadata as m, tensorflow as tf, launcher; "
        "print(json.dumps([m.version('termcolor'), termcolor.__file__, tf.__version__, launcher.__file__]))"
    )
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen_version, termcolor_file, tf_version, launcher_file = json.loads(done.stdout.splitlines()[-1])
    assert seen_version == version and Path(termcolor_file).is_relative_to(python.parent.parent)
    assert tf_version.split("+")[0] == software["tensorflow"].split("+")[0]
    assert Path(launcher_file).parent == Path(rebuild.LAUNCHER_ROOT) / "launcher"

    probed = rebuild.probe(python, list(software["distributions"]))  # what precheck(probed=...) compares
    assert rebuild.mismatches(software["distributions"], probed["distributions"]) == []
    assert probed["software"]["python"] == software["python"]
    assert metadata.version("termcolor") == here  # this environment is untouched


TERMCOLOR_SCRIPT = """import sys
import numpy as np
import tensorflow as tf
import termcolor  # a distribution the job imports: its version is in the key

with np.load(sys.argv[1]) as f:
    x = f["x_train"].reshape(-1, 784).astype("float32") / 255.0
    y = f["y_train"].astype("int64")
model = tf.keras.Sequential([tf.keras.Input((784,)), tf.keras.layers.Dense(10)])
model.compile(tf.keras.optimizers.SGD(0.1), tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x, y, batch_size=100, epochs=1, verbose=0)
print(termcolor.colored("trained", "green"))
"""


def test_a_run_from_another_environment_is_refused_here_and_replays_rebuilt(tmp_path, other_termcolor, mnist_npz):
    """Done when (issue 25): in another venv, another version of a distribution the job imports
    refuses the replay, naming it; ``--rebuild`` then replays it as REPRODUCED."""
    version, _ = other_termcolor
    venv = tmp_path / "their venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            "--disable-pip-version-check",
            "--find-links",
            str(tmp_path / "w"),
            "--no-index",
            f"termcolor=={version}",
        ],
        check=True,
    )
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(TERMCOLOR_SCRIPT)
    env = {**os.environ, "PYTHONPATH": rebuild.LAUNCHER_ROOT, "XDG_CACHE_HOME": str(tmp_path / "cache")}

    def launch(python, *args):
        return subprocess.run(
            [str(python), "-m", "launcher", *args],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            stdin=subprocess.DEVNULL,
        )

    done = launch(
        venv / "bin" / "python", "train=script", "train.script=train.py", f"train.args=[{mnist_npz}]", "store.root=runs"
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    run = project / done.stdout.strip().splitlines()[-1].split()[2]
    assert (
        json.loads((run / "fingerprint.json").read_text())["software"]["distributions"]["termcolor"]["version"]
        == version
    )

    refused = launch(sys.executable, "replay", str(run))
    assert refused.returncode == 3, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert "software.distributions.termcolor" in refused.stdout and "--rebuild" in refused.stdout

    rebuilt = launch(sys.executable, "replay", str(run), "--rebuild")
    assert rebuilt.returncode == 0, rebuilt.stdout[-3000:] + rebuilt.stderr[-2000:]
    assert "REPRODUCED: " in rebuilt.stdout
