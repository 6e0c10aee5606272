"""Shared code for datasets with an official train/test split stored in one container."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedcond.errors import FedcondError

from .container import read_container, write_container
from .paths import missing
from .types import ImageData

SPLIT_KEYS = ("x_train", "y_train", "x_test", "y_test")


def redownload(name: str) -> str:
    """The fix for a damaged file of a downloadable dataset."""
    return f"delete it and run `fedcond data download {name}`"


def class_names(arrays: dict[str, np.ndarray], key: str, default: tuple[str, ...] | None) -> tuple[str, ...]:
    if key in arrays:
        return tuple(str(c) for c in arrays[key])
    if default is None:
        raise FedcondError(f"container lacks the class names array {key!r}")
    return default


def as_image_data(
    name: str, arrays: dict[str, np.ndarray], classes: tuple[str, ...], coarse_classes: tuple[str, ...] | None = None
) -> ImageData:
    """ImageData from container arrays (uint8 labels widened to int64)."""
    coarse = {}
    if coarse_classes is not None:
        coarse = dict(
            coarse_train=arrays["coarse_train"].astype(np.int64),
            coarse_test=arrays["coarse_test"].astype(np.int64),
            coarse_classes=coarse_classes,
        )
    try:
        return ImageData(
            name=name,
            x_train=np.ascontiguousarray(arrays["x_train"]),
            y_train=arrays["y_train"].astype(np.int64),
            x_test=np.ascontiguousarray(arrays["x_test"]),
            y_test=arrays["y_test"].astype(np.int64),
            classes=classes,
            **coarse,
        )
    except ValueError as e:
        raise FedcondError(f"{name}: the stored arrays are inconsistent ({e}); {redownload(name)}") from e


def load_split(
    name: str,
    root: Path,
    origin: str,
    filename: str,
    default_classes: tuple[str, ...] | None,
    keys: tuple[str, ...] = SPLIT_KEYS,
) -> tuple[dict[str, np.ndarray], tuple[str, ...]]:
    """Check and read ``<root>/<filename>``; returns (arrays, class names)."""
    path = root / filename
    if not path.is_file():
        raise missing(name, root, origin, [filename])
    arrays = read_container(path, redownload(name), keys=keys)
    return arrays, class_names(arrays, "classes", default_classes)


def write_split(
    path: Path,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    classes: tuple[str, ...] | list[str],
    *,
    preset: int,
    **extra: np.ndarray,
) -> Path:
    """Write a train/test container (uint8 images, compact labels, class names) + sidecar."""
    arrays = dict(
        x_train=np.ascontiguousarray(x_train, dtype=np.uint8),
        y_train=_compact(y_train),
        x_test=np.ascontiguousarray(x_test, dtype=np.uint8),
        y_test=_compact(y_test),
        classes=np.array(list(classes), dtype=str),
    )
    arrays.update({k: (_compact(v) if v.dtype.kind in "iu" else v) for k, v in extra.items()})
    write_container(path, arrays, preset=preset)
    return path


def _compact(labels: np.ndarray) -> np.ndarray:
    # uint8 like the shared files when it fits (all our sets have < 256 classes)
    labels = np.asarray(labels)
    if labels.size and (labels.min() < 0 or labels.max() > 255):
        return labels.astype(np.int64)
    return labels.astype(np.uint8)
