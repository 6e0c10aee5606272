"""Where datasets live: the data directory, its derived-array cache, and the missing-data message."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from fedcond.errors import DatasetMissing, FedcondError

ENV_VAR = "FEDCOND_DATA"
CACHE_SUBDIR = ".cache"  # derived arrays (decoded JPEGs, resized images), safe to delete


def default_data_dir() -> Path:
    return Path(platformdirs.user_cache_dir("fedcond"))


def resolve_data_dir(data_dir: str | Path | None = None) -> Path:
    """The data directory: ``data_dir`` if given, else ``$FEDCOND_DATA``, else the user cache dir.

    The directory need not exist; loaders report a missing dataset with this path.
    """
    if data_dir is not None and str(data_dir) != "":
        return Path(data_dir).expanduser()
    env = os.environ.get(ENV_VAR, "")
    if env:
        return Path(env).expanduser()
    return default_data_dir()


def data_dir_origin(data_dir: str | Path | None = None) -> str:
    """Says in a few words why ``resolve_data_dir`` chose its answer (for error messages)."""
    if data_dir is not None and str(data_dir) != "":
        return "the data_dir given"
    if os.environ.get(ENV_VAR, ""):
        return f"${ENV_VAR}"
    return f"the default, as ${ENV_VAR} is unset"


def missing(name: str, root: Path, origin: str, looked_for: list[str], how: str | None = None) -> DatasetMissing:
    """A one-line DatasetMissing naming the folder searched, FEDCOND_DATA and the fix.

    ``how`` replaces the default fix (``fedcond data download NAME``) for datasets
    that cannot be fetched by a script.
    """
    if how is None:
        how = f"run `fedcond data download {name}` to fetch it there"
    return DatasetMissing(
        f"dataset {name} not found: no {', '.join(looked_for)} in {root} (data directory from {origin}; "
        f"set {ENV_VAR} or pass a data directory to use another folder); {how}"
    )


def _marked_writable(path: Path) -> bool:
    # Permission bits, not just os.access: root may write anywhere, but a folder marked
    # read-only for everyone (like the shared datasets folder) must be left alone.
    try:
        return bool(path.stat().st_mode & 0o222) and os.access(path, os.W_OK | os.X_OK)
    except OSError:
        return False


def _usable_dir(path: Path) -> bool:
    """True if ``path`` is (or can be created as) a folder we may write to."""
    existing = path
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir() or not _marked_writable(existing):
        return False
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return _marked_writable(path)


def file_mode() -> int:
    """The mode of a newly created file under the current umask (mkstemp would give 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def cache_dirs(root: Path) -> tuple[Path, Path]:
    """Where derived arrays may live, in order of preference: ``<root>/.cache``, then the user cache dir."""
    return (root / CACHE_SUBDIR, default_data_dir() / CACHE_SUBDIR)


def cache_dir(root: Path) -> Path | None:
    """The first writable folder of ``cache_dirs`` (created if needed), or None.

    The shared datasets folder is read-only, hence the fallback.
    """
    for candidate in cache_dirs(root):
        if _usable_dir(candidate):
            return candidate
    return None


def writable_data_dir(root: Path) -> Path:
    """Create ``root`` if needed and make sure we can write there (for ``download``)."""
    if not _usable_dir(root):
        raise FedcondError(
            f"cannot write to the data directory {root}: choose a writable folder "
            f"with {ENV_VAR} or a data directory argument"
        )
    return root
