#!/usr/bin/env bash
# The release's files, as upstream publishes them, built here with no registry and no network
# beyond the package mirrors hack/image.sh and hack/k8s-binaries.sh already use (and cached):
#
#   hack/release.sh --version v0.2.0 [--registry REGISTRY] [--arch amd64,arm64] [--out dist]
#   (make release VERSION=v0.2.0 [REGISTRY=ghcr.io/you])
#
# writes into --out (default dist/):
#   manifests.yaml                      the default install (manifests/default) with the image
#                                       pinned to REGISTRY/jobset-controller:VERSION@sha256:<the
#                                       manifest list's digest>; `kubectl apply --server-side -f`
#   manifests-certmanager.yaml          the same with cert-manager issuing the webhook
#                                       certificate (manifests/with-webhooks)
#   jobset-controller-X.Y.Z.tgz         the Helm chart (`helm package`), appVersion VERSION and its
#                                       default image REGISTRY/jobset-controller (tag: appVersion)
#   jobset-controller-VERSION.oci.tar   the images of every architecture and their manifest list,
#                                       an OCI archive named REGISTRY/jobset-controller:VERSION
#                                       (`skopeo copy --all oci-archive:... docker://...` pushes it)
#   jobset-controller-VERSION.cdx.json  a CycloneDX SBOM of the images' Python packages
#                                       (cyclonedx-py, read from each image's files; the same for
#                                       every architecture, which is checked)
#   SHA256SUMS                          the SHA-256 of every file above
# and prints the directory last. VERSION must be `v` + the package's version
# (src/jobset_controller/__init__.py): the version has one owner, and the image says it.
set -euo pipefail
cd "$(dirname "$0")/.."

version="" registry="localhost" arches="amd64,arm64" out="dist"
while [ $# -gt 0 ]; do
  case "$1" in
    --version) version="$2"; shift 2 ;;
    --registry) registry="$2"; shift 2 ;;
    --arch) arches="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "usage: hack/release.sh --version vX.Y.Z [--registry R] [--arch a,b] [--out DIR]" >&2
       exit 2 ;;
  esac
done
# The host's tools: PyPA's installer (its wheel goes into the image's build stage) and CycloneDX's
# SBOM generator, pyproject's `release` extra. The project's venv has them (`make test` installs
# the extra); on a machine without one, a venv of their own in the cache, made once from PyPI,
# so `make release` needs nothing installed by hand and, warm, no network at all.
venv="${JOBSET_VENV:-.venv}"
if ! { [ -x "$venv/bin/cyclonedx-py" ] && "$venv/bin/python" -c 'import installer' 2>/dev/null; }; then
  cache="${JOBSET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/jobset-controller}"
  requirements=$(python3 -c 'import sys, tomllib
print("\n".join(tomllib.load(sys.stdin.buffer)["project"]["optional-dependencies"]["release"]))' \
    <pyproject.toml)
  venv="$cache/release-tools-$(sha256sum <<<"$requirements" | cut -c1-12)"
  if [ ! -f "$venv/.complete" ]; then
    echo "[release] the release's tools into $venv: $(echo $requirements)" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $requirements >&2
    touch "$venv/.complete"
  fi
fi
export JOBSET_VENV="$venv"  # hack/image.sh's Python too
py="$venv/bin/python"
package_version=$(PYTHONPATH=src "$py" -c 'import jobset_controller; print(jobset_controller.__version__)')
if [ "$version" != "v$package_version" ]; then
  echo "hack/release.sh: --version must be v$package_version (src/jobset_controller/__init__.py)," \
    "got '${version}'" >&2
  exit 2
fi
say() { echo "[release] $*" >&2; }
started=$(date +%s)

image_out=$(hack/image.sh --arch "$arches")
oci=$(sed -n 2p <<<"$image_out")
list=$(tail -n 1 <<<"$image_out")
bin=$(hack/k8s-binaries.sh kubectl helm | tail -n 1)
repository="${registry%/}/jobset-controller"
reference="$repository:$version"

mkdir -p "$out"
out=$(cd "$out" && pwd)
# Unchanged inputs (the images, the version, the registry, the manifests, the chart, this
# script): the files already there are this release's.
stamp=$(
  { echo "$list $version $repository $arches"; cat hack/release.sh pyproject.toml;
    find manifests charts -type f -print0 | sort -z | xargs -0 sha256sum; } | sha256sum | cut -c1-16
)
if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$stamp" ] && [ -f "$out/SHA256SUMS" ] &&
  (cd "$out" && sha256sum --quiet -c SHA256SUMS); then
  say "unchanged: $out"
  echo "$out"
  exit 0
fi
rm -f "$out/.stamp"
rm -f "$out"/manifests*.yaml "$out"/jobset-controller-* "$out/SHA256SUMS"

# The image archive, named for the release; its index's digest is what the manifests pin.
PYTHONPATH=src "$py" -m jobset_controller_dev.image.oci rename "$oci" \
  "$out/jobset-controller-$version.oci.tar" "$reference"
digest=$(PYTHONPATH=src "$py" -m jobset_controller_dev.image.oci digest "$oci")

# The manifests: each install's kustomization with only the image set.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
render() {
  local install=$1 file=$2 dir="$work/$1"
  mkdir -p "$dir"
  cat >"$dir/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [$(realpath --relative-to="$dir" "manifests/$install")]
images: [{name: jobset-controller, newName: $repository, newTag: $version, digest: $digest}]
YAML
  {
    echo "# jobset-controller $version: kubectl apply --server-side -f $file"
    "$bin/kubectl" kustomize "$dir"
  } >"$out/$file"
}
render default manifests.yaml
render with-webhooks manifests-certmanager.yaml

# The chart, its default image the release's.
cp -rL charts/jobset-controller "$work/chart"
sed -i "s|^  repository: jobset-controller$|  repository: $repository|" "$work/chart/values.yaml"
grep -q "^  repository: $repository$" "$work/chart/values.yaml"
"$bin/helm" package "$work/chart" --version "${version#v}" --app-version "$version" \
  --destination "$out" >/dev/null

# The SBOM, from each image's own site-packages: the same packages for every architecture. Its
# root component is the project, with the version written out (pyproject reads it from the code).
sed 's/^dynamic = \["version"\]$/version = "'"$package_version"'"/' pyproject.toml >"$work/pyproject.toml"
grep -q "^version = \"$package_version\"$" "$work/pyproject.toml"
for arch in ${arches//,/ }; do
  image="$list-$arch"
  mounted=$(. hack/podman-env.sh && podman image mount "$image")
  site=$(ls -d "$mounted"/opt/jobset-controller/lib/python3.*/site-packages)
  "$py" -m venv --without-pip "$work/sbom-$arch"
  host_site=$(ls -d "$work/sbom-$arch"/lib/python3.*/site-packages)
  rmdir "$host_site" && ln -s "$site" "$host_site"
  SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s) \
    "$(dirname "$py")/cyclonedx-py" environment --pyproject "$work/pyproject.toml" --output-reproducible \
    --of JSON -o "$work/sbom-$arch.cdx.json" "$work/sbom-$arch" >&2
  (. hack/podman-env.sh && podman image unmount "$image" >/dev/null)
  if [ -f "$out/jobset-controller-$version.cdx.json" ]; then
    cmp -s "$work/sbom-$arch.cdx.json" "$out/jobset-controller-$version.cdx.json" ||
      { echo "hack/release.sh: the $arch image's Python packages differ from the others'" >&2; exit 1; }
  else
    cp "$work/sbom-$arch.cdx.json" "$out/jobset-controller-$version.cdx.json"
  fi
done

(cd "$out" && sha256sum manifests*.yaml jobset-controller-* >SHA256SUMS)
echo "$stamp" >"$out/.stamp"
say "$reference@$digest: $(ls "$out" | tr '\n' ' ')in $(($(date +%s) - started)) s"
echo "$out"
