"""An example fedcond plug-in package: one dataset, one model, one statistic, registered by
`register()`, which fedcond calls through the `fedcond.plugins` entry point (pyproject.toml)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn

NUM_CLASSES = 10
SIDE = 8  # 8x8 grey images


def load_blobs(data_dir=None) -> "ImageData":  # noqa: F821 (imported in register)
    """Ten classes of noisy 8x8 patterns, the same on every call (a fixed seed); no file needed."""
    from fedcond.data import ImageData

    rng = np.random.default_rng(1234)
    centres = rng.uniform(40, 215, size=(NUM_CLASSES, SIDE, SIDE))

    def draw(per_class: int):
        y = np.repeat(np.arange(NUM_CLASSES, dtype=np.int64), per_class)
        x = centres[y] + rng.normal(0, 40, size=(len(y), SIDE, SIDE))
        return np.clip(x, 0, 255).astype(np.uint8), y

    x_train, y_train = draw(60)
    x_test, y_test = draw(20)
    classes = tuple(f"blob{k}" for k in range(NUM_CLASSES))
    return ImageData("toy_blobs", x_train, y_train, x_test, y_test, classes)


class Linear(nn.Module):
    """A linear classifier that takes the client statistic itself (conditions_itself=True)."""

    def __init__(self, input_shape, num_classes: int, stat_dim: int, conditioning: str):
        super().__init__()
        c, h, w = input_shape
        self.stat_dim = stat_dim
        self.head = nn.Linear(c * h * w + stat_dim, num_classes)

    def features(self, x: torch.Tensor, s: torch.Tensor | None = None) -> torch.Tensor:
        h = x.flatten(1)
        return h if s is None else torch.cat([h, s.to(h.dtype)], dim=1)

    def forward(self, x: torch.Tensor, s: torch.Tensor | None = None) -> torch.Tensor:
        return self.head(self.features(x, s))


def label_frequencies(xs, ys, ids, num_classes, l, phi, method, seed) -> np.ndarray:
    """Each client's label frequencies [N, C]."""
    rows = [np.bincount(np.asarray(y), minlength=num_classes) / max(1, len(y)) for y in ys]
    return np.stack(rows) if rows else np.zeros((0, num_classes))


def register() -> None:
    from fedcond.plugins import register_dataset, register_model, register_statistic

    register_dataset("toy_blobs", load_blobs)
    register_model("toy_linear", Linear, conditions_itself=True)
    register_statistic("label_freq", description="each client's label frequencies", dim=lambda l, c: c)(
        label_frequencies
    )
