"""A real Prometheus on loopback, for tests that must prove a scrape (or a rule) works.

Why real: what a dashboard or an alert needs is that Prometheus itself can scrape the endpoint
(TLS, bearer token, text format it parses) and that its queries return what we expect. Reading
/metrics with an HTTP client proves neither.

`Prometheus(workdir, scrape_configs=[...], rule_files=[...])` writes a config with a 1 s scrape
and evaluation interval, starts `prometheus` on a free 127.0.0.1 port with its data in
`workdir`, and waits for `/-/ready`. `query(expr)` runs an instant query through the HTTP API;
`wait_for(expr, check)` repeats it until `check` accepts the result vector; `targets()` shows
each target's health and last scrape error (what a failing wait reports). `promtool(...)` runs
the matching promtool (e.g. `check rules FILE`). `https_scrape_config(...)` builds the job for an
HTTPS endpoint with a bearer token file, as a ServiceMonitor with `bearerTokenFile` makes it.

Binaries: `prometheus_bin_dir()` is `JOBSET_PROMETHEUS_BIN` (a directory with `prometheus` and
`promtool`, what `hack/test.sh` exports) or None; `Prometheus` falls back to `hack/prometheus.sh`
from the source checkout, which fetches and caches Debian's package. Nothing listens outside
127.0.0.1.

For checking shipped observability files without a server: `rule_expressions(file)` (each alert
or recording rule's name and expression), `dashboard_expressions(file)` (every Grafana panel
query) and `queried_metrics(expr)` (the metric names a PromQL expression reads).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml

from jobset_controller_dev.envtest.binaries import repo_root
from jobset_controller_dev.envtest.controlplane import ControlPlaneError
from jobset_controller_dev.envtest.polling import scaled
from jobset_controller_dev.envtest.processes import ManagedProcess, free_port

Vector = list[dict[str, Any]]


def prometheus_bin_dir() -> Path | None:
    """`JOBSET_PROMETHEUS_BIN` when it holds prometheus and promtool, else None."""
    configured = os.environ.get("JOBSET_PROMETHEUS_BIN")
    if configured and all((Path(configured) / name).is_file() for name in _BINARIES):
        return Path(configured)
    return None


def ensure_prometheus_bin_dir() -> Path:
    """`prometheus_bin_dir()`, else what `hack/prometheus.sh` prints (fetched once, cached)."""
    found = prometheus_bin_dir()
    if found is not None:
        return found
    root = repo_root()
    if root is None:
        raise ControlPlaneError("set JOBSET_PROMETHEUS_BIN to a directory holding prometheus")
    result = subprocess.run(
        [str(root / "hack" / "prometheus.sh")],
        capture_output=True,
        text=True,
        check=False,
        timeout=scaled(600),
    )
    if result.returncode != 0:
        raise ControlPlaneError(f"hack/prometheus.sh failed: {result.stderr.strip()[-2000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


_BINARIES = ("prometheus", "promtool")
# PromQL words that are not metric names (operators, modifiers, aggregations, whose grouping
# clause may stand between the name and its parenthesis), and those followed by label names.
_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
     "group_right", "inf", "nan", "atan2", "sum", "min", "max", "avg", "group", "stddev",
     "stdvar", "count", "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
)  # fmt: skip
_LABEL_LISTS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_TOKEN = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*|\d+(?:\.\d+)?[a-z]*|\S")


def queried_metrics(expression: str) -> set[str]:
    """The metric names `expression` selects (not functions, keywords or label names)."""
    text = _STRING.sub('""', expression)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    tokens = _TOKEN.findall(text)
    names: set[str] = set()
    index = 0
    while index < len(tokens):
        token = tokens[index]
        following = tokens[index + 1] if index + 1 < len(tokens) else ""
        if token in _LABEL_LISTS and following == "(":
            index = tokens.index(")", index) + 1  # skip the label names
            continue
        is_name = re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*", token) is not None
        if is_name and following != "(" and token.lower() not in _KEYWORDS:
            names.add(token)
        index += 1
    return names


def rule_expressions(path: Path) -> dict[str, str]:
    """Each rule's name (`alert` or `record`) and expression, from a Prometheus rule file."""
    document = yaml.safe_load(path.read_text())
    return {
        str(rule.get("alert") or rule.get("record")): str(rule["expr"])
        for group in document["groups"]
        for rule in group["rules"]
    }


def dashboard_expressions(path: Path) -> list[str]:
    """Every query of every panel of a Grafana dashboard (panels nested in rows included)."""
    dashboard = json.loads(path.read_text())
    expressions: list[str] = []
    pending = list(dashboard.get("panels", []))
    while pending:
        panel = pending.pop(0)
        pending.extend(panel.get("panels", []))
        expressions.extend(
            str(target["expr"]) for target in panel.get("targets", []) if target.get("expr")
        )
    return expressions


def https_scrape_config(
    job: str,
    target: str,
    token_file: Path,
    *,
    ca_file: Path | None = None,
    server_name: str | None = None,
) -> dict[str, Any]:
    """A scrape job for `https://<target>/metrics` sending the token in `token_file`.

    Without `ca_file` the server certificate is not verified (the controller's self-signed
    metrics certificate, as the shipped ServiceMonitor does).
    """
    tls: dict[str, Any] = {"insecure_skip_verify": ca_file is None}
    if ca_file is not None:
        tls["ca_file"] = str(ca_file)
    if server_name:
        tls["server_name"] = server_name
    return {
        "job_name": job,
        "scheme": "https",
        "metrics_path": "/metrics",
        "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
        "tls_config": tls,
        "static_configs": [{"targets": [target]}],
    }


class Prometheus:
    """One Prometheus process with a generated config (module docstring)."""

    def __init__(
        self,
        workdir: Path,
        *,
        scrape_configs: Sequence[dict[str, Any]] = (),
        rule_files: Sequence[Path] = (),
        bin_dir: Path | None = None,
        interval: str = "1s",
        ready_timeout: float = 60.0,
    ) -> None:
        self.workdir = workdir
        self._bin_dir = bin_dir
        self._config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": list(scrape_configs),
            "rule_files": [str(path) for path in rule_files],
        }
        self._ready_timeout = ready_timeout
        self.port = 0
        self.process: ManagedProcess | None = None

    @property
    def bin_dir(self) -> Path:
        if self._bin_dir is None:
            self._bin_dir = ensure_prometheus_bin_dir()
        return self._bin_dir

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> Self:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self._config, sort_keys=False))
        self.port = free_port()
        self.process = ManagedProcess(
            "prometheus",
            [
                str(self.bin_dir / "prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            self.workdir / "prometheus.log",
        )
        self.process.start()
        deadline = time.monotonic() + scaled(self._ready_timeout)  # the ready timeout, scaled
        while not self._ready():
            if not self.process.running():
                raise ControlPlaneError(f"prometheus exited:\n{self.process.log_tail()}")
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"prometheus /-/ready not 200 within {scaled(self._ready_timeout):g} s:\n"
                    f"{self.process.log_tail()}"
                )
            time.sleep(0.2)
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=scaled(2)) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def api(self, path: str, **params: str) -> Any:
        """GET `/api/v1/<path>` and return its `data` (raises on an error answer, or after 10 s,
        scaled)."""
        query = urllib.parse.urlencode(params)
        url = f"{self.url}/api/v1/{path}" + (f"?{query}" if query else "")
        with urllib.request.urlopen(url, timeout=scaled(10)) as answer:
            body = json.loads(answer.read())
        if body.get("status") != "success":
            raise ControlPlaneError(f"prometheus {path}: {body}")
        return body["data"]

    def query(self, expr: str) -> Vector:
        """An instant query; the result vector (one entry per series: metric and value)."""
        data = self.api("query", query=expr)
        result: Vector = data["result"]
        return result

    def targets(self) -> list[dict[str, Any]]:
        """Active targets with `health`, `lastError` and `scrapeUrl`."""
        active: list[dict[str, Any]] = self.api("targets")["activeTargets"]
        return active

    def wait_for(
        self, expr: str, check: Callable[[Vector], bool], *, within: float = 60.0
    ) -> Vector:
        """Repeat `query(expr)` until `check` accepts it, for `within` s (scaled here:
        `polling.scaled`); raises with the last result and the targets' state if not."""
        deadline = time.monotonic() + scaled(within)
        while True:
            result = self.query(expr)
            if check(result):
                return result
            if time.monotonic() > deadline:
                states = [
                    (t.get("scrapeUrl"), t.get("health"), t.get("lastError"))
                    for t in self.targets()
                ]
                raise AssertionError(
                    f"{expr}: not as expected within {scaled(within):g} s: {result}; "
                    f"targets: {states}"
                )
            time.sleep(0.5)

    def promtool(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run promtool (e.g. `check`, `rules`, `FILE`; up to 120 s, scaled); the caller checks
        the return code."""
        return subprocess.run(
            [str(self.bin_dir / "promtool"), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=scaled(120),
        )
