#!/usr/bin/env bash
# Installs (once) the Debian packages the image build and the real-node tier use:
#   podman + mmdebstrap   build the controller image without any image registry;
#   runc                  the OCI runtime under the node's containerd (containerd itself, v2, is
#                         built by hack/k8s-binaries.sh: Debian 12's 1.6 lacks the CRI's
#                         RuntimeConfig, which kubelet 1.38 will require);
#   containernetworking-plugins   bridge, host-local, loopback and portmap CNI plugins;
#   iptables              what kube-proxy programs, inside the node's own network namespace;
#   gcc, libc6-dev        the static pause binary (hack/image/pause.c).
# Needs root (apt). Prints nothing but apt's errors; exits non-zero if a package cannot be had.
set -euo pipefail
packages=(podman mmdebstrap runc containernetworking-plugins iptables gcc libc6-dev)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "[node-packages] installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq "${missing[@]}" >&2
