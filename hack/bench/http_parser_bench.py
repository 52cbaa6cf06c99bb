"""Microbenchmark: CPU per request head for the HTTP/1.1 parsers the servers could use.

Why: issue 24 asks for a well-kept parser instead of our hand-written one and to choose between
httptools (llhttp, Node.js's parser, C) and h11 (pure Python) on measured cost. Each parser takes
the same requests, fed as the event loop hands them over (one ``data_received`` each): a kubelet
probe (``GET /healthz``), a Prometheus scrape with a bearer token, and the API server's
AdmissionReview POST (head plus a 4 KiB body), and the same POST delivered in 512-byte pieces.
Printed: microseconds per request, best of ``--repeat`` runs of ``--count`` requests.

    .venv/bin/python hack/bench/http_parser_bench.py [--count 20000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import h11
import httptools

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


def run_httptools(pieces: list[bytes], count: int) -> None:
    callbacks = _Callbacks()
    parser = httptools.HttpRequestParser(callbacks)
    for _ in range(count):
        for piece in pieces:
            parser.feed_data(piece)
    assert callbacks.done == count


def run_h11(pieces: list[bytes], count: int) -> None:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    cases = {name: [data] for name, data in REQUESTS.items()}
    admission = REQUESTS["admission"]
    cases["admission/512B"] = [admission[i : i + 512] for i in range(0, len(admission), 512)]
    print(f"{'request':<16}{'httptools us':>14}{'h11 us':>10}{'ratio':>8}")
    for name, pieces in cases.items():
        fast = best(run_httptools, pieces, args.count, args.repeat)
        slow = best(run_h11, pieces, args.count, args.repeat)
        print(f"{name:<16}{fast:>14.2f}{slow:>10.2f}{slow / fast:>7.1f}x")


if __name__ == "__main__":
    main()
