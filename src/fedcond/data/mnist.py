"""MNIST and Fashion-MNIST: 28x28 grey, 60,000 train / 10,000 test, in the official order."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedcond.errors import FedcondError

from .formats.idx import read_idx
from .split import as_image_data, load_split, write_split
from .types import ImageData

MNIST_CLASSES = tuple(str(d) for d in range(10))
FMNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
FILES = {"mnist": "mnist.npz.xz", "fmnist": "fashion_mnist.npz.xz"}
CLASSES = {"mnist": MNIST_CLASSES, "fmnist": FMNIST_CLASSES}
# The four files of both official releases, in the order (x_train, y_train, x_test, y_test).
IDX_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)


def load_mnist_like(name: str, root: Path, origin: str) -> ImageData:
    """Load ``mnist`` or ``fmnist`` from its container in ``root``."""
    arrays, classes = load_split(name, root, origin, FILES[name], CLASSES[name])
    return as_image_data(name, arrays, classes)


def convert_idx(name: str, folder: Path, out_dir: Path, *, preset: int) -> Path:
    """Convert the four official IDX ``.gz`` files in ``folder`` into ``<out_dir>/<FILES[name]>``."""
    x_train, y_train, x_test, y_test = (read_idx(folder / f) for f in IDX_FILES)
    for split, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
        if x.ndim != 3 or x.dtype != np.uint8 or y.shape != (len(x),):
            raise FedcondError(f"{name} {split}: IDX images {x.dtype}{x.shape} and labels {y.shape} do not match")
    return write_split(out_dir / FILES[name], x_train, y_train, x_test, y_test, CLASSES[name], preset=preset)
