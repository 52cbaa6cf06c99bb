"""TLS for our HTTPS servers (webhooks, metrics): the one place their protocol settings are made.

Every server context of the process comes from `server_context`, so the Configuration's
`tls.minVersion` and `tls.cipherSuites` reach every listener alike; a second builder is how a
listener ends up ignoring them.

- `server_context(min_version, cipher_suites)`: the empty context every handshake uses. It
  accepts TLS 1.2 or later (1.3 only with `min_version="VersionTLS13"`), offers the configured
  TLS 1.2 cipher suites when given, and offers only `http/1.1` by ALPN. Why HTTP/1.1 only:
  controller-runtime turns HTTP/2 off on its servers (the 2023 rapid-reset attacks), and our
  servers (`runtime.http1server`) speak HTTP/1.1 alone, so announcing h2 would promise a
  protocol nobody here answers. A `tlsreload.ReloadingTLS` fills contexts made by it from the
  certificate directory's `tls.crt`/`tls.key` (`certs.CERT_FILE`/`certs.KEY_FILE`).
- `pair_context(cert_dir, ...)`: the same context serving the pair in `cert_dir` as it is now,
  never reloaded (tests and local servers with a fixed certificate).
- `self_signed_context(...)`: the metrics endpoint's fallback. Without cert-manager nothing issues
  a certificate for the metrics Service, yet the endpoint must still be HTTPS so the bearer tokens
  scrapers send are not readable on the wire. Like controller-runtime, the process then makes its
  own key and certificate at start, in memory, and scrapers skip verification (the shipped
  ServiceMonitor says `insecureSkipVerify: true`); with cert-manager the Secret's files are used
  and can be verified. The certificate is a fresh ECDSA P-256 key for `localhost`, 127.0.0.1, ::1
  and the host name, valid from an hour ago (clock skew) for a year. The key never touches a
  disk: it is handed to OpenSSL through an anonymous in-memory file (`memfd_create`), or a
  private temporary file removed at once where that call does not exist.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import socket
import ssl
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from jobset_controller.runtime.certs import CERT_FILE, KEY_FILE
from jobset_controller.runtime.ciphers import openssl_cipher_list

_VALIDITY = datetime.timedelta(days=365)
_SKEW = datetime.timedelta(hours=1)


def server_context(min_version: str = "", cipher_suites: Sequence[str] = ()) -> ssl.SSLContext:
    """An empty server context with our protocol choices (TLS >= 1.2, HTTP/1.1 only) and the
    configured TLS 1.2 cipher suites (Go names, `runtime.ciphers`; validated with the
    Configuration, so a bad name never gets here: ValueError if one does)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = (
        ssl.TLSVersion.TLSv1_3 if min_version == "VersionTLS13" else ssl.TLSVersion.TLSv1_2
    )
    context.set_alpn_protocols(["http/1.1"])
    ciphers = openssl_cipher_list(cipher_suites)
    if ciphers:
        context.set_ciphers(ciphers)
    return context


def has_chain(cert_dir: Path) -> bool:
    """Both `tls.crt` and `tls.key` are present in `cert_dir`."""
    return (cert_dir / CERT_FILE).is_file() and (cert_dir / KEY_FILE).is_file()


def pair_context(
    cert_dir: Path, min_version: str = "", cipher_suites: Sequence[str] = ()
) -> ssl.SSLContext:
    """`server_context` serving `cert_dir`'s `tls.crt`/`tls.key` as they are now (never
    reloaded: a rotated pair needs `tlsreload.ReloadingTLS`)."""
    context = server_context(min_version, cipher_suites)
    context.load_cert_chain(str(cert_dir / CERT_FILE), str(cert_dir / KEY_FILE))
    return context


def self_signed_pem(hostname: str | None = None) -> tuple[bytes, bytes]:
    """A new self-signed serving certificate and its unencrypted key, both PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    names = ["localhost", *([hostname] if hostname and hostname != "localhost" else [])]
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[-1])])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _SKEW)
        .not_valid_after(now + _VALIDITY)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(name) for name in names]
                + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", "::1")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return certificate.public_bytes(serialization.Encoding.PEM), key_pem


def self_signed_context(min_version: str = "", cipher_suites: Sequence[str] = ()) -> ssl.SSLContext:
    """A context serving a certificate made now, for this process only."""
    cert_pem, key_pem = self_signed_pem(socket.gethostname())
    context = server_context(min_version, cipher_suites)
    with _in_memory_file(cert_pem + key_pem) as path:
        context.load_cert_chain(path)
    return context


@contextlib.contextmanager
def _in_memory_file(data: bytes) -> Iterator[str]:
    """A path OpenSSL can open that holds `data`, gone when the block ends."""
    if hasattr(os, "memfd_create"):
        descriptor = os.memfd_create("self-signed-tls", os.MFD_CLOEXEC)
        try:
            os.write(descriptor, data)
            yield f"/proc/self/fd/{descriptor}"
        finally:
            os.close(descriptor)
        return
    with tempfile.NamedTemporaryFile(prefix="self-signed-tls-") as handle:  # mode 0600
        handle.write(data)
        handle.flush()
        yield handle.name
