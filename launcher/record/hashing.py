"""Stable digests of model weights and output files."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np


def array_digest(h: hashlib._Hash, name: str, array: np.ndarray) -> None:
    """Feed one named array into ``h``: name, dtype, shape, then little-endian C-order bytes."""
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
            out.append((layer.name, getattr(weight, "path", weight.name), np.asarray(weight.numpy())))
    return out


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file below ``root``, keyed by POSIX relative path (sorted)."""
    if not root.is_dir():
        return {}
    out = {}
    for dirpath, _dirs, files in sorted(os.walk(root)):
        for name in sorted(files):
            path = Path(dirpath) / name
            h = hashlib.sha256(path.read_bytes()).hexdigest()
            out[path.relative_to(root).as_posix()] = h
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
        h.update(f"{rel}\n{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return f"{version}+src.{h.hexdigest()[:16]}"


def launcher_source_version() -> str:
    """This launcher's version and the hash of its package source (the code of every task and of the bootstrap)."""
    from launcher.version import __version__

    return source_version(__version__, source_files(Path(__file__).resolve().parents[1]))


def launcher_files(names) -> dict[str, str]:
    """sha256 of each of this launcher's files named relative to its package (``missing`` when
    it has none of that name): the launcher code a stored run's job imported, as it is here."""
    package = Path(__file__).resolve().parents[1]
    out = {}
    for name in names:
        path = package / name
        out[name] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
    return out
