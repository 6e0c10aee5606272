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

Against a server that deviates (docs/flower.md, threat model): a client masks only after
`check_peers` accepts the key list the server relayed: its own key as it sent it, at least
`min_peers` other distinct keys, and, where the node has a roster (each client's Ed25519
identity key, handed to every node out of band), every key signed by its owner's identity. A
server that sends a client only its own key, or its own keys in place of the peers', gets a
refusal instead of an upload it could unmask. The server checks every upload's width, and the
decoded mean and standard deviation, so one client's garbage stops the run instead of
normalising everyone's statistics with it.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
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


def new_identity() -> tuple[bytes, bytes]:
    """(private, public) raw Ed25519 keys: a node's long-term identity, whose public half goes in the roster."""
    key = Ed25519PrivateKey.generate()
    return key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()), key.public_key().public_bytes(
        Encoding.Raw, PublicFormat.Raw
    )


def _signed_text(index: int, public: bytes) -> bytes:
    return b"fedcond secure sum key\x00" + index.to_bytes(4, "little") + public


def sign_key(identity: bytes, index: int, public: bytes) -> bytes:
    """Client `index`'s signature of its key-exchange public key for this run."""
    return Ed25519PrivateKey.from_private_bytes(identity).sign(_signed_text(index, public))


def default_min_peers(clients: int) -> int:
    """Other clients every key list must hold: 3, or all the others in a federation of at most 4.
    The server then learns at best a sum over 4 clients' statistics, never one client's."""
    return max(1, min(3, clients - 1))


def check_peers(
    me: int,
    my_public: bytes,
    publics: dict[int, bytes],
    min_peers: int,
    signatures: dict[int, bytes] | None = None,
    roster: dict[int, bytes] | None = None,
) -> None:
    """Refuse (FedcondError) a key list this client must not mask with; see the module docstring."""
    if publics.get(me) != my_public:
        raise FedcondError(f"secure sum: the server's key list does not hold client {me}'s own key; not uploading")
    if len(set(publics.values())) != len(publics):
        raise FedcondError("secure sum: the server's key list repeats a key; not uploading")
    peers = len(publics) - 1
    if peers < min_peers:
        raise FedcondError(
            f"secure sum: the server's key list holds {peers} other clients, fewer than the {min_peers} "
            f"this client requires (secagg-min-peers); not uploading"
        )
    if roster is None:
        return
    for j, pk in publics.items():
        if j not in roster:
            raise FedcondError(
                f"secure sum: the key list names client {j}, who is not in this node's roster; not uploading"
            )
        try:
            Ed25519PublicKey.from_public_bytes(roster[j]).verify((signatures or {}).get(j, b""), _signed_text(j, pk))
        except (InvalidSignature, ValueError):
            raise FedcondError(
                f"secure sum: client {j}'s key is not signed by its identity in the roster; not uploading"
            ) from None


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
    return [int.from_bytes(stream[i * _WORD : (i + 1) * _WORD], "little") for i in range(size)]


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


def client_upload(
    values: np.ndarray,
    me: int,
    private: bytes,
    public: bytes,
    publics: dict[int, bytes],
    min_peers: int,
    signatures: dict[int, bytes] | None = None,
    roster: dict[int, bytes] | None = None,
) -> bytes:
    """What a client sends in the masked phase: nothing (FedcondError) unless `check_peers` accepts the key list."""
    check_peers(me, public, publics, min_peers, signatures, roster)
    return masked_upload(values, me, private, publics)


def unmask_sums(uploads: dict[int, bytes], width: int) -> tuple[list[int], list[int]]:
    """The server's only view: the exact integer sums S1 = sum q and S2 = sum q^2 (masks cancel
    pairwise). Every upload must be 2 * width elements: the width the run expects, not the first's."""
    total = [0] * (2 * width)
    for i, u in uploads.items():
        if not isinstance(u, bytes) or len(u) != 2 * width * _WORD:
            size = len(u) if isinstance(u, bytes) else type(u).__name__
            raise FedcondError(
                f"secure sum: client {i}'s upload is {size} bytes, not the {2 * width * _WORD} of "
                f"{width} statistics; the run stops"
            )
        total = [(t + int.from_bytes(u[k * _WORD : (k + 1) * _WORD], "little")) % MODULUS for k, t in enumerate(total)]
    signed = [t - MODULUS if t >= MODULUS // 2 else t for t in total]
    return signed[:width], signed[width:]


def zscore_from_sums(s1: list[int], s2: list[int], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Population mean and std per component (as stats.normalise's zscore), in exact arithmetic.
    Sums no n honest clients can produce (a mean beyond quantise's 2^40, a negative variance:
    n S2 >= S1^2 always holds for real values) stop the run: a client uploaded garbage."""
    scale = 1 << FRACTION_BITS
    bound = n * (2**40) * scale
    bad = [
        k
        for k, (a, b) in enumerate(zip(s1, s2))
        if abs(a) >= bound or not 0 <= b < n * bound * bound or n * b - a * a < 0
    ]
    if bad:
        raise FedcondError(
            f"secure sum: the summed uploads are not statistics of {n} clients (components {bad[:5]}: "
            f"mean beyond 2^40 or negative variance); a client uploaded garbage; the run stops"
        )
    mean = np.array([float(Fraction(a, n * scale)) for a in s1])
    var = [Fraction(n * b - a * a, n * n * scale * scale) for a, b in zip(s1, s2)]
    std = np.array([math.sqrt(float(v)) if v > 0 else 0.0 for v in var])
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(std))):
        raise FedcondError("secure sum: the decoded mean or standard deviation is not finite; the run stops")
    return mean, std
