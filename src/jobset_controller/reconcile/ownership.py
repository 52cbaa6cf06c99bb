"""The controller ownerReference every object the JobSet creates carries.

See docs/behaviour.md#owned-objects.

It makes the JobSet the controller owner (child events enqueue it; children are listed by its UID)
and lets garbage collection remove the children with it; ``blockOwnerDeletion`` makes a
foreground deletion of the JobSet wait for them.
"""

from typing import Any

from jobset_controller.api import API_VERSION, KIND, JobSet


def controller_reference(js: JobSet) -> dict[str, Any]:
    """A controller ownerReference to ``js``."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": js.metadata.name or "",
        "uid": js.metadata.uid or "",
        "controller": True,
        "blockOwnerDeletion": True,
    }
