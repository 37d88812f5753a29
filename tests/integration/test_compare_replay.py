"""Fingerprints, comparability, seals, the run index and replay on real runs (issue: compare/replay)."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from launcher.record.probe import fingerprint
from tests.conftest import NPZ, REPO, START_ENV, TINY, build_once, copy_store, is_run, q, run_dir_of, verdict_of

pytestmark = pytest.mark.slow


def _verdict(stdout: str) -> str:
    """The replay's verdict line (training output comes before it)."""
    words = ("REPRODUCED", "DIVERGED", "NOT COMPARABLE", "FAILED", "REFUSED")
    return next(w for line in stdout.splitlines() for w in words if line.startswith(w + ":"))


@pytest.fixture
def two_threads_runs(tiny_runs, shared_root):
    """Two equal runs (shared, ``tiny_runs``: 1 intra-op thread, strict's default), and a third with
    another thread count and (a knob that changes the bits on any machine, after step 0) another
    learning rate (shared: one of the ``concurrent_tiny_runs``)."""
    a, b = (r["run"] for r in tiny_runs)
    return a, b, concurrent_tiny_runs(shared_root)["runs"]["threads"]


@pytest.fixture
def writable_twin(tiny_runs, tmp_path) -> Path:
    """A copy of the second shared run, for a test that changes it."""
    store = copy_store(tiny_runs[1]["store"], tmp_path / "twin store")
    return store / tiny_runs[1]["run"].name


def _perturbed_copy(run: Path, target: Path, by: float) -> Path:
    """A copy of ``run`` with every weight moved by ``by``, sealed again (a run of other software)."""
    import h5py

    from launcher.record.store import runs

    shutil.copytree(run, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    (target / "manifest.json").unlink()
    with h5py.File(target / json.loads((run / "result.json").read_text())["weights_file"], "r+") as f:
        weights = []
        f.visititems(lambda _, obj: weights.append(obj) if isinstance(obj, h5py.Dataset) else None)
        for w in weights:
            w[...] = w[()] + np.asarray(by, w.dtype)
    runs.seal(target)
    return target


def test_compare_identical_refused_forced_and_tolerance(launch, two_threads_runs, tmp_path):
    a, b, c = two_threads_runs
    same = launch("compare", a, b)
    assert same.returncode == 0 and same.stdout.startswith("IDENTICAL"), same.stdout + same.stderr

    refused = launch("compare", a, c)
    assert refused.returncode == 3 and refused.stdout.startswith("REFUSED")
    assert "intra_op_threads" in refused.stdout
    row = next(line for line in refused.stdout.splitlines() if line.strip().startswith("determinism.intra_op"))
    assert row.split()[1:] == ["1", "2"]

    forced = launch("compare", a, c, "--allow-mismatch")
    assert forced.returncode == 3 and forced.stdout.startswith("NOT COMPARABLE (forced: results differ)")
    # The divergence locator: same seed, same initial weights; the learning rate moves the first
    # step. The traces (every 10 steps, and each epoch's end) split by step 3, the end of the one
    # 3-step epoch, at the first layer of the model.
    assert "first diverging step: 3 (epoch 1), equal at step 0: the bits split in steps 1-3" in forced.stdout
    assert "first differing layer in model order: conv1" in forced.stdout

    equivalent = launch("compare", a, b, "--tolerance", "1e-6,0")
    assert equivalent.returncode == 0 and equivalent.stdout.startswith("EQUIVALENT")
    assert "IDENTICAL" not in equivalent.stdout
    # --tolerance reads the saved weights themselves: weights moved by 1e-3 are not within 1e-6.
    moved = _perturbed_copy(b, tmp_path / b.name, 1e-3)
    far = launch("compare", a, moved, "--tolerance", "0,1e-6")
    assert far.returncode == 1 and far.stdout.startswith("NOT EQUIVALENT"), far.stdout
    assert "max abs difference 0.001" in far.stdout
    near = launch("compare", a, moved, "--tolerance", "0,1e-2")
    assert near.returncode == 0 and near.stdout.startswith("EQUIVALENT"), near.stdout

    bad = launch("compare", a, b, "--tolerance", "x")
    assert bad.returncode == 2 and "--tolerance takes RTOL,ATOL" in bad.stderr


def test_fingerprint_schema_and_key_fields(tiny_runs):
    a = tiny_runs[0]["run"]
    text = (a / "fingerprint.json").read_text()
    fp = json.loads(text)
    assert text == json.dumps(fp, sort_keys=True, indent=2) + "\n"  # canonical JSON
    assert fp["schema"] == fingerprint.SCHEMA
    assert fp["hardware"]["cpu"]["isa"] and isinstance(fp["hardware"]["gpus"], list)
    assert fp["software"]["tensorflow"] and "is_cuda_build" in fp["software"]["tf_build"]
    assert len(fp["software"]["packages_sha256"]) == 64
    assert any(p.startswith("keras==") for p in fp["software"]["packages"])
    assert fp["environment"]["TF_ENABLE_ONEDNN_OPTS"] == "1"  # strict's default: oneDNN on
    assert fp["determinism"]["intra_op_threads"] == 1 and fp["determinism"]["op_determinism"] is True
    ((data_path, digest),) = fp["data"].items()
    assert digest == hashlib.sha256(Path(data_path).read_bytes()).hexdigest()
    assert fp["code"]["launcher_version"].startswith("0.1.0+src.")
    assert fp["code"]["modules"] == {}  # the mnist task is the launcher's own code
    used = fp["software"]["distributions"]
    assert "keras" in used and any(name.startswith("tensorflow") for name in used)
    assert all(len(d["record_sha256"]) == 64 for d in used.values() if d["record_sha256"])
    # The math library, where this machine has one apart from libc (glibc's libm.so.6; musl has none).
    libm = {word for word in Path("/proc/self/maps").read_text().split() if "/libm.so" in word or "/libm-" in word}
    if libm:
        assert any(Path(path).name.startswith("libm") for path in fp["software"]["libraries"]), libm
    assert fp["determinism"]["keras"]["floatx"] == "float32"


def test_tampered_or_incomplete_runs_are_refused_and_not_modified(launch, tiny_runs, writable_twin, tmp_path):
    a, b = tiny_runs[0]["run"], writable_twin
    fp_file = b / "fingerprint.json"
    b.chmod(0o755)
    fp_file.chmod(0o644)
    fp_file.write_text(fp_file.read_text().replace('"intra_op_threads": 1', '"intra_op_threads": 1 '))
    before = {p.name: p.read_bytes() for p in b.iterdir() if p.is_file()}
    done = launch("compare", a, b)
    assert done.returncode == 4
    assert "fingerprint.json changed after sealing" in done.stderr and len(done.stderr.splitlines()) == 1
    replayed = launch("replay", b)
    assert replayed.returncode == 4 and "fingerprint.json" in replayed.stderr
    assert {p.name: p.read_bytes() for p in b.iterdir() if p.is_file()} == before

    assert launch("compare", a, tmp_path / "nope").returncode == 2
    assert "not a run directory" in launch("compare", a, tmp_path).stderr


HIDDEN_STATE = "import launcher\n(launcher.output_dir() / '.state').write_text('step=3\\n')\n"


def test_a_changed_or_added_hidden_file_is_refused_by_compare_replay_and_resume(launch, store, tmp_path):
    script = tmp_path / "hidden_state.py"  # a job that keeps its own state in a hidden file
    script.write_text(HIDDEN_STATE)
    done = launch("train=script", f"train.script={q(script)}", f"store.root={q(store)}")
    run = run_dir_of(done)
    assert "outputs/.state" in json.loads((run / "manifest.json").read_text())["files"]
    same = launch("compare", run, run)
    assert same.returncode == 0 and same.stdout.startswith("IDENTICAL: 1 output file"), same.stdout + same.stderr
    state = run / "outputs" / ".state"
    (run / "outputs").chmod(0o755)
    state.chmod(0o644)
    state.write_text("step=4\n")
    refusal = f"launch: error: run {run.name} was modified: outputs/.state changed after sealing"
    for argv in (("compare", run, run), ("replay", run), ("resume", run)):
        refused = launch(*argv)
        assert refused.returncode == 4 and refused.stderr.strip() == refusal, (argv, refused.stdout, refused.stderr)
    state.write_text("step=3\n")  # as sealed again; now a file appears
    run.chmod(0o755)
    (run / ".added").write_text("")
    for argv in (("compare", run, run), ("replay", run), ("resume", run)):
        refused = launch(*argv)
        assert refused.returncode == 4 and ".added was added after sealing" in refused.stderr, (argv, refused.stderr)
    assert len([p for p in store.iterdir() if is_run(p)]) == 1  # nothing ran


def test_a_fingerprint_schema_this_version_cannot_read(launch, tiny_runs, writable_twin):
    a, b = tiny_runs[0]["run"], writable_twin
    from launcher.record.store import runs

    b.chmod(0o755)
    for p in b.iterdir():
        p.chmod(0o644)
    fp = json.loads((b / "fingerprint.json").read_text())
    fp["schema"] = 99
    runs.write_json(b / "fingerprint.json", fp)
    (b / "manifest.json").unlink()
    runs.seal(b)  # a well-sealed run from a future launcher
    done = launch("compare", a, b)
    assert done.returncode == 5 and "schema 99" in done.stderr and "reads 1" in done.stderr


def test_replay_reproduces_and_links_to_the_original(launch, concurrent_runs, tmp_path):
    store = copy_store(concurrent_runs["store"], tmp_path / "store")  # the replay adds a run to it
    original = store / concurrent_runs["runs"]["3"].name  # a TINY run of seed 3 (not the default 0)
    before = {p for p in store.iterdir() if is_run(p)}
    done = launch("replay", original)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert _verdict(done.stdout) == "REPRODUCED"
    replays = [p for p in store.iterdir() if is_run(p) and p not in before]
    (new,) = replays
    job = json.loads((new / "job.json").read_text())
    assert job["replay_of"] == original.name and job["replay"]["comparable"] is True
    assert (new / "manifest.json").exists()
    assert json.loads((new / "result.json").read_text())["seed"] == 3


def test_replay_refuses_when_the_environment_differs(launch, tiny_runs, tmp_path):
    store = copy_store(tiny_runs[0]["store"], tmp_path / "store")  # the replay adds a run to it
    original = store / tiny_runs[0]["run"].name
    done = launch("replay", original, env={"OMP_NUM_THREADS": "3"})
    assert done.returncode == 3 and verdict_of(done.stdout).startswith("REFUSED")
    assert "environment.OMP_NUM_THREADS" in done.stdout
    assert len([p for p in store.iterdir() if is_run(p)]) == 1  # nothing ran
    forced = launch("replay", original, "--allow-mismatch", env={"OMP_NUM_THREADS": "3"})
    assert forced.returncode == 3 and _verdict(forced.stdout) == "NOT COMPARABLE"
    new = next(p for p in store.iterdir() if is_run(p) and p != original)
    assert json.loads((new / "job.json").read_text())["replay"]["comparable"] is False
    # Run anyway, the report still says what the bits did, judged here from the two results.
    same = (
        json.loads((original / "result.json").read_text())["weights_sha256"]
        == json.loads((new / "result.json").read_text())["weights_sha256"]
    )
    assert ("forced: results are bitwise equal" if same else "forced: results differ") in forced.stdout


# Three launches started at once, by name: tiny_runs' config (TINY, seed 0) with these overrides.
CONCURRENT = {
    "1": ("+seed=1",),
    "3": ("+seed=3",),
    "threads": ("determinism.intra_op_threads=2", "train.learning_rate=0.002"),
}


def concurrent_tiny_runs(shared_root: Path) -> dict:
    """The ``CONCURRENT`` launches, started at once into one store and trained once per session:
    ``{"store", "runs": {NAME: run}}``. Three writers at once are enough to prove the index takes
    concurrent writers (six proved no more), and each run is also one another test needs: the
    seed-3 run is what ``test_replay_reproduces_and_links_to_the_original`` replays, ``threads``
    the third run of ``two_threads_runs``, and the seed-1 run what test_foundation.py's
    ``test_different_seeds_give_different_weights`` compares with ``tiny_runs``."""

    def build(directory: Path) -> dict:
        store = directory / "store"
        store.mkdir()
        args = [f"train.data={q(NPZ)}", f"store.root={q(store)}", *TINY]
        paths = [str(REPO), *filter(None, START_ENV.get("PYTHONPATH", "").split(os.pathsep))]
        env = {**START_ENV, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}  # as run_launch's
        for name in CONCURRENT:  # each its own working directory: a job watches its opens
            (directory / f"cwd-{name}").mkdir()
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "launcher", *args, *overrides],
                cwd=directory / f"cwd-{name}",
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for name, overrides in CONCURRENT.items()
        ]
        runs = {}
        for name, p in zip(CONCURRENT, procs, strict=True):
            out, err = p.communicate(timeout=600)
            assert p.returncode == 0, out[-2000:] + err[-2000:]
            runs[name] = str(run_dir_of(subprocess.CompletedProcess(p.args, 0, out, err)))
        return {"store": str(store), "runs": runs}

    built = build_once(shared_root, "concurrent-tiny", build)
    return {"store": Path(built["store"]), "runs": {k: Path(v) for k, v in built["runs"].items()}}


@pytest.fixture
def concurrent_runs(shared_root) -> dict:
    return concurrent_tiny_runs(shared_root)


def test_launches_at_once_all_appear_in_the_index(concurrent_runs):
    store = concurrent_runs["store"]
    n = len(CONCURRENT)
    listing = subprocess.run(
        [sys.executable, "-m", "launcher", "runs", "--store", str(store)], capture_output=True, text=True, check=True
    ).stdout
    assert listing.strip().endswith(f"{n} run(s)")
    assert listing.count(" complete ") == n
    seeds = sorted(int(line.split()[4]) for line in listing.splitlines()[1:-1])
    assert seeds == [0, 1, 3]  # the threads run has tiny_runs' seed
    only_seed = subprocess.run(
        [sys.executable, "-m", "launcher", "runs", "--store", str(store), "--status", "failed"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert only_seed.strip().endswith("0 run(s)")
