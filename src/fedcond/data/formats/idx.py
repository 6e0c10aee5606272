"""The IDX format of MNIST, Fashion-MNIST and EMNIST, plain or gzip-compressed.

Layout: two zero bytes, a type code, the number of dimensions, one big-endian
uint32 per dimension, then the values in C order, big-endian.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path
from typing import BinaryIO

import numpy as np

from fedcond.errors import FedcondError

_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_CODES = {np.dtype(v).newbyteorder("="): k for k, v in _TYPES.items()}


def parse_idx(data: bytes, what: str = "IDX data") -> np.ndarray:
    """Decode IDX bytes (gzip-compressed or not) into a native-endian numpy array."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise FedcondError(f"{what}: broken gzip stream ({e})") from e
    if len(data) < 4 or data[:2] != b"\0\0" or data[2] not in _TYPES:
        raise FedcondError(f"{what}: not an IDX file (bad magic {data[:4].hex()})")
    dtype, ndim = np.dtype(_TYPES[data[2]]), data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise FedcondError(f"{what}: IDX header truncated")
    shape = struct.unpack(f">{ndim}I", data[4:header])
    count = int(np.prod(shape, dtype=np.int64))
    if len(data) - header != count * dtype.itemsize:
        raise FedcondError(
            f"{what}: IDX payload is {len(data) - header} bytes, shape {shape} needs {count * dtype.itemsize}"
        )
    arr = np.frombuffer(data, dtype=dtype, count=count, offset=header).reshape(shape)
    return arr.astype(dtype.newbyteorder("="), copy=True)  # own, writable, native-endian


def read_idx(source: str | Path | BinaryIO) -> np.ndarray:
    """Read an IDX file (``.gz`` or plain) from a path or a binary file object."""
    if isinstance(source, (str, Path)):
        with open(source, "rb") as f:
            return parse_idx(f.read(), str(source))
    return parse_idx(source.read(), getattr(source, "name", "IDX data"))


def write_idx(path: str | Path, array: np.ndarray, *, compress: bool | None = None) -> None:
    """Write ``array`` as IDX; gzip-compressed if ``compress`` or if the name ends in ``.gz``."""
    array = np.asarray(array)
    code = _CODES.get(array.dtype.newbyteorder("="))
    if code is None:
        raise ValueError(f"IDX cannot hold dtype {array.dtype}")
    data = (
        bytes([0, 0, code, array.ndim])
        + struct.pack(f">{array.ndim}I", *array.shape)
        + array.astype(_TYPES[code], copy=False).tobytes()
    )
    if compress if compress is not None else str(path).endswith(".gz"):
        data = gzip.compress(data)
    Path(path).write_bytes(data)
