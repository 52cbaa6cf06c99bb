"""The soak's fault schedule and the loopback forwarder standing in for the webhook Service."""

from __future__ import annotations

import asyncio
import json
import random

from jobset_controller_dev.soak import faults
from jobset_controller_dev.soak.proxy import Forwarder


def test_the_schedule_is_seeded_and_spaced() -> None:
    plan = faults.schedule(random.Random(5), duration=600, every=120, first=60)
    again = faults.schedule(random.Random(5), duration=600, every=120, first=60)
    assert plan == again
    assert [f.at for f in plan] == [60, 180, 300, 420, 540]


def test_each_round_of_the_schedule_draws_every_kind_once() -> None:
    every = len(faults.KINDS)
    plan = faults.schedule(random.Random(9), duration=every * 2 * 10, every=10, first=0)
    assert sorted(f.kind for f in plan[:every]) == sorted(faults.KINDS)
    assert sorted(f.kind for f in plan[every:]) == sorted(faults.KINDS)


def test_the_etcd_revision_is_read_from_endpoint_status() -> None:
    status = [{"Endpoint": "x", "Status": {"header": {"revision": 4177}}}]
    assert faults.etcd_revision(json.dumps(status)) == 4177


async def test_the_forwarder_passes_bytes_to_a_live_target_and_skips_a_dead_one() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readexactly(5))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    live = server.sockets[0].getsockname()[1]
    closed = await asyncio.start_server(echo, "127.0.0.1", 0)
    dead = closed.sockets[0].getsockname()[1]
    closed.close()
    await closed.wait_closed()
    forwarder = Forwarder(lambda: [dead, live])
    port = await forwarder.start()
    try:
        for _ in range(2):  # both turns of the rotation reach the live target
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"hello")
            assert await reader.readexactly(5) == b"hello"
            writer.close()
    finally:
        await forwarder.stop()
        server.close()
        await server.wait_closed()
    assert forwarder.refused == 0


async def test_the_forwarder_closes_a_connection_no_target_accepts() -> None:
    forwarder = Forwarder(list)
    port = await forwarder.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await reader.read() == b""
        writer.close()
    finally:
        await forwarder.stop()
    assert forwarder.refused == 1
