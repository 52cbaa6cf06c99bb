"""Benchmark: what connections cost our webhook server, against a Go net/http server.

Issue 24 item 2: 1000 slow TLS connections raised the controller's RSS by ~0.5 MiB each and it
never came back. This bench measures, for our real servers (conn_server.py: the webhook server
and the health server `jobset-controller run` starts, in a process of their own) and for a tiny
Go net/http server built here from the Go standard library only (same certificate, TLS 1.2 or
later, HTTP/1.1 only by ALPN, 10 s for the handshake and the head, 120 s idle: our timeouts):

1. RSS per connection, for `--conns` connections of each kind held at once (conn_clients.py, a
   process of its own): idle plain (one `GET /healthz` answered, kept alive), idle TLS (one
   AdmissionReview answered, kept alive) and slow TLS (a record header, then a byte every 2 s;
   reopened when the server's handshake timeout closes it). Each kind on a fresh server
   process, after a warm-up of the same kind, so memory freed by another kind cannot hide
   what this one costs. Per connection = (RSS with them open - RSS before) / connections the
   server holds then (reopened ones may be on their way: at least 95% of `--conns`). A fourth
   kind, hello-tls, sends a whole ClientHello and then nothing: the handshake state a client
   can hold once it has sent a real hello (reopened too).
2. `--slow` (4000) slow TLS connections held for `--hold` seconds on the webhook port of our
   controller, as issue 24 measured it (`jobset-controller run` against a local control plane,
   webhooks with internal certificate management, at rest after its start-up trim;
   `--held-on server`: conn_server.py alone), and on the Go server's: RSS at start, its peak
   (sampled every 0.25 s), a real AdmissionReview (a CREATE of examples/pytorch-workers.yaml)
   POSTed every 0.2 s on a fresh TLS connection, handshake included, with its latency (max,
   p99, median); then the connections close and RSS is read `--after` (30) seconds later.
   Issue 24's target for ours: peak under 150 MiB, every review answered within 1 s, RSS after
   within 15% of the start (the controller starts at ~62 MiB, the webhook server alone at ~52).

Each `--src label=path` is one of our trees (`git archive <commit> src | tar -x -C /tmp/x` gives
an earlier one); the Go server is measured once. Our server runs in the runtime-only venv, as the
image does (runtime_venv.py; `--dev-venv` to use this one). The Go binary is built once into
~/.cache/jobset-controller (keyed by its source and the Go version) with GOTOOLCHAIN=local and
no module downloads; `go` must be on PATH. The bench raises its own RLIMIT_NOFILE soft limit to
the hard one (the client process does too).

Run: .venv/bin/python hack/bench/conn_bench.py [--src after=src --src before=/tmp/before/src]
     [--conns 1000] [--slow 4000] [--hold 30] [--after 30] [--held-on controller|server]
     [--no-go]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import resource
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import yaml
from benchlib import Controller, parse_src
from runtime_venv import CACHE, ROOT, runtime_python

from jobset_controller.runtime.certs import CERT_FILE, KEY_FILE
from jobset_controller.runtime.servingtls import self_signed_pem
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.processes import parent_death_signal, process_cpu, process_rss

HERE = Path(__file__).resolve().parent
MIB = 1024 * 1024
KINDS = ("idle-plain", "idle-tls", "slow-tls", "hello-tls")
VALIDATE = "/validate-jobset-x-k8s-io-v1alpha2-jobset"

GO_MAIN = r"""// conn_bench.py's Go server: net/http + crypto/tls from the standard library,
// configured as our servers are (TLS >= 1.2, HTTP/1.1 only, 10 s for the handshake and the
// head, 120 s idle).
package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

type review struct {
	Request *struct {
		UID string `json:"uid"`
	} `json:"request"`
}

func admit(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	var in review
	if err != nil || json.Unmarshal(body, &in) != nil || in.Request == nil {
		http.Error(w, "expected an AdmissionReview", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"apiVersion": "admission.k8s.io/v1",
		"kind":       "AdmissionReview",
		"response":   map[string]any{"uid": in.Request.UID, "allowed": true},
	})
}

func server(mux *http.ServeMux) *http.Server {
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second, // also the TLS handshake's limit
		IdleTimeout:       120 * time.Second,
		// Non-nil and empty: no HTTP/2 (controller-runtime turns it off too).
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
}

func main() {
	dir := os.Args[1]
	cert, err := tls.LoadX509KeyPair(dir+"/tls.crt", dir+"/tls.key")
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/validate-jobset-x-k8s-io-v1alpha2-jobset", admit)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})
	secure, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	tlsServer := server(mux)
	tlsServer.TLSConfig = &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"http/1.1"},
	}
	go tlsServer.ServeTLS(secure, "", "")
	go server(mux).Serve(plain)
	fmt.Printf("ready %d %d\n", secure.Addr().(*net.TCPAddr).Port, plain.Addr().(*net.TCPAddr).Port)
	select {}
}
"""


def go_server() -> Path:
    """The Go server's binary, built on first use (standard library only: nothing to download)."""
    version = subprocess.run(["go", "version"], capture_output=True, text=True, check=True).stdout
    digest = hashlib.sha256((GO_MAIN + version).encode()).hexdigest()[:12]
    binary = CACHE / f"conn-bench-go-{digest}" / "server"
    if binary.exists():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="conn-bench-go-") as tmp:
        (Path(tmp) / "main.go").write_text(GO_MAIN)
        (Path(tmp) / "go.mod").write_text("module connbench\n\ngo 1.26\n")
        env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
        subprocess.run(
            ["go", "build", "-trimpath", "-o", str(binary), "."], cwd=tmp, env=env, check=True
        )
    return binary


def admission_review() -> bytes:
    """A CREATE of examples/pytorch-workers.yaml, as the API server sends it."""
    jobset = yaml.safe_load((ROOT / "examples" / "pytorch-workers.yaml").read_text())
    jobset["metadata"]["namespace"] = "default"
    return orjson.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "0b7a5a9e-0000-4000-8000-000000000001",
                "kind": {"group": "jobset.x-k8s.io", "version": "v1alpha2", "kind": "JobSet"},
                "resource": {
                    "group": "jobset.x-k8s.io",
                    "version": "v1alpha2",
                    "resource": "jobsets",
                },
                "name": jobset["metadata"]["name"],
                "namespace": "default",
                "operation": "CREATE",
                "userInfo": {"username": "bench"},
                "object": jobset,
                "oldObject": None,
                "dryRun": False,
            },
        }
    )


# ----------------------------------------------------------------------------- processes
class Measured:
    """A server process read from outside: RSS, descriptors, CPU (/proc/<pid>)."""

    label: str
    tls_port: int

    @property
    def pid(self) -> int:
        raise NotImplementedError

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    def rss(self) -> int:
        return process_rss(self.pid)

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def cpu(self) -> float:
        return process_cpu(self.pid)

    async def until(self, check: str, condition: object, limit: float = 60.0) -> None:
        """Poll `condition()` every 20 ms until true; TimeoutError naming `check` after `limit`."""
        assert callable(condition)
        deadline = time.monotonic() + limit
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.label}: {check}")
            await asyncio.sleep(0.02)

    async def quiet(self, limit: float = 10.0) -> None:
        """Until the process used at most 2 clock ticks of CPU in 0.5 s (its work is done), or
        `limit` seconds (slow clients keep it a little busy)."""
        deadline = time.monotonic() + limit
        last = self.cpu()
        while time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            now = self.cpu()
            if now - last <= 0.02:
                return
            last = now


@dataclass
class Server(Measured):
    """One server process: ours (conn_server.py under a source tree) or the Go one."""

    label: str
    argv: list[str]
    env: dict[str, str]
    proc: asyncio.subprocess.Process | None = None
    tls_port: int = 0
    plain_port: int = 0

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            env=self.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            preexec_fn=parent_death_signal(),  # never outlives the bench
        )
        assert self.proc.stdout is not None
        line = (await asyncio.wait_for(self.proc.stdout.readline(), 60)).decode().split()
        if not line or line[0] != "ready":
            raise RuntimeError(f"{self.label}: server did not start: {line}")
        self.tls_port, self.plain_port = int(line[1]), int(line[2])

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


class ControllerServer(Measured):
    """Ours as users run it: `jobset-controller run` (benchlib.Controller) against a local
    control plane, serving the webhooks with internal certificate management, as in issue 24's
    measurement (the controller's RSS, not a server's alone). Started once its start-up trim is
    done, so the baseline is the controller at rest."""

    def __init__(
        self, label: str, src: Path, plane: ControlPlane, workdir: Path, python: Path
    ) -> None:
        self.label = label
        self.controller = Controller(label, src, plane, workdir, python=python)
        self.tls_port = 0

    @property
    def pid(self) -> int:
        return self.controller.pid

    async def start(self) -> None:
        await self.controller.start()
        config = yaml.safe_load(self.controller.log_path.with_suffix(".config.yaml").read_text())
        self.tls_port = int(config["webhook"]["port"])
        log = self.controller.log_path
        await self.until(
            "start-up trim", lambda: b"start-up memory returned to the OS" in log.read_bytes()
        )

    async def stop(self) -> None:
        await self.controller.stop()


@dataclass
class Clients:
    """conn_clients.py, driven by its stdin."""

    review_file: Path
    proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(HERE / "conn_clients.py"),
            str(self.review_file),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            preexec_fn=parent_death_signal(),
        )

    async def command(self, line: str, limit: float = 300.0) -> str:
        assert self.proc is not None
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(line.encode() + b"\n")
        await self.proc.stdin.drain()
        answer = await asyncio.wait_for(self.proc.stdout.readline(), limit)
        if not answer:
            raise RuntimeError(f"conn_clients.py exited on {line!r}")
        return answer.decode().strip()

    async def stop(self) -> None:
        if self.proc is not None and self.proc.stdin is not None:
            self.proc.stdin.close()
            await self.proc.wait()


# ----------------------------------------------------------------------------- probes
@dataclass
class Probe:
    """A real AdmissionReview on a fresh TLS connection every `every` seconds."""

    port: int
    body: bytes
    every: float = 0.2
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    async def once(self) -> None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        request = (
            f"POST {VALIDATE}?timeout=10s HTTP/1.1\r\nHost: bench\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(self.body)}\r\n\r\n"
        ).encode() + self.body
        started = time.perf_counter()
        try:
            async with asyncio.timeout(10):
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port, ssl=context)
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                body = await reader.readexactly(length)
                writer.close()
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as error:
            self.failures.append(type(error).__name__)
            return
        if not head.startswith(b"HTTP/1.1 200") or b'"uid"' not in body:
            self.failures.append(head.split(b"\r\n")[0].decode())
            return
        self.latencies.append(time.perf_counter() - started)

    async def run(self) -> None:
        while True:
            await self.once()
            await asyncio.sleep(self.every)


# ----------------------------------------------------------------------------- scenarios
async def per_connection(
    make: object, clients: Clients, kind: str, count: int, warm: int = 50
) -> float:
    """KiB of RSS per connection of `kind`, `count` held at once on a fresh server."""
    assert callable(make)
    server: Server = make()
    await server.start()
    try:
        port = server.plain_port if kind == "idle-plain" else server.tls_port
        base_fds = server.fds()
        await clients.command(f"open {kind} {warm} {port}")  # first-use costs, not per connection
        await clients.command("close")
        await server.until("warm-up connections closed", lambda: server.fds() <= base_fds)
        await server.quiet()
        before = server.rss()
        await clients.command(f"open {kind} {count} {port}")
        # Connections the server closes (a handshake's time limit) are reopened at once, so a
        # few may be on their way at any moment: the figure is per connection held then.
        await server.until("connections accepted", lambda: server.fds() >= base_fds + count * 0.95)
        await server.quiet(limit=3.0)
        during, held = server.rss(), server.fds() - base_fds
        await clients.command("close")
        return (during - before) / held / 1024
    finally:
        await server.stop()


async def held_slow(
    make: object, clients: Clients, count: int, hold: float, after: float, body: bytes
) -> dict[str, float]:
    """`count` slow TLS connections held for `hold` s while AdmissionReviews are timed."""
    assert callable(make)
    server: Measured = make()
    await server.start()
    try:
        probe = Probe(server.tls_port, body)
        for _ in range(20):  # warm: the handler's first calls, the TLS session machinery
            await probe.once()
        probe.latencies.clear()
        await server.quiet()
        start_rss, start_cpu = server.rss(), server.cpu()
        peak = start_rss
        probing = asyncio.create_task(probe.run())
        opened = time.monotonic()
        opening = asyncio.create_task(clients.command(f"open slow-tls {count} {server.tls_port}"))
        most_fds = 0
        while time.monotonic() - opened < hold or not opening.done():
            await asyncio.sleep(0.25)
            peak = max(peak, server.rss())
            most_fds = max(most_fds, server.fds())
        probing.cancel()
        await asyncio.gather(probing, return_exceptions=True)
        await opening
        reconnects = int((await clients.command("close")).split()[1])
        hold_cpu = server.cpu() - start_cpu
        closed_rss = server.rss()
        closed = time.monotonic()
        while time.monotonic() - closed < after:  # the "30 s after they close"
            await asyncio.sleep(0.25)
            peak = max(peak, server.rss())
        lat = sorted(probe.latencies) or [float("nan")]
        return {
            "start_mib": start_rss / MIB,
            "peak_mib": peak / MIB,
            "closed_mib": closed_rss / MIB,
            "after_mib": server.rss() / MIB,
            "after_ratio": server.rss() / start_rss,
            "most_fds": most_fds,
            "reconnects": reconnects,
            "reviews": len(probe.latencies),
            "failures": len(probe.failures),
            "max_ms": lat[-1] * 1000,
            "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000,
            "median_ms": statistics.median(lat) * 1000,
            "cpu_s": hold_cpu,
        }
    finally:
        await server.stop()


async def main_async(args: argparse.Namespace) -> None:
    python = str(sys.executable if args.dev_venv else runtime_python())
    with tempfile.TemporaryDirectory(prefix="conn-bench-") as tmp:
        cert_dir = Path(tmp)
        cert, key = self_signed_pem()
        (cert_dir / CERT_FILE).write_bytes(cert)
        (cert_dir / KEY_FILE).write_bytes(key)
        body = admission_review()
        review_file = cert_dir / "review.json"
        review_file.write_bytes(body)

        makers: dict[str, object] = {}
        for label, src in parse_src(args.src):
            env = {**os.environ, "PYTHONPATH": str(src.resolve())}
            subprocess.run([python, "-m", "compileall", "-q", str(src)], check=True)  # noqa: ASYNC221
            argv = [python, str(HERE / "conn_server.py"), str(cert_dir)]
            makers[label] = lambda label=label, argv=argv, env=env: Server(label, argv, env)
        if not args.no_go:
            argv = [str(go_server()), str(cert_dir)]
            makers["go"] = lambda argv=argv: Server("go", argv, dict(os.environ))
        held_makers = dict(makers)
        plane = ControlPlane() if args.slow and args.held_on == "controller" else None
        if plane is not None:
            plane.start()
            for label, src in parse_src(args.src):
                held_makers[label] = lambda label=label, src=src: ControllerServer(
                    label, src.resolve(), plane, cert_dir, Path(python)
                )

        clients = Clients(review_file)
        await clients.start()
        try:
            table: dict[str, dict[str, float]] = {label: {} for label in makers}
            for kind in args.kinds if args.conns else ():
                for label, make in makers.items():
                    table[label][kind] = await per_connection(make, clients, kind, args.conns)
                    print(f"[{label}] {kind}: {table[label][kind]:.1f} KiB", flush=True)
            held: dict[str, dict[str, float]] = {}
            for label, make in held_makers.items() if args.slow else ():
                held[label] = await held_slow(make, clients, args.slow, args.hold, args.after, body)
                print(f"[{label}] {args.slow} slow TLS: {held[label]}", flush=True)
        finally:
            await clients.stop()
            if plane is not None:
                plane.stop()
    report(args, table, held)


def report(
    args: argparse.Namespace, table: dict[str, dict[str, float]], held: dict[str, dict[str, float]]
) -> None:
    labels = list(table)
    ours = [label for label in labels if label != "go"]
    go = "go" in labels
    if args.conns:
        print(f"\nRSS per connection, KiB ({args.conns} held at once, fresh server per kind)")
        head = "| connection | " + " | ".join(labels)
        head += " | " + " | ".join(f"{o}/go" for o in ours) if go else ""
        print(head + " |")
        print("|---|" + "---:|" * (len(labels) + (len(ours) if go else 0)))
        for kind in args.kinds:
            cells = [f"{table[label][kind]:.1f}" for label in labels]
            if go:
                cells += [f"{table[o][kind] / max(table['go'][kind], 0.1):.2f}x" for o in ours]
            print(f"| {kind} | " + " | ".join(cells) + " |")
    if held:
        print(
            f"\n{args.slow} slow TLS connections held {args.hold:g} s, AdmissionReviews on fresh "
            f"TLS connections every 0.2 s, RSS {args.after:g} s after they close"
        )
        rows = (
            ("RSS at start, MiB", "start_mib", "{:.1f}"),
            ("RSS peak, MiB", "peak_mib", "{:.1f}"),
            ("RSS as they close, MiB", "closed_mib", "{:.1f}"),
            (f"RSS {args.after:g} s after, MiB", "after_mib", "{:.1f}"),
            ("after / start", "after_ratio", "{:.2f}"),
            ("most descriptors open", "most_fds", "{:.0f}"),
            ("slow connections reopened", "reconnects", "{:.0f}"),
            ("reviews answered / failed", "reviews", "{:.0f}"),
            ("review latency max, ms", "max_ms", "{:.0f}"),
            ("review latency p99, ms", "p99_ms", "{:.0f}"),
            ("review latency median, ms", "median_ms", "{:.0f}"),
            ("server CPU while held, s", "cpu_s", "{:.1f}"),
        )
        print("| figure | " + " | ".join(held) + " |")
        print("|---|" + "---:|" * len(held))
        for title, key, fmt in rows:
            cells = [fmt.format(held[label][key]) for label in held]
            if key == "reviews":
                cells = [
                    f"{c} / {held[label]['failures']:.0f}"
                    for c, label in zip(cells, held, strict=True)
                ]
            print(f"| {title} | " + " | ".join(cells) + " |")
        for label in held:
            if label == "go":
                continue
            result = held[label]
            met = (
                result["peak_mib"] < 150
                and result["max_ms"] <= 1000
                and result["failures"] == 0
                and result["after_ratio"] <= 1.15
            )
            print(f"{label}: issue 24's target {'met' if met else 'NOT met'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", action="append", default=[], help="label=path of a src tree")
    parser.add_argument("--conns", type=int, default=1000, help="per-kind count (0: skip)")
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--slow", type=int, default=4000, help="slow TLS count held (0: skip)")
    parser.add_argument("--hold", type=float, default=30.0)
    parser.add_argument("--after", type=float, default=30.0)
    parser.add_argument(
        "--held-on",
        choices=("controller", "server"),
        default="controller",
        help="ours in the held run: the whole controller on a local control plane (as issue 24 "
        "measured it), or the webhook server alone (conn_server.py)",
    )
    parser.add_argument("--no-go", action="store_true", help="skip the Go server")
    parser.add_argument("--dev-venv", action="store_true", help="our server in this venv")
    args = parser.parse_args()
    if not args.src:
        args.src = [f"ours={ROOT / 'src'}"]
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
