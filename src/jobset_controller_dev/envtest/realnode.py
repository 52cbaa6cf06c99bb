"""A real node: kubelet + containerd + kube-proxy + CoreDNS, and the full control plane, all inside
a private network + mount namespace that this harness creates (envtest/netns.py).

What it is for: the controller as users run it, from its own image, manifests and chart, in a
Pod on a node that runs containers: in-cluster ServiceAccount credentials, webhooks called
through a Service, the kubelet's probes, SIGTERM on rollout, pod hostnames in the cluster DNS.

Layout (one node, `jobset-node`, address 10.88.0.2 on a veth pair inside the namespace):
- the control plane (`FullCluster` without simulated nodes, plus the Deployment and ReplicaSet
  controllers) listens on 0.0.0.0 inside the namespace and advertises 10.88.0.2, so pods reach
  it through the `kubernetes` Service (kube-proxy's DNAT) while this process uses 127.0.0.1;
- containerd 2 (built with the binaries: CRI v1, runc, overlayfs) with a bridge CNI (`cni0`, pods
  in 10.244.0.0/24), its root and state in the work directory; images come from `podman save`
  archives (`ctr import`), the pod sandbox is `localhost/pause:local` (hack/image.sh builds both);
- the kubelet, with the settings these VMs need (cgroup v1 allowed, cgroupfs under a root of
  its own, no negative oom_score_adj, no image GC), authenticating as the admin;
- kube-proxy in iptables mode, inside the namespace;
- CoreDNS serving `cluster.local` from the API (headless Services' pod hostnames included) on
  10.88.0.2:53, which the kubelet gives pods as their nameserver.

Inside the mount namespace: tmpfs over the paths the kubelet, containerd and CNI hard-code
(/var/lib/kubelet, /var/lib/cni, /run/netns, /run/containerd, /var/log), and files bind-mounted
over the host-wide sysctls the kubelet would rewrite (vm.overcommit_memory, kernel.panic, ...)
holding the values it wants, so it leaves the host's alone.

`stop()` removes the pods' containers, stops every process, kills what containerd's shims left,
removes the node's cgroups and ends the namespace: nothing is left behind (`leftovers()` lists
what would be). Start and stop from the main thread; between the two, that thread is inside the
node's network namespace (`NetNamespace.entered`).

Needs root, unshare/nsenter, iptables, runc and the CNI plugins
(hack/node-packages.sh); `unavailable()` says in one line what is missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self, TextIO

import yaml

from jobset_controller_dev.envtest.binaries import NODE_COMPONENTS
from jobset_controller_dev.envtest.controlplane import ControlPlaneError
from jobset_controller_dev.envtest.fullcluster import DEFAULT_CONTROLLERS, FullCluster
from jobset_controller_dev.envtest.netns import NetNamespace
from jobset_controller_dev.envtest.polling import scaled
from jobset_controller_dev.envtest.processes import (
    ManagedProcess,
    free_port,
    processes_mentioning,
)

NODE_NAME = "jobset-node"
NODE_IP = "10.88.0.2"
_PEER_IP = "10.88.0.1"
POD_SUBNET = "10.244.0.0/24"
CLUSTER_CIDR = "10.244.0.0/16"
CLUSTER_DOMAIN = "cluster.local"
PAUSE_IMAGE = "localhost/pause:local"
CNI_BIN_DIR = Path("/usr/lib/cni")
NODE_CONTROLLERS = (*DEFAULT_CONTROLLERS, "deployment-controller", "replicaset-controller")
# The hierarchies of cgroup v1 the kubelet places pods in (a root of its own in each).
_CGROUP_V1 = (
    "cpu",
    "cpuacct",
    "cpuset",
    "memory",
    "pids",
    "hugetlb",
    "blkio",
    "devices",
    "freezer",
    "systemd",
)
# What the kubelet wants these host-wide sysctls to be: bind-mounted over them in the namespace.
_KUBELET_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}
_TMPFS = ("/var/lib/kubelet", "/var/lib/cni", "/run/netns", "/run/containerd", "/var/log")


def unavailable() -> str | None:
    """Why this machine cannot run a real node, in one line; None when it can."""
    if os.geteuid() != 0:
        return "the real-node tier needs root (namespaces, mounts, cgroups)"
    for tool in ("unshare", "nsenter", "iptables", "runc", "ip"):
        if shutil.which(tool) is None:
            return f"the real-node tier needs {tool} (hack/node-packages.sh installs it)"
    if not (CNI_BIN_DIR / "bridge").exists():
        return f"the real-node tier needs the CNI plugins in {CNI_BIN_DIR}"
    if not Path("/sys/fs/cgroup/memory").is_dir():
        return "the real-node tier needs the cgroup v1 memory hierarchy"
    return None


class _NodeCluster(FullCluster):
    """The full cluster's control plane, with the node's binaries found (or built) with it."""

    components = NODE_COMPONENTS


class RealNode:
    """The control plane and one real node in private namespaces (module docstring)."""

    def __init__(self, *, images: list[Path], workdir: Path | None = None) -> None:
        """`images`: docker archives to import into the node's containerd (pause included)."""
        self.netns = NetNamespace()
        self.cluster = _NodeCluster(
            nodes=[],
            controllers=NODE_CONTROLLERS,
            bind_address="0.0.0.0",
            advertise_address=NODE_IP,
            workdir=workdir,
        )
        self.workdir = self.cluster.workdir
        self._images = images
        self._cgroup_root = f"jobset-node-{uuid.uuid4().hex[:8]}"
        self._entered: contextlib.ExitStack | None = None
        self.containerd: ManagedProcess | None = None
        self.kubelet: ManagedProcess | None = None
        self.kube_proxy: ManagedProcess | None = None
        self.coredns: ManagedProcess | None = None
        self.containerd_socket = self.workdir / "containerd" / "containerd.sock"
        self.timings: dict[str, float] = {}

    # ----------------------------------------------------------------------- lifecycle
    def start(self) -> Self:
        began = time.monotonic()
        try:
            self.netns.start()
            self._entered = contextlib.ExitStack()
            self._entered.enter_context(self.netns.entered())
            self._network()
            self._mounts()
            self.cluster.start()
            self._mark("control plane ready", began)
            self._start_containerd()
            self._import_images()
            self._mark("containerd up, images imported", began)
            self._start_kubelet()
            self._start_kube_proxy()
            self._start_coredns()
            self._wait_node_ready()
            self._mark("node Ready", began)
            self._wait_kubernetes_service()
            self._mark("kube-proxy programmed the kubernetes Service", began)
        except BaseException:
            self.stop()
            raise
        return self

    def _mark(self, what: str, began: float) -> None:
        self.timings[what] = round(time.monotonic() - began, 1)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._remove_pods()
        for proc in (self.coredns, self.kube_proxy, self.kubelet, self.containerd):
            if proc is not None:
                proc.stop()
        self._kill_leftover_shims()
        with contextlib.suppress(Exception):
            self.cluster.stop()
        if self._entered is not None:
            self._entered.close()
            self._entered = None
        self.netns.stop()
        self._remove_cgroups()

    def leftovers(self) -> list[str]:
        """Processes, cgroups and this node's work directory that are still there (empty after
        `stop()`)."""
        found = [f"process {pid}" for pid in processes_mentioning(str(self.workdir))]
        found += [
            f"cgroup {path}"
            for name in _CGROUP_V1
            if (path := Path("/sys/fs/cgroup") / name / self._cgroup_root).exists()
        ]
        return found

    # ----------------------------------------------------------------------- namespace
    def _network(self) -> None:
        """lo up; the node's address on one end of a veth pair, both ends in the namespace."""
        run = self.netns.run
        run("ip", "link", "set", "lo", "up")
        run("ip", "link", "add", "node0", "type", "veth", "peer", "name", "node1")
        run("ip", "addr", "add", f"{NODE_IP}/24", "dev", "node0")
        run("ip", "addr", "add", f"{_PEER_IP}/24", "dev", "node1")
        run("ip", "link", "set", "node0", "up")
        run("ip", "link", "set", "node1", "up")
        # kube-proxy and the kubelet want a default route to pick the node's interface; packets
        # sent on it only ever reach the other end of the pair, inside the namespace.
        run("ip", "route", "add", "default", "via", _PEER_IP, "dev", "node0")

    def _mounts(self) -> None:
        run = self.netns.run
        for path in _TMPFS:
            run("mkdir", "-p", path)
            run("mount", "-t", "tmpfs", "tmpfs", path)
        values = self.workdir / "sysctl"
        values.mkdir(parents=True, exist_ok=True)
        for key, value in _KUBELET_SYSCTLS.items():
            target = Path("/proc/sys") / key
            if not target.exists():
                continue
            file = values / key.replace("/", ".")
            file.write_text(value + "\n")
            run("mount", "--bind", str(file), str(target))
        for name in _CGROUP_V1:
            hierarchy = Path("/sys/fs/cgroup") / name
            if hierarchy.is_dir():  # hugetlb, say, may be mounted under cgroup v2 instead
                (hierarchy / self._cgroup_root).mkdir(exist_ok=True)
        cpuset = Path("/sys/fs/cgroup/cpuset")
        for key in ("cpuset.cpus", "cpuset.mems"):  # a new cpuset holds no CPU until told
            (cpuset / self._cgroup_root / key).write_text((cpuset / key).read_text())

    # ----------------------------------------------------------------------- containerd
    def _start_containerd(self) -> None:
        root = self.workdir / "containerd"
        cni_conf = self.workdir / "cni" / "net.d"
        cni_conf.mkdir(parents=True, exist_ok=True)
        (cni_conf / "10-bridge.conflist").write_text(json.dumps(_cni_config(), indent=2))
        config = root / "config.toml"
        root.mkdir(parents=True, exist_ok=True)
        shim = self.cluster.bin_dir / "containerd-shim-runc-v2"
        config.write_text(_containerd_config(root, self.containerd_socket, cni_conf, shim))
        self.containerd = ManagedProcess(
            "containerd",
            self.netns.wrap([str(self.cluster.bin_dir / "containerd"), f"--config={config}"]),
            self.workdir / "containerd.log",
        )
        self.containerd.start()
        self.cluster._wait(self.containerd, self.containerd_socket.exists, "containerd socket")

    def ctr(self, *args: str) -> str:
        return self.netns.run(
            self._ctr, f"--address={self.containerd_socket}", "--namespace=k8s.io", *args
        )

    @property
    def _ctr(self) -> str:
        return str(self.cluster.bin_dir / "ctr")

    def _import_images(self) -> None:
        """Import each archive; an OCI archive's image is also named by its digest
        (`repository@sha256:...`), as a registry pull names it: a pod whose image is pinned by
        digest (the release's manifests.yaml) is then found on the node. `ctr images import`
        names it by tag only, and the CRI looks a tag-and-digest reference up by its digest."""
        for archive in self._images:
            self.ctr("images", "import", str(archive))
            pinned = _digest_name(archive)
            if pinned is not None:
                tagged, by_digest = pinned
                self.ctr("images", "tag", "--force", tagged, by_digest)

    # ----------------------------------------------------------------------- kubelet
    def _start_kubelet(self) -> None:
        home = self.workdir / "kubelet"
        home.mkdir(parents=True, exist_ok=True)
        config = home / "config.yaml"
        config.write_text(yaml.safe_dump(self._kubelet_config(), sort_keys=False))
        self.kubelet = ManagedProcess(
            "kubelet",
            self.netns.wrap(
                [
                    str(self.cluster.bin_dir / "kubelet"),
                    f"--config={config}",
                    f"--kubeconfig={self.cluster.kubeconfig}",
                    f"--root-dir={home / 'root'}",
                    f"--cert-dir={home / 'pki'}",
                    f"--hostname-override={NODE_NAME}",
                    f"--node-ip={NODE_IP}",
                    "--v=1",
                ]
            ),
            self.workdir / "kubelet.log",
        )
        self.kubelet.start()

    def _kubelet_config(self) -> dict[str, Any]:
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "failCgroupV1": False,  # 1.35+ refuses cgroup v1 by default; these VMs have it
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self._cgroup_root}",
            "oomScoreAdj": 0,  # root here lacks CAP_SYS_RESOURCE: no negative scores
            "imageGCHighThresholdPercent": 100,  # images cannot be pulled again: never collect
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%"},
            "resolvConf": "",
            "clusterDNS": [NODE_IP],
            "clusterDomain": CLUSTER_DOMAIN,
            "address": NODE_IP,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "authentication": {
                "anonymous": {"enabled": True},
                "webhook": {"enabled": False},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "serializeImagePulls": False,
            "syncFrequency": "5s",
            "fileCheckFrequency": "5s",
            "nodeStatusUpdateFrequency": "2s",
        }

    def _wait_node_ready(self) -> None:
        assert self.kubelet is not None

        def ready() -> bool:
            status, node = self.cluster.request("GET", f"/api/v1/nodes/{NODE_NAME}")
            if status != 200:
                return False
            conditions = (node.get("status") or {}).get("conditions") or []
            return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

        def conditions() -> str:
            status, node = self.cluster.request("GET", f"/api/v1/nodes/{NODE_NAME}")
            if status != 200:
                return f"GET node answers {status}"
            found = (node.get("status") or {}).get("conditions") or []
            return ", ".join(f"{c.get('type')}={c.get('status')} {c.get('reason')}" for c in found)

        self.cluster._wait(self.kubelet, ready, f"node {NODE_NAME} Ready", state=conditions)

    # ----------------------------------------------------------------------- kube-proxy, DNS
    def _start_kube_proxy(self) -> None:
        config = self.workdir / "kube-proxy.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
                    "kind": "KubeProxyConfiguration",
                    "clientConnection": {"kubeconfig": str(self.cluster.kubeconfig)},
                    "mode": "iptables",
                    "clusterCIDR": CLUSTER_CIDR,
                    "hostnameOverride": NODE_NAME,
                    "bindAddress": NODE_IP,
                    "healthzBindAddress": "",
                    "metricsBindAddress": f"127.0.0.1:{free_port()}",
                    # The conntrack sysctls are host-wide: leave them alone.
                    "conntrack": {
                        "maxPerCore": 0,
                        "min": 0,
                        "tcpEstablishedTimeout": "0s",
                        "tcpCloseWaitTimeout": "0s",
                    },
                },
                sort_keys=False,
            )
        )
        self.kube_proxy = ManagedProcess(
            "kube-proxy",
            self.netns.wrap([str(self.cluster.bin_dir / "kube-proxy"), f"--config={config}"]),
            self.workdir / "kube-proxy.log",
        )
        self.kube_proxy.start()

    def _wait_kubernetes_service(self) -> None:
        """kube-proxy has written the `kubernetes` Service's rules: pods can reach the API."""
        assert self.kube_proxy is not None

        def programmed() -> bool:
            rules = self.netns.run("iptables-save", "-t", "nat", check=False)
            return f"{NODE_IP}:" in rules and "default/kubernetes:https" in rules

        self.cluster._wait(self.kube_proxy, programmed, "kube-proxy rules for the API")

    def _start_coredns(self) -> None:
        corefile = self.workdir / "Corefile"
        corefile.write_text(
            f"{CLUSTER_DOMAIN}:53 {{\n"
            f"    bind {NODE_IP}\n"
            f"    kubernetes {CLUSTER_DOMAIN} {{\n"
            f"        kubeconfig {self.cluster.kubeconfig} envtest\n"
            "        pods insecure\n"
            "    }\n"
            "    errors\n"
            "}\n"
        )
        self.coredns = ManagedProcess(
            "coredns",
            self.netns.wrap([str(self.cluster.bin_dir / "coredns"), "-conf", str(corefile)]),
            self.workdir / "coredns.log",
        )
        self.coredns.start()

    # ----------------------------------------------------------------------- teardown
    def _remove_pods(self) -> None:
        """Stop and remove every pod sandbox through the CRI, while containerd still runs."""
        if self.containerd is None or not self.containerd.running():
            return
        tasks = self.ctr("tasks", "list", "--quiet").split()
        for task in tasks:
            self.netns.run(
                self._ctr,
                f"--address={self.containerd_socket}",
                "--namespace=k8s.io",
                "tasks",
                "kill",
                "--signal=SIGKILL",
                task,
                check=False,
            )

    def _kill_leftover_shims(self) -> None:
        for pid in processes_mentioning(str(self.containerd_socket)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        for pid in self._cgroup_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)

    def _cgroup_pids(self) -> list[int]:
        root = Path("/sys/fs/cgroup/pids") / self._cgroup_root
        pids: list[int] = []
        if root.exists():
            for procs in root.rglob("cgroup.procs"):
                with contextlib.suppress(OSError):
                    pids += [int(line) for line in procs.read_text().split()]
        return pids

    def _remove_cgroups(self) -> None:
        """Remove the node's cgroups, leaves first; a cgroup whose last task is still exiting
        is retried for 10 s (scaled)."""
        deadline = time.monotonic() + scaled(10)
        for name in _CGROUP_V1:
            root = Path("/sys/fs/cgroup") / name / self._cgroup_root
            if not root.exists():
                continue
            for directory in sorted(
                (p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
            ):
                _rmdir_until(directory, deadline)
            _rmdir_until(root, deadline)

    # ----------------------------------------------------------------------- access
    def open_log(self, namespace: str, pod: str, container: str) -> TextIO:
        """The container's current log file, open: it stays readable after the kubelet removes
        it (a deleted pod's last lines)."""
        base = Path(f"/proc/{self.netns.pid}/root/var/log/pods")
        (directory,) = base.glob(f"{namespace}_{pod}_*/{container}")
        newest = max(directory.glob("*.log"), key=lambda file: int(file.stem))
        return newest.open(errors="replace")

    def logs(self, namespace: str, pod: str, container: str) -> str:
        """A container's log as the kubelet wrote it (all restarts, oldest first)."""
        base = Path(f"/proc/{self.netns.pid}/root/var/log/pods")
        text = []
        for directory in base.glob(f"{namespace}_{pod}_*/{container}"):
            for file in sorted(directory.glob("*.log")):
                text.append(file.read_text(errors="replace"))
        return "".join(text)


def _rmdir_until(path: Path, deadline: float) -> None:
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                try:
                    tasks = (path / "cgroup.procs").read_text().split()
                except OSError:
                    tasks = []
                raise ControlPlaneError(
                    f"cgroup {path} is still in use (processes {tasks or 'none'})"
                ) from None
            time.sleep(0.1)


def _cni_config() -> dict[str, Any]:
    return {
        "cniVersion": "0.4.0",
        "name": "jobset-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def _containerd_config(root: Path, socket: Path, cni_conf: Path, shim: Path) -> str:
    """containerd 2.x's configuration, in the version 3 layout (the CRI plugin split into
    ``cri.v1.images`` and ``cri.v1.runtime``); 2.4 migrates it to its version 4 at start, which
    keeps the ttrpc socket next to the gRPC one. The runc shim is named by path: it is built
    with containerd into the binaries' cache, not installed on PATH."""
    images = 'plugins."io.containerd.cri.v1.images"'
    runtime = 'plugins."io.containerd.cri.v1.runtime"'
    return f"""version = 3
root = "{root / "root"}"
state = "{root / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "{socket}"

[{images}]
  snapshotter = "overlayfs"

[{images}.pinned_images]
  sandbox = "{PAUSE_IMAGE}"

[{runtime}]
  # No CAP_SYS_RESOURCE here: clamp negative oom_score_adj instead of failing the container.
  restrict_oom_score_adj = true
  enable_selinux = false
  disable_apparmor = true

[{runtime}.containerd]
  default_runtime_name = "runc"

[{runtime}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  runtime_path = "{shim}"

[{runtime}.containerd.runtimes.runc.options]
  SystemdCgroup = false

[{runtime}.cni]
  bin_dirs = ["{CNI_BIN_DIR}"]
  conf_dir = "{cni_conf}"
"""


@contextlib.contextmanager
def real_node(images: list[Path]) -> Iterator[RealNode]:
    node = RealNode(images=images).start()
    try:
        yield node
    finally:
        node.stop()


def _digest_name(archive: Path) -> tuple[str, str] | None:
    """(the OCI archive's image name, that name's repository `@` its digest); None for a
    docker archive or an image without a name."""
    try:
        with tarfile.open(archive) as tar:
            member = tar.extractfile("index.json")
            index = json.load(member) if member is not None else {}
    except (KeyError, tarfile.TarError, OSError, ValueError):
        return None
    manifests = index.get("manifests") or []
    if len(manifests) != 1:
        return None
    name = (manifests[0].get("annotations") or {}).get("org.opencontainers.image.ref.name")
    if not name or ":" not in name.rsplit("/", 1)[-1]:
        return None
    repository = name.rsplit(":", 1)[0]
    return name, f"{repository}@{manifests[0]['digest']}"
