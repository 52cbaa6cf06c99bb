"""The certificate rotator's pure parts: the caBundle injection patch and the file writes."""

from __future__ import annotations

import base64
import datetime
import stat
from pathlib import Path
from typing import Any

from jobset_controller.manager.environment import default_cert_policy
from jobset_controller.runtime.certrotator import inject_ca_bundle, write_files
from jobset_controller.runtime.certs import Action, Identity, Material, renew

NOW = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)


def _configuration(*bundles: str | None) -> dict[str, Any]:
    hooks = []
    for index, bundle in enumerate(bundles):
        client: dict[str, Any] = {"url": f"https://127.0.0.1:9443/{index}"}
        if bundle is not None:
            client["caBundle"] = bundle
        hooks.append({"name": f"hook-{index}.example", "clientConfig": client})
    return {"metadata": {"name": "c", "resourceVersion": "7"}, "webhooks": hooks}


def test_injection_sets_every_webhook_and_keeps_the_resource_version() -> None:
    original = _configuration(None, "b2xk")
    patched = inject_ca_bundle(original, b"PEM")
    assert patched is not None
    encoded = base64.b64encode(b"PEM").decode()
    assert [h["clientConfig"]["caBundle"] for h in patched["webhooks"]] == [encoded, encoded]
    assert patched["webhooks"][0]["clientConfig"]["url"] == "https://127.0.0.1:9443/0"
    assert patched["metadata"]["resourceVersion"] == "7"  # the write's precondition
    assert original == _configuration(None, "b2xk")  # the cached object is left alone


def test_injection_is_a_no_op_when_every_webhook_already_carries_the_bundle() -> None:
    encoded = base64.b64encode(b"PEM").decode()
    assert inject_ca_bundle(_configuration(encoded, encoded), b"PEM") is None
    assert inject_ca_bundle({"metadata": {"name": "empty"}}, b"PEM") is None


def _material() -> Material:
    identity = Identity("ca", "o", ("svc.ns.svc",))
    return renew(None, Action.NEW_CA, identity, default_cert_policy(), NOW)


def test_files_are_written_once_with_a_private_key_and_no_ca_key(tmp_path: Path) -> None:
    material = _material()
    target = tmp_path / "certs"
    assert write_files(target, material)
    assert sorted(p.name for p in target.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    assert (target / "tls.crt").read_bytes() == material.cert
    assert (target / "ca.crt").read_bytes() == material.ca_bundle
    assert stat.S_IMODE((target / "tls.key").stat().st_mode) == 0o600
    assert not write_files(target, material)  # same contents: nothing rewritten


def test_only_changed_files_are_replaced(tmp_path: Path) -> None:
    first = _material()
    write_files(tmp_path, first)
    before = (tmp_path / "ca.crt").stat().st_ino
    second = renew(
        first, Action.RESIGN, Identity("ca", "o", ("svc.ns.svc",)), default_cert_policy(), NOW
    )
    assert write_files(tmp_path, second)
    assert (tmp_path / "ca.crt").stat().st_ino == before  # the CA did not change
    assert (tmp_path / "tls.key").read_bytes() == second.key
