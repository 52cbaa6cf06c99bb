"""dependsOn: a replicatedJob starts once the ones it names reach a status.

See docs/behaviour.md#depends-on.

``Ready``: every Job of the dependency is ready or finished (``ready + failed + succeeded ==
replicas``). ``Complete``: every Job of the dependency succeeded. All listed dependencies must be
reached. This holds while the JobSet is suspended too: a suspended dependency never becomes ready,
so its dependents are not created until the JobSet runs. A dependency that names no replicatedJob
of the spec (admission rejects it) is never reached.
"""

from collections.abc import Mapping

from jobset_controller.api import DependsOn, DependsOnStatus, ReplicatedJob
from jobset_controller.reconcile.counts import ReplicatedJobCounts


def dependency_reached_status(
    dependency: DependsOn,
    replicas: Mapping[str, int],
    counts: Mapping[str, ReplicatedJobCounts],
) -> bool:
    """The replicatedJob ``dependency`` names has reached the status it asks for."""
    expected = replicas.get(dependency.name)
    status = counts.get(dependency.name)
    if expected is None or status is None:
        return False
    if dependency.status == DependsOnStatus.COMPLETE:
        return expected == status.succeeded
    return expected == status.started()


def dependencies_are_reached(
    rjob: ReplicatedJob,
    replicas: Mapping[str, int],
    counts: Mapping[str, ReplicatedJobCounts],
) -> bool:
    """Every dependency of ``rjob`` is reached (true without dependencies)."""
    return all(
        dependency_reached_status(dependency, replicas, counts)
        for dependency in rjob.depends_on or ()
    )
