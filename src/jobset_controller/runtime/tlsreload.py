"""A server TLS context that follows a certificate and key on disk, without a restart.

Why: certificates are rotated (by the controller itself, by cert-manager, by a kubelet updating
a mounted Secret). A server that loaded its certificate once keeps presenting the old one, and
once that expires every TLS client refuses it until the process restarts.

How: servers are given `ReloadingTLS.context`, whose SNI callback (run by OpenSSL on every
ClientHello, with or without a server name) points the handshake at the newest loaded context.
A reload builds a fresh `SSLContext` from the files and swaps the reference; nothing touches
the listener or open connections, which keep the session they negotiated, so in-flight
requests finish undisturbed and only new handshakes see the new certificate. Loading into the
live context instead could leave it half-updated: OpenSSL drops a context's key when a new
certificate does not match it, and a failed key load after that would break every handshake.

When: `reload()` on demand (a writer in this process calls it right after writing), and `run()`
polls every `interval` seconds (10 s like controller-runtime's certificate watcher). A reload
compares file contents, so a kubelet's symlink swap, an in-place write and a rename are all
seen. A pair that does not load (a key written before its certificate, say) is ignored until the
next look; the previous certificate keeps serving.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from pathlib import Path

import structlog

from jobset_controller.runtime.certs import CERT_FILE, KEY_FILE, not_after
from jobset_controller.runtime.clock import Clock, RealClock
from jobset_controller.runtime.servingtls import server_context

log = structlog.get_logger("tls")

_ATTEMPTS = 3


class ReloadingTLS:
    """The certificate pair at `cert_file`/`key_file`, reloaded when their contents change.

    `make_context` builds each empty context (protocol versions, ALPN, ciphers): the one servers
    hold and every one a reload fills, so all handshakes follow the same settings. It is
    `servingtls.server_context` with the Configuration's `tls` settings bound; the default (no
    settings: TLS >= 1.2, OpenSSL's cipher suites) suits tests and callers without a Configuration,
    and is still that builder, so no second set of protocol choices exists.
    """

    def __init__(
        self,
        cert_file: Path,
        key_file: Path,
        *,
        make_context: Callable[[], ssl.SSLContext] = server_context,
        interval: float = 10.0,
        clock: Clock | None = None,
    ) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self._make_context = make_context
        self._interval = interval
        self._clock: Clock = clock or RealClock()
        self._current: ssl.SSLContext | None = None
        self._contents: tuple[bytes, bytes] | None = None
        self._rejected: tuple[bytes, bytes] | None = None
        self._loaded = asyncio.Event()
        self.reloads = 0  # how many times a new pair was put in service
        self.context = make_context()
        self.context.sni_callback = self._select

    @classmethod
    def in_dir(
        cls,
        cert_dir: Path,
        *,
        make_context: Callable[[], ssl.SSLContext] = server_context,
        interval: float = 10.0,
        clock: Clock | None = None,
    ) -> ReloadingTLS:
        """The pair of a certificate directory (`certs.CERT_FILE`, `certs.KEY_FILE`: what the
        rotator writes and a mounted cert-manager Secret holds), so callers need not spell the
        file names."""
        return cls(
            cert_dir / CERT_FILE,
            cert_dir / KEY_FILE,
            make_context=make_context,
            interval=interval,
            clock=clock,
        )

    @property
    def loaded(self) -> bool:
        """A certificate from disk is being served to new handshakes."""
        return self._current is not None

    async def wait_loaded(self) -> None:
        await self._loaded.wait()

    def reload(self) -> bool:
        """Load the files if their contents changed; True when a certificate is in service."""
        for _ in range(_ATTEMPTS):
            contents = self._read()
            if contents is None:
                return self.loaded
            if contents in (self._contents, self._rejected):
                return self.loaded
            fresh = self._make_context()
            try:
                fresh.load_cert_chain(str(self.cert_file), str(self.key_file))
            except (OSError, ssl.SSLError) as error:
                log.warning(
                    "certificate pair not loaded; still serving the previous one",
                    cert_file=str(self.cert_file),
                    error=type(error).__name__,
                )
                self._rejected = contents
                return self.loaded
            if self._read() != contents:
                continue  # rewritten while loading: look again
            self._current, self._contents, self._rejected = fresh, contents, None
            self.reloads += 1
            expiry = not_after(contents[0])
            log.info(
                "serving certificate loaded",
                cert_file=str(self.cert_file),
                not_after=expiry.isoformat() if expiry else None,
            )
            self._loaded.set()
            return True
        return self.loaded

    async def run(self) -> None:
        """Poll the files until cancelled."""
        while True:
            self.reload()
            await self._clock.sleep(self._interval)

    def _read(self) -> tuple[bytes, bytes] | None:
        try:
            return self.cert_file.read_bytes(), self.key_file.read_bytes()
        except OSError:
            return None

    def _select(
        self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: ssl.SSLContext
    ) -> None:
        if self._current is not None:
            connection.context = self._current
