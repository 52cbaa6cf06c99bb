"""API paths and apiVersions come from one `Resource` value per kind."""

from __future__ import annotations

from jobset_controller.runtime.resources import EVENTS, LEASES, Resource

PODS = Resource("", "v1", "pods")


def test_core_group_paths_start_with_api() -> None:
    assert PODS.path() == "/api/v1/pods"
    assert PODS.path("ns") == "/api/v1/namespaces/ns/pods"
    assert PODS.path("ns", "p") == "/api/v1/namespaces/ns/pods/p"
    assert PODS.api_version == "v1"


def test_named_group_paths_start_with_apis() -> None:
    assert LEASES.path("ns", "l") == "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"
    assert EVENTS.path("ns") == "/apis/events.k8s.io/v1/namespaces/ns/events"
    assert EVENTS.api_version == "events.k8s.io/v1"


def test_a_cluster_scoped_object_has_no_namespace_segment() -> None:
    assert Resource("", "v1", "namespaces").path(name="team-a") == "/api/v1/namespaces/team-a"
