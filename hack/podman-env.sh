# Sourced by the image and node scripts: podman with the project's own configuration and storage
# (under the cache directory), so nothing system-wide is written or read.
cache="${JOBSET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/jobset-controller}"
podman_root="$cache/podman"
mkdir -p "$podman_root"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
nofile=$(ulimit -Hn); [ "$nofile" = unlimited ] && nofile=1048576
sed "s/@NOFILE@/$nofile/g" "$here/image/containers.conf.in" >"$podman_root/containers.conf"
sed "s|@ROOT@|$podman_root|g" "$here/image/storage.conf.in" >"$podman_root/storage.conf"
export CONTAINERS_CONF="$podman_root/containers.conf"
export CONTAINERS_STORAGE_CONF="$podman_root/storage.conf"
export CONTAINERS_REGISTRIES_CONF="$podman_root/registries.conf"
[ -f "$CONTAINERS_REGISTRIES_CONF" ] || printf 'unqualified-search-registries = []\n' >"$CONTAINERS_REGISTRIES_CONF"
