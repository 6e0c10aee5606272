"""The dataset names, and ``load`` / ``verify`` dispatching to the per-dataset modules."""

from __future__ import annotations

from pathlib import Path

from fedcond.errors import FedcondError

from . import cifar, digits, emnist, mnist, office_caltech, pacs
from .container import check_file
from .paths import data_dir_origin, missing, resolve_data_dir
from .split import redownload
from .types import DomainData, ImageData

DATASETS: tuple[str, ...] = ("digits", "mnist", "fmnist", "cifar10", "cifar100", "emnist", "pacs", "office_caltech")
_ALIASES = {"fashion_mnist": "fmnist", "office_caltech_10": "office_caltech", "office_caltech10": "office_caltech"}
# load() options each dataset accepts
OPTIONS: dict[str, tuple[str, ...]] = {
    "emnist": ("split",),
    "pacs": ("domains",),
    "office_caltech": ("domains", "size"),
}


def normalize_name(name: str) -> str:
    """The canonical dataset name (case and ``-``/``_`` insensitive); FedcondError for an unknown one."""
    key = str(name).strip().lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    if key not in DATASETS:
        raise FedcondError(f"unknown dataset {name!r}; valid names: {', '.join(DATASETS)}")
    return key


def load(name: str, data_dir: str | Path | None = None, **options) -> ImageData | DomainData:
    """Load dataset ``name`` from the data directory (see ``resolve_data_dir``).

    Options: ``emnist``: ``split="balanced"`` or ``"byclass"``; ``pacs``: ``domains=``
    (names, in the order wanted); ``office_caltech``: ``domains=``, ``size=112``.
    Raises DatasetMissing when the files are absent and ChecksumMismatch when a file
    is damaged; ``digits`` needs no file.
    """
    name = normalize_name(name)
    allowed = OPTIONS.get(name, ())
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        takes = ", ".join(allowed) if allowed else "no options"
        raise FedcondError(f"dataset {name} has no option {', '.join(unknown)} (it takes {takes})")
    if name == "digits":
        return digits.load_digits()
    root, origin = resolve_data_dir(data_dir), data_dir_origin(data_dir)
    if name in ("mnist", "fmnist"):
        return mnist.load_mnist_like(name, root, origin)
    if name == "cifar10":
        return cifar.load_cifar10(root, origin)
    if name == "cifar100":
        return cifar.load_cifar100(root, origin)
    if name == "emnist":
        return emnist.load_emnist(root, origin, **options)
    if name == "pacs":
        return pacs.load_pacs(root, origin, **options)
    return office_caltech.load_office_caltech(root, origin, **options)


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
