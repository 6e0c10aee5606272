"""Official sources and ``download``: fetch the official files (hash-checked by pooch) and convert them to containers.

The raw files go to ``<data_dir>/.downloads/`` and are removed once converted; a raw
file placed there by hand with the right hash is used without any network access.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from fedcond.errors import ChecksumMismatch, FedcondError

from . import cifar, emnist, mnist, office_caltech, pacs
from .container import check_file, read_sidecar
from .paths import resolve_data_dir, writable_data_dir
from .registry import normalize_name
from .split import redownload

DOWNLOADS_SUBDIR = ".downloads"
# xz preset for converted files: 3 compresses ~10 MB/s, 6 would be ~5x slower for files ~10% smaller.
PRESET = 3


@dataclass(frozen=True)
class Remote:
    """One official file: where it is and its published hash ("md5:..." or "sha256:...")."""

    url: str
    fname: str
    known_hash: str


_MNIST = "https://ossci-datasets.s3.amazonaws.com/mnist/"
_FMNIST = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
REMOTES: dict[str, tuple[Remote, ...]] = {
    "mnist": tuple(
        Remote(_MNIST + f, f, "md5:" + h)
        for f, h in zip(
            mnist.IDX_FILES,
            (
                "f68b3c2dcbeaaa9fbdd348bbdeb94873",
                "d53e105ee54ea40749a09fcbcd1e9432",
                "9fb629c4189551a2d022fa330f9573f3",
                "ec29112dd5afa0611ce80d1b7f02629c",
            ),
            strict=True,
        )
    ),
    "fmnist": tuple(
        Remote(_FMNIST + f, f, "md5:" + h)
        for f, h in zip(
            mnist.IDX_FILES,
            (
                "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
                "25c81989df183df01b3e8a0aad5dffbe",
                "bef4ecab320f06d8554ea6380940ec79",
                "bb300cfdad3c16e7a12a480ee83cd310",
            ),
            strict=True,
        )
    ),
    "cifar10": (
        Remote(
            "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
            "cifar-10-python.tar.gz",
            "md5:c58f30108f718f92721af3b95e74349a",
        ),
    ),
    "cifar100": (
        Remote(
            "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
            "cifar-100-python.tar.gz",
            "md5:eb9058c3a382ffc7106e4002c42a8d85",
        ),
    ),
    "emnist": (
        Remote(
            "https://biometrics.nist.gov/cs_links/EMNIST/gzip.zip",
            "emnist-gzip.zip",
            "md5:58c8d27c78d21e728a6bc7b3cc06412e",
        ),
    ),
}

# The container files each download produces.
OUTPUTS: dict[str, tuple[str, ...]] = {
    "mnist": (mnist.FILES["mnist"],),
    "fmnist": (mnist.FILES["fmnist"],),
    "cifar10": (cifar.CIFAR10_FILE,),
    "cifar100": (cifar.CIFAR100_FILE,),
    "emnist": tuple(emnist.container_name(s) for s in emnist.SPLITS),
}


def _one_line(e: BaseException) -> str:
    return " ".join(f"{type(e).__name__}: {e}".split())


def fetch(remote: Remote, folder: Path, progress: bool) -> Path:
    """Download ``remote`` into ``folder`` unless a file with the right hash is already there."""
    import pooch

    try:
        return Path(
            pooch.retrieve(
                remote.url, known_hash=remote.known_hash, fname=remote.fname, path=folder, progressbar=progress
            )
        )
    except ValueError as e:  # pooch's hash mismatch
        if "hash" in str(e).lower():
            raise ChecksumMismatch(
                f"{remote.url} did not match its published {remote.known_hash} "
                f"({_one_line(e)}); the file was not used: try again later"
            ) from e
        raise FedcondError(f"could not download {remote.url} ({_one_line(e)})") from e
    except Exception as e:  # network errors come in many types (requests, OSError, ...)
        raise FedcondError(
            f"could not download {remote.url} ({_one_line(e)}); check the network, or put "
            f"the file by hand at {folder / remote.fname}"
        ) from e


def _convert(name: str, raw: list[Path], root: Path) -> list[Path]:
    if name in ("mnist", "fmnist"):
        return [mnist.convert_idx(name, raw[0].parent, root, preset=PRESET)]
    if name == "cifar10":
        return [cifar.convert_cifar10_tar(raw[0], root, preset=PRESET)]
    if name == "cifar100":
        return [cifar.convert_cifar100_tar(raw[0], root, preset=PRESET)]
    return emnist.convert_emnist_zip(raw[0], root, preset=PRESET)


def _present(name: str, root: Path) -> list[Path] | None:
    """The outputs if all exist and verify, else None (damaged ones are simply replaced).

    The shared JPEG-derived CIFAR-10 copy does not count: downloading it asks for the official pixels.
    """
    paths = [root / f for f in OUTPUTS[name]]
    if not all(p.is_file() for p in paths):
        return None
    if any(p.name == cifar.CIFAR10_FILE and read_sidecar(p) is None for p in paths):
        return None
    try:
        for p in paths:
            check_file(p, redownload(name))
    except FedcondError:
        return None
    return paths


def download(
    name: str, data_dir: str | Path | None = None, progress: bool = True, *, force: bool = False
) -> list[Path]:
    """Fetch dataset ``name`` into the data directory and return the container files.

    Files already present whose hashes check out are kept (``force=True`` fetches
    anyway). ``digits`` is embedded and returns ``[]``. PACS and Office-Caltech-10 have
    no scriptable source and raise a FedcondError saying what to do by hand.
    """
    name = normalize_name(name)
    root = resolve_data_dir(data_dir)
    if name == "digits":
        return []
    if name not in REMOTES and name not in ("pacs", "office_caltech"):
        raise FedcondError(f"{name} is a plug-in's dataset: fedcond has no source to download it from")
    if name in ("pacs", "office_caltech"):
        manual = pacs.MANUAL if name == "pacs" else office_caltech.MANUAL
        raise FedcondError(f"{name} cannot be downloaded by fedcond: {manual.format(root=root)}")
    if not force:
        done = _present(name, root)
        if done is not None:
            return done
    writable_data_dir(root)
    folder = root / DOWNLOADS_SUBDIR
    raw = [fetch(r, folder, progress) for r in REMOTES[name]]
    written = _convert(name, raw, root)
    for p in raw:  # converted: the raw files are no longer needed
        p.unlink(missing_ok=True)
    if folder.is_dir() and not any(folder.iterdir()):
        shutil.rmtree(folder, ignore_errors=True)
    return written
