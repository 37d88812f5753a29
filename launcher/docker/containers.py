"""Everything that talks to the Docker daemon, through the Docker SDK (``docker``).

The only module that imports ``docker``, always inside functions, so ``launch
--help`` and config composition never pay for it. Functions here do one daemon
operation each (find, build, import, run, list, remove); ``imagebuild`` decides
what to do with them and ``container_spec`` decides how a job container starts.

A job container is labelled with its launcher's pid and host. The launcher removes
it when the job ends or on Ctrl-C; a watchdog process (``python -m
launcher.docker.containers reap PID CONTAINER``) removes it when the launcher is killed;
``reap_orphans`` removes any left over by a crash of both.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from launcher import entrypoints, proc
from launcher.console import NoiseFilter
from launcher.docker import container_spec
from launcher.errors import BuildFailed, DockerUnavailable, ImageError

BUILD_TIMEOUT_S = 3600  # one silent build step (pip installing TensorFlow) may take minutes
MANAGED = "launch.managed"


def daemon_url() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def client(timeout: int = BUILD_TIMEOUT_S):
    """A connected client, or ``DockerUnavailable`` saying how to start a daemon."""
    try:
        import docker
        from docker.errors import DockerException
    except ImportError:
        raise ImageError("the Docker SDK is missing: pip install docker (or use runtime=local)") from None

    try:
        cli = docker.from_env(timeout=timeout)
        cli.ping()
    except (DockerException, OSError) as exc:
        raise DockerUnavailable(daemon_url()) from exc
    return cli


def daemon_info(cli) -> dict:
    """``docker info`` as the Engine API returns it (runtimes, CDI devices, versions)."""
    return dict(cli.info())


# ---------------------------------------------------------------- images
def find_image(cli, ref: str) -> dict | None:
    """The image's attributes (``Id``, ``Config.Labels``, ``RootFS``, ...), or None."""
    from docker.errors import ImageNotFound, NullResource

    try:
        return cli.images.get(ref).attrs
    except (ImageNotFound, NullResource):
        return None


def labels_of(attrs: Mapping) -> dict[str, str]:
    return dict((attrs.get("Config") or {}).get("Labels") or {})


def build(
    cli,
    context: IO[bytes],
    *,
    labels: Mapping[str, str] | None = None,
    nocache: bool = False,
    on_line: Callable[[str], None] = lambda line: None,
) -> str:
    """Build from a tar ``context`` with no network; the new image's id (untagged).

    Every line of progress goes to ``on_line``. A failure raises ``BuildFailed`` with
    the step that failed and the last lines of output; nothing is tagged.
    """
    from docker.errors import APIError

    step, tail, image_id = None, [], None
    try:
        stream = cli.api.build(
            fileobj=context,
            custom_context=True,
            rm=True,
            forcerm=True,
            pull=False,
            nocache=nocache,
            network_mode="none",
            labels=dict(labels or {}),
            decode=True,
        )
        for chunk in stream:
            if "error" in chunk:
                raise BuildFailed(
                    f"image build failed at {step or 'the first step'}: "
                    f"{_shorten(chunk['error'], 300)} (its output: the build log in ~/.cache/launch/logs, or -v)",
                    step,
                    "".join(tail[-20:]),
                )
            text = chunk.get("stream", "")
            if text:
                tail = (tail + [text])[-40:]
                if text.startswith("Step "):
                    step = _shorten(text)
                on_line(text)
            aux = chunk.get("aux") or {}
            image_id = aux.get("ID", image_id)
    except APIError as exc:
        raise BuildFailed(f"image build failed: {exc.explanation or exc}", step, "".join(tail)) from None
    if image_id is None:
        raise BuildFailed("image build ended without an image id", step, "".join(tail))
    return image_id


def _shorten(step: str, width: int = 100) -> str:
    step = " ".join(step.split())
    return step if len(step) <= width else step[: width - 3] + "..."


def tag(cli, image_id: str, ref: str) -> None:
    repository, _, name = ref.rpartition(":")
    if not cli.api.tag(image_id, repository, name, force=True):
        raise ImageError(f"could not tag {image_id} as {ref}")


def remove_image(cli, ref: str) -> bool:
    """Remove (or untag) ``ref``; False when it was not there or is in use."""
    from docker.errors import APIError, ImageNotFound

    try:
        cli.images.remove(ref, noprune=False)
        return True
    except ImageNotFound:
        return False
    except APIError:
        return False


def import_rootfs(cli, tar_path: Path, ref: str, changes: list[str]) -> str:
    """``docker import``: a root filesystem tar becomes the one-layer image ``ref``."""
    repository, _, name = ref.rpartition(":")
    cli.api.import_image_from_file(str(tar_path), repository=repository, tag=name, changes=changes)
    attrs = find_image(cli, ref)
    if attrs is None:
        raise ImageError(f"docker import of {tar_path} did not create {ref}")
    return attrs["Id"]


def managed_images(cli) -> list[dict]:
    """Attributes of every image the launcher made (label ``launch.managed``)."""
    return [image.attrs for image in cli.images.list(filters={"label": MANAGED})]


def prune_builder_cache(cli) -> int:
    """Remove the untagged builder stages of launch builds; the number removed."""
    result = cli.images.prune(filters={"dangling": True, "label": "launch.stage=builder"})
    return len(result.get("ImagesDeleted") or [])


# ---------------------------------------------------------------- running
def run_tool(
    cli,
    image: str,
    argv: list[str],
    *,
    mounts: Iterable[container_spec.MountSpec] = (),
    env: Mapping[str, str] | None = None,
    network: str = "none",
    user: str | None = None,
    on_output: Callable[[bytes], None] = lambda data: None,
) -> tuple[int, bytes]:
    """Run ``argv`` in a throwaway container (entrypoint replaced); exit status and stdout."""
    container = cli.containers.create(
        image,
        entrypoint=argv[:1],
        command=argv[1:],
        environment=dict(env or {}),
        mounts=[_mount(m) for m in mounts],
        network_mode=network,
        user=user,
        labels={MANAGED: "1", "launch.role": "tool"},
        detach=True,
    )
    try:
        container.start()
        for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
            on_output(chunk)
        status = container.wait()["StatusCode"]
        return status, container.logs(stdout=True, stderr=False)
    finally:
        container.remove(force=True)


def run_job(args: dict, log_path: Path, echo: bool = True, stop_timeout_s: int = 10) -> int:
    """Start a job container from ``container_spec.run_args``, stream its output, remove it.

    Ctrl-C sends SIGINT to the job (the bootstrap records the interruption), waits up
    to ``stop_timeout_s`` and then kills it. Returns the exit code as ``subprocess``
    would (negative for a signal).
    """
    from docker.types import DeviceRequest

    cli = client()
    reap_orphans(cli)
    kwargs = dict(args)
    kwargs["mounts"] = [_mount(container_spec.MountSpec(**m)) for m in args["mounts"]]
    if "device_requests" in args:
        kwargs["device_requests"] = [DeviceRequest(**d) for d in args["device_requests"]]
    image = kwargs.pop("image")
    container = cli.containers.create(image, **kwargs)
    watchdog = proc.spawn_detached(
        entrypoints.argv(sys.executable, entrypoints.REAP, "reap", str(os.getpid()), container.id)
    )
    try:
        with open(log_path, "ab") as log:
            write = _writer(log, echo)
            container.start()
            try:
                for chunk in container.logs(stream=True, follow=True):
                    write(chunk)
            except KeyboardInterrupt:
                since = int(time.time()) - 1
                container.kill(signal="SIGINT")
                _wait_or_kill(container, stop_timeout_s)
                write(container.logs(since=since))
                return 130
            status = container.wait()["StatusCode"]
            container.reload()
            return container_spec.exit_code(status, container.attrs["State"].get("OOMKilled", False))
    finally:
        _remove(container)
        watchdog.terminate()
        watchdog.wait()


def _wait_or_kill(container, timeout_s: int) -> None:
    from requests.exceptions import ConnectionError, ReadTimeout

    try:
        container.wait(timeout=timeout_s)
    except (ReadTimeout, ConnectionError, KeyboardInterrupt):
        container.kill()


def _remove(container) -> None:
    from docker.errors import APIError, NotFound

    try:
        container.remove(force=True)
    except NotFound:
        pass
    except APIError as exc:  # "removal already in progress" (the watchdog was quicker)
        if "in progress" not in str(exc):
            raise


def _writer(log: IO[bytes], echo: bool) -> Callable[[bytes], None]:
    out = sys.stdout.buffer
    shown = NoiseFilter()  # the log keeps every line; the terminal is spared TensorFlow's start-up noise

    def write(data: bytes) -> None:
        log.write(data)
        log.flush()
        if echo and (visible := shown.feed(data)):
            out.write(visible)
            out.flush()

    return write


def _mount(m: container_spec.MountSpec) -> Any:
    from docker.types import Mount

    return Mount(target=m.target, source=m.source, type="bind", read_only=m.read_only)


def job_containers(cli) -> list:
    return cli.containers.list(all=True, filters={"label": "launch.role=job"})


def reap_orphans(cli) -> list[str]:
    """Remove job containers of this host whose launcher process is gone; their names."""
    removed = []
    host = socket.gethostname()
    for container in job_containers(cli):
        labels = container.labels
        if labels.get("launch.host") != host or _alive(int(labels.get("launch.owner", "0"))):
            continue
        _remove(container)
        removed.append(container.name)
    return removed


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap(owner_pid: int, container_id: str, poll_s: float = 0.5) -> int:
    """Watchdog: when ``owner_pid`` dies, remove the container (a killed launcher)."""
    while _alive(owner_pid):
        time.sleep(poll_s)
    from docker.errors import NotFound

    try:
        client(timeout=60).containers.get(container_id).remove(force=True)
    except (NotFound, DockerUnavailable):
        pass
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "reap":
        sys.exit(reap(int(sys.argv[2]), sys.argv[3]))
    print("usage: python -m launcher.docker.containers reap OWNER_PID CONTAINER_ID", file=sys.stderr)
    sys.exit(2)
