"""`jobset-controller` command line: `run`, `validate`, `plan`, `status`, `version` (and
`--version`), `agent`.

Exit codes: 0 success, 1 a checked failure (e.g. an invalid JobSet), 2 bad usage (flag or file).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from jobset_controller import __version__
from jobset_controller.api import FeatureGates
from jobset_controller.runtime.interrupts import StopSignals, by_signal
from jobset_controller.tools.commands import (
    add_plan_parser,
    add_status_parser,
    run_plan,
    run_status,
)
from jobset_controller.tools.followers import add_release_followers_parser, run_release_followers

if TYPE_CHECKING:
    from jobset_controller.runtime.certs import CertPolicy


def _validate(files: Sequence[Path], gates: FeatureGates) -> int:
    """Judge JobSet manifests offline as creating them would; one line per error, never a trace.

    Exit 1 when any JobSet would be refused (or a document cannot be judged), 2 when a file cannot
    be read as YAML at all. Documents of other kinds are skipped; empty documents are ignored.
    """
    from jobset_controller.tools.documents import UnreadableFile, judge_files, one_line

    failures = 0

    def uncheckable(line: str) -> None:
        nonlocal failures
        print(line)
        failures += 1

    try:
        for judged in judge_files(files, gates, uncheckable=uncheckable):
            for line in judged.error_lines():
                print(line)
            if judged.check.errors:
                failures += 1
            else:
                print(one_line(f"{judged.path}: {judged.subject}: valid"))
    except UnreadableFile as error:
        print(error, file=sys.stderr)
        return 2
    return 1 if failures else 0


class _Parser(argparse.ArgumentParser):
    """Bad usage is one line naming the flag and the reason (exit 2), not a usage dump.

    argparse quotes the offending argument in its message, and an argument may hold anything the
    shell passed: control characters, or lone surrogates (undecodable bytes), which stderr cannot
    encode. The message is escaped to one printable line first.
    """

    def error(self, message: str) -> NoReturn:
        from jobset_controller.tools.documents import one_line

        self.exit(2, one_line(f"{self.prog}: {message}") + "\n")


def build_parser(prog: str = "jobset-controller") -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description=__doc__)
    # Like Go programs' `--version` (and `version`, kept): the package's version, one line.
    parser.add_argument("--version", action="version", version=__version__)
    commands = parser.add_subparsers(dest="command", required=True)
    validate = commands.add_parser("validate", help="default and validate JobSet manifests offline")
    validate.add_argument("files", nargs="+", type=Path)
    validate.add_argument(
        "--feature-gates",
        default="",
        help="comma-separated Gate=true|false, as in the Configuration file's featureGates",
    )
    _add_run_parser(commands)
    add_plan_parser(commands)
    add_status_parser(commands)
    add_release_followers_parser(commands)
    commands.add_parser("version", help="print the version")
    # Dispatched by `main` before parsing (its own flags: `jobset-controller agent --help`).
    commands.add_parser("agent", help="run the in-place restart agent of a JobSet pod (KEP-467)")
    return parser


def _go_bool(text: str) -> bool:
    """Go's flag syntax for booleans: --flag, --flag=true, --flag=false."""
    value = text.lower()
    if value in ("1", "t", "true"):
        return True
    if value in ("0", "f", "false"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value {text!r}")


def _add_run_parser(commands: Any) -> None:
    from jobset_controller import config

    # The defaults shown are the Configuration's (their one owner); a flag given overrides it.
    defaults = config.Configuration()
    run = commands.add_parser(
        "run",
        help="run the controller (flags named like upstream's /manager)",
        description="Run the JobSet controller. Flags override the --config file only when given.",
    )
    run.add_argument(
        "--kubeconfig",
        default=None,
        help="path to a kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster)",
    )
    run.add_argument(
        "--config", default="", help="Configuration file (config.jobset.x-k8s.io/v1alpha1)"
    )
    run.add_argument(
        "--metrics-bind-address",
        default=None,
        help=f'metrics address (default "{defaults.metrics.bind_address}"; "0" disables)',
    )
    run.add_argument(
        "--metrics-secure",
        type=_go_bool,
        nargs="?",
        const=True,
        default=True,
        help="serve metrics over HTTPS with TokenReview/SubjectAccessReview on every request "
        "(default true; false: plain HTTP for anyone, e.g. behind a proxy)",
    )
    run.add_argument(
        "--health-probe-bind-address",
        default=None,
        help=f'probe address (default "{defaults.health.health_probe_bind_address}")',
    )
    run.add_argument(
        "--leader-elect",
        type=_go_bool,
        nargs="?",
        const=True,
        default=None,
        help="use leader election (default: the config file's value, true)",
    )
    run.add_argument(
        "--kube-api-qps",
        type=float,
        default=None,
        help=f"client-side QPS to the API server (default {defaults.client_connection.qps:g})",
    )
    run.add_argument(
        "--kube-api-burst",
        type=int,
        default=None,
        help=f"client-side burst (default {defaults.client_connection.burst})",
    )
    run.add_argument(
        "--workers",
        type=int,
        default=config.WORKERS,
        help=f"concurrent reconciles (default {config.WORKERS}; upstream: 1)",
    )
    run.add_argument(
        "--early-job-conditions",
        type=_go_bool,
        nargs="?",
        const=True,
        default=None,
        help="act on a child Job's FailureTarget and SuccessCriteriaMet conditions as on Failed "
        "and Complete, one termination grace period earlier (default: the config file's "
        f"earlyJobConditions.enable, {str(defaults.early_job_conditions.enable).lower()})",
    )
    run.add_argument(
        "--zap-log-level",
        default="info",
        help="log level: debug, info, warn, error, or a zap number",
    )
    run.add_argument(
        "--zap-devel",
        type=_go_bool,
        nargs="?",
        const=True,
        default=False,
        help="readable console logs",
    )
    run.add_argument(
        "--zap-encoder",
        choices=("json", "console"),
        default=None,
        help="log encoding, as upstream's flag (overrides --log-format and --zap-devel)",
    )
    run.add_argument(
        "--zap-stacktrace-level",
        choices=("info", "error", "panic"),
        default=None,
        help="add the calling stack to lines at or above this level (default: none)",
    )
    run.add_argument(
        "--zap-time-encoding",
        choices=("epoch", "millis", "nano", "iso8601", "rfc3339", "rfc3339nano"),
        default=None,
        help="how the ts of a log line is written (default: ISO 8601 with microseconds, UTC)",
    )
    run.add_argument(
        "--log-format",
        choices=("auto", "json", "console"),
        default="auto",
        help="log format (auto: console on a terminal, JSON otherwise)",
    )
    # Ours, not upstream's (its rotator's lifetimes are fixed): internal certificate management.
    run.add_argument(
        "--webhook-cert-validity",
        default=None,
        help=f'serving certificate lifetime, Go duration (default "{config.CERT_VALIDITY}")',
    )
    run.add_argument(
        "--webhook-ca-validity",
        default=None,
        help=f'CA lifetime, Go duration (default "{config.CA_VALIDITY}")',
    )
    run.add_argument(
        "--webhook-cert-lookahead",
        default=None,
        help="replace a certificate this long before it expires "
        f'(default "{config.CERT_LOOKAHEAD}")',
    )
    run.add_argument(
        "--webhook-cert-extra-sans",
        default="",
        help="comma-separated extra DNS names or IPs for the serving certificate "
        "(e.g. 127.0.0.1 when the API server calls the webhook by URL on the same host)",
    )


def _run(args: argparse.Namespace, stops: StopSignals) -> int:
    # Before the loop runs nothing needs stopping: a signal until then exits 0 at once.
    stops.exit_with(0)
    import asyncio

    from jobset_controller.config import ConfigError, load_configuration
    from jobset_controller.manager import Manager, ManagerOptions
    from jobset_controller.runtime.clock import RealClock
    from jobset_controller.runtime.collector import set_thresholds as set_collector_thresholds
    from jobset_controller.runtime.logging import configure_logging
    from jobset_controller.runtime.ratelimit import client_throttle
    from jobset_controller.runtime.rlimit import raise_open_files_limit

    try:
        config = load_configuration(args.config)
        FeatureGates.from_mapping(config.feature_gates)
    except (ConfigError, ValueError) as error:
        print(f"jobset-controller: {error}", file=sys.stderr)
        return 2
    if args.kubeconfig and not Path(args.kubeconfig).is_file():
        print(f"jobset-controller: --kubeconfig {args.kubeconfig}: no such file", file=sys.stderr)
        return 2
    if args.workers < 1:
        print("jobset-controller: --workers: must be at least 1", file=sys.stderr)
        return 2

    options = ManagerOptions(
        config=config,
        kubeconfig=args.kubeconfig,
        metrics_bind_address=args.metrics_bind_address,
        metrics_secure=args.metrics_secure,
        health_probe_bind_address=args.health_probe_bind_address,
        leader_elect=args.leader_elect,
        qps=args.kube_api_qps,
        burst=args.kube_api_burst,
        workers=args.workers,
        early_job_conditions=args.early_job_conditions,
    )
    try:
        client_throttle(options.effective_qps, options.effective_burst, clock=RealClock())
    except ValueError as error:
        where = (
            "--kube-api-burst"
            if args.kube_api_burst is not None
            else f"--config {args.config}: clientConnection.burst"
        )
        print(f"jobset-controller: {where}: {error}", file=sys.stderr)
        return 2
    log_format: Literal["auto", "json", "console"] = args.zap_encoder or (
        "console" if args.zap_devel else args.log_format
    )
    try:
        configure_logging(
            args.zap_log_level,
            log_format,
            time_encoding=args.zap_time_encoding,
            stacktrace_level=args.zap_stacktrace_level,
        )
    except ValueError as error:
        print(f"jobset-controller: --zap-log-level: {error}", file=sys.stderr)
        return 2

    try:
        cert_policy = _cert_policy(args)
    except ValueError as error:
        print(f"jobset-controller: {error}", file=sys.stderr)
        return 2

    options = dataclasses.replace(
        options,
        cert_policy=cert_policy,
        cert_extra_sans=tuple(
            name.strip() for name in args.webhook_cert_extra_sans.split(",") if name.strip()
        ),
    )

    # Like a Go program at start: the soft open-files limit up to the hard one (logged), so a
    # burst of connections to the served ports meets the hard limit, not a low default.
    raise_open_files_limit()
    set_collector_thresholds()  # runtime/collector.py: no long full collections under load

    async def main() -> int:
        manager = Manager(options)
        # A signal received since the command started stops the run at its first step.
        stops.attach(lambda _signum: manager.request_stop())
        return await manager.run()

    return asyncio.run(main())


def _cert_policy(args: argparse.Namespace) -> CertPolicy:
    """The certificate lifetimes from the flags given; ValueError names the bad flag."""
    from jobset_controller.config import parse_duration
    from jobset_controller.manager.environment import default_cert_policy

    changes: dict[str, datetime.timedelta] = {}
    for flag, field in (
        ("webhook_cert_validity", "cert_validity"),
        ("webhook_ca_validity", "ca_validity"),
        ("webhook_cert_lookahead", "lookahead"),
    ):
        value = getattr(args, flag)
        if value is None:
            continue
        try:
            changes[field] = datetime.timedelta(seconds=parse_duration(value))
        except ValueError as error:
            raise ValueError(f"--{flag.replace('_', '-')}: {error}") from None
    return dataclasses.replace(default_cert_policy(), **changes)


def _parse_gates(text: str) -> FeatureGates:
    mapping: dict[str, bool] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = item.partition("=")
        if value.lower() not in ("true", "false"):
            raise ValueError(f"--feature-gates: {item!r}: expected Gate=true or Gate=false")
        mapping[name] = value.lower() == "true"
    return FeatureGates.from_mapping(mapping)


def main(
    argv: Sequence[str] | None = None,
    prog: str = "jobset-controller",
    *,
    stops: StopSignals | None = None,
) -> int:
    """The command line. `stops`: SIGINT and SIGTERM as the installed command took them at its
    first line (jobset_controller.console); None when called in-process (tests), where the
    commands that run an event loop take them only while it runs."""
    argv = sys.argv[1:] if argv is None else list(argv)
    stops = stops or StopSignals()
    if argv[:1] == ["agent"]:
        from jobset_controller import agent

        return agent.main(argv[1:], stops=stops)
    args = build_parser(prog).parse_args(argv)
    if args.command in ("validate", "plan", "version"):
        stops.exit_with(by_signal)  # no loop, nothing to clean up: as any program ends
    if args.command == "version":
        print(__version__)
        return 0
    if args.command == "run":
        return _run(args, stops)
    if args.command == "status":
        return run_status(args, stops=stops)
    if args.command == "release-followers":
        return run_release_followers(args, stops=stops)
    try:
        gates = _parse_gates(args.feature_gates)
    except ValueError as error:
        print(f"jobset-controller: {error}", file=sys.stderr)
        return 2
    if args.command == "plan":
        return run_plan(args, gates)
    return _validate(args.files, gates)
