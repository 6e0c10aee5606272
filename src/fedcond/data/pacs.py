"""PACS at 112x112: four domains x seven classes, 9,991 RGB images, no official split.

Read from the four shared files ``pacs_<domain>.npz.xz`` (arrays ``x``, ``y``, ``d``),
which hold the published PACS release resized to 112x112 (see the datasets README).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from fedcond.errors import FedcondError

from .container import read_container
from .paths import missing
from .types import DomainData

DOMAINS = ("photo", "art_painting", "cartoon", "sketch")
CLASSES = ("dog", "elephant", "giraffe", "guitar", "horse", "house", "person")
MANUAL = (
    "PACS has no scriptable official source: copy the four pacs_<domain>.npz.xz files of the shared "
    "datasets folder (the PACS release of Li et al., ICCV 2017, resized to 112x112) into {root}"
)
FIX = "replace it with a fresh copy of the same file from the shared datasets folder"


def filename(domain: str) -> str:
    return f"pacs_{domain}.npz.xz"


def pick_domains(requested, known: tuple[str, ...], dataset: str) -> tuple[str, ...]:
    """Validate a ``domains=`` option (None = all, one name, or several names) and keep its order."""
    if requested is None:
        return known
    chosen = (requested,) if isinstance(requested, str) else tuple(requested)
    bad = [d for d in chosen if d not in known]
    if not chosen or bad or len(set(chosen)) != len(chosen):
        got = ", ".join(map(str, chosen)) or "none"
        raise FedcondError(f"{dataset} domains must be distinct names from {', '.join(known)}; got {got}")
    return chosen


def load_pacs(root: Path, origin: str, domains=None) -> DomainData:
    """Load PACS (all domains, or the ``domains`` given, in that order).

    ``domain`` indexes the returned ``domains`` tuple, so a subset is renumbered 0..k-1.
    """
    chosen = pick_domains(domains, DOMAINS, "pacs")
    absent = [filename(d) for d in chosen if not (root / filename(d)).is_file()]
    if absent:
        raise missing("pacs", root, origin, absent, MANUAL.format(root=root))
    fix = FIX

    def read(domain: str) -> dict[str, np.ndarray]:
        return read_container(root / filename(domain), fix, keys=("x", "y", "d"))

    # xz decompression releases the GIL, so the files decompress in parallel (the bulk of the time).
    workers = max(1, min(len(chosen), os.cpu_count() or 1, 4))
    with ThreadPoolExecutor(workers) as pool:
        parts = list(pool.map(read, chosen))
    for dom, part in zip(chosen, parts, strict=True):
        if not (part["d"] == DOMAINS.index(dom)).all() or len(part["y"]) != len(part["x"]):
            raise FedcondError(f"{root / filename(dom)} has inconsistent domain or label arrays; {fix}")
    x = np.concatenate([p["x"] for p in parts]) if len(parts) > 1 else parts[0]["x"]
    y = np.concatenate([p["y"] for p in parts]).astype(np.int64)
    domain = np.concatenate([np.full(len(p["y"]), i, dtype=np.int64) for i, p in enumerate(parts)])
    return DomainData(name="pacs", x=np.ascontiguousarray(x), y=y, domain=domain, classes=CLASSES, domains=chosen)
