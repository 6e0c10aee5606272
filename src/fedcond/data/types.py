"""The two in-memory dataset records that every loader returns."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _check_images(what: str, x: np.ndarray, y: np.ndarray) -> None:
    # Catch a malformed conversion at construction time instead of deep inside training.
    if x.dtype != np.uint8 or x.ndim not in (3, 4) or (x.ndim == 4 and x.shape[-1] != 3):
        raise ValueError(f"{what}: images must be uint8 [N,H,W] or [N,H,W,3], got {x.dtype}{x.shape}")
    if y.dtype != np.int64 or y.shape != (len(x),):
        raise ValueError(f"{what}: labels must be int64 [{len(x)}], got {y.dtype}{y.shape}")


def _check_labels_in_range(what: str, y: np.ndarray, n: int) -> None:
    if len(y) and (y.min() < 0 or y.max() >= n):
        raise ValueError(f"{what}: labels must lie in 0..{n - 1}, got {y.min()}..{y.max()}")


@dataclass(frozen=True, eq=False)
class ImageData:
    """A dataset with an official train/test split.

    Images are uint8 pixels 0..255, ``[N, H, W]`` (grey) or ``[N, H, W, 3]`` (RGB);
    labels are int64 indices into ``classes``. ``coarse_*`` are CIFAR-100's 20
    superclass labels and names, and ``None`` for every other dataset.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: tuple[str, ...]
    coarse_train: np.ndarray | None = None
    coarse_test: np.ndarray | None = None
    coarse_classes: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        _check_images(f"{self.name} train", self.x_train, self.y_train)
        _check_images(f"{self.name} test", self.x_test, self.y_test)
        if self.x_train.shape[1:] != self.x_test.shape[1:]:
            raise ValueError(
                f"{self.name}: train images {self.x_train.shape[1:]} and test images "
                f"{self.x_test.shape[1:]} differ in shape"
            )
        _check_labels_in_range(f"{self.name} train", self.y_train, len(self.classes))
        _check_labels_in_range(f"{self.name} test", self.y_test, len(self.classes))
        coarse = (self.coarse_train, self.coarse_test, self.coarse_classes)
        if any(c is not None for c in coarse):
            if any(c is None for c in coarse):
                raise ValueError(f"{self.name}: coarse_train, coarse_test and coarse_classes go together")
            for split, c, y in (("train", self.coarse_train, self.y_train), ("test", self.coarse_test, self.y_test)):
                if c.dtype != np.int64 or c.shape != y.shape:
                    raise ValueError(
                        f"{self.name}: coarse {split} labels must be int64 {y.shape}, got {c.dtype}{c.shape}"
                    )
                _check_labels_in_range(f"{self.name} coarse {split}", c, len(self.coarse_classes))

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def image_shape(self) -> tuple[int, ...]:
        """Shape of one image: (H, W) or (H, W, 3)."""
        return tuple(self.x_train.shape[1:])

    def __repr__(self) -> str:  # the default repr would print the arrays
        coarse = f", {len(self.coarse_classes)} coarse classes" if self.coarse_classes else ""
        return (
            f"ImageData({self.name!r}: train {self.x_train.shape}, test {self.x_test.shape}, "
            f"{self.num_classes} classes{coarse})"
        )


@dataclass(frozen=True, eq=False)
class DomainData:
    """A multi-domain dataset without an official split (PACS, Office-Caltech-10).

    ``x`` is uint8 ``[N, H, W, 3]``; ``y`` indexes ``classes`` and ``domain``
    indexes ``domains`` (both int64). Splitting is left to the experiment.
    """

    name: str
    x: np.ndarray
    y: np.ndarray
    domain: np.ndarray
    classes: tuple[str, ...]
    domains: tuple[str, ...]

    def __post_init__(self) -> None:
        _check_images(self.name, self.x, self.y)
        if self.domain.dtype != np.int64 or self.domain.shape != self.y.shape:
            raise ValueError(
                f"{self.name}: domain must be int64 {self.y.shape}, got {self.domain.dtype}{self.domain.shape}"
            )
        _check_labels_in_range(self.name, self.y, len(self.classes))
        _check_labels_in_range(f"{self.name} domain", self.domain, len(self.domains))

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def image_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])

    def __repr__(self) -> str:
        return (
            f"DomainData({self.name!r}: {self.x.shape}, {self.num_classes} classes, domains {', '.join(self.domains)})"
        )
