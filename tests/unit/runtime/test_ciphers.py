"""`tls.cipherSuites`: Go names mapped for OpenSSL, and a server that offers only those."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator

import pytest

from jobset_controller.runtime.ciphers import GO_TO_OPENSSL, TLS13_SUITES, openssl_cipher_list
from jobset_controller.runtime.servingtls import self_signed_context


def test_go_names_map_to_openssl_names_in_order_without_repeats() -> None:
    names = (
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",  # an alias of the one before
        "TLS_AES_128_GCM_SHA256",  # TLS 1.3: accepted, not configurable
        "TLS_RSA_WITH_RC4_128_SHA",  # known to Go, not offered by OpenSSL 3
    )
    assert openssl_cipher_list(names) == (
        "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-CHACHA20-POLY1305"
    )


def test_no_suites_or_only_tls13_suites_keep_openssls_defaults() -> None:
    assert openssl_cipher_list(()) == ""
    assert openssl_cipher_list(sorted(TLS13_SUITES)) == ""


def test_every_mapped_suite_this_openssl_offers_is_accepted_alone() -> None:
    offered = {c["name"] for c in ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).get_ciphers()}
    for go_name, openssl_name in GO_TO_OPENSSL.items():
        if openssl_name in offered:
            assert openssl_cipher_list([go_name]) == openssl_name


def test_an_unknown_name_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown cipher suite 'TLS_RSA_WITH_NULL'"):
        openssl_cipher_list(["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_RSA_WITH_NULL"])


@pytest.fixture
def server() -> Iterator[int]:
    """A TLS server on 127.0.0.1 offering only ECDHE-ECDSA-AES256-GCM-SHA384 for TLS 1.2."""
    context = self_signed_context("", ("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        for _ in range(2):
            conn, _ = listener.accept()
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except (ssl.SSLError, OSError):
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield port
    listener.close()


def _client(ciphers: str) -> ssl.SSLContext:
    client = ssl.create_default_context()
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    client.maximum_version = ssl.TLSVersion.TLSv1_2
    client.set_ciphers(ciphers)
    return client


def test_the_server_negotiates_only_the_configured_tls12_suites(server: int) -> None:
    offered = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384"
    with (
        socket.create_connection(("127.0.0.1", server)) as raw,
        _client(offered).wrap_socket(raw) as tls,
    ):
        cipher = tls.cipher()
        assert cipher is not None
        assert cipher[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"
        tls.send(b"x")
    with (
        socket.create_connection(("127.0.0.1", server)) as raw,
        pytest.raises(ssl.SSLError),
    ):
        _client("ECDHE-ECDSA-AES128-GCM-SHA256").wrap_socket(raw)
