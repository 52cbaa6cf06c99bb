"""Serving certificates kept in a Secret, on disk, and in webhook configurations' caBundle.

What one pass (`sync`) does, on any replica, leader or not (every replica serves webhooks):

1. Read the Secret from its watch cache; decide with `certs.assess` (keep, re-sign, new CA).
2. If it must change: generate, then write it with a precondition, so replicas cannot fight:
   a missing Secret is created (AlreadyExists: another replica was first), an existing one is
   replaced with the resourceVersion it was read at (Conflict: another replica wrote first).
   The loser writes nothing more; the winner's Secret arrives through the watch and the next
   pass finds it valid and keeps it. So any replica may rotate, and they converge on one Secret.
3. Write ``tls.crt``, ``tls.key`` and ``ca.crt`` to the certificate directory (atomic renames;
   only files whose contents differ), then call `on_files` (the server's TLS reload). The CA key
   never leaves the Secret.
4. Set ``clientConfig.caBundle`` of every webhook in the named webhook configurations to the
   Secret's ``ca.crt`` (a replace with the resourceVersion read; a Conflict waits for the watch).

When passes run: at start, on every watch event of the Secret or of a configuration (so a caBundle
reset by re-applying the install manifests is repaired at once, and a Secret another replica
rotated reaches this replica's disk at once), and at the time the verdict says it could change
(a certificate entering the lookahead window; at most `policy.recheck`). A failed pass (API
refused, no network) is retried with jittered backoff, 1 s doubling to 60 s.

Watches are on single objects (``fieldSelector=metadata.name=...``), so RBAC can grant them by
name and no other Secret is ever read. Nothing here logs certificate or key material.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime
import os
import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from jobset_controller.runtime.certs import (
    CA_FILE,
    CERT_FILE,
    KEY_FILE,
    Action,
    CertPolicy,
    Identity,
    Material,
    assess,
    not_after,
    renew,
)
from jobset_controller.runtime.client import AlreadyExists, Conflict, KubeClient, NotFound
from jobset_controller.runtime.clock import Clock, RandomSource, RealClock
from jobset_controller.runtime.informer import Handlers, Informer, Obj
from jobset_controller.runtime.resources import SECRETS, Resource

log = structlog.get_logger("certificates")

_RETRY_INITIAL = 1.0
_RETRY_MAX = 60.0
# Written to disk for the server (and ca.crt for anyone checking it); the CA key stays out.
_FILES = ((CA_FILE, "ca_bundle", 0o644), (KEY_FILE, "key", 0o600), (CERT_FILE, "cert", 0o644))


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass(frozen=True)
class RotatorSettings:
    """Where the certificates live and what they say."""

    namespace: str
    secret_name: str
    identity: Identity
    cert_dir: Path
    # (kind, name) of each admission webhook configuration whose caBundle is kept current.
    webhook_configurations: tuple[tuple[Resource, str], ...]
    policy: CertPolicy


def inject_ca_bundle(configuration: Obj, ca_bundle: bytes) -> Obj | None:
    """The configuration with every webhook's ``clientConfig.caBundle`` set to `ca_bundle`, or
    None when each already carries it (nothing to write)."""
    encoded = base64.b64encode(ca_bundle).decode()
    hooks = configuration.get("webhooks") or []
    if all((hook.get("clientConfig") or {}).get("caBundle") == encoded for hook in hooks):
        return None
    patched = copy.deepcopy(configuration)
    for hook in patched.get("webhooks") or []:
        hook.setdefault("clientConfig", {})["caBundle"] = encoded
    return patched


def write_files(cert_dir: Path, material: Material) -> bool:
    """Write the files whose contents differ (atomically); True if any was written.

    The key is written before the certificate, and each by a rename, so a reader never sees a
    torn file; a reader between the two renames sees a mismatched pair and keeps its previous one.
    """
    cert_dir.mkdir(parents=True, exist_ok=True)
    changed = False
    for name, attribute, mode in _FILES:
        content: bytes = getattr(material, attribute)
        target = cert_dir / name
        try:
            if target.read_bytes() == content:
                continue
        except OSError:
            pass
        handle, temporary = tempfile.mkstemp(dir=cert_dir, prefix=f".{name}.")
        try:
            os.fchmod(handle, mode)
            os.write(handle, content)
            os.fsync(handle)
        finally:
            os.close(handle)
        try:
            os.replace(temporary, target)
        except OSError:
            os.unlink(temporary)
            raise
        changed = True
    return changed


class CertRotator:
    """Keeps the Secret, the certificate directory and the caBundles in step (module docstring)."""

    def __init__(
        self,
        client: KubeClient,
        settings: RotatorSettings,
        *,
        on_files: Callable[[], object] = lambda: None,
        clock: Clock | None = None,
        rng: RandomSource = random,
        wall: Callable[[], datetime.datetime] = utc_now,
    ) -> None:
        self._client = client
        self.settings = settings
        self._on_files = on_files
        self._clock: Clock = clock or RealClock()
        self._rng = rng
        self._wall = wall
        self._wake = asyncio.Event()
        handlers = Handlers(
            on_add=lambda obj: self._wake.set(),
            on_update=lambda old, new: self._wake.set(),
            on_delete=lambda obj: self._wake.set(),
        )
        self._secret = Informer(
            client,
            SECRETS,
            namespace=settings.namespace,
            field_selector=f"metadata.name={settings.secret_name}",
            handlers=handlers,
            clock=self._clock,
            rng=rng,
        )
        self._configurations = [
            (
                Informer(
                    client,
                    resource,
                    field_selector=f"metadata.name={name}",
                    handlers=handlers,
                    clock=self._clock,
                    rng=rng,
                ),
                resource,
            )
            for resource, name in settings.webhook_configurations
        ]
        # Our last write, and the resourceVersion it replaced: until the watch delivers it, the
        # cache still shows the replaced version, and deciding from that would redo the work.
        self._written: Obj | None = None
        self._replaced_rv: str | None = None
        self._unwritable_dir_warned = False
        self.rotations = 0  # Secret writes this replica made
        self.injections = 0  # caBundle writes this replica made

    async def run(self) -> None:
        """Watch and keep everything current until cancelled."""
        informers = [self._secret, *(informer for informer, _ in self._configurations)]
        watching = [asyncio.create_task(informer.run()) for informer in informers]
        try:
            await self._secret.wait_synced()
            failures = 0
            while True:
                self._wake.clear()
                try:
                    delay = await self.sync()
                    failures = 0
                except asyncio.CancelledError:
                    raise
                except Exception as error:
                    failures += 1
                    base = min(_RETRY_INITIAL * 2 ** (failures - 1), _RETRY_MAX)
                    delay = base * (1 + self._rng.random())
                    log.warning(
                        "certificate pass failed; retrying",
                        error=str(error),
                        retry_in=round(delay, 2),
                    )
                await self._sleep_or_wake(delay)
        finally:
            for task in watching:
                task.cancel()
            await asyncio.gather(*watching, return_exceptions=True)

    async def sync(self) -> float:
        """One pass; returns the seconds until the verdict could change by time alone."""
        s = self.settings
        now = self._wall()
        secret = self._current_secret()
        material = Material.from_secret_data(secret.get("data") if secret else None)
        verdict = assess(material, s.identity, s.policy, now)
        if verdict.action is not Action.KEEP:
            fresh = renew(material, verdict.action, s.identity, s.policy, now)
            try:
                await self._write_secret(secret, fresh)
            except (AlreadyExists, Conflict):
                # Another replica wrote first: its Secret comes through the watch (a wake-up).
                log.info("certificates changed by another writer; reading them again")
                return _RETRY_INITIAL
            self.rotations += 1
            log.info(
                "serving certificates written",
                secret=f"{s.namespace}/{s.secret_name}",
                reason=verdict.reason,
                new_ca=verdict.action is Action.NEW_CA,
                not_after=_iso(not_after(fresh.cert)),
            )
            material = fresh
            verdict = assess(fresh, s.identity, s.policy, now)
        assert material is not None  # renewed above when missing
        self._write_files(material)
        await self._inject(material.ca_bundle)
        return max(0.0, (verdict.next_check - now).total_seconds())

    # ------------------------------------------------------------------------------ steps
    def _current_secret(self) -> Obj | None:
        s = self.settings
        cached = self._secret.store.get(f"{s.namespace}/{s.secret_name}")
        if self._written is not None:
            cached_rv = _rv(cached) if cached is not None else None
            if cached_rv == self._replaced_rv:
                return self._written  # the watch has not delivered our write yet
            self._written = self._replaced_rv = None
        return cached

    async def _write_secret(self, secret: Obj | None, material: Material) -> None:
        s = self.settings
        if secret is None:
            body: Obj = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": s.secret_name, "namespace": s.namespace},
                "type": "Opaque",
                "data": material.secret_data(),
            }
            written = await self._client.create(SECRETS.path(s.namespace), body)
            replaced = None
        else:
            body = copy.deepcopy(secret)
            body["data"] = {**(secret.get("data") or {}), **material.secret_data()}
            path = SECRETS.path(s.namespace, s.secret_name)
            written = await self._client.replace(path, body)  # carries the resourceVersion read
            replaced = _rv(secret)
        self._written, self._replaced_rv = written, replaced

    def _write_files(self, material: Material) -> None:
        try:
            changed = write_files(self.settings.cert_dir, material)
        except OSError as error:
            # A read-only mount of the Secret (upstream's layout): the kubelet updates the files.
            if not self._unwritable_dir_warned:
                log.warning(
                    "cannot write the certificate directory; serving what is there",
                    cert_dir=str(self.settings.cert_dir),
                    error=error.strerror,
                )
                self._unwritable_dir_warned = True
            changed = False
        if changed:
            log.info("certificate files updated", cert_dir=str(self.settings.cert_dir))
        self._on_files()

    async def _inject(self, ca_bundle: bytes) -> None:
        for informer, resource in self._configurations:
            for configuration in informer.store:
                patched = inject_ca_bundle(configuration, ca_bundle)
                if patched is None:
                    continue
                name = configuration["metadata"]["name"]
                try:
                    await self._client.replace(resource.path(name=name), patched)
                except (Conflict, NotFound):
                    continue  # changed or deleted meanwhile: the watch wakes the next pass
                self.injections += 1
                log.info("caBundle injected", kind=resource.plural, name=name)

    async def _sleep_or_wake(self, seconds: float) -> None:
        if self._wake.is_set():
            return
        waits = {
            asyncio.ensure_future(self._wake.wait()),
            asyncio.ensure_future(self._clock.sleep(seconds)),
        }
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
            await asyncio.gather(*waits, return_exceptions=True)


def _rv(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


def _iso(moment: datetime.datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None
