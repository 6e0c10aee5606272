"""The pickled batches inside the official ``cifar-10-python`` / ``cifar-100-python`` archives.

The batches were pickled by Python 2: dicts with byte-string keys such as
``b"data"`` (uint8 [N, 3072], each row the 1024 red, then green, then blue pixels
of a 32x32 image, row-major) and ``b"labels"`` / ``b"fine_labels"``. Members are
read straight from the tar (nothing is extracted), with an unpickler that only
builds plain containers and numpy arrays.
"""

from __future__ import annotations

import pickle
import tarfile
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from fedcond.errors import FedcondError

# Everything a numpy-array-holding pickle (Python 2 or 3, protocol 2..5) needs, nothing that runs code.
_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),  # how Python 3 writes bytes at protocol 2
}


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return super().find_class(module, name)


def read_tar_pickles(path: str | Path, names: set[str]) -> dict[str, Any]:
    """Unpickle the tar members whose base name is in ``names``; error if any is absent."""
    found: dict[str, Any] = {}
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                base = PurePosixPath(member.name).name
                if member.isfile() and base in names and base not in found:
                    f = tar.extractfile(member)
                    assert f is not None
                    found[base] = _SafeUnpickler(f, encoding="bytes").load()
    except (tarfile.TarError, OSError, EOFError, pickle.UnpicklingError) as e:
        raise FedcondError(f"cannot read {path} as a CIFAR python archive ({type(e).__name__}: {e})") from e
    absent = sorted(names - found.keys())
    if absent:
        raise FedcondError(f"{path} lacks the members {', '.join(absent)}; is it the official CIFAR python archive?")
    return found


def field(batch: Any, key: bytes, where: str) -> Any:
    """``batch[key]`` with a clear error for a malformed batch."""
    if not isinstance(batch, dict) or key not in batch:
        raise FedcondError(f"{where}: no {key!r} entry; not an official CIFAR batch")
    return batch[key]


def rows_to_hwc(data: Any, where: str) -> np.ndarray:
    """[N, 3072] CHW rows -> uint8 [N, 32, 32, 3]."""
    data = np.asarray(data)
    if data.ndim != 2 or data.shape[1] != 3072:
        raise FedcondError(f"{where}: image data has shape {data.shape}, expected [N, 3072]")
    return np.ascontiguousarray(data.astype(np.uint8, copy=False).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))


def labels(batch: Any, key: bytes, where: str) -> np.ndarray:
    return np.asarray(field(batch, key, where), dtype=np.int64).reshape(-1)


def names(batch: Any, key: bytes, where: str) -> list[str]:
    return [n.decode("utf-8") if isinstance(n, bytes) else str(n) for n in field(batch, key, where)]
