"""Office-Caltech-10: four domains x ten classes of RGB photos, no official split.

Expected layout (that of its public distribution), under ``<data_dir>/office_caltech/``::

    {amazon,caltech,dslr,webcam}/<class>/<image files>

An Office-31 style extra ``images/`` level (``amazon/images/<class>/...``) is also
accepted. Every image is converted to RGB and resized to 112x112 (Pillow bilinear,
like the PACS copy). Resizing takes a while, so the result is cached per domain,
keyed by the folder listing (names, sizes, modification times) and the size.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from fedcond.errors import FedcondError

from .cache import cached_arrays
from .formats.image_folder import list_images, read_resized
from .pacs import pick_domains
from .paths import missing
from .types import DomainData

FOLDER = "office_caltech"
DOMAINS = ("amazon", "caltech", "dslr", "webcam")
CLASSES = (
    "back_pack",
    "bike",
    "calculator",
    "headphones",
    "keyboard",
    "laptop_computer",
    "monitor",
    "mouse",
    "mug",
    "projector",
)
SIZE = 112
MANUAL = (
    "Office-Caltech-10 has no scriptable official source: get its images (the 10 classes shared by "
    "Office-31 and Caltech-256, Gong et al., CVPR 2012) and unpack them so that "
    "{root}/office_caltech/<amazon|caltech|dslr|webcam>/<class>/<image files> exist"
)


def domain_dir(base: Path, domain: str) -> Path:
    """``base/<domain>``, or ``base/<domain>/images`` for the Office-31 style layout."""
    d = base / domain
    return d / "images" if (d / "images").is_dir() and not (d / CLASSES[0]).is_dir() else d


def scan_domain(base: Path, domain: str) -> list[tuple[Path, int]]:
    """(image path, class index) for every image of one domain, in class then file-name order."""
    folder = domain_dir(base, domain)
    subdirs = {p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")}
    unknown = sorted(subdirs - set(CLASSES))
    if unknown:
        raise FedcondError(
            f"unexpected folders {', '.join(unknown)} in {folder}; expected the Office-Caltech-10 "
            f"classes {', '.join(CLASSES)}"
        )
    items = [(p, c) for c, name in enumerate(CLASSES) if name in subdirs for p in list_images(folder / name)]
    if not items:
        raise FedcondError(f"no images in {folder}; expected {folder}/<class>/<image files>")
    return items


def _listing_key(base: Path, items: list[tuple[Path, int]], size: int) -> str:
    h = hashlib.sha256(f"office_caltech v1 size={size}\n".encode())
    for p, c in items:
        st = p.stat()
        h.update(f"{p.relative_to(base).as_posix()}\t{c}\t{st.st_size}\t{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def load_office_caltech(root: Path, origin: str, domains=None, size: int = SIZE) -> DomainData:
    """Load Office-Caltech-10 (all domains, or ``domains`` in that order) resized to ``size`` x ``size``."""
    chosen = pick_domains(domains, DOMAINS, "office_caltech")
    if not isinstance(size, int) or not 8 <= size <= 1024:
        raise FedcondError(f"office_caltech size must be an integer from 8 to 1024, got {size!r}")
    base = root / FOLDER
    absent = [f"{FOLDER}/{d}/" for d in chosen if not (base / d).is_dir()]
    if absent:
        raise missing("office_caltech", root, origin, absent, MANUAL.format(root=root))
    xs, ys, ds = [], [], []
    for i, dom in enumerate(chosen):
        items = scan_domain(base, dom)
        arrays = cached_arrays(
            root,
            f"office_caltech-{dom}-{size}px",
            _listing_key(base, items, size),
            lambda items=items: {
                "x": read_resized([p for p, _ in items], size),
                "y": np.array([c for _, c in items], dtype=np.int64),
            },
        )
        xs.append(arrays["x"])
        ys.append(arrays["y"].astype(np.int64))
        ds.append(np.full(len(ys[-1]), i, dtype=np.int64))
    return DomainData(
        name="office_caltech",
        x=np.concatenate(xs),
        y=np.concatenate(ys),
        domain=np.concatenate(ds),
        classes=CLASSES,
        domains=chosen,
    )


def count_images(root: Path) -> dict[str, int]:
    """Images per domain present under ``<root>/office_caltech`` (for ``verify``)."""
    return {d: len(scan_domain(root / FOLDER, d)) for d in DOMAINS if (root / FOLDER / d).is_dir()}
