"""The ``.npz.xz`` container: an uncompressed ``.npz`` compressed as a whole with xz.

Every file is checked against its sha256 before a single array is used: the
known hash of the shared files (from the datasets README), or the sidecar
``<file>.sha256`` that :func:`write_container` writes next to converted files.

A built-in dataset's hash wins over a sidecar: a file and a ``.sha256`` beside it are written by
the same hand, so a sidecar could vouch for any replacement of ``mnist.npz.xz``. Such a name
takes its published hash, or one that fedcond itself wrote on this account when it converted an
official download (``fedcond data download`` of the official pixels under the same name): those
are recorded in the user's fedcond data folder (``converted.sha256``), outside the data directory.
A user's own dataset, under a name without a built-in hash, still brings its own sidecar.
"""

from __future__ import annotations

import hashlib
import io
import lzma
import os
import tempfile
from pathlib import Path
from typing import Mapping

import numpy as np
import platformdirs

from fedcond.errors import ChecksumMismatch, FedcondError

from .paths import file_mode

# sha256 of the files of the shared datasets folder (its README, "Files, sizes, sha256").
KNOWN_SHA256 = {
    "mnist.npz.xz": "194245814334b8b0086b846d63c8d2d4d38c938b1dd83a822bc05a7bff95499d",
    "fashion_mnist.npz.xz": "14d908d17ab783d3f1ae11e85aed857b00186b797bd977613f9ad9b31eee1e36",
    "pacs_photo.npz.xz": "59c36c20d3ad1291bed96abb901a91397f3bff9803231bca1af60ec7b596920b",
    "pacs_art_painting.npz.xz": "0ac2ae60c466c32430bb62822e0076594dc76c99b5b97bf46c4d21367c4be193",
    "pacs_cartoon.npz.xz": "41c9de8fc134292ed189e1f1e8110657efed7ab13fc1d1fe97c902c420baf5ca",
    "pacs_sketch.npz.xz": "316294da98ea171b55213a963daf60f4bf6c1cf2a0852877ea984d2bfb85e05b",
    "cifar10.npz.xz": "fd6eca1e59a966f54af8b6ff09b4d83a6de60cc05853ca54c04567387824a277",
}

SIDECAR_SUFFIX = ".sha256"
# xz preset for files we write. The shared files used 9e; any preset reads the same way,
# and 6 is already ~2 MB/s on image data, so conversions of big sets pass a lower one.
DEFAULT_PRESET = 6

# (resolved path, size, mtime_ns) -> sha256 of a file hashed in this process, so that
# repeated loads of an unchanged file do not hash it again.
_HASHED: dict[tuple[str, int, int], str] = {}


def sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR_SUFFIX)


def read_sidecar(path: Path) -> str | None:
    """The hash in ``<path>.sha256`` (``sha256sum`` format), or None if there is no sidecar."""
    try:
        text = sidecar_path(path).read_text(encoding="ascii").split()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise FedcondError(f"cannot read the checksum file {sidecar_path(path)}: {e}") from e
    digest = text[0].lower() if text else ""
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise FedcondError(
            f"{sidecar_path(path)} does not hold a sha256: delete it and {path.name}, then download the dataset again"
        )
    return digest


def converted_record() -> Path:
    """Where fedcond records the hashes of the built-in-named files it converted on this account."""
    return Path(platformdirs.user_data_dir("fedcond")) / "converted.sha256"


def _converted_here(name: str) -> set[str]:
    try:
        lines = converted_record().read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError):
        return set()
    return {d for d, n in (line.split(maxsplit=1) for line in lines if len(line.split()) == 2) if n == name}


def _record_converted(path: Path, digest: str) -> None:
    record = converted_record()
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        with open(record, "a", encoding="ascii") as f:
            f.write(f"{digest}  {path.name}\n")
    except OSError:  # loading this file will then say it matches no built-in hash
        pass


def expected_sha256(path: Path) -> tuple[str, str]:
    """(hash, where it comes from) for a container file: a built-in name's published hash (no
    sidecar overrides it), else the sidecar."""
    if path.name in KNOWN_SHA256:
        return KNOWN_SHA256[
            path.name
        ], "the published hash of the shared file; a .sha256 beside it does not override it"
    digest = read_sidecar(path)
    if digest is not None:
        return digest, f"from {sidecar_path(path).name}"
    raise FedcondError(
        f"no checksum known for {path}: files written by `fedcond data download` have a "
        f"{path.name}{SIDECAR_SUFFIX} next to them; to trust this file, write its sha256 there"
    )


def sha256_bytes(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _stat_key(st: os.stat_result, path: Path) -> tuple[str, int, int]:
    return (str(path.resolve()), st.st_size, st.st_mtime_ns)


def _compare(path: Path, actual: str, fix: str) -> str:
    expected, source = expected_sha256(path)
    if actual != expected and not (path.name in KNOWN_SHA256 and actual in _converted_here(path.name)):
        raise ChecksumMismatch(
            f"{path} has sha256 {actual} but {expected} was expected ({source}); "
            f"the file is damaged or was replaced and was not used: {fix}"
        )
    return actual


def check_file(path: Path, fix: str, *, rehash: bool = False) -> str:
    """Verify ``path`` against its expected sha256 and return it; ChecksumMismatch otherwise.

    A file already hashed in this process with the same size and mtime is not hashed
    again unless ``rehash``.
    """
    path = Path(path)
    key = _stat_key(path.stat(), path)
    actual = None if rehash else _HASHED.get(key)
    if actual is None:
        actual = sha256_file(path)
        _HASHED[key] = actual
    return _compare(path, actual, fix)


def read_container(path: Path, fix: str, *, keys: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """Check and read a ``.npz.xz`` file into {name: array}.

    ``fix`` ends the error message (e.g. how to re-download); ``keys`` are arrays that
    must be present. Nothing is decompressed before the hash has matched.
    """
    path = Path(path)
    with open(path, "rb") as f:
        # Hash exactly the bytes we decompress; the stat key comes from the same open file.
        key = _stat_key(os.fstat(f.fileno()), path)
        data = f.read()
    actual = _HASHED.get(key)
    if actual is None:
        actual = sha256_bytes(data)
        _HASHED[key] = actual
    _compare(path, actual, fix)
    try:
        raw = lzma.decompress(data)
        del data
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (lzma.LZMAError, ValueError, OSError, EOFError) as e:
        raise FedcondError(f"{path} is not a valid .npz.xz container ({type(e).__name__}: {e}): {fix}") from e
    absent = [k for k in keys if k not in arrays]
    if absent:
        raise FedcondError(f"{path} lacks the arrays {', '.join(absent)} (it has {', '.join(sorted(arrays))}): {fix}")
    return arrays


def write_container(
    path: Path, arrays: Mapping[str, np.ndarray], *, preset: int = DEFAULT_PRESET, sidecar: bool = True
) -> str:
    """Write arrays as a ``.npz.xz`` file (+ ``<file>.sha256``) atomically; returns the file's sha256.

    Object arrays are refused: the format is read with ``allow_pickle=False``.
    """
    path = Path(path)
    for k, a in arrays.items():
        if np.asarray(a).dtype == object:
            raise ValueError(f"array {k!r} has dtype object, which the container cannot hold")
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(a) for k, a in arrays.items()})
    raw = buf.getbuffer()
    comp = lzma.LZMACompressor(format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=preset)
    h = hashlib.sha256()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write under a temporary name and rename, so a crash never leaves a half file under the real name.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, file_mode())
        with os.fdopen(fd, "wb") as f:
            step = 16 << 20
            for i in range(0, len(raw), step):
                out = comp.compress(raw[i : i + step])
                h.update(out)
                f.write(out)
            out = comp.flush()
            h.update(out)
            f.write(out)
        digest = h.hexdigest()
        if (
            path.name in KNOWN_SHA256
        ):  # an official download under a built-in name: vouched for outside the data directory
            _record_converted(path, digest)
        if sidecar:
            side = sidecar_path(path)
            side_tmp = side.with_name(f".{side.name}.tmp")
            side_tmp.write_text(f"{digest}  {path.name}\n", encoding="ascii")
            os.replace(side_tmp, side)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        del raw
        buf.close()
    return digest
