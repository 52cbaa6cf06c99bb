"""Internal certificate management against a real API server, with `jobset-controller run`.

Each controller runs as its own ServiceAccount bound only to the shipped roles, with the default
Configuration's internal certificate management: it creates the Secret in its namespace, writes
the certificate to its certDir, serves the webhooks with it and injects the CA into the webhook
configurations this test creates under upstream's names. The API server calls the webhooks by URL
on 127.0.0.1 (no pod network here), so the serving certificate also names 127.0.0.1
(`--webhook-cert-extra-sans`); the configurations only select this test's namespace.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import ssl
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from jobset_controller.controller.webhookcerts import (
    MUTATING_WEBHOOK_CONFIGURATION,
    VALIDATING_WEBHOOK_CONFIGURATION,
)
from jobset_controller.runtime.client import ApiError, KubeClient, NotFound
from jobset_controller.webhook.server import MUTATE_PATH, VALIDATE_PATH
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.controller import ControllerProcess, write_configuration
from jobset_controller_dev.envtest.identities import service_account_user, shipped_rbac
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job
from jobset_controller_dev.envtest.polling import eventually, scaled
from jobset_controller_dev.envtest.processes import free_port
from jobset_controller_dev.envtest.webhooks import (
    MUTATING,
    VALIDATING,
    jobset_webhook_configuration,
)

SECRET = "jobset-webhook-server-cert"
ACCOUNTS = ("replica-a", "replica-b")
WRITES = frozenset({"create", "update", "patch", "delete"})


def _jobset(name: str, **spec: Any) -> dict[str, Any]:
    return jobset_manifest(name, replicated_jobs=[replicated_job("w", 1)], **spec)


def _probe(port: int, path: str) -> tuple[int, str]:
    try:
        url = f"http://127.0.0.1:{port}{path}"
        with urllib.request.urlopen(url, timeout=scaled(5)) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return 0, ""


def _served_certificate(port: int) -> bytes | None:
    """The DER certificate a TLS server on 127.0.0.1:port presents (not verified), or None."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=scaled(5)) as raw,
            context.wrap_socket(raw) as tls,
        ):
            return tls.getpeercert(binary_form=True)
    except OSError:
        return None


def _pem_serial(pem: bytes) -> int:
    return x509.load_pem_x509_certificate(pem).serial_number


class Replica:
    """One `jobset-controller run` process with its own identity, ports and certDir."""

    def __init__(
        self,
        kubeconfig: Path,
        home: str,
        workdir: Path,
        user: str,
        extra: tuple[str, ...] = (),
        webhook_port: int | None = None,
    ) -> None:
        workdir.mkdir()
        self.user = user
        self.webhook_port, self.health_port = webhook_port or free_port(), free_port()
        self.cert_dir = workdir / "certs"
        self.log = workdir / "controller.log"
        config = workdir / "config.yaml"
        write_configuration(
            config,
            {
                "leaderElection": {"leaderElect": True, "resourceNamespace": home},
                "webhook": {
                    "host": "127.0.0.1",
                    "port": self.webhook_port,
                    "certDir": str(self.cert_dir),
                },
            },
        )
        self.process = ControllerProcess(
            kubeconfig=kubeconfig,
            config=config,
            log=self.log,
            metrics="0",
            health_port=self.health_port,
            args=["--webhook-cert-extra-sans=127.0.0.1", "--log-format=json", *extra],
        )
        self.proc = self.process.proc

    def ready(self) -> tuple[int, str]:
        return _probe(self.health_port, "/readyz?verbose")

    def tail(self) -> str:
        return self.log.read_text()[-3000:]

    def logged(self, message: str) -> int:
        """How many JSON log records so far carry ``message``."""
        count = 0
        for line in self.log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict) and record.get("msg") == message:
                    count += 1
        return count

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.process.stop(30) == 0, self.tail()


class Install:
    """The controller's namespace with the shipped roles, and the two webhook configurations
    (upstream's names, by URL, without a caBundle) that the controllers must complete."""

    def __init__(
        self, plane: ControlPlane, kube: KubeClient, namespace: str, tmp: Path, home: str
    ) -> None:
        self.plane, self.kube, self.namespace, self.tmp, self.home = (
            plane,
            kube,
            namespace,
            tmp,
            home,
        )
        self.kubeconfigs: dict[str, Path] = {}
        self.replicas: list[Replica] = []

    def start(self, *extra: str, webhook_port: int | None = None) -> Replica:
        account = ACCOUNTS[len(self.replicas)]
        replica = Replica(
            self.kubeconfigs[account],
            self.home,
            self.tmp / account,
            service_account_user(self.home, account),
            extra,
            webhook_port,
        )
        self.replicas.append(replica)
        return replica

    async def register(self, mutating_port: int, validating_port: int) -> None:
        """(Re)create both configurations pointing at the given replicas' webhook ports."""
        await self.unregister()
        for path, name, hook, url, operations in (
            (MUTATING, MUTATING_WEBHOOK_CONFIGURATION, "mjobset.kb.io",
             f"https://127.0.0.1:{mutating_port}{MUTATE_PATH}", ["CREATE"]),
            (VALIDATING, VALIDATING_WEBHOOK_CONFIGURATION, "vjobset.kb.io",
             f"https://127.0.0.1:{validating_port}{VALIDATE_PATH}", ["CREATE", "UPDATE"]),
        ):  # fmt: skip
            body = jobset_webhook_configuration(name, hook, url, b"", self.namespace, operations)
            del body["webhooks"][0]["clientConfig"]["caBundle"]
            await self.kube.create(path, body)

    async def unregister(self) -> None:
        for path, name in (
            (MUTATING, MUTATING_WEBHOOK_CONFIGURATION),
            (VALIDATING, VALIDATING_WEBHOOK_CONFIGURATION),
        ):
            with contextlib.suppress(NotFound):
                await self.kube.delete(f"{path}/{name}")

    async def secret(self) -> dict[str, Any] | None:
        try:
            return await self.kube.get(f"/api/v1/namespaces/{self.home}/secrets/{SECRET}")
        except NotFound:
            return None

    async def secret_pem(self, key: str) -> bytes:
        secret = await self.secret()
        assert secret is not None
        return base64.b64decode(secret["data"][key])

    async def ca_bundles(self) -> list[str]:
        bundles = []
        for path, name in (
            (MUTATING, MUTATING_WEBHOOK_CONFIGURATION),
            (VALIDATING, VALIDATING_WEBHOOK_CONFIGURATION),
        ):
            configuration = await self.kube.get(f"{path}/{name}")
            bundles.append(configuration["webhooks"][0]["clientConfig"].get("caBundle", ""))
        return bundles

    async def secret_is_complete(self) -> bool:
        secret = await self.secret()
        return secret is not None and len(secret.get("data") or {}) == 4

    async def injected(self) -> bool:
        secret = await self.secret()
        if secret is None or "ca.crt" not in (secret.get("data") or {}):
            return False
        return await self.ca_bundles() == [secret["data"]["ca.crt"]] * 2

    def jobsets(self, name: str = "") -> str:
        base = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{self.namespace}/jobsets"
        return f"{base}/{name}" if name else base

    async def admitted(self, name: str) -> bool:
        try:
            await self.kube.create(self.jobsets(), _jobset(name))
        except ApiError:
            return False
        return True


@pytest.fixture
def install(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, tmp_path: Path
) -> Iterator[Install]:
    home = f"jobset-certs-{uuid.uuid4().hex[:6]}"
    setup = Install(control_plane, kube, namespace, tmp_path, home)
    with shipped_rbac(control_plane, home, ACCOUNTS, tmp_path) as kubeconfigs:
        setup.kubeconfigs = kubeconfigs
        try:
            yield setup
        finally:
            for replica in setup.replicas:
                replica.stop()
            _cleanup(control_plane)
            control_plane.delete_namespace(home)


def _cleanup(plane: ControlPlane) -> None:
    for path, name in (
        (MUTATING, MUTATING_WEBHOOK_CONFIGURATION),
        (VALIDATING, VALIDATING_WEBHOOK_CONFIGURATION),
    ):
        plane.request("DELETE", f"{path}/{name}")


async def test_a_fresh_install_creates_the_secret_injects_the_ca_and_admits_jobsets(
    install: Install, kube: KubeClient
) -> None:
    a = install.start()
    await install.register(a.webhook_port, a.webhook_port)

    async def created() -> bool:
        return await install.secret() is not None

    await eventually(created, "the Secret created", 60, interval=0.2)
    secret = await install.secret()
    assert secret is not None
    assert sorted(secret["data"]) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    await eventually(install.injected, "the CA injected into both configurations", 60, interval=0.2)
    await eventually(lambda: install.admitted("first"), "a JobSet admitted", 30, interval=0.2)
    assert (a.cert_dir / "tls.crt").read_bytes() == await install.secret_pem("tls.crt")
    assert not (a.cert_dir / "ca.key").exists()  # the CA key stays in the Secret
    served = _served_certificate(a.webhook_port)
    assert served is not None
    tls_crt = x509.load_pem_x509_certificate(await install.secret_pem("tls.crt"))
    assert x509.load_der_x509_certificate(served) == tls_crt
    # The validating webhook answers (the CRD alone would accept this name-too-long JobSet).
    with pytest.raises(ApiError, match=r'admission webhook "vjobset.kb.io" denied'):
        await kube.create(install.jobsets(), _jobset("x" * 60))

    # Something resets the caBundle (re-applying the install manifests does): it comes back.
    path = f"{MUTATING}/{MUTATING_WEBHOOK_CONFIGURATION}"
    configuration = await kube.get(path)
    configuration["webhooks"][0]["clientConfig"].pop("caBundle")
    await kube.replace(path, configuration)
    await eventually(install.injected, "the caBundle injected again", 20, interval=0.2)
    # The API server picks the configuration's new bundle up from its own watch: admission
    # through it works once it has (a refused create leaves nothing behind to conflict).
    await eventually(
        lambda: install.admitted("after-reset"), "admitted with the bundle back", 20, interval=0.2
    )
    assert a.proc.poll() is None


async def test_a_webhook_port_taken_at_start_is_retried_until_it_is_free(
    install: Install, kube: KubeClient
) -> None:
    """Another process holds the port (an old pod on the host network, say): the controller
    logs it, stays unready for the webhook, and serves as soon as the port is released."""
    port = free_port()
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", port))
    holder.listen()
    try:
        a = install.start(webhook_port=port)
        await install.register(port, port)
        await eventually(lambda: "webhook server cannot listen" in a.tail(), "logged", 60)
        status, body = a.ready()
        assert status != 200
        assert "webhook" in body, body
    finally:
        holder.close()
    await eventually(lambda: a.ready()[0] == 200, "ready once the port is free", 45, interval=0.2)
    await eventually(install.injected, "the CA injected", 30, interval=0.2)
    await eventually(lambda: install.admitted("after-free"), "a JobSet admitted", 30, interval=0.2)
    assert a.proc.poll() is None


async def test_rotation_with_a_short_validity_fails_no_request_and_restarts_nothing(
    install: Install, kube: KubeClient, capsys: pytest.CaptureFixture[str]
) -> None:
    # Serving certificate: 12 s, replaced 6 s before expiry; CA: 30 s, replaced likewise.
    a = install.start(
        "--webhook-cert-validity=12s", "--webhook-ca-validity=30s", "--webhook-cert-lookahead=6s"
    )
    await install.register(a.webhook_port, a.webhook_port)
    await eventually(install.injected, "the CA injected", 60, interval=0.2)
    await eventually(
        lambda: install.admitted("warm-up"), "the first JobSet admitted", 30, interval=0.2
    )
    pid = a.proc.pid

    certs: set[int] = set()
    cas: set[int] = set()
    served: set[bytes] = set()
    created, failures = 0, []

    def rotations_seen() -> bool:
        return len(cas) >= 2 and len(certs) >= 4 and len(served) >= 4

    # Admit JobSets without pause until two CAs and four serving certificates were seen in the
    # Secret and on the port (about 30 s at these validities); the bound is only a backstop.
    deadline = time.monotonic() + scaled(120)
    while not rotations_seen():
        if time.monotonic() > deadline:
            break  # the assertions below say which rotation is missing
        try:
            await kube.create(install.jobsets(), _jobset(f"r-{created}"))
        except ApiError as error:
            failures.append(str(error))
        created += 1
        certs.add(_pem_serial(await install.secret_pem("tls.crt")))
        cas.add(_pem_serial(await install.secret_pem("ca.crt")))
        if (der := _served_certificate(a.webhook_port)) is not None:
            served.add(der)
        await asyncio.sleep(0.05)  # the pace of the admission traffic, not a wait for a state

    assert failures == [], f"{len(failures)} of {created} creates refused: {failures[:3]}"
    assert len(cas) >= 2, f"the CA was not rotated ({len(cas)} seen)"
    assert len(certs) >= 4, f"the serving certificate was not rotated ({len(certs)} seen)"
    assert len(served) >= 4, "the server did not pick up the renewed certificates"
    assert a.proc.poll() is None
    assert a.proc.pid == pid
    with capsys.disabled():
        print(
            f"\n  rotation: {created} creates, 0 refused, {len(certs)} serving certificates, "
            f"{len(cas)} CAs, {len(served)} certificates served, one process"
        )


async def test_a_second_replica_uses_the_same_secret_and_serves_it(
    install: Install, control_plane: ControlPlane
) -> None:
    a = install.start()
    await eventually(install.secret_is_complete, "the Secret written by A", 60, interval=0.2)
    first = await install.secret()
    assert first is not None
    b = install.start()

    async def b_ready() -> bool:
        return b.ready()[0] == 200

    await eventually(b_ready, "B ready", 60, interval=0.2)
    after = await install.secret()
    assert after is not None
    assert after["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert (b.cert_dir / "tls.crt").read_bytes() == (a.cert_dir / "tls.crt").read_bytes()
    assert _served_certificate(b.webhook_port) == _served_certificate(a.webhook_port)
    # Mutating calls go to A, validating calls to B: both are trusted through one caBundle.
    await install.register(a.webhook_port, b.webhook_port)
    await eventually(install.injected, "the CA injected", 60, interval=0.2)
    await eventually(lambda: install.admitted("via-both"), "a JobSet admitted", 30, interval=0.2)
    b_secret_writes = [
        e
        for e in control_plane.audit_events(b.user)
        if e["verb"] in WRITES and (e.get("objectRef") or {}).get("resource") == "secrets"
    ]
    assert b_secret_writes == [], "B rewrote a Secret that was valid"


async def test_not_ready_until_the_certificate_is_served(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    # The controller's namespace does not exist yet: the Secret cannot be created, nothing is
    # served, and /readyz says so while /healthz is fine. Then the namespace appears.
    home = f"jobset-later-{uuid.uuid4().hex[:6]}"
    replica = Replica(control_plane.kubeconfig, home, tmp_path / "r", user="admin")
    try:

        async def live() -> bool:
            return _probe(replica.health_port, "/healthz")[0] == 200

        await eventually(live, "healthz", 60, interval=0.2)

        def secret_refused_twice() -> bool:
            # The rotator tried to create the Secret, was refused, and tried again.
            return replica.logged("certificate pass failed; retrying") >= 2

        await eventually(secret_refused_twice, "two refused certificate passes", 60, interval=0.2)
        status, body = replica.ready()
        assert status == 500, body
        assert "[-]webhook failed" in body
        assert _served_certificate(replica.webhook_port) is None
        assert not (replica.cert_dir / "tls.crt").exists()

        control_plane.request("POST", "/api/v1/namespaces", {"metadata": {"name": home}})

        async def ready() -> bool:
            return replica.ready()[0] == 200

        await eventually(ready, "ready once the certificate is served", 60, interval=0.2)
        served = _served_certificate(replica.webhook_port)
        assert served is not None
        on_disk = (replica.cert_dir / "tls.crt").read_bytes()
        assert x509.load_der_x509_certificate(served) == x509.load_pem_x509_certificate(on_disk)
    finally:
        replica.stop()
        control_plane.delete_namespace(home)
