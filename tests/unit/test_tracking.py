"""MLflow tracking (``tracking=mlflow``): what a run, a sweep and a verdict become in MLflow,
logged for real into a SQLite tracking store, and the promise that tracking never fails or
touches a run. The runs here are written by hand and sealed (no training)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from launcher.record import layout, tracking
from launcher.record.probe import fingerprint, key
from launcher.record.store import runs
from launcher.run import composition, config
from tests import factories

CFG = {
    "train": {"name": "mnist", "epochs": 2, "data": "sample"},
    "determinism": {"level": "strict", "intra_op_threads": 1},
    "seed": 7,
    "store": {"root": "./runs"},
    "tracking": {"name": "mlflow", "uri": None, "experiment": None},
}


def sealed_run(store: Path, cfg: dict = CFG, status: str = "complete", name: str = "20261123-101500-aaaaaa") -> Path:
    """A run directory as the pipeline leaves it: config, fingerprint, metrics, result, sealed."""
    lines = [{"epoch": 1, "loss": 2.0, "accuracy": 0.5}, {"epoch": 2, "loss": 1.5, "accuracy": 0.625}]
    return factories.sealed_run(
        store,
        name,
        config=cfg,
        fingerprint=fingerprint.collect(dict(os.environ), str(store), "c" * 64),
        metrics=lines,
        result={"weights_sha256": "ab" * 32, "final_metrics": lines[-1]} if status == "complete" else None,
        state=status,
        status={"error": "job exited with status 1"},
    )


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Path:
    """One store (one MLflow database: creating one takes seconds) for the tests that log."""
    return tmp_path_factory.mktemp("store")


@pytest.fixture
def store(shared: Path, request) -> tuple[Path, dict]:
    """The shared store, and a config whose experiment is this test's own."""
    return shared, {**CFG, "tracking": {"name": "mlflow", "uri": None, "experiment": request.node.name}}


def client(store: Path):
    import mlflow

    return mlflow.MlflowClient(f"sqlite:///{store / tracking.DB}")


def all_runs(store: Path, experiment: str) -> list:
    exp = client(store).get_experiment_by_name(experiment)
    return client(store).search_runs([exp.experiment_id]) if exp else []


# ---------------------------------------------------------------- pure
def test_target_defaults_to_a_database_in_the_store_and_the_task_as_experiment(tmp_path):
    t = tracking.target(CFG, tmp_path)
    assert t.uri == f"sqlite:///{tmp_path / 'mlflow.db'}" and t.experiment == "mnist"
    assert t.artifact_location == (tmp_path / "mlartifacts").as_uri()  # never the working directory
    server = {**CFG, "tracking": {"name": "mlflow", "uri": "http://mlflow:5000", "experiment": "cnn"}}
    assert tracking.target(server, tmp_path) == tracking.Target("http://mlflow:5000", "cnn", None)
    assert tracking.target({**CFG, "tracking": {"name": "none"}}, tmp_path) is None
    assert tracking.target({"train": {"name": "mnist"}}, tmp_path) is None  # a run from before tracking


def test_params_metrics_and_tags_of_a_run():
    p = tracking.params(CFG)
    assert p["train.epochs"] == "2" and p["determinism.level"] == "strict" and p["seed"] == "7"
    assert p["tracking.uri"] == "None" and "train" not in p
    assert tracking.params({"a": {"b": [1, 2]}, "c": {}}) == {"a.b": "[1, 2]", "c": "{}"}
    lines = [{"epoch": 1, "loss": 2.0, "ok": True, "note": "x"}, {"epoch": 2, "loss": 1.5}, {"loss": 9.0}]
    assert tracking.epoch_metrics(lines) == [("loss", 2.0, 1), ("loss", 1.5, 2)]
    assert tracking.epoch_metrics([{"epoch": 1, "f1@0.5": 0.5, "val/loss": 1.0}]) == [
        ("f1_0.5", 0.5, 1),
        ("val/loss", 1.0, 1),
    ]
    tags = tracking.run_tags(
        Path("/s/20261123-101500-aaaaaa"),
        CFG,
        {"config_sha256": "c" * 64},
        {"weights_sha256": "ab" * 32},
        {"state": "complete"},
        "k" * 64,
    )
    assert tags["launch.run_id"] == "20261123-101500-aaaaaa" and tags["mlflow.runName"] == "20261123-101500-aaaaaa"
    assert tags["launch.key_sha256"] == "k" * 64 and tags["launch.weights_sha256"] == "ab" * 32
    assert tags["launch.level"] == "strict" and tags["launch.seed"] == "7" and tags["launch.status"] == "complete"
    assert "launch.error" not in tags
    summary = {"metrics": {"loss": {"n": 2, "mean": 1.5, "std": 0.5, "min": 1.0, "max": 2.0}}, "distinct_weights": 2}
    assert tracking.sweep_metrics(summary) == {
        "loss_mean": 1.5,
        "loss_std": 0.5,
        "loss_min": 1.0,
        "loss_max": 2.0,
        "distinct_weights": 2.0,
    }


def test_tracking_settings_stay_out_of_the_config_hash():
    base = OmegaConf.create({**CFG, "tracking": {"name": "none"}})
    other = OmegaConf.create({**CFG, "tracking": {"name": "mlflow", "uri": "http://x:1", "experiment": "e"}})
    assert config.config_hash(base) == config.config_hash(other)


def test_the_tracking_group_composes_and_an_unknown_tracker_is_refused():
    assert composition.compose([]).tracking.name == "none"
    composed = composition.compose(["tracking=mlflow", "tracking.experiment=cnn"])
    assert composed.tracking.name == "mlflow" and composed.tracking.experiment == "cnn"
    cfg = composition.compose(["tracking=mlflow", "tracking.name=wandb"])
    with pytest.raises(Exception, match="tracking='wandb' is unknown; choose one of none, mlflow"):
        config.validate(cfg)


# ---------------------------------------------------------------- real MLflow, SQLite store
def test_a_sealed_run_is_logged_with_its_history_tags_params_and_artifacts(store):
    root, cfg = store
    run = sealed_run(root, cfg, name="20261123-101500-000001")
    manifest = (run / layout.MANIFEST).read_bytes()
    rid = tracking.log_run(run)
    assert rid
    (r,) = all_runs(root, cfg["tracking"]["experiment"])
    c = client(root)
    assert r.info.run_id == rid and r.info.status == "FINISHED"
    assert [(m.step, m.value) for m in c.get_metric_history(rid, "loss")] == [(1, 2.0), (2, 1.5)]
    assert [(m.step, m.value) for m in c.get_metric_history(rid, "accuracy")] == [(1, 0.5), (2, 0.625)]
    tags = r.data.tags
    assert tags["launch.weights_sha256"] == "ab" * 32
    assert tags["launch.key_sha256"] == key.key_sha256(runs.read_json(run / "fingerprint.json"))
    assert tags["launch.run_id"] == run.name and tags["launch.seed"] == "7" and tags["launch.level"] == "strict"
    assert r.data.params["train.epochs"] == "2"
    assert sorted(a.path for a in c.list_artifacts(rid)) == ["config.yaml", "fingerprint.json", "result.json"]
    assert r.info.artifact_uri.startswith((root / "mlartifacts").as_uri())  # in the store, not the cwd
    assert (run / layout.MANIFEST).read_bytes() == manifest and runs.verify_seal(run)  # the run is untouched


def test_the_experiment_defaults_to_the_task(shared):
    run = sealed_run(shared, {**CFG, "train": {"name": "custom"}}, name="20261123-101500-000002")
    tracking.log_run(run)
    (r,) = all_runs(shared, "custom")
    assert r.data.tags["launch.run_id"] == run.name


def test_a_failed_run_is_logged_failed_without_key_or_weights(store):
    root, cfg = store
    run = sealed_run(root, cfg, status="failed", name="20261123-101500-000003")
    tracking.log_run(run)
    (r,) = all_runs(root, cfg["tracking"]["experiment"])
    assert r.info.status == "FAILED" and r.data.tags["launch.status"] == "failed"
    assert "launch.key_sha256" not in r.data.tags and r.data.tags["launch.error"] == "job exited with status 1"


def test_no_tracking_configured_means_no_mlflow_at_all(tmp_path):
    run = sealed_run(tmp_path, cfg={**CFG, "tracking": {"name": "none"}})
    assert tracking.log_run(run) is None
    assert not (tmp_path / tracking.DB).exists()


def _closed_port() -> int:
    """A local port nothing listens on, found now (a fixed one may be open on some machine)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with socket.socket() as probe:  # closed again: a connection is refused, not left waiting
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            pytest.skip(f"port {port} was taken between two calls; no closed port to test with")
    return port


def test_a_dead_server_is_one_warning_quickly_and_the_run_is_untouched(tmp_path, capsys):
    url = f"http://127.0.0.1:{_closed_port()}"
    down = {**CFG, "tracking": {"name": "mlflow", "uri": url, "experiment": None}}
    run = sealed_run(tmp_path, cfg=down)
    manifest = (run / layout.MANIFEST).read_bytes()
    started = time.monotonic()
    assert tracking.log_run(run) is None
    assert time.monotonic() - started < 60  # MLflow's own retries would take minutes
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"[launch] warning: MLflow tracking to {url} failed, the run is unaffected")
    assert "Connection refused" in err[0]
    assert (run / layout.MANIFEST).read_bytes() == manifest and runs.verify_seal(run)
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ  # restored: later jobs do not inherit it


def test_the_process_environment_is_left_as_it_was(store, monkeypatch):
    root, cfg = store
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "3")  # a user's own setting: used, and kept
    monkeypatch.setenv("KMP_INIT_AT_FORK", "TRUE")
    before = dict(os.environ)
    seen = {}

    def spy(client):
        seen.update({k: os.environ.get(k) for k in tracking.MLFLOW_ENV})
        os.environ["KMP_DUPLICATE_LIB_OK"] = "True"  # as sklearn does on import
        os.environ["KMP_INIT_AT_FORK"] = "FALSE"  # as joblib does
        return "ok"

    assert tracking._with_client(tracking.target(cfg, root), spy) == "ok"
    assert seen == {
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": "3",
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }
    assert dict(os.environ) == before


def test_a_sweep_is_a_parent_with_its_jobs_as_children_and_verdicts_are_tags(store):
    root, cfg = store
    a = sealed_run(root, {**cfg, "seed": 1}, name="20261123-101500-000004")
    b = sealed_run(root, {**cfg, "seed": 2}, name="20261123-101501-000005")
    sweep_dir = root / "sweeps" / "20261123-101459-000006"
    sweep_dir.mkdir(parents=True)
    summary = {
        "jobs": [{"num": 0, "run_dir": str(a)}, {"num": 1, "run_dir": str(b)}],
        "ok": True,
        "counts": {"complete": 2},
        "distinct_weights": 1,
        "metrics": {"loss": {"n": 2, "mean": 1.5, "std": 0.0, "min": 1.5, "max": 1.5}},
    }
    parent = tracking.log_sweep(sweep_dir, summary, {"overrides": ["+seed=1,2"], "swept": ["+seed"]})
    found = all_runs(root, cfg["tracking"]["experiment"])
    assert len(found) == 3
    children = [r for r in found if r.data.tags.get("mlflow.parentRunId") == parent]
    assert sorted(r.data.tags["launch.run_id"] for r in children) == [a.name, b.name]
    (top,) = [r for r in found if r.info.run_id == parent]
    assert top.data.metrics["loss_mean"] == 1.5 and top.data.metrics["loss_std"] == 0.0
    assert top.data.params["overrides"] == "+seed=1,2" and top.info.status == "FINISHED"

    tracking.tag_verdict([a, b], "REPRODUCED", {"by": "replay"})
    tracking.tag_sweep(sweep_dir, a, {"verify": "2 of 2 jobs reproduced"})
    tags = {r.data.tags["mlflow.runName"]: r.data.tags for r in all_runs(root, cfg["tracking"]["experiment"])}
    assert tags[a.name]["launch.verdict"] == "REPRODUCED" and tags[b.name]["launch.verdict.by"] == "replay"
    assert tags[f"sweep {sweep_dir.name}"]["launch.verify"] == "2 of 2 jobs reproduced"
