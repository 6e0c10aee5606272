"""Image files in class folders, read with Pillow and resized to a fixed square RGB size."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedcond.errors import FedcondError

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp"})


def list_images(folder: Path) -> list[Path]:
    """Image files directly inside ``folder`` (hidden files skipped), sorted by name for a stable order."""
    return sorted(
        p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in IMAGE_SUFFIXES
    )


def read_resized(paths: list[Path], size: int) -> np.ndarray:
    """uint8 [N, size, size, 3]: each image converted to RGB and resized with Pillow's bilinear filter.

    Pillow's BILINEAR is antialiased when shrinking (as torchvision's Resize on PIL
    images); the aspect ratio is not kept, as in the 112x112 PACS conversion.
    """
    from PIL import Image, UnidentifiedImageError

    out = np.empty((len(paths), size, size, 3), dtype=np.uint8)
    for i, p in enumerate(paths):
        try:
            with Image.open(p) as im:
                out[i] = np.asarray(im.convert("RGB").resize((size, size), Image.Resampling.BILINEAR))
        except (OSError, UnidentifiedImageError, ValueError) as e:
            raise FedcondError(f"cannot read the image {p} ({type(e).__name__}: {e}); remove or replace it") from e
    return out
