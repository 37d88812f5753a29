"""Users' own training code, unmodified, observed as fully as the mnist task (real training).

The scripts in ``scripts/`` are ordinary TensorFlow code written without the launcher in
mind: a Keras ``fit`` inside a function that returns only the history, a ``GradientTape``
loop over bare variables, a loop that updates its variables by hand (no optimizer), a
``MirroredStrategy`` over two logical CPUs configured first,
a script that trains nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import NPZ, START_ENV, build_once, copy_store, is_run, q, run_dir_of, run_launch

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).parent / "scripts"


def _script_run(launch, store: Path, script: str, *args: str, overrides: tuple[str, ...] = ()) -> Path:
    done = launch(
        "train=script",
        f"train.script={q(SCRIPTS / script)}",
        f"train.args=[{','.join(map(q, args))}]",
        f"store.root={q(store)}",
        *overrides,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return run_dir_of(done)


def _result(run: Path) -> dict:
    return json.loads((run / "result.json").read_text())


def _compare(launch, a: Path, b: Path, *extra: str):
    return launch("compare", a, b, *extra)


def test_keras_fit_inside_a_function_is_observed_and_identical_twice(launch, keras_fit_runs):
    a, b = (r["run"] for r in keras_fit_runs)  # the script run twice (shared: tests/conftest.py)
    ra = _result(a)
    assert ra["weights_sha256"] and ra["weights_sha256"] == _result(b)["weights_sha256"]
    assert ra["observed"]["models"] == ["sequential"] and ra["observed"]["fits"] == 1
    assert list(ra["layer_sha256"]) == ["conv2d", "dense"]  # the layers that have weights, in the model's order
    metrics = [json.loads(line) for line in (a / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [1, 2] and {"loss", "accuracy", "val_loss"} <= set(metrics[0])
    assert ra["final_metrics"]["loss"] == metrics[-1]["loss"]
    trace = [json.loads(line) for line in (a / "trace.jsonl").read_text().splitlines()]
    assert trace[0]["step"] == 0 and trace[-1]["weights"] == ra["weights_sha256"]
    done = _compare(launch, a, b)
    assert done.returncode == 0, done.stdout
    assert done.stdout.startswith("IDENTICAL: weights, 2 epochs' metrics and 4 traced steps are bitwise equal")


def _audit_of_script(store: Path, status: int, script: str, *overrides: str) -> tuple[str, list[dict]]:
    """``launch audit`` of ``scripts/SCRIPT`` (knob ``intra_op_threads``) into ``store``, ending with
    ``status``: its stdout and its audit's rows."""
    done = run_launch(
        "audit",
        "train=script",
        f"train.script={q(SCRIPTS / script)}",
        *overrides,
        f"store.root={q(store)}",
        "audit.knobs=[intra_op_threads]",
        base_env=START_ENV,
    )
    assert done.returncode == status, done.stdout[-3000:] + done.stderr[-2000:]
    (audit,) = (store / "audits").iterdir()
    return done.stdout, json.loads((audit / "audit.json").read_text())["rows"]


@pytest.fixture
def keras_fit_audit(shared_root) -> dict:
    """``launch audit`` of ``keras_fit.py`` for one epoch, knob ``intra_op_threads``, made once per
    session: ``{"stdout", "repeats"}``, ``repeats`` the run directories of its two baseline runs.
    Every audit run is an ordinary sealed run of the store, with the audit's
    ``determinism.trace_every=1`` and the script task's default ``train.save_weights=true``."""

    def build(directory: Path) -> dict:
        store = directory / "store"
        stdout, rows = _audit_of_script(store, 0, "keras_fit.py", f"train.args=[{q(NPZ)},1]")
        repeats = [str(store / row["run"]) for row in rows if row["knob"] == "repeat"]
        return {"stdout": stdout, "repeats": repeats}

    built = build_once(shared_root, "user-code-keras-fit-audit", build)
    return {"stdout": built["stdout"], "repeats": [Path(r) for r in built["repeats"]]}


def test_the_trace_and_saved_weights_never_change_the_weights(launch, store, mnist_npz, untraced_runs, keras_fit_audit):
    """``determinism.trace_every`` and ``train.save_weights`` read the weights, never change
    them (which is why neither is in the config hash): the script task and the mnist task. The
    script's run with both on (trace every step, weights saved) is a baseline run of its audit
    (``keras_fit_audit``: seed 0, ``trace_every=1``, ``save_weights`` true, as this run's own)."""
    plain = _script_run(
        launch,
        store,
        "keras_fit.py",
        str(mnist_npz),
        "1",
        overrides=("determinism.trace_every=0", "train.save_weights=false"),
    )
    both = keras_fit_audit["repeats"][0]
    config = yaml.safe_load((both / "config.yaml").read_text())
    assert config["determinism"]["trace_every"] == 1 and config["train"]["save_weights"] is True
    assert config["seed"] == yaml.safe_load((plain / "config.yaml").read_text())["seed"] == 0
    assert not (plain / "trace.jsonl").exists() and not (plain / "weights.npz").exists()
    assert len((both / "trace.jsonl").read_text().splitlines()) == 7 and (both / "weights.npz").is_file()
    assert _result(plain)["weights_sha256"] == _result(both)["weights_sha256"]
    mnist = [untraced_runs[0]["run"]]  # the same with determinism.trace_every=0 (shared: tests/conftest.py)
    done = launch(
        "train=mnist",
        f"train.data={q(mnist_npz)}",
        f"store.root={q(store)}",
        "train.epochs=1",
        "train.batch_size=100",
        "determinism.trace_every=1",
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    mnist.append(run_dir_of(done))
    assert not (mnist[0] / "trace.jsonl").exists() and (mnist[1] / "trace.jsonl").is_file()
    assert _result(mnist[0])["weights_sha256"] == _result(mnist[1])["weights_sha256"]


def test_keras_fit_bits_follow_the_seed(launch, store, mnist_npz, keras_fit_runs):
    """The launcher's seed reaches an unmodified script. (Its thread counts do too: the audit of
    this script below runs it with 2 intra-op threads.)"""
    base = _result(keras_fit_runs[0]["run"])["weights_sha256"]  # the script's defaults (shared)
    seeded = _result(_script_run(launch, store, "keras_fit.py", str(mnist_npz), overrides=("+seed=1",)))
    assert seeded["weights_sha256"] and seeded["weights_sha256"] != base


def test_gradient_tape_loop_over_bare_variables(launch, store, mnist_npz, tmp_path):
    saved = tmp_path / "params.npy"  # the script saves its parameters here (same arguments every run)
    a = _script_run(launch, store, "tape_loop.py", str(mnist_npz), str(saved))
    observed_params = saved.read_bytes()
    b = _script_run(launch, store, "tape_loop.py", str(mnist_npz), str(saved))
    ra = _result(a)
    assert ra["observed"] == {
        "models": [],
        "variables": 3,
        "fits": 0,
        "epochs": 0,
        "optimizer_steps": 24,
        "session_variables": 0,
    }
    assert list(ra["layer_sha256"]) == ["variable 0 (kernel:0)", "variable 1 (w:0)", "variable 2 (b:0)"]
    trace = [json.loads(line) for line in (a / "trace.jsonl").read_text().splitlines()]
    assert [p["step"] for p in trace] == [0, 10, 20, 24]  # optimizer steps counted inside a tf.function
    assert trace[-1]["weights"] == ra["weights_sha256"] and trace[1]["loss"] is not None
    done = _compare(launch, a, b)
    assert done.returncode == 0, done.stdout
    # Observation reads and never writes: switched off, the script saves the same parameters.
    _script_run(launch, store, "tape_loop.py", str(mnist_npz), str(saved), overrides=("train.observe=false",))
    assert saved.read_bytes() == observed_params
    # The launcher's seed reaches the loop. (That thread counts reach user code is held by the
    # audit of keras_fit.py, test_audit_of_a_script_reports_threads_changed.)
    seeded = _script_run(launch, store, "tape_loop.py", str(mnist_npz), overrides=("+seed=1",))
    assert _result(seeded)["weights_sha256"] != ra["weights_sha256"]


def test_a_loop_without_an_optimizer_is_hashed_from_its_assignments(launch, store):
    # TensorFlow's "Basic training loops": w.assign_sub(lr * dw) on a tf.Module's variables.
    a = _script_run(launch, store, "assign_loop.py")
    b = _script_run(launch, store, "assign_loop.py")
    ra = _result(a)
    assert ra["observed"]["variables"] == 2 and ra["observed"]["optimizer_steps"] == 0
    assert ra["weights_sha256"] and ra["weights_sha256"] == _result(b)["weights_sha256"]
    done = _compare(launch, a, b)
    assert done.returncode == 0 and done.stdout.startswith("IDENTICAL: weights are bitwise equal"), done.stdout
    seeded = _script_run(launch, store, "assign_loop.py", overrides=("+seed=1",))
    assert _result(seeded)["weights_sha256"] != ra["weights_sha256"]


@pytest.fixture
def nothing_audit(shared_root) -> dict:
    """``launch audit`` of ``nothing.py``, made once per session: ``{"stdout", "store", "run"}``.
    It stops after its first run (there is nothing to compare the others with), which is an
    ordinary sealed run of ``nothing.py`` (seed 0, ``determinism.trace_every=1``)."""

    def build(directory: Path) -> dict:
        store = directory / "store"
        stdout, (row,) = _audit_of_script(store, 1, "nothing.py")
        return {"stdout": stdout, "store": str(store), "run": str(store / row["run"])}

    built = build_once(shared_root, "user-code-nothing-audit", build)
    return {"stdout": built["stdout"], "store": Path(built["store"]), "run": Path(built["run"])}


def test_a_script_that_trains_nothing_is_nothing_compared(launch, nothing_audit, tmp_path):
    """A run of the script (the one run of its audit, ``nothing_audit``) is replayed, and compared
    with its replay: the replay is the script's second run, in the same store."""
    store = copy_store(nothing_audit["store"], tmp_path / "store")  # the replay adds a run to it
    a = store / nothing_audit["run"].name
    assert _result(a)["weights_sha256"] is None
    replayed = launch("replay", a)
    assert replayed.returncode == 6, replayed.stdout
    assert any(line.startswith("NOTHING COMPARED: replay") for line in replayed.stdout.splitlines()), replayed.stdout
    (b,) = [p for p in store.iterdir() if is_run(p) and p != a]
    assert _result(b)["weights_sha256"] is None
    done = _compare(launch, a, b)
    assert done.returncode == 6, done.stdout
    assert done.stdout.startswith("NOTHING COMPARED")


def test_devices_configured_by_the_script_and_mirrored_strategy_under_strict(launch, store, mnist_npz):
    a = _script_run(launch, store, "mirrored.py", str(mnist_npz))
    b = _script_run(launch, store, "mirrored.py", str(mnist_npz))
    assert _result(a)["weights_sha256"] and _compare(launch, a, b).returncode == 0


def test_custom_entrypoint_is_observed(launch, store, mnist_npz):
    runs = []
    for _ in range(2):
        done = launch(
            "train=custom",
            "train.entrypoint=custom_entry:train",
            f"train.path={q(SCRIPTS)}",
            f"+train.data_path={q(mnist_npz)}",
            f"store.root={q(store)}",
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        runs.append(run_dir_of(done))
    result = _result(runs[0])
    assert result["weights_sha256"] and set(result["final_metrics"]) == {"last_loss"}
    assert len((runs[0] / "metrics.jsonl").read_text().splitlines()) == 2
    assert _compare(launch, *runs).returncode == 0


def test_audit_of_a_script_reports_threads_changed(keras_fit_audit):
    stdout = keras_fit_audit["stdout"]  # its exit status (0) is asserted where it is made
    rows = [line for line in stdout.splitlines() if line.startswith("intra_op_threads")]
    assert rows, stdout
    if not any(line.split()[1] == "2" and "CHANGED" in line for line in rows):
        pytest.skip(
            "2 intra-op threads give the same weights as 1 on this machine (TensorFlow's fact about its "
            "CPU): the audit cannot show the thread count reaching the script"
        )
    assert "STABLE" in stdout and "must pin" in stdout


def test_audit_of_a_script_that_records_nothing_judges_nothing(nothing_audit):
    stdout = nothing_audit["stdout"]  # its exit status (1) is asserted where it is made
    assert "NOT JUDGED" in stdout and "STABLE" not in stdout.replace("NOT JUDGED", "")
    assert "free here" not in stdout
