"""tf_keras (Keras 2, TF_USE_LEGACY_KERAS=1) observed and resumed like Keras 3, and the resume of a
multi-worker fit (issue 49), without training: the pure parts, on stand-ins."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from launcher.errors import ResumeError
from launcher.job.training import fitstate, legacy
from launcher.record import hashing, layout
from launcher.record.probe import environment
from launcher.record.store import runs
from launcher.run import resume, workers
from tests import factories

REPO = Path(__file__).resolve().parents[2]


def test_tf_keras_is_selected_as_tensorflow_reads_the_variable():
    assert legacy.selected({"TF_USE_LEGACY_KERAS": "1"}) and legacy.selected({"TF_USE_LEGACY_KERAS": "true"})
    assert not legacy.selected({}) and not legacy.selected({"TF_USE_LEGACY_KERAS": "0"})


def test_the_variable_that_decides_what_tf_keras_is_is_recorded_and_keyed():
    recorded = environment.allowed_env({"TF_USE_LEGACY_KERAS": "1", "HOME": "/root"})
    assert recorded == {"TF_USE_LEGACY_KERAS": "1"}
    assert environment.keyed_env(recorded) == {"TF_USE_LEGACY_KERAS": "1"}


def test_a_tf_keras_object_is_told_by_its_classes_module():
    base = type("Model", (), {"__module__": "tf_keras.src.engine.training"})
    assert legacy.is_tf_keras(type("Sequential", (base,), {"__module__": "__main__"})())
    assert not legacy.is_tf_keras(type("Model", (), {"__module__": "keras.src.models.model"})())


class _Optimizer:
    def __init__(self, **attrs):
        self.__dict__.update(attrs)


def test_an_optimizers_variables_and_whether_it_is_built_whatever_its_generation():
    class CallableList(list):  # tf_keras' optimizer: a list that can be called
        def __call__(self):
            return self

    assert legacy.optimizer_variables(_Optimizer(variables=["a"])) == ["a"]  # Keras 3: a list
    assert legacy.optimizer_variables(_Optimizer(variables=CallableList(["b"]))) == ["b"]
    v2 = _Optimizer()
    v2.variables = lambda: ["c"]  # OptimizerV2: a method
    assert legacy.optimizer_variables(v2) == ["c"]
    assert legacy.optimizer_built(_Optimizer(built=True)) and not legacy.optimizer_built(_Optimizer(built=False))
    assert legacy.optimizer_built(_Optimizer(_built=True)) and not legacy.optimizer_built(_Optimizer())
    assert not legacy.optimizer_built(_Optimizer(_create_all_weights=None, _slots={}))
    assert legacy.steps_per_execution(_Optimizer(steps_per_execution=4)) == 4  # Keras 3: an int
    counter = _Optimizer(numpy=lambda: 3)
    assert legacy.steps_per_execution(_Optimizer(_steps_per_execution=counter)) == 3  # tf_keras: a variable
    assert legacy.steps_per_execution(_Optimizer()) == 1


def test_the_observer_is_installed_when_the_jobs_import_of_tf_keras_ends(tmp_path, monkeypatch):
    # A stand-in package under another name: the launcher never imports tf_keras itself.
    name = "launch_test_legacy_pkg"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("Model = type('Model', (), {})\nDONE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(legacy, "NAME", name)
    monkeypatch.setattr(legacy, "_watch", None)
    heard = []
    legacy.when_imported(lambda module: heard.append(module.DONE))
    assert heard == [] and name not in sys.modules  # not imported for the job
    try:
        __import__(name)
        assert heard == [True]  # once its package ran
        assert not any(isinstance(f, legacy._AfterImport) for f in sys.meta_path)  # the watch is gone
        legacy.when_imported(lambda module: heard.append("again"))  # imported already: at once
        assert heard == [True, "again"]
    finally:
        sys.modules.pop(name, None)
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, legacy._AfterImport)]


def test_an_evaluation_that_reads_the_second_iterator_it_makes_is_aligned_to_it():
    # tf_keras' evaluate makes two iterators (one as it starts, one for its epoch) and reads the
    # second (measured: validation read iterators 1, 3, 5); Keras 3 reads the first it makes.
    alignment = fitstate.IteratorAlignment(used=[1, 3], made_at_checkpoint=4, lead=1)
    assert [alignment.target(i) for i in range(2)] == [5, 7]
    assert [alignment.next_made(i) for i in range(2)] == [4, 6]  # what align() makes up to
    keras3 = fitstate.IteratorAlignment(used=[0, 2], made_at_checkpoint=4)
    assert keras3.target(0) == keras3.next_made(0) == 4  # no lead: as before
    seen = fitstate.IteratorAlignment()
    seen.began, seen.used = 4, [1, 3, 5]
    assert seen.seen_lead() == 1 and fitstate.IteratorAlignment().seen_lead() == 0


def test_a_tf_keras_fit_is_always_read_again_and_says_why():
    fit = {"keras": "tf_keras", "input": "tf.data", "steps_per_epoch": None}
    assert fitstate.fast_forward_reason(fit, None) == "tf_keras' fit, which makes an epoch's iterator before it begins"
    spe = fitstate.fast_forward_reason({**fit, "steps_per_epoch": 8}, None)
    assert spe == "tf_keras' fit, steps_per_epoch (its iterator runs on across epochs)"
    assert fitstate.fast_forward_reason({"input": "tf.data", "steps_per_epoch": None}, None) is None  # Keras 3


def _multi_worker_run(store: Path, n: int = 2) -> Path:
    run_dir = factories.sealed_run(store, result={"weights_sha256": "ab" * 32}, state=None)
    config = f"seed: 0\ntrain:\n  name: script\ndistribute:\n  workers: {n}\n"
    runs.write_bytes(run_dir / "config.yaml", config.encode())
    runs.set_status(run_dir, "interrupted")
    return run_dir


def test_a_multi_worker_run_of_its_own_loop_is_refused_naming_why(tmp_path):
    run_dir = _multi_worker_run(tmp_path)
    with pytest.raises(ResumeError) as refused:
        resume.check_resumable(run_dir)
    said = str(refused.value)
    assert said.startswith(f"run {run_dir.name} cannot be resumed: it has no checkpoints")
    assert "this run on 2 workers had none: it trains with its own loop" in said and "\n" not in said


def test_a_multi_worker_runs_checkpoints_of_its_own_loop_are_refused(tmp_path):
    run_dir = _multi_worker_run(tmp_path)
    epoch = layout.RunPaths(run_dir).checkpoints / "epoch-000001"
    epoch.mkdir(parents=True)
    (epoch / "rng.json").write_text("{}")
    files = {"rng.json": hashing.file_sha256(epoch / "rng.json")}
    (epoch / "checkpoint.json").write_text(json.dumps({"epoch": 1, "files": files}))
    with pytest.raises(
        ResumeError, match=r"its checkpoints are its own loop's \(launcher\.Checkpointer\), not a Keras"
    ):
        resume.check_resumable(run_dir)


def test_a_multi_worker_run_is_not_resumed_inside_a_slurm_step(tmp_path, monkeypatch):
    run_dir = _multi_worker_run(tmp_path)
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_NTASKS", "2")
    with pytest.raises(ResumeError, match="resume restarts them all on one machine.*run launch resume outside"):
        resume.check_resumable(run_dir)


def test_an_interrupted_multi_worker_runs_key_holds_the_cluster_the_launcher_started():
    expected = {"workers": 2, "collective": None, "order": ["worker:0", "worker:1"], "hardware": ["h", "h"]}
    chief = {"software": {}, "cluster": {"worker": 0, "implementation": "RING", "asked": "AUTO"}}
    merged = resume.with_cluster(chief, expected)
    assert merged["cluster"] == {**expected, "collective": "RING"} and chief["cluster"]["worker"] == 0
    settled = {"cluster": {**expected, "collective": "RING", "weights_sha256": ["w", "w"]}}
    assert resume.with_cluster(settled, expected) is settled  # a run's own settled part stands
    assert resume.with_cluster({"software": {}}, None) == {"software": {}}  # one worker


def test_every_other_worker_of_a_resumed_run_restores_the_chiefs_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    paths = layout.RunPaths(run_dir)
    runs.write_bytes(paths.config, b"seed: 0\n")
    runs.write_json(paths.job, {"launch_dir": "/x", "resume": {"checkpoint": "checkpoints/epoch-000002", "fit": 1}})
    workers.prepare(run_dir, 3)
    assert "from" not in runs.read_json(paths.job)["resume"]  # the chief's own
    for i in (1, 2):
        job = runs.read_json(paths.worker(i).job)
        assert job["worker"] == {"index": i, "count": 3} and job["resume"]["from"] == "../.."
        assert (paths.worker(i).run_dir / job["resume"]["from"]).resolve() == run_dir.resolve()
    runs.write_json(paths.job, {"launch_dir": "/x", "resume": None})
    workers.prepare(run_dir, 2)
    assert runs.read_json(paths.worker(1).job)["resume"] is None  # a fresh run: nothing to restore


def test_a_resumed_workers_records_are_cut_back_to_the_chiefs_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    worker = layout.RunPaths(run_dir).worker(1)
    worker.run_dir.mkdir(parents=True)
    runs.write_bytes(
        worker.metrics, b"".join(json.dumps({"epoch": e, "loss": 1.0}).encode() + b"\n" for e in (1, 2, 3))
    )
    points = [{"step": s, "epoch": 1 + s // 5, "loss": None, "weights": {}} for s in (0, 5, 10, 15)]
    runs.write_bytes(worker.trace, "".join(json.dumps(p) + "\n" for p in points).encode())
    for leftover in (worker.result, worker.error, worker.job_facts, worker.status):
        runs.write_json(leftover, {})
    chief = layout.RunPaths(run_dir).checkpoints / "epoch-000002"
    chief.mkdir(parents=True)
    (chief / "checkpoint.json").write_text(json.dumps({"epoch": 2, "trace_points": 3}))
    resume.worker_through(worker, chief, 2)
    assert [json.loads(line)["epoch"] for line in worker.metrics.read_text().splitlines()] == [1, 2]
    assert len(worker.trace.read_text().splitlines()) == 3  # the chief's count: the workers train in step
    assert not any(p.exists() for p in (worker.result, worker.error, worker.job_facts, worker.status))
    own = worker.checkpoints / "epoch-000002"  # its own checkpoint of that epoch counts its own points
    own.mkdir(parents=True)
    (own / "checkpoint.json").write_text(json.dumps({"epoch": 2, "trace_points": 2}))
    resume.worker_through(worker, chief, 2)
    assert len(worker.trace.read_text().splitlines()) == 2


TF_KERAS_NAMES = textwrap.dedent(
    """
    import json, os
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf
    from launcher.job.training import checkpoints, jobstate, legacy

    def model():
        m = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])
        m.compile(tf.keras.optimizers.SGD(0.1, momentum=0.9), "mse", metrics=["mae"])
        return m

    stepped = model()
    stepped.fit(tf.ones((4, 3)), tf.ones((4, 2)), epochs=1, verbose=0)  # built by its first step
    tf.keras.backend.clear_session()
    built = model()
    legacy.build_optimizer(built)  # built from outside, as a resume does before any step
    known = jobstate.known_elsewhere(stepped)
    metrics = [v for m in stepped.metrics for v in m.variables]
    print(json.dumps({
        "tf_keras": legacy.is_tf_keras(stepped),
        "stepped": sorted(checkpoints.named_variables(stepped)),
        "built": sorted(checkpoints.named_variables(built)),
        "metrics_known": bool(metrics) and all(id(v) in known for v in metrics),
    }))
    """
)


@pytest.mark.slow
def test_a_tf_keras_optimizer_built_for_a_restore_names_its_slots_as_its_first_step_does(tmp_path):
    if importlib.util.find_spec("tf_keras") is None:  # not imported here: this process stays Keras 3's
        pytest.skip("tf_keras is not installed (pip install --no-deps tf_keras at TensorFlow's version)")
    done = subprocess.run(
        [sys.executable, "-c", TF_KERAS_NAMES],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["tf_keras"] and said["metrics_known"]
    assert said["stepped"] == said["built"], said
    assert "optimizer/SGD/m/dense/kernel:0" in said["built"] and "model/dense/kernel:0" in said["built"]
