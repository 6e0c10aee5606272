"""The sums of the clients' statistics, and nothing else, for the server: pairwise additive masking.

This is the core of secure aggregation (Bonawitz et al., CCS 2017; Flower's SecAgg+): every pair
of clients agrees on a secret by X25519 key exchange through the server, expands it into a mask,
and one adds the mask while the other subtracts it. Each masked upload is uniformly random
modulo 2^256; the masks cancel only in the sum of all uploads.

Exactness: a client uploads q = round(v 2^64) and q^2 as integers (modulo 2^256, so nothing
overflows for |v| < 2^40 and up to 2^20 clients). The server's sums are exact integers, and the
population mean and variance (n S2 - S1^2) / n^2 are computed in exact rational arithmetic
before the one final rounding to float64: the z-score differs from the pooled one only by v's
quantisation to 2^-64 (far below float64's own rounding), not by E[v^2] - E[v]^2 cancellation.

What it omits: SecAgg's secret-sharing of the masks, which lets the sum survive a client that
drops out after the keys are exchanged. Here such a dropout makes the phase fail with a clear
error; the normalisation runs once, before training, so the run is simply started again.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from ..errors import FedcondError

FRACTION_BITS = 64  # fixed point: v -> round(v * 2^64)
MODULUS_BITS = 256
MODULUS = 1 << MODULUS_BITS
_WORD = MODULUS_BITS // 8  # bytes per element on the wire


def new_keypair() -> tuple[bytes, bytes]:
    """(private, public) raw X25519 keys."""
    key = X25519PrivateKey.generate()
    private = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return private, key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def mask_stream(key: bytes, nbytes: int) -> bytes:
    """`nbytes` of the ChaCha20 keystream under a 32-byte key (zero nonce: every key is used for one
    stream only). A cryptographic generator: a mask reveals nothing about the others, nor about the
    key, which a statistical generator such as PCG64 (the earlier expansion) does not promise."""
    encryptor = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()
    return encryptor.update(bytes(nbytes))


def _mask(private: bytes, peer_public: bytes, size: int) -> list[int]:
    """`size` uniform integers modulo 2^256 that only this pair of clients can compute."""
    shared = X25519PrivateKey.from_private_bytes(private).exchange(X25519PublicKey.from_public_bytes(peer_public))
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"fedcond secure sum").derive(shared)
    stream = mask_stream(key, size * _WORD)
    return [int.from_bytes(stream[i * _WORD:(i + 1) * _WORD], "little") for i in range(size)]


def quantise(values: np.ndarray) -> list[int]:
    values = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(values)) or np.abs(values).max(initial=0.0) >= 2.0**40:
        raise FedcondError("secure sum: statistics must be finite and below 2^40 in magnitude")
    return [round(float(v) * 2.0**FRACTION_BITS) for v in values]  # exact: scaling by a power of two


def masked_upload(values: np.ndarray, me: int, private: bytes, publics: dict[int, bytes]) -> bytes:
    """This client's upload, [q, q^2] + sum_{j > me} m_ij - sum_{j < me} m_ij (mod 2^256), as bytes."""
    q = quantise(values)
    out = q + [x * x for x in q]
    for j, pk in sorted(publics.items()):
        if j == me:
            continue
        sign = 1 if j > me else -1
        out = [a + sign * m for a, m in zip(out, _mask(private, pk, len(out)))]
    return b"".join((a % MODULUS).to_bytes(_WORD, "little") for a in out)


def unmask_sums(uploads: list[bytes]) -> tuple[list[int], list[int]]:
    """The server's only view: the exact integer sums S1 = sum q and S2 = sum q^2 (masks cancel pairwise)."""
    width = len(uploads[0]) // _WORD // 2
    total = [0] * (2 * width)
    for u in uploads:
        total = [(t + int.from_bytes(u[k * _WORD:(k + 1) * _WORD], "little")) % MODULUS for k, t in enumerate(total)]
    signed = [t - MODULUS if t >= MODULUS // 2 else t for t in total]
    return signed[:width], signed[width:]


def zscore_from_sums(s1: list[int], s2: list[int], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Population mean and std per component (as stats.normalise's zscore), in exact arithmetic."""
    scale = 1 << FRACTION_BITS
    mean = np.array([float(Fraction(a, n * scale)) for a in s1])
    var = [Fraction(n * b - a * a, n * n * scale * scale) for a, b in zip(s1, s2)]
    std = np.array([math.sqrt(float(v)) if v > 0 else 0.0 for v in var])
    return mean, std
