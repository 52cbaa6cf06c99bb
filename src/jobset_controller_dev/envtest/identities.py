"""Run the controller in tests as it runs in a cluster: a ServiceAccount bound to the shipped roles.

Why: an admin identity hides every missing or excess grant. Tests that start the controller with
``shipped_rbac`` get exactly manifests/rbac/role.yaml (renamed so tests cannot collide, moved to the
test's namespace), and the API server's audit log (``ControlPlane.audit_events``) then shows every
verb and resource the controller used under it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from jobset_controller_dev.envtest.binaries import repo_root
from jobset_controller_dev.envtest.controlplane import ControlPlane, ControlPlaneError

_RBAC = "/apis/rbac.authorization.k8s.io/v1"
_SHIPPED_ACCOUNT = "controller-manager"


def service_account_user(namespace: str, name: str) -> str:
    """The username the API server (and its audit log) gives a ServiceAccount's token."""
    return f"system:serviceaccount:{namespace}:{name}"


def shipped_role_documents() -> list[dict[str, Any]]:
    root = repo_root()
    if root is None:
        raise ControlPlaneError("the shipped RBAC lives in the repository; no repository found")
    text = (root / "manifests" / "rbac" / "role.yaml").read_text()
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _path(doc: dict[str, Any], namespace: str) -> str:
    kind = doc["kind"]
    if kind == "ServiceAccount":
        return f"/api/v1/namespaces/{namespace}/serviceaccounts"
    plural = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings"}
    if kind in plural:
        return f"{_RBAC}/{plural[kind]}"
    return f"{_RBAC}/namespaces/{namespace}/{kind.lower()}s"


@contextmanager
def shipped_rbac(
    plane: ControlPlane,
    namespace: str,
    accounts: Sequence[str],
    kubeconfig_dir: Path,
    documents: Sequence[dict[str, Any]] | None = None,
) -> Iterator[dict[str, Path]]:
    """Install the shipped roles (or `documents`: another controller's roles and bindings,
    upstream's for one) for ServiceAccounts ``accounts`` of ``namespace``; yield a kubeconfig per
    account (name -> path). Cluster-scoped objects get a ``<namespace>-`` prefix and are deleted
    on exit; the namespaced ones go with the namespace."""
    plane.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    created: list[str] = []
    try:
        for doc in shipped_role_documents() if documents is None else documents:
            if doc["kind"] == "ServiceAccount":
                continue  # one per account, below
            body = copy.deepcopy(doc)
            cluster_scoped = body["kind"].startswith("Cluster")
            body["metadata"]["name"] = f"{namespace}-{body['metadata']['name']}"
            if cluster_scoped:
                body["metadata"].pop("namespace", None)
            else:
                body["metadata"]["namespace"] = namespace
            if "roleRef" in body:
                body["roleRef"]["name"] = f"{namespace}-{body['roleRef']['name']}"
                subject = body["subjects"][0]
                assert subject["name"] == _SHIPPED_ACCOUNT, subject
                body["subjects"] = [
                    {"kind": "ServiceAccount", "name": account, "namespace": namespace}
                    for account in accounts
                ]
            status, reply = plane.request("POST", _path(body, namespace), body)
            if status != 201:
                raise ControlPlaneError(f"creating {body['kind']} failed ({status}): {reply}")
            if cluster_scoped:
                created.append(f"{_path(body, namespace)}/{body['metadata']['name']}")
        yield {
            account: plane.service_account_kubeconfig(
                namespace, account, kubeconfig_dir / f"{account}.kubeconfig"
            )
            for account in accounts
        }
    finally:
        for path in created:
            plane.request("DELETE", path)


def metrics_scraper_token(plane: ControlPlane, workdir: Path, name: str) -> str:
    """A token of ServiceAccount `name/scraper` (namespace `name`), bound to cluster-admin by
    ClusterRoleBinding `name`: what a controller's secure /metrics filter accepts (TokenReview,
    then a SubjectAccessReview for GET /metrics), ours and upstream's alike. Asking again on the
    same control plane reuses the account and the binding."""
    kubeconfig = plane.service_account_kubeconfig(name, "scraper", workdir / f"{name}.kubeconfig")
    binding = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": name}],
    }  # fmt: skip
    status, reply = plane.request("POST", f"{_RBAC}/clusterrolebindings", binding)
    if status not in (201, 409):
        raise ControlPlaneError(f"binding {name} to cluster-admin failed ({status}): {reply}")
    config = yaml.safe_load(kubeconfig.read_text())
    return str(config["users"][0]["user"]["token"])
