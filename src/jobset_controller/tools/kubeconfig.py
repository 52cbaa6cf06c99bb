"""Which cluster, context and namespace a command talks to, by kubectl's rules.

Why our own resolution: the Python client merges a KUBECONFIG list but lets the LAST file's
``current-context`` win, where kubectl lets the first file that sets it win; and it knows nothing
of the context's namespace. kubectl's rules, as implemented here:

* ``--kubeconfig`` names one file; else ``$KUBECONFIG`` is a ``:``-separated list (missing files
  skipped); else ``~/.kube/config``.
* The context is ``--context``, else the first ``current-context`` set in the list.
* The namespace is ``-n/--namespace``, else the context's ``namespace``, else ``default``.

``resolve`` is pure over the parsed files; ``load`` reads them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class KubeconfigError(Exception):
    """No usable kubeconfig, or the context asked for does not exist."""


@dataclass(frozen=True)
class Target:
    """What the client connects with: the kubeconfig path list, the context, the namespace."""

    kubeconfig: str | None
    context: str | None
    namespace: str


def kubeconfig_paths(flag: str | None, environ: Mapping[str, str]) -> list[Path]:
    """The files kubectl would read, in precedence order (see the module docstring)."""
    if flag:
        return [Path(flag).expanduser()]
    listed = environ.get("KUBECONFIG", "")
    if listed:
        return [Path(part).expanduser() for part in listed.split(os.pathsep) if part]
    return [Path("~/.kube/config").expanduser()]


def resolve(
    files: Sequence[tuple[Path, Mapping[str, Any]]],
    *,
    context: str | None,
    namespace: str | None,
) -> Target:
    """The target from the parsed files (in precedence order) and the flags."""
    if not files:
        raise KubeconfigError("no kubeconfig found (set --kubeconfig or KUBECONFIG)")
    chosen = context
    if chosen is None:
        chosen = next(
            (str(d["current-context"]) for _, d in files if d.get("current-context")), None
        )
    contexts: dict[str, Mapping[str, Any]] = {}
    for _, document in files:
        for entry in document.get("contexts") or ():
            name = entry.get("name")
            if isinstance(name, str) and name not in contexts:
                contexts[name] = entry.get("context") or {}
    if chosen is not None and chosen not in contexts:
        raise KubeconfigError(f'context "{chosen}" does not exist')
    if namespace is None:
        namespace = str((contexts.get(chosen or "") or {}).get("namespace") or "default")
    paths = os.pathsep.join(str(path) for path, _ in files)
    return Target(kubeconfig=paths, context=chosen, namespace=namespace)


def load(
    flag: str | None,
    environ: Mapping[str, str],
    *,
    context: str | None,
    namespace: str | None,
) -> Target:
    """Read the kubeconfig files kubectl would read and ``resolve`` the target."""
    files: list[tuple[Path, Mapping[str, Any]]] = []
    for path in kubeconfig_paths(flag, environ):
        if not path.is_file():
            if flag:
                raise KubeconfigError(f"--kubeconfig {flag}: no such file")
            continue
        try:
            document = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as error:
            raise KubeconfigError(f"{path}: {error}") from error
        if isinstance(document, Mapping):
            files.append((path, document))
    return resolve(files, context=context, namespace=namespace)
