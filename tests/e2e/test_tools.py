"""`plan` and `status` (and `kubectl jobset status`) against the full local cluster.

`plan` must predict what the running controller then creates; `status` must tell a running, a
failed, a suspended (by Kueue), a waiting (dependsOn) and an unschedulable JobSet apart, through
the real CLI, kubeconfig and API server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobset_controller_dev.envtest.fullcluster import FullCluster, summarize
from jobset_controller_dev.envtest.kwok_stages import (
    FAIL_EXIT_CODE_ANNOTATION,
    RUN_FOREVER_ANNOTATION,
)
from jobset_controller_dev.envtest.manifests import container, jobset_manifest, replicated_job
from jobset_controller_dev.envtest.polling import poll, scaled

pytestmark = pytest.mark.usefixtures("jobset_controller")

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
CLI = [sys.executable, "-m", "jobset_controller"]


def rjob(name: str, *, replicas: int = 1, pods: int = 1, **extra: Any) -> dict[str, Any]:
    annotations = extra.pop("annotations", {RUN_FOREVER_ANNOTATION: "true"})
    fields: dict[str, Any] = {}
    if "cpu" in extra:
        fields["resources"] = {"requests": {"cpu": extra.pop("cpu")}}
    return replicated_job(
        name,
        replicas,
        pods=pods,
        backoff_limit=0,
        annotations=annotations,
        containers=[container(**fields)],
        **extra,
    )


def jobset(
    name: str, *rjobs: dict[str, Any], labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    return jobset_manifest(name, replicated_jobs=rjobs, labels=labels or None, **spec)


def jobsets_path(namespace: str, name: str = "") -> str:
    base = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"
    return f"{base}/{name}" if name else base


def create(cluster: FullCluster, namespace: str, body: dict[str, Any]) -> None:
    status, reply = cluster.request("POST", jobsets_path(namespace), body)
    assert status == 201, reply


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=scaled(60), env=env)


def pods(cluster: FullCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    return cluster.list_items(
        f"/api/v1/namespaces/{namespace}/pods", label_selector=f"{JOBSET_NAME}={name}"
    )


def objects_in(cluster: FullCluster, namespace: str) -> str:
    """The namespace's JobSets, Jobs and pods, one line each (for a failed wait)."""
    return "\n".join(
        f"{kind}: {summarize({'items': cluster.list_items(path)})}"
        for kind, path in (
            ("JobSets", jobsets_path(namespace)),
            ("Jobs", f"/apis/batch/v1/namespaces/{namespace}/jobs"),
            ("pods", f"/api/v1/namespaces/{namespace}/pods"),
        )
    )


def test_plan_predicts_the_jobs_and_service_the_controller_creates(
    full_cluster: FullCluster, namespace: str, tmp_path: Path
) -> None:
    body = jobset(
        "planned",
        rjob("leader"),
        rjob("workers", replicas=2, pods=2, dependsOn=[{"name": "leader", "status": "Ready"}]),
        network={"subdomain": "peers"},
        coordinator={"replicatedJob": "leader", "jobIndex": 0, "podIndex": 0},
    )
    manifest = tmp_path / "planned.yaml"
    manifest.write_text(yaml.safe_dump(body))
    planned = run(*CLI, "plan", "-o", "json", "-n", namespace, str(manifest))
    assert planned.returncode == 0, planned.stderr
    items = json.loads(planned.stdout)["items"]
    text = run(*CLI, "plan", "-n", namespace, str(manifest)).stdout
    assert "pass 2, once the Jobs created so far are running with all pods ready:" in text
    assert "workers: dependsOn leader Ready" in text
    assert "planned-workers-1-0.peers planned-workers-1-1.peers" in text

    create(full_cluster, namespace, body)
    jobs_path = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    poll(
        lambda: len(full_cluster.list_items(jobs_path)) == 3,
        "3 Jobs",
        60,
        state=lambda: objects_in(full_cluster, namespace),
        interval=0.3,
    )
    real = {job["metadata"]["name"]: job for job in full_cluster.list_items(jobs_path)}
    expected = {i["metadata"]["name"]: i for i in items if i["kind"] == "Job"}
    assert set(real) == set(expected)

    def jobset_keys(labels: dict[str, str]) -> dict[str, str]:
        return {
            k: v
            for k, v in labels.items()
            if k.startswith("jobset.sigs.k8s.io/") and k != "jobset.sigs.k8s.io/jobset-uid"
        }

    for name, job in real.items():
        want = expected[name]
        assert jobset_keys(job["metadata"]["labels"]) == jobset_keys(want["metadata"]["labels"])
        real_pod_spec = job["spec"]["template"]["spec"]
        assert real_pod_spec["subdomain"] == want["spec"]["template"]["spec"]["subdomain"]
        assert job["spec"]["parallelism"] == want["spec"]["parallelism"]
    services = [i for i in items if i["kind"] == "Service"]
    status, _ = full_cluster.request("GET", f"/api/v1/namespaces/{namespace}/services/peers")
    assert [s["metadata"]["name"] for s in services] == ["peers"]
    assert status == 200


def test_status_tells_running_failed_suspended_waiting_and_unschedulable_apart(
    full_cluster: FullCluster, namespace: str, tmp_path: Path
) -> None:
    create(full_cluster, namespace, jobset("running", rjob("workers", replicas=2)))
    create(
        full_cluster,
        namespace,
        jobset("failing", rjob("workers", annotations={FAIL_EXIT_CODE_ANNOTATION: "3"})),
    )
    create(
        full_cluster,
        namespace,
        jobset(
            "queued",
            rjob("workers"),
            suspend=True,
            labels={"kueue.x-k8s.io/queue-name": "team-queue"},
        ),
    )
    create(
        full_cluster,
        namespace,
        jobset(
            "waiting",
            rjob("init"),
            rjob("trainer", dependsOn=[{"name": "init", "status": "Complete"}]),
        ),
    )
    create(full_cluster, namespace, jobset("toobig", rjob("workers", cpu="1000")))

    def running_ready() -> bool:
        found = pods(full_cluster, namespace, "running")
        return len(found) == 2 and all(
            any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p["status"].get("conditions", [])
            )
            for p in found
        )

    def jobs_ready() -> bool:
        # `status` shows each Job's status.ready, which the Job controller sets a moment after
        # the pods turn Ready.
        jobs = full_cluster.list_items(
            f"/apis/batch/v1/namespaces/{namespace}/jobs", label_selector=f"{JOBSET_NAME}=running"
        )
        return len(jobs) == 2 and all((j.get("status") or {}).get("ready") == 1 for j in jobs)

    def terminal(name: str) -> bool:
        _, body = full_cluster.request("GET", jobsets_path(namespace, name))
        return (body.get("status") or {}).get("terminalState") == "Failed"

    def failed_event(name: str) -> bool:
        # The recorder writes the FailedJobs Event after the status write that makes the JobSet
        # terminal, so a `status` run the moment terminalState is set can miss it.
        return any(
            e.get("reason") == "FailedJobs" and (e.get("regarding") or {}).get("name") == name
            for e in full_cluster.list_items(
                f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"
            )
        )

    def unschedulable() -> bool:
        found = pods(full_cluster, namespace, "toobig")
        return any(
            c.get("reason") == "Unschedulable"
            for p in found
            for c in p.get("status", {}).get("conditions", [])
        )

    def state() -> str:
        return objects_in(full_cluster, namespace)

    poll(running_ready, "running pods ready", 60, state=state, interval=0.3)
    poll(jobs_ready, "running Jobs count their pods ready", 60, state=state, interval=0.3)
    poll(lambda: terminal("failing"), "failing JobSet failed", 60, state=state, interval=0.3)
    poll(lambda: failed_event("failing"), "FailedJobs Event", 60, state=state, interval=0.3)
    poll(unschedulable, "toobig pod unschedulable", 60, state=state, interval=0.3)
    poll(
        lambda: len(pods(full_cluster, namespace, "waiting")) == 1,
        "waiting init pod",
        60,
        state=state,
        interval=0.3,
    )

    kubeconfig = str(full_cluster.kubeconfig)

    def status(name: str) -> str:
        result = run(*CLI, "status", name, "-n", namespace, "--kubeconfig", kubeconfig)
        assert result.returncode == 0, result.stderr
        return result.stdout

    out = status("running")
    assert out.startswith(f"JobSet {namespace}/running  Running  restarts 0")
    assert "Diagnosis" not in out
    assert "    Job running-workers-1  Running  attempt 0  active 1  ready 1" in out
    assert out.count("      Pod running-workers-") == 2
    assert "  Running  ready 1/1  restarts 0  node kwok-" in out

    out = status("failing")
    assert f"JobSet {namespace}/failing  Failed" in out
    assert "Diagnosis: failed: FailedJobs: jobset failed due to one or more job failures" in out
    assert "    Job failing-workers-0  Failed" in out
    assert "      Failed: BackoffLimitExceeded:" in out
    assert "Warning  FailedJobs  JobSet/failing:" in out

    out = status("queued")
    assert "Diagnosis: suspended by Kueue: waiting for admission in queue team-queue" in out
    assert "    Job queued-workers-0  Suspended" in out

    out = status("waiting")
    assert (
        "Diagnosis: replicatedJob trainer waits on dependsOn: init to be Complete (0/1 succeeded)"
        in out
    )
    assert "  replicatedJob trainer  replicas 1:" in out
    assert "    (no Jobs)" in out

    out = status("toobig")
    assert "Diagnosis: pod toobig-workers-0-0-" in out
    assert "cannot be scheduled: 0/8 nodes are available" in out

    # Every JobSet of the namespace, as `kubectl jobset status`: kubectl finds the plugin on PATH,
    # the namespace comes from the kubeconfig's context.
    config = yaml.safe_load(Path(kubeconfig).read_text())
    for context in config["contexts"]:
        context["context"]["namespace"] = namespace
    with_namespace = tmp_path / "kubeconfig"
    with_namespace.write_text(yaml.safe_dump(config))
    env = {
        **os.environ,
        "KUBECONFIG": f"{tmp_path / 'missing'}{os.pathsep}{with_namespace}",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    result = run(str(full_cluster.bin_dir / "kubectl"), "jobset", "status", env=env)
    assert result.returncode == 0, result.stderr
    for name in ("failing", "queued", "running", "toobig", "waiting"):
        assert f"JobSet {namespace}/{name}  " in result.stdout
    missing = run(str(full_cluster.bin_dir / "kubectl"), "jobset", "status", "nope", env=env)
    assert missing.returncode == 1
    assert 'jobsets "nope" not found' in missing.stderr


def test_status_watch_refreshes_until_interrupted(
    full_cluster: FullCluster, namespace: str
) -> None:
    create(full_cluster, namespace, jobset("watched", rjob("workers")))
    proc = subprocess.Popen(
        [*CLI, "status", "watched", "-n", namespace, "--kubeconfig", str(full_cluster.kubeconfig),
         "--watch", "--interval", "0.3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    # Read frames as they come (no fixed wait: start-up on a loaded machine eats into one); a
    # timer interrupts it anyway after a minute (scaled) so a silent watch fails, not hangs.
    header = f"JobSet {namespace}/watched"
    guard = threading.Timer(scaled(60), proc.send_signal, (signal.SIGINT,))
    guard.start()
    seen: list[str] = []
    assert proc.stdout is not None
    try:
        while sum(line.count(header) for line in seen) < 3:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
    finally:
        guard.cancel()
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=scaled(20))
    assert proc.returncode == 0, err
    output = "".join(seen) + rest
    assert output.count(header) >= 3, (
        f"{output.count(header)} frames (the guard stops the watch at {scaled(60):g} s):\n"
        f"{output[-2000:]}"
    )
