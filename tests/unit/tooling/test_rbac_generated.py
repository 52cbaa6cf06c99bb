"""The shipped RBAC is exactly what the controller's declared grants render to."""

from __future__ import annotations

from jobset_controller.controller.permissions import CLUSTER_GRANTS, NAMESPACE_GRANTS
from jobset_controller_dev import rbacgen


def test_shipped_rbac_files_equal_the_rendered_grants() -> None:
    stale = [
        str(path.relative_to(rbacgen.ROOT))
        for path, text in rbacgen.render().items()
        if not path.is_file() or path.read_text() != text
    ]
    assert not stale, f"regenerate with `make rbac`: {stale}"


def test_every_grant_says_why_and_names_each_verb_once() -> None:
    for grant in CLUSTER_GRANTS + NAMESPACE_GRANTS:
        assert grant.why.strip(), grant
        assert len(set(grant.verbs)) == len(grant.verbs), grant
        assert list(grant.verbs) == sorted(grant.verbs), grant


def test_each_resource_is_granted_in_one_place() -> None:
    keys = [(g.group, g.resource) for g in CLUSTER_GRANTS + NAMESPACE_GRANTS]
    assert len(keys) == len(set(keys))
