"""Images as data: the image spec, lockfiles, the base reference, the Dockerfile, the tag.

Pure functions only; nothing here talks to Docker or runs a program. ``imagebuild``
runs the pipeline (download wheels, build, verify) and ``containers`` talks to the
daemon. An image is named by a *content tag*: the sha256 of everything that goes
into it (rendered Dockerfile, lockfile, base digest, launcher source), so an
existing tag can be reused without building, and a changed input gets a new tag.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import ImageSpecError, LockfileError
from launcher.record.hashing import source_files, source_version  # noqa: F401 (re-exported)


def _assets_root() -> Path:
    """Where images/ and lockfiles/ are: the source tree (a checkout or an editable install),
    else the copies a wheel installs under ``<prefix>/share/launch`` (pyproject data-files)."""
    source = Path(__file__).resolve().parents[2]
    if (source / "images").is_dir():
        return source
    return Path(sys.prefix) / "share" / "launch"


LAUNCH_ROOT = _assets_root()
REPOSITORY = "launch"  # images are tagged launch/<name>:<content tag>
LOCAL_BASE = "launch-base:bookworm"  # made by `launch image bootstrap-base`; image.base=local
TAG_LENGTH = 24  # hex digits of the content hash shown in the tag (96 bits)
TAG_SCHEMA = "launch-image-v1"  # change when the meaning of the inputs changes

# The image's interpreter and platform: CPython 3.11 on Debian bookworm (glibc 2.36),
# x86-64. Wheels for the image are chosen for this target, never for the host.
TARGET_PYTHON = "3.11"
TARGET_ABIS = ("cp311", "abi3", "none")
TARGET_PLATFORMS = (
    *(f"manylinux_2_{minor}_x86_64" for minor in range(36, 4, -1)),
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
)
# Installed first, from the lockfile's own pins: pip runs the install, setuptools and
# wheel build the few sdist-only packages (antlr4-python3-runtime) with no network.
INSTALLERS = ("pip", "setuptools", "wheel")

_DIGEST = re.compile(r"^(?P<name>[^@\s]+)@(?P<digest>sha256:[0-9a-f]{64})$")
_PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")


@dataclass(frozen=True)
class ImageSpec:
    """The ``image`` config group, checked and with paths made absolute."""

    name: str  # tf-cpu | tf-gpu: the image family and the tag's repository
    template: Path  # Dockerfile template
    lockfile: Path  # pip-tools lockfile with --generate-hashes
    requirements: Path  # the lockfile's input (.in), for `launch image lock`
    base: str  # "local" or a reference pinned by digest
    allow_unpinned: bool = False  # accept a base tag without @sha256
    ca_bundle: str | None = None  # PEM bundle for host-side downloads; never in an image
    index_url: str | None = None  # package index for downloads and locking; None: pip's config
    wheelhouse: Path | None = None  # cache of downloaded wheels; None: ~/.cache/launch/wheels
    gpus: bool = False  # request all GPUs from the NVIDIA container runtime

    @property
    def repository(self) -> str:
        return f"{REPOSITORY}/{self.name}"


def _path(value: object, field: str, root: Path) -> Path:
    if not isinstance(value, str) or not value:
        raise ImageSpecError(f"image.{field} must be a path, got {value!r}")
    path = Path(value).expanduser()
    return path if path.is_absolute() else root / path


def spec_from_config(image: Mapping, root: Path = LAUNCH_ROOT) -> ImageSpec:
    """Check the ``image`` group; relative paths are relative to the launcher's root."""
    name = image.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name):
        raise ImageSpecError(f"image.name must be a lower-case image name such as tf-cpu, got {name!r}")
    base = image.get("base")
    if not isinstance(base, str) or not base:
        raise ImageSpecError("image.base must be 'local' or a reference pinned by digest (name@sha256:...)")
    for key in ("allow_unpinned", "gpus"):
        if not isinstance(image.get(key, False), bool):
            raise ImageSpecError(f"image.{key} must be true or false, got {image.get(key)!r}")
    ca_bundle = image.get("ca_bundle")
    if ca_bundle is not None and not Path(str(ca_bundle)).expanduser().is_file():
        raise ImageSpecError(f"image.ca_bundle {ca_bundle!r} is not a file; give a PEM bundle or null")
    wheelhouse = image.get("wheelhouse")
    spec = ImageSpec(
        name=name,
        template=_path(image.get("template"), "template", root),
        lockfile=_path(image.get("lockfile"), "lockfile", root),
        requirements=_path(image.get("requirements"), "requirements", root),
        base=base,
        allow_unpinned=bool(image.get("allow_unpinned", False)),
        ca_bundle=str(Path(str(ca_bundle)).expanduser()) if ca_bundle else None,
        index_url=image.get("index_url") or None,
        wheelhouse=Path(str(wheelhouse)).expanduser() if wheelhouse else None,
        gpus=bool(image.get("gpus", False)),
    )
    parse_base(spec.base, spec.allow_unpinned)  # refuse an unpinned base early
    return spec


# ---------------------------------------------------------------- base image
def parse_base(base: str, allow_unpinned: bool = False) -> tuple[str, str | None]:
    """The reference to build FROM and its digest (None: ask the daemon, as for ``local``).

    A reference without ``@sha256:`` can change under the same name, so it is refused
    unless ``image.allow_unpinned=true``.
    """
    if base == "local":
        return LOCAL_BASE, None
    match = _DIGEST.match(base)
    if match:
        return base, match.group("digest")
    if allow_unpinned:
        return base, None
    raise ImageSpecError(
        f"image.base {base!r} is not pinned by digest: use name:tag@sha256:<digest>, "
        "image.base=local (after `launch image bootstrap-base`), or image.allow_unpinned=true"
    )


# ---------------------------------------------------------------- lockfiles
@dataclass(frozen=True)
class LockEntry:
    """One pinned requirement of a lockfile."""

    name: str  # normalized (PEP 503)
    version: str
    hashes: tuple[str, ...]  # "sha256:<hex>", as written
    line: str  # the requirement as pip reads it, hashes included

    @property
    def sha256s(self) -> frozenset[str]:
        return frozenset(h.split(":", 1)[1] for h in self.hashes if h.startswith("sha256:"))


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _logical_lines(text: str) -> Iterable[str]:
    buffer = ""
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0] if not raw.lstrip().startswith("#") else ""
        line = line.rstrip()
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        buffer += line
        if buffer.strip():
            yield " ".join(buffer.split())
        buffer = ""
    if buffer.strip():
        yield " ".join(buffer.split())


def parse_lockfile(text: str, where: str = "lockfile") -> list[LockEntry]:
    """Every requirement of a pip-tools lockfile; each must be ``name==version`` with hashes."""
    entries = []
    for line in _logical_lines(text):
        if line.startswith("-"):
            raise LockfileError(
                f"{where}: option line {line.split()[0]!r} is not allowed in a lockfile; "
                "regenerate it with `launch image lock`",
                where,
            )
        requirement, *options = line.split(" --hash=")
        hashes = tuple(o.strip() for o in options)
        spec = requirement.split(";", 1)[0].strip()
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*===?\s*([^\s,;]+)", spec)
        if not match:
            raise LockfileError(
                f"{where}: {spec!r} is not pinned as name==version; regenerate with `launch image lock`",
                where,
                spec,
            )
        name = normalize(match.group(1))
        if not hashes or not all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes):
            raise LockfileError(
                f"{where}: {name} has no sha256 --hash; regenerate with `launch image lock` "
                "(pip-compile --generate-hashes)",
                where,
                name,
            )
        entries.append(LockEntry(name, match.group(3), hashes, line))
    if not entries:
        raise LockfileError(f"{where} lists no requirements; regenerate with `launch image lock`", where)
    return entries


def installer_requirements(entries: list[LockEntry]) -> str:
    """The lockfile's pins of pip, setuptools and wheel, with their hashes (tools.txt)."""
    found = {e.name: e for e in entries if e.name in INSTALLERS}
    if "pip" not in found:
        raise LockfileError(
            "the lockfile pins no pip: add pip to the .in file and run `launch image lock` "
            "(the build installs with the locked pip)"
        )
    return "".join(_requirement_text(found[n]) for n in INSTALLERS if n in found)


def _requirement_text(entry: LockEntry) -> str:
    requirement = entry.line.split(" --hash=")[0]
    hashes = "".join(f" \\\n    --hash={h}" for h in entry.hashes)
    return f"{requirement}{hashes}\n"


def sha256_text(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- Dockerfile and tag
def render_dockerfile(template: str, values: Mapping[str, str], where: str = "template") -> str:
    """Fill ``{{ name }}`` placeholders; an unknown placeholder is an error, not a blank."""
    missing = sorted({m.group(1) for m in _PLACEHOLDER.finditer(template)} - set(values))
    if missing:
        raise ImageSpecError(f"{where} uses unknown placeholder(s) {', '.join(missing)}")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def dockerfile_values(spec: ImageSpec, base_ref: str) -> dict[str, str]:
    return {"base": base_ref, "name": spec.name}


def content_tag(dockerfile: str, lockfile: str, base_digest: str, launcher_version: str) -> str:
    """sha256 of everything that goes into an image: its name is its content."""
    h = hashlib.sha256()
    for part in (TAG_SCHEMA, dockerfile, lockfile, base_digest, launcher_version):
        data = part.encode()
        h.update(f"{len(data)}\n".encode())
        h.update(data)
    return h.hexdigest()


def image_ref(spec_name: str, tag: str) -> str:
    return f"{REPOSITORY}/{spec_name}:{tag[:TAG_LENGTH]}"


# ---------------------------------------------------------------- host-side commands
def pip_download_argv(
    python: str, lockfile: Path, wheelhouse: Path, ca_bundle: str | None, index_url: str | None
) -> list[str]:
    """Fetch every file the lockfile pins for the image's target into ``wheelhouse``.

    ``--require-hashes`` checks each file against the lockfile; files already in the
    wheelhouse with the right hash are not downloaded again.
    """
    argv = [
        python,
        "-m",
        "pip",
        "download",
        "--require-hashes",
        "--no-deps",
        "--dest",
        str(wheelhouse),
        "--python-version",
        TARGET_PYTHON,
        "--implementation",
        "cp",
        "--progress-bar",
        "off",
    ]
    for abi in TARGET_ABIS:
        argv += ["--abi", abi]
    for platform in TARGET_PLATFORMS:
        argv += ["--platform", platform]
    argv += _index_options(ca_bundle, index_url)
    return [*argv, "--requirement", str(lockfile)]


def pip_compile_argv(
    python: str, requirements: Path, output: Path, ca_bundle: str | None, index_url: str | None
) -> list[str]:
    """pip-compile with hashes for every file of each pin, installers included."""
    argv = [
        python,
        "-m",
        "piptools",
        "compile",
        "--generate-hashes",
        "--allow-unsafe",
        "--strip-extras",
        "--no-emit-index-url",
        "--no-emit-find-links",
        "--quiet",
        "--output-file",
        str(output),
    ]
    argv += ["--index-url", index_url or "https://pypi.org/simple"]
    if ca_bundle:
        argv += ["--cert", ca_bundle]
    return [*argv, str(requirements)]


def _index_options(ca_bundle: str | None, index_url: str | None) -> list[str]:
    out = []
    if index_url:
        out += ["--index-url", index_url]
    if ca_bundle:
        out += ["--cert", ca_bundle]
    return out


def select_wheels(entries: list[LockEntry], available: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """Files of the wheelhouse the lockfile allows (name -> sha256), and pins with no file.

    ``available`` maps file name to sha256. Every file whose hash a pin lists is taken;
    pip in the build picks the right one for the platform and checks it again.
    """
    chosen: dict[str, str] = {}
    missing = []
    for entry in entries:
        files = {f: h for f, h in available.items() if h in entry.sha256s}
        if not files:
            missing.append(f"{entry.name}=={entry.version}")
        chosen.update(files)
    return dict(sorted(chosen.items())), missing
