"""Leadership: the Lease that lets one replica write, on a client of its own.

Belongs here: building the elector from the Configuration's `leaderElection` section and the
lease client's own budget. Why its own client (own throttle and connections, like
controller-runtime's leader-election client): a burst of 50-wide creates on the main client must
never delay a renewal.

What leadership guards: the LEADER group (the controllers' workers and the exclusive-placement
probe), which is all that writes JobSets' children and status. Before the Lease, a replica
already reads (informers), serves probes, metrics and admissions, and keeps the webhook
certificate (the rotator writes its Secret and caBundles on every replica, as upstream's does).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from jobset_controller.manager.environment import (
    ManagerOptions,
    leader_election_namespace,
    user_agent,
)
from jobset_controller.runtime.client import ClientSettings, KubeClient
from jobset_controller.runtime.clock import Clock, RandomSource
from jobset_controller.runtime.leaderelection import LeaderElectionConfig, LeaderElector

# The lease client's budget: a renewal every retryPeriod needs a handful of requests per second.
LEASE_CLIENT_QPS = 20.0
LEASE_CLIENT_BURST = 30


async def connect_lease_client(
    options: ManagerOptions, *, clock: Clock, rng: RandomSource
) -> KubeClient:
    return await KubeClient.connect(
        kubeconfig=options.kubeconfig,
        settings=ClientSettings(
            qps=LEASE_CLIENT_QPS,
            burst=LEASE_CLIENT_BURST,
            user_agent=user_agent("leader-election"),
        ),
        clock=clock,
        rng=rng,
    )


def elector(
    options: ManagerOptions,
    client: KubeClient,
    *,
    identity: str,
    registry: CollectorRegistry,
    clock: Clock,
    rng: RandomSource,
) -> LeaderElector:
    le = options.config.leader_election
    return LeaderElector(
        client,
        LeaderElectionConfig(
            namespace=leader_election_namespace(le.resource_namespace),
            identity=identity,
            name=le.resource_name,
            lease_duration=le.lease_duration,
            renew_deadline=le.renew_deadline,
            retry_period=le.retry_period,
        ),
        registry=registry,
        clock=clock,
        rng=rng,
    )
