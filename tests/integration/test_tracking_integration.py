"""TensorBoard and MLflow on real runs (issue 19): what a run, a sweep and a replay leave in
TensorBoard's event files and in an MLflow SQLite store, that a dead tracking server changes
nothing, and the pictures of a comparison and a sweep."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from launcher.record import layout, tbevents
from launcher.record.probe import key
from launcher.record.store import runs
from launcher.sweep.multirun import hydra_quote
from tests.conftest import QUICK, q, run_dir_of

pytestmark = pytest.mark.slow

TWO_EPOCHS = ("train.epochs=2", "train.batch_size=100")
SCRIPTS = Path(__file__).parent / "scripts"


def scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """The run's TensorBoard scalars, read by TensorBoard's own EventAccumulator."""
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(str(run_dir / layout.TENSORBOARD))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def client_of(store: Path):
    """An MlflowClient on the store's database. mlflow (a test dependency, like tensorboard and
    matplotlib) is imported here, not at collection: its imports set variables that every later
    launch of the test session would inherit (the autouse fixture below undoes them per test)."""
    import mlflow

    return mlflow.MlflowClient(f"sqlite:///{store / 'mlflow.db'}")


def mlflow_runs(store: Path) -> list:
    client = client_of(store)
    exps = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(exps, max_results=1000)


def weights(run: Path) -> str:
    return json.loads((run / "result.json").read_text())["weights_sha256"]


def is_png(path: Path) -> bool:
    data = path.read_bytes()
    width, height = struct.unpack(">II", data[16:24])
    return data[:8] == b"\x89PNG\r\n\x1a\n" and width >= 600 and height >= 300 and len(data) > 10_000


@pytest.fixture(autouse=True)
def _environment_kept():
    """MLflow's client in this test process imports libraries that set variables (sklearn sets
    KMP_DUPLICATE_LIB_OK): later launches inherit the environment, and it is part of their key."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory):
    """The same 2-epoch run three times: tracked to MLflow, untracked, tracked to a dead server."""
    from tests.conftest import DATA, run_launch

    store = tmp_path_factory.mktemp("tracked store")
    base = (f"train.data={DATA / 'mnist-small' / 'mnist-small.npz'}", f"store.root={q(store)}", *TWO_EPOCHS)
    tracked = run_launch(*base, "tracking=mlflow")
    plain = run_launch(*base)
    dead = run_launch(*base, "tracking=mlflow", "tracking.uri=http://127.0.0.1:9", timeout=300)
    for done in (tracked, plain, dead):
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return store, {"tracked": tracked, "plain": plain, "dead": dead}


def test_a_tracked_run_is_one_mlflow_run_and_tensorboard_events_in_the_run(three_runs):
    store, done = three_runs
    run = run_dir_of(done["tracked"])
    (r,) = [r for r in mlflow_runs(store) if "launch.replay_of" not in r.data.tags]  # one run (and a replay's)
    client = client_of(store)
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for name in ("loss", "accuracy", "val_loss", "val_accuracy"):
        history = client.get_metric_history(r.info.run_id, name)
        assert [(m.step, m.value) for m in history] == [(m["epoch"], m[name]) for m in metrics]  # 2 points each
    fp = json.loads((run / "fingerprint.json").read_text())
    assert r.data.tags["launch.weights_sha256"] == weights(run)
    assert r.data.tags["launch.key_sha256"] == key.key_sha256(fp)
    assert r.data.tags["launch.run_id"] == run.name and r.info.status == "FINISHED"

    tb = scalars(run)
    for name in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert [step for step, _ in tb[f"epoch/{name}"]] == [1, 2]
        assert [v for _, v in tb[f"epoch/{name}"]] == pytest.approx([m[name] for m in metrics], rel=1e-6)  # float32
    traced = [p for p in (json.loads(x) for x in (run / "trace.jsonl").read_text().splitlines()) if p["loss"]]
    assert [s for s, _ in tb["trace/loss"]] == [p["step"] for p in traced]
    # Sealed with the run: the manifest covers the event file, and the seal holds.
    manifest = json.loads((run / "manifest.json").read_text())["files"]
    assert f"{layout.TENSORBOARD}/{tbevents.FILE}" in manifest
    runs.verify_seal(run)


def test_tracking_changes_no_bit_and_a_dead_server_is_one_warning(three_runs, launch, tmp_path):
    store, done = three_runs
    tracked, plain, dead = (run_dir_of(done[k]) for k in ("tracked", "plain", "dead"))
    assert weights(tracked) == weights(plain) == weights(dead)
    warnings = [line for line in done["dead"].stderr.splitlines() if line.startswith("[launch] warning")]
    assert len(warnings) == 1 and "MLflow tracking to http://127.0.0.1:9 failed" in warnings[0], warnings
    assert not [
        line for line in done["tracked"].stderr.splitlines() if "warning" in line.lower() and "mlflow" in line.lower()
    ]
    runs.verify_seal(dead)
    plot = tmp_path / "same.png"
    compared = launch("compare", plain, dead, "--plot", plot)
    assert compared.returncode == 0 and compared.stdout.startswith("IDENTICAL"), compared.stdout + compared.stderr
    assert compared.stdout.strip().endswith(f"plot: {plot}") and is_png(plot)


def test_replay_tags_the_runs_it_judged(three_runs, launch):
    store, done = three_runs
    original = run_dir_of(done["tracked"])
    replayed = launch("replay", original)
    assert replayed.returncode == 0, replayed.stdout[-2000:] + replayed.stderr[-2000:]
    tags = {r.data.tags["launch.run_id"]: r.data.tags for r in mlflow_runs(store)}
    assert len(tags) == 2  # the original and its replay (the run with a dead server is not in this store)
    (new,) = [rid for rid in tags if rid != original.name]
    assert tags[original.name]["launch.verdict"] == tags[new]["launch.verdict"] == "REPRODUCED"
    assert tags[new]["launch.replay_of"] == original.name and tags[original.name]["launch.verdict.replay"] == new


def test_a_tracked_sweep_is_a_parent_with_its_jobs_as_children(launch, store, mnist_npz, tmp_path):
    done = launch(
        "-m", "+seed=1,2", f"train.data={mnist_npz}", *QUICK, "tracking=mlflow", f"store.root={hydra_quote(str(store))}"
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sweep_dir,) = (store / "sweeps").iterdir()
    found = mlflow_runs(store)
    (parent,) = [r for r in found if r.data.tags.get("launch.kind") == "sweep"]
    children = [r for r in found if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(found) == 3 and sorted(r.data.tags["launch.seed"] for r in children) == ["1", "2"]
    assert {"loss_mean", "loss_std", "accuracy_mean"} <= set(parent.data.metrics)
    # TensorBoard: the sweep's jobs together under the sweep, named by their swept values.
    links = sorted((sweep_dir / tbevents.SWEEP_DIR).iterdir())
    assert [p.name for p in links] == ["000 +seed=1", "001 +seed=2"]
    assert all((p / tbevents.FILE).is_file() for p in links)
    plot = tmp_path / "sweep.png"
    drawn = launch("sweep", "plot", sweep_dir, plot)
    assert drawn.returncode == 0 and is_png(plot), drawn.stderr


def test_unmodified_user_code_gets_tensorboard_events(keras_fit_runs):
    tb = scalars(keras_fit_runs[0]["run"])  # scripts/keras_fit.py, unmodified (shared: tests/conftest.py)
    assert [s for s, _ in tb["epoch/loss"]] == [1, 2] and tb["trace/loss"]  # the observers' epochs and trace
