"""envtest's CertificateAuthority.write_pair: a leaf pair in a certDir as tls.crt and tls.key."""

from __future__ import annotations

import ssl
from pathlib import Path

from cryptography import x509

from jobset_controller_dev.envtest.pki import CertificateAuthority


def test_the_pair_lands_as_tls_crt_and_tls_key_and_serves_for_the_cas_clients(
    tmp_path: Path,
) -> None:
    ca = CertificateAuthority(tmp_path)
    cert_dir = tmp_path / "deep" / "certs"  # made when missing
    written = ca.write_pair(
        cert_dir, "webhook", common_name="webhook", ip_addresses=("127.0.0.1",), server=True
    )
    assert (written.cert, written.key) == (cert_dir / "tls.crt", cert_dir / "tls.key")
    assert sorted(p.name for p in cert_dir.iterdir()) == ["tls.crt", "tls.key"]
    assert written.cert.read_bytes() == (tmp_path / "webhook.crt").read_bytes()
    assert written.key.read_bytes() == (tmp_path / "webhook.key").read_bytes()
    cert = x509.load_pem_x509_certificate(written.cert.read_bytes())
    assert cert.issuer == x509.load_pem_x509_certificate(ca.cert_pem).subject
    ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(written.cert, written.key)
    ca.write_pair(cert_dir, "again", common_name="webhook", server=True)  # an existing dir is fine
    assert written.cert.read_bytes() == (tmp_path / "again.crt").read_bytes()
