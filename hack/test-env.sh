# Sourced by hack/test.sh and hack/flaky.sh: what the tests need, made or reused, as exports.
#
#   test_venv    a virtualenv in $JOBSET_VENV (default .venv) with the project and its test
#                extras, made again only when pyproject.toml changed (pip's cache keeps it fast);
#   test_tools   the Kubernetes binaries, Kueue, Kubeflow Trainer and upstream's JobSet
#                controller, built once from their Go modules and cached outside the repo
#                (hack/k8s-binaries.sh, hack/kueue.sh, hack/trainer.sh, hack/upstream-jobset.sh),
#                the controller's images for amd64 and arm64 with podman and the emulator that
#                runs the one this machine cannot (hack/image.sh, hack/qemu.sh), all at once;
#                then the release's files made from those images (hack/release.sh) and
#                Prometheus (hack/prometheus.sh); exports JOBSET_K8S_BIN, JOBSET_KUEUE_BIN,
#                JOBSET_TRAINER_BIN, JOBSET_UPSTREAM_BIN, JOBSET_IMAGE (the images' manifest list;
#                `<it>-<arch>` is one architecture's image), JOBSET_QEMU_BIN, JOBSET_RELEASE_DIR,
#                JOBSET_IMAGE_ARCHIVES (the pause image's archive, then the release's),
#                JOBSET_PROMETHEUS_BIN;
#   test_tools_start, test_tools_wait
#                the same in the background while other steps run (hack/test.sh).
# The caller has `set -euo pipefail` and runs from the repository's root.

venv="${JOBSET_VENV:-.venv}"
python="${PYTHON:-python3}"
# Each step says when it starts, counted from the first: where a run's time went, read off its log.
steps_started=${steps_started:-$(date +%s)}
step() { printf '\n==> %s (at %ss)\n' "$*" "$(( $(date +%s) - steps_started ))"; }

test_venv() {
  step "python environment ($venv)"
  if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
  fi
  local stamp
  stamp="$venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)"
  if [ ! -f "$stamp" ]; then
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet -e '.[test]'
    touch "$stamp"
  fi
}

test_tools() {  # [tool ...]: only these (hack/tools_needed.py's names); none named: all of them
  local all=(image k8s kueue trainer upstream prometheus)
  local wanted=("$@")
  [ "${#wanted[@]}" -gt 0 ] || wanted=("${all[@]}")
  want() { local t; for t in "${wanted[@]}"; do [ "$t" = "$1" ] && return 0; done; return 1; }
  step "tools: ${wanted[*]}"
  # Each builds (once) or finds its cache, all at the same time: a cold build of each waits on
  # module downloads and single-threaded links as much as on compiling, so one after the other
  # left the cores idle for minutes. Each one's progress goes to stderr with its own prefix; the
  # last line of its stdout names what it made.
  #   the images the `image` tests run, one per release architecture (Dockerfile, podman,
  #   Debian's packages: no registry), then the emulator for the other architecture;
  #   the Kubernetes binaries, all components (e2e needs the full cluster, node the kubelet;
  #   `k8s-helm`: helm alone, for the unit tests that render the chart);
  #   Kueue's manager for the `kueue` tests, Trainer v2.0.0 for the `trainer` tests, upstream's
  #   controller v0.12.0 with its manifests and chart (differential, swap, chart swap), built
  #   from the Go module proxy; then Prometheus and promtool from Debian's package, unpacked.
  local tool out pids=() names=()
  declare -A outs=()
  for tool in image k8s kueue trainer upstream; do
    if ! want "$tool" && ! { [ "$tool" = k8s ] && want k8s-helm; }; then
      continue
    fi
    out=$(mktemp)
    case "$tool" in
      image) { hack/image.sh --arch amd64,arm64 && hack/qemu.sh; } >"$out" & ;;
      k8s) if want k8s; then hack/k8s-binaries.sh >"$out" & else hack/k8s-binaries.sh helm >"$out" & fi ;;
      kueue) hack/kueue.sh >"$out" & ;;
      trainer) hack/trainer.sh >"$out" & ;;
      upstream) hack/upstream-jobset.sh >"$out" & ;;
    esac
    pids+=($!)
    names+=("$tool")
    outs[$tool]=$out
  done
  local i
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
  done
  if [ -n "${outs[image]:-}" ]; then
    # The image line's output: ..., the pause archive, the OCI archive, the manifest list, qemu.
    JOBSET_QEMU_BIN=$(tail -n 1 "${outs[image]}")
    JOBSET_IMAGE=$(tail -n 2 "${outs[image]}" | head -n 1)
    local pause_archive
    pause_archive=$(tail -n 4 "${outs[image]}" | head -n 1)
  fi
  [ -z "${outs[k8s]:-}" ] || JOBSET_K8S_BIN=$(tail -n 1 "${outs[k8s]}")
  [ -z "${outs[kueue]:-}" ] || JOBSET_KUEUE_BIN=$(tail -n 1 "${outs[kueue]}")
  [ -z "${outs[trainer]:-}" ] || JOBSET_TRAINER_BIN=$(tail -n 1 "${outs[trainer]}")
  [ -z "${outs[upstream]:-}" ] || JOBSET_UPSTREAM_BIN=$(tail -n 1 "${outs[upstream]}")
  [ "${#outs[@]}" -eq 0 ] || rm -f "${outs[@]}"
  if want image; then
    # What a user installs (manifests.yaml, the packaged chart, the images' OCI archive), made
    # from the images above with the kubectl and helm just built: the node tier installs from
    # them. Unchanged images and inputs: it finds its files and returns in seconds.
    local version
    version=v$("$venv/bin/python" -c 'import jobset_controller; print(jobset_controller.__version__)')
    JOBSET_RELEASE_DIR=$(hack/release.sh --version "$version" \
      --out "${JOBSET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/jobset-controller}/release" |
      tail -n 1)
    JOBSET_IMAGE_ARCHIVES="$pause_archive:$JOBSET_RELEASE_DIR/jobset-controller-$version.oci.tar"
  fi
  if want prometheus; then
    # After the others: it runs apt-get, as the image's hack/node-packages.sh and hack/qemu.sh
    # may, and two apt-gets at once meet apt's locks.
    JOBSET_PROMETHEUS_BIN=$(hack/prometheus.sh | tail -n 1)
  fi
  for i in "${tool_exports[@]}"; do
    if [ -n "${!i:-}" ]; then
      export "${i?}"
      [ "$i" = JOBSET_IMAGE_ARCHIVES ] || echo "using $i=${!i}"
    fi
  done

  # Every test talks to 127.0.0.1 only: make sure no proxy from the environment ever sees it.
  export NO_PROXY="127.0.0.1,localhost,::1${NO_PROXY:+,$NO_PROXY}"
  export no_proxy="$NO_PROXY"
}

# What test_tools exports, for test_tools_start to hand over.
tool_exports=(JOBSET_IMAGE JOBSET_IMAGE_ARCHIVES JOBSET_QEMU_BIN JOBSET_RELEASE_DIR JOBSET_K8S_BIN
  JOBSET_KUEUE_BIN JOBSET_TRAINER_BIN JOBSET_UPSTREAM_BIN JOBSET_PROMETHEUS_BIN)

# test_tools in the background, at the lowest CPU priority, its output in build/tools.log; then
# test_tools_wait. Why: a cold build of the tools takes about 20 minutes of both cores, and lint,
# types and the other Pythons' unit tiers need none of them. Run beside it, those fill the minutes
# the builds leave a core idle (downloads, single-threaded links) instead of adding their own
# minutes after it. The build runs in a session of its own so that leaving early (a failed lint,
# Ctrl-C) stops it, and not only the shell that started it.
test_tools_start() {
  mkdir -p build
  rm -f build/tools.env
  export steps_started
  step "tools, in the background (build/tools.log): the images, Kubernetes, Kueue, Trainer, upstream's controller, Prometheus"
  setsid -w bash -c '
    set -euo pipefail
    renice -n 19 -p $$ >/dev/null 2>&1 || true
    # A new session is a scheduling group of its own where the kernel groups by session
    # (sched_autogroup), and groups share the CPU equally whatever the nice values of their processes:
    # the group itself takes the nice value, or the first steps ran 3x slower beside the build.
    echo 19 >/proc/self/autogroup 2>/dev/null || true
    . hack/test-env.sh
    test_tools
    for i in "${tool_exports[@]}" NO_PROXY no_proxy; do
      [ -z "${!i:-}" ] || printf "export %s=%q\n" "$i" "${!i}"
    done \
      >build/tools.env.tmp
    mv build/tools.env.tmp build/tools.env
  ' >build/tools.log 2>&1 &
  tools_pid=$!
  trap test_tools_stop EXIT
}

test_tools_stop() {  # the EXIT trap while the tools build, and a failed build: stop the session
  # The whole process group, even when its first process has ended: after a failure in one
  # build, the others may still run (Linux gives no group's id to another while it has members).
  if [ -n "${tools_pid:-}" ] && kill -TERM -- "-$tools_pid" 2>/dev/null; then
    echo "stopped what was left of the tools' build (build/tools.log)" >&2
  fi
}

test_tools_wait() {
  # The log so far, then as it grows until the build ends: a cold build's progress shows.
  # `tail --pid` only while the build is still our running job: once it has ended, its process
  # id may already belong to another process, which tail would wait for.
  step "tools: the background build's log (build/tools.log), until it ends"
  if jobs -rp | grep -qx "$tools_pid"; then
    tail -n +1 -f --pid="$tools_pid" build/tools.log
  else
    cat build/tools.log
  fi
  local status=0
  wait "$tools_pid" || status=$?
  [ "$status" -eq 0 ] || test_tools_stop
  tools_pid=
  trap - EXIT
  if [ "$status" -ne 0 ] || [ ! -f build/tools.env ]; then
    echo "the tools' build failed (exit $status): its log is above and in build/tools.log" >&2
    exit 1
  fi
  . build/tools.env
}
