"""client-go's rest_client_* metrics, as controller-runtime exports them, for a KubeClient given
a registry (runtime/client.py). Their own module so that a process keeping no registry never
loads prometheus_client: the in-place restart agent runs in every pod of a JobSet."""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram

REQUEST_BUCKETS: Final = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)


class RestClientMetrics:
    """``rest_client_requests_total{code,method,host}`` and
    ``rest_client_request_duration_seconds{verb,host}``, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.requests = Counter(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            ["code", "method", "host"],
            registry=registry,
        )
        self.latency = Histogram(
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host.",
            ["verb", "host"],
            buckets=REQUEST_BUCKETS,
            registry=registry,
        )
