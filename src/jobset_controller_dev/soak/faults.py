"""The soak's faults and their seeded schedule.

Each fault is what production does to a controller: the kubelet SIGKILLs the leader (OOM, node
loss) or a rollout SIGTERMs it; the API server restarts (upgrade); watches expire (410 Gone after
an etcd compaction); a node stops reporting (NotReady, its pods frozen) and comes back; a burst of
JobSets lands at once (a pipeline's fan-out); a slow client holds the metrics and webhook ports.
The schedule draws every kind in turn (a seeded shuffle per round), so a short run still sees each.
"""

from __future__ import annotations

import asyncio
import json
import random
import ssl
import time
from dataclasses import dataclass
from typing import Final

KINDS: Final = (
    "leader-sigkill",
    "leader-sigterm",
    "apiserver-restart",
    "watch-expiry",
    "node-notready",
    "burst",
    "slow-client",
)
NODE_DOWN_SECONDS: Final = 60.0
SLOW_CLIENTS: Final = 40
SLOW_SECONDS: Final = 30.0


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the soak's start
    kind: str


def schedule(rng: random.Random, *, duration: float, every: float, first: float) -> list[Fault]:
    """Faults every `every` s from `first` until `duration`, kinds in seeded rounds."""
    faults: list[Fault] = []
    kinds: list[str] = []
    at = first
    while at < duration:
        if not kinds:
            kinds = list(KINDS)
            rng.shuffle(kinds)
        faults.append(Fault(at, kinds.pop()))
        at += every
    return faults


def etcd_revision(status_json: str) -> int:
    """The current revision from `etcdctl endpoint status -w json`."""
    return int(json.loads(status_json)[0]["Status"]["header"]["revision"])


def loopback_tls() -> ssl.SSLContext:
    """A TLS client context for the replicas' own ports on loopback: their serving pairs are
    not the soak's to verify, only their answers (and their patience) are."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def slow_clients(port: int, seconds: float, count: int = SLOW_CLIENTS) -> int:
    """`count` TLS connections to 127.0.0.1:`port`, each sending a request's head one byte a
    second for `seconds` s (never finishing it); returns how many connected."""
    context = loopback_tls()

    async def one() -> bool:
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port, ssl=context), 5
            )
        except (OSError, TimeoutError, ssl.SSLError):
            return False
        head = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
        deadline = time.monotonic() + seconds
        try:
            for byte in head:
                if time.monotonic() > deadline:
                    break
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(1)  # the slow client's pace: one byte a second
            while time.monotonic() < deadline:
                writer.write(b"x")
                await writer.drain()
                await asyncio.sleep(1)  # the slow client's pace: one byte a second
        except (OSError, ssl.SSLError):
            pass
        finally:
            writer.close()
        return True

    results = await asyncio.gather(*(one() for _ in range(count)))
    return sum(results)
