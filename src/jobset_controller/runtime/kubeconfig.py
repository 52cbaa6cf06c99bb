"""Where the API server is and how to prove who we are: a kubeconfig, or the pod's own account.

Why our own: the official client's loader (`kubernetes.aio.config`) was most of the time between
process start and /readyz. Importing it costs ~85 ms (its package imports every generated API
class, urllib3, requests and oauthlib) for what a controller in a pod needs: two environment
variables and two files. The common kubeconfig shapes are as small. So they are read here,
following client-go's rules, and everything else a kubeconfig can ask for is handed to the
official loader, imported only then, so that such kubeconfigs keep working exactly as before.

Read here:
- in-cluster (client-go's `rest.InClusterConfig`): `https://$KUBERNETES_SERVICE_HOST:
  $KUBERNETES_SERVICE_PORT`, the ServiceAccount token and CA under
  /var/run/secrets/kubernetes.io/serviceaccount. The token file is read again at most once a
  minute (kubelet rotates projected tokens; client-go's cached file token source does the same).
- kubeconfig files: `--kubeconfig` (one file or an os.pathsep list), else the `$KUBECONFIG` list,
  else ~/.kube/config, merged as client-go merges them (the first file to set current-context wins,
  and so does the first to define a name). The commands (status, plan) resolve their context and
  namespace from the same merged view (tools/kubectl_context.py). The context is `--context` or
  current-context. Cluster: `server`, `certificate-authority(-data)`, `insecure-skip-tls-verify`.
  User: `token`, `tokenFile` (read again like the in-cluster token), `client-certificate(-data)`
  with `client-key(-data)`, `username`/`password`. File paths are relative to the kubeconfig that
  names them.

Handed to the official loader: a user with `exec` (credential plugins: EKS, GKE, AKS, OIDC
helpers) or `auth-provider`. `tls-server-name` and `proxy-url` are not honoured (they were not
with the official loader either): the proxy comes from HTTPS_PROXY/NO_PROXY (runtime/client.py).

Which source is used, as before this module existed: an explicit `--kubeconfig` must load; without
one, the kubeconfig files if any exist, else in-cluster; if neither works, the error says both why.
Credentials are never logged.
"""

from __future__ import annotations

import base64
import contextlib
import os
import ssl
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# How long a token read from a file is used before the file is read again (seconds).
TOKEN_FILE_TTL = 60.0


class ConfigError(Exception):
    """No usable kubeconfig or in-cluster configuration; the message says what is missing."""


class Credentials(Protocol):
    """What goes into the Authorization header of the next request (None: nothing)."""

    async def authorization(self) -> str | None: ...


@dataclass(frozen=True)
class ClusterAccess:
    server: str
    ssl_context: ssl.SSLContext
    credentials: Credentials
    source: str  # "in-cluster", or the kubeconfig context's name


class NoCredentials:
    async def authorization(self) -> str | None:
        return None


@dataclass(frozen=True)
class StaticHeader:
    """A bearer token or basic credentials written in the kubeconfig."""

    value: str

    async def authorization(self) -> str | None:
        return self.value

    def __repr__(self) -> str:  # never print the secret
        return "StaticHeader(<redacted>)"


class TokenFile:
    """A bearer token kept in a file that may be rotated: read again once `ttl` has passed."""

    def __init__(self, path: Path, ttl: float = TOKEN_FILE_TTL) -> None:
        self._path = path
        self._ttl = ttl
        self._token = _read_token(path)
        self._read_at = time.monotonic()

    async def authorization(self) -> str | None:
        if time.monotonic() - self._read_at >= self._ttl:
            # A failed read keeps the last token: a rotation in progress, or a transient error.
            with contextlib.suppress(ConfigError):
                self._token = _read_token(self._path)
            self._read_at = time.monotonic()
        return f"Bearer {self._token}"

    def __repr__(self) -> str:
        return f"TokenFile({self._path})"


class OfficialConfiguration:
    """Credentials kept by the official client's Configuration (exec plugins refresh there)."""

    def __init__(self, configuration: Any) -> None:
        self._configuration = configuration

    async def authorization(self) -> str | None:
        value = await self._configuration.get_api_key_with_prefix("BearerToken")
        return str(value) if value else None


def _read_token(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except OSError as error:
        raise ConfigError(f"cannot read the token file {path}: {error.strerror}") from None
    if not token:
        raise ConfigError(f"the token file {path} is empty")
    return token


# ----------------------------------------------------------------------------- entry point
async def load(kubeconfig: str | None = None, context: str | None = None) -> ClusterAccess:
    """The cluster to talk to and how (module docstring for the order of sources).
    `kubeconfig` is one path or a list joined with os.pathsep (as $KUBECONFIG)."""
    if kubeconfig:
        return await _access(read(existing_kubeconfigs(kubeconfig, os.environ)), context)
    paths = existing_kubeconfigs(None, os.environ)
    if paths:
        try:
            return await _access(read(paths), context)
        except ConfigError as kubeconfig_error:
            try:
                return in_cluster()
            except ConfigError as cluster_error:
                raise ConfigError(f"{kubeconfig_error}; and {cluster_error}") from None
    try:
        return in_cluster()
    except ConfigError as cluster_error:
        raise ConfigError(
            f"no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) and {cluster_error}"
        ) from None


def kubeconfig_paths(flag: str | None, environ: Mapping[str, str]) -> list[Path]:
    """The kubeconfig files kubectl would read, in precedence order: the flag's (one path or an
    os.pathsep list), else $KUBECONFIG's entries, else ~/.kube/config. Some may not exist."""
    listed = flag or environ.get("KUBECONFIG", "")
    if listed:
        return [Path(part).expanduser() for part in listed.split(os.pathsep) if part]
    return [Path(environ.get("HOME") or Path.home()) / ".kube" / "config"]


def existing_kubeconfigs(flag: str | None, environ: Mapping[str, str]) -> list[Path]:
    """`kubeconfig_paths` that exist. A file named by the flag must exist (ConfigError); the
    environment's list and the default are skipped when missing, as kubectl skips them."""
    paths = kubeconfig_paths(flag, environ)
    if flag:
        for path in paths:
            if not path.is_file():
                raise ConfigError(f"kubeconfig {path}: no such file")
        return paths
    return [path for path in paths if path.is_file()]


def client_context(*, cafile: str | None = None, cadata: str | None = None) -> ssl.SSLContext:
    """A TLS client context for an API server that verifies its chain as client-go does.

    Why not `ssl.create_default_context` alone: from Python 3.13 it also sets
    VERIFY_X509_STRICT, which refuses a chain whose certificates lack an Authority Key
    Identifier (and a few other RFC 5280 details) that Go's crypto/x509 does not require, so a
    cluster whose CA client-go accepts (hand-made CAs, older installers) would be unreachable
    from ours. The flag is cleared; everything else (hostname, expiry, the chain to the given
    CA, Python 3.13's partial chains, which Go's root pools allow too) stays verified.
    """
    context = ssl.create_default_context(cafile=cafile, cadata=cadata)
    context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


def in_cluster(
    environ: Mapping[str, str] | None = None, account_dir: Path = SERVICE_ACCOUNT_DIR
) -> ClusterAccess:
    """The pod's ServiceAccount, as client-go's rest.InClusterConfig reads it."""
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ConfigError(
            "not running in a cluster (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT unset)"
        )
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    credentials = TokenFile(account_dir / "token")
    ca = account_dir / "ca.crt"
    context = client_context(cafile=str(ca) if ca.is_file() else None)
    return ClusterAccess(f"https://{host}:{port}", context, credentials, "in-cluster")


# ----------------------------------------------------------------------------- kubeconfig files
@dataclass
class Kubeconfig:
    """The named entries of one or more kubeconfig files merged as client-go merges them: the
    first file to set current-context wins, and so does the first to define a name. Each entry
    keeps the directory of its file (relative paths in it are relative to that file)."""

    paths: tuple[Path, ...] = ()
    current_context: str = ""
    contexts: dict[str, tuple[dict[str, Any], Path]] = field(default_factory=dict)
    clusters: dict[str, tuple[dict[str, Any], Path]] = field(default_factory=dict)
    users: dict[str, tuple[dict[str, Any], Path]] = field(default_factory=dict)

    def context(self, name: str) -> dict[str, Any] | None:
        entry = self.contexts.get(name)
        return None if entry is None else entry[0]


def merge(files: Sequence[tuple[Path, Mapping[str, Any]]]) -> Kubeconfig:
    """The merged view of parsed files, given in precedence order."""
    merged = Kubeconfig(paths=tuple(path for path, _ in files))
    for path, document in files:
        if not merged.current_context:
            merged.current_context = str(document.get("current-context") or "")
        for section, target, key in (
            ("contexts", merged.contexts, "context"),
            ("clusters", merged.clusters, "cluster"),
            ("users", merged.users, "user"),
        ):
            for entry in document.get(section) or ():
                if isinstance(entry, dict) and entry.get("name") and entry["name"] not in target:
                    target[str(entry["name"])] = (dict(entry.get(key) or {}), path.parent)
    return merged


def read(paths: Sequence[Path]) -> Kubeconfig:
    """Parse and merge the files (ConfigError names a file that cannot be read or parsed)."""
    return merge([(path, _parse(path)) for path in paths])


async def _access(config: Kubeconfig, context: str | None) -> ClusterAccess:
    where = ", ".join(str(p) for p in config.paths) or "(no kubeconfig file)"
    name = context or config.current_context
    if not name:
        raise ConfigError(f"no context given and no current-context in {where}")
    ctx = config.context(name)
    if ctx is None:
        raise ConfigError(f"context {name!r} not found in {where}")
    cluster_name, user_name = str(ctx.get("cluster") or ""), str(ctx.get("user") or "")
    if cluster_name not in config.clusters:
        raise ConfigError(f"context {name!r}: cluster {cluster_name!r} not found")
    cluster, cluster_dir = config.clusters[cluster_name]
    user, user_dir = config.users.get(user_name, ({}, Path(".")))
    if "exec" in user or "auth-provider" in user:
        return await _official(list(config.paths), name)
    server = str(cluster.get("server") or "")
    if not server:
        raise ConfigError(f"cluster {cluster_name!r} has no server")
    return ClusterAccess(
        server,
        _ssl_context(cluster, cluster_dir, user, user_dir, cluster_name, user_name),
        _credentials(user, user_dir),
        name,
    )


def _parse(path: Path) -> dict[str, Any]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        document = yaml.load(path.read_text(), Loader=loader)
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path} is not valid YAML: {error}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ConfigError(f"{path} is not a kubeconfig (not a mapping)")
    return document


def _file(value: Any, base: Path) -> Path:
    path = Path(str(value)).expanduser()
    return path if path.is_absolute() else base / path


def _data(value: Any, what: str) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except ValueError:
        raise ConfigError(f"{what} is not valid base64") from None


def _ssl_context(
    cluster: Mapping[str, Any],
    cluster_dir: Path,
    user: Mapping[str, Any],
    user_dir: Path,
    cluster_name: str,
    user_name: str,
) -> ssl.SSLContext:
    try:
        if cluster.get("certificate-authority-data"):
            ca = _data(cluster["certificate-authority-data"], f"cluster {cluster_name!r} CA data")
            context = client_context(cadata=ca.decode("ascii", "replace"))
        elif cluster.get("certificate-authority"):
            path = _file(cluster["certificate-authority"], cluster_dir)
            context = client_context(cafile=str(path))
        else:
            context = client_context()
    except (OSError, ssl.SSLError) as error:
        raise ConfigError(f"cluster {cluster_name!r}: unusable CA certificate: {error}") from None
    if cluster.get("insecure-skip-tls-verify"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    _load_client_certificate(context, user, user_dir, user_name)
    return context


def _load_client_certificate(
    context: ssl.SSLContext, user: Mapping[str, Any], user_dir: Path, user_name: str
) -> None:
    """Client certificate and key, from files or from data (written to a private temporary
    directory for the ssl module, which reads only files, and removed at once)."""
    has_cert = user.get("client-certificate-data") or user.get("client-certificate")
    has_key = user.get("client-key-data") or user.get("client-key")
    if not has_cert and not has_key:
        return
    if not (has_cert and has_key):
        raise ConfigError(f"user {user_name!r}: a client certificate needs both cert and key")
    try:
        with tempfile.TemporaryDirectory(prefix="jobset-kubeconfig-") as private:
            files = []
            for data_key, file_key, name in (
                ("client-certificate-data", "client-certificate", "tls.crt"),
                ("client-key-data", "client-key", "tls.key"),
            ):
                if user.get(data_key):
                    path = Path(private) / name
                    path.write_bytes(_data(user[data_key], f"user {user_name!r} {data_key}"))
                    files.append(path)
                else:
                    files.append(_file(user[file_key], user_dir))
            context.load_cert_chain(str(files[0]), str(files[1]))
    except (OSError, ssl.SSLError) as error:
        raise ConfigError(f"user {user_name!r}: unusable client certificate: {error}") from None


def _credentials(user: Mapping[str, Any], user_dir: Path) -> Credentials:
    if user.get("token"):
        return StaticHeader(f"Bearer {user['token']}")
    if user.get("tokenFile"):
        return TokenFile(_file(user["tokenFile"], user_dir))
    if user.get("username") and user.get("password"):
        pair = f"{user['username']}:{user['password']}".encode()
        return StaticHeader(f"Basic {base64.b64encode(pair).decode()}")
    return NoCredentials()


# ----------------------------------------------------------------------------- delegated
async def _official(paths: list[Path], context: str) -> ClusterAccess:
    """An exec or auth-provider user: the official loader (imported only here) does the work."""
    from kubernetes.aio.client import Configuration
    from kubernetes.aio.config import ConfigException, load_kube_config

    configuration = Configuration()
    try:
        await load_kube_config(  # type: ignore[no-untyped-call]
            config_file=os.pathsep.join(str(p) for p in paths),  # merged as we merge them
            context=context,
            client_configuration=configuration,
        )
    except (ConfigException, OSError) as error:
        raise ConfigError(f"kubeconfig context {context!r}: {error}") from None
    ssl_context = client_context(
        cafile=configuration.ssl_ca_cert, cadata=getattr(configuration, "ca_cert_data", None)
    )
    if configuration.cert_file:
        ssl_context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        ssl_context.check_hostname = False
        ssl_context.verify_mode = ssl.CERT_NONE
    return ClusterAccess(
        str(configuration.host), ssl_context, OfficialConfiguration(configuration), context
    )
