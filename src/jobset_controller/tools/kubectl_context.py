"""Which cluster, context and namespace a command talks to, by kubectl's rules.

Which files are read and how they merge is runtime/kubeconfig.py's (kubectl's precedence: the
flag, else $KUBECONFIG, else ~/.kube/config; the first file to set current-context wins). This
adds what only the commands need: the namespace, which is ``-n/--namespace``, else the chosen
context's ``namespace``, else ``default``. ``resolve`` is pure over the merged files; ``load``
reads them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from jobset_controller.runtime.kubeconfig import (
    ConfigError,
    Kubeconfig,
    existing_kubeconfigs,
    read,
)


class KubeconfigError(Exception):
    """No usable kubeconfig, or the context asked for does not exist."""


@dataclass(frozen=True)
class Target:
    """What the client connects with: the kubeconfig path list, the context, the namespace."""

    kubeconfig: str | None
    context: str | None
    namespace: str


def resolve(config: Kubeconfig, *, context: str | None, namespace: str | None) -> Target:
    """The target from the merged files and the flags."""
    if not config.paths:
        raise KubeconfigError("no kubeconfig found (set --kubeconfig or KUBECONFIG)")
    chosen = context or config.current_context or None
    if chosen is not None and config.context(chosen) is None:
        raise KubeconfigError(f'context "{chosen}" does not exist')
    if namespace is None:
        namespace = str((config.context(chosen or "") or {}).get("namespace") or "default")
    paths = os.pathsep.join(str(path) for path in config.paths)
    return Target(kubeconfig=paths, context=chosen, namespace=namespace)


def load(
    flag: str | None,
    environ: Mapping[str, str],
    *,
    context: str | None,
    namespace: str | None,
) -> Target:
    """Read the kubeconfig files kubectl would read and ``resolve`` the target."""
    try:
        config = read(existing_kubeconfigs(flag, environ))
    except ConfigError as error:
        raise KubeconfigError(str(error)) from None
    return resolve(config, context=context, namespace=namespace)
