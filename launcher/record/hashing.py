"""Stable digests of model weights and output files."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where arrays are hashed: a file's hash needs none (light imports)
    import numpy as np

CHUNK = 1 << 20  # bytes of a file hashed at a time: a file is never read whole


def array_digest(h: hashlib._Hash, name: str, array: np.ndarray) -> None:
    """Feed one named array into ``h``: name, dtype, shape, then little-endian C-order bytes."""
    import numpy as np

    a = np.ascontiguousarray(array)
    a = a.astype(a.dtype.newbyteorder("<"), copy=False)
    h.update(f"{name}|{a.dtype.str}|{a.shape}\n".encode())
    h.update(a.tobytes())


def weights_digest(named_arrays: list[tuple[str, str, np.ndarray]]) -> tuple[str, dict[str, str]]:
    """sha256 over all weights, and one per layer.

    ``named_arrays`` holds (layer name, weight path, value) in the model's own order,
    which Keras keeps stable for a given architecture.
    """
    total = hashlib.sha256()
    per_layer: dict[str, hashlib._Hash] = {}
    for layer, path, value in named_arrays:
        array_digest(total, path, value)
        array_digest(per_layer.setdefault(layer, hashlib.sha256()), path, value)
    return total.hexdigest(), {name: h.hexdigest() for name, h in per_layer.items()}


def keras_weights(model) -> list[tuple[str, str, np.ndarray]]:
    """(layer name, weight path, value) for every weight of a Keras model."""
    out = []
    for layer in model.layers:
        for weight in layer.weights:
            out.append((layer.name, getattr(weight, "path", weight.name), _asarray(weight.numpy())))
    return out


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file below ``root``, keyed by POSIX relative path (sorted)."""
    if not root.is_dir():
        return {}
    out = {}
    for dirpath, _dirs, files in sorted(os.walk(root)):
        for name in sorted(files):
            path = Path(dirpath) / name
            out[path.relative_to(root).as_posix()] = file_sha256(path)
    return out


def source_files(package_dir: Path) -> list[tuple[str, Path]]:
    """The launcher package's files that go into an image (no caches), sorted."""
    out = []
    for path in sorted(package_dir.rglob("*")):
        rel = path.relative_to(package_dir)
        if path.is_file() and "__pycache__" not in rel.parts and path.suffix not in (".pyc", ".pyo"):
            out.append((rel.as_posix(), path))
    return out


def source_version(version: str, files: list[tuple[str, Path]]) -> str:
    """``0.1.0+src.<hash>``: the launcher's version and the hash of its installed source."""
    h = hashlib.sha256()
    for rel, path in files:
        h.update(f"{rel}\n{file_sha256(path)}\n".encode())
    return f"{version}+src.{h.hexdigest()[:16]}"


def launcher_source_version() -> str:
    """This launcher's version and the hash of its package source (the code of every task and of the bootstrap)."""
    from launcher.version import __version__

    return source_version(__version__, source_files(Path(__file__).resolve().parents[1]))


# The launcher's modules that moved, by their old names (a run recorded before the move names
# them so): the in-job modules left launcher.run for launcher.job at fingerprint schema 4.
MOVED = {
    "launcher.run.bootstrap": "launcher.job.bootstrap",
    "launcher.run.notebook": "launcher.job.notebook",
    "launcher.run.userapi": "launcher.job.userapi",
    "launcher.run.determinism": "launcher.job.determinism",
    "launcher.run.data": "launcher.job.data",
    "launcher.run.interrupts": "launcher.job.interrupts",
    "launcher.run.tasks": "launcher.job.tasks",
    "launcher.run.tasks.mnist": "launcher.job.tasks.mnist",
    "launcher.run.tasks.user": "launcher.job.tasks.user",
    "launcher.run.reads": "launcher.job.observe.reads",
    "launcher.run.fswatch": "launcher.job.observe.fswatch",
    "launcher.run.envreads": "launcher.job.observe.envreads",
    "launcher.run.imports": "launcher.job.observe.imports",
    "launcher.run.seeding": "launcher.job.observe.seeding",
    "launcher.run.observe": "launcher.job.training.observer",
    "launcher.run.fitstate": "launcher.job.training.fitstate",
    "launcher.run.checkpoints": "launcher.job.training.checkpoints",
    "launcher.run.tf1": "launcher.job.training.tf1",
    "launcher.run.trace": "launcher.job.training.trace",
    "launcher.run.keep": "launcher.record.store.keep",
}


def module_name(relative: str) -> str:
    """The launcher's module named by its file relative to the package (``job/observe/reads.py``
    -> ``launcher.job.observe.reads``; a package's ``__init__.py`` -> the package), under its
    current name when it has moved since (``MOVED``)."""
    parts = relative.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    name = ".".join(["launcher", *parts])
    return MOVED.get(name, name)


def _package() -> Path:
    return Path(__file__).resolve().parents[1]


def launcher_modules(stored: dict[str, str]) -> dict[str, str]:
    """This launcher's content of each module a stored run's job imported (``stored``: module
    name -> sha256): by name where it has that module, else under whatever name holds the same
    content here (a module moved unchanged), else ``missing``."""
    package = _package()
    here = {module_name(rel): path for rel, path in source_files(package) if path.suffix == ".py"}
    by_content: dict[str, str] = {}
    out: dict[str, str] = {}
    for name, digest in stored.items():
        path = here.get(name)
        if path is not None:
            out[name] = file_sha256(path)
            continue
        if not by_content:
            by_content = {file_sha256(p): n for n, p in here.items()}
        out[by_content.get(digest, name)] = digest if digest in by_content else "missing"
    return out


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file's content, read ``CHUNK`` bytes at a time: the one file-hash helper."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def _asarray(value: object) -> np.ndarray:
    import numpy as np

    return np.asarray(value)
