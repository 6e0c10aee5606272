"""PACS loading logic on small generated pacs_<domain>.npz.xz files (with sidecar hashes)."""
import numpy as np
import pytest

import fedcond.data as fd
from fedcond.data import container, pacs
from fedcond.errors import ChecksumMismatch, FedcondError


def _write(root, sizes=(3, 2, 4, 1)):
    for i, (dom, n) in enumerate(zip(pacs.DOMAINS, sizes, strict=True)):
        container.write_container(root / pacs.filename(dom), {
            "x": np.full((n, 5, 5, 3), i, np.uint8), "y": (np.arange(n) % 7).astype(np.uint8),
            "d": np.full(n, i, np.uint8), "names": np.array([f"{dom}/dog/{j}.jpg" for j in range(n)])}, preset=1)


def test_domains_subset_in_order(tmp_path):
    _write(tmp_path)
    d = fd.load("pacs", tmp_path)
    assert d.domains == pacs.DOMAINS and np.bincount(d.domain).tolist() == [3, 2, 4, 1]
    sub = fd.load("pacs", tmp_path, domains=("sketch", "photo"))
    assert sub.domains == ("sketch", "photo") and sub.domain.tolist() == [0, 1, 1, 1]
    assert sub.x[:, 0, 0, 0].tolist() == [3, 0, 0, 0]  # sketch's pixels first, then photo's
    assert "pacs_sketch.npz.xz" in fd.verify("pacs", tmp_path)
    for bad in (("photo", "photo"), ("photo", "dslr"), ()):
        with pytest.raises(FedcondError, match="domains"):
            fd.load("pacs", tmp_path, domains=bad)


def test_one_damaged_file_fails_the_whole_load(tmp_path):
    _write(tmp_path)
    with open(tmp_path / "pacs_cartoon.npz.xz", "ab") as f:  # damaged after it was written and recorded
        f.write(b"\0")
    with pytest.raises(ChecksumMismatch, match="pacs_cartoon.npz.xz.*shared datasets folder"):
        fd.load("pacs", tmp_path)
    assert fd.load("pacs", tmp_path, domains=("photo",)).x.shape == (3, 5, 5, 3)


def test_inconsistent_domain_array(tmp_path):
    _write(tmp_path)
    container.write_container(tmp_path / "pacs_photo.npz.xz", {
        "x": np.zeros((1, 5, 5, 3), np.uint8), "y": np.zeros(1, np.uint8), "d": np.ones(1, np.uint8)}, preset=1)
    with pytest.raises(FedcondError, match="inconsistent"):
        fd.load("pacs", tmp_path, domains="photo")
