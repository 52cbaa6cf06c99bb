"""The Helm chart stays in step with the kustomize manifests."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "jobset-controller"


def test_chart_rbac_rules_equal_the_manifests() -> None:
    manifests = next(yaml.safe_load_all((ROOT / "manifests" / "rbac" / "role.yaml").read_text()))
    chart = yaml.safe_load((CHART / "files" / "manager-rules.yaml").read_text())
    assert chart == manifests["rules"]


def test_chart_ships_the_generated_crd() -> None:
    crd = CHART / "crds" / "jobset.x-k8s.io_jobsets.yaml"
    generated = ROOT / "manifests" / "crd" / "bases" / "jobset.x-k8s.io_jobsets.yaml"
    assert crd.read_text() == generated.read_text()
