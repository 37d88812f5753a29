import gzip
import shutil

import numpy as np
import pytest

from launcher.errors import DataError
from launcher.job import data
from launcher.record import hashing


def test_packaged_sample_is_real_mnist_and_says_so():
    d = data.load("sample")
    assert d.x_train.shape == (2000, 28, 28) and d.x_test.shape == (500, 28, 28)
    assert "sample" in d.source
    assert list(d.files) == ["launcher/data/mnist-sample.npz"]
    assert set(np.unique(d.y_train)) == set(range(10))


def test_npz(mnist_npz):
    d = data.load(str(mnist_npz))
    assert d.x_train.shape == (600, 28, 28) and d.y_test.shape == (200,)
    assert d.files == {str(mnist_npz): hashing.file_sha256(mnist_npz)}


def test_idx_directory_matches_the_same_images(mnist_idx_dir, mnist_npz):
    d = data.load(str(mnist_idx_dir))
    npz = data.load(str(mnist_npz))
    assert d.x_train.shape == (200, 28, 28) and d.x_test.shape == (100, 28, 28)
    np.testing.assert_array_equal(d.x_train, npz.x_train[:200])
    assert len(d.files) == 4


def test_missing_path():
    with pytest.raises(DataError, match="is not sample, full"):
        data.load("/no/such/file.npz")


def test_not_an_npz(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_text("hello")
    with pytest.raises(DataError, match="is not an .npz file"):
        data.load(str(bad))


def test_npz_with_wrong_keys_or_shapes(tmp_path):
    path = tmp_path / "wrong.npz"
    np.savez(path, x_train=np.zeros((4, 28, 28), np.uint8))
    with pytest.raises(DataError, match="missing y_train"):
        data.load(str(path))
    np.savez(
        path,
        x_train=np.zeros((4, 32, 32), np.uint8),
        y_train=np.zeros(4, np.uint8),
        x_test=np.zeros((2, 32, 32), np.uint8),
        y_test=np.zeros(2, np.uint8),
    )
    with pytest.raises(DataError, match=r"expected \(N, 28, 28\)"):
        data.load(str(path))
    np.savez(
        path,
        x_train=np.zeros((4, 28, 28), np.uint8),
        y_train=np.full(4, 11),
        x_test=np.zeros((2, 28, 28), np.uint8),
        y_test=np.zeros(2, np.uint8),
    )
    with pytest.raises(DataError, match="labels 0..9"):
        data.load(str(path))


def test_idx_directory_with_a_truncated_file(tmp_path, mnist_idx_dir):
    for f in mnist_idx_dir.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    raw = gzip.decompress((tmp_path / "train-images-idx3-ubyte.gz").read_bytes())
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(raw[:-100]))
    with pytest.raises(DataError, match="header says"):
        data.load(str(tmp_path))
    (tmp_path / "train-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError, match="no train-labels-idx1-ubyte"):
        data.load(str(tmp_path))


# ---------------------------------------------------------------- the launcher's check (issue 13)
def test_check_accepts_every_good_source_and_refuses_it_spoiled(mnist_npz, mnist_idx_dir, tmp_path):
    for spec in ("sample", str(mnist_npz), str(mnist_idx_dir)):
        assert data.check(spec) is None
    # The same sources with one flaw each: the check looks, it does not wave through.
    with np.load(mnist_npz) as f:
        arrays = dict(f)
    np.savez(tmp_path / "spoiled.npz", **{**arrays, "y_train": arrays["y_train"][:-1]})
    with pytest.raises(DataError, match="x_train holds 600 images but y_train holds 599 labels"):
        data.check(str(tmp_path / "spoiled.npz"))
    shutil.copytree(mnist_idx_dir, tmp_path / "idx")
    (next((tmp_path / "idx").glob("t10k-labels-idx1-ubyte*"))).unlink()
    with pytest.raises(DataError, match="no t10k-labels-idx1-ubyte"):
        data.check(str(tmp_path / "idx"))


def test_a_file_that_is_not_an_npz_is_refused_without_pickle_advice():
    with pytest.raises(DataError) as info:
        data.check("/etc/passwd")
    assert str(info.value).startswith("/etc/passwd is not an .npz file (not a zip archive)")
    assert "pickle" not in str(info.value)


class _Trap:
    """Unpickling this creates ``path``: proof that a pickle was loaded."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_an_npz_of_python_objects_is_refused_and_never_unpickled(tmp_path):
    marker = tmp_path / "unpickled"
    path = tmp_path / "objects.npz"
    trap = np.empty(1, dtype=object)
    trap[0] = _Trap(marker)
    np.savez(
        path,
        x_train=trap,
        y_train=np.zeros(1, np.uint8),
        x_test=np.zeros((1, 28, 28), np.uint8),
        y_test=np.zeros(1, np.uint8),
    )
    for call in (data.check, data.load):
        with pytest.raises(DataError, match="x_train holds Python objects"):
            call(str(path))
    assert not marker.exists()


@pytest.mark.parametrize(
    "arrays,message",
    [
        ({"a": np.zeros(3)}, r"missing x_train, y_train, x_test, y_test \(it holds a\)"),
        (
            {
                "x_train": np.zeros((4, 32, 32), np.uint8),
                "y_train": np.zeros(4, np.uint8),
                "x_test": np.zeros((2, 28, 28), np.uint8),
                "y_test": np.zeros(2, np.uint8),
            },
            r"x_train has shape \(4, 32, 32\), expected \(N, 28, 28\)",
        ),
        (
            {
                "x_train": np.zeros((4, 28, 28), np.uint8),
                "y_train": np.zeros(3, np.uint8),
                "x_test": np.zeros((2, 28, 28), np.uint8),
                "y_test": np.zeros(2, np.uint8),
            },
            "x_train holds 4 images but y_train holds 3 labels",
        ),
        (
            {
                "x_train": np.zeros((0, 28, 28), np.uint8),
                "y_train": np.zeros(0, np.uint8),
                "x_test": np.zeros((2, 28, 28), np.uint8),
                "y_test": np.zeros(2, np.uint8),
            },
            "x_train is empty",
        ),
        (
            {
                "x_train": np.zeros((4, 28, 28), np.float32),
                "y_train": np.zeros(4, np.uint8),
                "x_test": np.zeros((2, 28, 28), np.uint8),
                "y_test": np.zeros(2, np.uint8),
            },
            "pixel values 0..255",
        ),
    ],
)
def test_an_npz_of_the_wrong_layout_is_refused_by_its_headers(tmp_path, arrays, message):
    path = tmp_path / "wrong.npz"
    np.savez(path, **arrays)
    with pytest.raises(DataError, match=message):
        data.check(str(path))


def test_an_empty_idx_directory_is_refused(tmp_path):
    with pytest.raises(DataError, match="holds no MNIST IDX files"):
        data.check(str(tmp_path))


def _copy_idx(src, dst):
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())


def test_an_idx_directory_whose_images_and_labels_disagree_is_refused(tmp_path, mnist_idx_dir):
    _copy_idx(mnist_idx_dir, tmp_path)
    raw = gzip.decompress((tmp_path / "train-labels-idx1-ubyte.gz").read_bytes())
    fewer = raw[:4] + (100).to_bytes(4, "big") + raw[8:108]  # 100 labels, said and held
    (tmp_path / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(fewer))
    with pytest.raises(
        DataError, match="train-images-idx3-ubyte.gz holds 200 images but train-labels-idx1-ubyte.gz holds 100 labels"
    ):
        data.check(str(tmp_path))


def test_a_truncated_idx_file_is_seen_from_its_size(tmp_path, mnist_idx_dir):
    _copy_idx(mnist_idx_dir, tmp_path)
    raw = gzip.decompress((tmp_path / "t10k-images-idx3-ubyte.gz").read_bytes())
    (tmp_path / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(raw[:-100]))
    with pytest.raises(DataError, match="header says"):
        data.check(str(tmp_path))


@pytest.fixture
def no_full_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "keras_cache", lambda: [tmp_path / "keras" / "datasets" / "mnist.npz"])
    data._check_full.cache_clear()
    yield tmp_path / "keras" / "datasets" / "mnist.npz"
    data._check_full.cache_clear()


def test_full_without_network_names_the_reason(no_full_cache, monkeypatch):
    monkeypatch.setattr(data, "_unreachable", lambda url: "[Errno -2] Name or service not known")
    with pytest.raises(DataError) as info:
        data.check("full")
    assert "storage.googleapis.com cannot be reached ([Errno -2] Name or service not known)" in str(info.value)
    assert "train.data=sample" in str(info.value)


def test_full_in_the_keras_cache_needs_no_network(no_full_cache, monkeypatch):
    no_full_cache.parent.mkdir(parents=True)
    no_full_cache.write_bytes(b"pretend mnist")
    monkeypatch.setattr(data, "KERAS_MNIST_SHA256", hashing.file_sha256(no_full_cache))
    monkeypatch.setattr(data, "_unreachable", lambda url: pytest.fail("the network was asked"))
    data.check("full")


def test_full_in_a_container_is_refused_it_has_no_network(no_full_cache):
    with pytest.raises(DataError, match="container has no network"):
        data.check("full", in_container=True)


def test_unreachable_says_why_a_server_cannot_be_reached():
    assert "refused" in data._unreachable("http://127.0.0.1:9/mnist.npz").lower()
