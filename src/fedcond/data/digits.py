"""The embedded default dataset: scikit-learn's bundled handwritten digits, no file needed.

scikit-learn's ``load_digits`` gives 1797 8x8 images with values 0..16. They are
resampled to 28x28 (bilinear, no antialiasing) and scaled to 0..255 uint8, so the
28x28 MNIST models apply unchanged. There is no official split: a stratified split
with test fraction 0.25 and seed 0 (``train_test_split(..., test_size=0.25,
stratify=y, random_state=0)``) gives the same 1347 train / 450 test images every time.
"""

from __future__ import annotations

import numpy as np

from .types import ImageData

SIZE = 28
TEST_FRACTION = 0.25
SEED = 0
CLASSES = tuple(str(d) for d in range(10))


def upsample(images: np.ndarray, size: int = SIZE) -> np.ndarray:
    """[N, 8, 8] values 0..16 -> uint8 [N, size, size] values 0..255."""
    import torch
    import torch.nn.functional as F

    t = torch.from_numpy(np.asarray(images, dtype=np.float32))[:, None]
    up = F.interpolate(t, size=(size, size), mode="bilinear", align_corners=False, antialias=False)[:, 0]
    return np.clip(np.rint(up.numpy() * (255.0 / 16.0)), 0, 255).astype(np.uint8)


def load_digits() -> ImageData:
    from sklearn.datasets import load_digits as sk_load_digits
    from sklearn.model_selection import train_test_split

    d = sk_load_digits()
    x, y = upsample(d.images), d.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=TEST_FRACTION, stratify=y, random_state=SEED)
    return ImageData(
        name="digits",
        x_train=np.ascontiguousarray(x_train),
        y_train=y_train,
        x_test=np.ascontiguousarray(x_test),
        y_test=y_test,
        classes=CLASSES,
    )
