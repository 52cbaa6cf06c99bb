"""Fixtures shared by the runtime tests: virtual time, fixed random draws, a private registry;
and helpers for the tests on real sockets: a started server and a polled condition."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from jobset_controller.runtime.certs import CERT_FILE, KEY_FILE
from jobset_controller.runtime.clock import FakeClock, RandomSource
from jobset_controller.runtime.http1server import Handler, HttpServer
from jobset_controller.runtime.servingtls import pair_context, self_signed_pem

DRAW = 0.5  # what `draws.random()` returns


class FixedDraws:
    """A RandomSource whose draws are known: `random()` is DRAW, `randint(a, b)` is `b`."""

    def random(self) -> float:
        return DRAW

    def randint(self, a: int, b: int) -> int:
        return b


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def draws() -> RandomSource:
    return FixedDraws()


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@contextlib.asynccontextmanager
async def serving(
    routes: Mapping[str, Mapping[str, Handler]], **options: Any
) -> AsyncIterator[HttpServer]:
    """An `HttpServer` named "test" with `routes` and `options` (its keyword arguments), listening
    on a free 127.0.0.1 port (`.port`) for the block's duration."""
    http = HttpServer(routes, name="test", **options)
    await http.start("127.0.0.1", 0)
    try:
        yield http
    finally:
        await http.stop()


@pytest.fixture
def context(tmp_path: Path) -> ssl.SSLContext:
    """A server TLS context from a self-signed pair on disk, as the servers load theirs."""
    cert, key = self_signed_pem()
    (tmp_path / CERT_FILE).write_bytes(cert)
    (tmp_path / KEY_FILE).write_bytes(key)
    return pair_context(tmp_path)
