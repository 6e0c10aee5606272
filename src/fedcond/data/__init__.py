"""Datasets for the experiments: loading, checksum verification and download.

``load(name)`` returns an :class:`ImageData` (official train/test split: digits,
mnist, fmnist, cifar10, cifar100, emnist) or a :class:`DomainData` (several domains,
no split: pacs, office_caltech). Files live in the data directory chosen by
:func:`resolve_data_dir` (argument, else ``$FEDCOND_DATA``, else the user cache dir),
in the ``.npz.xz`` container format of the shared datasets folder, and are checked
against their sha256 before use.
"""

from .sources import download
from .paths import ENV_VAR, resolve_data_dir
from .registry import DATASETS, load, verify
from .types import DomainData, ImageData

__all__ = ["DATASETS", "ENV_VAR", "DomainData", "ImageData", "download", "load", "resolve_data_dir", "verify"]
