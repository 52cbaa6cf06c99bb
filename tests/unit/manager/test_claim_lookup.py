"""The webhook's existing-claim lookup costs the API server a request only for a claim that may
exist (manager/servers.py `claim_lookup`): the controller's PVC cache answers "absent" itself
once it has listed; before that, every lookup is live."""

from __future__ import annotations

from typing import Any

from jobset_controller.manager.servers import claim_lookup
from jobset_controller.runtime.client import NotFound


class Claims:
    def __init__(self, names: set[str], *, synced: bool) -> None:
        self.store, self._synced = names, synced

    def has_synced(self) -> bool:
        return self._synced


class Server:
    """The API server's answers to GETs of claims; records every path asked."""

    def __init__(self, existing: set[str]) -> None:
        self.existing = existing
        self.asked: list[str] = []

    async def get(self, path: str) -> dict[str, Any]:
        self.asked.append(path)
        if path.rsplit("/", 1)[1] not in self.existing:
            raise NotFound(404, {}, "GET", path)
        return {"metadata": {"name": path.rsplit("/", 1)[1]}, "spec": {"storage": "1Gi"}}


async def test_a_claim_the_synced_cache_lacks_costs_no_request() -> None:
    server = Server(existing=set())
    lookup = claim_lookup(server.get, Claims(set(), synced=True))
    assert await lookup("ns", "data-js") is None
    assert server.asked == []


async def test_a_cached_claim_is_read_live_for_its_spec() -> None:
    server = Server(existing={"data-js"})
    lookup = claim_lookup(server.get, Claims({"ns/data-js"}, synced=True))
    found = await lookup("ns", "data-js")
    assert found is not None
    assert found["spec"] == {"storage": "1Gi"}
    assert server.asked == ["/api/v1/namespaces/ns/persistentvolumeclaims/data-js"]


async def test_before_the_cache_lists_every_lookup_is_live() -> None:
    server = Server(existing=set())
    lookup = claim_lookup(server.get, Claims(set(), synced=False))
    assert await lookup("ns", "data-js") is None
    assert len(server.asked) == 1
