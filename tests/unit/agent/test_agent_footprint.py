"""The agent runs in every pod of the largest JobSets, so it loads nothing of the controller above
the shared runtime: no API models (and no pydantic behind them), no reconcile, no controller glue,
no manager, no webhook, and no prometheus_client (it serves no metrics; its client keeps no
registry). Checked in a fresh interpreter, as a pod starts it."""

from __future__ import annotations

import subprocess
import sys

HEAVY = (
    "pydantic",
    "prometheus_client",
    "jobset_controller.api.types",
    "jobset_controller.reconcile",
    "jobset_controller.controller",
    "jobset_controller.manager",
    "jobset_controller.webhook",
)


def loaded_after(code: str) -> str:
    probe = f"import sys\n{code}\nprint(sorted(m for m in sys.modules if m.startswith({HEAVY!r})))"
    return subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()


def test_the_agent_imports_nothing_of_the_controller() -> None:
    loaded = loaded_after("import jobset_controller.agent")
    assert loaded == "[]", loaded


def test_a_client_without_a_registry_loads_no_metrics_library() -> None:
    """The agent's client (runtime/client.py) is built without a registry: the rest_client
    metrics module, and prometheus_client behind it, stay unloaded."""
    loaded = loaded_after(
        "import asyncio, ssl\n"
        "import jobset_controller.agent\n"
        "from jobset_controller.runtime.client import KubeClient\n"
        "from jobset_controller.runtime.kubeconfig import ClusterAccess, NoCredentials\n"
        "async def build():\n"
        "    access = ClusterAccess('http://127.0.0.1:1', ssl.create_default_context(),"
        " NoCredentials(), 'test')\n"
        "    await KubeClient.for_access(access).close()\n"
        "asyncio.run(build())"
    )
    assert loaded == "[]", loaded
