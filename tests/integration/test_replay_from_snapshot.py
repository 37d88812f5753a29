"""Replay from the run alone (issue 25): a run keeps its code and small data, and a replay
needs nothing else: not the directory it ran in, not the script, not the helper as it was.

Each test trains for real (a one-epoch Keras fit on 600 MNIST images) and replays for real.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DATA, REPO, copy_store, is_run, q, run_dir_of, run_launch, verdict_of

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).parent / "scripts"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project: a script, the helper it imports, and data it opens by a relative name."""
    path = tmp_path / "project"
    path.mkdir()
    shutil.copy(SCRIPTS / "with_helper.py", path / "train.py")
    shutil.copy(SCRIPTS / "helper.py", path / "helper.py")
    shutil.copy(DATA / "mnist-small" / "mnist-small.npz", path / "digits.npz")
    return path


@pytest.fixture(scope="module")
def project_run(tmp_path_factory) -> dict:
    """A run of a user's project (``project``'s files), for a test that only replays it:
    ``{"project", "store", "run"}``. The test edits the project afterwards, and adds its replays to
    its own copy of the store (``copy_store``)."""
    root = tmp_path_factory.mktemp("project run")
    path = root / "project"
    path.mkdir()
    shutil.copy(SCRIPTS / "with_helper.py", path / "train.py")
    shutil.copy(SCRIPTS / "helper.py", path / "helper.py")
    shutil.copy(DATA / "mnist-small" / "mnist-small.npz", path / "digits.npz")
    store = root / "store"
    return {"project": path, "store": store, "run": _script_run(run_launch, path, store)}


def _script_run(launch, project: Path, store: Path, *extra: str):
    done = launch(
        "train=script",
        "train.script=train.py",
        "train.args=[digits.npz]",
        f"store.root={q(store)}",
        *extra,
        cwd=project,
    )
    return run_dir_of(done)


def _fp(run: Path) -> dict:
    return json.loads((run / "fingerprint.json").read_text())


def test_replay_after_the_code_was_edited_and_deleted_by_a_launcher_that_differs_outside_the_job(project_run, tmp_path):
    """The project edited, its script and data deleted; replayed from elsewhere by the same launcher
    but for a comment in its CLI, from another path, in another venv: REPRODUCED, from what the run
    kept. A change in a launcher file the job imports is refused by file; without its snapshot the
    run is refused. (One replay for what were two tests: an edited project, another launcher.)"""
    project = project_run["project"]  # where the run ran: edited below (no other test reads it)
    store = copy_store(project_run["store"], tmp_path / "store")  # the replays add runs to it
    run = store / project_run["run"].name
    snap = json.loads((run / "snapshot.json").read_text())
    assert {e["role"] for e in snap["files"].values()} == {"script", "module", "data"}
    assert json.loads((run / "manifest.json").read_text())["files"]["snapshot.json"]  # the seal covers it

    (project / "helper.py").write_text("LEARNING_RATE = 0.5\n")  # the next experiment
    (project / "train.py").unlink()
    (project / "digits.npz").unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = tmp_path / "other launcher"
    shutil.copytree(REPO / "launcher", other / "launcher", ignore=shutil.ignore_patterns("__pycache__"))
    main = other / "launcher" / "cli" / "main.py"
    main.write_text(main.read_text() + "\n# a comment the job never imports\n")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    env = {**os.environ, "PYTHONPATH": str(other)}

    def replay() -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(venv / "bin" / "python"), "-m", "launcher", "replay", str(run)],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )

    done = replay()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert done.stdout.splitlines()[-2].startswith("REPRODUCED: ")
    replayed = Path(done.stdout.splitlines()[-2].split()[2])
    a, b = _fp(run), _fp(replayed)
    assert b["code"]["script_sha256"] == a["code"]["script_sha256"]
    assert b["code"]["modules"] == a["code"]["modules"]  # the same names, paths and hashes
    assert b["data"] == a["data"] == {"digits.npz": a["data"]["digits.npz"]}
    assert b["code"]["launcher_version"] != a["code"]["launcher_version"]
    assert not [p for p in store.iterdir() if p.name.startswith(".replay-")]  # the working copy is gone

    # A change in a launcher file the job imports is a change of the code that ran: refused, by file.
    observe = other / "launcher" / "job" / "training" / "observer.py"
    observe.write_text(observe.read_text() + "\n# a comment in the job's own code\n")
    done = replay()
    assert done.returncode == 3 and "code.launcher.launcher.job.training.observer" in done.stdout, done.stdout[-3000:]

    # Without the snapshot the same replay is refused, naming what changed and what is gone.
    (run / "snapshot.json").chmod(0o644)
    os.rename(run / "snapshot.json", tmp_path / "kept.json")
    done = run_launch("replay", str(run), cwd=elsewhere)
    assert done.returncode == 4 and "snapshot.json is missing" in done.stderr  # the seal says so first


def test_a_sweep_keeps_one_copy_of_its_code_and_an_edit_during_it_changes_no_job(launch, project, tmp_path):
    """Job 000 edits the script (as a user would while it runs); job 001 still runs the script
    as it was when the sweep started, and the store keeps one copy of each file for both."""
    store = tmp_path / "store"
    editor = project / "train.py"
    editor.write_text(
        editor.read_text() + "\nimport os\nif os.environ.get('LAUNCH_SEED') == '0':\n"
        f"    open({str(editor)!r}, 'a').write('# edited while the sweep ran\\n')\n"
    )
    original = editor.read_bytes()
    done = launch(
        "-m",
        "train=script",
        "train.script=train.py",
        "train.args=[digits.npz]",
        f"store.root={q(store)}",
        "+seed=range(2)",
        "hydra/launcher=basic",
        cwd=project,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert editor.read_bytes() != original  # job 000 did edit the user's script
    jobs = [r for r in store.iterdir() if is_run(r) and (r / "manifest.json").exists()]
    assert len(jobs) == 2 and {_fp(r)["code"]["script_sha256"] for r in jobs} == {hashlib.sha256(original).hexdigest()}
    objects = [p for p in (store / "objects").rglob("*") if p.is_file()]
    assert len(objects) == 3  # the script, the helper and the data: once, for both jobs


def test_the_installed_launcher_runs_beside_a_decoy_and_data_too_large_to_keep_is_found_by_hash_or_refused(
    launch, project, tmp_path
):
    """Launched from a directory holding a ``launcher/`` package (a checkout), the job still
    imports the launcher the command runs (safe paths). The same run keeps no data
    (``store.snapshot_max_mb=0``): its replay is refused naming the file by its hash, or given the
    file with ``--data``. (One run for what were two tests.)"""
    decoy = project / "launcher"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise SystemExit('the decoy launcher was imported')\n")
    (decoy / "bootstrap.py").write_text("raise SystemExit('the decoy bootstrap was imported')\n")
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # As the installed `launch` command starts: the launch directory is not on its path.
    done = subprocess.run(
        [
            sys.executable,
            "-P",
            "-m",
            "launcher",
            "train=script",
            "train.script=train.py",
            "train.args=[digits.npz]",
            f"store.root={q(store)}",
            "store.snapshot_max_mb=0",
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    run = run_dir_of(done)
    assert "decoy" not in (run / "log.txt").read_text()

    snap = json.loads((run / "snapshot.json").read_text())
    assert f"{project}/digits.npz" in snap["left_out"] and f"{project}/digits.npz" not in snap["files"]
    copy = tmp_path / "copy-of-digits.npz"
    shutil.move(project / "digits.npz", copy)

    done = launch("replay", str(run), cwd=tmp_path)
    assert done.returncode == 3, done.stdout[-3000:] + done.stderr[-2000:]
    recorded = _fp(run)["data"]["digits.npz"]
    assert "data.digits.npz" in done.stdout and recorded[:12] in done.stdout and "missing" in done.stdout
    assert "--data digits.npz=PATH" in done.stdout

    done = launch("replay", str(run), "--data", f"digits.npz={tmp_path / 'nope.npz'}", cwd=tmp_path)
    assert done.returncode == 2 and "no such file" in done.stderr
    done = launch("replay", str(run), "--data", f"digits.npz={copy}", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert done.stdout.splitlines()[-2].startswith("REPRODUCED: ")


def test_a_run_recorded_before_the_house_moved_names_the_in_job_modules_that_changed(launch, tmp_path):
    """A sealed run of a tiny Keras script written by the launcher at b591ce5 (fingerprint schema 3,
    the in-job code under launcher/run/, keyed by file path): refused in words naming the in-job
    modules whose content changed since (not every file that moved), and replayed with
    --allow-mismatch to the same bits."""
    store = tmp_path / "store"
    shutil.copytree(DATA / "runs-b591ce5", store)
    run = next(filter(is_run, store.iterdir()))
    done = launch("replay", str(run), cwd=tmp_path)
    assert done.returncode == 3, done.stdout[-3000:] + done.stderr[-2000:]
    first = verdict_of(done.stdout).splitlines()[0]
    assert first.startswith("REFUSED: cannot replay") and "the launcher's in-job code changed: " in first, first
    assert "--allow-mismatch" in first
    rows = {line.split()[0] for line in verdict_of(done.stdout).splitlines()[2:] if line.startswith("  ")}
    named = {row for row in rows if row.startswith("code.launcher.")}
    assert "code.launcher.launcher.job.observe.reads" in named  # old run/reads.py, by its new module name
    assert not any(n.startswith("code.launcher.launcher.run.") or n.endswith(".py") for n in named)
    assert "code.launcher.launcher.version" not in named  # imported, not changed: no refusal for it
    done = launch("replay", str(run), "--allow-mismatch", cwd=tmp_path)
    assert done.returncode == 3, done.stdout[-3000:] + done.stderr[-2000:]
    if rows == named:  # on the kind of machine that recorded it, nothing but the launcher differs
        assert "NOT COMPARABLE (forced: results are bitwise equal)" in done.stdout
    else:
        assert "NOT COMPARABLE (forced" in done.stdout


def test_replay_of_a_run_recorded_by_an_older_launcher(launch, tmp_path):
    """A sealed run written by the launcher at 789e2ba (fingerprint schema 2, no snapshot):
    readable, refused on what it lacks (shown as unknown), replayable with --allow-mismatch."""
    store = tmp_path / "store"
    shutil.copytree(DATA / "runs-schema2", store)
    run = next(filter(is_run, store.iterdir()))
    done = launch("replay", str(run), cwd=tmp_path)
    assert done.returncode == 3, done.stdout[-3000:] + done.stderr[-2000:]
    assert "code.launcher" in done.stdout and "(the whole package)" in done.stdout
    assert "hardware.cpu.stepping" in done.stdout and "unknown (not recorded" in done.stdout  # what it lacks
    done = launch("replay", str(run), "--allow-mismatch", cwd=tmp_path)
    assert done.returncode in (0, 1, 3), done.stdout[-3000:] + done.stderr[-2000:]
    head = done.stdout.splitlines()
    verdict = next(line for line in head if line.startswith(("REPRODUCED", "DIVERGED", "NOT COMPARABLE")))
    assert verdict.startswith("NOT COMPARABLE")  # what it lacks can never be called equal
    replayed = Path(verdict.split()[3])
    assert (replayed / "manifest.json").exists() and (replayed / "snapshot.json").exists()
    compared = launch("compare", str(run), str(replayed), cwd=tmp_path)
    assert compared.returncode == 3 and "REFUSED" in compared.stdout
