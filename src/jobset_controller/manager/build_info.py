"""`jobset_build_info`: which build of the controller a scrape came from.

Why a metric: a fleet runs images of several releases and architectures at once during a rollout,
and a dashboard or alert needs to tell them apart without reading pod specs. controller-runtime
projects publish the same thing as a `*_build_info` gauge that is always 1 and carries the facts
as labels, so it can be joined onto any other series (`* on(pod) group_left(version)`).
"""

from __future__ import annotations

import platform

from prometheus_client import CollectorRegistry, Gauge

from jobset_controller import __version__
from jobset_controller.manager.environment import go_arch


def register_build_info(registry: CollectorRegistry) -> Gauge:
    """The gauge, set to 1 with the labels `version` (the package's), `python` (the running
    interpreter's, e.g. 3.11.2) and `arch` (Go's name: amd64, arm64)."""
    gauge = Gauge(
        "jobset_build_info",
        "The controller's build: its version, the Python running it and the machine's "
        "architecture, as labels; always 1.",
        ["version", "python", "arch"],
        registry=registry,
    )
    gauge.labels(version=__version__, python=platform.python_version(), arch=go_arch()).set(1)
    return gauge
