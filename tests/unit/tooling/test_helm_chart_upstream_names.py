"""Our chart and upstream's (charts/jobset of sigs.k8s.io/jobset v0.12.0, from
hack/upstream-jobset.sh) render objects of the same names for the same release and values, so
`helm upgrade` can move a release from one chart to the other: helm patches the objects both
render, and whatever refers to them by name keeps working. Also: an upstream values file is
accepted unchanged, the Deployment's selector (immutable) is upstream's, and the editor/viewer
ClusterRoles have upstream's rules. The rolling swap itself, on a cluster, is
tests/e2e/test_chart_swap.py."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobset_controller_dev.envtest.binaries import ensure_binaries
from jobset_controller_dev.envtest.install import chart_fullname
from jobset_controller_dev.envtest.upstream import ensure_upstream, upstream_chart

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.tools  # runs helm, and upstream's chart from hack/upstream-jobset.sh
CHART = ROOT / "charts" / "jobset-controller"

Key = tuple[str, str, str | None]  # kind, name, namespace


# What upstream's chart renders and ours does not, each with why. A helm upgrade to our chart
# deletes them, and a rollback creates them again; nothing of ours refers to them.
UPSTREAM_ONLY = {
    # TokenReview/SubjectAccessReview create for the metrics endpoint's reviews: ours grants
    # them in the controller's ClusterRole (<fullname>-controller), from controller/permissions.
    ("ClusterRole", "proxy-role"),
    ("ClusterRoleBinding", "proxy-rolebinding"),
    # The webhook Secret's grants: ours are in <fullname>-leader-election-role (one Role for the
    # release namespace, as the generated manifests/rbac has it).
    ("Role", "manager-secrets-role"),
    ("RoleBinding", "manager-secrets-rolebinding"),
    # Binds the metrics reader role to the controller's own ServiceAccount, which never scrapes
    # itself: ours leaves the role for scrapers to be bound to.
    ("ClusterRoleBinding", "metrics-reader-rolebinding"),
}


def _render(chart: Path, release: str, *args: str) -> dict[Key, dict[str, Any]]:
    helm = ensure_binaries(("helm",)) / "helm"
    rendered = subprocess.run(
        [str(helm), "template", release, str(chart), "-n", "jobs", *args],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return {
        (doc["kind"], doc["metadata"]["name"], doc["metadata"].get("namespace")): doc
        for doc in yaml.safe_load_all(rendered)
        if doc
    }


@pytest.fixture(scope="module")
def upstream() -> Path:
    return upstream_chart(ensure_upstream())


CASES = [
    pytest.param("jobset", [], id="release-contains-jobset"),
    pytest.param("batch", [], id="other-release"),
    pytest.param("r", ["--set", "nameOverride=js"], id="nameOverride"),
    pytest.param("r", ["--set", "fullnameOverride=custom"], id="fullnameOverride"),
    pytest.param("r", ["--set", "certManager.enable=true"], id="cert-manager"),
    pytest.param("r", ["--set", "controller.podDisruptionBudget.enabled=true"], id="pdb"),
]


@pytest.mark.parametrize(("release", "args"), CASES)
def test_every_object_ours_renders_has_the_name_upstreams_gives_it(
    upstream: Path, release: str, args: list[str]
) -> None:
    theirs = _render(upstream, release, *args)
    ours = _render(CHART, release, *args)
    assert set(ours) - set(theirs) == set()
    prefix = chart_fullname(release) if "fullnameOverride" not in " ".join(args) else "custom"
    if "nameOverride=js" in args:
        prefix = "r-js"
    missing = {(kind, name.removeprefix(f"{prefix}-")) for kind, name, _ in set(theirs) - set(ours)}
    assert missing == UPSTREAM_ONLY


def test_chart_fullname_follows_upstreams_rule(upstream: Path) -> None:
    for release in ("jobset", "my-jobset-prod", "batch"):
        names = {name for kind, name, _ in _render(upstream, release) if kind == "Deployment"}
        assert names == {f"{chart_fullname(release)}-controller"}


def test_what_a_swap_cannot_change_or_others_select_on_is_upstreams(upstream: Path) -> None:
    theirs = _render(upstream, "jobset")
    ours = _render(CHART, "jobset")
    deployment = ("Deployment", "jobset-controller", "jobs")
    # A Deployment's selector is immutable: a different one fails the upgrade.
    assert ours[deployment]["spec"]["selector"] == theirs[deployment]["spec"]["selector"]
    our_pod = ours[deployment]["spec"]["template"]
    their_pod = theirs[deployment]["spec"]["template"]
    selector_labels = theirs[deployment]["spec"]["selector"]["matchLabels"]
    assert selector_labels.items() <= our_pod["metadata"]["labels"].items()
    # Patches and policies name the container and its ports.
    [our_container] = our_pod["spec"]["containers"]
    [their_container] = their_pod["spec"]["containers"]
    assert our_container["name"] == their_container["name"]
    port_names = {(p["name"], p["containerPort"]) for p in their_container["ports"]}
    assert {(p["name"], p["containerPort"]) for p in our_container["ports"]} == port_names
    assert our_pod["spec"]["serviceAccountName"] == their_pod["spec"]["serviceAccountName"]
    # A ServiceMonitor of the user's selects the metrics Service by upstream's labels.
    for name in ("jobset-metrics-service", "jobset-webhook-service"):
        service = ("Service", name, "jobs")
        labels = theirs[service]["metadata"]["labels"]
        wanted = {k: v for k, v in labels.items() if k.startswith("app.kubernetes.io/")}
        wanted.pop("app.kubernetes.io/version", None)
        assert wanted.items() <= ours[service]["metadata"]["labels"].items()
        assert {p["name"]: p["port"] for p in ours[service]["spec"]["ports"]} == {
            p["name"]: p["port"] for p in theirs[service]["spec"]["ports"]
        }
    # The Configuration names the same webhook Service and Secret.
    config = ("ConfigMap", "jobset-controller-config", "jobs")
    key = "controller_manager_config.yaml"
    ours_config = yaml.safe_load(ours[config]["data"][key])
    assert (
        ours_config["internalCertManagement"]
        == (yaml.safe_load(theirs[config]["data"][key])["internalCertManagement"])
    )
    # helm merges the webhooks of a configuration by name: the same names keep the caBundle.
    for kind, name in (
        ("MutatingWebhookConfiguration", "jobset-mutating-webhook-configuration"),
        ("ValidatingWebhookConfiguration", "jobset-validating-webhook-configuration"),
    ):
        hooks = {
            h["name"]: (h["clientConfig"]["service"], h["rules"])
            for h in ours[(kind, name, None)]["webhooks"]
        }
        assert hooks == {
            h["name"]: (h["clientConfig"]["service"], h["rules"])
            for h in theirs[(kind, name, None)]["webhooks"]
        }
    # The Secret: same name and type; ours renders the live data on an upgrade (`lookup`), so
    # helm's patch leaves the certificate as it is (tests/e2e/test_chart_swap.py).
    secret = ("Secret", "jobset-webhook-server-cert", "jobs")
    assert ours[secret].get("type", "Opaque") == theirs[secret].get("type", "Opaque")


def test_editor_and_viewer_roles_have_upstreams_rules(upstream: Path) -> None:
    theirs = _render(upstream, "jobset")
    ours = _render(CHART, "jobset")
    for role in ("jobset-jobset-editor-role", "jobset-jobset-viewer-role"):
        key = ("ClusterRole", role, None)
        assert ours[key]["rules"] == theirs[key]["rules"]
    manifests = {
        doc["metadata"]["name"]: doc["rules"]
        for doc in yaml.safe_load_all((ROOT / "manifests" / "rbac" / "user-roles.yaml").read_text())
        if doc
    }
    assert manifests == {
        "editor-role": ours[("ClusterRole", "jobset-jobset-editor-role", None)]["rules"],
        "viewer-role": ours[("ClusterRole", "jobset-jobset-viewer-role", None)]["rules"],
    }


def test_an_upstream_values_file_is_accepted_unchanged_and_read(upstream: Path) -> None:
    values = upstream / "values.yaml"
    ours = _render(CHART, "jobset", "-f", str(values))
    theirs = _render(upstream, "jobset")
    deployment = ("Deployment", "jobset-controller", "jobs")
    our_container = ours[deployment]["spec"]["template"]["spec"]["containers"][0]
    their_container = theirs[deployment]["spec"]["template"]["spec"]["containers"][0]
    assert our_container["image"] == their_container["image"]
    assert our_container["imagePullPolicy"] == their_container["imagePullPolicy"]
    assert our_container["resources"] == their_container["resources"]
    assert set(ours) - set(theirs) == set()
