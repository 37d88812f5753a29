"""A GPU request this machine cannot meet is refused by the real `launch`, leaving nothing behind.

Fast (no training). On a machine whose daemon can give GPUs and that has GPUs, the
Docker refusals cannot happen and are skipped; `benchmarks/gpu_acceptance.py` is the
check for such a machine.
"""

from __future__ import annotations

import os

import pytest

from launcher.errors import ExitCode
from tests.conftest import q

DOCKER_GPU = ("train.epochs=1", "runtime=docker", "image=tf-gpu", "image.base=local")


def _docker_can_give_gpus() -> bool:
    from launcher.docker import gpus as docker_gpus
    from launcher.errors import DockerUnavailable
    from launcher.record.probe import probes

    try:
        info, hook, _ = docker_gpus.probe()
    except DockerUnavailable as exc:
        if os.environ.get("LAUNCH_REQUIRE_DOCKER"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    return docker_gpus.missing(info, hook) is None and bool(probes.gpus())


def _refused(done, store, start: str) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == ExitCode.ENVIRONMENT, done.stdout[-2000:] + done.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith(f"launch: error: {start}"), done.stderr
    assert list(store.iterdir()) == []  # no run directory, no index, no sweep


@pytest.mark.docker
def test_docker_gpu_request_is_one_line_and_leaves_no_run(launch, store):
    if _docker_can_give_gpus():
        pytest.skip("this daemon can give GPUs: nothing to refuse")
    done = launch(*DOCKER_GPU, f"store.root={q(store)}")
    _refused(done, store, "image.gpus=true asks Docker for GPUs, but ")
    assert "add image.gpus=false to run the image on the CPU" in done.stderr


@pytest.mark.docker
def test_sweep_asking_for_docker_gpus_is_refused_before_its_directory(launch, store):
    if _docker_can_give_gpus():
        pytest.skip("this daemon can give GPUs: nothing to refuse")
    done = launch("-m", "+seed=0,1", *DOCKER_GPU, f"store.root={q(store)}")
    _refused(done, store, "image.gpus=true asks Docker for GPUs, but ")


def test_cuda_visible_devices_naming_a_missing_gpu_is_refused(launch, store, mnist_npz):
    from launcher.record.probe import probes

    missing = len(probes.gpus()) + 7  # a GPU index this machine does not have
    done = launch(
        "train.epochs=1",
        f"train.data={q(mnist_npz)}",
        f"store.root={q(store)}",
        env={"CUDA_VISIBLE_DEVICES": str(missing)},
    )
    _refused(done, store, f"CUDA_VISIBLE_DEVICES={missing} names GPU {missing}, but ")
