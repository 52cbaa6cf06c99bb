"""The process's API clients: the one every part shares, and the metrics endpoint's own.

Belongs here: which clients a run opens and with what budget. The metrics endpoint's token and
access reviews go through a client of their own (`servers.REVIEW_CLIENT_QPS`), so a flood of
scrapes with new tokens cannot spend the reconciles' QPS budget.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import structlog
from prometheus_client import CollectorRegistry

from jobset_controller.manager import servers
from jobset_controller.manager.environment import ManagerOptions, user_agent
from jobset_controller.runtime.client import ClientSettings, KubeClient
from jobset_controller.runtime.clock import Clock, RandomSource
from jobset_controller.runtime.kubeconfig import load as load_access

log = structlog.get_logger("manager")


class CredentialsError(Exception):
    """No cluster credentials could be loaded (logged already: one line, no traceback)."""


@dataclass(frozen=True)
class Clients:
    main: KubeClient
    reviews: KubeClient


async def connect(
    options: ManagerOptions,
    stack: contextlib.AsyncExitStack,
    registry: CollectorRegistry,
    clock: Clock,
    rng: RandomSource,
) -> Clients:
    """Both clients, each closed when `stack` unwinds; CredentialsError when the kubeconfig (or
    the in-cluster config) cannot be loaded."""
    try:
        access = await load_access(options.kubeconfig, None)
    except Exception as problem:  # a bad kubeconfig or no in-cluster config: say so, no trace
        log.error("cannot load cluster credentials", error=str(problem))
        raise CredentialsError(str(problem)) from problem
    main = KubeClient.for_access(
        access,
        settings=ClientSettings(
            qps=options.effective_qps, burst=options.effective_burst, user_agent=user_agent()
        ),
        registry=registry,
        clock=clock,
        rng=rng,
    )
    stack.push_async_callback(main.close)
    reviews = KubeClient.for_access(
        access,
        settings=ClientSettings(
            qps=servers.REVIEW_CLIENT_QPS,
            burst=servers.REVIEW_CLIENT_BURST,
            user_agent=user_agent("metrics-auth"),
        ),
        clock=clock,
        rng=rng,
    )
    stack.push_async_callback(reviews.close)
    return Clients(main, reviews)
