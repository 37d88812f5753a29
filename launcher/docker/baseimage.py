"""The local base image and lockfiles: ``launch image bootstrap-base`` and ``launch image lock``.

``bootstrap_base`` makes a Debian base image with no registry at all: debootstrap
(minbase, plus python3, python3-venv and ca-certificates) into a root filesystem,
a tar with sorted names, fixed times and numeric owners, then ``docker import``.
``lock`` pins an image's ``.in`` file with hashes for the image's own Python, by
running pip-compile inside a throwaway container of the base image (or on this host
when its Python is the image's).
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

from launcher import console, proc
from launcher.docker import container_spec, containers, images
from launcher.docker.imagebuild import cache_dir
from launcher.errors import ImageError

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
PACKAGES = ("python3", "python3-venv", "ca-certificates")
# Files that differ between two debootstraps of the same packages and matter to no one.
CLEAN = (
    "var/log",
    "var/cache/apt",
    "var/lib/apt/lists",
    "var/cache/debconf/templates.dat-old",
    "var/cache/ldconfig/aux-cache",
)
PIP_TOOLS = "pip-tools==7.6.2"  # installed in the throwaway locking container only


def debootstrap_argv(rootfs: Path, suite: str = SUITE, mirror: str = MIRROR) -> list[str]:
    return ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", suite, str(rootfs), mirror]


def tar_argv(rootfs: Path, out: Path) -> list[str]:
    """GNU tar of ``rootfs`` that is the same bytes for the same files: sorted, times fixed."""
    return [
        "tar",
        "--create",
        f"--file={out}",
        f"--directory={rootfs}",
        "--sort=name",
        "--numeric-owner",
        "--mtime=@0",
        "--format=gnu",
        ".",
    ]


def import_changes(rootfs_sha256: str) -> list[str]:
    return [
        f'LABEL {containers.MANAGED}="1" launch.role="base" launch.rootfs_sha256="{rootfs_sha256}"',
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8",
        'CMD ["python3"]',
    ]


def bootstrap_base(
    ref: str = images.LOCAL_BASE,
    suite: str = SUITE,
    mirror: str = MIRROR,
    force: bool = False,
) -> str:
    """Make the local base image ``ref`` (reused when it exists unless ``force``); its id."""
    cli = containers.client()
    attrs = containers.find_image(cli, ref)
    if attrs is not None and not force:
        console.log.info("base image %s exists (%s); reused", ref, attrs["Id"][7:19])
        return attrs["Id"]
    if shutil.which("debootstrap") is None:
        raise ImageError("debootstrap is not installed: apt-get install debootstrap (as root)")
    if os.geteuid() != 0:
        raise ImageError("launch image bootstrap-base must run as root (debootstrap needs it)")
    logs = cache_dir("logs")
    work = Path(tempfile.mkdtemp(prefix="bootstrap-base-", dir=cache_dir()))
    try:
        rootfs, tar = work / "rootfs", work / "rootfs.tar"
        console.log.info("debootstrap %s from %s (about a minute); log: %s/bootstrap-base.log", suite, mirror, logs)
        with console.Progress("image", f"debootstrap {suite}") as progress:
            _run(debootstrap_argv(rootfs, suite, mirror), logs / "bootstrap-base.log", "debootstrap", progress)
            clean_rootfs(rootfs)
            progress.doing = "packing the root filesystem"
            _run(tar_argv(rootfs, tar), logs / "bootstrap-base.log", "tar", progress)
        from launcher.record.hashing import file_sha256

        digest = file_sha256(tar)
        image_id = containers.import_rootfs(cli, tar, ref, import_changes(digest))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    console.log.info("base image %s imported (%s), rootfs sha256 %s", ref, image_id[7:19], digest[:16])
    return image_id


def clean_rootfs(rootfs: Path) -> None:
    """Remove logs and caches (files only; directories stay, packages expect them)."""
    for rel in CLEAN:
        path = rootfs / rel
        if path.is_file():
            path.unlink()
        elif path.is_dir():
            for sub in path.rglob("*"):
                if sub.is_file() or sub.is_symlink():
                    sub.unlink()


def _run(argv: list[str], log: Path, what: str, progress: console.Progress) -> None:
    env = {**os.environ, "LC_ALL": "C"}
    code = proc.run_streaming(argv, env, log, echo=False, progress=progress)
    if code != 0:
        raise ImageError(f"{what} failed (exit {code}); see the end of {log}")


# ---------------------------------------------------------------- lock
def lock(spec: images.ImageSpec, on_host: bool = False, echo: bool = True) -> Path:
    """Regenerate ``spec.lockfile`` from ``spec.requirements`` with hashes; its path. ``echo``:
    pip-compile's output on the terminal too (its errors are there: the lock's log goes with its
    scratch directory)."""
    if not spec.requirements.is_file():
        raise ImageError(f"image.requirements {str(spec.requirements)!r} is not a file")
    header = f"launch image lock image={spec.name}"
    # pip-compile runs in a scratch directory holding lockfiles/<name>.in, so the
    # "via -r lockfiles/..." comments read the same wherever the lock was made.
    source, target = Path("lockfiles") / spec.requirements.name, Path("lockfiles") / spec.lockfile.name
    with tempfile.TemporaryDirectory(prefix="launch-lock-") as tmp:
        (Path(tmp) / "lockfiles").mkdir()
        shutil.copy(spec.requirements, Path(tmp) / source)
        if on_host:
            _lock_on_host(spec, Path(tmp), source, target, header, echo)
        else:
            _lock_in_base(spec, Path(tmp), source, target, header, echo)
        out = Path(tmp) / target
        if not out.is_file():
            raise ImageError(f"pip-compile wrote no {target}; see its output above")
        text = out.read_text()
        images.parse_lockfile(text, str(out))  # every pin has hashes
        spec.lockfile.write_text(text)
    console.log.info("wrote %s", spec.lockfile)
    return spec.lockfile


def _lock_on_host(spec, tmp: Path, source: Path, target: Path, header: str, echo: bool) -> None:
    here = f"{platform.python_version_tuple()[0]}.{platform.python_version_tuple()[1]}"
    if here != images.TARGET_PYTHON or platform.machine() != "x86_64" or sys.platform != "linux":
        raise ImageError(
            f"this host runs Python {here} on {sys.platform}/{platform.machine()}, the image "
            f"Python {images.TARGET_PYTHON} on linux/x86_64: lock in the base image (without --host)"
        )
    argv = images.pip_compile_argv(sys.executable, source, target, spec.ca_bundle, spec.index_url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, CUSTOM_COMPILE_COMMAND=header)
    code = proc.run_streaming(argv, env, tmp / "lock.log", cwd=str(tmp), echo=echo)
    if code != 0:
        raise ImageError(f"pip-compile failed (exit {code}); is the index reachable?")


def _lock_in_base(spec, tmp: Path, source: Path, target: Path, header: str, echo: bool) -> None:
    base_ref, _ = images.parse_base(spec.base, spec.allow_unpinned)
    cli = containers.client()
    if containers.find_image(cli, base_ref) is None:
        raise ImageError(f"base image {base_ref} is missing: run `launch image bootstrap-base` or pull it")
    ca = "/etc/launch-ca.pem"
    compile_argv = images.pip_compile_argv(
        "/tmp/lock/bin/python", source, target, ca if spec.ca_bundle else None, spec.index_url
    )
    script = lock_script(compile_argv, ca if spec.ca_bundle else None)
    mounts = [container_spec.MountSpec(str(tmp), "/work", read_only=False)]
    if spec.ca_bundle:
        mounts.append(container_spec.MountSpec(spec.ca_bundle, ca, read_only=True))
    console.log.info("locking %s inside %s (network: host)", spec.requirements.name, base_ref)
    env = {
        "CUSTOM_COMPILE_COMMAND": header,
        "PIP_CONFIG_FILE": "/dev/null",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "HOME": "/tmp",
    }
    status, _ = containers.run_tool(
        cli,
        base_ref,
        ["sh", "-c", script],
        mounts=mounts,
        env=env,
        network="host",
        user=f"{os.getuid()}:{os.getgid()}",
        on_output=(lambda b: (sys.stdout.buffer.write(b), sys.stdout.flush())) if echo else (lambda b: None),
    )
    if status != 0:
        raise ImageError(
            f"pip-compile in {base_ref} failed (exit {status}): is the index reachable? behind a "
            "TLS-intercepting proxy set image.ca_bundle=/path/to/ca.pem"
        )


def lock_script(compile_argv: list[str], ca: str | None) -> str:
    """The shell line run in the locking container: a venv with pip-tools, then pip-compile."""
    import shlex

    cert = f" --cert {shlex.quote(ca)}" if ca else ""
    return (
        "set -e; cd /work; python3 -m venv /tmp/lock; "
        f"/tmp/lock/bin/python -m pip install -q{cert} {shlex.quote(PIP_TOOLS)}; " + shlex.join(compile_argv)
    )
