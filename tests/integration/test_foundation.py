"""Real training runs through the real `launch` command (issue: Foundation)."""

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from launcher.errors import ExitCode
from tests.conftest import QUICK, TINY, quick_run
from tests.integration.test_compare_replay import concurrent_tiny_runs

pytestmark = pytest.mark.slow


def _runs(store: Path) -> list[Path]:
    return sorted(p for p in store.iterdir() if p.is_dir() and (p / "config.yaml").exists())


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def test_strict_run_twice_gives_identical_weights(tiny_runs):
    first = tiny_runs[0]  # the same strict run twice (shared: tests/conftest.py)
    a, b = (r["run"] for r in tiny_runs)
    ra, rb = _json(a / "result.json"), _json(b / "result.json")
    assert ra["weights_sha256"] == rb["weights_sha256"]
    assert ra["layer_sha256"] == rb["layer_sha256"]
    assert (a / "metrics.jsonl").read_text() == (b / "metrics.jsonl").read_text()
    assert ra["weights_sha256"] in first["stdout"]  # the one-line summary shows it
    for run in (a, b):
        names = {p.name for p in run.iterdir()}
        assert {
            "config.yaml",
            "fingerprint.json",
            "metrics.jsonl",
            "result.json",
            "log.txt",
            "weights.weights.h5",
            "manifest.json",
            "status.json",
        } <= names
        assert _json(run / "status.json")["state"] == "complete"
        assert yaml.safe_load((run / "config.yaml").read_text())["seed"] == 0


def test_different_seeds_give_different_weights(shared_root, tiny_runs):
    # tiny_runs' config with seed 1: a run test_compare_replay.py launches beside two others, shared.
    a, b = concurrent_tiny_runs(shared_root)["runs"]["1"], tiny_runs[0]["run"]
    assert yaml.safe_load((a / "config.yaml").read_text())["seed"] == 1
    assert yaml.safe_load((b / "config.yaml").read_text())["seed"] == 0
    assert _json(a / "result.json")["weights_sha256"] != _json(b / "result.json")["weights_sha256"]


def test_off_runs_record_their_drawn_seed(launch, store, mnist_npz):
    for _ in range(2):  # TINY: 3 steps (the seed is drawn before the first)
        quick_run(launch, store, mnist_npz, "determinism=off", "train.max_samples=300")
    seeds = []
    for run in _runs(store):
        seed = yaml.safe_load((run / "config.yaml").read_text())["seed"]
        assert isinstance(seed, int)
        assert _json(run / "result.json")["seed"] == seed
        assert _json(run / "fingerprint.json")["determinism"]["seed"] == seed
        seeds.append(seed)
    assert seeds[0] != seeds[1]


PROBE = textwrap.dedent(
    """
    import json, os, random
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.framework import config as tf_config
    import launcher

    def probe(cfg, seed):
        facts = {
            "seed_arg": seed,
            "launcher_seed": launcher.seed(),
            "env": {k: os.environ.get(k) for k in ("PYTHONHASHSEED", "TF_DETERMINISTIC_OPS",
                    "TF_CUDNN_DETERMINISTIC", "CUBLAS_WORKSPACE_CONFIG", "TF_ENABLE_ONEDNN_OPTS")},
            "hash": hash("reproducible"),
            "op_determinism": tf_config.is_op_determinism_enabled(),
            "intra": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter": tf.config.threading.get_inter_op_parallelism_threads(),
            "random": random.random(),
            "numpy": float(np.random.rand()),
            "tf_global_seed": float(tf.random.uniform([])),
            "tf_global_generator": float(tf.random.get_global_generator().normal([])),
        }
        (launcher.output_dir() / "facts.json").write_text(json.dumps(facts, sort_keys=True))
        model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])
        launcher.record_model(model)
        return {"answer": 42}
    """
)


def _probe_run(launch, store, tmp_path, *overrides):
    (tmp_path / "probe_task.py").write_text(PROBE)
    done = launch("train=custom", "train.entrypoint=probe_task:probe", f"store.root={store}", *overrides, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = _runs(store)[-1]
    return run, _json(run / "outputs" / "facts.json")


def test_strict_applies_every_setting_in_the_job_process(launch, store, tmp_path):
    run, facts = _probe_run(
        launch,
        store,
        tmp_path,
        "determinism=strict",
        "+seed=5",
        "determinism.intra_op_threads=2",
        "determinism.inter_op_threads=1",
    )
    assert facts["seed_arg"] == facts["launcher_seed"] == 5
    assert facts["env"] == {
        "PYTHONHASHSEED": "5",
        "TF_DETERMINISTIC_OPS": "1",
        "TF_CUDNN_DETERMINISTIC": "1",
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "TF_ENABLE_ONEDNN_OPTS": "1",
    }
    assert facts["op_determinism"] is True
    assert (facts["intra"], facts["inter"]) == (2, 1)
    effective = _json(run / "fingerprint.json")["determinism"]
    assert effective["op_determinism"] is True and effective["intra_op_threads"] == 2
    result = _json(run / "result.json")
    assert result["final_metrics"] == {"answer": 42.0}
    assert result["weights_sha256"] and "facts.json" in result["outputs"]
    # Every random source repeats, including the global tf.random.Generator and str hashes.
    _, again = _probe_run(
        launch,
        store,
        tmp_path,
        "determinism=strict",
        "+seed=5",
        "determinism.intra_op_threads=2",
        "determinism.inter_op_threads=1",
    )
    assert again == facts


def test_seeded_seeds_everything_without_op_determinism(launch, store, tmp_path):
    _, facts = _probe_run(launch, store, tmp_path, "determinism=seeded", "+seed=9")
    assert facts["env"]["PYTHONHASHSEED"] == "9" and facts["env"]["TF_DETERMINISTIC_OPS"] is None
    assert facts["op_determinism"] is False
    _, again = _probe_run(launch, store, tmp_path, "determinism=seeded", "+seed=9")
    assert again == facts
    _, other = _probe_run(launch, store, tmp_path, "determinism=seeded", "+seed=10")
    assert other["tf_global_generator"] != facts["tf_global_generator"]
    assert other["hash"] != facts["hash"]


SCRIPT = textwrap.dedent(
    """
    import os, sys
    import launcher
    out = os.environ["LAUNCH_OUTPUT_DIR"]
    with open(os.path.join(out, "args.txt"), "w") as f:
        f.write(" ".join(sys.argv[1:]) + " name=" + __name__)
    """
)


def test_an_unmodified_script_runs_as_main_with_its_arguments(launch, store, tmp_path):
    script = tmp_path / "my train.py"
    script.write_text(SCRIPT)
    done = launch(
        "train=script", f"train.script={script}", "train.args=[--epochs,3]", f"store.root={store}", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    run = _runs(store)[-1]
    assert (run / "outputs" / "args.txt").read_text() == "--epochs 3 name=__main__"
    assert "args.txt" in _json(run / "result.json")["outputs"]
    assert _json(run / "fingerprint.json")["code"]["script_sha256"]


def test_a_failing_script_marks_the_run_failed_never_complete(launch, store, tmp_path):
    script = tmp_path / "boom.py"
    script.write_text("raise RuntimeError('boom at step 3')\n")
    done = launch("train=script", f"train.script={script}", f"store.root={store}")
    assert done.returncode == 1
    assert "FAILED: RuntimeError: boom at step 3" in done.stdout
    run = _runs(store)[-1]
    assert _json(run / "status.json")["state"] == "failed"
    assert not (run / "manifest.json").exists() and not (run / "result.json").exists()


@pytest.mark.parametrize(
    "overrides,message,code",
    [
        (["train.data=/no/such.npz"], "does not exist", ExitCode.USAGE),
        (["train.data=/etc/passwd"], "/etc/passwd is not an .npz file (not a zip archive)", ExitCode.USAGE),
        (["train.epochs=0"], "train.epochs must be a positive integer", ExitCode.USAGE),
        (["train.nope=1"], "Could not override 'train.nope'", ExitCode.USAGE),
        (["store.root=/proc/no-store"], "cannot create store", ExitCode.ENVIRONMENT),  # the machine's, not input
    ],
)
def test_bad_input_is_one_line_without_a_run(launch, tmp_path, overrides, message, code):
    done = launch(f"store.root={tmp_path}", *overrides)
    assert done.returncode == code
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not any(p.is_dir() for p in tmp_path.iterdir())


def test_data_that_is_not_mnist_fails_the_run_cleanly(launch, store, tmp_path):
    # MNIST's layout, so the launcher's check passes; the job's check of every value does not.
    import numpy as np

    bad = tmp_path / "bad.npz"
    np.savez(
        bad,
        x_train=np.zeros((4, 28, 28), np.uint8),
        y_train=np.full(4, 11, np.uint8),
        x_test=np.zeros((2, 28, 28), np.uint8),
        y_test=np.zeros(2, np.uint8),
    )
    done = launch(f"train.data={bad}", f"store.root={store}", *QUICK)
    assert done.returncode == 1
    assert "y_train must hold integer labels 0..9" in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    run = _runs(store)[-1]
    assert _json(run / "status.json")["state"] == "failed" and not (run / "manifest.json").exists()


def test_idx_directory_trains(launch, store, mnist_idx_dir):
    quick_run(launch, store, mnist_idx_dir, "train.max_samples=300")  # TINY: what is read is the point
    run = _runs(store)[-1]
    assert len(_json(run / "fingerprint.json")["data"]) == 4


def test_hostile_paths_for_store_and_data(launch, weird_dir, mnist_npz):
    from tests.conftest import q

    data = weird_dir / "mn'ist.npz"
    data.write_bytes(mnist_npz.read_bytes())
    done = launch(f"train.data={q(data)}", f"store.root={q(weird_dir / 'runs')}", *TINY)
    assert done.returncode == 0, done.stderr[-2000:]
    run = _runs(weird_dir / "runs")[-1]
    recorded = _json(run / "fingerprint.json")["data"]  # train.data is absolute in the config: recorded so
    (name,) = [n for n in recorded if n.endswith("mn'ist.npz")]
    assert recorded[name] == __import__("hashlib").sha256(data.read_bytes()).hexdigest()
