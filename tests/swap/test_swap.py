"""Live swaps between upstream's controller v0.12.0 and ours, with JobSets in every state
(harness.py's table): an upgrade, a rollback (ours in Gate mode, followers gated at the swap), and
a rolling update with both running at once under leader election.

Each direction checks, in its own namespace:
- at the swap: nothing the JobSets own is deleted or recreated, no restart is counted, no status
  field changes, and the successor writes nothing once it leads until it has reconciled every
  JobSet (the API server's audit log, by ServiceAccount);
- exclusive placement carries over: a follower the Job controller recreates for a Job the other
  controller created is placed in its leader's rack by the successor's pod webhooks, and the
  waiting JobSet's follower is placed once a rack is free;
- then every JobSet reaches what upstream reaches: the held restart completes (restarts stay 1),
  the TTL deletes its JobSet when it expires, the rest stay as they were.
"""

from __future__ import annotations

import subprocess
import sys

from tests.swap.harness import (
    INDEX,
    WAIT,
    Bench,
    Running,
    assert_untouched,
    controller_managers,
    converge,
    create_states,
    delete_a_follower,
    free_the_racks,
    gated,
    jobs,
    placed_in_leaders_rack,
    pods,
    snapshot,
)

from jobset_controller.api.constants import FIELD_MANAGER
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.polling import poll, scaled
from jobset_controller_dev.envtest.processes import free_port

JOBSETS = 9


def stopped(controller: Running) -> None:
    code = controller.stop()
    assert code in (0, None), f"{controller.side} exited {code}:\n{controller.tail()}"


def one_manager_name(cluster: FullCluster, ns: str) -> None:
    """Every JobSet, Job and Service both controllers wrote carries one field manager: the
    "restarting" JobSet's status (upstream's before the swap, ours after it) included."""
    found = controller_managers(cluster, ns)
    assert "JobSet/restarting" in found, found
    assert {name: sorted(m) for name, m in found.items() if m != {FIELD_MANAGER}} == {}


def test_upgrade_upstream_to_ours_touches_nothing_and_places_upstreams_pods(
    cluster: FullCluster, bench: Bench, ns: str
) -> None:
    bench.register_webhooks()
    config = bench.configuration("upgrade")
    upstream = bench.start_upstream(config, "upgrade-upstream")
    try:
        create_states(cluster, ns, waiting_follower="refused")
        bench.wait_idle(upstream, JOBSETS)
        before = snapshot(cluster, ns)
    finally:
        stopped(upstream)  # SIGTERM, as a rollout does (upstream keeps the Lease until it expires)
    ours = bench.start_ours(config, "upgrade-ours")
    try:
        bench.wait_idle(ours, JOBSETS)
        assert bench.writes(ours) == [], "ours wrote before anything moved"
        assert_untouched(before, snapshot(cluster, ns))
        # The Job controller recreates a follower of a Job upstream created: ours places it.
        job = delete_a_follower(cluster, ns)
        poll(lambda: placed_in_leaders_rack(cluster, ns, job), f"{job}: follower in its rack", WAIT)
        free_the_racks(cluster, ns)
        poll(lambda: placed_in_leaders_rack(cluster, ns, "waiting-w-0"), "waiting: placed", WAIT)
        converge(cluster, ns, before)
        one_manager_name(cluster, ns)
    finally:
        stopped(ours)


def test_rollback_ours_to_upstream_with_gated_followers(
    cluster: FullCluster, bench: Bench, ns: str
) -> None:
    bench.register_webhooks()
    ours = bench.start_ours(bench.configuration("rollback-ours", followers="Gate"), "rollback-ours")
    try:
        create_states(cluster, ns, waiting_follower="gated")
        bench.wait_idle(ours, JOBSETS)
        before = snapshot(cluster, ns)
    finally:
        stopped(ours)
    assert "followers still wait behind the exclusive-placement gate" in ours.log.read_text()
    upstream = bench.start_upstream(bench.configuration("rollback-upstream"), "rollback-upstream")
    try:
        bench.wait_idle(upstream, JOBSETS)
        # Upstream tries to create the new attempt's Jobs of the JobSet ours left mid-restart
        # (their names are still held by the old attempt's Jobs in foreground deletion): the
        # API server refuses each with 409 and upstream records the failure as an Event, again
        # on every retry. That is upstream's own behaviour in this state (the differential
        # tests' allow-list names its AlreadyExists Events); whether a retry falls before or
        # after the idle check is timing. It may also write a finished JobSet's status again
        # (seen once in CI for "completed" and "failed"), which assert_untouched compares
        # field by field. What it must not do is change anything:
        changed = [
            w
            for w in bench.writes(upstream, accepted_only=True)
            if w[2] not in ("events", "jobsets/status")
        ]
        assert changed == []
        assert_untouched(before, snapshot(cluster, ns))
        # Upstream's webhooks place the recreated follower of a Job ours created, as ours did.
        job = delete_a_follower(cluster, ns)
        poll(lambda: placed_in_leaders_rack(cluster, ns, job), f"{job}: follower in its rack", WAIT)
        # The hazard: the waiting Job's leader gets a rack, and its follower, gated by ours,
        # has nobody to release it under upstream...
        (follower,) = [
            p for p in pods(cluster, ns, "waiting") if p["metadata"]["annotations"][INDEX] == "1"
        ]
        free_the_racks(cluster, ns)

        def leader_bound() -> bool:
            found = pods(cluster, ns, "waiting")
            return any(
                p["metadata"]["annotations"][INDEX] == "0" and p["spec"].get("nodeName")
                for p in found
            )

        poll(leader_bound, "waiting: leader bound", WAIT)
        (still,) = [
            p for p in pods(cluster, ns, "waiting") if p["metadata"]["annotations"][INDEX] == "1"
        ]
        assert gated(still)
        # ... until the documented command places it (docs/operations.md#rollback).
        release = subprocess.run(
            [sys.executable, "-m", "jobset_controller", "release-followers", "-A", "--wait",
             "--timeout", f"{scaled(60):g}", "--kubeconfig", str(cluster.kubeconfig)],
            capture_output=True, text=True, timeout=scaled(120), check=False,
        )  # fmt: skip
        assert release.returncode == 0, release.stdout + release.stderr
        assert f"pod {ns}/{follower['metadata']['name']} released" in release.stdout
        poll(lambda: placed_in_leaders_rack(cluster, ns, "waiting-w-0"), "waiting: placed", WAIT)
        (placed,) = [
            p for p in pods(cluster, ns, "waiting") if p["metadata"]["annotations"][INDEX] == "1"
        ]
        assert placed["metadata"]["uid"] == follower["metadata"]["uid"]  # not deleted
        assert all(
            (j.get("status") or {}).get("failed", 0) == 0 for j in jobs(cluster, ns, "waiting")
        )
        converge(cluster, ns, before)
        one_manager_name(cluster, ns)
    finally:
        stopped(upstream)


def test_rolling_update_one_writer_at_a_time(cluster: FullCluster, bench: Bench, ns: str) -> None:
    old_port, new_port = bench.webhook_port, free_port()
    bench.register_webhooks(old_port)
    upstream = bench.start_upstream(bench.configuration("rolling-upstream"), "rolling-upstream")
    ours: Running | None = None
    try:
        create_states(cluster, ns, waiting_follower="refused")
        bench.wait_idle(upstream, JOBSETS)
        before = snapshot(cluster, ns)
        holder = bench.lease_holder()
        assert holder
        # The new replica starts beside the old one (a standby), and the webhook Service gains
        # its endpoint.
        ours = bench.start_ours(bench.configuration("rolling-ours", port=new_port), "rolling-ours")
        bench.register_webhooks(new_port)
        assert bench.lease_holder() == holder
        stopped(upstream)
        stopped_at = bench.writes(upstream)[-1][0] if bench.writes(upstream) else None
        poll(lambda: bench.lease_holder() not in ("", holder), "ours takes the Lease", WAIT)
        bench.wait_idle(ours, JOBSETS)
        assert_untouched(before, snapshot(cluster, ns))
        job = delete_a_follower(cluster, ns)
        poll(lambda: placed_in_leaders_rack(cluster, ns, job), f"{job}: follower in its rack", WAIT)
        free_the_racks(cluster, ns)
        poll(lambda: placed_in_leaders_rack(cluster, ns, "waiting-w-0"), "waiting: placed", WAIT)
        converge(cluster, ns, before)
        # Exactly one writer at a time: every write of upstream's precedes every write of ours.
        ours_writes = bench.writes(ours)
        assert ours_writes, "ours never wrote"
        if stopped_at is not None:
            assert stopped_at < ours_writes[0][0], (stopped_at, ours_writes[0])
        assert not bench.writes(upstream, since=ours_writes[0][0])
    finally:
        if ours is not None:
            stopped(ours)
        stopped(upstream)
