"""This machine's architecture's image, natively: what it holds (nothing a controller does not
use, every library its programs load, bytecode for every module a controller imports in a
cluster) and every command the product has, run in it as users run them."""

from __future__ import annotations

import http.client
import json
import shutil
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.image.conftest import InCluster, readable_dir, share

from jobset_controller import __version__
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.polling import poll, scaled
from jobset_controller_dev.envtest.processes import free_port
from jobset_controller_dev.image.containers import (
    Image,
    Mounted,
    imported_modules,
    mounted,
    podman,
    stop,
    unmount,
)
from jobset_controller_dev.image.elf import is_elf
from jobset_controller_dev.image.rootfs import TRIPLETS, library_closure

pytestmark = pytest.mark.image

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"
MODULES_FILE = "hack/image/cluster-modules.txt"
# The goal for the native image, in bytes: well under half its former 410 MB (upstream's Go
# image is about 60 MB; docs/development.md says what the rest is and why it stays).
SIZE_GOAL = 150_000_000


@pytest.fixture(scope="module")
def files(native: Image) -> Iterator[Mounted]:
    try:
        yield mounted(native.name)
    finally:
        unmount(native.name)


# ------------------------------------------------------------------------------ what it holds
def test_the_image_is_at_most_150_mb(native: Image) -> None:
    size = int(podman("image", "inspect", "--format", "{{.Size}}", native.name).stdout)
    assert size <= SIZE_GOAL, f"{native.name}: {size / 1e6:.0f} MB"


def test_the_image_holds_no_shell_package_manager_or_perl(files: Mounted) -> None:
    names = {path.name for path in files.files()}
    for program in ("sh", "bash", "dash", "apt", "apt-get", "dpkg", "perl", "pip", "ls"):
        assert program not in names, program
    assert not (files.root / "var/lib/dpkg").exists()


def test_every_shared_object_finds_its_libraries_in_the_image(
    files: Mounted, native: Image
) -> None:
    elf = [str(path.relative_to(files.root)) for path in files.files() if is_elf(path)]
    assert len(elf) > 50
    library_closure(files.root, elf, TRIPLETS[native.arch])  # SystemExit names a missing one


def test_no_type_stubs_tests_or_generated_client_models_are_shipped(files: Mounted) -> None:
    site = files.python_dirs()[1]
    assert not list(site.rglob("*.pyi"))
    assert not list(site.rglob("py.typed"))
    assert not [p for p in site.rglob("tests") if p.is_dir() and ".dist-info" not in str(p)]
    assert sorted(
        p.name for p in (site / "kubernetes/client/models").iterdir() if p.suffix == ".py"
    ) == ["__init__.py"]
    # The product and its dependencies' metadata stay (importlib.metadata, the SBOM).
    assert list(site.glob("jobset_controller-*.dist-info/METADATA"))


def test_ca_certificates_are_where_pythons_default_context_looks(native: Image) -> None:
    result = native.run(
        "python",
        "-c",
        "import ssl; print(ssl.create_default_context().cert_store_stats()['x509_ca'])",
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > 100


def test_version_flag_and_subcommand(native: Image) -> None:
    for argv in (["--version"], ["version"]):
        result = native.run("jobset-controller", *argv)
        assert (result.returncode, result.stdout) == (0, f"{__version__}\n"), result.stderr


# ------------------------------------------------------------------------------ in a cluster
def jobset(name: str) -> dict[str, Any]:
    document = yaml.safe_load((EXAMPLES / "pytorch-workers.yaml").read_text())
    document["metadata"] = {"name": name}
    return dict(document)


def https(port: int, method: str, path: str, body: Any = None, token: str = "") -> tuple[int, Any]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # a test's own CA; what is checked is the answer
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=scaled(30))
    try:
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        conn.request(method, path, json.dumps(body) if body is not None else None, headers)
        reply = conn.getresponse()
        data = reply.read()
        return reply.status, json.loads(data) if data.startswith(b"{") else data.decode()
    finally:
        conn.close()


def review(uid: str, obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "jobset.x-k8s.io", "version": "v1alpha2", "kind": "JobSet"},
            "resource": {"group": "jobset.x-k8s.io", "version": "v1alpha2", "resource": "jobsets"},
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "test"},
            "object": obj,
        },
    }


def test_in_a_cluster_the_controller_and_the_agent_import_only_modules_with_bytecode(
    native: Image,
    files: Mounted,
    control_plane: ControlPlane,
    service_account: Path,
    tmp_path: Path,
) -> None:
    """The measured list of modules that get bytecode (hack/image/cluster-modules.txt) covers
    what `run` imports from start to shutdown (readiness, a JobSet reconciled into Jobs, both
    JobSet webhooks, a scrape of the secured metrics) and what the agent imports."""
    controller = InCluster(
        native, control_plane, service_account, tmp_path, env={"PYTHONPROFILEIMPORTTIME": "1"}
    )
    namespace = controller.namespace
    token = (service_account / "token").read_text()
    try:
        controller.wait_ready(within=90)
        status, body = control_plane.request(
            "POST", JOBSETS.format(namespace=namespace), jobset("measured")
        )
        assert status == 201, body
        poll(
            lambda: control_plane.request(
                "GET",
                f"/apis/batch/v1/namespaces/{namespace}/jobs"
                "?labelSelector=jobset.sigs.k8s.io/jobset-name=measured",
            )[1].get("items"),
            "the JobSet's Jobs",
            60,
        )
        for path in (
            "/mutate-jobset-x-k8s-io-v1alpha2-jobset",
            "/validate-jobset-x-k8s-io-v1alpha2-jobset",
        ):
            status, answer = https(
                controller.webhook, "POST", path, review("u", jobset("w"), namespace)
            )
            assert status == 200, answer
            assert answer["response"]["allowed"], answer
        status, text = https(controller.metrics, "GET", "/metrics", token=token)
        assert status == 200, text
        assert 'jobset_build_info{arch="' in text
    finally:
        code = controller.stop()
    assert code == 0, controller.tail()
    imported = imported_modules(controller.log.read_text())
    imported |= _agent_imports(native, control_plane, service_account, namespace, tmp_path)
    missing = files.without_bytecode(imported)
    assert missing == [], (
        f"{len(missing)} modules imported in a cluster have no bytecode in the image; add them to "
        f"{MODULES_FILE}:\n" + "\n".join(missing)
    )


def _agent_imports(
    native: Image,
    control_plane: ControlPlane,
    service_account: Path,
    namespace: str,
    tmp_path: Path,
) -> set[str]:
    """Run the in-place restart agent in the image for a pod of a JobSet until it has written
    its attempt annotation; the modules it imported."""
    manifest = jobset("agent")
    manifest["spec"]["failurePolicy"] = {"maxRestarts": 3, "restartStrategy": "InPlaceRestart"}
    for replicated in manifest["spec"]["replicatedJobs"]:
        job = replicated["template"]["spec"]
        job.update({"backoffLimit": 2**31 - 1, "podReplacementPolicy": "Failed"})
        job["completions"] = job["parallelism"] = job.get("parallelism", 1)
    # The agent watches its JobSet and writes on its pod; the gate is off in this controller-
    # less namespace, and no controller runs now: the agent does its part alone.
    status, body = control_plane.request("POST", JOBSETS.format(namespace=namespace), manifest)
    assert status == 201, body
    pod = {
        "metadata": {"name": "agent-pod"},
        "spec": {
            # No controller-manager here makes a `default` ServiceAccount: name the one there is.
            "serviceAccountName": "controller",
            "automountServiceAccountToken": False,
            "containers": [{"name": "c", "image": "x"}],
        },
    }
    status, body = control_plane.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
    assert status == 201, body
    log = tmp_path / "agent.log"
    name = f"jobset-agent-{uuid.uuid4().hex[:8]}"
    process = native.popen(
        "in-place-restart-agent",
        name=name,
        mounts={service_account: "/var/run/secrets/kubernetes.io/serviceaccount"},
        env={
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": control_plane.server.rsplit(":", 1)[1],
            "JOBSET_NAME": "agent",
            "POD_NAME": "agent-pod",
            "STARTUP_PROBE_PORT": str(free_port()),
            "PYTHONPROFILEIMPORTTIME": "1",
        },
        stderr=log,
    )
    try:
        poll(
            lambda: (
                (
                    control_plane.request("GET", f"/api/v1/namespaces/{namespace}/pods/agent-pod")[
                        1
                    ]
                    .get("metadata", {})
                    .get("annotations", {})
                    .get("jobset.sigs.k8s.io/in-place-restart-attempt")
                )
                or process.poll() is not None
            ),
            "the agent's attempt annotation",
            60,
        )
        assert process.poll() is None, log.read_text()[-3000:]
    finally:
        stop(name, process)
    return imported_modules(log.read_text())


# ------------------------------------------------------------------------------ the tools
@pytest.fixture
def examples(tmp_path: Path) -> Path:
    directory = readable_dir(tmp_path / "examples")
    share(Path(shutil.copy(EXAMPLES / "depends-on.yaml", directory)))
    return directory


def test_validate_and_plan_work_in_the_image(native: Image, examples: Path) -> None:
    mounts = {examples: "/examples"}
    result = native.run("jobset-controller", "validate", "/examples/depends-on.yaml", mounts=mounts)
    assert result.returncode == 0, result.stderr
    result = native.run(
        "jobset-controller", "plan", "-o", "yaml", "/examples/depends-on.yaml", mounts=mounts
    )
    assert result.returncode == 0, result.stderr
    assert "kind: Job" in result.stdout


def exec_kubeconfig(control_plane: ControlPlane, directory: Path, token: str) -> Path:
    """A kubeconfig whose user is an exec credential plugin (a script the image's Python runs:
    there is no shell) handing out `token`: the path through the `kubernetes` package."""
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": token},
    }
    plugin = directory / "plugin.py"
    plugin.write_text(f"import sys\nsys.stdout.write({json.dumps(json.dumps(credential))})\n")
    share(plugin)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": control_plane.server,
                    "certificate-authority": "/kube/ca.crt",
                },
            }
        ],
        "users": [
            {
                "name": "u",
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "command": "/opt/jobset-controller/bin/python",
                        "args": ["/kube/plugin.py"],
                        "interactiveMode": "Never",
                    }
                },
            }
        ],
        "contexts": [
            {"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "default"}}
        ],
        "current-context": "c",
    }
    path = directory / "config"
    path.write_text(yaml.safe_dump(config))
    (directory / "ca.crt").write_bytes(control_plane.ca.cert_pem)
    share(path), share(directory / "ca.crt")
    return path


def test_status_and_release_followers_work_in_the_image_through_an_exec_credential_plugin(
    native: Image, control_plane: ControlPlane, service_account: Path, tmp_path: Path
) -> None:
    namespace = (service_account / "namespace").read_text()
    status, body = control_plane.request(
        "POST", JOBSETS.format(namespace=namespace), jobset("shown")
    )
    assert status in (201, 409), body
    directory = readable_dir(tmp_path / "kube")
    exec_kubeconfig(control_plane, directory, (service_account / "token").read_text())
    mounts = {directory: "/kube"}
    shown = native.run(
        "jobset-controller",
        "status",
        "shown",
        "-n",
        namespace,
        "--kubeconfig",
        "/kube/config",
        mounts=mounts,
    )
    assert shown.returncode == 0, shown.stderr
    assert "shown" in shown.stdout
    released = native.run(
        "jobset-controller",
        "release-followers",
        "-A",
        "--kubeconfig",
        "/kube/config",
        mounts=mounts,
    )
    assert released.returncode == 0, released.stderr


def test_kubectl_jobset_is_the_status_command(native: Image) -> None:
    result = native.run("kubectl-jobset", "status", "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: kubectl jobset status")


def test_a_file_the_image_cannot_read_is_reported_not_a_traceback(native: Image) -> None:
    result = native.run("jobset-controller", "validate", "/missing.yaml")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
