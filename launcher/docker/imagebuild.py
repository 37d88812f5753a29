"""Make or reuse the image a run needs.

The pipeline: read the inputs (rendered Dockerfile, lockfile, base digest, launcher
source) and name them by their content tag; reuse the image with that tag when it
exists; otherwise fetch the locked files into the host's wheel cache (hash-checked),
build with no network, hash the installed tree, and only then tag the image, with
that hash as a label. A failed or unverified build is never tagged as good.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tarfile
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from launcher import console, entrypoints, proc
from launcher.docker import container_spec, containers, images
from launcher.errors import ImageError, PackagesMismatch
from launcher.record import hashing
from launcher.record.store import runs
from launcher.version import __version__

TREE = "/opt/launch"  # everything the build installs; its hash is the image's identity
PYTHON = f"{TREE}/venv/bin/python"
PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the launcher package, copied into images


def cache_dir(sub: str | None = None) -> Path:
    """``$XDG_CACHE_HOME/launch`` (default ``~/.cache/launch``), or its ``sub`` directory
    (``wheels``, ``logs``, ``locks``), created on first use: a new machine has none of them."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = Path(root) / "launch"
    if sub:
        path = path / sub
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ImageError(
            f"cannot create the launcher's cache directory {str(path)!r} ({exc.strerror}): "
            "set XDG_CACHE_HOME to a writable directory"
        ) from None
    return path


@dataclass(frozen=True)
class BuildInputs:
    """Everything that goes into an image; its content tag is their hash."""

    name: str
    dockerfile: str  # rendered
    lockfile: str
    base: str  # as configured: local or a reference
    base_ref: str  # what FROM names
    base_digest: str
    launcher_version: str  # version and source hash of the launcher package copied in
    entries: list[images.LockEntry] = field(compare=False, repr=False, default_factory=list)

    @property
    def tag(self) -> str:
        return images.content_tag(self.dockerfile, self.lockfile, self.base_digest, self.launcher_version)

    @property
    def ref(self) -> str:
        return images.image_ref(self.name, self.tag)

    def labels(self) -> dict[str, str]:
        return {
            containers.MANAGED: "1",
            "launch.role": "image",  # overrides the local base's "base", which images inherit
            "launch.image": self.name,
            "launch.content_tag": self.tag,
            "launch.base": self.base,
            "launch.base_digest": self.base_digest,
            "launch.lockfile_sha256": images.sha256_text(self.lockfile),
            "launch.launcher_version": self.launcher_version,
        }


@dataclass(frozen=True)
class ImageInfo:
    """An image ready to run, as ``container.json`` records it."""

    image_id: str
    ref: str
    labels: dict[str, str]
    built: bool  # False: an existing image was reused

    def record(self, uid: int, gid: int) -> dict:
        lab = self.labels
        return {
            "image_id": self.image_id,
            "image": self.ref,
            "content_tag": lab["launch.content_tag"],
            "uid": uid,
            "gid": gid,
            "network": container_spec.NETWORK,
            "base": lab["launch.base"],
            "base_digest": lab["launch.base_digest"],
            "lockfile_sha256": lab["launch.lockfile_sha256"],
            "packages_sha256": lab["launch.packages_sha256"],
            "launcher_version": lab["launch.launcher_version"],
        }


# ---------------------------------------------------------------- inputs
def read_inputs(spec: images.ImageSpec, cli) -> BuildInputs:
    """The inputs of ``spec``'s image: the template rendered, the lockfile checked."""
    base_ref, _ = images.parse_base(spec.base, spec.allow_unpinned)
    template = read_stored(spec.template, "image.template")
    dockerfile = images.render_dockerfile(template, images.dockerfile_values(spec, base_ref), str(spec.template))
    return inputs_from_texts(spec, dockerfile, read_stored(spec.lockfile, "image.lockfile"), cli)


def inputs_from_texts(spec: images.ImageSpec, dockerfile: str, lockfile: str, cli) -> BuildInputs:
    """Inputs from a rendered Dockerfile and lockfile (a run's stored copies, for replay)."""
    entries = images.parse_lockfile(lockfile, str(spec.lockfile))
    images.installer_requirements(entries)  # refuse a lockfile the build cannot install
    base_ref, pinned = images.parse_base(spec.base, spec.allow_unpinned)
    version = images.source_version(__version__, images.source_files(PACKAGE_DIR))
    digest = pinned or base_digest(cli, base_ref, spec.base)
    return BuildInputs(spec.name, dockerfile, lockfile, spec.base, base_ref, digest, version, entries)


def base_digest(cli, base_ref: str, configured: str) -> str:
    """A content digest for a base not pinned in its name: its layers' diff ids."""
    attrs = containers.find_image(cli, base_ref)
    if attrs is None:
        if configured == "local":
            raise ImageError(f"the local base image {base_ref} is missing: run `launch image bootstrap-base`")
        raise ImageError(f"base image {base_ref} is not on this machine: docker pull it, or use image.base=local")
    layers = attrs.get("RootFS", {}).get("Layers") or []
    if len(layers) == 1:
        return layers[0]
    return "sha256:" + images.sha256_text("\n".join(layers))


def read_stored(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        hint = ""
        if not (images.LAUNCH_ROOT / "images").is_dir():
            hint = (
                ": images/ and lockfiles/ come with the launcher (source tree, or "
                f"{images.LAUNCH_ROOT} for an installed wheel); reinstall it, or give absolute paths"
            )
        raise ImageError(f"{what} {str(path)!r} cannot be read ({exc.strerror}){hint}") from None


# ---------------------------------------------------------------- ensure / build
def ensure_image(
    spec: images.ImageSpec,
    *,
    inputs: BuildInputs | None = None,
    rebuild: bool = False,
    expected_packages: str | None = None,
    cli=None,
) -> ImageInfo:
    """The image for ``spec`` (or ``inputs``): reused when its content tag exists, else built
    (what pip and Docker are doing noted on stderr while they work: ``console.Progress``).

    ``rebuild`` builds with no cache even when the tag exists and checks that the new
    build installed the same tree. ``expected_packages`` (replay) must match the tree.
    """
    cli = cli or containers.client()
    inputs = inputs or read_inputs(spec, cli)
    attrs = None if rebuild else containers.find_image(cli, inputs.ref)
    if attrs is None:
        from filelock import FileLock

        with FileLock(str(cache_dir("locks") / f"{inputs.name}.lock")):
            attrs = None if rebuild else containers.find_image(cli, inputs.ref)  # built meanwhile?
            if attrs is None:
                with console.Progress("image", f"building {inputs.ref}") as progress:
                    return _build(cli, spec, inputs, rebuild, expected_packages, progress)
    info = ImageInfo(attrs["Id"], inputs.ref, containers.labels_of(attrs), built=False)
    check_packages(info, expected_packages, "the existing image")
    console.log.info("image %s exists (%s); reused, not built", inputs.ref, info.image_id[7:19])
    return info


def check_packages(info: ImageInfo, expected: str | None, what: str) -> None:
    actual = info.labels.get("launch.packages_sha256", "")
    if expected and actual != expected:
        raise PackagesMismatch(
            f"{what} {info.ref} has installed packages {actual[:16]}, the run recorded "
            f"{expected[:16]}: the launcher, lockfile or base changed since the run",
            expected,
            actual,
        )


def _build(cli, spec, inputs: BuildInputs, nocache: bool, expected: str | None, progress: console.Progress):
    previous = containers.find_image(cli, inputs.ref)
    containers.find_image(cli, inputs.base_ref) or _missing_base(inputs)
    console.log.info("building image %s from %s/ on %s", inputs.ref, spec.template.parent.name, inputs.base_ref)
    wheels = fill_wheelhouse(spec, inputs, progress)
    logs = cache_dir("logs")
    with (
        open(logs / f"build-{inputs.name}-{inputs.tag[:12]}.log", "w") as log,
        tempfile.TemporaryFile(dir=cache_dir()) as context,
    ):
        write_context(context, inputs, wheels)
        context.seek(0)
        progress.doing = f"building {inputs.ref}"
        image_id = containers.build(
            cli, context, labels=inputs.labels(), nocache=nocache, on_line=_progress(log, progress)
        )
    packages = packages_sha256(cli, image_id)
    for what, want in (("the recorded image", expected), ("the image it replaces", _label(previous))):
        if want and want != packages:
            containers.remove_image(cli, image_id)
            raise PackagesMismatch(
                f"rebuilding {inputs.ref} installed packages {packages[:16]} but {what} has "
                f"{want[:16]}: the build is not reproducible from these inputs",
                want,
                packages,
            )
    final_id = _tag_verified(cli, image_id, inputs.ref, packages)
    console.log.info("built image %s (%s), packages_sha256 %s", inputs.ref, final_id[7:19], packages[:16])
    attrs = containers.find_image(cli, final_id)
    return ImageInfo(final_id, inputs.ref, containers.labels_of(attrs), built=True)


def _label(attrs: dict | None) -> str | None:
    return containers.labels_of(attrs).get("launch.packages_sha256") if attrs else None


def _missing_base(inputs: BuildInputs) -> None:
    if inputs.base == "local":
        raise ImageError(f"the local base image {inputs.base_ref} is missing: run `launch image bootstrap-base`")
    raise ImageError(
        f"base image {inputs.base_ref} is not on this machine: `docker pull` it where a registry "
        "is reachable, or use image.base=local"
    )


def _tag_verified(cli, image_id: str, ref: str, packages: str) -> str:
    """Label the verified build with its tree hash, then give it the content tag."""
    unverified = ref.replace(":", ":unverified-", 1)
    containers.tag(cli, image_id, unverified)
    try:
        dockerfile = f'FROM {unverified}\nLABEL launch.packages_sha256="{packages}"\n'
        with tempfile.TemporaryFile() as context:
            _tar_files(context, [("Dockerfile", dockerfile.encode())])
            context.seek(0)
            final_id = containers.build(cli, context)
        containers.tag(cli, final_id, ref)
        return final_id
    finally:
        containers.remove_image(cli, unverified)


def packages_sha256(cli, image_id: str) -> str:
    """The hash of the image's installed tree, computed inside it with no network."""
    status, out = containers.run_tool(cli, image_id, entrypoints.argv(PYTHON, entrypoints.TREEHASH, TREE))
    digest = out.decode().strip()
    if status != 0 or len(digest) != 64:
        containers.remove_image(cli, image_id)
        raise ImageError(f"could not hash the installed tree of the new image (status {status})")
    return digest


def _progress(log: IO[str], progress: console.Progress):
    """Docker's build output: every line to the build's log; its steps (``Step N/M : ...``, pip's
    lines in a ``RUN``) noted on stderr, the rest with ``-v``."""

    def on_line(text: str) -> None:
        log.write(text)
        for line in text.splitlines():
            progress.line(line)

    return on_line


# ---------------------------------------------------------------- wheel cache and context
def fill_wheelhouse(
    spec: images.ImageSpec, inputs: BuildInputs, progress: console.Progress | None = None
) -> dict[str, Path]:
    """The locked files for the image, downloaded by hash into the wheel cache when missing (pip's
    steps noted on ``progress``, or on a ``console.Progress`` of its own)."""
    wheelhouse = spec.wheelhouse or cache_dir("wheels")  # not layout's: the image build's cache, no store's
    try:
        wheelhouse.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ImageError(f"cannot create the wheel cache {str(wheelhouse)!r} ({exc.strerror})") from None
    chosen, missing = images.select_wheels(inputs.entries, _hashes(wheelhouse))
    if missing:
        console.log.info("downloading %d locked package(s) into %s", len(missing), wheelhouse)
        doing = f"downloading {len(missing)} locked package(s)"
        with (
            tempfile.NamedTemporaryFile("w", suffix=".txt", dir=cache_dir()) as lock,
            contextlib.nullcontext(progress) if progress else console.Progress("image", doing) as noted,
        ):
            noted.doing = doing
            lock.write(inputs.lockfile)
            lock.flush()
            argv = images.pip_download_argv(sys.executable, Path(lock.name), wheelhouse, spec.ca_bundle, spec.index_url)
            env = {k: v for k, v in os.environ.items() if k != "PIP_REQUIRE_VIRTUALENV"}
            log = cache_dir("logs") / "download.log"
            code = proc.run_streaming(argv, env, log, echo=False, progress=noted)
        if code != 0:
            raise ImageError(
                f"downloading the locked packages failed (pip exit {code}); see "
                f"{log}; behind a TLS proxy set image.ca_bundle"
            )
        chosen, missing = images.select_wheels(inputs.entries, _hashes(wheelhouse))
        if missing:
            raise ImageError(f"no file with a locked hash for {', '.join(missing[:5])} in {wheelhouse}")
    return {name: wheelhouse / name for name in chosen}


def _hashes(wheelhouse: Path) -> dict[str, str]:
    """sha256 of each file in the wheel cache, remembered by name, size and mtime."""
    import json

    index_path = wheelhouse / ".sha256.json"
    try:
        known = json.loads(index_path.read_text())
    except (OSError, ValueError):
        known = {}
    out, fresh = {}, {}
    for path in sorted(wheelhouse.iterdir()):
        if path.name.startswith(".") or not path.is_file():
            continue
        st = path.stat()
        stamp = [st.st_size, st.st_mtime_ns]
        entry = known.get(path.name)
        digest = entry[1] if entry and entry[0] == stamp else hashing.file_sha256(path)
        out[path.name] = digest
        fresh[path.name] = [stamp, digest]
    if fresh != known:
        runs.write_json(index_path, fresh)
    return out


def write_context(out: IO[bytes], inputs: BuildInputs, wheels: dict[str, Path]) -> None:
    """The build context as a tar with fixed owners and times: Dockerfile, lockfile,
    tools.txt, the launcher package and the locked wheels, nothing else."""
    package = PACKAGE_DIR
    small = [
        ("Dockerfile", inputs.dockerfile.encode()),
        ("lockfile.txt", inputs.lockfile.encode()),
        ("tools.txt", images.installer_requirements(inputs.entries).encode()),
    ]
    files = [(f"launcher/{rel}", path) for rel, path in images.source_files(package)]
    files += [(f"wheels/{name}", path) for name, path in sorted(wheels.items())]
    _tar_files(out, small, files)


def _tar_files(out: IO[bytes], data: Iterable[tuple[str, bytes]], paths: Iterable[tuple[str, Path]] = ()) -> None:
    import io

    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, blob in data:
            tar.addfile(_info(name, len(blob)), io.BytesIO(blob))
        for name, path in paths:
            with open(path, "rb") as f:
                tar.addfile(_info(name, os.fstat(f.fileno()).st_size), f)


def _info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info
