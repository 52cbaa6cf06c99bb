"""Certificate generation and the rotation decision, at chosen instants (no waiting)."""

from __future__ import annotations

import base64
import datetime
import ipaddress

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from jobset_controller.manager.environment import default_cert_policy
from jobset_controller.runtime.certs import (
    BACKDATE,
    Action,
    CertPolicy,
    Identity,
    Material,
    assess,
    renew,
    split_sans,
)

T0 = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
SECOND = datetime.timedelta(seconds=1)
IDENTITY = Identity(
    ca_common_name="jobset-ca",
    ca_organization="jobset",
    dns_names=("svc.ns.svc", "svc.ns.svc.cluster.local"),
    ip_addresses=("127.0.0.1",),
)
# Short lifetimes keep the arithmetic readable; the logic does not depend on the scale.
POLICY = CertPolicy(
    ca_validity=datetime.timedelta(hours=100),
    cert_validity=datetime.timedelta(hours=10),
    lookahead=datetime.timedelta(hours=4),
    recheck=datetime.timedelta(hours=50),
    settle=datetime.timedelta(seconds=30),
)


def _cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificates(pem)[0]


def _bundle(material: Material) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(material.ca_bundle)


@pytest.fixture(scope="module")
def fresh() -> Material:
    return renew(None, Action.NEW_CA, IDENTITY, POLICY, T0)


def test_nothing_yet_means_a_new_ca() -> None:
    verdict = assess(None, IDENTITY, POLICY, T0)
    assert verdict.action is Action.NEW_CA
    assert verdict.next_check == T0


def test_fresh_certificates_say_what_upstream_says(fresh: Material) -> None:
    ca, cert = _bundle(fresh)[0], _cert(fresh.cert)
    assert len(_bundle(fresh)) == 1
    assert ca.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "jobset-ca"
    assert ca.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "jobset"
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.not_valid_before_utc == T0 - BACKDATE
    assert ca.not_valid_after_utc == T0 + POLICY.ca_validity
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == list(IDENTITY.dns_names)
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert cert.not_valid_after_utc == T0 + POLICY.cert_validity
    cert.verify_directly_issued_by(ca)


def test_kept_until_the_lookahead_window_then_resigned_with_the_same_ca(fresh: Material) -> None:
    due = T0 + POLICY.cert_validity - POLICY.lookahead
    verdict = assess(fresh, IDENTITY, POLICY, T0)
    assert verdict.action is Action.KEEP
    assert verdict.next_check == due  # before the 50 h recheck and the CA's due time
    assert assess(fresh, IDENTITY, POLICY, due - SECOND).action is Action.KEEP
    late = assess(fresh, IDENTITY, POLICY, due + SECOND)
    assert late.action is Action.RESIGN
    resigned = renew(fresh, late.action, IDENTITY, POLICY, due + SECOND)
    assert (resigned.ca_bundle, resigned.ca_key) == (fresh.ca_bundle, fresh.ca_key)
    assert resigned.cert != fresh.cert
    assert resigned.key != fresh.key
    assert assess(resigned, IDENTITY, POLICY, due + SECOND).action is Action.KEEP


def test_a_serving_certificate_never_outlives_its_ca() -> None:
    policy = CertPolicy(
        ca_validity=datetime.timedelta(hours=12),
        cert_validity=datetime.timedelta(hours=10),
        lookahead=datetime.timedelta(hours=4),
    )
    first = renew(None, Action.NEW_CA, IDENTITY, policy, T0)
    later = T0 + datetime.timedelta(hours=7)  # the CA has 5 h left, the cert would get 10
    resigned = renew(first, Action.RESIGN, IDENTITY, policy, later)
    assert _cert(resigned.cert).not_valid_after_utc == _bundle(first)[0].not_valid_after_utc


def test_a_ca_rotation_keeps_trusting_the_old_ca_and_switches_the_certificate_after_settle(
    fresh: Material,
) -> None:
    # Serving certs were re-signed on time; what matters here is the CA's own due time.
    ca_due = T0 + POLICY.ca_validity - POLICY.lookahead
    now = ca_due + SECOND
    current = renew(fresh, Action.RESIGN, IDENTITY, POLICY, now - datetime.timedelta(hours=1))
    verdict = assess(current, IDENTITY, POLICY, now)
    assert verdict.action is Action.NEW_CA
    rotated = renew(current, Action.NEW_CA, IDENTITY, POLICY, now)
    new_ca, old_ca = _bundle(rotated)
    assert old_ca == _bundle(fresh)[0]
    _cert(rotated.cert).verify_directly_issued_by(new_ca)

    # Another writer's view: the new CA is in the bundle but the served certificate is still
    # the old CA's. It is kept for `settle` so API servers can load the new bundle first.
    pending = Material(rotated.ca_bundle, rotated.ca_key, current.cert, current.key)
    switch_at = now + POLICY.switch_delay
    waiting = assess(pending, IDENTITY, POLICY, now + SECOND)
    assert waiting.action is Action.KEEP
    assert waiting.next_check == switch_at
    assert assess(pending, IDENTITY, POLICY, switch_at).action is Action.RESIGN
    switched = renew(pending, Action.RESIGN, IDENTITY, POLICY, switch_at)
    assert switched.ca_bundle == rotated.ca_bundle  # the old CA stays trusted until it expires
    _cert(switched.cert).verify_directly_issued_by(new_ca)


def test_the_bundle_keeps_one_previous_ca_and_only_while_it_is_valid(fresh: Material) -> None:
    after_expiry = T0 + POLICY.ca_validity + SECOND
    rotated = renew(fresh, Action.NEW_CA, IDENTITY, POLICY, after_expiry)
    assert len(_bundle(rotated)) == 1
    twice = renew(
        renew(fresh, Action.NEW_CA, IDENTITY, POLICY, T0), Action.NEW_CA, IDENTITY, POLICY, T0
    )
    assert len(_bundle(twice)) == 2


def test_a_certificate_from_an_unknown_ca_is_resigned_at_once(fresh: Material) -> None:
    other = renew(None, Action.NEW_CA, IDENTITY, POLICY, T0)
    mixed = Material(fresh.ca_bundle, fresh.ca_key, other.cert, other.key)
    assert assess(mixed, IDENTITY, POLICY, T0).action is Action.RESIGN


def test_missing_names_and_mismatched_keys_are_resigned(fresh: Material) -> None:
    more = Identity("jobset-ca", "jobset", (*IDENTITY.dns_names, "extra.example"), ("127.0.0.1",))
    assert assess(fresh, more, POLICY, T0).action is Action.RESIGN
    other = renew(fresh, Action.RESIGN, IDENTITY, POLICY, T0)
    swapped = Material(fresh.ca_bundle, fresh.ca_key, fresh.cert, other.key)
    assert assess(swapped, IDENTITY, POLICY, T0).action is Action.RESIGN


def test_an_unreadable_or_mismatched_ca_starts_over(fresh: Material) -> None:
    broken = Material(b"not a certificate", fresh.ca_key, fresh.cert, fresh.key)
    assert assess(broken, IDENTITY, POLICY, T0).action is Action.NEW_CA
    other = renew(None, Action.NEW_CA, IDENTITY, POLICY, T0)
    wrong_key = Material(fresh.ca_bundle, other.ca_key, fresh.cert, fresh.key)
    assert assess(wrong_key, IDENTITY, POLICY, T0).action is Action.NEW_CA


def test_secret_data_round_trip_and_incomplete_secrets(fresh: Material) -> None:
    data = fresh.secret_data()
    assert sorted(data) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert base64.b64decode(data["tls.crt"]) == fresh.cert
    assert Material.from_secret_data(data) == fresh
    assert Material.from_secret_data(None) is None
    assert Material.from_secret_data({}) is None  # the empty Secret an install ships
    assert Material.from_secret_data({**data, "ca.key": "%%%"}) is None


def test_policy_rejects_a_lookahead_longer_than_a_lifetime() -> None:
    with pytest.raises(ValueError, match="longer than the rotation lookahead"):
        CertPolicy(
            ca_validity=datetime.timedelta(days=3650),
            cert_validity=datetime.timedelta(days=30),
            lookahead=datetime.timedelta(days=90),
        )
    short = CertPolicy(
        ca_validity=datetime.timedelta(seconds=40),
        cert_validity=datetime.timedelta(seconds=20),
        lookahead=datetime.timedelta(seconds=8),
    )
    assert short.switch_delay == datetime.timedelta(seconds=2)  # capped at lookahead / 4
    assert default_cert_policy().switch_delay == datetime.timedelta(seconds=30)


def test_the_controllers_lifetimes_are_upstreams() -> None:
    """A 10-year CA and a 1-year serving certificate, each replaced 90 days early (config.py)."""
    policy = default_cert_policy()
    assert (policy.ca_validity, policy.cert_validity, policy.lookahead) == (
        datetime.timedelta(days=3650),
        datetime.timedelta(days=365),
        datetime.timedelta(days=90),
    )


def test_extra_sans_split_into_dns_names_and_addresses() -> None:
    assert split_sans(["127.0.0.1", " localhost ", "", "::1"]) == (
        ("localhost",),
        ("127.0.0.1", "::1"),
    )
