"""MNIST sources: the packaged sample, Keras' download, a local .npz or IDX directory.

Every source returns the same ``Mnist`` record with the sha256 of each file read,
for the run's data fingerprint. A source never falls back silently to another.
"""

from __future__ import annotations

import gzip
import hashlib
import struct
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from launcher.errors import DataError

KERAS_MNIST_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
KERAS_MNIST_SHA256 = "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"
IDX_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}


@dataclass
class Mnist:
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    source: str  # a human description, printed at the start of a run
    files: dict[str, str] = field(default_factory=dict)  # path -> sha256 of each file read


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load(spec: str) -> Mnist:
    """Load MNIST from ``spec``: ``sample``, ``full``, an .npz path or an IDX directory."""
    if spec == "sample":
        ref = resources.files("launcher") / "data" / "mnist-sample.npz"
        with resources.as_file(ref) as path:
            data = _load_npz(path, "the packaged sample of real MNIST (2,000 train / 500 test)")
        data.files = {"launcher/data/mnist-sample.npz": data.files[str(path)]}
        return data
    if spec == "full":
        return _load_npz(_download_full(), "keras.datasets MNIST (60,000 train / 10,000 test)")
    path = Path(spec).expanduser()
    if path.is_dir():
        return _load_idx_dir(path)
    if path.is_file():
        return _load_npz(path, f"{path}")
    raise DataError(f"train.data {spec!r} is not sample, full, an .npz file or an IDX directory")


def _download_full() -> Path:
    from keras.utils import get_file

    try:
        path = Path(get_file("mnist.npz", origin=KERAS_MNIST_URL, file_hash=KERAS_MNIST_SHA256))
    except Exception as exc:  # network errors come in many types
        raise DataError(
            f"could not download MNIST ({type(exc).__name__}); are you offline? "
            "use train.data=sample or a local .npz/IDX path"
        ) from None
    if _sha256(path) != KERAS_MNIST_SHA256:
        raise DataError(f"{path} does not have the official mnist.npz sha256; delete it and retry")
    return path


def _load_npz(path: Path, source: str) -> Mnist:
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {key: f[key] for key in IDX_FILES if key in f}
    except (OSError, ValueError) as exc:
        raise DataError(f"{path} is not a readable .npz file: {exc}") from None
    missing = [key for key in IDX_FILES if key not in arrays]
    if missing:
        raise DataError(f"{path} is not Keras MNIST layout: missing {', '.join(missing)}")
    data = Mnist(**arrays, source=source, files={str(path): _sha256(path)})
    _check_shapes(data, str(path))
    return data


def _read_idx(path: Path) -> np.ndarray:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    if len(raw) < 8:
        raise DataError(f"{path} is not an IDX file (too short)")
    zero, dtype_code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype_code != 0x08 or ndim not in (1, 3):
        raise DataError(f"{path} is not an unsigned-byte IDX file of MNIST images or labels")
    shape = struct.unpack(">" + "I" * ndim, raw[4 : 4 + 4 * ndim])
    body = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(shape)):
        raise DataError(f"{path}: header says {shape} but the file holds {body.size} bytes")
    return body.reshape(shape)


def _find(directory: Path, stem: str) -> Path:
    for candidate in (directory / stem, directory / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    raise DataError(f"IDX directory {directory} has no {stem}[.gz]")


def _load_idx_dir(directory: Path) -> Mnist:
    paths = {key: _find(directory, stem) for key, stem in IDX_FILES.items()}
    try:
        arrays = {key: _read_idx(path) for key, path in paths.items()}
    except OSError as exc:
        raise DataError(f"cannot read IDX file: {exc}") from None
    data = Mnist(
        **arrays,
        source=f"MNIST IDX files in {directory}",
        files={str(p): _sha256(p) for p in paths.values()},
    )
    _check_shapes(data, str(directory))
    return data


def _check_shapes(data: Mnist, where: str) -> None:
    for split in ("train", "test"):
        x, y = getattr(data, f"x_{split}"), getattr(data, f"y_{split}")
        if x.ndim != 3 or x.shape[1:] != (28, 28):
            raise DataError(f"{where}: x_{split} has shape {x.shape}, expected (N, 28, 28)")
        if y.shape != (x.shape[0],):
            raise DataError(f"{where}: y_{split} has shape {y.shape}, expected ({x.shape[0]},)")
        if x.shape[0] == 0:
            raise DataError(f"{where}: x_{split} is empty")
        if not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() > 9:
            raise DataError(f"{where}: y_{split} must hold integer labels 0..9")
        if not np.issubdtype(x.dtype, np.integer) or x.min() < 0 or x.max() > 255:
            raise DataError(f"{where}: x_{split} must hold pixel values 0..255")
