"""The in-place restart agent's example RBAC (issue 25): generated from the agent's rules, shipped
as a manifest and in the chart per listed namespace."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobset_controller.agent import AGENT_RULES
from jobset_controller_dev.envtest.binaries import ensure_binaries

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.tools  # runs helm, from the Kubernetes binaries
CHART = ROOT / "charts" / "jobset-controller"


def test_the_example_manifest_grants_exactly_the_agents_rules() -> None:
    documents = list(
        yaml.safe_load_all((ROOT / "manifests/in-place-restart-agent/rbac.yaml").read_text())
    )
    assert [d["kind"] for d in documents] == [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    assert documents[1]["rules"] == [dict(rule) for rule in AGENT_RULES]
    chart_rules = yaml.safe_load((CHART / "files" / "agent-rules.yaml").read_text())
    assert chart_rules == documents[1]["rules"]


def _rendered(*sets: str) -> list[dict[str, Any]]:
    helm = ensure_binaries(("helm",)) / "helm"
    args = [arg for value in sets for arg in ("--set", value)]
    out = subprocess.run(
        [str(helm), "template", "jobset", str(CHART), "-n", "jobs", *args],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return [doc for doc in yaml.safe_load_all(out) if doc]


def test_the_chart_renders_the_agents_identity_only_in_listed_namespaces() -> None:
    def agent_docs(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
        return [
            (d["kind"], d["metadata"]["namespace"])
            for d in docs
            if d["metadata"]["name"] == "in-place-restart-agent"
        ]

    assert agent_docs(_rendered()) == []
    listed = agent_docs(_rendered("inPlaceRestartAgent.namespaces={a,b}"))
    assert sorted(listed) == sorted(
        (kind, ns) for ns in ("a", "b") for kind in ("ServiceAccount", "Role", "RoleBinding")
    )
