"""IDX files: reading the official layout (plain and gzip), writing, and rejecting damaged files."""
import gzip
import struct

import numpy as np
import pytest

from fedcond.data.formats.idx import parse_idx, read_idx, write_idx
from fedcond.errors import FedcondError


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_round_trip(tmp_path, dtype, suffix):
    a = (np.arange(2 * 3 * 4) - 5).astype(dtype).reshape(2, 3, 4)
    path = tmp_path / f"a-idx3-ubyte{suffix}"
    write_idx(path, a)
    assert (path.read_bytes()[:2] == b"\x1f\x8b") == (suffix == ".gz")
    b = read_idx(path)
    np.testing.assert_array_equal(a, b)
    assert b.dtype == np.dtype(dtype) and b.flags.writeable


def test_official_header_layout():
    # The labels file layout of the MNIST page: magic 0x00000801, count, then bytes.
    data = struct.pack(">II", 0x801, 3) + bytes([7, 2, 1])
    np.testing.assert_array_equal(parse_idx(gzip.compress(data)), [7, 2, 1])
    images = struct.pack(">IIII", 0x803, 1, 2, 2) + bytes([0, 255, 128, 1])
    np.testing.assert_array_equal(parse_idx(images), [[[0, 255], [128, 1]]])


def test_bad_files():
    with pytest.raises(FedcondError, match="not an IDX"):
        parse_idx(b"PK\x03\x04rest")
    with pytest.raises(FedcondError, match="payload"):
        parse_idx(struct.pack(">II", 0x801, 5) + bytes(3))
    with pytest.raises(FedcondError, match="gzip"):
        parse_idx(gzip.compress(b"\0\0\x08\x01" + bytes(8))[:-6])
