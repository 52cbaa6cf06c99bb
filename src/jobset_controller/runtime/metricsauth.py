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

Decisions (401, 403, allowed) are remembered for `ttl` seconds (10 by default), keyed by the
SHA-256 of the token with the verb and path, so a scrape costs two small API calls at most every
`ttl` seconds, and removing a RoleBinding takes effect within `ttl`. controller-runtime keeps them
longer (minutes); short is the safer side for revocation and still cheap. At most `max_entries`
decisions are kept (the oldest go first), so a flood of random tokens cannot grow memory.

The token itself is never logged, stored or put in an exception message: only its hash is kept,
and the review bodies that carry it go to the API server and nowhere else.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import structlog

from jobset_controller.runtime.client import ApiError
from jobset_controller.runtime.clock import Clock, RealClock, wait_for
from jobset_controller.runtime.resources import SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS

log = structlog.get_logger("metricsauth")

# POST a body to an API path, return the answer (KubeClient.create has this shape).
Create = Callable[[str, Mapping[str, Any]], Awaitable[dict[str, Any]]]

DEFAULT_TTL: Final = 10.0
DEFAULT_MAX_ENTRIES: Final = 1024
REVIEW_TIMEOUT: Final = 10.0  # controller-runtime's bound on one review call


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


class DelegatingAuth:
    """Authenticates and authorises requests with the API server, remembering answers briefly."""

    def __init__(
        self,
        create: Create,
        *,
        clock: Clock | None = None,
        ttl: float = DEFAULT_TTL,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        timeout: float = REVIEW_TIMEOUT,
    ) -> None:
        self._create = create
        self._clock: Clock = clock or RealClock()
        self._ttl = ttl
        self._max_entries = max_entries
        self._timeout = timeout
        # (token hash, verb, path) -> (expiry on the clock, decision); oldest first.
        self._cache: OrderedDict[tuple[str, str, str], tuple[float, Decision]] = OrderedDict()

    async def decide(self, authorization: str | None, method: str, path: str) -> Decision:
        """The answer for one request, from its Authorization header, method and path."""
        token = bearer_token(authorization)
        if token is None:
            return UNAUTHORIZED
        verb = method.lower()
        key = (hashlib.sha256(token.encode()).hexdigest(), verb, path)
        now = self._clock.now()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            decision = await self._review(token, verb, path)
        except ReviewFailed as failure:
            log.warning("cannot review a metrics request", reason=str(failure))
            return Decision(500, str(failure))
        self._remember(key, now + self._ttl, decision)
        return decision

    def _remember(self, key: tuple[str, str, str], expiry: float, decision: Decision) -> None:
        self._cache.pop(key, None)
        self._cache[key] = (expiry, decision)
        now = self._clock.now()
        while self._cache:
            oldest_key, (oldest_expiry, _) = next(iter(self._cache.items()))
            if len(self._cache) <= self._max_entries and oldest_expiry > now:
                break
            del self._cache[oldest_key]

    async def _review(self, token: str, verb: str, path: str) -> Decision:
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
            return UNAUTHORIZED
        user = status.get("user") or {}
        username = str(user.get("username", ""))
        spec: dict[str, Any] = {
            "user": username,
            "groups": list(user.get("groups") or []),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.get("uid"):
            spec["uid"] = user["uid"]
        if user.get("extra"):
            spec["extra"] = user["extra"]
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
            return ALLOWED
        log.info("metrics request denied", user=username, path=path, verb=verb)
        return Decision(403, f"Authorization denied for user {username}")

    async def _call(self, path: str, body: Mapping[str, Any], what: str) -> dict[str, Any]:
        """One review; every way it can fail becomes ReviewFailed with a message that names
        the failure but never the request body (it holds the token)."""
        try:
            return await wait_for(self._clock, self._create(path, body), self._timeout)
        except ApiError as error:
            raise ReviewFailed(f"{what}: {error.status} {error.reason}".strip()) from None
        except TimeoutError:
            raise ReviewFailed(f"{what}: no answer within {self._timeout:g} s") from None
        except OSError as error:  # TransportError included
            raise ReviewFailed(f"{what}: {type(error).__name__}") from None
