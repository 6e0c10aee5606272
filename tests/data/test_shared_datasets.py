"""The real shared datasets: shapes, label counts, PACS domains, the decoded CIFAR-10 copy."""
import os
from pathlib import Path

import numpy as np

import fedcond.data as fd
import fedcond.data.cifar as cifar
from fedcond.data import DomainData, ImageData

MNIST_TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
MNIST_TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def test_mnist(shared_dir):
    d = fd.load("mnist", shared_dir)
    assert isinstance(d, ImageData) and d.name == "mnist"
    assert d.x_train.shape == (60000, 28, 28) and d.x_test.shape == (10000, 28, 28)
    assert d.x_train.dtype == np.uint8 and d.y_train.dtype == np.int64 and d.y_test.dtype == np.int64
    assert np.bincount(d.y_train).tolist() == MNIST_TRAIN_COUNTS
    assert np.bincount(d.y_test).tolist() == MNIST_TEST_COUNTS
    assert d.classes == tuple("0123456789") and d.coarse_train is None
    assert abs(d.x_train.mean() / 255 - 0.1307) < 5e-4


def test_fmnist_via_env(shared_dir, monkeypatch, gen):
    gen.shared_file(shared_dir, "fashion_mnist.npz.xz")
    monkeypatch.setenv("FEDCOND_DATA", str(shared_dir))
    d = fd.load("fmnist")  # data dir from $FEDCOND_DATA
    assert d.x_train.shape == (60000, 28, 28) and d.x_test.shape == (10000, 28, 28)
    assert np.bincount(d.y_train).tolist() == [6000] * 10
    assert np.bincount(d.y_test).tolist() == [1000] * 10
    assert d.classes[0] == "T-shirt/top" and d.classes[9] == "Ankle boot"


def test_pacs(shared_dir, gen):
    for dom in ("photo", "art_painting", "cartoon", "sketch"):
        gen.shared_file(shared_dir, f"pacs_{dom}.npz.xz")
    d = fd.load("pacs", shared_dir)
    assert isinstance(d, DomainData)
    assert d.x.shape == (9991, 112, 112, 3) and d.x.dtype == np.uint8
    assert d.domains == ("photo", "art_painting", "cartoon", "sketch")
    assert np.bincount(d.domain).tolist() == [1670, 2048, 2344, 3929]
    assert d.classes == ("dog", "elephant", "giraffe", "guitar", "horse", "house", "person")
    assert np.bincount(d.y[d.domain == 0]).tolist() == [189, 202, 182, 186, 199, 280, 432]
    # (domains= subsets are tested on small generated files in test_pacs_files.py)


def test_cifar10_jpeg_copy_decoded_and_cached(shared_dir, gen, monkeypatch):
    gen.shared_file(shared_dir, "cifar10.npz.xz")
    d = fd.load("cifar10", shared_dir)
    assert d.x_train.shape == (50000, 32, 32, 3) and d.x_test.shape == (10000, 32, 32, 3)
    assert d.x_train.dtype == np.uint8
    assert np.bincount(d.y_train).tolist() == [5000] * 10 and np.bincount(d.y_test).tolist() == [1000] * 10
    assert d.classes == ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
    means = d.x_train.reshape(-1, 3).mean(0) / 255
    np.testing.assert_allclose(means, [0.49125, 0.48209, 0.44652], atol=5e-4)
    # Decoded pixels are cached in <data_dir>/.cache, or in the user cache when the folder is
    # read-only (the shared folder is, by its mode bits, and must stay untouched).
    user_cache = Path(os.environ["XDG_CACHE_HOME"]) / "fedcond" / ".cache"
    cached = [*user_cache.glob("cifar10-decoded-*.npz"), *(shared_dir / ".cache").glob("cifar10-decoded-*.npz")]
    assert len(cached) >= 1
    # the second load reads the cache: neither the container nor a JPEG is touched (a check of what runs,
    # not of how long it takes, which a busy machine stretches)
    def must_not_run(*args, **kwargs):
        raise AssertionError("the cached CIFAR-10 was decoded again")

    monkeypatch.setattr(cifar, "decode_jpegs", must_not_run)
    monkeypatch.setattr(cifar, "read_container", must_not_run)
    again = fd.load("cifar10", shared_dir)
    np.testing.assert_array_equal(again.x_test, d.x_test)


def test_verify_summaries(shared_dir):
    line = fd.verify("mnist", shared_dir)
    assert "\n" not in line and "OK" in line and "mnist.npz.xz" in line
    assert "embedded" in fd.verify("digits")
