"""Many workers, one run (issue 49), without TensorFlow: the cluster spec (TF_CONFIG, Slurm's node
list as SlurmClusterResolver reads it), the config's rules, the group of processes that ends
together, and the record of every worker's weights."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from launcher import proc
from launcher.errors import ConfigError
from launcher.record import layout
from launcher.record.store import runs
from launcher.run import config, workers
from launcher.run.composition import compose


def test_each_worker_gets_the_whole_cluster_and_its_own_index():
    addresses = workers.local_addresses([2222, 3333])
    assert json.loads(workers.tf_config(addresses, 1)) == {
        "cluster": {"worker": ["localhost:2222", "localhost:3333"]},
        "task": {"type": "worker", "index": 1},
    }
    ports = workers.free_ports(3)
    assert len(set(ports)) == 3 and all(p > 0 for p in ports)


def test_slurm_node_lists_expand_as_slurm_cluster_resolver_expands_them():
    # The examples of TensorFlow's slurm_cluster_resolver.py docstrings.
    assert workers.expand_hostlist("n[1-2],m5,o[3-4,6,7-9]") == ["n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"]
    assert workers.expand_hostlist("node[01-02]") == ["node01", "node02"]
    assert workers.expand_tasks_per_node("3(x2),2,1") == [3, 3, 2, 1]


def test_a_slurm_step_is_one_cluster_its_procid_the_worker_index():
    env = {
        "SLURM_JOB_ID": "1001",
        "SLURM_STEP_NODELIST": "b[2],a1",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "SLURM_PROCID": "3",
    }
    base = workers.slurm_ports(env)
    addresses, index = workers.slurm_cluster(env)
    # Nodes sorted, each node's tasks on consecutive ports from the base, as SlurmClusterResolver does.
    assert addresses == [f"a1:{base}", f"a1:{base + 1}", f"b2:{base}", f"b2:{base + 1}"]
    assert index == 3 and base == workers.SLURM_PORT_BASE + 16
    two_tasks = {"SLURM_JOB_ID": "7", "SLURM_NODELIST": "vm", "SLURM_TASKS_PER_NODE": "2", "SLURM_PROCID": "0"}
    base = workers.slurm_ports(two_tasks)
    assert workers.slurm_cluster(two_tasks)[0] == [f"vm:{base}", f"vm:{base + 1}"]


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["distribute.workers=0"], "distribute.workers must be a positive integer"),
        (["distribute.workers=two"], "distribute.workers must be a positive integer"),
        (["distribute.workers=2"], r"distribute.workers=2 runs your own code.*train=mnist trains on one worker"),
    ],
)
def test_distribute_workers_is_checked(overrides, message):
    with pytest.raises(ConfigError, match=message):
        config.validate(compose(overrides))


def test_more_than_one_worker_runs_locally_only(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    cfg = compose(["train=script", f"train.script={script}", "distribute.workers=2", "runtime=docker"])
    with pytest.raises(ConfigError, match="runtime=docker runs one container"):
        config.validate(cfg)
    config.validate(compose(["train=script", f"train.script={script}", "distribute.workers=2"]))


def test_the_worker_count_is_keyed_as_the_cluster_not_through_the_config_hash():
    one, two = compose([]), compose(["distribute.workers=2"])
    assert config.config_hash(one) == config.config_hash(two)
    assert workers.count(one) == 1 and workers.count(two) == 2
    assert workers.count({"train": {}}) == 1  # a config from before distribute existed


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_member_that_dies_ends_the_group_and_the_others_are_stopped(tmp_path):
    hang = (  # a worker stuck in a collective: the stop never reaches it
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])\ntime.sleep(120)"
    )
    members = [
        proc.Member(_python("import time; time.sleep(120)"), dict(os.environ), tmp_path / "0.log"),
        proc.Member(_python("print('dying'); raise SystemExit(3)"), dict(os.environ), tmp_path / "1.log"),
        proc.Member(_python(hang), dict(os.environ), tmp_path / "2.log"),
    ]
    started = time.monotonic()
    group = proc.run_group(members, dead_grace_s=1.0)
    assert time.monotonic() - started < 30
    assert group.first_failed == 1 and group.stop is None
    assert group.ended[1].returncode == 3 and (tmp_path / "1.log").read_text() == "dying\n"
    assert group.ended[0].returncode != 0  # asked to stop (SIGINT): it did
    assert group.ended[2].returncode == -9 and "worker 1 ended" in group.ended[2].killed  # ignored it: killed


def test_a_group_that_ends_well_has_no_failed_member(tmp_path):
    members = [proc.Member(_python(f"print({i})"), dict(os.environ), tmp_path / f"{i}.log") for i in range(2)]
    group = proc.run_group(members)
    assert [e.returncode for e in group.ended] == [0, 0] and group.first_failed is None


def _worker_run(tmp_path: Path, weights: list[str]) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    paths = layout.RunPaths(run_dir)
    facts = {"software": {"tensorflow": "2.21.0"}, "determinism": {}, "data": {}}
    for i, digest in enumerate(weights):
        w = paths.worker(i)
        w.run_dir.mkdir(parents=True, exist_ok=True)
        runs.write_json(w.result, {"weights_sha256": digest})
        cluster = {"worker": i, "implementation": "RING", "asked": "AUTO", "pinned_by_launcher": True}
        runs.write_json(w.job_facts, {**facts, "cluster": cluster})
    return run_dir


def _chief_fp(run_dir: Path) -> dict:
    fp = {"schema": 5, "hardware": {"cpu": {"model": "x"}, "gpus": []}, "code": {}, "host": {"hostname": "h"}}
    facts = runs.read_json(layout.RunPaths(run_dir).job_facts)
    return {**fp, "software": facts["software"], "determinism": {}, "data": {}, "cluster": facts["cluster"]}


def test_every_workers_weights_are_recorded_and_equal_ones_settle_clean(tmp_path):
    run_dir = _worker_run(tmp_path, ["w", "w"])
    fp, unclean = workers.settle(run_dir, _chief_fp(run_dir), 2)
    assert unclean is None
    assert fp["cluster"]["workers"] == 2 and fp["cluster"]["weights_sha256"] == ["w", "w"]
    assert fp["cluster"]["collective"] == "RING" and fp["cluster"]["pinned_by_launcher"]
    worker = runs.read_json(layout.RunPaths(run_dir).worker(1).fingerprint)
    assert worker["cluster"]["worker"] == 1 and not layout.RunPaths(run_dir).worker(1).job_facts.exists()


def test_a_worker_whose_weights_differ_from_the_chiefs_is_said_never_one_clean_result(tmp_path):
    run_dir = _worker_run(tmp_path, ["w", "w", "other"])
    fp, unclean = workers.settle(run_dir, _chief_fp(run_dir), 3)
    assert unclean == "worker 2's weights differ from the chief's: a determinism bug in the reduction"
    assert fp["cluster"]["weights_sha256"] == ["w", "w", "other"]


def test_a_heterogeneous_cluster_is_named(tmp_path):
    run_dir = _worker_run(tmp_path, ["w", "w"])
    other = {"schema": 5, "hardware": {"cpu": {"model": "y"}, "gpus": []}, "code": {}, "host": {"hostname": "g"}}
    runs.write_json(layout.RunPaths(run_dir).worker(1).fingerprint, other)  # its own launcher side (Slurm)
    fp, _ = workers.settle(run_dir, _chief_fp(run_dir), 2)
    assert fp["cluster"]["hardware"][0] != fp["cluster"]["hardware"][1]
    assert fp["cluster"]["heterogeneous"].startswith("a heterogeneous cluster: worker(s) 1 ran on other hardware")


def test_the_run_names_the_worker_that_died_first(tmp_path):
    paths = layout.RunPaths(tmp_path)
    killed = proc.GroupEnded([proc.Ended(-15), proc.Ended(-9)], None, first_failed=1)
    assert workers.ended(tmp_path, killed) == -9
    assert runs.read_json(paths.error)["message"] == (
        "worker 1 was killed by signal 9; the other workers were stopped, as a collective would wait for it for ever"
    )
    assert workers.ended(tmp_path, proc.GroupEnded([proc.Ended(0), proc.Ended(0)])) == 0


def test_a_refusal_every_worker_makes_is_the_runs_one_line(tmp_path):
    paths = layout.RunPaths(tmp_path)
    (tmp_path / layout.WORKERS / "1").mkdir(parents=True)
    runs.write_json(paths.worker(1).error, {"type": "ConfigError", "message": "Keras 3's Model.fit does not run"})
    assert workers.ended(tmp_path, proc.GroupEnded([proc.Ended(1), proc.Ended(1)], None, first_failed=1)) == 1
    assert runs.read_json(paths.error)["message"] == "Keras 3's Model.fit does not run"


def test_a_refusal_over_the_worker_count_does_not_call_the_cluster_module_an_upgrade():
    from launcher.record.probe import key

    diffs = [("code.launcher.launcher.job.cluster", "not imported", "ab"), ("cluster.workers", 1, 2)]
    assert key.launcher_modules_changed(diffs) is None
    assert "launcher.job.cluster" in key.launcher_modules_changed(diffs[:1])
