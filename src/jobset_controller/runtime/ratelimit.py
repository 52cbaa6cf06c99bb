"""Rate limiters: how long an item must wait before it is retried, and a plain token bucket.

Every limiter answers three questions about an item (`RateLimiter`):

- `when(item)`: how many seconds to wait before the next try. Calling it RECORDS a try: the
  exponential limiter counts one more failure, the bucket limiter spends a token.
- `forget(item)`: the item succeeded or was given up on; drop its failure history. Forgetting to
  call it keeps the item's count (and its memory) for ever.
- `num_requeues(item)`: how many failures are on record for the item.

The numbers of client-go's defaults live in `default_controller_rate_limiter`: the larger of a
per-item exponential backoff (5 ms doubling, capped at 1000 s) and an overall token bucket
(10 qps, burst 100), so one failing key backs off on its own and a mass failure cannot flood
the API server.

`TokenBucket` is also usable on its own, with `await acquire()`, for client-side QPS/burst
throttling of API requests; `client_throttle` reads `--kube-api-qps`/`--kube-api-burst` as
client-go's rest.Config does.

Single event loop: no locks.
"""

import math
from collections.abc import Hashable
from typing import Protocol

from jobset_controller.runtime.clock import Clock

# client-go's rest.DefaultQPS / rest.DefaultBurst: what a QPS or burst left at 0 means.
CLIENT_GO_DEFAULT_QPS = 5.0
CLIENT_GO_DEFAULT_BURST = 10


def client_throttle(qps: float, burst: int, *, clock: Clock) -> "TokenBucket | None":
    """The client-side throttle for a QPS and burst read as client-go reads rest.Config's.

    0 means client-go's default (5 qps, burst 10). A QPS that is not a positive finite number
    (negative, NaN, +Inf) means no client-side limit: None. Upstream's users turn the limiter
    off with a negative QPS (leaving it to the API server's priority and fairness), and a bucket
    would misbehave on the others (NaN tokens never refill; an infinite rate makes NaN of an
    elapsed 0). A negative burst with a limit is refused (ValueError): client-go's bucket would
    refuse every request.
    """
    qps = CLIENT_GO_DEFAULT_QPS if qps == 0 else qps
    burst = CLIENT_GO_DEFAULT_BURST if burst == 0 else burst
    if not (qps > 0 and math.isfinite(qps)):
        return None
    if burst < 0:
        raise ValueError(f"a negative burst ({burst}) with a QPS limit ({qps:g}) allows nothing")
    return TokenBucket(qps, burst, clock=clock)


class RateLimiter(Protocol):
    """The three-method interface the work queue uses for `add_rate_limited`."""

    def when(self, item: Hashable) -> float:
        """Record one more try of `item` and return the seconds to wait before it."""
        ...

    def forget(self, item: Hashable) -> None:
        """Drop what is recorded about `item` (call on success or when giving up)."""
        ...

    def num_requeues(self, item: Hashable) -> int:
        """How many tries of `item` are on record."""
        ...


class ItemExponentialFailureRateLimiter:
    """Per-item backoff: the n-th consecutive failure (from 0) waits base_delay * 2**n, capped.

    With the defaults: 5 ms, 10 ms, 20 ms, ... 655.36 s (n=17), then 1000 s from n=18.
    The doubling is computed with `math.ldexp`, and an overflow (a count near 1024 or more)
    is read as "past the cap", so huge failure counts cannot raise.
    """

    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._failures: dict[Hashable, int] = {}

    def when(self, item: Hashable) -> float:
        exponent = self._failures.get(item, 0)
        self._failures[item] = exponent + 1
        try:
            backoff = math.ldexp(self._base_delay, exponent)
        except OverflowError:
            return self._max_delay
        return min(backoff, self._max_delay)

    def forget(self, item: Hashable) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: Hashable) -> int:
        return self._failures.get(item, 0)


class TokenBucket:
    """A bucket of `burst` tokens refilled continuously at `qps` tokens per second.

    Taking a token RESERVES it: the balance may go negative, and the caller waits until the
    balance it left behind has been refilled back to zero. So after a burst, successive takers
    are spaced exactly 1/qps apart, in the order they asked, without polling.

    A cancelled `acquire` keeps its reservation (the token is not given back); that errs on the
    side of sending less.
    """

    def __init__(self, qps: float, burst: int, *, clock: Clock) -> None:
        if qps <= 0:
            raise ValueError(f"qps must be positive, got {qps}")
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        self._qps = qps
        self._burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._refilled_at = clock.now()

    @property
    def qps(self) -> float:
        return self._qps

    @property
    def burst(self) -> int:
        return self._burst

    def reserve(self) -> float:
        """Take one token now; return the seconds until it is actually available (0 if now)."""
        self._refill()
        self._tokens -= 1.0
        if self._tokens >= 0:
            return 0.0
        return -self._tokens / self._qps

    async def acquire(self) -> None:
        """Take one token, sleeping on the clock until it is available."""
        delay = self.reserve()
        if delay > 0:
            await self._clock.sleep(delay)

    def _refill(self) -> None:
        now = self._clock.now()
        elapsed = max(now - self._refilled_at, 0.0)
        self._tokens = min(self._tokens + elapsed * self._qps, float(self._burst))
        self._refilled_at = now


class BucketRateLimiter:
    """One token bucket shared by all items: `when` is the wait for a reserved token.

    It limits the overall retry rate, first tries included, and keeps no per-item state, so
    `forget` does nothing and `num_requeues` is always 0.
    """

    def __init__(self, qps: float = 10.0, burst: int = 100, *, clock: Clock) -> None:
        self._bucket = TokenBucket(qps, burst, clock=clock)

    def when(self, item: Hashable) -> float:
        return self._bucket.reserve()

    def forget(self, item: Hashable) -> None:
        return None

    def num_requeues(self, item: Hashable) -> int:
        return 0


class MaxOfRateLimiter:
    """Combines limiters: the wait is the longest any of them asks for.

    Every limiter is consulted on every `when` (none is skipped because another already asks for
    longer), so each keeps its own accounting: the bucket spends its token, the per-item limiter
    counts the failure.
    """

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self._limiters = limiters

    def when(self, item: Hashable) -> float:
        return max(limiter.when(item) for limiter in self._limiters)

    def forget(self, item: Hashable) -> None:
        for limiter in self._limiters:
            limiter.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        return max(limiter.num_requeues(item) for limiter in self._limiters)


def default_controller_rate_limiter(*, clock: Clock) -> MaxOfRateLimiter:
    """client-go's controller default: max(5 ms..1000 s per item, 10 qps / burst 100 overall)."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(base_delay=0.005, max_delay=1000.0),
        BucketRateLimiter(qps=10.0, burst=100, clock=clock),
    )
