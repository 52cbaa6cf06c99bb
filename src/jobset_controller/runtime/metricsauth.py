"""Who may read /metrics: the API server decides (TokenReview, then SubjectAccessReview).

Why delegate: the metrics name every namespace and JobSet the controller handles, and a scraper
already holds a Kubernetes identity (Prometheus's ServiceAccount token). Asking the API server
keeps one source of truth for who may read them, the RBAC a cluster admin already manages: a
ClusterRole granting `get` on the non-resource URL `/metrics` (the shipped `metrics-reader`).
This is what controller-runtime's metrics filter does, so an upstream ServiceMonitor with a
bearer token works unchanged.

The answer for a request:

- no `Authorization: Bearer <token>` header, or a token the TokenReview does not authenticate:
  401 "Unauthorized";
- authenticated, but the SubjectAccessReview (the user, groups, uid and extra of the TokenReview;
  non-resource `path` = the request path, `verb` = the HTTP method in lowercase) denies it: 403
  "Authorization denied for user <name>";
- the API server cannot be asked (an error answer, a timeout, no connection): 500, and nothing is
  remembered, so the next scrape asks again;
- otherwise the request is served.

Answers are remembered, as kube-apiserver remembers its webhooks' answers, so that a scraper
costs two small API calls every few minutes and a flood of requests cannot become a flood of
reviews (issue 24: 300 random tokens made 300 TokenReviews):

- TokenReview, keyed by an HMAC-SHA256 of the token under a key made at start (the token is not
  kept, and a hash cannot be matched against tokens computed elsewhere): an authenticated identity
  for `authenticated_ttl` = 2 min, kube-apiserver's `--authentication-token-webhook-cache-ttl`
  default (`WebHookAuthenticationOptions{CacheTTL: 2 * time.Minute}`, passed as both TTLs of
  `tokencache.New(..., false, ttl, ttl)`: errors are not cached); a token it does not
  authenticate for `unauthenticated_ttl` = 30 s, shorter than the API server's 2 min on the
  side of a token that was refused only while it was being issued, and equal to the
  authorizer's negative TTL below.
- SubjectAccessReview, keyed by the identity the TokenReview gave (user, uid, groups, extra) with
  the verb and path: allowed for `allowed_ttl` = 5 min, denied for `denied_ttl` = 30 s,
  kube-apiserver's `--authorization-webhook-cache-authorized-ttl` and `...-unauthorized-ttl`
  defaults (`WebhookCacheAuthorizedTTL: 5 * time.Minute, WebhookCacheUnauthorizedTTL:
  30 * time.Second`). So removing a scraper's RoleBinding takes effect within 5 min, as it does
  for a webhook-authorised request to the API server itself; granting one within 30 s.
- A failure to ask (an error answer, a timeout, no connection) is never remembered: 500 now, and
  the next scrape asks again.

At most `max_in_flight` reviews are sent at once (4; the rest wait their turn, each for at most
`timeout` seconds, then 500), and requests with the same token while its review is under way
share that review instead of sending their own, as the API server's token cache does
(singleflight). At most `max_entries` answers of each kind are kept (expired ones and then the
oldest go first), so random tokens cannot grow memory.

The token itself is never logged, stored or put in an exception message: only its HMAC is kept,
and the review bodies that carry it go to the API server and nowhere else.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

import structlog

from jobset_controller.runtime.client import ApiError
from jobset_controller.runtime.clock import Clock, RealClock, wait_for
from jobset_controller.runtime.resources import SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS

log = structlog.get_logger("metricsauth")

# POST a body to an API path, return the answer (KubeClient.create has this shape).
Create = Callable[[str, Mapping[str, Any]], Awaitable[dict[str, Any]]]

AUTHENTICATED_TTL: Final = 120.0  # kube-apiserver --authentication-token-webhook-cache-ttl
UNAUTHENTICATED_TTL: Final = 30.0
ALLOWED_TTL: Final = 300.0  # kube-apiserver --authorization-webhook-cache-authorized-ttl
DENIED_TTL: Final = 30.0  # kube-apiserver --authorization-webhook-cache-unauthorized-ttl
DEFAULT_MAX_ENTRIES: Final = 1024
DEFAULT_MAX_IN_FLIGHT: Final = 4
REVIEW_TIMEOUT: Final = 10.0  # controller-runtime's bound on one review call

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True)
class Decision:
    """The HTTP status to answer with (200 means serve the request) and the refusal text."""

    status: int
    message: str = ""

    @property
    def allowed(self) -> bool:
        return self.status == 200


ALLOWED: Final = Decision(200)
UNAUTHORIZED: Final = Decision(401, "Unauthorized")


@dataclass(frozen=True)
class Identity:
    """Who a token belongs to, as the TokenReview said: what the SubjectAccessReview asks about."""

    username: str
    uid: str
    groups: tuple[str, ...]
    extra: tuple[tuple[str, tuple[str, ...]], ...]


class ReviewFailed(Exception):
    """The API server could not be asked; the request gets a 500 and nothing is cached."""


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (scheme case-insensitive)."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


class _Remembered(Generic[K, V]):
    """Answers with an expiry each on the clock, at most `max_entries`, and the reviews under
    way per key, so that a second asker waits for the first one's answer."""

    def __init__(self, clock: Clock, max_entries: int) -> None:
        self._clock = clock
        self._max_entries = max_entries
        self._answers: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._asking: dict[K, asyncio.Future[V]] = {}  # reviews under way

    def __len__(self) -> int:
        return len(self._answers)

    def remembered_keys(self) -> list[K]:
        return list(self._answers)

    async def get(self, key: K, ask: Callable[[], Awaitable[tuple[V, float]]]) -> V:
        """The remembered answer, or the one under way, or ``ask()``'s (remembered for the
        seconds it returns with it). A failure of ``ask`` reaches every waiter, remembered by
        none.

        The review runs in a task of its own, shielded from each asker: one whose client went
        away must not cancel the review the others wait for (the API server's token cache
        detaches its shared lookup from the first caller's context for the same reason).
        """
        remembered = self._answers.get(key)
        if remembered is not None and remembered[0] > self._clock.now():
            return remembered[1]
        task = self._asking.get(key)
        if task is None:
            task = asyncio.ensure_future(self._ask(key, ask))
            self._asking[key] = task
            task.add_done_callback(lambda done: self._done(key, done))
        return await asyncio.shield(task)

    async def _ask(self, key: K, ask: Callable[[], Awaitable[tuple[V, float]]]) -> V:
        value, ttl = await ask()
        self._remember(key, self._clock.now() + ttl, value)
        return value

    def _done(self, key: K, task: asyncio.Future[V]) -> None:
        if self._asking.get(key) is task:
            del self._asking[key]
        if not task.cancelled():
            task.exception()  # retrieved, even when every asker has gone: no warning

    def _remember(self, key: K, expiry: float, value: V) -> None:
        self._answers.pop(key, None)
        self._answers[key] = (expiry, value)
        now = self._clock.now()
        while self._answers:
            oldest_key, (oldest_expiry, _) = next(iter(self._answers.items()))
            if len(self._answers) <= self._max_entries and oldest_expiry > now:
                break
            del self._answers[oldest_key]


class DelegatingAuth:
    """Authenticates and authorises requests with the API server, remembering the answers
    (module docstring: the TTLs and why)."""

    def __init__(
        self,
        create: Create,
        *,
        clock: Clock | None = None,
        authenticated_ttl: float = AUTHENTICATED_TTL,
        unauthenticated_ttl: float = UNAUTHENTICATED_TTL,
        allowed_ttl: float = ALLOWED_TTL,
        denied_ttl: float = DENIED_TTL,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        timeout: float = REVIEW_TIMEOUT,
    ) -> None:
        self._create = create
        self._clock: Clock = clock or RealClock()
        self._ttls = (authenticated_ttl, unauthenticated_ttl, allowed_ttl, denied_ttl)
        self._timeout = timeout
        self._slots = asyncio.Semaphore(max_in_flight)
        self._hmac_key = os.urandom(32)
        # token HMAC -> who it is (None: not authenticated)
        self._tokens: _Remembered[str, Identity | None] = _Remembered(self._clock, max_entries)
        # (identity, verb, path) -> allowed
        self._access: _Remembered[tuple[Identity, str, str], bool] = _Remembered(
            self._clock, max_entries
        )

    async def decide(self, authorization: str | None, method: str, path: str) -> Decision:
        """The answer for one request, from its Authorization header, method and path."""
        token = bearer_token(authorization)
        if token is None:
            return UNAUTHORIZED
        verb = method.lower()
        digest = hmac.new(self._hmac_key, token.encode(), hashlib.sha256).hexdigest()
        try:
            identity = await self._tokens.get(digest, lambda: self._authenticate(token))
            if identity is None:
                return UNAUTHORIZED
            allowed = await self._access.get(
                (identity, verb, path), lambda: self._authorize(identity, verb, path)
            )
        except ReviewFailed as failure:
            log.warning("cannot review a metrics request", reason=str(failure))
            return Decision(500, str(failure))
        if allowed:
            return ALLOWED
        return Decision(403, f"Authorization denied for user {identity.username}")

    async def _authenticate(self, token: str) -> tuple[Identity | None, float]:
        authenticated_ttl, unauthenticated_ttl, _, _ = self._ttls
        review = await self._call(
            TOKEN_REVIEWS.path(),
            {
                "apiVersion": TOKEN_REVIEWS.api_version,
                "kind": "TokenReview",
                "spec": {"token": token},
            },
            "Authentication failed",
        )
        status = review.get("status") or {}
        if not status.get("authenticated"):
            return None, unauthenticated_ttl
        user = status.get("user") or {}
        extra = user.get("extra") or {}
        identity = Identity(
            username=str(user.get("username", "")),
            uid=str(user.get("uid") or ""),
            groups=tuple(str(group) for group in user.get("groups") or ()),
            extra=tuple(
                sorted((str(key), tuple(str(v) for v in values)) for key, values in extra.items())
            ),
        )
        return identity, authenticated_ttl

    async def _authorize(self, identity: Identity, verb: str, path: str) -> tuple[bool, float]:
        _, _, allowed_ttl, denied_ttl = self._ttls
        spec: dict[str, Any] = {
            "user": identity.username,
            "groups": list(identity.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if identity.uid:
            spec["uid"] = identity.uid
        if identity.extra:
            spec["extra"] = {key: list(values) for key, values in identity.extra}
        access = await self._call(
            SUBJECT_ACCESS_REVIEWS.path(),
            {
                "apiVersion": SUBJECT_ACCESS_REVIEWS.api_version,
                "kind": "SubjectAccessReview",
                "spec": spec,
            },
            "Authorization failed",
        )
        if (access.get("status") or {}).get("allowed"):
            return True, allowed_ttl
        log.info("metrics request denied", user=identity.username, path=path, verb=verb)
        return False, denied_ttl

    async def _call(self, path: str, body: Mapping[str, Any], what: str) -> dict[str, Any]:
        """One review, once one of the `max_in_flight` slots is free; every way it can fail
        becomes ReviewFailed with a message that names the failure but never the request body
        (it holds the token). The wait for a slot and the call share the one `timeout`."""
        try:
            return await wait_for(self._clock, self._call_in_slot(path, body), self._timeout)
        except ApiError as error:
            raise ReviewFailed(f"{what}: {error.status} {error.reason}".strip()) from None
        except TimeoutError:
            raise ReviewFailed(f"{what}: no answer within {self._timeout:g} s") from None
        except OSError as error:  # TransportError included
            raise ReviewFailed(f"{what}: {type(error).__name__}") from None

    async def _call_in_slot(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        async with self._slots:
            return await self._create(path, body)
