"""The sum of the clients' vectors, and nothing else, for the server: pairwise additive masking.

This is the core of secure aggregation (Bonawitz et al., CCS 2017; Flower's SecAgg+): every pair
of clients agrees on a secret by X25519 key exchange through the server, expands it into a mask,
and one adds the mask while the other subtracts it. Each masked upload is uniformly random
modulo 2^64; the masks cancel only in the sum of all uploads. Values travel as 32-bit
fixed point in wrapping uint64 arithmetic, so the sum is exact (no float cancellation error).

What it omits: SecAgg's secret-sharing of the masks, which lets the sum survive a client that
drops out after the keys are exchanged. Here such a dropout makes the phase fail with a clear
error; the normalisation runs once, before training, so it is simply rerun.
"""

from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from ..errors import FedcondError

FRACTION_BITS = 32  # fixed point: v -> round(v * 2^32)


def new_keypair() -> tuple[bytes, bytes]:
    """(private, public) raw X25519 keys."""
    key = X25519PrivateKey.generate()
    private = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return private, key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def _mask(private: bytes, peer_public: bytes, size: int, label: bytes) -> np.ndarray:
    shared = X25519PrivateKey.from_private_bytes(private).exchange(X25519PublicKey.from_public_bytes(peer_public))
    seed = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"fedcond secure sum " + label).derive(shared)
    rng = np.random.Generator(np.random.PCG64(int.from_bytes(seed, "little")))
    return rng.integers(0, 2**64, size=size, dtype=np.uint64, endpoint=False)


def encode(values: np.ndarray, num_clients: int) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(values)) or np.abs(values).max(initial=0.0) * num_clients >= 2.0 ** (62 - FRACTION_BITS):
        raise FedcondError("secure sum: values too large for 32-bit fixed point over this many clients")
    return np.round(values * 2.0**FRACTION_BITS).astype(np.int64).view(np.uint64)


def decode(total: np.ndarray) -> np.ndarray:
    return total.view(np.int64).astype(np.float64) / 2.0**FRACTION_BITS


def masked_upload(values: np.ndarray, me: int, private: bytes, publics: dict[int, bytes], label: bytes = b"") -> np.ndarray:
    """This client's upload: encode(values) + sum_{j > me} m_ij - sum_{j < me} m_ij (mod 2^64)."""
    out = encode(values, len(publics))
    for j, pk in sorted(publics.items()):
        if j == me:
            continue
        m = _mask(private, pk, out.size, label)
        out = out + m if j > me else out - m  # uint64 wraps: arithmetic modulo 2^64
    return out


def unmask_sum(uploads: list[np.ndarray]) -> np.ndarray:
    """The server's only view: the plain sum of everyone's values (masks cancel pairwise)."""
    total = np.zeros_like(uploads[0])
    for u in uploads:
        total = total + u
    return decode(total)


def zscore_from_sums(total: np.ndarray, n: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Population mean and std per component from sum(v) and sum(v^2) (as stats.normalise's zscore)."""
    mean = total[:width] / n
    var = np.maximum(total[width:] / n - mean**2, 0.0)
    return mean, np.sqrt(var)
