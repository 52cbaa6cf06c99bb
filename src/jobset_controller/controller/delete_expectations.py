"""Jobs, Workloads and PodGroups a pass deleted that the cache still shows live (client-go's
ControllerExpectations, for deletes).

Why, for Jobs: a pass that runs between a restart's DELETE of a Job and the watch event that
shows its `deletionTimestamp` (another Job's event, 0.1-0.5 s later under load) would delete it
again: in the soak's 5-minute mix 61 of 400 deleted Jobs were deleted twice (docs/reliability.md).

Why, for gang scheduling: a resume is held while an old PodGroup of the JobSet is Terminating
(``reconcile.gang.resume_hold``), and the pass reads that from the PodGroup cache's
``deletionTimestamp``. The suspend pass's DELETE is answered before the watch delivers the
change; a resume pass that ran in between would read the old PodGroup as live, create no new one,
and link the new pods to an object about to go. So the controller remembers what it deleted and
shows those objects to the next passes as Terminating (``deletionTimestamp`` = when the delete
was decided) until the cache says so itself.

Guarantees (one test each, tests/unit/controller/test_delete_expectations.py):

1. After ``deleted(uid, at)``, ``view(obj)`` of a cached object with that UID and no
   ``deletionTimestamp`` returns a copy carrying ``at``; the cache's object is not changed.
2. Once the cache's own object has a ``deletionTimestamp``, ``view`` returns it as it is and the
   record is dropped.
3. A record expires ``EXPIRY`` seconds after the delete: by then the watch has delivered it, or
   the delete failed and the object is live after all. Only recent deletes are held in memory.
4. Objects never deleted by us pass through untouched (no copy).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from jobset_controller.runtime.clock import Clock

EXPIRY: Final = 30.0


class DeleteExpectations:
    """UID -> (when the delete was decided, as a timestamp; the monotonic time it was sent)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._deleted: dict[str, tuple[str, float]] = {}

    def __len__(self) -> int:
        return len(self._deleted)

    def deleted(self, uids: Iterable[str], at: str) -> None:
        """Record deletes about to be sent (before sending: no event can come first)."""
        sent = self._clock.now()
        for uid in uids:
            if uid:
                self._deleted[uid] = (at, sent)
        self._expire()

    def view(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        """``obj`` as the pass should see it (guarantees 1, 2 and 4)."""
        if not self._deleted:
            return obj
        metadata = obj.get("metadata") or {}
        uid = str(metadata.get("uid", ""))
        record = self._deleted.get(uid)
        if record is None:
            return obj
        if metadata.get("deletionTimestamp"):
            del self._deleted[uid]
            return obj
        if self._clock.now() - record[1] > EXPIRY:
            del self._deleted[uid]
            return obj
        return {**obj, "metadata": {**metadata, "deletionTimestamp": record[0]}}

    def _expire(self) -> None:
        deadline = self._clock.now() - EXPIRY
        for uid in [uid for uid, (_, sent) in self._deleted.items() if sent < deadline]:
            del self._deleted[uid]
