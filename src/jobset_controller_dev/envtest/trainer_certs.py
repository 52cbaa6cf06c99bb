"""The webhook certificates Kubeflow Trainer's manager accepts as its own, for a run outside a pod.

Why not let Trainer make them: its manager rotates its certificates with open-policy-agent's
cert-controller, which issues the serving certificate for `<service>.<namespace>.svc` only. The
API server here calls Trainer's webhooks by URL on 127.0.0.1, so that certificate would fail the
API server's hostname check. The rotator keeps a Secret it finds valid, though, so the harness
writes one first: a CA and a serving certificate for both the Service name and 127.0.0.1.

What the rotator checks, and so what these are (cert-controller v0.12, Trainer v2.0.0):
- the Secret `kubeflow-trainer-webhook-cert` in `kubeflow-system` (the namespace it falls back
  to outside a pod) holds `ca.crt`, `ca.key`, `tls.crt` and `tls.key`;
- the CA certificate verifies as a serverAuth certificate for the DNS name
  `kubeflow-trainer-ca`, and its key is an RSA key in PKCS#1 form (the rotator parses it as
  such before it injects the CA into the webhook configuration: any other key type fails);
- the serving certificate verifies against that CA for
  `kubeflow-trainer-controller-manager.kubeflow-system.svc`;
- both stay valid past the rotator's 90-day lookahead, or it issues new ones (without
  127.0.0.1) at once: they are made valid for a year.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NAMESPACE: Final = "kubeflow-system"
SECRET_NAME: Final = "kubeflow-trainer-webhook-cert"
SERVICE_NAME: Final = "kubeflow-trainer-controller-manager"
CA_NAME: Final = "kubeflow-trainer-ca"
# Longer than the rotator's lookahead (90 days), so it keeps these.
_VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class TrainerCertificates:
    """PEM bytes: the CA (certificate and PKCS#1 key) and the serving pair it signed."""

    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes

    def secret(self) -> dict[str, object]:
        """The Secret the rotator reads (`stringData`: PEM is text)."""
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET_NAME, "namespace": NAMESPACE},
            "type": "Opaque",
            "stringData": {
                "ca.crt": self.ca_cert.decode(),
                "ca.key": self.ca_key.decode(),
                "tls.crt": self.cert.decode(),
                "tls.key": self.key.decode(),
            },
        }


def issue() -> TrainerCertificates:
    """A fresh CA and serving pair as the rotator wants them (see the module docstring)."""
    now = datetime.datetime.now(datetime.UTC)
    begin, end = now - datetime.timedelta(minutes=5), now + _VALIDITY
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(begin)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=True,
                key_cert_sign=True,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(CA_NAME)]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    service = f"{SERVICE_NAME}.{NAMESPACE}.svc"
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, service)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(begin)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(service), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return TrainerCertificates(
        ca_cert=ca.public_bytes(pem),
        ca_key=ca_key.private_bytes(
            pem, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
        ),
        cert=cert.public_bytes(pem),
        key=key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )
