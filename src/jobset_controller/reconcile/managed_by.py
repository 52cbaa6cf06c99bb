"""spec.managedBy: whose JobSet this is (docs/behaviour.md#managed-by).

Unset, or the reserved ``jobset.sigs.k8s.io/jobset-controller``, means this controller's. Any
other value (Kueue's MultiKueue, for one) means another controller runs it: this one creates
nothing and writes no status, leaving the other's status untouched. Like upstream, an explicitly
empty value counts as another controller's.
"""

from jobset_controller.api import JOBSET_CONTROLLER_NAME, JobSet


def is_managed_by_this_controller(js: JobSet) -> bool:
    """No managedBy, or the built-in controller's name."""
    manager = js.spec.managed_by
    return manager is None or manager == JOBSET_CONTROLLER_NAME
