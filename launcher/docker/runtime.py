"""``runtime=docker``: a job in a container of its run's image.

``DockerRuntime.run`` makes or reuses the image the run's config names
(``imagebuild.ensure_image``), or for a replay the original run's own image (rebuilt
from the run's stored Dockerfile and lockfile when it is gone, and checked against
the recorded installed-tree hash), keeps the Dockerfile and lockfile in the run, and
runs the bootstrap in a container (``container_spec`` decides its arguments,
``containers`` starts it). ``container.json`` in the run directory says which image
and how it ran.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

from launcher import console
from launcher.docker import container_spec, containers, imagebuild, images
from launcher.docker.imagebuild import ImageInfo, ensure_image
from launcher.errors import PackagesMismatch
from launcher.record import layout
from launcher.record.store import runs

RUN_IMAGE_DIR = "image"  # RUN_DIR/image/{Dockerfile,lockfile.txt}: what replay rebuilds from


def store_in_run(run_dir: Path, dockerfile: str, lockfile: str) -> None:
    """Keep the Dockerfile and lockfile a run used: replay rebuilds from them."""
    target = run_dir / RUN_IMAGE_DIR
    target.mkdir(exist_ok=True)
    runs.write_bytes(target / "Dockerfile", dockerfile.encode())
    runs.write_bytes(target / "lockfile.txt", lockfile.encode())


def _spec_of_run(run_dir: Path) -> tuple[images.ImageSpec, object]:
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(layout.RunPaths(run_dir).config)
    return images.spec_from_config(OmegaConf.to_container(cfg.image, resolve=True)), cfg


class DockerRuntime:
    """``runtime=docker``: the job runs in a container of the image the run's config names.

    The image is made or reused (``ensure_image``, or the original run's image for a
    replay) before the job starts; ``container.json`` in the run directory says which
    image and how it ran.
    """

    name = "docker"

    def check(self, cfg, run_dir: Path, cwd: str) -> None:
        """Refuse, before the run directory exists, a job the container user could not reach."""
        _reach(cfg, str(Path(run_dir).resolve()), os.path.abspath(cwd))

    def run(self, job) -> int:
        return run_in_container(job)


def _reach(cfg, run_dir: str, cwd: str) -> tuple[list, list[str], tuple[int, int], list[str]]:
    """Mounts, masks, the container user and the inputs with which the job reaches what it
    needs (``container_spec.reachable``), or ``ConfigError`` in one line."""
    inputs_read = container_spec.input_paths(cfg, cwd)
    user = container_spec.container_user(os.getuid(), os.getgid())
    mounts, masks = container_spec.reachable(
        container_spec.job_mounts(run_dir, cwd, inputs_read), inputs_read, user, run_dir, _host_dir
    )
    return mounts, masks, user, inputs_read


def run_in_container(job) -> int:
    """``DockerRuntime.run``: ensure the image, record it, run the job in it."""
    from omegaconf import OmegaConf

    spec, cfg = _spec_of_run(job.run_dir)
    runtime_cfg = OmegaConf.to_container(cfg.runtime, resolve=True)
    run_dir, cwd = str(job.run_dir.resolve()), os.path.abspath(job.cwd)
    mounts, masks, (uid, gid), _ = _reach(cfg, run_dir, cwd)  # checked before the run existed; again here
    cli = containers.client()
    original = _replayed_run(job.run_dir)
    if original is not None:  # a replay runs in the original's image, or a verified rebuild
        info, dockerfile, lockfile = _image_for_run(original, cli)
    else:
        inputs = imagebuild.read_inputs(spec, cli)
        info = ensure_image(spec, inputs=inputs, cli=cli)
        dockerfile, lockfile = inputs.dockerfile, inputs.lockfile
    store_in_run(job.run_dir, dockerfile, lockfile)
    runs.write_json(layout.RunPaths(job.run_dir).container, info.record(uid, gid))  # merged into the fingerprint

    skeletons = [_mask(mask, mounts) for mask in masks]
    try:
        args = container_spec.run_args(
            info.image_id,
            run_dir,
            cwd,
            (uid, gid),
            container_spec.container_env(job.env),
            container_spec.sort_mounts([*mounts, *(m for m, _ in skeletons)]),
            container_spec.job_labels(run_dir, os.getpid(), socket.gethostname()),
            cpus=job.cpus,
            gpus=spec.gpus,
            tmpfs_mb=int(runtime_cfg.get("tmpfs_mb", 1024)),
        )
        owner = _lend(job.run_dir, uid, gid)
        try:
            return containers.run_job(
                args, layout.RunPaths(job.run_dir).log, job.echo, int(runtime_cfg.get("stop_timeout_s", 10))
            )
        finally:
            if owner:
                _give_back(job.run_dir, owner)
    finally:
        for _, tmp in skeletons:
            shutil.rmtree(tmp, ignore_errors=True)


def _mask(mask: str, mounts: list[container_spec.MountSpec]) -> tuple[container_spec.MountSpec, str]:
    """An empty, enterable directory to mount over ``mask``, holding only the mount points below it."""
    tmp = tempfile.mkdtemp(prefix="launch-mask-")
    os.chmod(tmp, 0o755)
    sources = {m.target: m.source for m in mounts}
    for rel in container_spec.mask_skeleton(mask, mounts):
        point = Path(tmp)
        for part in Path(rel).parent.parts:
            point = point / part
            point.mkdir(exist_ok=True)
            point.chmod(0o755)  # whatever the umask: the container user must enter it
        point = point / Path(rel).name
        if os.path.isdir(sources[os.path.join(mask, rel)]):
            point.mkdir(exist_ok=True)
            point.chmod(0o755)
        else:
            point.touch()
            point.chmod(0o644)
    return container_spec.MountSpec(tmp, mask, read_only=True), tmp


def _host_dir(path: str) -> container_spec.HostDir | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return container_spec.HostDir(st.st_mode, st.st_uid, st.st_gid, is_dir=os.path.isdir(path))


def _lend(run_dir: Path, uid: int, gid: int) -> tuple[int, int] | None:
    """Make the run directory the container user's for the job; the old owner."""
    st = run_dir.stat()
    if os.geteuid() != 0 or (st.st_uid, st.st_gid) == (uid, gid):
        return None
    os.chown(run_dir, uid, gid)
    return st.st_uid, st.st_gid


def _give_back(run_dir: Path, owner: tuple[int, int]) -> None:
    for path in [run_dir, *run_dir.rglob("*")]:
        os.lchown(path, *owner)


def _replayed_run(run_dir: Path) -> Path | None:
    """The Docker run that ``run_dir`` replays (job.json's ``replay_of``, same store), if any."""
    job = layout.RunPaths(run_dir).job
    name = runs.read_json(job).get("replay_of") if job.exists() else None
    original = run_dir.parent / name if name else None
    return original if original is not None and layout.RunPaths(original).container.is_file() else None


def _image_for_run(run_dir: Path, cli) -> tuple[ImageInfo, str, str]:
    """The image a Docker run used (rebuilt and checked when gone), its Dockerfile and lockfile."""
    record = runs.read_json(layout.RunPaths(run_dir).container)
    stored = run_dir / RUN_IMAGE_DIR
    dockerfile = imagebuild.read_stored(stored / "Dockerfile", "the run's Dockerfile")
    lockfile = imagebuild.read_stored(stored / "lockfile.txt", "the run's lockfile")
    attrs = containers.find_image(cli, record["image_id"])
    if attrs is not None:
        info = ImageInfo(attrs["Id"], record["image"], containers.labels_of(attrs), built=False)
        console.log.info("image %s of run %s exists; reused", record["image"], run_dir.name)
    else:
        spec, _ = _spec_of_run(run_dir)
        inputs = imagebuild.inputs_from_texts(spec, dockerfile, lockfile, cli)
        if inputs.launcher_version != record["launcher_version"]:
            raise PackagesMismatch(
                f"the image of run {run_dir.name} is gone and cannot be rebuilt as it was: it held "
                f"launcher {record['launcher_version']}, this is {inputs.launcher_version}; "
                "run the replay with the launcher source the run used",
                record["packages_sha256"],
                "",
            )
        info = ensure_image(spec, inputs=inputs, expected_packages=record["packages_sha256"], cli=cli)
    imagebuild.check_packages(info, record["packages_sha256"], "the image")
    return info, dockerfile, lockfile


def ensure_image_for_run(run_dir: str | os.PathLike) -> str:
    """The id of an image with the packages a Docker run recorded, rebuilt if it is gone.

    For replay: uses the run's image when it still exists; otherwise rebuilds from the
    run's stored Dockerfile and lockfile and checks the installed tree's hash against
    the run's ``packages_sha256`` (``PackagesMismatch`` when it differs). A replay
    through ``runtime=docker`` does this by itself (job.json's ``replay_of``).
    """
    info, _, _ = _image_for_run(Path(run_dir), containers.client())
    return info.image_id
