"""The dataset names, and ``load`` / ``verify`` dispatching to the per-dataset modules."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from fedcond.errors import FedcondError
from fedcond.plugin_loading import load_entry_points

from . import cifar, digits, emnist, mnist, office_caltech, pacs
from .container import check_file
from .paths import data_dir_origin, missing, resolve_data_dir
from .split import redownload
from .types import DomainData, ImageData


def _digits(data_dir, **options) -> ImageData:
    return digits.load_digits()


def _mnist_like(name: str):
    def load_it(data_dir, **options) -> ImageData:
        return mnist.load_mnist_like(name, resolve_data_dir(data_dir), data_dir_origin(data_dir))

    return load_it


def _cifar10(data_dir, **options) -> ImageData:
    return cifar.load_cifar10(resolve_data_dir(data_dir), data_dir_origin(data_dir))


def _cifar100(data_dir, **options) -> ImageData:
    return cifar.load_cifar100(resolve_data_dir(data_dir), data_dir_origin(data_dir))


def _emnist(data_dir, **options) -> ImageData:
    return emnist.load_emnist(resolve_data_dir(data_dir), data_dir_origin(data_dir), **options)


def _pacs(data_dir, **options) -> DomainData:
    return pacs.load_pacs(resolve_data_dir(data_dir), data_dir_origin(data_dir), **options)


def _office_caltech(data_dir, **options) -> DomainData:
    return office_caltech.load_office_caltech(resolve_data_dir(data_dir), data_dir_origin(data_dir), **options)


# Every dataset by name: (data_dir as given, None: $FEDCOND_DATA or the user cache; the options
# below) -> ImageData | DomainData. Plug-ins add theirs (fedcond.plugins.register_dataset).
DatasetLoader = Callable[..., "ImageData | DomainData"]
DATASETS: dict[str, DatasetLoader] = {
    "digits": _digits,
    "mnist": _mnist_like("mnist"),
    "fmnist": _mnist_like("fmnist"),
    "cifar10": _cifar10,
    "cifar100": _cifar100,
    "emnist": _emnist,
    "pacs": _pacs,
    "office_caltech": _office_caltech,
}
BUILTIN_DATASETS = tuple(DATASETS)
_ALIASES = {"fashion_mnist": "fmnist", "office_caltech_10": "office_caltech", "office_caltech10": "office_caltech"}
# load() options each dataset accepts
OPTIONS: dict[str, tuple[str, ...]] = {
    "emnist": ("split",),
    "pacs": ("domains",),
    "office_caltech": ("domains", "size"),
}


def normalize_name(name: str) -> str:
    """The canonical dataset name (case and ``-``/``_`` insensitive); FedcondError for an unknown one."""
    load_entry_points()  # installed plug-ins may register datasets
    key = str(name).strip().lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    if key not in DATASETS:
        raise FedcondError(f"unknown dataset {name!r}; valid names: {', '.join(DATASETS)}")
    return key


def is_builtin(name: str) -> bool:
    """Whether `name` (any case, aliases too) is one of fedcond's own datasets, not a plug-in's."""
    key = str(name).strip().lower().replace("-", "_")
    return _ALIASES.get(key, key) in BUILTIN_DATASETS


def load(name: str, data_dir: str | Path | None = None, **options) -> ImageData | DomainData:
    """Load dataset ``name`` from the data directory (see ``resolve_data_dir``).

    Options: ``emnist``: ``split="balanced"`` or ``"byclass"``; ``pacs``: ``domains=``
    (names, in the order wanted); ``office_caltech``: ``domains=``, ``size=112``.
    Raises DatasetMissing when the files are absent and ChecksumMismatch when a file
    is damaged; ``digits`` needs no file. A plug-in's dataset is whatever its loader returns,
    checked to be an ImageData or a DomainData.
    """
    name = normalize_name(name)
    allowed = OPTIONS.get(name, ())
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        takes = ", ".join(allowed) if allowed else "no options"
        raise FedcondError(f"dataset {name} has no option {', '.join(unknown)} (it takes {takes})")
    data = DATASETS[name](data_dir, **options)
    if name not in BUILTIN_DATASETS and not isinstance(data, (ImageData, DomainData)):
        raise FedcondError(
            f"dataset {name}: its loader returned {type(data).__name__}, not fedcond.data.ImageData or DomainData"
        )
    return data


def _files(name: str) -> list[str]:
    if name in ("mnist", "fmnist"):
        return [mnist.FILES[name]]
    if name == "cifar10":
        return [cifar.CIFAR10_FILE]
    if name == "cifar100":
        return [cifar.CIFAR100_FILE]
    if name == "emnist":
        return [emnist.container_name(s) for s in emnist.SPLITS]
    return [pacs.filename(d) for d in pacs.DOMAINS]


def verify(name: str, data_dir: str | Path | None = None) -> str:
    """Hash the dataset's files against their expected sha256 and return a one-line summary.

    Raises DatasetMissing if nothing is there and ChecksumMismatch on a damaged file.
    For EMNIST the splits present are checked. Office-Caltech-10 has no published
    checksums: its images are only counted.
    """
    name = normalize_name(name)
    if name not in BUILTIN_DATASETS:
        return f"{name}: a plug-in's dataset; fedcond knows no files or checksums for it"
    if name == "digits":
        import sklearn

        return f"digits: OK, embedded in scikit-learn {sklearn.__version__}, no file to verify"
    root, origin = resolve_data_dir(data_dir), data_dir_origin(data_dir)
    if name == "office_caltech":
        counts = office_caltech.count_images(root)
        if not counts:
            raise missing(name, root, origin, [f"{office_caltech.FOLDER}/"], office_caltech.MANUAL.format(root=root))
        per = ", ".join(f"{d} {n}" for d, n in counts.items())
        return (
            f"office_caltech: {sum(counts.values())} images in {root / office_caltech.FOLDER} ({per}); "
            f"no published checksums, so the images were counted, not hashed"
        )
    files = _files(name)
    present = [f for f in files if (root / f).is_file()]
    if name == "emnist" and present:
        files = present  # either split alone is a complete dataset
    absent = [f for f in files if f not in present]
    if absent:
        how = pacs.MANUAL.format(root=root) if name == "pacs" else None
        raise missing(name, root, origin, absent, how)
    fix = pacs.FIX if name == "pacs" else redownload(name)
    digests = [check_file(root / f, fix, rehash=True) for f in files]
    listed = ", ".join(f"{f} {d[:12]}" for f, d in zip(files, digests, strict=True))
    return f"{name}: OK, sha256 verified in {root}: {listed}"
