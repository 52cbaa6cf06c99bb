"""`jobset-controller` command line: `run`, `validate`, `envtest`, `version`.

Exit codes: 0 success, 1 a checked failure (e.g. an invalid JobSet), 2 bad usage (flag or file).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml
from pydantic import ValidationError

from jobset_controller import __version__
from jobset_controller.api import FeatureGates, JobSet, default_jobset, validate_create


def _validate(files: Sequence[Path], gates: FeatureGates) -> int:
    """Default and validate JobSet manifests offline, as admission would; print every error."""
    failures = 0
    for path in files:
        try:
            documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
        except (OSError, yaml.YAMLError) as error:
            print(f"{path}: cannot read: {error}", file=sys.stderr)
            return 2
        for doc in documents:
            if doc.get("kind") != "JobSet":
                continue
            name = (doc.get("metadata") or {}).get("name") or "<generateName>"
            try:
                errors = [
                    str(e)
                    for e in validate_create(
                        default_jobset(JobSet.model_validate(doc)), features=gates
                    )
                ]
            except ValidationError as error:
                errors = [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()]
            for message in errors:
                print(f"{path}: JobSet {name}: {message}")
            if errors:
                failures += 1
            else:
                print(f"{path}: JobSet {name}: valid")
    return 1 if failures else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jobset-controller", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    validate = commands.add_parser("validate", help="default and validate JobSet manifests offline")
    validate.add_argument("files", nargs="+", type=Path)
    validate.add_argument(
        "--feature-gates",
        default="",
        help="comma-separated Gate=true|false, as in the Configuration file's featureGates",
    )
    commands.add_parser("envtest", help="run a local etcd + kube-apiserver until Ctrl-C")
    commands.add_parser("version", help="print the version")
    return parser


def _parse_gates(text: str) -> FeatureGates:
    mapping: dict[str, bool] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = item.partition("=")
        if value.lower() not in ("true", "false"):
            raise ValueError(f"--feature-gates: {item!r}: expected Gate=true or Gate=false")
        mapping[name] = value.lower() == "true"
    return FeatureGates.from_mapping(mapping)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "version":
        print(__version__)
        return 0
    if args.command == "envtest":
        from jobset_controller.envtest.serve import main as serve

        return serve()
    try:
        gates = _parse_gates(args.feature_gates)
    except ValueError as error:
        print(f"jobset-controller: {error}", file=sys.stderr)
        return 2
    return _validate(args.files, gates)
