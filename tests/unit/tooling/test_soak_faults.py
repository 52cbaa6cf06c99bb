"""The soak's fault schedule and the loopback forwarder standing in for the webhook Service."""

from __future__ import annotations

import asyncio
import json
import random
import threading
from types import SimpleNamespace

from jobset_controller_dev.soak import faults
from jobset_controller_dev.soak.proxy import Forwarder
from jobset_controller_dev.soak.run import Soak


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


class SlowApiServer:
    """A cluster whose restarted API server is ready only when the test says so."""

    def __init__(self) -> None:
        self.waiting = threading.Event()
        self.ready = threading.Event()
        self.steps: list[str] = []

    def stop_apiserver(self) -> None:
        self.steps.append("stop")

    def spawn_apiserver(self) -> None:
        assert threading.current_thread() is threading.main_thread()
        self.steps.append("spawn")

    def wait_apiserver_ready(self, timeout: float | None = None) -> None:
        self.steps.append("wait")
        self.waiting.set()
        assert self.ready.wait(30), "the test never got to run while the restart waited"


async def test_the_soak_loop_keeps_running_while_the_api_server_restarts() -> None:
    # A loop blocked for the restart would stall the webhook forwarder, the watches and the
    # replicas' supervisor: the hunt of 2026-11-29 saw every webhook call fail for 90 s. Here
    # the API server is ready only once this coroutine, on the same loop, says so.
    cluster = SlowApiServer()
    soak = SimpleNamespace(cluster=cluster)
    restart = asyncio.ensure_future(Soak.restart_apiserver(soak))  # type: ignore[arg-type]
    assert await asyncio.to_thread(cluster.waiting.wait, 30)
    assert not restart.done()
    cluster.ready.set()
    await restart
    assert cluster.steps == ["stop", "spawn", "wait"]
