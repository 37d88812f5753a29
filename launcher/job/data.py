"""MNIST sources: the packaged sample, Keras' download, a local .npz or IDX directory.

Every source returns the same ``Mnist`` record with the sha256 of each file read,
for the run's data fingerprint. A source never falls back silently to another.
``check`` is the launcher's cheap look at a source before a run exists (the layout,
never the pixels); ``load`` in the job checks the layout again and then every value.
Nothing here ever unpickles: an .npz holding Python objects is refused.
"""

from __future__ import annotations

import functools
import gzip
import os
import struct
import zipfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from launcher.errors import DataError
from launcher.record.hashing import file_sha256

KERAS_MNIST_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
KERAS_MNIST_SHA256 = "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"
KERAS_MNIST_HOST = "storage.googleapis.com"
REACH_TIMEOUT_S = 5.0
LAYOUT = "Keras' mnist.npz layout (x_train, y_train, x_test, y_test)"
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
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(
            f"could not download MNIST from {KERAS_MNIST_URL}: {detail}; use train.data=sample or a local .npz/IDX path"
        ) from None
    if file_sha256(path) != KERAS_MNIST_SHA256:
        raise DataError(f"{path} does not have the official mnist.npz sha256; delete it and retry")
    return path


def _load_npz(path: Path, source: str) -> Mnist:
    _npz_layout(path)  # the archive and every array header first: never np.load's pickle path
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {key: f[key] for key in IDX_FILES}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise DataError(f"{path} is not a readable .npz file: {exc}") from None
    data = Mnist(**arrays, source=source, files={str(path): file_sha256(path)})
    _check_shapes(data, str(path))
    return data


def _read_idx(path: Path) -> np.ndarray:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    shape = _idx_shape(path, raw)
    body = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * len(shape))
    if body.size != int(np.prod(shape)):
        raise DataError(f"{path}: header says {shape} but the file holds {body.size} bytes")
    return body.reshape(shape)


def _find(directory: Path, stem: str) -> Path:
    for candidate in (directory / stem, directory / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    raise DataError(f"IDX directory {directory} has no {stem}[.gz]")


def _load_idx_dir(directory: Path) -> Mnist:
    _idx_layout(directory)
    paths = {key: _find(directory, stem) for key, stem in IDX_FILES.items()}
    try:
        arrays = {key: _read_idx(path) for key, path in paths.items()}
    except (OSError, EOFError) as exc:
        raise DataError(f"cannot read IDX file: {exc}") from None
    data = Mnist(
        **arrays,
        source=f"MNIST IDX files in {directory}",
        files={str(p): file_sha256(p) for p in paths.values()},
    )
    _check_shapes(data, str(directory))
    return data


def _check_shapes(data: Mnist, where: str) -> None:
    arrays = {key: getattr(data, key) for key in IDX_FILES}
    check_layout({key: (a.shape, a.dtype) for key, a in arrays.items()}, where)
    for split in ("train", "test"):
        x, y = getattr(data, f"x_{split}"), getattr(data, f"y_{split}")
        if y.min() < 0 or y.max() > 9:
            raise DataError(f"{where}: y_{split} must hold integer labels 0..9")
        if x.min() < 0 or x.max() > 255:
            raise DataError(f"{where}: x_{split} must hold pixel values 0..255")


# ---------------------------------------------------------------- the launcher's check
def check(spec: str, *, in_container: bool = False) -> None:
    """Refuse a data source the job could not read, before a run exists (``DataError``).

    Cheap: an .npz's members and array headers (keys, shapes, dtypes; Python objects
    refused, never unpickled), an IDX directory's headers and sizes, and for ``full``
    the Keras cache or else a reachable download server. The values (labels 0..9,
    pixels 0..255) are checked by the job when it loads them.
    """
    if spec == "sample":
        return
    if spec == "full":
        _check_full(in_container)
        return
    path = Path(spec).expanduser()
    if path.is_dir():
        _idx_layout(path)
    elif path.is_file():
        _npz_layout(path)
    else:
        raise DataError(f"train.data {spec!r} is not sample, full, an .npz file or an IDX directory")


def check_layout(
    arrays: dict[str, tuple[tuple[int, ...], np.dtype]], where: str, names: dict[str, str] | None = None
) -> None:
    """Raise ``DataError`` unless ``arrays`` (key -> shape, dtype) is MNIST: N 28x28 images,
    N integer labels per split, N > 0. ``names`` are what to call each key (IDX file names)."""
    names = names or {key: key for key in IDX_FILES}
    for split in ("train", "test"):
        (xs, xt), (ys, yt) = arrays[f"x_{split}"], arrays[f"y_{split}"]
        x, y = names[f"x_{split}"], names[f"y_{split}"]
        if len(xs) != 3 or tuple(xs[1:]) != (28, 28):
            raise DataError(f"{where}: {x} has shape {tuple(xs)}, expected (N, 28, 28)")
        if len(ys) != 1:
            raise DataError(f"{where}: {y} has shape {tuple(ys)}, expected ({xs[0]},)")
        if ys[0] != xs[0]:
            raise DataError(f"{where}: {x} holds {xs[0]} images but {y} holds {ys[0]} labels")
        if xs[0] == 0:
            raise DataError(f"{where}: {x} is empty")
        if not np.issubdtype(yt, np.integer):
            raise DataError(f"{where}: {y} must hold integer labels 0..9, not {yt}")
        if not np.issubdtype(xt, np.integer):
            raise DataError(f"{where}: {x} must hold pixel values 0..255 (integers), not {xt}")


def _npz_layout(path: Path) -> None:
    """An .npz's array headers, read from the zip without loading an array or a pickle."""
    if not zipfile.is_zipfile(path):
        raise DataError(
            f"{path} is not an .npz file (not a zip archive); train.data takes an .npz in {LAYOUT}, "
            "an IDX directory, sample or full"
        )
    arrays = {}
    try:
        with zipfile.ZipFile(path) as archive:
            members = {name.removesuffix(".npy"): name for name in archive.namelist() if name.endswith(".npy")}
            missing = [key for key in IDX_FILES if key not in members]
            if missing:
                held = ", ".join(sorted(members)) or "no arrays"
                raise DataError(f"{path} is not in {LAYOUT}: missing {', '.join(missing)} (it holds {held})")
            for key in IDX_FILES:
                with archive.open(members[key]) as f:
                    version = np.lib.format.read_magic(f)
                    read = (
                        np.lib.format.read_array_header_1_0
                        if version == (1, 0)
                        else np.lib.format.read_array_header_2_0
                    )
                    shape, _, dtype = read(f)
                if dtype.hasobject:
                    raise DataError(
                        f"{path}: {key} holds Python objects, not numbers; an .npz of pickled objects is never loaded"
                    )
                arrays[key] = (shape, dtype)
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise DataError(f"{path} is not a readable .npz file: {exc}") from None
    check_layout(arrays, str(path))


def _idx_layout(directory: Path) -> None:
    """An IDX directory's four headers, and each file's size against its header."""
    found = {
        key: c for key, stem in IDX_FILES.items() for c in (directory / stem, directory / f"{stem}.gz") if c.is_file()
    }
    if not found:
        expected = ", ".join(f"{stem}[.gz]" for stem in IDX_FILES.values())
        raise DataError(f"{directory} holds no MNIST IDX files (expected {expected})")
    paths = {key: _find(directory, stem) for key, stem in IDX_FILES.items()}
    arrays = {}
    for key, path in paths.items():
        try:
            head, size = _idx_head(path)
        except (OSError, EOFError) as exc:
            raise DataError(f"cannot read IDX file {path}: {exc}") from None
        shape = _idx_shape(path, head)
        if size != 4 + 4 * len(shape) + int(np.prod(shape)):
            raise DataError(f"{path}: header says {shape} but the file holds {size - 4 - 4 * len(shape)} bytes")
        arrays[key] = (shape, np.dtype(np.uint8))
    check_layout(arrays, str(directory), {key: p.name for key, p in paths.items()})


def _idx_head(path: Path) -> tuple[bytes, int]:
    """The first 16 bytes of an IDX file (gzipped or not) and its uncompressed size."""
    if path.suffix != ".gz":
        with open(path, "rb") as f:
            return f.read(16), os.fstat(f.fileno()).st_size
    with gzip.open(path, "rb") as f:
        head = f.read(16)
    with open(path, "rb") as f:
        f.seek(-4, os.SEEK_END)
        return head, struct.unpack("<I", f.read(4))[0]  # gzip's ISIZE: the size mod 2**32


def _idx_shape(path: Path, raw: bytes) -> tuple[int, ...]:
    if len(raw) < 8:
        raise DataError(f"{path} is not an IDX file (too short)")
    zero, dtype_code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype_code != 0x08 or ndim not in (1, 3) or len(raw) < 4 + 4 * ndim:
        raise DataError(f"{path} is not an unsigned-byte IDX file of MNIST images or labels")
    return struct.unpack(">" + "I" * ndim, raw[4 : 4 + 4 * ndim])


def keras_cache() -> list[Path]:
    """Where Keras' ``get_file`` keeps mnist.npz: $KERAS_HOME, else ~/.keras (or /tmp/.keras)."""
    homes = [os.environ["KERAS_HOME"]] if "KERAS_HOME" in os.environ else [os.path.expanduser("~/.keras")]
    homes.append(os.path.join("/tmp", ".keras"))
    return [Path(home) / "datasets" / "mnist.npz" for home in homes]


@functools.lru_cache(maxsize=2)
def _check_full(in_container: bool) -> None:
    if in_container:
        raise DataError(
            "train.data=full is downloaded by the job, and a job's container has no network: "
            "download it once with runtime=local, then pass the file: train.data=~/.keras/datasets/mnist.npz"
        )
    if any(p.is_file() and file_sha256(p) == KERAS_MNIST_SHA256 for p in keras_cache()):
        return
    reason = _unreachable(KERAS_MNIST_URL)
    if reason:
        raise DataError(
            f"train.data=full: MNIST is not in the Keras cache ({keras_cache()[0]}) and "
            f"{KERAS_MNIST_HOST} cannot be reached ({reason}); "
            "use train.data=sample or a local .npz/IDX path"
        )


def _unreachable(url: str) -> str | None:
    """Why ``url`` cannot be fetched (one HEAD request, the proxy settings Keras uses), or None."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=REACH_TIMEOUT_S):
            return None
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code} {exc.reason}"
    except urllib.error.URLError as exc:
        return str(exc.reason)
    except OSError as exc:  # a timeout, a reset connection
        return str(exc) or type(exc).__name__
