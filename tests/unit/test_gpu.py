"""The GPU request check and GPU slots, decided from recorded ``docker info`` and ``nvidia-smi``.

``recorded/docker-info-runc.json`` is this machine's daemon (Docker 20.10, no NVIDIA
toolkit), trimmed to the fields that matter. No GPU host was at hand: the two other
``docker-info-*.json`` are that recording with what a GPU host adds, written by hand
(``nvidia-ctk runtime configure`` adds the ``nvidia`` runtime; a CDI-enabled Docker 28
lists ``nvidia.com/gpu=...`` devices). ``nvidia-smi-query.csv`` lists two A100s.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from launcher.docker import gpus as docker_gpus
from launcher.errors import ConfigError, ExitCode, GpuUnavailable
from launcher.record.probe import probes
from launcher.run import gpus
from launcher.sweep import slots

RECORDED = Path(__file__).parent / "recorded"
A100S = probes.parse_nvidia_smi_query((RECORDED / "nvidia-smi-query.csv").read_text())
UUID0 = "GPU-6a3c2f7e-1c2b-4a9e-9d4f-0c1e2a3b4c5d"
URL = "unix:///var/run/docker.sock"


def info(name: str) -> dict:
    return json.loads((RECORDED / f"docker-info-{name}.json").read_text())


def cfg(runtime: str = "docker", image_gpus: bool = True):
    return OmegaConf.create({"runtime": {"name": runtime}, "image": {"name": "tf-gpu", "gpus": image_gpus}})


# ---------------------------------------------------------------- the daemon (pure)
def test_a_daemon_without_the_nvidia_toolkit_cannot_give_gpus():
    assert docker_gpus.evidence(info("runc"), None) == []
    assert docker_gpus.missing(info("runc"), None) == (
        "no NVIDIA container runtime (runtimes: io.containerd.runc.v2, io.containerd.runtime.v1.linux, "
        "runc; no nvidia-container-runtime-hook, no CDI GPU device)"
    )


def test_the_nvidia_runtime_a_cdi_gpu_or_the_hook_each_suffice():
    assert docker_gpus.evidence(info("nvidia-runtime"), None) == ["runtime nvidia"]
    assert docker_gpus.evidence(info("cdi"), None) == [
        "CDI device nvidia.com/gpu=0",
        "CDI device nvidia.com/gpu=1",
        "CDI device nvidia.com/gpu=all",
    ]
    hook = "/usr/bin/nvidia-container-runtime-hook"
    assert docker_gpus.evidence(info("runc"), hook) == [f"nvidia-container-runtime-hook at {hook}"]
    for name, found in (("nvidia-runtime", None), ("cdi", None), ("runc", hook)):
        assert docker_gpus.missing(info(name), found) is None


def test_a_cdi_device_of_another_vendor_is_no_gpu():
    other = {**info("runc"), "DiscoveredDevices": [{"ID": "intel.com/gpu=card0", "Source": "cdi"}]}
    assert docker_gpus.missing(other, None) is not None


def test_the_hook_is_found_on_path_or_where_the_toolkit_installs_it(tmp_path, monkeypatch):
    hook = tmp_path / docker_gpus.HOOK
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    monkeypatch.setattr(docker_gpus, "HOOK_DIRS", ())
    assert docker_gpus.find_hook(str(tmp_path)) == str(hook)
    assert docker_gpus.find_hook(str(tmp_path / "elsewhere")) is None


def test_only_a_unix_socket_daemon_is_this_machine():
    assert docker_gpus.local_daemon(URL)
    assert not docker_gpus.local_daemon("tcp://gpu-box:2376")
    assert not docker_gpus.local_daemon("ssh://me@gpu-box")


# ---------------------------------------------------------------- the request (pure)
def facts(daemon: str | None, gpu_rows=(), local: bool = True) -> gpus.Facts:
    missing = docker_gpus.missing(info(daemon), None) if daemon else None
    return gpus.Facts(list(gpu_rows), missing, URL, local)


def test_docker_gpus_on_this_machine_are_refused_naming_what_is_missing_and_the_way_out():
    reason = gpus.refusal(cfg(), None, facts("runc"))
    assert reason.startswith(f"image.gpus=true asks Docker for GPUs, but the daemon at {URL} has no NVIDIA")
    assert "nvidia-smi finds no GPU here" in reason
    assert "image.gpus=false to run the image on the CPU" in reason
    assert "\n" not in reason


def test_docker_gpus_need_the_runtime_and_a_gpu():
    assert gpus.refusal(cfg(), None, facts("runc", A100S)) is not None  # GPUs, no toolkit
    no_gpu = gpus.refusal(cfg(), None, facts("nvidia-runtime", []))  # toolkit, no GPU
    assert no_gpu == (
        "image.gpus=true asks Docker for GPUs, but nvidia-smi finds no GPU here: "
        "add image.gpus=false to run the image on the CPU"
    )
    assert gpus.refusal(cfg(), None, facts("nvidia-runtime", A100S)) is None
    assert gpus.refusal(cfg(), None, facts("cdi", A100S)) is None
    # A remote daemon's GPUs are not this machine's: only its runtime can be checked.
    assert gpus.refusal(cfg(), None, facts("nvidia-runtime", [], local=False)) is None


def test_no_gpu_request_is_never_refused():
    for config in (cfg(image_gpus=False), cfg(runtime="local"), cfg(runtime="local", image_gpus=True)):
        assert gpus.refusal(config, None, facts("runc")) is None
        assert gpus.refusal(config, "", gpus.Facts()) is None
        assert gpus.refusal(config, "-1", gpus.Facts()) is None


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (None, []),
        ("", []),
        ("-1", []),
        ("0", ["0"]),
        ("1,0", ["1", "0"]),
        ("0,-1,1", ["0"]),
        (" 1 , GPU-6a3c ", ["1", "GPU-6a3c"]),
        ("MIG-abc", ["MIG-abc"]),
    ],
)
def test_cuda_visible_devices_is_read_as_cuda_reads_it(value, named):
    assert gpus.named_devices(value) == named


def test_cuda_visible_devices_naming_a_missing_gpu_is_refused():
    local = cfg(runtime="local")
    reason = gpus.refusal(local, "0", gpus.Facts(gpus=[]))
    assert reason == (
        "CUDA_VISIBLE_DEVICES=0 names GPU 0, but nvidia-smi finds no GPU here: "
        "unset CUDA_VISIBLE_DEVICES (or set it to -1) to run on the CPU"
    )
    reason = gpus.refusal(local, "1,2", gpus.Facts(gpus=A100S))
    assert reason.startswith(f"CUDA_VISIBLE_DEVICES=1,2 names GPU 2, but nvidia-smi lists GPU 0 ({UUID0}), GPU 1")
    assert "name a listed GPU" in reason
    assert gpus.refusal(local, "GPU-0000", gpus.Facts(gpus=A100S)) is not None
    assert gpus.refusal(local, "MIG-1234", gpus.Facts(gpus=A100S)) is not None  # MIG is Disabled


def test_cuda_visible_devices_naming_listed_gpus_is_accepted():
    local = cfg(runtime="local")
    for value in ("0", "1,0", "GPU-6a3c", UUID0, "gpu-9B8A", "0,-1,7"):
        assert gpus.refusal(local, value, gpus.Facts(gpus=A100S)) is None, value
    mig = [{**A100S[0], "mig_mode": "Enabled"}]
    assert gpus.refusal(local, "MIG-1234", gpus.Facts(gpus=mig)) is None


# ---------------------------------------------------------------- the probe is thin
def test_a_plain_local_run_probes_nothing(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("probed")

    monkeypatch.setattr(probes, "gpu_facts", forbidden)
    monkeypatch.setattr(probes, "gpus", forbidden)
    monkeypatch.setattr(docker_gpus, "probe", forbidden)
    gpus.check(cfg(runtime="local"), {})
    gpus.check(cfg(image_gpus=False), {"CUDA_VISIBLE_DEVICES": "-1"})


def listed(rows, source="nvml"):
    """``probes.gpu_facts`` as it answers on a machine whose ``source`` lists ``rows``."""
    return lambda topology=True: probes.gpu_record(source, list(rows), "12.4", [])


def test_check_raises_gpu_unavailable_from_what_it_probed(monkeypatch):
    monkeypatch.setattr(probes, "gpu_facts", listed([], None))
    monkeypatch.setattr(docker_gpus, "probe", lambda: (info("runc"), None, True))
    with pytest.raises(GpuUnavailable) as raised:
        gpus.check(cfg(), {})
    assert raised.value.exit_code == ExitCode.ENVIRONMENT and "image.gpus=false" in str(raised.value)
    with pytest.raises(GpuUnavailable):
        gpus.check(cfg(runtime="local"), {"CUDA_VISIBLE_DEVICES": "3"})
    monkeypatch.setattr(probes, "gpu_facts", listed(A100S))
    monkeypatch.setattr(docker_gpus, "probe", lambda: (info("nvidia-runtime"), None, True))
    gpus.check(cfg(), {"CUDA_VISIBLE_DEVICES": "1"})
    gpus.check_all([cfg(), cfg(runtime="local"), cfg()], {})


# ---------------------------------------------------------------- GPU slots
def test_gpu_slots_from_recorded_nvidia_smi_name_each_gpu_by_uuid():
    got = slots.plan("auto", A100S, list(range(64)))
    assert [(s.device, s.env, s.cpus) for s in got] == [
        ("gpu 0", {"CUDA_VISIBLE_DEVICES": UUID0}, None),
        ("gpu 1", {"CUDA_VISIBLE_DEVICES": "GPU-9b8a7c6d-5e4f-3a2b-1c0d-e9f8a7b6c5d4"}, None),
    ]
    assert [s.device for s in slots.plan(1, A100S, [0, 1])] == ["gpu 0"]
    assert slots.Slot.from_dict(got[1].to_dict()) == got[1]


def test_jobs_asking_for_gpus_get_gpu_slots_or_a_refusal():
    assert [s.device for s in slots.plan("auto", A100S, [0, 1], need_gpus=True)] == ["gpu 0", "gpu 1"]
    with pytest.raises(GpuUnavailable, match="no GPU is visible here for a GPU slot .* image.gpus=false"):
        slots.plan("auto", [], [0, 1], need_gpus=True)
    assert [s.device for s in slots.plan("auto", [], [0, 1])] == ["cpu 0", "cpu 1"]


# ---------------------------------------------------------------- a run never stays "running"
def test_an_unexpected_error_after_the_run_exists_marks_it_failed(tmp_path, monkeypatch):
    from launcher.record.store import runs
    from launcher.run import composition, pipeline

    def broken(*args, **kwargs):
        raise RuntimeError("500 Server Error: could not select device driver")

    monkeypatch.setattr(pipeline, "execute", broken)
    with pytest.raises(RuntimeError):
        pipeline.run(composition.compose([f"store.root={tmp_path}"]))
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    status = runs.status(run_dir)
    assert status["state"] == "failed" and "could not select device driver" in status["error"]


# ---------------------------------------------------------------- the refusal names who looked
def test_the_refusal_names_the_source_that_listed_the_gpus(monkeypatch):
    local = cfg(runtime="local")
    by_nvml = gpus.refusal(local, "2", gpus.Facts(gpus=A100S, source="nvml"))
    assert by_nvml.startswith(f"CUDA_VISIBLE_DEVICES=2 names GPU 2, but NVML lists GPU 0 ({UUID0}), GPU 1")
    assert "NVML finds no GPU here" in gpus.refusal(local, "0", gpus.Facts(gpus=[], source="nvml"))
    neither = gpus.refusal(cfg(), None, gpus.Facts(gpus=[], source=None))
    assert neither == (
        "image.gpus=true asks Docker for GPUs, but neither NVML nor nvidia-smi finds a GPU here: "
        "add image.gpus=false to run the image on the CPU"
    )
    # check() passes on the source it probed
    monkeypatch.setattr(probes, "gpu_facts", listed(A100S, "nvml"))
    with pytest.raises(GpuUnavailable, match="but NVML lists GPU 0"):
        gpus.check(local, {"CUDA_VISIBLE_DEVICES": "5"})


def test_the_gpu_request_check_and_the_slots_read_the_same_probe(monkeypatch):
    """``runtime.slots=auto`` on the recorded H100: one slot, named by the UUID the refusal lists."""
    h100 = probes.parse_nvidia_smi_query((Path(__file__).parent.parent / "data/nvidia-smi-h100/query.txt").read_text())
    monkeypatch.setattr(probes, "gpu_facts", listed(h100))
    (slot,) = slots.plan("auto", probes.gpus(), list(range(16)))
    assert (slot.device, slot.env) == ("gpu 0", {"CUDA_VISIBLE_DEVICES": "GPU-11111111-2222-3333-4444-555555555555"})
    gpus.check(cfg(runtime="local"), slot.env)  # the slot's own device is accepted
    with pytest.raises(ConfigError, match="runtime.slots=2 but this machine has 1 GPU"):
        slots.plan(2, probes.gpus(), list(range(16)))
    with pytest.raises(GpuUnavailable, match=r"CUDA_VISIBLE_DEVICES=1 names GPU 1, but NVML lists GPU 0 \(GPU-1111"):
        gpus.check(cfg(runtime="local"), {"CUDA_VISIBLE_DEVICES": "1"})
