"""Kubeconfig and in-cluster loading: which server, which credentials, which errors."""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import json
import os
import ssl
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from jobset_controller.manager.environment import default_cert_policy
from jobset_controller.runtime import kubeconfig
from jobset_controller.runtime.certs import Action, Identity, renew
from jobset_controller.runtime.kubeconfig import (
    ConfigError,
    TokenFile,
    existing_kubeconfigs,
    in_cluster,
    kubeconfig_paths,
    load,
)


def pki() -> tuple[bytes, bytes, bytes]:
    """A CA bundle and a certificate/key pair it issued (PEM)."""
    material = renew(
        None,
        Action.NEW_CA,
        Identity("test-ca", "test", ("client.test",)),
        default_cert_policy(),
        datetime.datetime.now(datetime.UTC),
    )
    return material.ca_bundle, material.cert, material.key


def leftover_key_directories() -> list[str]:
    """Directories the loader made for certificate data and did not remove."""
    return [p for p in os.listdir(tempfile.gettempdir()) if p.startswith("jobset-kubeconfig-")]


def b64(data: bytes | str) -> str:
    return base64.b64encode(data if isinstance(data, bytes) else data.encode()).decode()


def write(path: Path, *, user: dict[str, Any], cluster: dict[str, Any] | None = None,
          current: str = "main", name: str = "main") -> Path:  # fmt: skip
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster or {"server": f"https://{name}.test:6443"}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": current,
    }
    path.write_text(yaml.safe_dump(document))
    return path


async def test_a_token_user_sends_a_bearer_header(tmp_path: Path) -> None:
    access = await load(str(write(tmp_path / "config", user={"token": "abc"})))
    assert access.server == "https://main.test:6443"
    assert await access.credentials.authorization() == "Bearer abc"
    assert access.source == "main"
    assert "abc" not in repr(access.credentials)


async def test_a_token_file_is_relative_to_the_kubeconfig_and_read_again_after_its_ttl(
    tmp_path: Path,
) -> None:
    (tmp_path / "token").write_text("first\n")
    access = await load(str(write(tmp_path / "config", user={"tokenFile": "token"})))
    assert await access.credentials.authorization() == "Bearer first"
    (tmp_path / "token").write_text("second")
    assert await access.credentials.authorization() == "Bearer first"  # within the minute
    rotating = TokenFile(tmp_path / "token", ttl=0.0)
    (tmp_path / "token").write_text("third")
    assert await rotating.authorization() == "Bearer third"
    (tmp_path / "token").unlink()  # a failed re-read keeps the last token
    assert await rotating.authorization() == "Bearer third"


async def test_basic_credentials_are_sent_as_basic_auth(tmp_path: Path) -> None:
    access = await load(
        str(write(tmp_path / "config", user={"username": "ann", "password": "s3cret"}))
    )
    assert await access.credentials.authorization() == f"Basic {b64('ann:s3cret')}"


async def test_client_certificate_data_and_ca_data_build_a_verifying_context(
    tmp_path: Path,
) -> None:
    ca, cert, key = pki()
    access = await load(
        str(
            write(
                tmp_path / "config",
                user={"client-certificate-data": b64(cert), "client-key-data": b64(key)},
                cluster={"server": "https://x.test", "certificate-authority-data": b64(ca)},
            )
        )
    )
    assert access.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert access.ssl_context.check_hostname
    assert [c["subject"] for c in access.ssl_context.get_ca_certs()] == [
        ((("commonName", "test-ca"),), (("organizationName", "test"),))
    ]
    assert await access.credentials.authorization() is None
    assert leftover_key_directories() == []


async def test_certificate_files_are_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    ca, cert, key = pki()
    (tmp_path / "pki").mkdir()
    for name, blob in (("ca.crt", ca), ("client.crt", cert), ("client.key", key)):
        (tmp_path / "pki" / name).write_bytes(blob)
    access = await load(
        str(
            write(
                tmp_path / "config",
                user={"client-certificate": "pki/client.crt", "client-key": "pki/client.key"},
                cluster={"server": "https://x.test", "certificate-authority": "pki/ca.crt"},
            )
        )
    )
    assert len(access.ssl_context.get_ca_certs()) == 1


async def test_insecure_skip_tls_verify_turns_verification_off(tmp_path: Path) -> None:
    access = await load(
        str(
            write(
                tmp_path / "config",
                user={"token": "t"},
                cluster={"server": "https://x.test", "insecure-skip-tls-verify": True},
            )
        )
    )
    assert access.ssl_context.verify_mode == ssl.CERT_NONE
    assert not access.ssl_context.check_hostname


@pytest.mark.parametrize(
    ("user", "cluster", "context", "message"),
    [
        ({"token": "t"}, None, "other", "context 'other' not found"),
        ({"client-certificate-data": b64("x")}, None, None, "needs both cert and key"),
        ({"token": "t"}, {"server": ""}, None, "has no server"),
        ({"token": "t"}, {"server": "https://x", "certificate-authority-data": "!!"}, None,
         "not valid base64"),
        ({"token": "t"}, {"server": "https://x", "certificate-authority": "missing.crt"}, None,
         "unusable CA certificate"),
        ({"tokenFile": "missing-token"}, None, None, "cannot read the token file"),
    ],
)  # fmt: skip
async def test_a_broken_kubeconfig_is_an_error_naming_what_is_wrong(
    tmp_path: Path,
    user: dict[str, Any],
    cluster: dict[str, Any] | None,
    context: str | None,
    message: str,
) -> None:
    path = write(tmp_path / "config", user=user, cluster=cluster)
    with pytest.raises(ConfigError, match=message):
        await load(str(path), context)


async def test_kubeconfig_list_merges_first_definition_and_first_current_context_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = write(tmp_path / "a", user={"token": "from-a"}, current="", name="shared")
    second = write(tmp_path / "b", user={"token": "from-b"}, current="shared", name="shared")
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'absent'}:{second}")
    assert existing_kubeconfigs(None, os.environ) == [first, second]
    access = await load()
    assert access.source == "shared"
    assert await access.credentials.authorization() == "Bearer from-a"


def test_kubeconfig_paths_follow_flag_then_env_then_home() -> None:
    assert kubeconfig_paths("/f", {"KUBECONFIG": "/a:/b"}) == [Path("/f")]
    assert kubeconfig_paths("/f:/g", {}) == [Path("/f"), Path("/g")]
    assert kubeconfig_paths(None, {"KUBECONFIG": "/a::/b"}) == [Path("/a"), Path("/b")]
    assert kubeconfig_paths(None, {"HOME": "/home/x"}) == [Path("/home/x/.kube/config")]


def test_without_kubeconfig_the_home_config_is_used_if_it_exists(tmp_path: Path) -> None:
    assert existing_kubeconfigs(None, {"HOME": str(tmp_path)}) == []
    (tmp_path / ".kube").mkdir()
    write(tmp_path / ".kube" / "config", user={"token": "t"})
    assert existing_kubeconfigs(None, {"HOME": str(tmp_path)}) == [tmp_path / ".kube" / "config"]


def test_a_named_kubeconfig_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        existing_kubeconfigs(str(tmp_path / "missing"), {})


async def test_in_cluster_reads_the_service_host_the_token_and_the_ca(tmp_path: Path) -> None:
    ca, _, _ = pki()
    (tmp_path / "token").write_text("pod-token")
    (tmp_path / "ca.crt").write_bytes(ca)
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    access = in_cluster(env, tmp_path)
    assert access.server == "https://[fd00::1]:443"
    assert await access.credentials.authorization() == "Bearer pod-token"
    assert len(access.ssl_context.get_ca_certs()) == 1
    assert access.source == "in-cluster"


def test_outside_a_cluster_in_cluster_says_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not running in a cluster"):
        in_cluster({}, tmp_path)
    with pytest.raises(ConfigError, match="cannot read the token file"):
        in_cluster({"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "1"}, tmp_path)


async def test_no_kubeconfig_and_no_cluster_is_one_error_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match=r"no kubeconfig .* and not running in a cluster"):
        await load()


async def test_exec_and_auth_provider_users_go_to_the_official_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[list[Path], str]] = []

    official_access = kubeconfig.ClusterAccess(
        "https://official", ssl.create_default_context(), kubeconfig.NoCredentials(), "x"
    )

    async def official(paths: list[Path], context: str) -> kubeconfig.ClusterAccess:
        calls.append((paths, context))
        return official_access

    monkeypatch.setattr(kubeconfig, "_official", official)
    exec_user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "aws"}}
    path = write(tmp_path / "exec", user=exec_user)
    assert await load(str(path)) is official_access
    path = write(tmp_path / "provider", user={"auth-provider": {"name": "oidc"}})
    assert await load(str(path)) is official_access
    assert calls == [([tmp_path / "exec"], "main"), ([tmp_path / "provider"], "main")]


async def test_an_exec_plugin_kubeconfig_works_through_the_official_loader(tmp_path: Path) -> None:
    """The delegated path for real: a plugin that prints an ExecCredential."""
    plugin = tmp_path / "plugin.sh"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": "from-plugin"},
    }
    plugin.write_text(f"#!/bin/sh\necho '{json.dumps(credential)}'\n")
    plugin.chmod(0o755)
    exec_user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": str(plugin),
            "interactiveMode": "Never",
        }
    }
    access = await load(str(write(tmp_path / "config", user=exec_user)))
    assert access.server == "https://main.test:6443"
    assert await access.credentials.authorization() == "Bearer from-plugin"


def bare_chain() -> tuple[bytes, bytes, bytes]:
    """A CA and a server certificate for 127.0.0.1 with no key identifiers at all (PEM: CA,
    certificate, key): what hand-made and older installers' CAs look like. Go's crypto/x509
    accepts them; Python 3.13's VERIFY_X509_STRICT does not."""
    now = datetime.datetime.now(datetime.UTC)

    def build(subject: str, issuer: str, key: Any, signer: Any, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            address = x509.IPAddress(ipaddress.ip_address("127.0.0.1"))
            builder = builder.add_extension(x509.SubjectAlternativeName([address]), False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = build("bare-ca", "bare-ca", ca_key, ca_key, ca=True)
    cert = build("apiserver", "bare-ca", key, ca_key, ca=False)
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return ca.public_bytes(pem), cert.public_bytes(pem), key_pem


async def test_an_api_server_whose_chain_has_no_key_identifiers_is_trusted_as_client_go_does(
    tmp_path: Path,
) -> None:
    """A real TLS handshake with the context a kubeconfig gives, on every Python the suite runs
    on (3.13's default context alone refuses this chain: VERIFY_X509_STRICT)."""
    ca, cert, key = bare_chain()
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=served)
    port = server.sockets[0].getsockname()[1]
    access = await load(
        str(
            write(
                tmp_path / "config",
                user={"token": "t"},
                cluster={
                    "server": f"https://127.0.0.1:{port}",
                    "certificate-authority-data": b64(ca),
                },
            )
        )
    )
    assert not access.ssl_context.verify_flags & ssl.VERIFY_X509_STRICT
    async with server:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=access.ssl_context, server_hostname="127.0.0.1"
        )
        assert await reader.read() == b"ok"
        writer.close()
