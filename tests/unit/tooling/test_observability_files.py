"""The shipped alert rules and Grafana dashboard: copies in step, promtool happy, every alert fired.

promtool comes from hack/prometheus.sh (JOBSET_PROMETHEUS_BIN, exported by hack/test.sh); helm
from the Kubernetes binaries cache (JOBSET_K8S_BIN). Whether the metrics they name exist is
checked against a real scrape in tests/e2e/test_observability.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from jobset_controller_dev.envtest.binaries import ensure_binaries
from jobset_controller_dev.envtest.prometheus import (
    dashboard_expressions,
    ensure_prometheus_bin_dir,
    queried_metrics,
    rule_expressions,
)

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.tools  # runs promtool and helm
CHART = ROOT / "charts" / "jobset-controller"
RULES = CHART / "files" / "prometheus-rules.yaml"
PLAIN_RULES = ROOT / "manifests" / "prometheus" / "jobset-controller.rules.yaml"
DASHBOARD = CHART / "files" / "grafana-dashboard.json"
DOCS_DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"
RULE_TESTS = Path(__file__).parent / "promtool" / "rules_test.yaml"


def promtool() -> Path:
    # JOBSET_PROMETHEUS_BIN, else fetched once by hack/prometheus.sh: never skipped.
    return ensure_prometheus_bin_dir() / "promtool"


def test_copies_are_equal() -> None:
    assert PLAIN_RULES.read_text() == RULES.read_text()
    assert DOCS_DASHBOARD.read_text() == DASHBOARD.read_text()


def test_promtool_checks_the_rules() -> None:
    result = subprocess.run(
        [str(promtool()), "check", "rules", str(PLAIN_RULES)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rule_expressions(PLAIN_RULES))} rules found" in result.stdout


def test_promtool_unit_tests_fire_every_alert() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {
        case["alertname"]
        for test in tests
        for case in test["alert_rule_test"]
        if case.get("exp_alerts")
    }
    assert fired == set(rule_expressions(PLAIN_RULES))
    result = subprocess.run(
        [str(promtool()), "test", "rules", str(RULE_TESTS)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_panels_all_query_something_and_ids_are_unique() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert queried_metrics(target["expr"]), (panel["title"], target["expr"])
    assert len(dashboard_expressions(DASHBOARD)) >= 20


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ('sum by (le) (rate(a_bucket{x="y", job=~"b.*"}[5m]))', {"a_bucket"}),
        ("a / on (x) group_left (y) b > bool 3", {"a", "b"}),
        ("histogram_quantile(0.99, sum(rate(c[1m]))) or vector(0)", {"c"}),
        ('label_replace(d, "dst", "$1", "src", "(.*)")', {"d"}),
    ],
)
def test_queried_metrics(expression: str, names: set[str]) -> None:
    assert queried_metrics(expression) == names


def test_the_chart_renders_the_rule_file_and_the_dashboard() -> None:
    helm = ensure_binaries(("helm",)) / "helm"
    rendered = subprocess.run(
        [str(helm), "template", "t", str(CHART), "--set", "prometheusRule.enable=true",
         "--set", "grafanaDashboard.enable=true"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    documents = {doc["kind"] + "/" + doc["metadata"]["name"]: doc for doc in
                 yaml.safe_load_all(rendered) if doc}  # fmt: skip
    rule = documents["PrometheusRule/t-jobset-alerts"]  # <fullname>: release t
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]
    dashboard = documents["ConfigMap/t-jobset-grafana-dashboard"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["jobset-controller.json"]) == json.loads(
        DASHBOARD.read_text()
    )
    plain = subprocess.run(
        [str(helm), "template", "t", str(CHART)], capture_output=True, text=True, check=True
    ).stdout
    assert "PrometheusRule" not in plain
    assert "grafana-dashboard" not in plain
