"""EMNIST from a generated gzip.zip in the official layout (transposed IDX images)."""
import zipfile

import numpy as np
import pytest

import fedcond.data as fd
from fedcond.data import emnist
from fedcond.errors import DatasetMissing, FedcondError


def test_both_splits_converted_upright(tmp_path, gen):
    want = gen.emnist_zip(tmp_path / "gzip.zip")
    written = emnist.convert_emnist_zip(tmp_path / "gzip.zip", tmp_path, preset=1)
    assert [p.name for p in written] == ["emnist_byclass.npz.xz", "emnist_balanced.npz.xz"]
    for split, n_classes in (("byclass", 62), ("balanced", 47)):
        d = fd.load("emnist", tmp_path, split=split)
        assert d.x_train.shape == (15, 28, 28) and d.x_test.shape == (6, 28, 28)
        np.testing.assert_array_equal(d.x_train, want[split]["x_train"])  # transposed back
        assert (d.x_train[:, :4, :] == 255).all()  # the marked band is at the top again
        np.testing.assert_array_equal(d.y_test, want[split]["y_test"])
        assert len(d.classes) == n_classes


def test_class_names():
    byclass, balanced = emnist.SPLITS["byclass"], emnist.SPLITS["balanced"]
    assert byclass[:10] == tuple("0123456789") and byclass[10] == "A" and byclass[36] == "a" and byclass[61] == "z"
    assert balanced[36:] == tuple("abdefghnqrt")
    assert set(balanced) == set(byclass) - set("cijklmopsuvwxyz")


def test_default_split_is_balanced(tmp_path, gen):
    gen.emnist_zip(tmp_path / "gzip.zip")
    emnist.convert_emnist_zip(tmp_path / "gzip.zip", tmp_path, ("balanced",), preset=1)
    assert len(fd.load("emnist", tmp_path).classes) == 47
    with pytest.raises(DatasetMissing, match="emnist_byclass.npz.xz"):
        fd.load("emnist", tmp_path, split="byclass")
    assert "emnist_balanced.npz.xz" in fd.verify("emnist", tmp_path)


def test_bad_split_and_bad_zip(tmp_path, gen):
    with pytest.raises(FedcondError, match="byclass, balanced"):
        fd.load("emnist", tmp_path, split="letters")
    path = tmp_path / "gzip.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("gzip/emnist-balanced-mapping.txt", "0 48\n1 49\n")
    with pytest.raises(FedcondError, match="lacks emnist-balanced-train-images"):
        emnist.convert_emnist_zip(path, tmp_path, ("balanced",), preset=1)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("gzip/emnist-balanced-mapping.txt", "36 99\n")  # says label 36 is 'c'
    with pytest.raises(FedcondError, match="mapping"):
        emnist.convert_emnist_zip(path, tmp_path, ("balanced",), preset=1)
