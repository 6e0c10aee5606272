"""CIFAR-10/100 from generated archives in the official pickle format, and JPEG-bytes containers."""
import io
import pickle
import tarfile

import numpy as np
import pytest

import fedcond.data as fd
from fedcond.data import cifar, container
from fedcond.data.formats import cifar_pickle
from fedcond.errors import FedcondError


def test_cifar10_tar_converted_and_loaded(tmp_path, gen):
    want = gen.cifar_tar(tmp_path / "cifar-10-python.tar.gz", "cifar10", per_batch=4)
    out = cifar.convert_cifar10_tar(tmp_path / "cifar-10-python.tar.gz", tmp_path, preset=1)
    assert out == tmp_path / "cifar10.npz.xz" and container.sidecar_path(out).is_file()
    d = fd.load("cifar10", tmp_path)
    assert d.x_train.shape == (20, 32, 32, 3) and d.x_test.shape == (4, 32, 32, 3)
    np.testing.assert_array_equal(d.x_train, want["x_train"])  # CHW rows -> HWC pixels, batches in order
    np.testing.assert_array_equal(d.x_test, want["x_test"])
    np.testing.assert_array_equal(d.y_train, want["y_train"])
    assert d.y_train.dtype == np.int64 and d.classes == tuple(f"c{i}" for i in range(10))
    assert "OK" in fd.verify("cifar10", tmp_path)
    assert not (tmp_path / ".cache").exists()  # plain pixels: nothing to cache


def test_cifar10_tar_without_meta_uses_official_names(tmp_path, gen):
    gen.cifar_tar(tmp_path / "c.tar.gz", "cifar10", per_batch=2, meta=False)
    cifar.convert_cifar10_tar(tmp_path / "c.tar.gz", tmp_path, preset=1)
    assert fd.load("cifar10", tmp_path).classes[0] == "airplane"


def test_cifar100_tar_converted_and_loaded(tmp_path, gen):
    want = gen.cifar_tar(tmp_path / "cifar-100-python.tar.gz", "cifar100", per_batch=5)
    cifar.convert_cifar100_tar(tmp_path / "cifar-100-python.tar.gz", tmp_path, preset=1)
    d = fd.load("cifar100", tmp_path)
    assert d.x_train.shape == (15, 32, 32, 3) and d.x_test.shape == (5, 32, 32, 3)
    np.testing.assert_array_equal(d.x_train, want["x_train"])
    np.testing.assert_array_equal(d.y_test, want["y_test"])
    np.testing.assert_array_equal(d.coarse_train, want["coarse_train"])
    assert d.coarse_train.dtype == np.int64
    assert len(d.classes) == 100 and d.classes[3] == "fine3"
    assert len(d.coarse_classes) == 20 and d.coarse_classes[19] == "coarse19"


def test_archive_missing_members(tmp_path):
    path = tmp_path / "empty.tar.gz"
    with tarfile.open(path, "w:gz"):
        pass
    with pytest.raises(FedcondError, match="lacks the members"):
        cifar.convert_cifar100_tar(path, tmp_path, preset=1)


def test_pickles_cannot_run_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    data = pickle.dumps({b"data": Evil()}, protocol=2)
    path = tmp_path / "evil.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("cifar-100-python/train")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(FedcondError, match="refusing to load .*print"):
        cifar_pickle.read_tar_pickles(path, {"train"})


def _jpeg_container(path, n_train=6, n_test=3):
    from PIL import Image

    rng = np.random.default_rng(1)
    arrays = {}
    for split, n in (("train", n_train), ("test", n_test)):
        blobs = []
        for _ in range(n):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buf, "JPEG")
            blobs.append(np.frombuffer(buf.getvalue(), np.uint8))
        arrays[f"{split}_jpeg"] = np.concatenate(blobs)
        arrays[f"{split}_offsets"] = np.concatenate([[0], np.cumsum([len(b) for b in blobs])]).astype(np.int64)
        arrays[f"y_{split}"] = (np.arange(n) % 10).astype(np.uint8)
    container.write_container(path, arrays, preset=1)
    return arrays


def test_jpeg_container_decoded_and_cached_in_data_dir(tmp_path):
    arrays = _jpeg_container(tmp_path / "cifar10.npz.xz")
    d = fd.load("cifar10", tmp_path)
    assert d.x_train.shape == (6, 32, 32, 3) and d.classes[1] == "automobile"
    ref = cifar.decode_jpegs(arrays["test_jpeg"], arrays["test_offsets"])
    np.testing.assert_array_equal(d.x_test, ref)
    entries = list((tmp_path / ".cache").glob("cifar10-decoded-*.npz"))
    assert len(entries) == 1  # keyed by the container's sha256
    assert entries[0].name[len("cifar10-decoded-"):-4] == container.sha256_file(tmp_path / "cifar10.npz.xz")[:16]
    np.testing.assert_array_equal(fd.load("cifar10", tmp_path).x_train, d.x_train)
    # A new container (new hash) gets a fresh entry and the stale one is removed.
    _jpeg_container(tmp_path / "cifar10.npz.xz", n_train=4)
    assert fd.load("cifar10", tmp_path).x_train.shape[0] == 4
    assert len(list((tmp_path / ".cache").glob("cifar10-decoded-*.npz"))) == 1


def test_decode_rejects_bad_offsets():
    with pytest.raises(FedcondError, match="offsets"):
        cifar.decode_jpegs(np.zeros(10, np.uint8), np.array([0, 5, 4, 10]))
