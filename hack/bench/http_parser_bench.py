"""Microbenchmark: CPU per request head for the HTTP/1.1 parsers the servers could use.

Why: issue 24 asks for a well-kept parser instead of our hand-written one and to choose between
httptools (llhttp, Node.js's parser, C) and h11 (pure Python) on measured cost. Each parser takes
the same requests, fed as the event loop hands them over (one ``data_received`` each): a kubelet
probe (``GET /healthz``), a Prometheus scrape with a bearer token, and the API server's
AdmissionReview POST (head plus a 4 KiB body), and the same POST delivered in 512-byte pieces.
Printed: microseconds per request, best of ``--repeat`` runs of ``--count`` requests.

A second table is for the client side (issue 24: ``runtime/http1client.py`` parses answers with the
same library only if that costs no more CPU): our client's own answer parser (``_Connection``,
fed as the loop would feed it) against httptools' response parser on an API server's answer to a
create (a 1 KiB Job), in one read and in four.

    .venv/bin/pip install h11   # the contender only: not a dependency of the project
    .venv/bin/python hack/bench/http_parser_bench.py [--count 20000] [--repeat 5]

Without h11 the bench still runs (the h11 column says so): the test venv does not hold the
contender, and tests/e2e/test_bench_smoke.py runs every bench, httptools' side and the client table
included.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import time
from collections.abc import Callable

import httptools

from jobset_controller.runtime.http1client import _Connection

BODY = b'{"kind":"AdmissionReview","request":{"uid":"' + b"x" * 4000 + b'"}}'
REQUESTS = {
    "probe": b"GET /healthz HTTP/1.1\r\nHost: 10.0.0.1:8081\r\nUser-Agent: kube-probe/1.34\r\n"
    b"Accept: */*\r\n\r\n",
    "scrape": b"GET /metrics HTTP/1.1\r\nHost: 10.0.0.1:8443\r\nUser-Agent: Prometheus/3.5.0\r\n"
    b"Accept: text/plain;version=1.0.0;q=0.9,*/*;q=0.1\r\nAccept-Encoding: gzip\r\n"
    b"Authorization: Bearer " + b"t" * 900 + b"\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n",
    "admission": b"POST /validate-jobset-x-k8s-io-v1alpha2-jobset?timeout=10s HTTP/1.1\r\n"
    b"Host: jobset-webhook-service.jobset-system.svc:443\r\nUser-Agent: kube-apiserver-admission"
    b"\r\nContent-Length: " + str(len(BODY)).encode() + b"\r\nAccept: application/json, */*\r\n"
    b"Content-Type: application/json\r\nAccept-Encoding: gzip\r\n\r\n" + BODY,
}


class _Callbacks:
    """The callbacks our server needs from httptools: URL, headers, body, completion."""

    def __init__(self) -> None:
        self.done = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = bytearray()

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.done += 1
        self.headers, self.body = [], bytearray()  # a server hands them over and starts anew


def run_httptools(pieces: list[bytes], count: int) -> None:
    callbacks = _Callbacks()
    parser = httptools.HttpRequestParser(callbacks)
    for _ in range(count):
        for piece in pieces:
            parser.feed_data(piece)
    assert callbacks.done == count


def run_h11(pieces: list[bytes], count: int) -> None:
    import h11  # the contender, installed by hand (module docstring)

    connection = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
    done = 0
    for _ in range(count):
        for piece in pieces:
            connection.receive_data(piece)
            while True:
                event = connection.next_event()
                if event is h11.NEED_DATA:
                    break
                if isinstance(event, h11.EndOfMessage):
                    done += 1
                    # Answer, as a server must before h11 reads the next request.
                    connection.send(
                        h11.Response(status_code=200, headers=[("Content-Length", "0")])
                    )
                    connection.send(h11.EndOfMessage())
                    connection.start_next_cycle()
                    break
    assert done == count


def best(
    run: Callable[[list[bytes], int], None], pieces: list[bytes], count: int, repeat: int
) -> float:
    times = []
    for _ in range(repeat):
        start = time.process_time()
        run(pieces, count)
        times.append(time.process_time() - start)
    return min(times) / count * 1e6


JOB = b'{"kind":"Job","apiVersion":"batch/v1","metadata":{"name":"' + b"j" * 900 + b'"}}'
ANSWER = (
    b"HTTP/1.1 201 Created\r\nAudit-Id: 8f1c2b4e-1111-2222-3333-444455556666\r\n"
    b"Cache-Control: no-cache, private\r\nContent-Type: application/json\r\n"
    b"X-Kubernetes-Pf-Flowschema-Uid: 0f0e0d0c-aaaa-bbbb-cccc-ddddeeeeffff\r\n"
    b"X-Kubernetes-Pf-Prioritylevel-Uid: 0f0e0d0c-aaaa-bbbb-cccc-ddddeeeeffff\r\n"
    b"Date: Wed, 25 Nov 2026 23:00:00 GMT\r\nContent-Length: "
    + str(len(JOB)).encode()
    + b"\r\n\r\n"
) + JOB


class _AnswerCallbacks(_Callbacks):
    """As a client needs them: the headers are read after the answer is complete."""

    def on_message_complete(self) -> None:
        self.done += 1


class _NullTransport(asyncio.Transport):
    def write(self, data: bytes | bytearray | memoryview) -> None:
        pass

    def is_closing(self) -> bool:
        return False


async def _ours(pieces: list[bytes], count: int) -> float:
    connection = _Connection()
    connection.connection_made(_NullTransport())
    start = time.process_time()
    for _ in range(count):
        connection.send(b"", expect_body=True)
        for piece in pieces:
            connection.data_received(piece)
        assert connection.at_rest or connection._pieces
        connection._pieces.clear()
        connection._buffered = 0
        connection._headers.get("content-type")
    return (time.process_time() - start) / count * 1e6


def _theirs(pieces: list[bytes], count: int) -> float:
    callbacks = _AnswerCallbacks()
    parser = httptools.HttpResponseParser(callbacks)
    start = time.process_time()
    for _ in range(count):
        callbacks.headers, callbacks.body = [], bytearray()
        for piece in pieces:
            parser.feed_data(piece)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in callbacks.headers}
        assert headers["content-type"] == "application/json"
        parser.get_status_code()
    assert callbacks.done == count
    return (time.process_time() - start) / count * 1e6


def client_table(count: int, repeat: int) -> None:
    print(f"\n{'answer':<16}{'ours us':>14}{'httptools us':>14}{'ratio':>8}")
    for name, reads in (("create", 1), ("create/4 reads", 4)):
        size = len(ANSWER) // reads + 1
        pieces = [ANSWER[i : i + size] for i in range(0, len(ANSWER), size)]
        ours = min(asyncio.run(_ours(pieces, count)) for _ in range(repeat))
        theirs = min(_theirs(pieces, count) for _ in range(repeat))
        print(f"{name:<16}{ours:>14.2f}{theirs:>14.2f}{ours / theirs:>7.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    cases = {name: [data] for name, data in REQUESTS.items()}
    admission = REQUESTS["admission"]
    cases["admission/512B"] = [admission[i : i + 512] for i in range(0, len(admission), 512)]
    contender = importlib.util.find_spec("h11") is not None
    print(f"{'request':<16}{'httptools us':>14}{'h11 us':>10}{'ratio':>8}")
    for name, pieces in cases.items():
        fast = best(run_httptools, pieces, args.count, args.repeat)
        if contender:
            slow = best(run_h11, pieces, args.count, args.repeat)
            print(f"{name:<16}{fast:>14.2f}{slow:>10.2f}{slow / fast:>7.1f}x")
        else:
            print(f"{name:<16}{fast:>14.2f}{'-':>10}{'-':>8}")
    if not contender:
        print("h11 is not installed (pip install h11): its column is empty")
    client_table(args.count, args.repeat)


if __name__ == "__main__":
    main()
