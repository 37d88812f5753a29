"""Can the Docker daemon give a container GPUs? Decided from ``docker info``, before a run.

``image.gpus=true`` asks the daemon for every GPU (``--gpus all``, a device request
with the ``gpu`` capability). The daemon grants it only when it has a device driver
for that capability: Docker 19.03-27 registers its NVIDIA driver when the NVIDIA
Container Toolkit's ``nvidia-container-runtime-hook`` is on the daemon's PATH (moby
``daemon/nvidia_linux.go``); ``nvidia-ctk runtime configure`` also adds an
``nvidia`` runtime, which ``docker info`` lists; newer daemons may serve GPUs as CDI
devices (``nvidia.com/gpu=...`` in ``DiscoveredDevices``). Without any of these the
container fails at start with ``could not select device driver "" with capabilities:
[[gpu]]``. ``evidence`` and ``missing`` are pure (tested on recorded ``docker info``);
``probe`` asks the daemon, through ``containers``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping

HOOK = "nvidia-container-runtime-hook"
# Where the toolkit installs the hook, in case the daemon's PATH is wider than ours.
HOOK_DIRS = ("/usr/bin", "/usr/local/bin", "/usr/sbin", "/usr/local/sbin")


def evidence(info: Mapping, hook_path: str | None) -> list[str]:
    """What says the daemon can give GPUs (empty when nothing does).

    ``info`` is ``docker info`` as the Engine API returns it; ``hook_path`` is where
    the NVIDIA hook was found on the daemon's host (None: not found, or not looked
    for because the daemon is remote).
    """
    found = []
    runtimes = info.get("Runtimes") or {}
    for name in sorted(runtimes):
        path = str((runtimes[name] or {}).get("path", ""))
        if "nvidia" in name.lower() or "nvidia" in path.lower():
            found.append(f"runtime {name}")
    for device in info.get("DiscoveredDevices") or []:
        ident = str((device or {}).get("ID", ""))
        if ident.startswith("nvidia.com/gpu"):
            found.append(f"CDI device {ident}")
    if hook_path:
        found.append(f"{HOOK} at {hook_path}")
    return found


def missing(info: Mapping, hook_path: str | None) -> str | None:
    """None when the daemon can give GPUs; else what it lacks, in words, for one line."""
    if evidence(info, hook_path):
        return None
    runtimes = ", ".join(sorted(info.get("Runtimes") or {})) or "none"
    return f"no NVIDIA container runtime (runtimes: {runtimes}; no {HOOK}, no CDI GPU device)"


def local_daemon(url: str) -> bool:
    """True when ``url`` (DOCKER_HOST) is a daemon on this machine: its files are ours to look at."""
    return url.startswith("unix://") or url.startswith("npipe://")


def find_hook(path: str | None = None) -> str | None:
    """Where ``nvidia-container-runtime-hook`` is on this machine, or None."""
    search = os.pathsep.join([path if path is not None else os.environ.get("PATH", ""), *HOOK_DIRS])
    return shutil.which(HOOK, path=search)


def probe() -> tuple[dict, str | None, bool]:
    """The daemon's ``docker info``, the hook's path (local daemon only), whether it is local.

    Raises ``DockerUnavailable`` when no daemon answers.
    """
    from launcher.docker import containers

    url = containers.daemon_url()
    info = containers.daemon_info(containers.client(timeout=30))
    is_local = local_daemon(url)
    return info, find_hook() if is_local else None, is_local
