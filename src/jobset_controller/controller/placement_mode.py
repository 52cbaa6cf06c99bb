"""Which exclusive-placement mode is in force: are the pod webhooks really called?

See docs/behaviour.md#exclusive-placement. Serving the pod webhooks is not enough: the API server
calls them only if a webhook configuration routes pods to us (a missing configuration, a wrong
caBundle, an objectSelector that misses, `failurePolicy: Ignore` with an unreachable server all
mean followers are admitted unplaced). Creating exclusive Jobs without affinity in that state
would silently lose exclusivity, so the controller asks the API server itself: a dry-run create
(`dryRun=All`: admission runs, nothing is stored) of two probe pods shaped like a leader and a
follower of a leader/follower Job, in the controller's namespace.

- leader-follower: the leader probe comes back with the leader's affinity term (the mutating
  webhook ran), and the follower probe comes back gated (gate mode) or is refused by `vpod.kb.io`
  (reject mode: the validating webhook ran). New exclusive Jobs carry no affinity.
- affinity-in-job (fallback): anything else, including a probe that fails. New exclusive Jobs get
  the affinity terms in their pod template, as before the pod webhooks existed.

When it probes, and why not on a timer: an idle controller must send nothing (the probe is a POST,
and "an idle minute: 0 writes" is a performance target), and the mode only matters at the moment an
exclusive Job is built. So the probe runs once before the workers start, and after that only on
demand: when a pass is about to create Jobs whose placement depends on the mode (affinity-strategy
exclusive Jobs), the JobSet controller awaits `fresh()`, which probes again first if the last probe
is more than `PROBE_PERIOD` seconds old (single flight: concurrent callers wait for the one probe
under way and share its answer). No Job is therefore ever built from a mode older than
`PROBE_PERIOD`, the bound the periodic probe gave; JobSets without exclusive placement never cause a
probe. One exception, at install time: the webhook configuration (or its caBundle, injected by the
certificate rotator) often reaches the API server seconds after the controller starts, so a
controller that found the fallback mode at start looks again `SETTLE_DELAYS` after it (30 s in all),
then only on demand. A probe the API server could not answer (it failed to call the webhook: the
Service has no ready endpoint until this pod is Ready, which is the usual state at start; or the
request failed) is inconclusive: it holds for `INCONCLUSIVE_PERIOD` only, so the first exclusive
JobSet after the pod turns Ready probes again. The mode is logged at start and on every change,
and exported as the gauge `jobset_exclusive_placement_mode{mode}` (1 for the mode in force, as of
the last probe: on an idle controller that can be long ago).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Final

import structlog
from prometheus_client import CollectorRegistry, Gauge

from jobset_controller.api import (
    EXCLUSIVE_KEY,
    JOB_INDEX_KEY,
    JOB_KEY,
    JOBSET_NAME_KEY,
    REPLICATED_JOB_NAME_KEY,
)
from jobset_controller.api.placement import (
    COMPLETION_INDEX_ANNOTATION,
    LEADER_FOLLOWER,
    PLACEMENT_GATE,
    PLACEMENT_LABEL,
    POD_MUTATING_WEBHOOK,
    POD_VALIDATING_WEBHOOK,
    POD_VALIDATING_WEBHOOK_NAMES,
)
from jobset_controller.controller.resources import PODS
from jobset_controller.runtime.client import ApiError, KubeClient
from jobset_controller.runtime.clock import Clock, RealClock

log = structlog.get_logger("placement-mode")

LEADER_FOLLOWER_MODE: Final = "leader-follower"
FALLBACK_MODE: Final = "affinity-in-job"
PROBE_PERIOD: Final = 30.0
# How long an inconclusive probe (the API server could not reach the webhook, or the request
# itself failed) stands for an answer: the webhook Service has no ready endpoint until this very
# pod is Ready, so the probe at start usually meets that; the next pass that needs the mode then
# asks again instead of building fallback Jobs for a whole PROBE_PERIOD.
INCONCLUSIVE_PERIOD: Final = 1.0
# Seconds between the re-probes of a controller that started in the fallback mode (30 s in all).
SETTLE_DELAYS: Final = (2.0, 4.0, 8.0, 16.0)
_PROBE: Final = "jobset-placement-probe"


def probe_pod(index: int) -> dict[str, Any]:
    """A pod the pod webhooks treat as pod `index` of a leader/follower Job (never stored)."""
    labels = {
        JOBSET_NAME_KEY: _PROBE,
        REPLICATED_JOB_NAME_KEY: "probe",
        JOB_INDEX_KEY: "0",
        JOB_KEY: _PROBE,
        PLACEMENT_LABEL: LEADER_FOLLOWER,
    }
    annotations = {
        JOBSET_NAME_KEY: _PROBE,
        EXCLUSIVE_KEY: "kubernetes.io/hostname",
        COMPLETION_INDEX_ANNOTATION: str(index),
    }
    restricted = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "runAsUser": 65535,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{_PROBE}-{index}",
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "probe",
                    "image": "registry.k8s.io/pause:3.10",
                    "securityContext": restricted,
                }
            ],
        },
    }


def leader_was_mutated(reply: Mapping[str, Any]) -> bool:
    """The leader probe came back with our affinity term on its own job-key."""
    affinity = ((reply.get("spec") or {}).get("affinity") or {}).get("podAffinity") or {}
    for term in affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or ():
        for expression in (term.get("labelSelector") or {}).get("matchExpressions") or ():
            if expression.get("key") == JOB_KEY and _PROBE in (expression.get("values") or ()):
                return True
    return False


def follower_was_handled(reply: Mapping[str, Any] | None, refusal: str | None) -> bool:
    """Gated by our mutating webhook, or refused by our validating webhook."""
    if reply is not None:
        gates = (reply.get("spec") or {}).get("schedulingGates") or ()
        return any(gate.get("name") == PLACEMENT_GATE for gate in gates)
    return refusal is not None and any(
        f'"{name}"' in refusal for name in POD_VALIDATING_WEBHOOK_NAMES
    )


class PlacementMode:
    """The mode in force: `pod_webhooks()` is what a pass reads, `fresh()` what a pass awaits
    before it creates Jobs that depend on the mode (module docstring)."""

    def __init__(
        self,
        client: KubeClient | None,
        namespace: str,
        *,
        follower_mode: str,
        registry: CollectorRegistry | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._client = client
        self._namespace = namespace
        self._follower_mode = follower_mode
        self._clock: Clock = clock or RealClock()
        self._active = False
        self._probed_at: float | None = None  # when the last finished probe started (clock)
        self._valid_for = PROBE_PERIOD  # how long that probe's answer stands
        self._probing = asyncio.Lock()  # one probe at a time; waiters then see it fresh
        self._gauge = Gauge(
            "jobset_exclusive_placement_mode",
            "Exclusive placement mode in force for new Jobs (1): leader-follower (pod webhooks "
            "called by the API server) or affinity-in-job (fallback)",
            ["mode"],
            registry=registry,
        )
        self._show()

    def pod_webhooks(self) -> bool:
        return self._active

    @property
    def name(self) -> str:
        return LEADER_FOLLOWER_MODE if self._active else FALLBACK_MODE

    def _show(self) -> None:
        for mode in (LEADER_FOLLOWER_MODE, FALLBACK_MODE):
            self._gauge.labels(mode).set(1 if mode == self.name else 0)

    def is_fresh(self) -> bool:
        """The last probe started at most `PROBE_PERIOD` seconds ago (`INCONCLUSIVE_PERIOD` for
        a probe that got no answer)."""
        return (
            self._probed_at is not None and self._clock.now() - self._probed_at <= self._valid_for
        )

    async def fresh(self) -> bool:
        """`pod_webhooks()`, probed again first unless the last probe is fresh. Concurrent
        callers share one probe: the first probes, the others wait for it and find it fresh."""
        if not self.is_fresh():
            async with self._probing:
                if not self.is_fresh():
                    await self._check(first=False)
        return self._active

    async def settle(self) -> None:
        """After the first check: while the fallback mode holds, probe again after each of
        `SETTLE_DELAYS` (module docstring); stop at the first leader-follower answer."""
        for delay in SETTLE_DELAYS:
            if self._active:
                return
            await self._clock.sleep(delay)
            await self.check()

    async def check(self, *, first: bool = False) -> bool:
        """Probe once; log the mode at the first check and whenever it changes."""
        async with self._probing:
            return await self._check(first=first)

    async def _check(self, *, first: bool) -> bool:
        started = self._clock.now()
        active, why, conclusive = await self._probe()
        self._probed_at = started
        self._valid_for = PROBE_PERIOD if conclusive else INCONCLUSIVE_PERIOD
        changed = active != self._active
        self._active = active
        self._show()
        if first or changed:
            log.info(
                "exclusive placement mode",
                mode=self.name,
                followers=self._follower_mode if active else None,
                why=why,
            )
        return active

    async def _probe(self) -> tuple[bool, str, bool]:
        """(active, why, conclusive): conclusive False when no answer came back (module
        docstring); the mode is then the fallback, the safe one."""
        if self._client is None:
            return False, "pod webhooks not served (no serving certificate)", True
        path = PODS.path(self._namespace)
        try:
            leader = await self._client.create(path, probe_pod(0), dryRun="All")
        except ApiError as error:
            return False, f"leader probe refused: {error.message}", not _unreached(error)
        except Exception as error:  # a transport failure: stay safe
            return False, f"leader probe failed: {error}", False
        if not leader_was_mutated(leader):
            why = f"the API server does not call the pod mutating webhook ({POD_MUTATING_WEBHOOK})"
            return False, why, True
        reply: dict[str, Any] | None = None
        refusal: str | None = None
        try:
            reply = await self._client.create(path, probe_pod(1), dryRun="All")
        except ApiError as error:
            if _unreached(error):
                return False, f"follower probe refused: {error.message}", False
            refusal = error.message
        except Exception as error:
            return False, f"follower probe failed: {error}", False
        if not follower_was_handled(reply, refusal):
            why = f"followers are not handled by the pod webhooks ({POD_VALIDATING_WEBHOOK})"
            return False, why, True
        return True, "the API server calls the pod webhooks", True


def _unreached(error: ApiError) -> bool:
    """The API server could not call a webhook (its "failed calling webhook" InternalError, as
    when the Service has no ready endpoint): no answer about the mode, not a "no"."""
    return "failed calling webhook" in error.message
