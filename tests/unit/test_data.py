import gzip

import numpy as np
import pytest

from launcher.errors import DataError
from launcher.run import data


def test_packaged_sample_is_real_mnist_and_says_so():
    d = data.load("sample")
    assert d.x_train.shape == (2000, 28, 28) and d.x_test.shape == (500, 28, 28)
    assert "sample" in d.source
    assert list(d.files) == ["launcher/data/mnist-sample.npz"]
    assert set(np.unique(d.y_train)) == set(range(10))


def test_npz(mnist_npz):
    d = data.load(str(mnist_npz))
    assert d.x_train.shape == (600, 28, 28) and d.y_test.shape == (200,)
    assert d.files == {str(mnist_npz): data._sha256(mnist_npz)}


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
    with pytest.raises(DataError, match="not a readable .npz"):
        data.load(str(bad))


def test_npz_with_wrong_keys_or_shapes(tmp_path):
    path = tmp_path / "wrong.npz"
    np.savez(path, x_train=np.zeros((4, 28, 28), np.uint8))
    with pytest.raises(DataError, match="missing y_train"):
        data.load(str(path))
    np.savez(path, x_train=np.zeros((4, 32, 32), np.uint8), y_train=np.zeros(4, np.uint8),
             x_test=np.zeros((2, 32, 32), np.uint8), y_test=np.zeros(2, np.uint8))  # fmt: skip
    with pytest.raises(DataError, match=r"expected \(N, 28, 28\)"):
        data.load(str(path))
    np.savez(path, x_train=np.zeros((4, 28, 28), np.uint8), y_train=np.full(4, 11),
             x_test=np.zeros((2, 28, 28), np.uint8), y_test=np.zeros(2, np.uint8))  # fmt: skip
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
