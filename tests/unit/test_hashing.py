"""Known answers for the digests every verdict rests on: weights, output trees, the launcher's source.

``weights_sha256`` is documented as sha256 over, for each weight in the model's order,
``"<path>|<dtype>|<shape>\\n"`` then its little-endian C-order bytes. These tests pin
that format with digests computed independently (hashlib on the spelled-out bytes) and
as constants, so a digest that drops the dtype, the shape, the byte order or the order
of the weights fails here, not silently in a stored run's comparison.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from launcher.record import hashing

KERNEL = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
KERNEL_SHA256 = "53549bb7fbcab79043e2ef1d843b8adb339c49ed5000c5d9674b1a379e5bcc69"


def _one(name: str, array: np.ndarray) -> str:
    h = hashlib.sha256()
    hashing.array_digest(h, name, array)
    return h.hexdigest()


def _spelled_out(*items: tuple[str, str, tuple, bytes]) -> str:
    h = hashlib.sha256()
    for name, dtype, shape, data in items:
        h.update(f"{name}|{dtype}|{shape}\n".encode() + data)
    return h.hexdigest()


def test_an_array_digest_is_name_dtype_shape_then_little_endian_bytes():
    little = b"".join(np.float32(v).tobytes() for v in range(1, 7))  # this machine is little-endian
    assert _one("dense/kernel", KERNEL) == _spelled_out(("dense/kernel", "<f4", (2, 3), little)) == KERNEL_SHA256


def test_big_endian_arrays_hash_as_their_little_endian_values():
    big = KERNEL.astype(">f4")
    assert big.tobytes() != KERNEL.tobytes()
    assert _one("dense/kernel", big) == KERNEL_SHA256
    assert _one("b", np.array([1, 2], dtype=">i8")) == _one("b", np.array([1, 2], dtype="<i8"))


def test_the_dtype_the_shape_and_the_name_are_part_of_the_digest():
    same_bytes = [KERNEL.view(np.int32), KERNEL.reshape(3, 2), KERNEL.reshape(6), KERNEL.view(np.uint8).reshape(2, 12)]
    digests = {_one("dense/kernel", a) for a in same_bytes} | {_one("dense/bias", KERNEL), KERNEL_SHA256}
    assert len(digests) == len(same_bytes) + 2
    as_int = _spelled_out(("dense/kernel", "<i4", (2, 3), KERNEL.tobytes()))
    assert _one("dense/kernel", KERNEL.view(np.int32)) == as_int


def test_arrays_hash_in_c_order_whatever_their_memory_layout():
    fortran = np.asfortranarray(KERNEL)
    assert not fortran.flags.c_contiguous
    assert _one("dense/kernel", fortran) == KERNEL_SHA256
    transposed = KERNEL.T  # a view: its C-order bytes are 1 4 2 5 3 6
    expected = b"".join(np.float32(v).tobytes() for v in (1, 4, 2, 5, 3, 6))
    assert _one("k", transposed) == _spelled_out(("k", "<f4", (3, 2), expected))


def test_a_scalar_and_an_empty_array_have_their_own_digests():
    # np.ascontiguousarray makes a 0-d array 1-d: a scalar weight is hashed with shape (1,), as stored runs have it.
    three = (3).to_bytes(8, "little")
    assert _one("step", np.array(3, dtype=np.int64)) == _spelled_out(("step", "<i8", (1,), three))
    assert _one("e", np.zeros((0, 4), dtype=np.float32)) == _spelled_out(("e", "<f4", (0, 4), b""))


WEIGHTS = [
    ("dense", "dense/kernel", KERNEL),
    ("dense", "dense/bias", np.array([0.5, -0.0], dtype=np.float64)),
    ("out", "out/kernel", np.array([[7]], dtype=np.int8)),
]


def test_weights_digest_is_one_stream_over_all_weights_and_one_per_layer():
    total, per_layer = hashing.weights_digest(WEIGHTS)
    bias = np.array([0.5, -0.0]).tobytes()
    assert total == _spelled_out(
        ("dense/kernel", "<f4", (2, 3), KERNEL.tobytes()),
        ("dense/bias", "<f8", (2,), bias),
        ("out/kernel", "|i1", (1, 1), b"\x07"),
    )
    assert per_layer == {
        "dense": _spelled_out(("dense/kernel", "<f4", (2, 3), KERNEL.tobytes()), ("dense/bias", "<f8", (2,), bias)),
        "out": _spelled_out(("out/kernel", "|i1", (1, 1), b"\x07")),
    }
    assert list(per_layer) == ["dense", "out"]  # model order
    assert (total, per_layer["dense"], per_layer["out"]) == (
        "30c464de0b14cef7e9064101572ffe4e76116e70ab0988fb40e6133ab8333283",
        "e54d5635cb26b9046be75aae787c0720861839d4e343344e949afe9c827d372d",
        "5199a08be26df5ee4ebdca8b973f1bb921ef25d6da09d23e14f4e0e93f2a0dc2",
    )


def test_the_order_of_weights_and_the_sign_of_zero_change_the_digest():
    total, _ = hashing.weights_digest(WEIGHTS)
    assert hashing.weights_digest([WEIGHTS[1], WEIGHTS[0], WEIGHTS[2]])[0] != total
    signed = [WEIGHTS[0], ("dense", "dense/bias", np.array([0.5, 0.0])), WEIGHTS[2]]
    assert hashing.weights_digest(signed)[0] != total  # bitwise: -0.0 is not 0.0
    assert hashing.weights_digest([]) == (hashlib.sha256().hexdigest(), {})


def test_keras_weights_lists_every_layers_weights_by_path_in_order():
    class W:
        def __init__(self, path, value, with_path=True):
            self.name = path.rsplit("/", 1)[-1]
            if with_path:
                self.path = path
            self.value = value

        def numpy(self):
            return self.value

    layers = [
        type("L", (), {"name": "a", "weights": [W("a/kernel", [1.0]), W("a/bias", [2.0], with_path=False)]})(),
        type("L", (), {"name": "b", "weights": []})(),
        type("L", (), {"name": "c", "weights": [W("c/kernel", [[3]])]})(),
    ]
    got = hashing.keras_weights(type("M", (), {"layers": layers})())
    assert [(layer, path) for layer, path, _ in got] == [("a", "a/kernel"), ("a", "bias"), ("c", "c/kernel")]
    assert all(isinstance(v, np.ndarray) for _, _, v in got) and got[2][2].shape == (1, 1)


def test_tree_digest_hashes_every_file_hidden_and_nested_by_relative_path(tmp_path):
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    files = {"b.txt": b"b", "a.npy": b"a", ".state": b"s", "sub/x": b"x", "sub/deeper/.y": b"y", "sub/deeper/z": b""}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    got = hashing.tree_digest(tmp_path)
    assert got == {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    assert hashing.tree_digest(tmp_path / "missing") == {}
    assert hashing.tree_digest(tmp_path / "b.txt") == {}  # a file is no tree


def test_source_files_and_version(tmp_path):
    for name, data in {
        "a.py": b"A",
        "sub/b.py": b"B",
        "sub/__pycache__/b.cpython-311.pyc": b"c",
        "sub/__pycache__/stale.txt": b"s",
        "c.pyc": b"c",
        "d.pyo": b"d",
        "data/x.npz": b"X",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    files = hashing.source_files(tmp_path)
    assert files == [
        ("a.py", tmp_path / "a.py"),
        ("data/x.npz", tmp_path / "data/x.npz"),
        ("sub/b.py", tmp_path / "sub/b.py"),
    ]
    expected = hashlib.sha256(
        b"".join(f"{rel}\n{hashlib.sha256(p.read_bytes()).hexdigest()}\n".encode() for rel, p in files)
    ).hexdigest()[:16]
    assert hashing.source_version("0.1.0", files) == f"0.1.0+src.{expected}"
    (tmp_path / "a.py").write_bytes(b"A2")
    assert hashing.source_version("0.1.0", files) != f"0.1.0+src.{expected}"


def _source_version_of(root: Path) -> str:
    """launcher_source_version() as the launcher package copied under ``root`` computes it."""
    code = "from launcher.record import hashing; print(hashing.launcher_source_version())"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_launchers_source_version_is_its_version_and_its_package_directorys_files():
    """In this process (the test below runs copies of the package in subprocesses, which mutation
    testing cannot follow): the released version, and the digest of the directory ``import launcher``
    found, not of a directory above it."""
    import launcher
    from launcher.version import __version__

    package = Path(launcher.__file__).resolve().parent
    assert hashing.launcher_source_version() == hashing.source_version(__version__, hashing.source_files(package))
    assert hashing.launcher_source_version() != hashing.source_version(
        __version__, hashing.source_files(package / "record")
    )


def test_the_launchers_source_version_follows_every_file_of_its_package_and_nothing_else(tmp_path):
    """The whole package, wherever it is installed: a task, a config file, the bundled data
    change it; caches and the place do not."""
    from launcher.version import __version__

    package = Path(hashing.__file__).resolve().parents[1]
    here = hashing.launcher_source_version()
    assert here.startswith(f"{__version__}+src.") and len(here) == len(f"{__version__}+src.") + 16
    copy = tmp_path / "elsewhere"
    shutil.copytree(package, copy / "launcher", ignore=shutil.ignore_patterns("__pycache__"))
    assert _source_version_of(copy) == here  # another place, the same content
    (copy / "launcher" / "__pycache__").mkdir(exist_ok=True)
    (copy / "launcher" / "__pycache__" / "stale.cpython-311.pyc").write_bytes(b"cache")
    assert _source_version_of(copy) == here
    seen = {here}
    for rel in ("job/tasks/mnist.py", "configs/train/mnist.yaml", "job/bootstrap.py"):
        with open(copy / "launcher" / rel, "a") as f:
            f.write("\n# changed\n")
        seen.add(_source_version_of(copy))
    assert len(seen) == 4  # each change gave a new version


@pytest.mark.parametrize("layer", ["dense", "out"])
def test_trace_points_carry_the_same_digests(layer):
    from launcher.record import trace

    p = trace.point(3, 1, 0.25, WEIGHTS)
    total, per_layer = hashing.weights_digest(WEIGHTS)
    assert p["weights"] == "30c464de0b14cef7e9064101572ffe4e76116e70ab0988fb40e6133ab8333283" == total
    assert dict(p["layers"])[layer] == per_layer[layer][: trace.LAYER_DIGITS] and len(dict(p["layers"])[layer]) == 16


def test_a_file_is_hashed_in_chunks_never_read_whole(tmp_path, monkeypatch):
    """``file_sha256``, the one file-hash helper: a wheel (TensorFlow's: 0.5-1 GB), a dataset, an
    object of the store are hashed ``CHUNK`` bytes at a time."""
    big = tmp_path / "big.whl"
    big.write_bytes(os.urandom(1000))
    reads = []

    class Spy:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def read(self, n=-1):
            reads.append(n)
            return self.f.read(n)

    monkeypatch.setattr(hashing, "CHUNK", 64)
    monkeypatch.setattr(hashing, "open", lambda path, mode: Spy(open(path, mode)), raising=False)
    assert hashing.file_sha256(big) == hashlib.sha256(big.read_bytes()).hexdigest()
    assert len(reads) == 17 and set(reads) == {64}  # 16 chunks and the empty read that ends it
