"""The comparability key covers what the job ran and read, and only that (real runs).

Anything that differs in what the job ran or read is REFUSED with the field named;
what the job never used does not refuse a sound comparison.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import QUICK, TINY, q, quick_run, run_dir_of

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).parent / "scripts"


def _run(launch, store: Path, script: Path, *args: str, cwd: Path | None = None, env: dict | None = None) -> Path:
    done = launch(
        "train=script",
        f"train.script={q(script)}",
        f"train.args=[{','.join(map(q, args))}]",
        f"store.root={q(store)}",
        cwd=cwd,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return run_dir_of(done)


def _refused_on(done, field: str) -> None:
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.startswith("REFUSED"), done.stdout
    assert any(line.split()[0] == field for line in done.stdout.splitlines()[1:] if line.strip()), done.stdout


@pytest.mark.long(seconds=68)
def test_a_data_file_the_script_opens_itself_is_in_the_key(launch, store, mnist_npz, tmp_path):
    data = tmp_path / "mnist.npz"
    shutil.copy(mnist_npz, data)
    a = _run(launch, store, SCRIPTS / "tape_loop.py", "mnist.npz", cwd=tmp_path)  # relative to the launch directory
    assert json.loads((a / "fingerprint.json").read_text())["data"] == {
        "mnist.npz": hashlib.sha256(data.read_bytes()).hexdigest()
    }
    with np.load(data) as f:
        arrays = dict(f)
    arrays["x_train"][0, 0, 0] += 1
    np.savez(data, **arrays)
    b = _run(launch, store, SCRIPTS / "tape_loop.py", "mnist.npz", cwd=tmp_path)
    _refused_on(launch("compare", a, b), "data.mnist.npz")
    replayed = launch("replay", a, cwd=tmp_path)  # the run kept the file as it read it
    assert replayed.returncode == 0 and "REPRODUCED: " in replayed.stdout, replayed.stdout[-2000:]


def _png(path: Path, image: np.ndarray) -> None:
    from PIL import Image  # Pillow comes with matplotlib, a test extra

    Image.fromarray(image).save(path)


def test_files_read_by_native_code_are_found_by_the_listing(launch, store, mnist_npz, tmp_path):
    # image_dataset_from_directory lists the folders in Python, then TensorFlow's native code
    # opens each PNG inside a tf.data map: the listing is what the launcher sees.
    with np.load(mnist_npz) as f:
        images, labels = f["x_train"][:120], f["y_train"][:120]
    for i, (image, label) in enumerate(zip(images, labels, strict=True)):
        (tmp_path / "imgs" / str(label)).mkdir(parents=True, exist_ok=True)
        _png(tmp_path / "imgs" / str(label) / f"{i:03d}.png", image)
    a = _run(launch, store, SCRIPTS / "image_dir.py", "imgs", cwd=tmp_path)
    b = _run(launch, store, SCRIPTS / "image_dir.py", "imgs", cwd=tmp_path)
    data = json.loads((a / "fingerprint.json").read_text())["data"]
    assert len(data) == 120 and all(name.startswith("imgs/") for name in data), sorted(data)[:5]
    result = json.loads((a / "result.json").read_text())  # a Sequential without an Input, built by fit:
    assert result["observed"]["models"] == ["sequential"]  # its weights once, not again as its inner model's
    trace = [json.loads(line) for line in (a / "trace.jsonl").read_text().splitlines()]
    assert trace[-1]["weights"] == result["weights_sha256"]
    assert launch("compare", a, b).returncode == 0
    changed = sorted((tmp_path / "imgs" / str(labels[0])).iterdir())[0]
    _png(changed, 255 - images[int(changed.stem)])
    c = _run(launch, store, SCRIPTS / "image_dir.py", "imgs", cwd=tmp_path)
    _refused_on(launch("compare", a, c), f"data.imgs/{labels[0]}/{changed.name}")


@pytest.fixture(scope="module")
def unkeyed_run(tmp_path_factory) -> dict:
    """A strict MNIST run of ``TINY`` that differs from the shared ``tiny_runs`` only in what is
    recorded and never keyed: made inside an unrelated git checkout (``checkout``), with
    ``TF_CPP_MIN_LOG_LEVEL=0`` and a distribution it never loads on its path (``site``). Each of
    the three tests below asks about one of these (it stands for the three runs they made)."""
    from tests.conftest import NPZ, START_ENV, run_launch

    root = tmp_path_factory.mktemp("unkeyed")
    checkout = root / "checkout"
    checkout.mkdir()
    for argv in (
        ["git", "init", "-q"],
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "x"],
    ):
        subprocess.run(argv, cwd=checkout, check=True)
    # A distribution installed between two runs (here: on the job's path, as pip would put it).
    site = root / "site"
    (site / "unused_pkg-1.0.dist-info").mkdir(parents=True)
    metadata = "Metadata-Version: 2.1\nName: unused-pkg\nVersion: 1.0\n"
    (site / "unused_pkg-1.0.dist-info" / "METADATA").write_text(metadata)
    (site / "unused_pkg").mkdir()
    (site / "unused_pkg" / "__init__.py").write_text("")
    done = run_launch(
        "train=mnist",
        f"train.data={q(NPZ)}",
        f"store.root={q(root / 'run store')}",
        *TINY,
        cwd=checkout,
        base_env=START_ENV,
        env={"TF_CPP_MIN_LOG_LEVEL": "0", "PYTHONPATH": str(site)},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {"run": run_dir_of(done), "checkout": checkout, "site": site}


def test_onednn_isa_is_refused_and_log_verbosity_is_not(launch, store, mnist_npz, tiny_runs, unkeyed_run):
    """Against the shared TINY run (launched without TF_CPP_MIN_LOG_LEVEL: its job ran with the
    launcher's default 2), the same run with TF_CPP_MIN_LOG_LEVEL=0 is IDENTICAL, and one with
    ONEDNN_MAX_CPU_ISA=AVX2 is REFUSED naming it."""
    quiet = tiny_runs[0]["run"]  # strict (onednn_opts=true), no ONEDNN_MAX_CPU_ISA, quiet by default (shared)
    chatty = unkeyed_run["run"]  # TF_CPP_MIN_LOG_LEVEL=0 (and only other unkeyed differences)
    avx2 = quick_run(
        launch,
        store,
        mnist_npz,
        "determinism.onednn_opts=true",
        *TINY[len(QUICK) :],
        env={"ONEDNN_MAX_CPU_ISA": "AVX2"},
    )
    levels = [
        json.loads((r / "fingerprint.json").read_text())["environment"]["TF_CPP_MIN_LOG_LEVEL"] for r in (quiet, chatty)
    ]
    assert levels[1] == "0" != levels[0], levels  # recorded as each job ran
    done = launch("compare", quiet, chatty)
    assert done.returncode == 0, done.stdout
    _refused_on(launch("compare", quiet, run_dir_of(avx2)), "environment.ONEDNN_MAX_CPU_ISA")


def test_a_package_the_job_never_loads_does_not_refuse(launch, tiny_runs, unkeyed_run):
    """A distribution installed between two runs (on the job's path, as pip would put it) that
    the job never imports: listed in the run's packages, not in its distributions, and the runs
    compare IDENTICAL."""
    a = tiny_runs[0]["run"]  # shared: the same run without it
    b = unkeyed_run["run"]  # unused_pkg on its PYTHONPATH
    fa, fb = (json.loads((r / "fingerprint.json").read_text())["software"] for r in (a, b))
    assert "unused-pkg==1.0" in fb["packages"] and "unused-pkg==1.0" not in fa["packages"]
    assert "keras" in fa["distributions"] and "unused-pkg" not in fb["distributions"]
    done = launch("compare", a, b)
    assert done.returncode == 0, done.stdout


def test_mnist_replays_from_inside_an_unrelated_git_checkout(launch, unkeyed_run):
    """The launch directory's git commit is recorded, not keyed: a run made inside a checkout
    replays from there as REPRODUCED, though the replay (run from its snapshot) has none."""
    run, checkout = unkeyed_run["run"], unkeyed_run["checkout"]
    assert json.loads((run / "fingerprint.json").read_text())["code"]["git_commit"]  # recorded
    done = launch("replay", run, cwd=checkout, env={"PYTHONPATH": str(unkeyed_run["site"])})  # as it was launched
    assert done.returncode == 0, done.stdout + done.stderr
    (verdict,) = [line for line in done.stdout.splitlines() if line.startswith("REPRODUCED: replay ")]
    replay = Path(verdict.removeprefix("REPRODUCED: replay ").split(" of ")[0])
    assert json.loads((replay / "fingerprint.json").read_text())["code"]["git_commit"] is None  # and not keyed
