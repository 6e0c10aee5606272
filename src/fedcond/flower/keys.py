"""Certificates and keys for a test federation (`fedcond flower keys`): TLS for the SuperLink,
Flower's SuperNode authentication keys, and the secure sum's identities and roster.

What goes where (docs/flower.md, "Deployment"):

    ca.crt                      every SuperNode and `flwr` (--root-certificates / root-certificates)
    superlink.crt, .key         the SuperLink (--ssl-certfile, --ssl-keyfile; --ssl-ca-certfile ca.crt)
    roster.json                 every SuperNode (node config secagg-roster): client -> Ed25519 public key
    node-I/auth.key             SuperNode I (--auth-supernode-private-key): ECDSA P-384, OpenSSH format
    node-I/auth.pub             the SuperLink's operator (`flwr supernode register node-I/auth.pub`)
    node-I/secagg-identity.hex  SuperNode I (node config secagg-identity): its Ed25519 private key

The CA's private key is not kept: nothing can be signed with it later, so a lost copy of this
folder cannot mint a SuperLink certificate that the nodes would trust. Make a new folder to
change the federation. Private keys are written readable by their owner only.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ..errors import FedcondError
from . import secure_sum

DEFAULT_HOSTS = ("localhost", "127.0.0.1")
MAX_NODES = 10_000
VALID_DAYS = 365
# Flower 1.42's `flwr supernode register` takes any NIST curve; its docs generate P-384 keys.
AUTH_CURVE = ec.SECP384R1


@dataclass(frozen=True)
class FederationKeys:
    """The files `make_federation_keys` wrote, by purpose."""

    folder: Path

    @property
    def ca(self) -> Path:
        return self.folder / "ca.crt"

    @property
    def superlink_cert(self) -> Path:
        return self.folder / "superlink.crt"

    @property
    def superlink_key(self) -> Path:
        return self.folder / "superlink.key"

    @property
    def roster(self) -> Path:
        return self.folder / "roster.json"

    def node(self, i: int) -> Path:
        return self.folder / f"node-{i}"

    def auth_key(self, i: int) -> Path:
        return self.node(i) / "auth.key"

    def auth_pub(self, i: int) -> Path:
        return self.node(i) / "auth.pub"

    def identity(self, i: int) -> Path:
        return self.node(i) / "secagg-identity.hex"

    @property
    def nodes(self) -> int:
        return len(json.loads(self.roster.read_text()))


def _write(path: Path, data: bytes, private: bool = False) -> None:
    """A new file (never over an existing one); 0600 for a private key."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _private_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _is_host_name(host: str) -> bool:
    labels = host.split(".")
    return 0 < len(host) <= 253 and all(
        0 < len(x) <= 63 and x.isascii() and x.replace("-", "").isalnum() for x in labels
    )


def _names(hosts: tuple[str, ...]) -> list[x509.GeneralName]:
    """The SuperLink certificate's subject alternative names: what SuperNodes may dial it by."""
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(DEFAULT_HOSTS + tuple(hosts)):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            if not _is_host_name(host):
                raise FedcondError(f"--host takes a host name or an IP address, got {host!r}") from None
            names.append(x509.DNSName(host))
    return names


def _certificate(
    subject: str,
    public_key,
    issuer: x509.Name,
    signer,
    now: datetime.datetime,
    ca: bool,
    names: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # clocks of nodes differ a little
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        builder = (
            builder.add_extension(x509.SubjectAlternativeName(names or []), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False)
        )
    return builder.sign(signer, hashes.SHA256())


def make_federation_keys(out: Path, nodes: int, hosts: tuple[str, ...] = ()) -> FederationKeys:
    """Write a test federation's CA, the SuperLink's certificate (for localhost, 127.0.0.1 and
    `hosts`), and per node: Flower's authentication key pair and the secure sum's identity; plus
    the roster of identities. `out` must not exist or be empty: keys are never overwritten."""
    out = Path(out)
    if not 1 <= nodes <= MAX_NODES:
        raise FedcondError(f"--nodes must be between 1 and {MAX_NODES}, got {nodes}")
    names = _names(hosts)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FedcondError(f"{out} already exists and is not an empty folder; keys are never overwritten")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FedcondError(f"cannot make {out}: {e.strerror}") from None
    keys = FederationKeys(out)
    now = datetime.datetime.now(datetime.timezone.utc)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedcond test federation CA")])
    ca_cert = _certificate("fedcond test federation CA", ca_key.public_key(), ca_name, ca_key, now, ca=True)
    _write(keys.ca, ca_cert.public_bytes(serialization.Encoding.PEM))

    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = _certificate(
        "fedcond SuperLink", server_key.public_key(), ca_name, ca_key, now, ca=False, names=names
    )
    _write(keys.superlink_cert, server_cert.public_bytes(serialization.Encoding.PEM))
    _write(keys.superlink_key, _private_pem(server_key), private=True)

    roster = {}
    for i in range(nodes):
        keys.node(i).mkdir()
        auth = ec.generate_private_key(AUTH_CURVE())
        _write(
            keys.auth_key(i),
            auth.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
            ),
            private=True,
        )
        _write(
            keys.auth_pub(i),
            auth.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH) + b"\n",
        )
        private, public = secure_sum.new_identity()
        _write(keys.identity(i), private.hex().encode() + b"\n", private=True)
        roster[str(i)] = public.hex()
    _write(keys.roster, json.dumps(roster, indent=1).encode() + b"\n")
    return keys
