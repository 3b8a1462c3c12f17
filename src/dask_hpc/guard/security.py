"""Per-cluster TLS: a fresh CA and one certificate, valid for this cluster only.

The CA's private key is never written: once the cluster certificate is signed nobody, the
owner included, can mint another one, so a certificate of another cluster is refused.
"""

from __future__ import annotations

import datetime
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import config
from . import private, private_files

TLS_ROLES = ("scheduler", "worker", "client")
KEY_FIX = "pass --scheduler-file in a directory only you can write"


@dataclass(frozen=True)
class TlsFiles:
    """Where a cluster's CA certificate, certificate and key live."""

    ca: Path
    cert: Path
    key: Path

    @classmethod
    def in_directory(cls, directory: Path) -> TlsFiles:
        return cls(directory / "ca.pem", directory / "cluster.pem", directory / "cluster.key")

    def files(self) -> tuple[Path, Path, Path]:
        return (self.ca, self.cert, self.key)

    def exist(self) -> bool:
        return all(p.is_file() for p in self.files())


def _name(common_name: str) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])])


def create(directory: Path, cluster_id: str, days: int = 30) -> TlsFiles:
    """Make a CA and a cluster certificate in ``directory`` (key file mode 0600)."""
    # Imported here: only rank 0 makes certificates; the other ranks skip ~0.1 s of imports.
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    private.own_directory(directory, "key directory", KEY_FIX)
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"dask-hpc CA {cluster_id}")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
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
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(f"dask-hpc {cluster_id}"))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(socket.gethostname()), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    files = TlsFiles.in_directory(directory)
    pem = serialization.Encoding.PEM
    private_files.write_file(
        files.key,
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
        0o600,
    )
    private_files.write_file(files.cert, cert.public_bytes(pem), 0o644)
    private_files.write_file(files.ca, ca_cert.public_bytes(pem), 0o644)
    return files


# Every process of a cluster runs our own Python and OpenSSL, so nothing needs TLS 1.2: TLS 1.3
# only (AEAD ciphers, a 1-RTT handshake). Dask's setting (distributed.comm.tls.min-version).
# Its throughput is the same as TLS 1.2's with any AEAD cipher (benchmarks/transfer.py,
# docs/performance.md).
TLS_MIN_VERSION = "1.3"


def tls_env(files: TlsFiles) -> dict[str, str]:
    """DASK_* variables that make every Dask role use ``files``, TLS 1.3, and require encryption."""
    ca, cert, key = (config.env_value(str(path)) for path in (files.ca, files.cert, files.key))
    env = {
        "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True",
        "DASK_DISTRIBUTED__COMM__TLS__MIN_VERSION": TLS_MIN_VERSION,
        "DASK_DISTRIBUTED__COMM__TLS__CA_FILE": ca,
    }
    for role in TLS_ROLES:
        env[f"DASK_DISTRIBUTED__COMM__TLS__{role.upper()}__CERT"] = cert
        env[f"DASK_DISTRIBUTED__COMM__TLS__{role.upper()}__KEY"] = key
    return env
