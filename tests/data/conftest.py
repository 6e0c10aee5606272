"""Fixtures for the fedcond.data tests: the real shared datasets, and small generated files
in the official formats (IDX, CIFAR pickle tars, EMNIST zip, Office-Caltech folders)."""
from __future__ import annotations

import io
import os
import pickle
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

from fedcond.data.formats.idx import write_idx

SHARED = Path(os.environ.get("FEDCOND_DATA", "/work/shared/datasets"))


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path_factory):
    """Keep every test away from the user's cache and from a FEDCOND_DATA set outside."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))  # converted.sha256
    monkeypatch.delenv("FEDCOND_DATA", raising=False)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not (SHARED / "mnist.npz.xz").is_file():
        pytest.skip(f"shared datasets not found in {SHARED} (set FEDCOND_DATA to the shared datasets folder)")
    return SHARED


def shared_file(shared_dir: Path, name: str) -> Path:
    path = shared_dir / name
    if not path.is_file():
        pytest.skip(f"{name} not present in {shared_dir}")
    return path


# ---------------------------------------------------------------- generated official formats

def make_idx_set(folder: Path, n_train=12, n_test=5, seed=0, names=None) -> dict[str, np.ndarray]:
    """The four MNIST-style IDX .gz files with random content; returns the arrays written."""
    rng = np.random.default_rng(seed)
    arrays = {"x_train": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
              "y_train": rng.integers(0, 10, n_train).astype(np.uint8),
              "x_test": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
              "y_test": rng.integers(0, 10, n_test).astype(np.uint8)}
    names = names or ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                      "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
    folder.mkdir(parents=True, exist_ok=True)
    for key, fname in zip(("x_train", "y_train", "x_test", "y_test"), names, strict=True):
        write_idx(folder / fname, arrays[key])
    return arrays


def _add_pickle(tar: tarfile.TarFile, name: str, obj) -> None:
    # protocol 2 and byte-string keys, like the official (Python 2) batches
    data = pickle.dumps(obj, protocol=2)
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def make_cifar_tar(path: Path, kind: str, per_batch=4, seed=0, meta=True) -> dict[str, np.ndarray]:
    """A tiny cifar-10-python / cifar-100-python .tar.gz; returns the HWC images and labels written."""
    rng = np.random.default_rng(seed)
    out = {}
    path.parent.mkdir(parents=True, exist_ok=True)

    def batch(n, split):
        hwc = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
        rows = hwc.transpose(0, 3, 1, 2).reshape(n, 3072)  # official layout: R plane, G plane, B plane
        out.setdefault(f"x_{split}", []).append(hwc)
        return rows

    with tarfile.open(path, "w:gz") as tar:
        if kind == "cifar10":
            for i in range(1, 6):
                labels = rng.integers(0, 10, per_batch).tolist()
                out.setdefault("y_train", []).append(labels)
                _add_pickle(tar, f"cifar-10-batches-py/data_batch_{i}",
                            {b"batch_label": b"training batch", b"labels": labels, b"data": batch(per_batch, "train"),
                             b"filenames": [b"x.png"] * per_batch})
            labels = rng.integers(0, 10, per_batch).tolist()
            out["y_test"] = [labels]
            _add_pickle(tar, "cifar-10-batches-py/test_batch",
                        {b"labels": labels, b"data": batch(per_batch, "test")})
            if meta:
                _add_pickle(tar, "cifar-10-batches-py/batches.meta",
                            {b"label_names": [f"c{i}".encode() for i in range(10)], b"num_vis": 3072})
        else:
            for split, n in (("train", 3 * per_batch), ("test", per_batch)):
                fine = rng.integers(0, 100, n).tolist()
                out[f"y_{split}"] = [fine]
                out[f"coarse_{split}"] = [[f // 5 for f in fine]]
                _add_pickle(tar, f"cifar-100-python/{split}",
                            {b"fine_labels": fine, b"coarse_labels": [f // 5 for f in fine], b"data": batch(n, split)})
            _add_pickle(tar, "cifar-100-python/meta",
                        {b"fine_label_names": [f"fine{i}".encode() for i in range(100)],
                         b"coarse_label_names": [f"coarse{i}".encode() for i in range(20)]})
    return {k: np.concatenate(v) if k.startswith("x") else np.concatenate([np.asarray(a) for a in v])
            for k, v in out.items()}


def _idx_gz_bytes(array: np.ndarray, tmp: Path) -> bytes:
    write_idx(tmp, array, compress=True)
    return tmp.read_bytes()


def make_emnist_zip(path: Path, n_train=15, n_test=6, seed=0, mapping=True) -> dict[str, dict[str, np.ndarray]]:
    """A tiny EMNIST gzip.zip (byclass + balanced). Returns the *upright* images and labels per split;
    the IDX files hold them transposed, as the official files do."""
    rng = np.random.default_rng(seed)
    classes = {"byclass": "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
               "balanced": "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabdefghnqrt"}
    upright = {}
    scratch = path.with_suffix(".tmp.gz")
    with zipfile.ZipFile(path, "w") as zf:
        for split, names in classes.items():
            d = {}
            for s, n in (("train", n_train), ("test", n_test)):
                x = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
                x[:, :4, :] = 255  # a marked top band, so a missed transpose is obvious
                y = rng.integers(0, len(names), n).astype(np.uint8)
                d[f"x_{s}"], d[f"y_{s}"] = x, y
                zf.writestr(f"gzip/emnist-{split}-{s}-images-idx3-ubyte.gz",
                            _idx_gz_bytes(np.ascontiguousarray(x.transpose(0, 2, 1)), scratch))
                zf.writestr(f"gzip/emnist-{split}-{s}-labels-idx1-ubyte.gz", _idx_gz_bytes(y, scratch))
            if mapping:
                zf.writestr(f"gzip/emnist-{split}-mapping.txt",
                            "".join(f"{i} {ord(c)}\n" for i, c in enumerate(names)))
            upright[split] = d
    scratch.unlink()
    return upright


def make_office_folder(root: Path, per_class=2, classes=("back_pack", "mug"), seed=0) -> dict[str, int]:
    """``root/office_caltech/<domain>/<class>/`` with random PNG/JPEG images of mixed sizes and modes."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    counts = {}
    for d in ("amazon", "caltech", "dslr", "webcam"):
        counts[d] = 0
        for c in classes:
            folder = root / "office_caltech" / d / c
            folder.mkdir(parents=True)
            for i in range(per_class):
                h, w = int(rng.integers(20, 90)), int(rng.integers(20, 90))
                if i % 2:
                    Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), "L").save(folder / f"img_{i}.png")
                else:
                    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(folder / f"img_{i}.jpg")
                counts[d] += 1
        (root / "office_caltech" / d / "Thumbs.txt").write_text("not an image")  # stray files are ignored
    return counts


@pytest.fixture
def gen():
    """The generators above, as a fixture (test modules do not import conftest directly)."""
    import types

    return types.SimpleNamespace(idx_set=make_idx_set, cifar_tar=make_cifar_tar, emnist_zip=make_emnist_zip,
                                 office_folder=make_office_folder, shared_file=shared_file)
