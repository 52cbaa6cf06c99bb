"""`tls.cipherSuites`: Go's cipher suite names, as the Configuration file spells them, for OpenSSL.

Upstream passes the list to Go's crypto/tls, which applies it to TLS 1.2 handshakes only (TLS 1.3
suites are not configurable in Go) and refuses to start on a name it does not know. The same here:
the names map to OpenSSL's, which `ssl.SSLContext.set_ciphers` applies to TLS 1.2 and below;
TLS 1.3 names are accepted and have no effect; an unknown name is a configuration error naming
it. Suites this OpenSSL build cannot offer (RC4, long gone from OpenSSL 3) are left out of the
list; a list left with nothing OpenSSL can offer is an error too, rather than a server that
cannot complete any TLS 1.2 handshake.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Final

# Go's names (crypto/tls CipherSuites() and InsecureCipherSuites(), with the legacy aliases
# Kubernetes components accept) -> OpenSSL's. None: known to Go, not offered by OpenSSL 3.
GO_TO_OPENSSL: Final[dict[str, str | None]] = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA": "DES-CBC3-SHA",
    "TLS_RSA_WITH_RC4_128_SHA": None,
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA": None,
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA": "ECDHE-RSA-DES-CBC3-SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA": None,
}
# TLS 1.3 suites: valid names, not configurable (as in Go).
TLS13_SUITES: Final = frozenset(
    {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}
)


def openssl_cipher_list(names: Iterable[str]) -> str:
    """The OpenSSL cipher string for Go suite names ("" when none applies to TLS 1.2: keep
    OpenSSL's defaults). ValueError names an unknown suite, or a list OpenSSL can offer none of."""
    names = tuple(names)
    chosen: list[str] = []
    for name in names:
        if name in TLS13_SUITES:
            continue
        if name not in GO_TO_OPENSSL:
            raise ValueError(f"unknown cipher suite {name!r}")
        openssl = GO_TO_OPENSSL[name]
        if openssl is not None and openssl not in chosen:
            chosen.append(openssl)
    only_tls13 = all(name in TLS13_SUITES for name in names)
    if not chosen and not only_tls13:
        raise ValueError(f"none of {', '.join(names)} can be offered by this OpenSSL build")
    if chosen:
        try:  # OpenSSL may still lack one (a build without 3DES, say): find out now
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(":".join(chosen))
        except ssl.SSLError:
            raise ValueError(
                f"none of {', '.join(names)} can be offered by this OpenSSL build"
            ) from None
    return ":".join(chosen)
