"""Every file in examples/ runs on the local cluster, and `make dev` works end to end."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.polling import scaled
from jobset_controller_dev.envtest.processes import processes_mentioning

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def _terminal(js: dict[str, Any]) -> str:
    return str((js.get("status") or {}).get("terminalState") or "")


@pytest.mark.usefixtures("jobset_controller")
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_to_completion(full_cluster: FullCluster, namespace: str, path: Path) -> None:
    manifest = yaml.safe_load(path.read_text())
    name = manifest["metadata"]["name"]
    spec = manifest["spec"]
    if spec.get("volumeClaimPolicies"):
        full_cluster.add_volumes(8, prefix=f"pv-{namespace}")
    full_cluster.kubectl("apply", "--server-side", "-n", namespace, "-f", str(path))
    jobset_path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/{name}"
    if spec.get("suspend"):
        full_cluster.wait_for(
            jobset_path,
            lambda js: any(
                c["type"] == "Suspended" and c["status"] == "True"
                for c in (js.get("status") or {}).get("conditions") or ()
            ),
            what="suspended example",
        )
        full_cluster.kubectl(
            "patch",
            "jobset",
            name,
            "-n",
            namespace,
            "--type=merge",
            "-p",
            '{"spec":{"suspend":false}}',
        )
    js = full_cluster.wait_for(jobset_path, _terminal, timeout=120, what=f"{name} finished")
    assert _terminal(js) == "Completed"


def test_dev_loop_runs_an_example_then_stays_up_until_ctrl_c(tmp_path: Path) -> None:
    log = tmp_path / "devloop.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jobset_controller_dev.devloop",
            "--example",
            str(ROOT / "examples" / "coordinator.yaml"),
        ],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + scaled(180)
        while "Ctrl-C stops everything." not in log.read_text():
            assert proc.poll() is None, f"the dev loop exited {proc.poll()}:\n{log.read_text()}"
            assert time.monotonic() < deadline, (
                f"the dev loop not up within {scaled(180):g} s; its log:\n{log.read_text()}"
            )
            time.sleep(0.5)  # poll interval of the wait for the log line
        output = log.read_text()
        assert "==> JobSet coordinator Completed" in output
        assert "export KUBECONFIG=" in output
        workdir = output.split("export KUBECONFIG=")[1].split()[0].rsplit("/", 1)[0]
        assert processes_mentioning(workdir), "the cluster should still be running"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=scaled(60)) == 0, log.read_text()
        deadline = time.monotonic() + scaled(15)
        while processes_mentioning(workdir) and time.monotonic() < deadline:
            time.sleep(0.2)  # poll interval of the wait for the exit
        assert processes_mentioning(workdir) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
