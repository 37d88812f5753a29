"""Every result-changing ``train.*`` key of every train config group changes ``config_sha256``.

The keys come from the config files themselves (``launcher/configs/train/*.yaml``), so a key
added to a group is held to the promise at once, and a key dropped from the hash (a mutant:
``train.learning_rate`` added to ``config.NOT_IN_HASH``) fails here. The only keys allowed to
leave the hash unchanged are those whose runs are shown bit-identical by a test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

import launcher
from launcher.run import composition, config

GROUPS = sorted(Path(launcher.__file__).parent.glob("configs/train/*.yaml"))

# Keys that cannot change a result, each with the test that shows the bits equal.
NOT_RESULT_CHANGING = {
    "train.observe": "test_user_code.py::test_gradient_tape_loop_over_bare_variables (observe=false: same params)",
    "train.save_weights": "test_user_code.py::test_the_trace_and_saved_weights_never_change_the_weights",
    "train.save_weights_max_mb": "the same test: only whether the copy is written",
}
# What a required (``???``) value is given, so the group composes.
REQUIRED = {"entrypoint": "tasks.train:main", "script": "train.py"}


def _keys(node, prefix: str) -> list[str]:
    """Dotted paths of the leaves of a config node (lists are leaves)."""
    if OmegaConf.is_dict(node):
        out = []
        for name in node:
            out += _keys(node._get_node(name), f"{prefix}.{name}")
        return out
    return [prefix]


def _other(value):
    """A different value of the same kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 2
    if isinstance(value, str):
        return value + "-other"
    if isinstance(value, list):
        return [*value, "--other"]
    if value is None:
        return 1
    raise AssertionError(f"no other value for {value!r}")


def _composed(group: Path) -> dict:
    raw = OmegaConf.load(group)
    fills = [f"train.{k}={v}" for k, v in REQUIRED.items() if k in raw and OmegaConf.is_missing(raw, k)]
    return OmegaConf.to_container(composition.compose([f"train={group.stem}", *fills]), resolve=False)


def _cases() -> list[tuple[str, str]]:
    cases = []
    for group in GROUPS:
        raw = OmegaConf.load(group)
        cases += [(group.stem, key) for key in _keys(raw, "train") if key != "train.name"]
    return cases


def test_every_train_group_is_found():
    assert {g.stem for g in GROUPS} >= {"mnist", "custom", "script"}
    assert len(_cases()) > 15


@pytest.mark.parametrize("group,key", _cases())
def test_a_train_key_changes_the_config_hash_unless_it_cannot_change_results(group, key):
    data = _composed(next(g for g in GROUPS if g.stem == group))
    *parents, leaf = key.split(".")
    node = data
    for name in parents:
        node = node[name]
    before = config.config_hash(data)
    node[leaf] = _other(node[leaf])
    changed = config.config_hash(data) != before
    if key in NOT_RESULT_CHANGING:
        assert not changed, f"{key} cannot change a result ({NOT_RESULT_CHANGING[key]}) but changes the config hash"
    else:
        assert changed, f"train={group}: {key} changes what a run computes but not config_sha256"


def test_the_not_result_changing_keys_are_exactly_the_train_keys_left_out_of_the_hash():
    left_out = {k for k in config.NOT_IN_HASH if k.startswith("train.")}
    assert left_out == set(NOT_RESULT_CHANGING)


# Docker-only settings that cannot change a result, each with why (config.NOT_IN_HASH_DOCKER).
DOCKER_NOT_RESULT_CHANGING = {
    "image.ca_bundle": "where pip trusts its index: the lockfile pins every wheel by hash",
    "image.index_url": "where the pinned wheels come from",
    "image.wheelhouse": "the same",
    "runtime.stop_timeout_s": "how long a stopped job gets before it is killed",
    "runtime.tmpfs_mb": "the size of the job's /tmp",
    "runtime.mounts": "where data is visible; what the job reads is hashed by content",
}
IMAGE_VALUES = {
    "image.ca_bundle": "/etc/ssl/corp.pem",
    "image.index_url": "https://pypi.corp/simple",
    "image.wheelhouse": "/wheels",
    "runtime.mounts": ["/data:/data"],
}


def _docker() -> dict:
    return OmegaConf.to_container(composition.compose(["runtime=docker"]), resolve=False)


@pytest.mark.parametrize("key", list(DOCKER_NOT_RESULT_CHANGING))
def test_where_a_docker_job_gets_its_wheels_and_how_it_is_stopped_leave_the_hash_alone(key):
    data = _docker()
    before = config.config_hash(data)
    section, leaf = key.split(".")
    data[section][leaf] = IMAGE_VALUES.get(key) or _other(data[section][leaf])
    assert config.config_hash(data) == before, f"{key}: {DOCKER_NOT_RESULT_CHANGING[key]}"


@pytest.mark.parametrize("leaf", ["name", "lockfile", "base", "allow_unpinned", "gpus"])
def test_the_image_a_docker_job_runs_in_is_hashed_and_a_local_jobs_image_settings_are_not(leaf):
    docker = _docker()
    local = OmegaConf.to_container(composition.compose([]), resolve=False)
    hashes = config.config_hash(docker), config.config_hash(local)
    docker["image"][leaf] = local["image"][leaf] = _other(docker["image"][leaf])
    assert config.config_hash(docker) != hashes[0]
    assert config.config_hash(local) == hashes[1]  # the image settings do not reach a local run


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("sweep", {"direction": "minimize", "metric": "val_loss"}),  # what a sweeper optimizes
        ("config_dir", {"path": "/elsewhere/conf", "files": ["train/mine.yaml"]}),  # the files are hashed apart
        ("tracking", {"name": "mlflow", "uri": "http://mlflow:5000"}),  # logs the sealed run
    ],
)
def test_what_a_run_cannot_compute_differently_by_leaves_the_hash_alone(key, value):
    data = OmegaConf.to_container(composition.compose([]), resolve=False)
    before = config.config_hash(data)
    data[key] = value
    assert config.config_hash(data) == before


@pytest.mark.parametrize(
    "overrides", [["runtime=docker"], ["train=notebook", "train.notebook=n.ipynb"], ["tracking=mlflow"]]
)
def test_each_task_runtime_and_tracker_the_launcher_offers_validates(overrides, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "n.ipynb").write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    config.validate(composition.compose(overrides))
