"""The Configuration file: upstream's keys and defaults, strict decoding, Go durations."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobset_controller.config import ConfigError, load_configuration, parse_duration


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_no_file_gives_upstream_defaults() -> None:
    config = load_configuration(None)
    assert config.leader_election.leader_elect is True
    assert config.leader_election.resource_name == "6d4f6a47.jobset.x-k8s.io"
    assert (
        config.leader_election.lease_duration,
        config.leader_election.renew_deadline,
        config.leader_election.retry_period,
    ) == (15.0, 10.0, 2.0)
    assert config.metrics.bind_address == ":8443"
    assert config.health.health_probe_bind_address == ":8081"
    assert (config.client_connection.qps, config.client_connection.burst) == (500.0, 500)
    assert config.webhook.port == 9443
    assert config.internal_cert_management.webhook_service_name == "jobset-webhook-service"
    assert config.deferred_children.enable is False, "upstream's behaviour unless turned on"


def test_recovery_defaults_wait_for_terminal_conditions_and_free_dead_nodes() -> None:
    config = load_configuration(None)
    assert config.early_job_conditions.enable is False, "upstream's behaviour unless turned on"
    assert config.unreachable_node_pods.force_delete is True
    assert config.unreachable_node_pods.force_delete_after is None, "each pod's grace period"


def test_recovery_options_are_read(tmp_path: Path) -> None:
    config = load_configuration(
        write(
            tmp_path,
            "earlyJobConditions:\n  enable: true\n"
            "unreachableNodePods:\n  forceDelete: false\n  forceDeleteAfter: 2m\n",
        )
    )
    assert config.early_job_conditions.enable is True
    assert config.unreachable_node_pods.force_delete is False
    assert config.unreachable_node_pods.force_delete_after == 120.0


def test_progress_counters_wait_a_second_unless_configured(tmp_path: Path) -> None:
    assert load_configuration(None).progress_counts.batch_period == 1.0
    config = load_configuration(write(tmp_path, "progressCounts:\n  batchPeriod: 250ms\n"))
    assert config.progress_counts.batch_period == 0.25


def test_follower_narrowing_is_off_unless_turned_on(tmp_path: Path) -> None:
    assert load_configuration(None).exclusive_placement.follower_node_affinity is False
    config = load_configuration(
        write(tmp_path, "exclusivePlacement:\n  followers: Gate\n  followerNodeAffinity: true\n")
    )
    assert config.exclusive_placement.followers == "Gate"
    assert config.exclusive_placement.follower_node_affinity is True


def test_shipped_style_file_is_read(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: true
  leaseDuration: 30s
  renewDeadline: 1m
  retryPeriod: 500ms
clientConnection:
  qps: 50
  burst: 100
featureGates:
  RestartJob: true
deferredChildren:
  enable: true
""",
    )
    config = load_configuration(path)
    assert config.deferred_children.enable is True
    assert config.leader_election.lease_duration == 30.0
    assert config.leader_election.renew_deadline == 60.0
    assert config.leader_election.retry_period == 0.5
    assert config.client_connection.qps == 50.0
    assert config.feature_gates == {"RestartJob": True}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "leaderElection:\n  leaderElekt: true\n",
            "leaderElection.leaderElekt: unknown field",
            id="typo",
        ),
        pytest.param("metrics:\n  bindAddress: [1]\n", "metrics.bindAddress", id="wrong-type"),
        pytest.param(
            "leaderElection:\n  leaseDuration: soon\n",
            "leaderElection.leaseDuration",
            id="bad-duration",
        ),
        pytest.param("kind: Settings\n", "kind", id="wrong-kind"),
        pytest.param(
            "tls:\n  minVersion: VersionTLS13\n  cipherSuites: [TLS_AES_128_GCM_SHA256]\n",
            "tls.cipherSuites: may not be specified when minVersion is 'VersionTLS13'",
            id="tls13-ciphers",
        ),
        pytest.param(
            "tls:\n  cipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_FAST]\n",
            "tls.cipherSuites: unknown cipher suite 'TLS_FAST'",
            id="unknown-cipher",
        ),
        pytest.param(
            "tls:\n  cipherSuites: [TLS_RSA_WITH_RC4_128_SHA]\n",
            "tls.cipherSuites: none of TLS_RSA_WITH_RC4_128_SHA can be offered",
            id="only-ciphers-openssl-lacks",
        ),
        pytest.param("- a\n", "expected a mapping", id="not-a-mapping"),
        pytest.param(
            "webhook:\n  port: '9443'\n",
            "webhook.port: expected an integer, got '9443'",
            id="number-as-string",
        ),
        pytest.param(
            "leaderElection:\n  leaderElect: yes please\n",
            "leaderElection.leaderElect: expected true or false, got 'yes please'",
            id="not-a-boolean",
        ),
        pytest.param("health: [a]\n", "health: expected a map, got a list", id="section-list"),
        pytest.param(
            "featureGates:\n  RestartJob: 1\n",
            "featureGates: gate 'RestartJob': expected true or false, got 1",
            id="gate-not-boolean",
        ),
        pytest.param(
            "exclusivePlacement:\n  followers: Wait\n",
            "exclusivePlacement.followers: expected one of 'Gate', 'Reject', got 'Wait'",
            id="unknown-choice",
        ),
        pytest.param(
            "deferredChildren:\n  enabled: true\n",
            "deferredChildren.enabled: unknown field",
            id="deferred-children-typo",
        ),
        pytest.param(
            "unreachableNodePods:\n  forceDeleteAfter: -5s\n",
            "unreachableNodePods.forceDeleteAfter: invalid duration",
            id="negative-force-delete-after",
        ),
        pytest.param(
            "progressCounts:\n  batchPeriod: 2m\n",
            "progressCounts.batchPeriod: must be between 0s and 60s, got '2m'",
            id="progress-counts-period-too-long",
        ),
        pytest.param(
            "earlyJobConditions:\n  enable: 'true'\n",
            "earlyJobConditions.enable: expected true or false, got 'true'",
            id="early-job-conditions-string",
        ),
    ],
)
def test_bad_files_name_the_key_and_the_reason(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(")) as info:
        load_configuration(write(tmp_path, text))
    assert str(info.value).startswith(f"--config {tmp_path / 'config.yaml'}: ")


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_configuration(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15s", 15.0), ("1m30s", 90.0), ("500ms", 0.5), ("2h", 7200.0), ("1.5s", 1.5), (3, 3.0)],
)
def test_go_durations(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "15", "s", "15x", "1m 30s"])
def test_invalid_durations(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


def test_null_values_keep_their_defaults(tmp_path: Path) -> None:
    config = load_configuration(write(tmp_path, "webhook:\nleaderElection:\n  leaseDuration:\n"))
    assert config.webhook.port == 9443
    assert config.leader_election.lease_duration == 15.0


@pytest.mark.parametrize(
    ("text", "qps"), [("1e3", 1000.0), ("1.5e2", 150.0), (".5E+3", 500.0), ("-1e0", -1.0)]
)
def test_exponent_floats_read_as_upstreams_yaml_reads_them(
    tmp_path: Path, text: str, qps: float
) -> None:
    config = load_configuration(write(tmp_path, f"clientConnection:\n  qps: {text}\n"))
    assert config.client_connection.qps == qps


def test_a_quoted_exponent_is_still_a_string(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"clientConnection\.qps"):
        load_configuration(write(tmp_path, 'clientConnection:\n  qps: "1e3"\n'))
