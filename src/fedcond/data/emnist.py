"""EMNIST handwritten characters (28x28 grey), splits ``byclass`` and ``balanced``.

- byclass: 62 classes, labels 0-9 digits, 10-35 ``A``-``Z``, 36-61 ``a``-``z``.
- balanced: 47 classes. The lowercase letters whose shape equals the uppercase one,
  c i j k l m o p s u v w x y z, are merged into their uppercase class; labels are
  0-9 digits, 10-35 ``A``-``Z``, 36-46 the kept lowercase a b d e f g h n q r t.

The official IDX files store every image transposed (column-major); they are
transposed on conversion, so images are upright like MNIST.
"""

from __future__ import annotations

import string
import zipfile
import zlib
from pathlib import Path, PurePosixPath

import numpy as np

from fedcond.errors import FedcondError

from .formats.idx import parse_idx
from .split import as_image_data, load_split, write_split
from .types import ImageData

MERGED_LOWERCASE = "cijklmopsuvwxyz"
KEPT_LOWERCASE = "abdefghnqrt"
SPLITS = {
    "byclass": tuple(string.digits + string.ascii_uppercase + string.ascii_lowercase),
    "balanced": tuple(string.digits + string.ascii_uppercase + KEPT_LOWERCASE),
}
DEFAULT_SPLIT = "balanced"


def container_name(split: str) -> str:
    return f"emnist_{split}.npz.xz"


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise FedcondError(f"unknown EMNIST split {split!r}; choose one of: {', '.join(SPLITS)}")
    return split


def load_emnist(root: Path, origin: str, split: str = DEFAULT_SPLIT) -> ImageData:
    """Load one EMNIST split (default ``balanced``) from ``<root>/emnist_<split>.npz.xz``."""
    split = check_split(split)
    arrays, classes = load_split("emnist", root, origin, container_name(split), SPLITS[split])
    if len(classes) != len(SPLITS[split]):
        raise FedcondError(
            f"{root / container_name(split)} has {len(classes)} classes, EMNIST {split} has "
            f"{len(SPLITS[split])}: delete it and run `fedcond data download emnist`"
        )
    return as_image_data("emnist", arrays, classes)


def _members(zf: zipfile.ZipFile) -> dict[str, str]:
    # base name -> member name; the official zip keeps everything under gzip/
    return {PurePosixPath(n).name: n for n in zf.namelist() if not n.endswith("/")}


def _check_mapping(zf: zipfile.ZipFile, member: str, split: str) -> None:
    """The zip's ``emnist-<split>-mapping.txt`` (label, ASCII code per line) must agree with our names."""
    for line in zf.read(member).decode("ascii").splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        label, code = int(parts[0]), int(parts[1])
        if label >= len(SPLITS[split]) or SPLITS[split][label] != chr(code):
            raise FedcondError(
                f"EMNIST {split} mapping says label {label} is {chr(code)!r}, "
                f"which disagrees with the class names used here"
            )


def convert_emnist_zip(
    zip_path: Path, out_dir: Path, splits: tuple[str, ...] = tuple(SPLITS), *, preset: int
) -> list[Path]:
    """Official ``gzip.zip`` -> ``<out_dir>/emnist_<split>.npz.xz`` for each split (images made upright)."""
    written = []
    try:
        with zipfile.ZipFile(zip_path) as zf:
            members = _members(zf)
            for split in map(check_split, splits):
                if f"emnist-{split}-mapping.txt" in members:
                    _check_mapping(zf, members[f"emnist-{split}-mapping.txt"], split)
                parts = {}
                for part in ("train-images-idx3", "train-labels-idx1", "test-images-idx3", "test-labels-idx1"):
                    base = f"emnist-{split}-{part}-ubyte.gz"
                    if base not in members:
                        raise FedcondError(f"{zip_path} lacks {base}; is it the official EMNIST gzip.zip?")
                    parts[part] = parse_idx(zf.read(members[base]), base)
                x = {}
                for s in ("train", "test"):
                    img, lab = parts[f"{s}-images-idx3"], parts[f"{s}-labels-idx1"]
                    if img.ndim != 3 or lab.shape != (len(img),):
                        raise FedcondError(
                            f"EMNIST {split} {s}: images {img.shape} and labels {lab.shape} do not match"
                        )
                    if len(lab) and lab.max() >= len(SPLITS[split]):
                        raise FedcondError(
                            f"EMNIST {split} {s}: label {lab.max()} outside the {len(SPLITS[split])} classes"
                        )
                    x[s] = np.ascontiguousarray(img.transpose(0, 2, 1))  # stored transposed: make upright
                written.append(
                    write_split(
                        out_dir / container_name(split),
                        x["train"],
                        parts["train-labels-idx1"],
                        x["test"],
                        parts["test-labels-idx1"],
                        SPLITS[split],
                        preset=preset,
                    )
                )
    except (zipfile.BadZipFile, zlib.error) as e:
        raise FedcondError(f"cannot read {zip_path} as a zip archive ({type(e).__name__}: {e})") from e
    return written
