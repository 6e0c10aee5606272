"""A disk cache for arrays derived from a dataset (decoded JPEGs, resized images).

Entries are plain uncompressed ``.npz`` files named ``<stem>-<key[:16]>.npz`` that
also store their full key, so a changed source gets a new entry and a stale or
damaged entry is rebuilt rather than used.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np

from .paths import cache_dir, cache_dirs, file_mode

_KEY = "__cache_key__"


def _load(path: Path, key: str) -> dict[str, np.ndarray] | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            if _KEY not in z.files or str(z[_KEY]) != key:
                return None
            return {k: z[k] for k in z.files if k != _KEY}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return None  # unreadable entry: rebuild it


def _save(folder: Path, stem: str, path: Path, key: str, arrays: dict[str, np.ndarray]) -> None:
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, file_mode())
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays, **{_KEY: np.array(key)})
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
        return  # a cache that cannot be written only costs time
    for old in folder.glob(f"{stem}-*.npz"):  # entries for older versions of the source
        if old != path:
            old.unlink(missing_ok=True)


def lookup(root: Path, stem: str, key: str) -> dict[str, np.ndarray] | None:
    """The arrays cached for (stem, key), or None."""
    for folder in cache_dirs(root):  # look without creating anything
        path = folder / f"{stem}-{key[:16]}.npz"
        if path.is_file():
            hit = _load(path, key)
            if hit is not None:
                return hit
    return None


def store(root: Path, stem: str, key: str, arrays: dict[str, np.ndarray]) -> None:
    """Cache arrays for (stem, key), replacing older entries of ``stem``; silently skipped if nowhere is writable."""
    folder = cache_dir(root)
    if folder is not None:
        _save(folder, stem, folder / f"{stem}-{key[:16]}.npz", key, arrays)


def cached_arrays(root: Path, stem: str, key: str, build: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Return the arrays cached for (stem, key), building and storing them on a miss.

    ``key`` must change whenever the source changes (e.g. the source file's sha256).
    The cache lives in ``<root>/.cache`` or, if that is read-only, the user cache dir.
    """
    hit = lookup(root, stem, key)
    if hit is None:
        hit = build()
        store(root, stem, key, hit)
    return hit
