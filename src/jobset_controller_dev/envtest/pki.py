"""Key material for a throwaway local control plane.

A real kube-apiserver refuses to run without TLS, and RBAC is only real when clients authenticate
with an identity the server trusts. So every control plane gets its own CA, a serving certificate
for 127.0.0.1/localhost and the in-cluster service names, client certificates for the admin and
for the other components, and a service-account signing key. Nothing here is meant to outlive the
control plane's temporary directory; keys are small (EC P-256) so generation takes milliseconds.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from jobset_controller.runtime.certs import CERT_FILE, KEY_FILE

_VALIDITY = datetime.timedelta(days=30)


@dataclass(frozen=True)
class CertPair:
    """PEM paths of one certificate and its private key."""

    cert: Path
    key: Path


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


class CertificateAuthority:
    """A self-signed CA that issues server and client certificates into one directory."""

    def __init__(self, directory: Path, common_name: str = "jobset-envtest-ca") -> None:
        self.directory = directory
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        self.pair = CertPair(
            cert=_write(directory / "ca.crt", self._cert.public_bytes(serialization.Encoding.PEM)),
            key=_write(directory / "ca.key", _key_pem(self._key)),
        )

    @property
    def cert_pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        stem: str,
        *,
        common_name: str,
        organizations: tuple[str, ...] = (),
        dns_names: tuple[str, ...] = (),
        ip_addresses: tuple[str, ...] = (),
        server: bool = False,
    ) -> CertPair:
        """Issue a leaf certificate; `server` selects serverAuth usage instead of clientAuth."""
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        attributes += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        now = datetime.datetime.now(datetime.UTC)
        usage = (
            x509.oid.ExtendedKeyUsageOID.SERVER_AUTH
            if server
            else (x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH)
        )
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            # The identifiers Python 3.13's default verification (VERIFY_X509_STRICT) requires
            # of a chain, as every real cluster's certificates carry them.
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        )
        alt_names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        if alt_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return CertPair(
            cert=_write(
                self.directory / f"{stem}.crt", cert.public_bytes(serialization.Encoding.PEM)
            ),
            key=_write(self.directory / f"{stem}.key", _key_pem(key)),
        )

    def write_pair(
        self,
        directory: Path,
        stem: str,
        *,
        common_name: str,
        organizations: tuple[str, ...] = (),
        dns_names: tuple[str, ...] = (),
        ip_addresses: tuple[str, ...] = (),
        server: bool = False,
    ) -> CertPair:
        """Issue a leaf certificate as `issue` does and write it into `directory` (made if
        missing) as tls.crt and tls.key: the files a controller's `certDir` holds, as a
        kubernetes.io/tls Secret would mount them. Returns those two paths."""
        pair = self.issue(
            stem,
            common_name=common_name,
            organizations=organizations,
            dns_names=dns_names,
            ip_addresses=ip_addresses,
            server=server,
        )
        directory.mkdir(parents=True, exist_ok=True)
        written = CertPair(cert=directory / CERT_FILE, key=directory / KEY_FILE)
        written.cert.write_bytes(pair.cert.read_bytes())
        written.key.write_bytes(pair.key.read_bytes())
        return written


def write_service_account_keys(directory: Path) -> CertPair:
    """Write the key pair the apiserver signs and verifies service-account tokens with.

    `cert` holds the public key (not a certificate), which is what --service-account-key-file takes.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return CertPair(
        cert=_write(directory / "sa.pub", public),
        key=_write(directory / "sa.key", _key_pem(key)),
    )
