"""Rate limiters with client-go's numbers: 5 ms doubling to 1000 s per item; 10 qps, burst 100."""

import asyncio
import math
from collections.abc import Hashable

import pytest

from jobset_controller.runtime.clock import FakeClock
from jobset_controller.runtime.ratelimit import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    TokenBucket,
    client_throttle,
    default_controller_rate_limiter,
)

# ---------------------------------------------------------------- per-item exponential backoff


@pytest.mark.parametrize(
    ("failures_before", "expected_delay"),
    [
        (0, 0.005),
        (1, 0.010),
        (2, 0.020),
        (3, 0.040),
        (7, 0.640),
        (10, 5.12),
        (17, 655.36),
        (18, 1000.0),
        (40, 1000.0),
    ],
    ids=lambda value: f"n={value}" if isinstance(value, int) else f"{value}s",
)
def test_exponential_backoff_doubles_from_5ms_and_caps_at_1000s(
    failures_before: int, expected_delay: float
) -> None:
    limiter = ItemExponentialFailureRateLimiter()
    for _ in range(failures_before):
        limiter.when("key")
    assert limiter.when("key") == pytest.approx(expected_delay)
    assert limiter.num_requeues("key") == failures_before + 1


def test_exponential_backoff_survives_overflowing_failure_counts() -> None:
    limiter = ItemExponentialFailureRateLimiter()
    delays = [limiter.when("key") for _ in range(3000)]
    assert delays[-1] == 1000.0
    assert max(delays) == 1000.0
    assert limiter.num_requeues("key") == 3000


def test_forget_resets_the_backoff_to_the_base_delay() -> None:
    limiter = ItemExponentialFailureRateLimiter()
    for _ in range(5):
        limiter.when("key")
    limiter.forget("key")
    assert limiter.num_requeues("key") == 0
    assert limiter.when("key") == pytest.approx(0.005)


def test_items_back_off_independently() -> None:
    limiter = ItemExponentialFailureRateLimiter()
    for _ in range(4):
        limiter.when("failing")
    assert limiter.when("fresh") == pytest.approx(0.005)
    assert limiter.when("failing") == pytest.approx(0.080)


@pytest.mark.parametrize(
    ("base_delay", "max_delay", "expected"),
    [(0.001, 1000.0, [0.001, 0.002, 0.004]), (1.0, 60.0, [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0])],
    ids=["item-based-default-1ms", "job-controller-1s-to-60s"],
)
def test_exponential_backoff_with_other_presets(
    base_delay: float, max_delay: float, expected: list[float]
) -> None:
    limiter = ItemExponentialFailureRateLimiter(base_delay=base_delay, max_delay=max_delay)
    assert [limiter.when("key") for _ in expected] == pytest.approx(expected)


# ---------------------------------------------------------------- token bucket


def test_token_bucket_allows_the_burst_then_spaces_tokens_by_qps() -> None:
    bucket = TokenBucket(qps=10, burst=3, clock=FakeClock())
    delays = [bucket.reserve() for _ in range(6)]
    assert delays == pytest.approx([0.0, 0.0, 0.0, 0.1, 0.2, 0.3])


async def test_token_bucket_refills_continuously_up_to_the_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock)
    for _ in range(3):
        bucket.reserve()
    await clock.advance(0.05)
    assert bucket.reserve() == pytest.approx(0.05)  # half a token was refilled
    await clock.advance(100.0)
    assert [bucket.reserve() for _ in range(4)] == pytest.approx([0.0, 0.0, 0.0, 0.1])


async def test_token_bucket_acquire_waits_on_the_clock_for_a_reserved_token() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=2, burst=1, clock=clock)
    await bucket.acquire()  # the burst token: no wait
    second = asyncio.create_task(bucket.acquire())
    await clock.settle()
    assert not second.done()
    await clock.advance(0.25)
    assert not second.done()
    await clock.advance(0.25)
    assert second.done()


@pytest.mark.parametrize(
    ("qps", "burst"),
    [(0.0, 10), (-1.0, 10), (10.0, 0)],
    ids=["zero-qps", "negative-qps", "no-burst"],
)
def test_token_bucket_rejects_settings_that_never_admit(qps: float, burst: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        TokenBucket(qps, burst, clock=FakeClock())


# ------------------------------------------------- --kube-api-qps / --kube-api-burst (client-go)


def test_client_throttle_reads_zero_as_client_gos_defaults() -> None:
    bucket = client_throttle(0.0, 0, clock=FakeClock())
    assert bucket is not None
    delays = [bucket.reserve() for _ in range(11)]
    assert delays[:10] == [0.0] * 10  # burst 10
    assert delays[10] == pytest.approx(1 / 5)  # then 5 per second


@pytest.mark.parametrize("qps", [-1.0, math.nan, math.inf], ids=["negative", "nan", "inf"])
@pytest.mark.parametrize("burst", [500, -1], ids=["burst", "negative-burst"])
def test_client_throttle_is_off_for_a_qps_that_is_not_a_positive_finite_number(
    qps: float, burst: int
) -> None:
    assert client_throttle(qps, burst, clock=FakeClock()) is None


def test_client_throttle_refuses_a_negative_burst_with_a_limit() -> None:
    with pytest.raises(ValueError, match="negative burst"):
        client_throttle(500.0, -1, clock=FakeClock())


def test_client_throttle_keeps_the_stock_settings() -> None:
    bucket = client_throttle(500.0, 500, clock=FakeClock())
    assert bucket is not None
    assert [bucket.reserve() for _ in range(501)][-2:] == pytest.approx([0.0, 1 / 500])


def test_bucket_limiter_delays_after_the_burst_and_keeps_no_item_state() -> None:
    limiter = BucketRateLimiter(qps=10, burst=2, clock=FakeClock())
    assert [limiter.when("a"), limiter.when("a"), limiter.when("b")] == pytest.approx(
        [0.0, 0.0, 0.1]
    )
    limiter.forget("b")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("c") == pytest.approx(0.2)  # forget gives no token back


# ---------------------------------------------------------------- max-of and the default


class FixedLimiter:
    """Always asks for the same delay; records what it was told."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.tries: list[Hashable] = []
        self.forgotten: list[Hashable] = []

    def when(self, item: Hashable) -> float:
        self.tries.append(item)
        return self.delay

    def forget(self, item: Hashable) -> None:
        self.forgotten.append(item)

    def num_requeues(self, item: Hashable) -> int:
        return self.tries.count(item)


def test_max_of_asks_every_limiter_and_waits_the_longest() -> None:
    short, long = FixedLimiter(1.0), FixedLimiter(7.0)
    limiter = MaxOfRateLimiter(short, long)
    assert limiter.when("key") == 7.0
    assert short.tries == ["key"]  # consulted although the other one asked for longer
    assert long.tries == ["key"]
    limiter.forget("key")
    assert short.forgotten == ["key"]
    assert long.forgotten == ["key"]


def test_max_of_reports_the_highest_requeue_count() -> None:
    exponential = ItemExponentialFailureRateLimiter()
    limiter = MaxOfRateLimiter(BucketRateLimiter(clock=FakeClock()), exponential)
    for _ in range(3):
        limiter.when("key")
    assert limiter.num_requeues("key") == 3


def test_max_of_needs_a_limiter() -> None:
    with pytest.raises(ValueError, match="at least one"):
        MaxOfRateLimiter()


def test_default_limiter_does_not_delay_the_first_100_distinct_items_beyond_their_backoff() -> None:
    limiter = default_controller_rate_limiter(clock=FakeClock())
    delays = [limiter.when(f"item-{index}") for index in range(100)]
    assert delays == pytest.approx([0.005] * 100)
    assert limiter.when("item-100") == pytest.approx(0.1)  # the bucket is empty now


def test_default_limiter_spaces_a_mass_failure_at_10_qps() -> None:
    limiter = default_controller_rate_limiter(clock=FakeClock())
    delays = [limiter.when(f"item-{index}") for index in range(1000)]
    assert delays[-1] == pytest.approx(90.0)  # 900 items beyond the burst, 100 ms apart


async def test_default_limiter_lets_item_backoff_dominate_for_one_failing_item() -> None:
    clock = FakeClock()
    limiter = default_controller_rate_limiter(clock=clock)
    delays = []
    for _ in range(20):
        delay = limiter.when("failing")
        delays.append(delay)
        await clock.advance(delay)
    assert delays == pytest.approx([min(0.005 * 2**n, 1000.0) for n in range(20)])
    limiter.forget("failing")
    assert limiter.num_requeues("failing") == 0
    assert limiter.when("failing") == pytest.approx(0.005)
