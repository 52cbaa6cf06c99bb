"""The in-place restart agent (issue 25) as a process against the real API server, as the example
ServiceAccount (manifests/in-place-restart-agent/rbac.yaml): what it writes, when it lifts its
barrier, how it exits. No kubelet here: the test plays the controller's part by writing the
JobSet's status, and reads the barrier from the agent's probe endpoint or exit code."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobset_controller.runtime.client import ApiError, KubeClient
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.polling import eventually, scaled
from jobset_controller_dev.envtest.processes import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
AGENT = Path(sys.executable).parent / "in-place-restart-agent"
ATTEMPT = "jobset.sigs.k8s.io/in-place-restart-attempt"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
POD_NAME = "js-w-0-0-abcde"


@pytest.fixture
def agent_kubeconfig(control_plane: ControlPlane, namespace: str, tmp_path: Path) -> Path:
    """The agent's identity: the example ServiceAccount, Role and RoleBinding in the namespace."""
    for document in yaml.safe_load_all(
        (ROOT / "manifests/in-place-restart-agent/rbac.yaml").read_text()
    ):
        path = collection(document["kind"], namespace)
        for subject in document.get("subjects", ()):
            subject["namespace"] = namespace
        status, body = control_plane.request("POST", path, document)
        # The admission policy is cluster-scoped: the session's first test creates it.
        assert status == 201 or (status == 409 and "/namespaces/" not in path), body
    return control_plane.service_account_kubeconfig(
        namespace, "in-place-restart-agent", tmp_path / "agent.kubeconfig"
    )


def collection(kind: str, namespace: str) -> str:
    """Where an object of the example RBAC manifest is created."""
    return {
        "ServiceAccount": f"/api/v1/namespaces/{namespace}/serviceaccounts",
        "Role": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
        "RoleBinding": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
        "ValidatingAdmissionPolicy": (
            "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
        ),
        "ValidatingAdmissionPolicyBinding": (
            "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
        ),
    }[kind]


def jobset_manifest(strategy: str = "InPlaceRestart", **annotations: str) -> dict[str, Any]:
    pod = {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
    job = {
        "parallelism": 1,
        "completions": 1,
        "backoffLimit": 2**31 - 1,
        "podReplacementPolicy": "Failed",
        "template": {"spec": pod},
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "annotations": annotations},
        "spec": {
            "failurePolicy": {"maxRestarts": 3, "restartStrategy": strategy},
            "replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": job}}],
        },
    }


@pytest.fixture
async def pod(kube: KubeClient, namespace: str, agent_kubeconfig: Path) -> str:
    """The agent's pod (no kubelet runs it), with the example ServiceAccount."""
    body = {
        "metadata": {"name": POD_NAME, "labels": {"jobset.sigs.k8s.io/jobset-name": "js"}},
        "spec": {
            "serviceAccountName": "in-place-restart-agent",
            "automountServiceAccountToken": False,
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }
    await kube.create(f"/api/v1/namespaces/{namespace}/pods", body)
    return POD_NAME


async def set_status(kube: KubeClient, namespace: str, **status: int) -> None:
    path = JOBSETS.format(ns=namespace) + "/js"
    await kube.merge_patch(path + "/status", {"status": status})


async def annotated(kube: KubeClient, namespace: str) -> bool:
    return await attempt_of(kube, namespace) is not None


async def attempt_of(kube: KubeClient, namespace: str) -> str | None:
    pod = await kube.get(f"/api/v1/namespaces/{namespace}/pods/{POD_NAME}")
    value = (pod["metadata"].get("annotations") or {}).get(ATTEMPT)
    return None if value is None else str(value)


class AgentProcess:
    def __init__(self, process: asyncio.subprocess.Process, started: float) -> None:
        self.process = process
        self.started = started

    async def exit_code(self, within: float = 20) -> int:
        """The agent's exit code once it exits, within `within` s (scaled here)."""
        try:
            return await asyncio.wait_for(self.process.wait(), scaled(within))
        except TimeoutError:
            raise AssertionError(
                f"the agent (pid {self.process.pid}) still runs after {scaled(within):g} s"
            ) from None

    async def stderr(self) -> str:
        assert self.process.stderr is not None
        return (await self.process.stderr.read()).decode()

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")


@pytest.fixture
async def start_agent(namespace: str, agent_kubeconfig: Path, tmp_path: Path) -> AsyncIterator[Any]:
    namespace_file = tmp_path / "namespace"
    namespace_file.write_text(namespace)
    started: list[AgentProcess] = []

    async def start(**env: str) -> AgentProcess:
        environ = {
            "PATH": os.environ["PATH"],
            "JOBSET_NAME": "js",
            "POD_NAME": POD_NAME,
            **env,
        }
        began = time.monotonic()
        process = await asyncio.create_subprocess_exec(
            str(AGENT),
            "--kubeconfig", str(agent_kubeconfig),
            "--namespace-file", str(namespace_file),
            env=environ,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        agent = AgentProcess(process, began)
        started.append(agent)
        return agent

    yield start
    for agent in started:
        if agent.process.returncode is None:
            agent.process.kill()
            await agent.process.wait()


def probe(port: int, path: str = "/barrier-is-down") -> int:
    try:
        url = f"http://127.0.0.1:{port}{path}"
        with urllib.request.urlopen(url, timeout=scaled(2)) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0  # not listening: the barrier is up


async def test_sidecar_annotates_lifts_the_barrier_and_exits_to_restart_in_place(
    kube: KubeClient, namespace: str, pod: str, start_agent: Any
) -> None:
    await kube.create(JOBSETS.format(ns=namespace), jobset_manifest())
    port = free_port()
    agent = await start_agent(STARTUP_PROBE_PORT=str(port), IN_PLACE_RESTART_EXIT_CODE="42")
    await eventually(lambda: annotated(kube, namespace), "the agent annotates attempt 0", within=20)
    assert await attempt_of(kube, namespace) == "0"
    start_seconds = time.monotonic() - agent.started
    rss = agent.rss_kib()
    print(f"agent: annotated {start_seconds:.2f} s after exec, RSS {rss / 1024:.1f} MiB")
    assert rss < 40 * 1024
    pod_object = await kube.get(f"/api/v1/namespaces/{namespace}/pods/{POD_NAME}")
    managers = {(m["manager"], m["operation"]) for m in pod_object["metadata"]["managedFields"]}
    assert ("in-place-restart-agent", "Apply") in managers
    assert probe(port) == 0  # the barrier is up: nothing listens yet
    await set_status(kube, namespace, currentInPlaceRestartAttempt=0)
    await eventually(lambda: probe(port) == 200, "the barrier lifts", within=20)
    assert probe(port, "/other") == 404
    await set_status(kube, namespace, previousInPlaceRestartAttempt=0)
    assert await agent.exit_code() == 42


async def test_a_restarted_agent_joins_the_next_attempt(
    kube: KubeClient, namespace: str, pod: str, start_agent: Any
) -> None:
    await kube.create(JOBSETS.format(ns=namespace), jobset_manifest())
    await set_status(
        kube, namespace, currentInPlaceRestartAttempt=2, previousInPlaceRestartAttempt=2
    )
    await start_agent(STARTUP_PROBE_PORT=str(free_port()))

    async def annotated_three() -> bool:
        return await attempt_of(kube, namespace) == "3"

    await eventually(annotated_three, "the agent annotates attempt current + 1", within=20)


async def test_main_container_mode_runs_the_worker_and_exits_with_its_code(
    kube: KubeClient, namespace: str, pod: str, start_agent: Any, tmp_path: Path
) -> None:
    await kube.create(JOBSETS.format(ns=namespace), jobset_manifest())
    marker = tmp_path / "ran"
    agent = await start_agent(WORKER_COMMAND=f"touch {marker}; exit 7", SHELL="/bin/sh")
    await eventually(lambda: annotated(kube, namespace), "annotated", within=20)
    assert not marker.exists()  # behind the barrier
    await set_status(kube, namespace, currentInPlaceRestartAttempt=0)
    assert await agent.exit_code() == 7
    assert marker.exists()


async def test_the_disable_annotation_bypasses_the_barrier(
    kube: KubeClient, namespace: str, pod: str, start_agent: Any
) -> None:
    manifest = jobset_manifest(**{"jobset.sigs.k8s.io/disable-in-place-restart": "true"})
    await kube.create(JOBSETS.format(ns=namespace), manifest)
    agent = await start_agent(WORKER_COMMAND="exit 0", SHELL="/bin/sh")
    assert await agent.exit_code() == 0
    assert await attempt_of(kube, namespace) is None  # never joined a barrier


async def test_another_strategy_bypasses_the_barrier(
    kube: KubeClient, namespace: str, pod: str, start_agent: Any
) -> None:
    await kube.create(JOBSETS.format(ns=namespace), jobset_manifest("Recreate"))
    port = free_port()
    await start_agent(STARTUP_PROBE_PORT=str(port))
    await eventually(lambda: probe(port) == 200, "the barrier lifts at once", within=20)


async def test_a_missing_variable_is_one_line_and_exit_1(namespace: str, start_agent: Any) -> None:
    agent = await start_agent(JOBSET_NAME="")
    assert await agent.exit_code() == 1
    lines = (await agent.stderr()).strip().splitlines()
    assert lines == ["in-place-restart-agent: environment variable JOBSET_NAME must be set"]


async def test_sigterm_exits_128_plus_15(
    kube: KubeClient, namespace: str, pod: str, start_agent: Any
) -> None:
    await kube.create(JOBSETS.format(ns=namespace), jobset_manifest())
    agent = await start_agent(STARTUP_PROBE_PORT=str(free_port()))
    await eventually(lambda: annotated(kube, namespace), "annotated", within=20)
    agent.process.send_signal(signal.SIGTERM)
    assert await agent.exit_code() == 128 + signal.SIGTERM


async def test_the_agent_waits_for_its_jobset_without_a_hot_loop(
    kube: KubeClient, namespace: str, pod: str, start_agent: Any
) -> None:
    """A JobSet that does not exist yet: the agent watches (no error, no retries) and joins the
    barrier when it appears."""
    agent = await start_agent(STARTUP_PROBE_PORT=str(free_port()))
    await kube.create(JOBSETS.format(ns=namespace), jobset_manifest())
    await eventually(lambda: annotated(kube, namespace), "annotated once it exists", within=20)
    agent.process.send_signal(signal.SIGTERM)
    await agent.exit_code()
    assert "retrying" not in await agent.stderr()


async def test_the_agents_account_may_change_only_the_attempt_annotation(
    kube: KubeClient, namespace: str, pod: str, agent_kubeconfig: Path
) -> None:
    """The example's admission policy narrows the Role's pod `patch` (as upstream's does)."""
    path = f"/api/v1/namespaces/{namespace}/pods/{POD_NAME}"
    agent = await KubeClient.connect(kubeconfig=str(agent_kubeconfig))
    try:
        await agent.merge_patch(path, {"metadata": {"annotations": {ATTEMPT: "5"}}})
        for change in (
            {"metadata": {"labels": {"x": "y"}}},
            {"metadata": {"annotations": {"other": "x"}}},
            {"spec": {"activeDeadlineSeconds": 5}},
        ):
            with pytest.raises(ApiError, match="may change only the pod annotation"):
                await agent.merge_patch(path, change)
    finally:
        await agent.close()
    assert await attempt_of(kube, namespace) == "5"
