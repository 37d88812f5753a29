"""Refuse a job that asks for GPUs this machine cannot give, before its run directory exists.

A job asks for GPUs in two ways: ``runtime=docker`` with ``image.gpus=true`` (the
daemon must have the NVIDIA container runtime, and this machine a GPU), and
``CUDA_VISIBLE_DEVICES`` naming devices (each must be a GPU that NVML, or
``nvidia-smi`` where NVML is missing, lists: ``record.probes.gpu_facts``). Asked for
and not there, the job would fail at container start (``could not select device
driver``) or, worse, run on the CPU without saying so. ``refusal`` decides from
recorded facts (pure); ``check`` gathers only the facts a config needs (no probe at
all for a plain local run) and raises ``GpuUnavailable``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from launcher.errors import GpuUnavailable
from launcher.record.probe import probes
from launcher.record.probe.probes import named_devices  # CUDA's reading of CUDA_VISIBLE_DEVICES

CPU_WAY_OUT = "add image.gpus=false to run the image on the CPU"


@dataclass(frozen=True)
class Facts:
    """What the check looked at. ``None`` fields were not needed, so not probed."""

    gpus: Sequence[dict] | None = None  # the GPUs listed (record.probes.gpu_facts()["gpus"])
    daemon_missing: str | None = None  # docker.gpus.missing(): what the daemon lacks, or None
    daemon_url: str = ""
    daemon_local: bool = True  # a local daemon's GPUs are this machine's GPUs
    source: str | None = "nvidia-smi"  # who listed the GPUs: record.probes.GPU_SOURCES, or None (neither answered)


def wants_docker_gpus(cfg: Mapping) -> bool:
    """True when the config asks Docker for GPUs (``runtime=docker image.gpus=true``)."""
    runtime, image = cfg.get("runtime") or {}, cfg.get("image") or {}
    return runtime.get("name") == "docker" and bool(image.get("gpus", False))


def _absent(device: str, gpus: Sequence[dict]) -> bool:
    if device.isdigit():
        return int(device) not in {int(g.get("index", i)) for i, g in enumerate(gpus)}
    if device.upper().startswith("MIG-"):  # MIG instances are not listed; a MIG-enabled GPU may hold it
        return not any(str(g.get("mig_mode", "")).lower() == "enabled" for g in gpus)
    return not any(str(g.get("uuid", "")).upper().startswith(device.upper()) for g in gpus)


def no_gpu(source: str | None) -> str:
    """That no GPU is here, said by the source that looked (``Facts.source``)."""
    if source is None:
        return "neither NVML nor nvidia-smi finds a GPU here"
    return f"{probes.SOURCE_NAMES.get(source, source)} finds no GPU here"


def _listed(gpus: Sequence[dict], source: str | None) -> str:
    if not gpus:
        return no_gpu(source)
    return f"{probes.SOURCE_NAMES.get(source, source)} lists " + ", ".join(
        f"GPU {g.get('index', i)} ({g.get('uuid', '?')})" for i, g in enumerate(gpus)
    )


def refusal(cfg: Mapping, cuda_visible: str | None, facts: Facts) -> str | None:
    """The one-line reason to refuse ``cfg`` on a machine with ``facts``; None to let it run."""
    docker = wants_docker_gpus(cfg)
    if docker and facts.daemon_missing is not None:
        more = f" and {no_gpu(facts.source)}" if facts.daemon_local and not facts.gpus else ""
        return (
            f"image.gpus=true asks Docker for GPUs, but the daemon at {facts.daemon_url} has "
            f"{facts.daemon_missing}{more}: {CPU_WAY_OUT}, or install the NVIDIA Container Toolkit"
        )
    if docker and facts.daemon_local and not facts.gpus:
        return f"image.gpus=true asks Docker for GPUs, but {no_gpu(facts.source)}: {CPU_WAY_OUT}"
    absent = [d for d in named_devices(cuda_visible) if _absent(d, facts.gpus or [])]
    if absent:
        name = "name a listed GPU, or " if facts.gpus else ""
        listed = _listed(facts.gpus or [], facts.source)
        return (
            f"CUDA_VISIBLE_DEVICES={cuda_visible} names GPU {', '.join(absent)}, but {listed}: "
            f"{name}unset CUDA_VISIBLE_DEVICES (or set it to -1) to run on the CPU"
        )
    return None


def gather(cfg: Mapping, cuda_visible: str | None) -> Facts:
    """The facts ``refusal`` needs for ``cfg``, and no more: nothing for a plain local run."""
    docker, named = wants_docker_gpus(cfg), bool(named_devices(cuda_visible))
    if not docker and not named:
        return Facts()
    found = probes.gpu_facts(topology=False)
    gpus, source = found["gpus"], found["gpu_source"]
    if not docker:
        return Facts(gpus=gpus, source=source)
    from launcher.docker import containers
    from launcher.docker import gpus as docker_gpus

    info, hook, local = docker_gpus.probe()
    return Facts(gpus, docker_gpus.missing(info, hook), containers.daemon_url(), local, source)


def check(cfg: Mapping, environ: Mapping[str, str] | None = None) -> None:
    """Raise ``GpuUnavailable`` when ``cfg`` asks for GPUs this machine cannot give."""
    cuda_visible = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    reason = refusal(cfg, cuda_visible, gather(cfg, cuda_visible))
    if reason is not None:
        raise GpuUnavailable(reason)


def check_all(cfgs: Sequence[Mapping], environ: Mapping[str, str] | None = None) -> None:
    """``check`` for the jobs of a sweep, probing once per kind of request."""
    kinds = {wants_docker_gpus(cfg): cfg for cfg in cfgs}
    for cfg in kinds.values():
        check(cfg, environ)
