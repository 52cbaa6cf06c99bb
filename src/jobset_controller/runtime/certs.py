"""Self-signed serving certificates: what to generate, and when the ones we have must be replaced.

Pure apart from key generation: every decision takes `now` (a wall-clock UTC datetime) as an
argument, so rotation timing is tested by passing instants, not by waiting.

The material lives in four PEM blobs, the keys of a Kubernetes TLS-style Secret:

- ``ca.crt``: the CA bundle clients must trust. The signing CA comes first; after a CA rotation the
  previous CA follows it while it is still valid, so a server still presenting a certificate from
  the old CA is trusted while every replica and API server catches up.
- ``ca.key``: the signing CA's key (never written to disk, never logged).
- ``tls.crt``, ``tls.key``: the serving certificate (signed by a CA of the bundle) and its key.

Why `settle`: after a new CA is created, API servers learn the new bundle from the webhook
configurations a moment later (an informer in each API server). Switching the serving certificate
in the same instant would leave a window where an API server still trusting only the old CA meets
the new certificate and refuses the call. So a certificate signed by the previous CA is kept for
`settle` after the new CA appears (when it is itself still valid), and only then re-signed.
The CA's creation time is read from the CA itself: its notBefore is backdated by exactly
`BACKDATE` (clock skew between nodes, like upstream's one hour).
"""

from __future__ import annotations

import base64
import datetime
import enum
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

BACKDATE = datetime.timedelta(hours=1)
_KEY_SIZE = 2048  # RSA 2048, what every API server version accepts
# The names of the four blobs: keys of the Secret and, but for the CA key, files of a certificate
# directory. One spelling for everything that writes, reads or points at them (the rotator, the
# servers, the manager), because it is also controller-runtime's layout and what a mounted
# cert-manager Secret holds: a name typed differently in one place would find no file.
CA_FILE: Final = "ca.crt"
CA_KEY_FILE: Final = "ca.key"
CERT_FILE: Final = "tls.crt"
KEY_FILE: Final = "tls.key"
SECRET_KEYS: Final = (CA_FILE, CA_KEY_FILE, CERT_FILE, KEY_FILE)


@dataclass(frozen=True)
class CertPolicy:
    """How long certificates live and how early they are replaced. The lifetimes are the
    caller's (the controller's defaults are owned by config.py); how often the rotator looks
    again (at least every 12 hours) and how long it lets a new CA settle are this module's."""

    ca_validity: datetime.timedelta
    cert_validity: datetime.timedelta
    lookahead: datetime.timedelta
    recheck: datetime.timedelta = datetime.timedelta(hours=12)
    settle: datetime.timedelta = datetime.timedelta(seconds=30)

    def __post_init__(self) -> None:
        if self.cert_validity <= self.lookahead or self.ca_validity <= self.lookahead:
            raise ValueError(
                "certificate validity must be longer than the rotation lookahead "
                f"(CA {self.ca_validity}, serving {self.cert_validity}, "
                f"lookahead {self.lookahead})"
            )
        if self.recheck <= datetime.timedelta(0):
            raise ValueError("recheck must be positive")

    @property
    def switch_delay(self) -> datetime.timedelta:
        """`settle`, but never more than a quarter of the lookahead (short test validities)."""
        return min(self.settle, self.lookahead / 4)


@dataclass(frozen=True)
class Identity:
    """What the certificates name: the CA's subject and the serving certificate's SANs."""

    ca_common_name: str
    ca_organization: str
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.dns_names:
            raise ValueError("a serving certificate needs at least one DNS name")


def split_sans(values: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Extra subject alternative names as given on the command line -> (DNS names, IPs)."""
    dns: list[str] = []
    ips: list[str] = []
    for value in filter(None, (v.strip() for v in values)):
        try:
            ips.append(str(ipaddress.ip_address(value)))
        except ValueError:
            dns.append(value)
    return tuple(dns), tuple(ips)


@dataclass(frozen=True)
class Material:
    """The four PEM blobs (see the module docstring)."""

    ca_bundle: bytes
    ca_key: bytes
    cert: bytes
    key: bytes

    def secret_data(self) -> dict[str, str]:
        """The Secret's ``data`` (base64 values, as the API stores them)."""
        blobs = (self.ca_bundle, self.ca_key, self.cert, self.key)
        return {
            name: base64.b64encode(blob).decode()
            for name, blob in zip(SECRET_KEYS, blobs, strict=True)
        }

    @classmethod
    def from_secret_data(cls, data: Mapping[str, str] | None) -> Material | None:
        """None when any key is missing or not base64 (an empty Secret shipped by the install)."""
        blobs: list[bytes] = []
        for name in SECRET_KEYS:
            value = (data or {}).get(name)
            if not value:
                return None
            try:
                blobs.append(base64.b64decode(value, validate=True))
            except ValueError:
                return None
        return cls(*blobs)


class Action(enum.Enum):
    KEEP = "keep"
    NEW_CA = "new-ca"  # a new CA (kept next to the old one) and a serving certificate
    RESIGN = "resign"  # a new serving certificate from the current CA


@dataclass(frozen=True)
class Verdict:
    action: Action
    reason: str
    # When the verdict may change with nothing else changing (the next time to look again).
    next_check: datetime.datetime


# ------------------------------------------------------------------------------ reading
def _certificates(pem: bytes) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        return []


def _private_key(pem: bytes) -> rsa.RSAPrivateKey | None:
    """The RSA key, without OpenSSL's consistency check of its private numbers: that check
    costs ~30 ms per key, paid twice at every start. The keys come from our own Secret, and
    each is compared with its certificate's public key (`_same_public_key`) before use; whoever
    can write a bad key into that Secret can write any certificate there anyway."""
    try:
        key = serialization.load_pem_private_key(
            pem, password=None, unsafe_skip_rsa_key_validation=True
        )
    except (ValueError, TypeError):
        return None
    return key if isinstance(key, rsa.RSAPrivateKey) else None


def _same_public_key(cert: x509.Certificate, key: rsa.RSAPrivateKey) -> bool:
    public = cert.public_key()
    return isinstance(public, rsa.RSAPublicKey) and public.public_numbers() == (
        key.public_key().public_numbers()
    )


def _valid_between(
    cert: x509.Certificate, start: datetime.datetime, end: datetime.datetime
) -> bool:
    return cert.not_valid_before_utc <= start and end <= cert.not_valid_after_utc


def _issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _names(cert: x509.Certificate) -> tuple[set[str], set[str]]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set(), set()
    return (
        set(san.get_values_for_type(x509.DNSName)),
        {str(ip) for ip in san.get_values_for_type(x509.IPAddress)},
    )


def not_after(cert_pem: bytes) -> datetime.datetime | None:
    """The first certificate's expiry (for logs and metrics), None when it does not parse."""
    certs = _certificates(cert_pem)
    return certs[0].not_valid_after_utc if certs else None


# ------------------------------------------------------------------------------ deciding
def assess(
    material: Material | None, identity: Identity, policy: CertPolicy, now: datetime.datetime
) -> Verdict:
    """Keep the material, re-sign the serving certificate, or start over with a new CA.

    A certificate is replaced when it would not verify at `now + lookahead` (expired or not yet
    valid, a different CA, names missing, a key that does not match), like upstream's rotator.
    """
    horizon = now + policy.lookahead
    recheck = now + policy.recheck
    if material is None:
        return Verdict(Action.NEW_CA, "no certificates yet", now)
    bundle = _certificates(material.ca_bundle)
    ca_key = _private_key(material.ca_key)
    if not bundle or ca_key is None or not _same_public_key(bundle[0], ca_key):
        return Verdict(Action.NEW_CA, "the CA or its key is missing or unreadable", now)
    ca = bundle[0]
    if not _valid_between(ca, now, horizon):
        return Verdict(Action.NEW_CA, "the CA expires within the lookahead", now)
    ca_due = ca.not_valid_after_utc - policy.lookahead
    certs = _certificates(material.cert)
    key = _private_key(material.key)
    if not certs or key is None or not _same_public_key(certs[0], key):
        return Verdict(Action.RESIGN, "the serving certificate or key is unreadable", now)
    cert = certs[0]
    dns, ips = _names(cert)
    if not set(identity.dns_names) <= dns or not set(identity.ip_addresses) <= ips:
        return Verdict(Action.RESIGN, "the serving certificate lacks a required name", now)
    if not _issued_by(cert, ca):
        previous = [old for old in bundle[1:] if _issued_by(cert, old)]
        switch_at = ca.not_valid_before_utc + BACKDATE + policy.switch_delay
        still_good = _valid_between(cert, now, now + policy.switch_delay)
        if previous and still_good and now < switch_at:
            # Signed by the previous CA, which API servers still trust: switch after `settle`.
            return Verdict(Action.KEEP, "waiting for the new CA to reach API servers", switch_at)
        return Verdict(Action.RESIGN, "the serving certificate is not from the current CA", now)
    if not _valid_between(cert, now, horizon):
        return Verdict(Action.RESIGN, "the serving certificate expires within the lookahead", now)
    cert_due = cert.not_valid_after_utc - policy.lookahead
    return Verdict(Action.KEEP, "valid", min(recheck, ca_due, cert_due))


# ------------------------------------------------------------------------------ making
def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=_KEY_SIZE)


def _new_ca(
    identity: Identity, policy: CertPolicy, now: datetime.datetime
) -> tuple[x509.Certificate, rsa.RSAPrivateKey]:
    key = _new_key()
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, identity.ca_common_name),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, identity.ca_organization),
        ]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + policy.ca_validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _new_serving(
    identity: Identity,
    ca: x509.Certificate,
    ca_key: rsa.RSAPrivateKey,
    policy: CertPolicy,
    now: datetime.datetime,
) -> tuple[x509.Certificate, rsa.RSAPrivateKey]:
    key = _new_key()
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in identity.dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in identity.ip_addresses]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, identity.dns_names[0])]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        # Never beyond the CA: a certificate cannot verify past its issuer.
        .not_valid_after(min(now + policy.cert_validity, ca.not_valid_after_utc))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def renew(
    material: Material | None,
    action: Action,
    identity: Identity,
    policy: CertPolicy,
    now: datetime.datetime,
) -> Material:
    """New material for `action` (NEW_CA or RESIGN); the current CA is reused for RESIGN."""
    if action is Action.RESIGN and material is not None:
        bundle = _certificates(material.ca_bundle)
        ca_key = _private_key(material.ca_key)
        if bundle and ca_key is not None:
            cert, key = _new_serving(identity, bundle[0], ca_key, policy, now)
            return Material(material.ca_bundle, material.ca_key, _pem_cert(cert), _pem_key(key))
    ca, ca_key = _new_ca(identity, policy, now)
    cert, key = _new_serving(identity, ca, ca_key, policy, now)
    # The previous signing CA stays trusted while it is valid (see `settle`); older ones go.
    previous = _certificates(material.ca_bundle)[:1] if material is not None else []
    kept = [old for old in previous if old.not_valid_after_utc > now]
    bundle_pem = b"".join(_pem_cert(c) for c in [ca, *kept])
    return Material(bundle_pem, _pem_key(ca_key), _pem_cert(cert), _pem_key(key))
