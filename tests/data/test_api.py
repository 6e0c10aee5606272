"""The public API: names, data directory resolution, options, missing data, and download (offline)."""
import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

import fedcond.data as fd
from fedcond.data import container, sources as dl
from fedcond.errors import ChecksumMismatch, DatasetMissing, FedcondError


def test_public_names():
    assert tuple(fd.DATASETS) == ("digits", "mnist", "fmnist", "cifar10", "cifar100", "emnist", "pacs", "office_caltech")
    for name in ("ImageData", "DomainData", "load", "download", "verify", "resolve_data_dir"):
        assert hasattr(fd, name)


def test_resolve_data_dir(monkeypatch, tmp_path):
    assert fd.resolve_data_dir(tmp_path / "x") == tmp_path / "x"
    assert fd.resolve_data_dir(str(tmp_path)) == tmp_path
    default = fd.resolve_data_dir()
    assert default == Path(os.environ["XDG_CACHE_HOME"]) / "fedcond"  # platformdirs' user cache dir
    monkeypatch.setenv("FEDCOND_DATA", str(tmp_path / "env"))
    assert fd.resolve_data_dir() == tmp_path / "env"
    assert fd.resolve_data_dir(tmp_path / "arg") == tmp_path / "arg"  # the argument wins


def test_unknown_name_and_option(tmp_path):
    for call in (lambda: fd.load("imagenet"), lambda: fd.verify("imagenet"), lambda: fd.download("imagenet", tmp_path)):
        with pytest.raises(FedcondError) as e:
            call()
        assert "imagenet" in str(e.value) and ", ".join(fd.DATASETS) in str(e.value)
    with pytest.raises(FedcondError, match="no option split"):
        fd.load("mnist", tmp_path, split="x")
    from fedcond.data.registry import normalize_name

    assert normalize_name("Fashion-MNIST") == "fmnist" and normalize_name("CIFAR10") == "cifar10"
    with pytest.raises(FedcondError, match="byclass, balanced"):
        fd.load("emnist", tmp_path, split="digits")


@pytest.mark.parametrize("name", ["mnist", "fmnist", "cifar10", "cifar100", "emnist"])
def test_missing_dataset_message(name, tmp_path, monkeypatch):
    where = tmp_path / "nothing here"
    monkeypatch.setenv("FEDCOND_DATA", str(where))
    with pytest.raises(DatasetMissing) as e:
        fd.load(name)
    msg = str(e.value)
    assert str(where) in msg and "FEDCOND_DATA" in msg and f"fedcond data download {name}" in msg
    assert "\n" not in msg


def test_missing_pacs_says_what_to_do(tmp_path):
    with pytest.raises(DatasetMissing) as e:
        fd.load("pacs", tmp_path)
    msg = str(e.value)
    assert str(tmp_path) in msg and "FEDCOND_DATA" in msg and "shared datasets folder" in msg
    assert "fedcond data download" not in msg and "\n" not in msg


def test_download_refuses_manual_datasets(tmp_path):
    for name in ("pacs", "office_caltech"):
        with pytest.raises(FedcondError) as e:
            fd.download(name, tmp_path)
        assert "cannot be downloaded" in str(e.value) and str(tmp_path) in str(e.value)
    assert fd.download("digits", tmp_path) == []


def test_download_converts_fetched_files(tmp_path, gen, monkeypatch):
    """The download flow end to end, with the network replaced by generated official files."""
    src = tmp_path / "official"
    want = gen.idx_set(src)

    def fake_fetch(remote, folder, progress):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / remote.fname).write_bytes((src / remote.fname).read_bytes())
        return folder / remote.fname

    monkeypatch.setattr(dl, "fetch", fake_fetch)
    root = tmp_path / "data"
    paths = fd.download("mnist", root, progress=False)
    assert paths == [root / "mnist.npz.xz"] and container.sidecar_path(paths[0]).is_file()
    assert not (root / ".downloads").exists()  # raw files removed once converted
    d = fd.load("mnist", root)
    np.testing.assert_array_equal(d.x_train, want["x_train"])
    np.testing.assert_array_equal(d.y_test, want["y_test"])
    assert "mnist.npz.xz" in fd.verify("mnist", root)

    # Already there and intact: nothing is fetched.
    monkeypatch.setattr(dl, "fetch", lambda *a: pytest.fail("fetched again"))
    assert fd.download("mnist", root) == paths


def test_download_uses_hand_placed_file_without_network(tmp_path, gen, monkeypatch):
    """pooch finds a raw file with the right hash in .downloads/ and does not go online."""
    root = tmp_path / "data"
    want = gen.cifar_tar(root / ".downloads" / "cifar-100-python.tar.gz", "cifar100", per_batch=2)
    md5 = hashlib.md5((root / ".downloads" / "cifar-100-python.tar.gz").read_bytes()).hexdigest()
    remote = dl.Remote("https://invalid.invalid/cifar-100-python.tar.gz", "cifar-100-python.tar.gz", "md5:" + md5)
    monkeypatch.setitem(dl.REMOTES, "cifar100", (remote,))
    assert fd.download("cifar100", root, progress=False) == [root / "cifar100.npz.xz"]
    np.testing.assert_array_equal(fd.load("cifar100", root).coarse_test, want["coarse_test"])


def test_fetch_errors_are_one_line(tmp_path, monkeypatch):
    import pooch

    remote = dl.Remote("https://example.invalid/f.gz", "f.gz", "md5:" + "0" * 32)

    def mismatch(*a, **k):
        raise ValueError("MD5 hash of downloaded file (x) does not match\nthe known hash: expected y.")

    monkeypatch.setattr(pooch, "retrieve", mismatch)
    with pytest.raises(ChecksumMismatch) as e:
        dl.fetch(remote, tmp_path, False)
    assert "\n" not in str(e.value) and remote.url in str(e.value)

    def offline(*a, **k):
        raise ConnectionError("Name or service not known")

    monkeypatch.setattr(pooch, "retrieve", offline)
    with pytest.raises(FedcondError) as e:
        dl.fetch(remote, tmp_path, False)
    assert "check the network" in str(e.value) and str(tmp_path / "f.gz") in str(e.value)


def test_download_into_read_only_folder(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(FedcondError, match="cannot write to the data directory"):
            fd.download("mnist", ro)
    finally:
        ro.chmod(0o755)
