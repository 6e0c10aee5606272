"""The .npz.xz container: round trip, sha256 checks (known hashes and sidecars), the in-process hash cache."""
import lzma
import os
import shutil

import numpy as np
import pytest

import fedcond.data as fd
from fedcond.data import container, mnist
from fedcond.errors import ChecksumMismatch, FedcondError


def test_round_trip_with_sidecar(tmp_path):
    arrays = {"x": np.arange(24, dtype=np.uint8).reshape(2, 3, 4), "y": np.array([1, 2], np.int64),
              "names": np.array(["a", "bc"])}
    path = tmp_path / "thing.npz.xz"
    digest = container.write_container(path, arrays, preset=1)
    assert container.sidecar_path(path).read_text().split() == [digest, "thing.npz.xz"]
    assert container.sha256_file(path) == digest
    got = container.read_container(path, "fix", keys=("x", "y"))
    assert sorted(got) == ["names", "x", "y"]
    for k in arrays:
        np.testing.assert_array_equal(got[k], arrays[k])
        assert got[k].dtype == arrays[k].dtype
    # The file is what the README describes: an xz stream around a plain npz.
    raw = lzma.decompress(path.read_bytes())
    assert raw[:2] == b"PK"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_object_arrays_refused(tmp_path):
    with pytest.raises(ValueError):
        container.write_container(tmp_path / "o.npz.xz", {"o": np.array([{}, 1], dtype=object)})


def test_missing_key_reported(tmp_path):
    path = tmp_path / "k.npz.xz"
    container.write_container(path, {"a": np.zeros(2)}, preset=1)
    with pytest.raises(FedcondError, match="lacks the arrays b"):
        container.read_container(path, "fix", keys=("a", "b"))


def test_sidecar_mismatch_refused(tmp_path):
    path = tmp_path / "s.npz.xz"
    container.write_container(path, {"a": np.arange(100)}, preset=1)
    good = container.read_sidecar(path)
    container.sidecar_path(path).write_text("0" * 64 + "  s.npz.xz\n")
    with pytest.raises(ChecksumMismatch) as e:
        container.read_container(path, "delete it and retry")
    msg = str(e.value)
    assert str(path) in msg and good in msg and "0" * 64 in msg and "delete it and retry" in msg
    assert "\n" not in msg


def test_a_sidecar_does_not_override_a_built_in_hash(tmp_path, gen, monkeypatch):
    """A replaced mnist.npz.xz with a matching .sha256 beside it is refused; a user's own dataset
    still brings its sidecar; fedcond's own conversion of an official download is still accepted."""
    want = gen.idx_set(tmp_path / "official")
    monkeypatch.setattr(container, "converted_record", lambda: tmp_path / "another-account" / "converted.sha256", raising=False)
    mnist.convert_idx("mnist", tmp_path / "official", tmp_path / "elsewhere", preset=1)  # someone else's file
    planted = tmp_path / "data" / "mnist.npz.xz"
    planted.parent.mkdir()
    os.replace(tmp_path / "elsewhere" / "mnist.npz.xz", planted)
    container.sidecar_path(planted).write_text(f"{container.sha256_file(planted)}  mnist.npz.xz\n")
    monkeypatch.setattr(container, "converted_record", lambda: tmp_path / "account" / "converted.sha256")
    with pytest.raises(ChecksumMismatch, match="does not override it"):
        fd.load("mnist", tmp_path / "data")
    mine = tmp_path / "data" / "mine.npz.xz"  # not a built-in name: its sidecar counts
    container.write_container(mine, {"a": np.arange(3)}, preset=1)
    np.testing.assert_array_equal(container.read_container(mine, "fix")["a"], np.arange(3))
    assert not (tmp_path / "account").exists()  # only built-in names are recorded
    mnist.convert_idx("mnist", tmp_path / "official", tmp_path / "data", preset=1)  # what `fedcond data download` does
    np.testing.assert_array_equal(fd.load("mnist", tmp_path / "data").x_train, want["x_train"])
    assert (tmp_path / "account" / "converted.sha256").read_text().split()[1] == "mnist.npz.xz"


def test_unknown_file_without_sidecar_refused(tmp_path):
    path = tmp_path / "mine.npz.xz"
    container.write_container(path, {"a": np.arange(3)}, sidecar=False, preset=1)
    with pytest.raises(FedcondError, match="no checksum known"):
        container.read_container(path, "fix")


def test_corrupted_shared_mnist_refused(shared_dir, tmp_path, gen):
    src = gen.shared_file(shared_dir, "mnist.npz.xz")
    bad = tmp_path / "mnist.npz.xz"
    shutil.copyfile(src, bad)
    with open(bad, "r+b") as f:  # flip one byte in the middle
        f.seek(bad.stat().st_size // 2)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0xFF]))
    with pytest.raises(ChecksumMismatch) as e:
        fd.load("mnist", tmp_path)
    msg = str(e.value)
    assert str(bad) in msg and container.KNOWN_SHA256["mnist.npz.xz"] in msg
    assert container.sha256_file(bad) in msg and "fedcond data download mnist" in msg and "\n" not in msg
    with pytest.raises(ChecksumMismatch):
        fd.verify("mnist", tmp_path)


def test_hash_cached_per_process_and_redone_on_change(tmp_path, monkeypatch):
    path = tmp_path / "c.npz.xz"
    container.write_container(path, {"a": np.arange(10)}, preset=1)
    calls = []
    real = container.sha256_bytes
    monkeypatch.setattr(container, "sha256_bytes", lambda data: calls.append(1) or real(data))
    container.read_container(path, "fix")
    container.read_container(path, "fix")
    assert len(calls) == 1  # the second read trusted the cached (path, size, mtime) check
    container.write_container(path, {"a": np.arange(11)}, preset=1)  # new content, new sidecar
    np.testing.assert_array_equal(container.read_container(path, "fix")["a"], np.arange(11))
    assert len(calls) == 2
