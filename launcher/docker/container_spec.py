"""How a job container is started, as data: mounts, environment, user, limits, labels.

Pure functions, golden-tested; ``containers.run_job`` hands the result to the Docker
SDK. The run directory is the only writable mount; the user's working directory,
the data and a script are mounted read-only, each at its own absolute path so the
paths in ``config.yaml`` and ``job.json`` mean the same inside and out.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from launcher.errors import ConfigError
from launcher.record.probe.environment import allowed_env

IMAGE_UID = 1000  # the image's `launch` user, used when launch itself runs as root
NETWORK = "none"  # a job never has a network
# Mounting over these would replace the image's own system or its installed packages.
PROTECTED = (
    "/",
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib64",
    "/opt",
    "/opt/launch",
    "/proc",
    "/sbin",
    "/sys",
    "/usr",
    "/var",
    "/var/tmp",
    "/home",
    "/home/launch",
    "/root",
    "/run",
)
JOB_LABELS = ("launch.role", "launch.run", "launch.owner", "launch.host")


@dataclass(frozen=True)
class MountSpec:
    """A bind mount: host ``source`` at ``target`` inside the container."""

    source: str
    target: str
    read_only: bool


def _inside(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def job_mounts(run_dir: str, cwd: str, read_only_paths: Iterable[str] = ()) -> list[MountSpec]:
    """The run directory read-write, the working directory and inputs read-only.

    Paths below an already mounted directory are left out (they are visible through
    it); the list is ordered parents first, as the daemon mounts them in order.
    """
    run_dir, cwd = os.path.abspath(run_dir), os.path.abspath(cwd)
    for path, what in ((run_dir, "the run directory"), (cwd, "the working directory")):
        if path in PROTECTED:
            raise ConfigError(
                f"{what} {path!r} would hide the image's own files: start launch from a project "
                "directory and keep store.root outside system directories"
            )
    mounts = [MountSpec(run_dir, run_dir, read_only=False)]
    if not _inside(cwd, run_dir):
        mounts.append(MountSpec(cwd, cwd, read_only=True))
    for raw in read_only_paths:
        path = os.path.abspath(os.path.join(cwd, raw))
        if path in PROTECTED:
            raise ConfigError(f"{path!r} cannot be mounted into a container: it is a system path")
        if any(_inside(path, m.target) for m in mounts):
            continue
        mounts.append(MountSpec(os.path.realpath(path), path, read_only=True))
    return sort_mounts(mounts)


def sort_mounts(mounts: Iterable[MountSpec]) -> list[MountSpec]:
    """Parents first: the daemon mounts in this order, and a mount hides what was below it."""
    return sorted(mounts, key=lambda m: (m.target.count("/"), m.target))


@dataclass(frozen=True)
class HostDir:
    """What decides whether the container user may enter a host path: its mode and owners."""

    mode: int
    uid: int
    gid: int
    is_dir: bool = True


# The image's own directories the container user cannot enter (measured on the images: /root
# is 0700); a mount below one is reachable only through a mask.
IMAGE_PRIVATE = ("/root",)


def may(info: HostDir, user: tuple[int, int], bits: int) -> bool:
    """Do ``user``'s (uid, gid) permission bits on ``info`` include ``bits`` (4 r, 1 x)?"""
    uid, gid = user
    if info.uid == uid:
        allowed = (info.mode >> 6) & 7
    elif info.gid == gid:
        allowed = (info.mode >> 3) & 7
    else:
        allowed = info.mode & 7
    return allowed & bits == bits


def reachable(
    mounts: list[MountSpec],
    inputs: Iterable[str],
    user: tuple[int, int],
    lend: str,
    stat: Callable[[str], HostDir | None],
) -> tuple[list[MountSpec], list[str]]:
    """Mounts and masks with which the container ``user`` reaches everything the job needs.

    A mount below another mount (the run directory inside the working directory, say)
    is reached through the host's directories between them; one the user cannot
    enter (a ``mktemp -d``, mode 0700) is hidden behind a *mask*: a read-only mount of
    an empty, enterable directory holding only the inner mounts' mount points
    (``mask_skeleton``). Nothing of the user's is lent or changed; the container sees
    less of the host than before, not more.
    An input seen through a mount (data in the working directory) gets its own mount
    when it lies under a mask. A mount root the user cannot read itself (the working
    directory, a data file) cannot be helped without changing the host: ``ConfigError``
    naming it and the fix. ``lend`` is the run directory, which is lent to the user.
    ``stat`` returns None for a path that does not exist.
    """
    mounts = list(mounts)
    targets = {m.target for m in mounts}
    seen_through = [os.path.abspath(p) for p in inputs]
    seen_through = [p for p in seen_through if p not in targets]
    masks: list[str] = []
    for target in [*targets, *seen_through]:
        holder = max(
            (m.target for m in mounts if m.target != target and _inside(target, m.target)), key=len, default=None
        )
        top = holder or "/"
        for parent in _between(top, target):
            info = None if holder is None else stat(parent)
            private = parent in IMAGE_PRIVATE if holder is None else info is not None and not may(info, user, 1)
            if private:
                masks.append(parent)
                break
    masks = sorted({m for m in masks if not any(m != o and _inside(m, o) for o in masks)})
    for path in seen_through:
        if any(_inside(path, m) for m in masks):
            mounts.append(MountSpec(os.path.realpath(path), path, read_only=True))
    targets = {m.target for m in mounts}
    for path in [*(m.source for m in mounts if m.target != lend), *(p for p in seen_through if p not in targets)]:
        info = stat(path)
        if info is None:
            continue  # missing: not this check's business (the daemon names a missing mount source)
        need, what = (5, "enter and read") if info.is_dir else (4, "read")
        if not may(info, user, need):
            raise ConfigError(
                f"the job container runs as uid {user[0]}, which cannot {what} {path!r} "
                f"(mode {info.mode & 0o777:04o}, owner uid {info.uid}): "
                f"chmod o+{'rx' if info.is_dir else 'r'} {path!r}, or run launch from a directory it can read"
            )
    return sort_mounts(mounts), masks


def mask_skeleton(mask: str, mounts: list[MountSpec]) -> list[str]:
    """The mount points to create in ``mask``'s empty directory: the targets below it, relative."""
    return sorted(os.path.relpath(m.target, mask) for m in mounts if m.target != mask and _inside(m.target, mask))


def _between(top: str, target: str) -> list[str]:
    """The directories strictly between ``top`` and ``target``, outermost first."""
    parts = Path(target).relative_to(top).parts[:-1]
    return [str(Path(top, *parts[: i + 1])) for i in range(len(parts))]


def input_paths(cfg: Mapping, cwd: str) -> list[str]:
    """Host paths a job reads besides its working directory: data, a script and the paths among
    its arguments, a code path, and ``runtime.mounts``."""
    train = cfg.get("train", {})
    paths = []
    data = train.get("data")
    if isinstance(data, str) and data not in ("sample", "full"):
        path = os.path.join(cwd, os.path.expanduser(data))
        if os.path.exists(path):
            paths.append(path)
    script = train.get("script")
    if train.get("name") == "script" and isinstance(script, str) and os.path.exists(script):
        paths.append(os.path.dirname(os.path.abspath(script)))  # the script's siblings import
    notebook = train.get("notebook")
    if train.get("name") == "notebook" and isinstance(notebook, str) and os.path.exists(notebook):
        paths.append(os.path.dirname(os.path.abspath(notebook)))
    extra = train.get("path")  # train=custom: a directory put on sys.path
    if train.get("name") == "custom" and isinstance(extra, str) and extra:
        path = os.path.join(cwd, os.path.expanduser(extra))
        if os.path.isdir(path):
            paths.append(path)
    if train.get("name") == "script":  # a script's arguments that name existing files or directories
        for arg in train.get("args") or []:
            path = os.path.join(cwd, os.path.expanduser(str(arg)))
            if str(arg) and os.path.exists(path):
                paths.append(path)
    for extra_path in cfg.get("runtime", {}).get("mounts") or []:  # runtime.mounts: data the code finds itself
        paths.append(os.path.join(cwd, os.path.expanduser(str(extra_path))))
    return paths


HOST_PATHS = ("PYTHONPATH", "LD_LIBRARY_PATH", "LD_PRELOAD")


def container_env(job_env: Mapping[str, str]) -> dict[str, str]:
    """The job's environment inside the container: the allowlisted and planned variables.

    Never the host's whole environment (secrets live there): the fingerprint's
    allowlist (TF_*, PYTHONHASHSEED, CUDA_*, ...) plus the launcher's LAUNCH_* variables,
    but never the host's search paths (PYTHONPATH, LD_LIBRARY_PATH, LD_PRELOAD), which
    name host directories: the image has its own.
    """
    env = {k: v for k, v in allowed_env(job_env).items() if k not in HOST_PATHS}
    env.update({k: v for k, v in job_env.items() if k.startswith("LAUNCH_")})
    return dict(sorted(env.items()))


def container_user(host_uid: int, host_gid: int) -> tuple[int, int]:
    """The invoking user's ids, so run files are theirs; the image's user for root."""
    if host_uid == 0:
        return IMAGE_UID, IMAGE_UID
    return host_uid, host_gid


def run_args(
    image: str,
    run_dir: str,
    cwd: str,
    user: tuple[int, int],
    env: Mapping[str, str],
    mounts: list[MountSpec],
    labels: Mapping[str, str],
    cpus: Iterable[int] | None = None,
    gpus: bool = False,
    tmpfs_mb: int = 1024,
) -> dict:
    """Keyword arguments for ``containers.create``; mounts and GPU requests as plain data.

    The container's scratch space is a tmpfs at /tmp, or at /var/tmp (with TMPDIR set)
    when the user's working directory is the host's /tmp, mounted read-only there.
    """
    scratch = "/var/tmp" if any(m.target == "/tmp" for m in mounts) else "/tmp"
    env = dict(env) if scratch == "/tmp" else {**env, "TMPDIR": scratch}
    args: dict = {
        "image": image,
        "command": [run_dir],  # the entrypoint is `python -P -m launcher.bootstrap`
        "user": f"{user[0]}:{user[1]}",
        "environment": dict(sorted(env.items())),
        "working_dir": cwd,
        "mounts": [asdict(m) for m in mounts],
        "network_mode": NETWORK,
        "read_only": True,  # the image's files cannot change; only the run dir and /tmp
        "tmpfs": {scratch: f"rw,nosuid,nodev,size={tmpfs_mb}m"},
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "init": True,  # a real PID 1 passes SIGINT/SIGTERM on to the job
        "labels": dict(labels),
        "detach": True,
    }
    if cpus:
        args["cpuset_cpus"] = ",".join(str(c) for c in sorted(cpus))
    if gpus:
        args["device_requests"] = [{"count": -1, "capabilities": [["gpu"]]}]
    return args


def job_labels(run_dir: str, owner_pid: int, host: str) -> dict[str, str]:
    """Labels that find a job's container again, e.g. to remove one whose launcher died."""
    values = ("job", Path(run_dir).name, str(owner_pid), host)
    return dict(zip(JOB_LABELS, values, strict=True))


def exit_code(status: int, oom_killed: bool = False) -> int:
    """A container's status as ``subprocess`` reports it: 128+N becomes -N for a signal."""
    if oom_killed:
        return status
    if status > 128 and status - 128 in (2, 9, 15):
        return -(status - 128)
    return status
