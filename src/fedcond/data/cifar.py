"""CIFAR-10 and CIFAR-100: 32x32 RGB, 50,000 train / 10,000 test.

A CIFAR-10 container holds either plain pixel arrays (``x_train``/``x_test``, what
``download`` writes from the official archive) or, like the shared copy, the
source JPEG files (``train_jpeg`` + ``train_offsets``, ...). JPEGs take about 5 s to
decode, so the decoded pixels are cached on disk keyed by the container's sha256.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from fedcond.errors import FedcondError

from . import cache
from .container import check_file, read_container
from .formats import cifar_pickle as cp
from .paths import missing
from .split import as_image_data, class_names, load_split, redownload, write_split
from .types import ImageData

CIFAR10_FILE = "cifar10.npz.xz"
CIFAR100_FILE = "cifar100.npz.xz"
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
_LABEL_KEYS = ("y_train", "y_test")
_JPEG_KEYS = ("train_jpeg", "train_offsets", "test_jpeg", "test_offsets")


def decode_jpegs(jpeg: np.ndarray, offsets: np.ndarray, what: str = "JPEG buffer") -> np.ndarray:
    """Decode concatenated JPEG files (image i = ``jpeg[offsets[i]:offsets[i+1]]``) into uint8 [N, H, W, 3]."""
    from PIL import Image, UnidentifiedImageError

    offsets = np.asarray(offsets, dtype=np.int64)
    n = len(offsets) - 1
    if n < 0 or offsets[0] != 0 or offsets[-1] != len(jpeg) or (np.diff(offsets) <= 0).any():
        raise FedcondError(f"{what}: offsets are not increasing from 0 to the buffer length")
    buf = np.ascontiguousarray(jpeg, dtype=np.uint8).tobytes()
    out = None
    for i in range(n):
        try:
            # formats= skips Pillow's format sniffing, which dominates for 1 KB images
            with Image.open(io.BytesIO(buf[offsets[i] : offsets[i + 1]]), formats=("JPEG",)) as im:
                a = np.asarray(im if im.mode == "RGB" else im.convert("RGB"))
        except (OSError, UnidentifiedImageError) as e:
            raise FedcondError(f"{what}: image {i} does not decode ({e})") from e
        if out is None:
            out = np.empty((n,) + a.shape, dtype=np.uint8)
        elif a.shape != out.shape[1:]:
            raise FedcondError(f"{what}: image {i} is {a.shape}, the first was {out.shape[1:]}")
        out[i] = a
    return out if out is not None else np.empty((0, 32, 32, 3), dtype=np.uint8)


def load_cifar10(root: Path, origin: str) -> ImageData:
    path = root / CIFAR10_FILE
    if not path.is_file():
        raise missing("cifar10", root, origin, [CIFAR10_FILE])
    fix = redownload("cifar10")
    digest = check_file(path, fix)  # also the cache key: a changed file never meets an old entry
    arrays = cache.lookup(root, "cifar10-decoded", digest)
    if arrays is None:
        arrays = read_container(path, fix, keys=_LABEL_KEYS)
        if "x_train" not in arrays:  # JPEG bytes: decode once, then cache
            if not all(k in arrays for k in _JPEG_KEYS):
                raise FedcondError(
                    f"{path} holds neither pixel arrays (x_train, x_test) nor JPEG bytes "
                    f"(train_jpeg, train_offsets, ...); {fix}"
                )
            decoded = {k: arrays[k] for k in _LABEL_KEYS + ("classes",) if k in arrays}
            decoded["x_train"] = decode_jpegs(arrays["train_jpeg"], arrays["train_offsets"], f"{path} train")
            decoded["x_test"] = decode_jpegs(arrays["test_jpeg"], arrays["test_offsets"], f"{path} test")
            arrays = decoded
            cache.store(root, "cifar10-decoded", digest, arrays)
    return as_image_data("cifar10", arrays, class_names(arrays, "classes", CIFAR10_CLASSES))


def load_cifar100(root: Path, origin: str) -> ImageData:
    keys = ("x_train", "y_train", "x_test", "y_test", "coarse_train", "coarse_test", "classes", "coarse_classes")
    arrays, classes = load_split("cifar100", root, origin, CIFAR100_FILE, None, keys=keys)
    return as_image_data("cifar100", arrays, classes, class_names(arrays, "coarse_classes", None))


def convert_cifar10_tar(tar_path: Path, out_dir: Path, *, preset: int) -> Path:
    """Official ``cifar-10-python.tar.gz`` -> ``<out_dir>/cifar10.npz.xz`` (plain pixels)."""
    train = [f"data_batch_{i}" for i in range(1, 6)]
    batches = cp.read_tar_pickles(tar_path, set(train) | {"test_batch"})
    xs, ys = [], []
    for b in train + ["test_batch"]:
        xs.append(cp.rows_to_hwc(cp.field(batches[b], b"data", b), b))
        ys.append(cp.labels(batches[b], b"labels", b))
        if len(ys[-1]) != len(xs[-1]):
            raise FedcondError(f"{tar_path}: {b} has {len(xs[-1])} images but {len(ys[-1])} labels")
    try:  # batches.meta holds the names; fall back to the published list
        meta = cp.read_tar_pickles(tar_path, {"batches.meta"})["batches.meta"]
        classes = tuple(cp.names(meta, b"label_names", "batches.meta"))
    except FedcondError:
        classes = CIFAR10_CLASSES
    return write_split(
        out_dir / CIFAR10_FILE, np.concatenate(xs[:5]), np.concatenate(ys[:5]), xs[5], ys[5], classes, preset=preset
    )


def convert_cifar100_tar(tar_path: Path, out_dir: Path, *, preset: int) -> Path:
    """Official ``cifar-100-python.tar.gz`` -> ``<out_dir>/cifar100.npz.xz`` with fine and coarse labels."""
    p = cp.read_tar_pickles(tar_path, {"train", "test", "meta"})
    out = {}
    for split in ("train", "test"):
        out[f"x_{split}"] = cp.rows_to_hwc(cp.field(p[split], b"data", split), split)
        out[f"y_{split}"] = cp.labels(p[split], b"fine_labels", split)
        out[f"coarse_{split}"] = cp.labels(p[split], b"coarse_labels", split)
        if not len(out[f"x_{split}"]) == len(out[f"y_{split}"]) == len(out[f"coarse_{split}"]):
            raise FedcondError(f"{tar_path}: {split} has mismatched image and label counts")
    fine = cp.names(p["meta"], b"fine_label_names", "meta")
    coarse = cp.names(p["meta"], b"coarse_label_names", "meta")
    return write_split(
        out_dir / CIFAR100_FILE,
        out["x_train"],
        out["y_train"],
        out["x_test"],
        out["y_test"],
        fine,
        preset=preset,
        coarse_train=out["coarse_train"],
        coarse_test=out["coarse_test"],
        coarse_classes=np.array(coarse, dtype=str),
    )
