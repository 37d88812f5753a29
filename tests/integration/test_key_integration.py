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

from tests.conftest import q, quick_run, run_dir_of

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


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The helper-importing script and its helper, copied outside any git checkout."""
    target = tmp_path / "project"
    target.mkdir()
    for name in ("with_helper.py", "helper.py"):
        shutil.copy(SCRIPTS / name, target / name)
    return target


@pytest.mark.long(seconds=71)
def test_a_changed_helper_module_is_refused_and_an_unchanged_one_is_identical(launch, store, mnist_npz, project):
    a = _run(launch, store, project / "with_helper.py", str(mnist_npz))
    b = _run(launch, store, project / "with_helper.py", str(mnist_npz))
    modules = json.loads((a / "fingerprint.json").read_text())["code"]["modules"]
    assert set(modules) == {"helper"}, modules
    assert launch("compare", a, b).returncode == 0
    helper = project / "helper.py"
    helper.write_text(helper.read_text().replace("0.1", "0.05"))
    c = _run(launch, store, project / "with_helper.py", str(mnist_npz))
    _refused_on(launch("compare", a, c), "code.modules.helper")
    replayed = launch("replay", a)  # from the run's own snapshot: the helper as it was
    assert replayed.returncode == 0 and "REPRODUCED: " in replayed.stdout, replayed.stdout[-2000:]


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


def test_onednn_isa_is_refused_and_log_verbosity_is_not(launch, store, mnist_npz, tiny_runs):
    quiet = quick_run(launch, store, mnist_npz, env={"TF_CPP_MIN_LOG_LEVEL": "2"})
    chatty = quick_run(launch, store, mnist_npz, env={"TF_CPP_MIN_LOG_LEVEL": "0"})
    avx2 = quick_run(
        launch,
        store,
        mnist_npz,
        "determinism.onednn_opts=true",
        "train.max_samples=300",
        env={"ONEDNN_MAX_CPU_ISA": "AVX2"},
    )
    runs = [run_dir_of(d) for d in (quiet, chatty, avx2)]
    runs.append(tiny_runs[0]["run"])  # the same without ONEDNN_MAX_CPU_ISA (strict: onednn_opts=true; shared)
    done = launch("compare", runs[0], runs[1])
    assert done.returncode == 0, done.stdout
    _refused_on(launch("compare", runs[3], runs[2]), "environment.ONEDNN_MAX_CPU_ISA")


def test_a_package_the_job_never_loads_does_not_refuse(launch, store, mnist_npz, tmp_path, tiny_runs):
    # A distribution installed between two runs (here: on the job's path, as pip would put it).
    site = tmp_path / "site"
    (site / "unused_pkg-1.0.dist-info").mkdir(parents=True)
    metadata = "Metadata-Version: 2.1\nName: unused-pkg\nVersion: 1.0\n"
    (site / "unused_pkg-1.0.dist-info" / "METADATA").write_text(metadata)
    (site / "unused_pkg").mkdir()
    (site / "unused_pkg" / "__init__.py").write_text("")
    a = tiny_runs[0]["run"]  # shared: the same run without it
    b = run_dir_of(quick_run(launch, store, mnist_npz, "train.max_samples=300", env={"PYTHONPATH": str(site)}))
    fa, fb = (json.loads((r / "fingerprint.json").read_text())["software"] for r in (a, b))
    assert "unused-pkg==1.0" in fb["packages"] and "unused-pkg==1.0" not in fa["packages"]
    assert "keras" in fa["distributions"] and "unused-pkg" not in fb["distributions"]
    done = launch("compare", a, b)
    assert done.returncode == 0, done.stdout


def test_mnist_replays_from_inside_an_unrelated_git_checkout(launch, store, mnist_npz, tmp_path):
    """The launch directory's git commit is recorded, not keyed: a run made inside a checkout
    replays from there as REPRODUCED, though the replay (run from its snapshot) has none."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for argv in (
        ["git", "init", "-q"],
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "x"],
    ):
        subprocess.run(argv, cwd=checkout, check=True)
    run = run_dir_of(quick_run(launch, store, mnist_npz, cwd=checkout))
    assert json.loads((run / "fingerprint.json").read_text())["code"]["git_commit"]  # recorded
    done = launch("replay", run, cwd=checkout)
    assert done.returncode == 0, done.stdout + done.stderr
    (verdict,) = [line for line in done.stdout.splitlines() if line.startswith("REPRODUCED: replay ")]
    replay = Path(verdict.removeprefix("REPRODUCED: replay ").split(" of ")[0])
    assert json.loads((replay / "fingerprint.json").read_text())["code"]["git_commit"] is None  # and not keyed
